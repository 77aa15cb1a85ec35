"""SCRAM (RFC 5802) with SHA-256 and SHA-512 (RFC 7677), as Kafka uses it.

Both ends are plain state machines over bytes: the broker and the client move the messages over their
own framing (SaslAuthenticate or raw v0 tokens). No channel binding (the GS2 header is "n,,"), as in
Kafka. Usernames and passwords are UTF-8 without SASLprep: that is what Kafka's ScramFormatter does,
and a credential made here must verify against what Java and librdkafka clients send.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import NamedTuple

from .errors import AuthenticationError

# What Kafka offers (and so what a broker may advertise).
MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# SCRAM-SHA-1 is not a Kafka mechanism, but RFC 5802's only test vector uses it: knowing it here lets that
# vector run through exactly the code path the Kafka mechanisms use. Brokers only accept MECHANISMS.
_HASHES: dict[str, str] = {**MECHANISMS, "SCRAM-SHA-1": "sha1"}

MIN_ITERATIONS = 4096  # Kafka's floor for SCRAM credentials (and what its clients insist on)
MAX_ITERATIONS = 16384  # Kafka's ceiling when creating credentials
# A client still follows a server that asks for more than Kafka's ceiling (other brokers differ), but not
# without bound: a hostile server could otherwise make the client burn CPU in PBKDF2.
_CLIENT_MAX_ITERATIONS = 1_000_000
_MAX_MESSAGE = 4096  # no legitimate SCRAM message comes near this; a bound keeps hostile input cheap
_FAILED = "authentication failed: invalid credentials"  # same text for unknown user and bad password


class ScramCredential(NamedTuple):
    """What a server keeps for one user and mechanism: enough to verify a proof, not to recover the password."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"unsupported SCRAM mechanism {mechanism!r} (supported: {', '.join(MECHANISMS)})") from None


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def _h(hash_name: str, data: bytes) -> bytes:
    return hashlib.new(hash_name, data).digest()


def _keys(hash_name: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) from the password, per RFC 5802 section 3."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return client_key, _h(hash_name, client_key), _hmac(hash_name, salted, b"Server Key")


