"""SASL PLAIN (RFC 4616): one token, ``authzid NUL authcid NUL passwd``, UTF-8."""

from __future__ import annotations

from .errors import AuthenticationError

# RFC 4616 caps each field at 255 octets; Kafka does not, but a bound keeps a hostile token cheap.
_MAX_FIELD = 1024


def plain_token(username: str, password: str, authzid: str = "") -> bytes:
    """The client's single PLAIN message."""
    for name, value in (("username", username), ("password", password), ("authzid", authzid)):
        if "\x00" in value:
            raise ValueError(f"PLAIN {name} must not contain NUL")
    if not username:
        raise ValueError("PLAIN username must not be empty")
    return f"{authzid}\x00{username}\x00{password}".encode()


def parse_plain_token(token: bytes) -> tuple[str, str, str]:
    """Split a PLAIN token into (authzid, username, password); raise AuthenticationError if malformed.

    The error messages never include the token (it holds the password).
    """
    parts = bytes(token).split(b"\x00")
    if len(parts) != 3:
        raise AuthenticationError(f"malformed PLAIN token: expected 3 NUL-separated fields, got {len(parts)}")
    if any(len(part) > _MAX_FIELD for part in parts):
        raise AuthenticationError("malformed PLAIN token: field too long")
    try:
        authzid, username, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise AuthenticationError("malformed PLAIN token: not UTF-8") from None
    if not username:
        raise AuthenticationError("malformed PLAIN token: empty username")
    if not password:
        raise AuthenticationError("malformed PLAIN token: empty password")
    return authzid, username, password
