"""One connection to one broker: requests out, responses matched back to them.

A broker answers a connection's requests in the order they were sent, so the client pipelines:
up to ``max_in_flight`` requests are written before the first answer comes back.  Each response
must carry the correlation id of the oldest outstanding request; anything else means the stream
is out of step and the connection is dropped, failing every request still waiting on it.

On open the connection asks ApiVersions (KIP-511: the newest version first; a broker that does
not know it answers in v0 with its own range, and we ask again) and from then on sends every
request at the highest version both sides speak, within what the caller's code handles.

A request that times out closes the connection, as Kafka's clients do: its answer may still
come, and nothing after it on this stream can be trusted to line up.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from dataclasses import dataclass

from kwire import __version__
from kwire.protocol import messages
from kwire.protocol.errors import DecodeError, ProtocolError
from kwire.protocol.frames import correlation_id_of_response, decode_response, encode_request
from kwire.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameSplitter
from kwire.protocol.messages import Request, Response
from kwire.protocol.schema import api_name, api_versions

from .errors import BrokerConnectionError, ClientTimeoutError, UnsupportedApiError

__all__ = ["BrokerConnection", "VersionRange"]

logger = logging.getLogger("kwire.client.connection")

API_VERSIONS = 18
UNSUPPORTED_VERSION = 35
VersionRange = tuple[int, int]


@dataclass
class _Pending:
    correlation_id: int
    api_key: int
    version: int
    future: asyncio.Future
    timer: asyncio.TimerHandle | None


class BrokerConnection(asyncio.Protocol):
    """A connected, version-negotiated connection.  Make one with ``await BrokerConnection.open(...)``."""

    def __init__(self, host: str, port: int, *, node_id: int = -1, client_id: str | None = "kwire",
                 request_timeout: float = 30.0, max_in_flight: int = 5,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout
        # The broker's version range per api key, filled by ApiVersions.
        self.broker_versions: dict[int, VersionRange] = {}
        self._loop = asyncio.get_running_loop()
        self._splitter = FrameSplitter(max_frame_size)
        self._pending: collections.OrderedDict[int, _Pending] = collections.OrderedDict()
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._next_correlation = 0
        self._transport: asyncio.Transport | None = None
        self._closed: BaseException | None = None
        self._closed_event = asyncio.Event()
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future] = []

    def __repr__(self) -> str:
        return f"<BrokerConnection node {self.node_id} {self.host}:{self.port}{' closed' if self.closed else ''}>"

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    async def open(cls, host: str, port: int, *, connect_timeout: float = 10.0, **options) -> BrokerConnection:
        """Connect and negotiate versions; ``BrokerConnectionError`` naming the address on failure."""
        conn = cls(host, port, **options)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.create_connection(lambda: conn, host, port), connect_timeout)
        except asyncio.TimeoutError:
            raise BrokerConnectionError(f"connecting to {host}:{port} timed out after {connect_timeout:g} s") from None
        except OSError as exc:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        try:
            await asyncio.wait_for(conn._negotiate_versions(), connect_timeout + conn.request_timeout)
        except BaseException as exc:
            conn.close(exc if isinstance(exc, Exception) else None)
            if isinstance(exc, asyncio.TimeoutError):
                raise BrokerConnectionError(f"{host}:{port} did not answer ApiVersions") from None
            raise
        return conn

    async def _negotiate_versions(self) -> None:
        version = api_versions(API_VERSIONS)[1]
        request = messages.ApiVersionsRequest(client_software_name="kwire", client_software_version=__version__)
        for _ in range(3):
            response = await self.send(request, version=version)
            if response.error_code == UNSUPPORTED_VERSION and version > 0:
                # KIP-511: the broker answered in v0 with the versions it has; ask again in its newest
                # (or in v0 when its answer could not be read).
                theirs = {k.api_key: k.max_version for k in response.api_keys}.get(API_VERSIONS, 0)
                version = min(theirs, version - 1)
                continue
            if response.error_code:
                raise BrokerConnectionError(
                    f"{self.host}:{self.port} refused ApiVersions with error code {response.error_code}")
            self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            return
        raise BrokerConnectionError(f"{self.host}:{self.port} refused every ApiVersions version")

    # -- versions ---------------------------------------------------------------------------------
    def version_for(self, api_key: int, low: int = 0, high: int | None = None) -> int:
        """The highest version of ``api_key`` that the broker, the codec and the caller all speak."""
        ours = api_versions(api_key)
        lo = max(ours[0], low)
        hi = ours[1] if high is None else min(ours[1], high)
        theirs = self.broker_versions.get(api_key)
        if theirs is None:
            raise UnsupportedApiError(f"broker {self.host}:{self.port} does not support {api_name(api_key)}")
        best = min(hi, theirs[1])
        if best < max(lo, theirs[0]):
            raise UnsupportedApiError(
                f"no common version of {api_name(api_key)}: the broker speaks {theirs[0]}-{theirs[1]}, "
                f"kwire {lo}-{hi}")
        return best

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
    def in_flight(self) -> int:
        return len(self._pending)

    async def send(self, request: Request, *, version: int | None = None, low: int = 0, high: int | None = None,
                   expect_response: bool = True, timeout: float | None = None) -> Response | None:
        """Send ``request`` and return the decoded response.

        ``version`` fixes the version; otherwise the highest common one within ``low``..``high``.
        ``expect_response=False`` (Produce with acks=0) returns None once the bytes are written.
        A broker error code in the response is not raised here: the caller reads it.
        """
        if version is None:
            version = self.version_for(request.API_KEY, low, high)
        frame_future = self._loop.create_future()
        await self._in_flight.acquire()
        try:
            self._check_open()
            self._next_correlation = (self._next_correlation + 1) & 0x7FFFFFFF
            correlation_id = self._next_correlation
            frame = encode_request(request, version, correlation_id, self.client_id)
            if expect_response:
                wait = self.request_timeout if timeout is None else timeout
                timer = self._loop.call_later(wait, self._time_out, correlation_id, wait)
                self._pending[correlation_id] = _Pending(correlation_id, request.API_KEY, version, frame_future, timer)
            self._transport.write(frame)
            if self._write_paused:
                await self._drain()
        except BaseException:
            self._in_flight.release()
            raise
        if not expect_response:
            self._in_flight.release()
            return None
        try:
            return await frame_future
        finally:
            self._in_flight.release()

    def _check_open(self) -> None:
        if self._closed is not None:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed: {self._closed}")

    def _time_out(self, correlation_id: int, wait: float) -> None:
        pending = self._pending.get(correlation_id)
        if pending is not None:
            self.close(ClientTimeoutError(
                f"{api_name(pending.api_key)} v{pending.version} to {self.host}:{self.port} "
                f"got no answer in {wait:g} s"))

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._splitter.feed(data)
        except ProtocolError as exc:
            self.close(BrokerConnectionError(f"bad response frame from {self.host}:{self.port}: {exc}"))
            return
        for frame in frames:
            if not self._complete(frame):
                return

    def _complete(self, frame: bytes) -> bool:
        try:
            correlation_id = correlation_id_of_response(frame)
        except DecodeError as exc:
            self.close(BrokerConnectionError(f"bad response from {self.host}:{self.port}: {exc}"))
            return False
        if not self._pending or next(iter(self._pending)) != correlation_id:
            self.close(BrokerConnectionError(
                f"{self.host}:{self.port} answered correlation id {correlation_id}, "
                f"expected {next(iter(self._pending), None)}"))
            return False
        pending = self._pending.pop(correlation_id)
        if pending.timer is not None:
            pending.timer.cancel()
        if pending.future.done():  # the caller was cancelled; the answer still had to be read
            return True
        try:
            response = self._decode(frame, pending)
        except ProtocolError as exc:
            pending.future.set_exception(exc)
        else:
            pending.future.set_result(response)
        return True

    @staticmethod
    def _decode(frame: bytes, pending: _Pending) -> Response:
        if pending.api_key == API_VERSIONS and pending.version > 0:
            # A broker that lacks our ApiVersions version answers in v0 (KIP-511).
            try:
                _, response = decode_response(frame, API_VERSIONS, pending.version)
            except DecodeError:
                response = None
            if response is None or response.error_code == UNSUPPORTED_VERSION:
                try:
                    _, response = decode_response(frame, API_VERSIONS, 0)
                except DecodeError:
                    # Not even v0 (librdkafka's mock writes its refusal in neither layout): treat it
                    # as a refusal that names no versions, so the next attempt is v0.
                    response = messages.ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=[])
            return response
        _, response = decode_response(frame, pending.api_key, pending.version, strict=False)
        return response

    def connection_lost(self, exc) -> None:
        reason = BrokerConnectionError(
            f"connection to {self.host}:{self.port} lost" + (f": {exc}" if exc else ""))
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
        waiter = self._loop.create_future()
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
        if self._transport is not None:
            self._transport.abort() if reason is not None else self._transport.close()
        else:
            self._closed_event.set()

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    def _fail_all(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, collections.OrderedDict()
        for item in pending.values():
            if item.timer is not None:
                item.timer.cancel()
            if not item.future.done():
                item.future.set_exception(exc)
