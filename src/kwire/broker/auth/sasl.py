"""One connection's identity: its SASL login (on SASL listeners), then its principal.

The login follows Kafka's SaslServerAuthenticator:

* before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served; any other
  request closes the connection (the network layer logs why);
* SaslHandshake names a mechanism. v1: the tokens then come in SaslAuthenticate requests, and a
  failure is answered with SASL_AUTHENTICATION_FAILED and its reason before the connection closes.
  v0: the next frames are bare tokens (a 4-byte size and the token, no request header) answered the
  same way, and a failure just closes the connection (that framing has no room for an error);
* a failed login is logged and answered only after a delay (``FailedLogins``), awaited by that
  connection alone: the event loop and every other connection carry on;
* frames before authentication are limited to 512 KiB (Kafka's sasl.server.max.receive.size), so an
  unauthenticated peer cannot make the broker allocate a large request buffer.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
import time

from kwire.protocol import ApiKey
from kwire.security import AuthenticationError, ScramCredential, ScramServer, make_credential, parse_plain_token
from kwire.security.scram import verify_password

from .principal import ANONYMOUS

__all__ = ["FailedLogins", "PRE_AUTH_APIS", "PRE_AUTH_MAX_FRAME", "Session", "SaslStateError"]

logger = logging.getLogger("kwire.broker.auth")

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.API_VERSIONS
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PRE_AUTH_APIS = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))
PRE_AUTH_MAX_FRAME = 512 * 1024

# Kafka's own failure messages, which clients show their users.
_PLAIN_FAILED = "Authentication failed: Invalid username or password"
_SCRAM_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


_DECOY: list[ScramCredential] = []


def _decoy() -> ScramCredential:
    if not _DECOY:
        _DECOY.append(make_credential("SCRAM-SHA-512", secrets.token_urlsafe(16)))
    return _DECOY[0]


class SaslStateError(Exception):
    """A SASL request out of order (ILLEGAL_SASL_STATE); the connection closes after the answer."""


class FailedLogins:
    """The delay before a failed login is answered: ``base`` doubled for each other failure from the same
    host in the last minute, at most ``maximum``. Slows password guessing without holding a lock or a
    thread: each connection sleeps on its own. Bounded memory: at most ``max_hosts`` hosts are tracked."""

    def __init__(self, base_ms: int, maximum_ms: int, *, window_s: float = 60.0, max_hosts: int = 10_000):
        self.base = base_ms / 1000
        self.maximum = maximum_ms / 1000
        self.window = window_s
        self.max_hosts = max_hosts
        self._recent: dict[str, collections.deque[float]] = {}

    def record(self, host: str) -> float:
        """Count a failure from host; the seconds to wait before answering it."""
        now = time.monotonic()
        times = self._recent.get(host)
        if times is None:
            if len(self._recent) >= self.max_hosts:
                self._prune(now)
            times = self._recent[host] = collections.deque(maxlen=32)
        while times and now - times[0] > self.window:
            times.popleft()
        times.append(now)
        if not self.base:
            return 0.0
        return min(self.base * 2 ** (len(times) - 1), self.maximum)

    def _prune(self, now: float) -> None:
        for host in [h for h, t in self._recent.items() if not t or now - t[-1] > self.window]:
            del self._recent[host]
        while len(self._recent) >= self.max_hosts:  # all recent: forget the oldest tracked
            del self._recent[next(iter(self._recent))]


def peer_host(peer: str) -> str:
    """"127.0.0.1" from "127.0.0.1:5555" (and "::1" from "::1:5555" or "[::1]:5555")."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


