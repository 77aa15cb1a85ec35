"""One connection to one broker: requests out, responses matched back to them.

A broker answers a connection's requests in the order they were sent, so the client pipelines:
up to ``max_in_flight`` requests are written before the first answer comes back.  Each response
must carry the correlation id of the oldest outstanding request; anything else means the stream
is out of step and the connection is dropped, failing every request still waiting on it.

On open the connection asks ApiVersions (KIP-511: the newest version first; a broker that does
not know it answers in v0 with its own range, and we ask again) and from then on sends every
request at the highest version both sides speak, within what the caller's code handles.

The wire rules (framing, correlation ids, pairing, acks=0, SASL v0's bare tokens, reading an
old broker's ApiVersions refusal) are ``kwire.protocol.connection.ClientConnection``'s: this
module drives that machine with asyncio, and adds what needs I/O or a clock (timeouts, TLS,
in-flight limits, closing).

A request that times out closes the connection, as Kafka's clients do: its answer may still
come, and nothing after it on this stream can be trusted to line up.

Security (``kwire.client.security``): with a TLS context the socket is wrapped in TLS right after
the TCP connect (a failed handshake is a ``TlsError`` naming the address and OpenSSL's reason);
with a SASL login the client logs in after ApiVersions (``kwire.client.sasl``), before any other
request.  A broker that answers in TLS to plain TCP is a ``SecurityProtocolMismatchError``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

from kwire.protocol import ApiKey
from kwire.protocol.connection import (
    ClientConnection,
    FrameError,
    ResponseReceived,
    SaslTokenReceived,
    UnawaitedResponse,
)
from kwire.protocol.errors import ProtocolError
from kwire.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from kwire.protocol.messages import Request, Response
from kwire.protocol.schema import api_name

from .errors import (
    BrokerConnectionError,
    ClientTimeoutError,
    IllegalStateError,
    SecurityProtocolMismatchError,
    TlsError,
    UnsupportedApiError,
)
from .versions import (
    API_VERSIONS_ATTEMPTS,
    VersionRange,
    api_versions_request,
    common_version,
    decode_api_versions,
    first_api_versions,
    read_api_versions,
)

if TYPE_CHECKING:
    from .security import ConnectionSecurity

__all__ = ["BrokerConnection", "SilentCloseError", "VersionRange"]

R = TypeVar("R", bound=Response)

logger = logging.getLogger("kwire.client.connection")

# A TLS record starts with its content type (0x15 alert, 0x16 handshake) and major version 3; a Kafka
# response starts with a size, which would then be over 350 MB.
_TLS_RECORD_TYPES = (0x15, 0x16)
_HANDSHAKE_APIS = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
# How long a closing connection with acks=0 requests behind it waits for the broker to close its side.
_LINGER_SECONDS = 5.0


class SilentCloseError(BrokerConnectionError):
    """The broker closed the connection before answering anything: a listener that speaks another
    security protocol, a TLS listener refusing our certificate (or its absence) right after the
    handshake, or a broker going away.  Retriable; ``Cluster`` gives up after a few in a row."""

    def __init__(self, message: str, *, after_tls: bool = False):
        super().__init__(message)
        self.after_tls = after_tls  # the TLS handshake had succeeded


class _Pending:
    """The driver's side of a request waiting for its answer (the machine's ``Outstanding.context``)."""

    __slots__ = ("future", "timer")

    def __init__(self, future: asyncio.Future[Response]):
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class BrokerConnection(asyncio.BufferedProtocol):
    """A connected, version-negotiated connection.  Make one with ``await BrokerConnection.open(...)``."""

    def __init__(self, host: str, port: int, *, node_id: int = -1, client_id: str | None = "kwire",
                 request_timeout: float = 30.0, max_in_flight: int = 5,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, security: ConnectionSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.security = security
        self.protocol = security.protocol if security is not None else "PLAINTEXT"
        #: The principal's name once SASL logged in (None without SASL).
        self.authenticated_as: str | None = None
        #: When the broker ends the SASL session (KIP-368, ``time.monotonic()``); None: never.
        self.session_expires_at: float | None = None
        self._bytes_received = 0
        self._served = 0  # responses read, ApiVersions and the SASL login's not counted
        self._raw: asyncio.Future[bytes] | None = None  # a SaslHandshake v0 token exchange waiting for its answer
        self._retiring = False
        # The broker's version range per api key, filled by ApiVersions.
        self.broker_versions: dict[int, VersionRange] = {}
        # The cluster's finalized feature levels (KIP-584, ApiVersions v3+), e.g. transaction.version,
        # which a transactional producer reads to choose transactions v2 (KIP-890) as Java's does.
        self.finalized_features: dict[str, int] = {}
        self._loop = asyncio.get_running_loop()
        # Fetch answers reuse the buffers of earlier ones their records no longer use: a consumer
        # holds at most two answers while it hands out a third and receives a fourth.
        # Answers to requests sent without waiting (Produce with acks=0; Kafka never answers them,
        # librdkafka's mock cluster does) are read and dropped, as librdkafka does, instead of being
        # taken for a broken stream: closing the connection then would lose the acks=0 requests
        # still in its write buffer.
        self._wire = ClientConnection(client_id=client_id, max_frame_size=max_frame_size, reuse_frames=4)
        self._first_read: memoryview | None = None
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._transport: asyncio.Transport | None = None
        self._closed: BaseException | None = None
        self._closed_event = asyncio.Event()
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._linger: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection node {self.node_id} {self.host}:{self.port}{' closed' if self.closed else ''}>"

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    async def open(cls, host: str, port: int, *, connect_timeout: float = 10.0, **options: Any) -> BrokerConnection:
        """Connect (TLS, SASL as ``security`` says) and negotiate versions.

        Failures name the address: ``BrokerConnectionError`` (retriable), ``TlsError`` and
        ``AuthenticationError`` (not retriable), ``SecurityProtocolMismatchError``.
        """
        conn = cls(host, port, **options)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            await asyncio.wait_for(loop.create_connection(lambda: conn, host, port), connect_timeout)
        except asyncio.TimeoutError:
            raise BrokerConnectionError(f"connecting to {host}:{port} timed out after {connect_timeout:g} s") from None
        except OSError as exc:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        try:
            if conn.security is not None and conn.security.ssl_context is not None:
                await conn._start_tls(max(connect_timeout - (time.monotonic() - started), 0.001))
            await asyncio.wait_for(conn._negotiate_versions(), connect_timeout + conn.request_timeout)
            if conn.security is not None and conn.security.sasl is not None:
                from .sasl import authenticate  # here: sasl imports this module

                await authenticate(conn, conn.security.sasl)
        except BaseException as exc:
            conn.close(exc if isinstance(exc, Exception) else None)
            if isinstance(exc, asyncio.TimeoutError):
                raise BrokerConnectionError(f"{host}:{port} did not answer ApiVersions") from None
            raise
        return conn

    async def _start_tls(self, timeout: float) -> None:
        """Wrap the connected socket in TLS; ``TlsError`` naming the address and OpenSSL's reason."""
        # (Called only when open found a TLS context, on a connected transport.)
        assert self.security is not None and self.security.ssl_context is not None and self._transport is not None
        context = self.security.ssl_context
        where = f"{self.host}:{self.port}"
        try:
            self._transport = await asyncio.wait_for(self._loop.start_tls(
                self._transport, self, context, server_hostname=self.host, ssl_handshake_timeout=timeout),
                timeout + 1)
        except ssl.SSLCertVerificationError as exc:
            raise TlsError(f"TLS handshake with {where} failed: the broker's certificate is not trusted: "
                           f"{_verify_reason(exc)}") from None
        except ssl.SSLError as exc:
            raise TlsError(f"TLS handshake with {where} failed: {_ssl_reason(exc)}") from None
        except (asyncio.TimeoutError, ConnectionAbortedError):
            raise BrokerConnectionError(f"TLS handshake with {where} did not finish within {timeout:g} s") from None
        except OSError as exc:
            # A plaintext listener reads the TLS hello as a huge frame size and hangs up.
            detail = exc.strerror or str(exc) or type(exc).__name__
            raise SilentCloseError(f"{where} closed the connection during the TLS handshake ({detail}), as a "
                                   f"plaintext listener does: security.protocol is {self.protocol}") from None

    async def _negotiate_versions(self) -> None:
        version = first_api_versions()
        request = api_versions_request()
        for _ in range(API_VERSIONS_ATTEMPTS):
            response = await self.send(request, version=version)
            answer = read_api_versions(response, version, f"{self.host}:{self.port}")
            if isinstance(answer, int):
                version = answer
                continue
            self.broker_versions, self.finalized_features = answer
            return
        raise BrokerConnectionError(f"{self.host}:{self.port} refused every ApiVersions version")

    # -- SASL v0 framing ----------------------------------------------------------------------------
    async def exchange_raw(self, token: bytes) -> bytes:
        """Send a bare SASL token (SaslHandshake v0: a 4-byte size and the token, no request header)
        and return the broker's bare answer.  Only while nothing else is in flight (during login)."""
        self._check_open()
        if self._raw is not None:
            raise IllegalStateError("a raw SASL token can only be sent on an idle connection")
        try:
            frame = self._wire.send_sasl_token(token)
        except RuntimeError as exc:
            raise IllegalStateError(str(exc)) from None
        future: asyncio.Future[bytes] = self._loop.create_future()
        self._raw = future
        timer = self._loop.call_later(self.request_timeout, self._time_out_raw)
        try:
            assert self._transport is not None  # connected: _check_open passed
            self._transport.write(frame)
            return await future
        finally:
            timer.cancel()
            self._raw = None

    def _time_out_raw(self) -> None:
        self.close(ClientTimeoutError(
            f"{self.host}:{self.port} did not answer a SASL token in {self.request_timeout:g} s"))

    # -- versions ---------------------------------------------------------------------------------
    def version_for(self, api_key: int, low: int = 0, high: int | None = None) -> int:
        """The highest version of ``api_key`` that the broker, the codec and the caller all speak."""
        return common_version(self.broker_versions, api_key, low, high, f"{self.host}:{self.port}")

    def supports(self, api_key: int, low: int = 0, high: int | None = None) -> bool:
        try:
            self.version_for(api_key, low, high)
        except UnsupportedApiError:
            return False
        return True

    # -- requests ---------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def close_reason(self) -> BaseException | None:
        return self._closed

    @property
    def served(self) -> bool:
        """Whether the broker answered a request other than ApiVersions and the login on this connection."""
        return self._served > 0

    @property
    def usable(self) -> bool:
        """Open and fit for new requests: not closed, and not retiring before its SASL session ends."""
        return self._closed is None and not self._retiring

    def expire_session_at(self, lifetime_ms: int) -> None:
        """KIP-368: the broker ends the SASL session after ``lifetime_ms``.  Kafka's clients log in
        again in-band at 85-95% of it; kwire retires the connection then instead (no new requests;
        closed when its last answer is in), and ``Cluster`` opens a new, freshly logged-in one."""
        if lifetime_ms <= 0:
            return
        delay = lifetime_ms / 1000 * 0.85
        self.session_expires_at = time.monotonic() + lifetime_ms / 1000
        self._loop.call_later(delay, self.retire)

    def retire(self) -> None:
        """Take no new requests; close once the requests in flight are answered."""
        self._retiring = True
        if not self._wire.in_flight and self._raw is None:
            self.close()

    @property
    def in_flight(self) -> int:
        return self._wire.in_flight

    @overload
    async def send(self, request: Request[R], *, version: int | None = None, low: int = 0, high: int | None = None,
                   expect_response: Literal[True] = True, timeout: float | None = None) -> R: ...

    @overload
    async def send(self, request: Request[R], *, version: int | None = None, low: int = 0, high: int | None = None,
                   expect_response: bool, timeout: float | None = None) -> R | None: ...

    async def send(self, request: Request[R], *, version: int | None = None, low: int = 0, high: int | None = None,
                   expect_response: bool = True, timeout: float | None = None) -> R | None:
        """Send ``request`` and return the decoded response.

        ``version`` fixes the version; otherwise the highest common one within ``low``..``high``.
        ``expect_response=False`` (Produce with acks=0) returns None once the bytes are written.
        A broker error code in the response is not raised here: the caller reads it.
        """
        if version is None:
            version = self.version_for(request.API_KEY, low, high)
        frame_future: asyncio.Future[Response] = self._loop.create_future()
        await self._in_flight.acquire()
        try:
            self._check_open()
            pending = _Pending(frame_future) if expect_response else None
            frame = self._wire.send_request(request, version, expect_response=expect_response, context=pending)
            if pending is not None:
                wait = self.request_timeout if timeout is None else timeout
                pending.timer = self._loop.call_later(wait, self._time_out, request.API_KEY, version, wait)
            # _check_open passed, so connection_made set the transport (never unset): no check
            # on the produce path just for mypy.
            self._transport.write(frame)  # type: ignore[union-attr]
            if self._write_paused:
                await self._drain()
        except BaseException:
            self._in_flight.release()
            raise
        if not expect_response:
            self._in_flight.release()
            return None
        try:
            # _decode read it with the response class of the request's api key, which is what
            # Request[R] names: mypy cannot follow the class through the api key.
            return cast(R, await frame_future)
        finally:
            self._in_flight.release()

    def _check_open(self) -> None:
        if self._closed is not None:
            if isinstance(self._closed, (SilentCloseError, TlsError, SecurityProtocolMismatchError)):
                raise self._closed  # what the caller must see (and Cluster count), not a generic "closed"
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed: {self._closed}")

    def _time_out(self, api_key: int, version: int, wait: float) -> None:
        # (Its timer is cancelled when the answer comes or the connection closes.)
        self.close(ClientTimeoutError(f"{api_name(api_key)} v{version} to {self.host}:{self.port} "
                                      f"got no answer in {wait:g} s"))

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream connection, never a datagram one
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        # The splitter's buffers: a large response (a Fetch) is received straight into a buffer
        # of its own and never copied after the kernel wrote it.
        view = self._wire.framing.get_buffer(sizehint)
        if not self._bytes_received:
            self._first_read = view  # for the TLS check of the first bytes
        return view

    def buffer_updated(self, nbytes: int) -> None:
        if not self._bytes_received:
            first, self._first_read = self._first_read, None
            if (nbytes >= 2 and first is not None and first[0] in _TLS_RECORD_TYPES and first[1] == 3
                    and not (self.security is not None and self.security.tls)):
                self.close(SecurityProtocolMismatchError(
                    f"{self.host}:{self.port} answered with TLS: it is a TLS listener, and security.protocol is "
                    f"{self.protocol} (use SSL or SASL_SSL)"))
                return
        self._bytes_received += nbytes
        try:
            frames = self._wire.framing.buffer_updated(nbytes)
        except ProtocolError as exc:
            self.close(BrokerConnectionError(f"bad response frame from {self.host}:{self.port}: {exc}"))
            return
        for frame in frames:
            if not self._complete(frame):
                return

    def _complete(self, frame: bytearray | memoryview) -> bool:
        event = self._wire.response_event(frame)
        if type(event) is FrameError:
            self.close(BrokerConnectionError(f"{self.host}:{self.port} sent a bad response: {event.error}"))
            return False
        if type(event) is SaslTokenReceived:  # SaslHandshake v0: a bare token, no response header
            if self._raw is not None and not self._raw.done():
                self._raw.set_result(bytes(event.token))
            return True
        if type(event) is UnawaitedResponse:
            logger.debug("%s:%d answered request %d, sent without waiting for an answer; dropped",
                         self.host, self.port, event.correlation_id)
            return True
        # The client machine's only other event; no check on this per-answer path.
        event = cast(ResponseReceived, event)
        out = event.outstanding
        pending: _Pending = out.context
        if out.api_key not in _HANDSHAKE_APIS:
            self._served += 1
        if pending.timer is not None:
            pending.timer.cancel()
        if self._retiring and not self._wire.in_flight:
            self._loop.call_soon(self.close)  # after this answer is handed over
        if pending.future.done():  # the caller was cancelled; the answer still had to be read
            return True
        try:
            response = self._decode(event)
        except ProtocolError as exc:
            pending.future.set_exception(exc)
        else:
            pending.future.set_result(response)
        return True

    @staticmethod
    def _decode(event: ResponseReceived) -> Response:
        if event.api_key == ApiKey.API_VERSIONS and event.api_version > 0:
            return decode_api_versions(event)  # KIP-511's fallback, and librdkafka's mock's refusal
        # Fetch: the record batches stay views of the received frame (no copy of the bulk of it).
        # One reading of every answer, whichever part of the client asked: lenient about what
        # real peers send (bytes after the known fields, librdkafka's mock's forbidden null arrays).
        return event.decode(strict=False, record_views=event.api_key == ApiKey.FETCH, forgive_null_arrays=True)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        where = f"{self.host}:{self.port}"
        if isinstance(exc, ssl.SSLError):
            # An alert after the handshake: under TLS 1.3 the broker checks our certificate only then.
            reason: BrokerConnectionError | TlsError = TlsError(f"TLS with {where} failed: {_ssl_reason(exc)}")
        elif not self._bytes_received and self.security is not None and self.security.tls:
            # Under TLS 1.3 a broker checks the client's certificate after the handshake; one that
            # cannot send its alert (asyncio's TLS does not) just hangs up.
            reason = SilentCloseError(
                f"{where} closed the connection after the TLS handshake without answering: does it require a "
                f"client certificate (ssl.certificate.location), or refuse this one?", after_tls=True)
        elif not self._bytes_received:
            reason = SilentCloseError(f"{where} closed the connection without answering: is it a TLS listener? "
                                      f"security.protocol is {self.protocol}")
        elif not self._served and self._wire.in_flight and (self.security is None or self.security.sasl is None):
            # ApiVersions answered, then the first real request dropped: what a SASL listener does
            # to a client that has not logged in.
            reason = SilentCloseError(f"{where} closed the connection at the first request after ApiVersions: "
                                      f"is it a SASL listener? security.protocol is {self.protocol}")
        else:
            reason = BrokerConnectionError(f"connection to {where} lost" + (f": {exc}" if exc else ""))
        self._fail_all(self._closed or reason)
        if self._closed is None:
            self._closed = reason
        self._closed_event.set()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    async def _drain(self) -> None:
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter
        self._check_open()

    # -- closing ----------------------------------------------------------------------------------
    def close(self, reason: BaseException | None = None) -> None:
        """Close at once; requests still waiting fail with ``reason`` (a BrokerConnectionError by default)."""
        if self._closed is not None:
            return
        self._closed = reason or BrokerConnectionError(f"connection to {self.host}:{self.port} closed")
        if reason is not None:
            logger.info("closing connection to node %d %s:%d: %s", self.node_id, self.host, self.port, reason)
        self._fail_all(self._closed)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self._transport is None:
            self._closed_event.set()
        elif reason is not None:
            self._transport.abort()
        elif self._wire.awaiting_unawaited and self._transport.can_write_eof():
            # acks=0 requests may still be on their way.  A close with an answer unread (librdkafka's
            # mock answers them) makes the kernel reset the connection and drop what it has not sent
            # yet, so half-close: the broker reads to our end, closes its side, and we read its
            # answers until then.  A broker that never closes is cut off after a while.
            self._transport.write_eof()
            self._linger = self._loop.call_later(_LINGER_SECONDS, self._transport.abort)
        else:
            self._transport.close()

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    def _fail_all(self, exc: BaseException) -> None:
        if self._raw is not None and not self._raw.done():
            self._raw.set_exception(exc)
        for out in self._wire.forget_outstanding():
            item: _Pending = out.context
            if item.timer is not None:
                item.timer.cancel()
            if not item.future.done():
                item.future.set_exception(exc)


def _ssl_reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason in words: "TLSV13_ALERT_CERTIFICATE_REQUIRED" -> "tlsv13 alert certificate required"."""
    reason = exc.reason or exc.strerror or str(exc)
    return str(reason).replace("_", " ").lower()


def _verify_reason(exc: ssl.SSLCertVerificationError) -> str:
    message = exc.verify_message or _ssl_reason(exc)
    if exc.verify_code == 62 or "mismatch" in message.lower():  # X509_V_ERR_HOSTNAME_MISMATCH
        return f"{message} (ssl.endpoint.identification.algorithm=none turns the hostname check off)"
    if exc.verify_code in (2, 19, 20, 21):  # issuer unknown: not signed by the CA we trust
        return f"{message} (is ssl.ca.location the CA that signed it?)"
    return message