def make_credential(mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """Salt and hash a password for one mechanism (a fresh random salt unless one is given, e.g. by a test)."""
    hash_name = _hash_name(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], got {iterations}")
    if not password:
        raise ValueError("password must not be empty")
    salt = secrets.token_bytes(32) if salt is None else bytes(salt)
    _, stored_key, server_key = _keys(hash_name, password, salt, iterations)
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether a clear password matches a stored credential (how the broker checks PLAIN logins
    against SCRAM credentials, so that no password is ever kept)."""
    hash_name = _hash_name(credential.mechanism)
    _, stored_key, _ = _keys(hash_name, password, credential.salt, credential.iterations)
    return hmac.compare_digest(stored_key, credential.stored_key)


# --- message syntax -------------------------------------------------------------------------------------------

def _escape(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _unescape(saslname: str) -> str:
    # RFC 5802: "=" may only appear as "=2C" or "=3D"; anything else is a malformed message.
    out, i = [], 0
    while i < len(saslname):
        if saslname[i] == "=":
            code = saslname[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise AuthenticationError("malformed SCRAM message: bad escape in username")
            i += 3
        else:
            out.append(saslname[i])
            i += 1
    return "".join(out)


def _valid_nonce(nonce: str) -> bool:
    # printable ASCII except ",": RFC 5802's "printable" production
    return bool(nonce) and all(0x21 <= ord(ch) <= 0x7E and ch != "," for ch in nonce)


def _decode(message: bytes, what: str) -> str:
    if len(message) > _MAX_MESSAGE:
        raise AuthenticationError(f"malformed SCRAM {what}: too long")
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"malformed SCRAM {what}: not UTF-8") from None


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """Split "a=v,b=w" into pairs. Keys are RFC 5802's one letter, or Kafka's named extensions (tokenauth)."""
    pairs = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key or not key.isascii() or not key.isalpha():
            raise AuthenticationError(f"malformed SCRAM {what}: bad attribute")
        pairs.append((key, value))
    return pairs


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise AuthenticationError(f"malformed SCRAM {what}: bad base64") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _make_nonce() -> str:
    return secrets.token_urlsafe(24)  # base64url alphabet: printable, no ","


# --- client ---------------------------------------------------------------------------------------------------

class ScramClient:
    """One client login: first_message() -> final_message(server_first) -> verify_server_final(server_final)."""

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        self._hash = _hash_name(mechanism)
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = _make_nonce() if nonce is None else nonce
        if not _valid_nonce(self._nonce):
            raise ValueError("SCRAM nonce must be printable ASCII without ','")
        self._gs2_header = "n,,"
        self._first_bare = f"n={_escape(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self.done = False

    def first_message(self) -> bytes:
        return (self._gs2_header + self._first_bare).encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        text = _decode(server_first, "server-first-message")
        attrs = _attributes(text, "server-first-message")
        if attrs[0][0] == "e":
            raise AuthenticationError(f"server refused the login: {attrs[0][1]}")
        if attrs[0][0] == "m":
            raise AuthenticationError("server-first-message has a mandatory extension this client does not know")
        values = dict(attrs)
        if [key for key, _ in attrs[:3]] != ["r", "s", "i"]:
            raise AuthenticationError("malformed SCRAM server-first-message: expected r=, s=, i=")
        nonce = values["r"]
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not _valid_nonce(nonce):
            raise AuthenticationError("SCRAM server nonce does not extend the client nonce")
        salt = _b64decode(values["s"], "server-first-message")
        try:
            iterations = int(values["i"])
        except ValueError:
            raise AuthenticationError("malformed SCRAM server-first-message: bad iteration count") from None
        if not MIN_ITERATIONS <= iterations <= _CLIENT_MAX_ITERATIONS:
            raise AuthenticationError(f"SCRAM iteration count {iterations} outside [{MIN_ITERATIONS}, "
                                      f"{_CLIENT_MAX_ITERATIONS}]")
        client_key, stored_key, server_key = _keys(self._hash, self._password, salt, iterations)
        without_proof = f"c={_b64(self._gs2_header.encode())},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = _hmac(self._hash, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(self._hash, server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        if self._server_signature is None:
            raise AuthenticationError("SCRAM server-final-message before the client-final-message")
        text = _decode(server_final, "server-final-message")
        key, _, value = text.partition("=")
        if key == "e":
            raise AuthenticationError(f"server refused the login: {value}")
        if key != "v" or "," in value:
            raise AuthenticationError("malformed SCRAM server-final-message")
        if not hmac.compare_digest(_b64decode(value, "server-final-message"), self._server_signature):
            raise AuthenticationError("SCRAM server signature does not verify: the server does not know the "
                                      "credential (wrong server?)")
        self.done = True


# --- server ---------------------------------------------------------------------------------------------------

# Per-process secret for fake salts: an unknown user gets the same salt on every try (a varying one would
# reveal that the user does not exist), and nobody can compute it offline.
_FAKE_SALT_KEY = secrets.token_bytes(32)


class ScramServer:
    """One server-side login. process() takes the client-first then the client-final message and returns the
    server-first then the server-final; it raises AuthenticationError on any failure (and stays failed)."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None], *,
                 nonce: str | None = None) -> None:
        self._hash = _hash_name(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = _make_nonce() if nonce is None else nonce
        if not _valid_nonce(self._server_nonce):
            raise ValueError("SCRAM nonce must be printable ASCII without ','")
        self._state = "first"  # first -> final -> done | failed
        self.done = False
        self.username: str | None = None  # set once authenticated
        self._credential: ScramCredential | None = None
        self._known = False
        self.requested_username = ""  # the name the client gave (for logs), authenticated or not
        self._gs2_header = ""
        self._auth_prefix = ""
        self._nonce = ""
        self._client_nonce = ""

    def process(self, message: bytes) -> bytes:
        state = self._state
        self._state = "failed"  # until this step succeeds: any exception leaves the exchange dead
        if state == "first":
            reply = self._first(message)
            self._state = "final"
            return reply
        if state == "final":
            reply = self._final(message)
            self._state = "done"
            self.done = True
            return reply
        raise AuthenticationError("SCRAM exchange already finished" if state == "done" else "SCRAM exchange failed")

    def _first(self, message: bytes) -> bytes:
        text = _decode(message, "client-first-message")
        flag, comma1, rest = text.partition(",")
        authz, comma2, bare = rest.partition(",")
        if not comma1 or not comma2:
            raise AuthenticationError("malformed SCRAM client-first-message: no GS2 header")
        if flag.startswith("p="):
            raise AuthenticationError("SCRAM channel binding is not supported")
        if flag not in ("n", "y"):
            raise AuthenticationError("malformed SCRAM client-first-message: bad GS2 flag")
        if authz and not authz.startswith("a="):
            raise AuthenticationError("malformed SCRAM client-first-message: bad authzid")
        attrs = _attributes(bare, "client-first-message")
        if attrs[0][0] == "m":
            raise AuthenticationError("SCRAM mandatory extensions are not supported")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise AuthenticationError("malformed SCRAM client-first-message: expected n=, r=")
        username = _unescape(attrs[0][1])
        if not username:
            raise AuthenticationError("malformed SCRAM client-first-message: empty username")
        if authz and _unescape(authz[2:]) != username:
            raise AuthenticationError("SCRAM authorization id differs from the username")
        client_nonce = attrs[1][1]
        if not _valid_nonce(client_nonce):
            raise AuthenticationError("malformed SCRAM client-first-message: bad nonce")
        for key, value in attrs[2:]:
            # Kafka's one extension: delegation tokens, which this broker does not issue.
            if key == "tokenauth" and value.lower() == "true":
                raise AuthenticationError("SCRAM delegation-token authentication is not supported")
        credential = self._lookup(username)
        self._known = credential is not None and credential.mechanism == self.mechanism
        if not self._known:
            fake_salt = _hmac("sha256", _FAKE_SALT_KEY, f"{self.mechanism}\x00{username}".encode())
            credential = ScramCredential(self.mechanism, fake_salt, b"", b"", MIN_ITERATIONS)
        self._credential = credential
        self.requested_username = username
        self._gs2_header = f"{flag},{authz},"
        self._client_nonce = client_nonce
        self._nonce = client_nonce + self._server_nonce
        server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._auth_prefix = f"{bare},{server_first},"
        return server_first.encode("utf-8")

    def _final(self, message: bytes) -> bytes:
        text = _decode(message, "client-final-message")
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise AuthenticationError("malformed SCRAM client-final-message: no proof")
        attrs = _attributes(without_proof, "client-final-message")
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise AuthenticationError("malformed SCRAM client-final-message: expected c=, r=")
        if _b64decode(attrs[0][1], "client-final-message") != self._gs2_header.encode("utf-8"):
            raise AuthenticationError("SCRAM channel-binding data does not match the GS2 header")
        nonce = attrs[1][1]
        # librdkafka before 1.x's fix (Debian's kcat among others) repeats the client nonce in front of the
        # combined one; Kafka's broker accepts that (it checks endsWith), so must we. The proof covers the
        # message as sent, and the server nonce is in it: the exchange is as fresh either way.
        if nonce != self._nonce and nonce != self._client_nonce + self._nonce:
            raise AuthenticationError("SCRAM nonce mismatch")
        proof = _b64decode(proof_b64, "client-final-message")
        credential = self._credential
        assert credential is not None
        auth_message = (self._auth_prefix + without_proof).encode("utf-8")
        if not self._known:
            # Same work as a real check, then fail: the answer must not tell unknown users from bad passwords.
            _hmac(self._hash, _FAKE_SALT_KEY, auth_message)
            raise AuthenticationError(_FAILED)
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationError(_FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(_h(self._hash, client_key), credential.stored_key):
            raise AuthenticationError(_FAILED)
        self.username = self.requested_username
        return f"v={_b64(_hmac(self._hash, credential.server_key, auth_message))}".encode()