class Session:
    """Who is on one connection. ``authenticated`` and ``principal`` are what the rest of the broker reads."""

    def __init__(self, security, *, listener: str, sasl: bool, peer: str, principal: str = ANONYMOUS):
        self.security = security
        self.listener = listener
        self.sasl = sasl
        self.peer = peer
        self.host = peer_host(peer)
        self.principal = principal
        self.authenticated = not sasl
        # SASL: new -> handshaken (v1: SaslAuthenticate) | raw (v0: bare tokens) -> done | failed
        self.state = "new" if sasl else "done"
        self.mechanism: str | None = None
        self.framing = ""  # "v0 raw tokens" or "SaslAuthenticate", for the logs
        self._scram: ScramServer | None = None
        self._plain_user = ""
        self.close_after: str | None = None  # set when the answer being sent must be the last one

    @property
    def raw_tokens(self) -> bool:
        return self.state == "raw"

    # -- SaslHandshake ---------------------------------------------------------------------------
    def handshake(self, mechanism: str, version: int) -> tuple[int, list[str]]:
        """(error code, enabled mechanisms) for a SaslHandshake request."""
        from kwire.protocol.errors import IllegalSaslStateError, UnsupportedSaslMechanismError

        enabled = list(self.security.mechanisms) if self.sasl else []
        if not self.sasl or self.state == "done":
            # Not a SASL listener, or already logged in (no re-authentication): answer, keep the connection.
            return IllegalSaslStateError.code, enabled
        if self.state != "new":
            self.close_after = "SaslHandshake repeated during the SASL exchange"
            return IllegalSaslStateError.code, enabled
        if mechanism not in enabled:
            self.close_after = f"unsupported SASL mechanism {mechanism!r}"
            self.state = "failed"
            logger.warning("connection from %s on listener %s asked for SASL mechanism %r (enabled: %s)",
                           self.peer, self.listener, mechanism, ", ".join(enabled))
            return UnsupportedSaslMechanismError.code, enabled
        self.mechanism = mechanism
        if mechanism != "PLAIN":
            self._scram = ScramServer(mechanism, lambda user: self.security.credentials.get(user, mechanism))
        self.state = "raw" if version == 0 else "handshaken"
        self.framing = "v0 raw tokens" if version == 0 else "SaslAuthenticate"
        return 0, enabled

    # -- the tokens ------------------------------------------------------------------------------
    async def authenticate(self, token: bytes) -> bytes:
        """The answer to one client token (SaslAuthenticate's bytes or a v0 raw token).

        Raises SaslStateError out of order, and AuthenticationError (after the failure delay) when the
        login fails; either way the connection is done for.
        """
        if self.state not in ("handshaken", "raw"):
            raise SaslStateError("SaslAuthenticate " + ("after the login completed" if self.state == "done"
                                                        else "without a successful SaslHandshake"))
        try:
            return await self._step(bytes(token))
        except AuthenticationError as exc:
            self.state = "failed"
            delay = self.security.failures.record(self.host)
            user = self._scram.requested_username if self._scram is not None else self._plain_user
            logger.warning("failed login from %s on listener %s: mechanism %s, user %r: %s (answered after %.0f ms)",
                           self.peer, self.listener, self.mechanism, user[:100], exc, delay * 1000)
            if delay:
                await asyncio.sleep(delay)
            raise AuthenticationError(self._failure_message(exc)) from None

    def _failure_message(self, exc: AuthenticationError) -> str:
        text = str(exc)
        if "invalid credentials" in text:  # bad password or unknown user: Kafka's words
            return _PLAIN_FAILED if self.mechanism == "PLAIN" else _SCRAM_FAILED.format(self.mechanism)
        return f"Authentication failed: {text}"

    async def _step(self, token: bytes) -> bytes:
        if self.mechanism == "PLAIN":
            authzid, user, password = parse_plain_token(token)
            self._plain_user = user
            if authzid and authzid != user:
                raise AuthenticationError("authorization id must be empty or the username")
            credential = self.security.credentials.for_plain(user)
            # PBKDF2 takes milliseconds: off the event loop. An unknown user costs the same work (against a
            # throwaway credential), so the answer's timing does not tell which users exist.
            ok = await asyncio.get_running_loop().run_in_executor(
                None, verify_password, credential or _decoy(), password)
            if not ok or credential is None:
                raise AuthenticationError("invalid credentials")
            self._logged_in(user)
            return b""
        assert self._scram is not None
        reply = self._scram.process(token)
        if self._scram.done:
            self._logged_in(self._scram.username or "")
        return reply

    def _logged_in(self, user: str) -> None:
        self.state = "done"
        self.authenticated = True
        self.principal = f"User:{user}"
        logger.info("%s logged in from %s on listener %s with %s (%s)", self.principal, self.peer, self.listener,
                    self.mechanism, self.framing)
