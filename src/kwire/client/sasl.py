"""The client's side of a SASL login over a ``BrokerConnection``, right after ApiVersions.

Kafka frames the exchange two ways, and the broker's ApiVersions says which it takes:

* SaslHandshake v1, then each token in a SaslAuthenticate request (KIP-152; v0-v2, the highest
  the broker speaks).  A failure comes back as an error code with the broker's message.
* SaslHandshake v0 (brokers before 1.0, without SaslAuthenticate): the tokens follow as bare
  size-prefixed bytes with no request header.  A failure is the broker closing the connection,
  so that is what a failure looks like here too.

Mechanisms: PLAIN (one token; the broker answers with an empty one) and SCRAM-SHA-256/512
(client-first, server-first, client-final, server-final; the server-final's signature is checked,
so a broker that does not hold the credential cannot pretend to).  The state machines are
``kwire.security``'s; this module only moves their bytes.

Every failure is an ``AuthenticationError`` (not retriable): "authentication failed for user
alice with SCRAM-SHA-512: <the broker's reason> (broker host:port)".  The password never appears.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import ErrorCode, error_name
from kwire.security.errors import AuthenticationError as _SecurityAuthenticationError
from kwire.security.plain import plain_token
from kwire.security.scram import ScramClient

from .connection import BrokerConnection
from .errors import AuthenticationError, BrokerConnectionError, SecurityProtocolMismatchError
from .security import SaslLogin

__all__ = ["authenticate"]

logger = logging.getLogger("kwire.client")


Step = Callable[[bytes], Awaitable[bytes]]


async def authenticate(conn: BrokerConnection, login: SaslLogin, *, framed: bool | None = None) -> None:
    """Log in on ``conn`` (version-negotiated, nothing else sent yet) or raise ``AuthenticationError``.

    ``framed``: None picks SaslAuthenticate when the broker has it; False forces SaslHandshake v0's
    bare tokens (to test the old framing against a broker that has both).
    """
    where = f"{conn.host}:{conn.port}"
    failed = f"authentication failed for user {login.username} with {login.mechanism}"
    if not conn.supports(ApiKey.SASL_HANDSHAKE):
        raise SecurityProtocolMismatchError(
            f"{where} does not speak SASL (no SaslHandshake in its ApiVersions), and security.protocol is "
            f"{conn.protocol}")
    # v1 handshake + SaslAuthenticate when the broker has both; else v0 and bare tokens.
    if framed is None:
        framed = conn.supports(ApiKey.SASL_AUTHENTICATE) and conn.supports(ApiKey.SASL_HANDSHAKE, low=1)
    response = await conn.send(messages.SaslHandshakeRequest(mechanism=login.mechanism), version=1 if framed else 0)
    if response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        enabled = ", ".join(response.mechanisms or []) or "none"
        raise AuthenticationError(f"{failed}: the broker does not enable {login.mechanism} (it enables {enabled}) "
                                  f"(broker {where})")
    if response.error_code == ErrorCode.ILLEGAL_SASL_STATE:
        # What Kafka answers a SaslHandshake on a listener without SASL.
        raise SecurityProtocolMismatchError(
            f"{where} refused SaslHandshake (ILLEGAL_SASL_STATE): it is not a SASL listener, and "
            f"security.protocol is {conn.protocol}")
    if response.error_code:
        raise AuthenticationError(f"{failed}: SaslHandshake refused with {error_name(response.error_code)} "
                                  f"(broker {where})")

    step = _framed_step(conn, failed, where) if framed else _raw_step(conn, failed, where)
    try:
        if login.mechanism == "PLAIN":
            await step(plain_token(login.username, login.password))
        else:
            scram = ScramClient(login.mechanism, login.username, login.password)
            server_first = await step(scram.first_message())
            server_final = await step(scram.final_message(server_first))
            scram.verify_server_final(server_final)
    except (_SecurityAuthenticationError, ValueError) as exc:
        if isinstance(exc, AuthenticationError):  # ours, already worded
            raise
        raise AuthenticationError(f"{failed}: {exc} (broker {where})") from None
    conn.authenticated_as = login.username
    logger.debug("logged in to %s as %s with %s", where, login.username, login.mechanism)


def _framed_step(conn: BrokerConnection, failed: str, where: str) -> Step:
    version = conn.version_for(ApiKey.SASL_AUTHENTICATE)

    async def step(token: bytes) -> bytes:
        response = await conn.send(messages.SaslAuthenticateRequest(auth_bytes=token), version=version)
        if response.error_code:
            reason = response.error_message or error_name(response.error_code)
            raise AuthenticationError(f"{failed}: {reason} (broker {where})")
        if version >= 1:
            conn.expire_session_at(response.session_lifetime_ms or 0)
        return bytes(response.auth_bytes or b"")

    return step


def _raw_step(conn: BrokerConnection, failed: str, where: str) -> Step:
    async def step(token: bytes) -> bytes:
        try:
            return bytes(await conn.exchange_raw(token))
        except BrokerConnectionError:
            # SaslHandshake v0 has no way to say why: the broker just hangs up.
            raise AuthenticationError(f"{failed}: the broker closed the connection (SASL without SaslAuthenticate "
                                      f"gives no reason: a wrong username or password?) (broker {where})") from None

    return step
