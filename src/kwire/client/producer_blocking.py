"""The producer driven by plain blocking sockets: ``kwire produce`` without an event loop.

A command that writes a file and exits spends most of its life starting: asyncio and the
asyncio client core cost more to import than the records cost to send.  ``BlockingProducer`` is
the same producer with another I/O driver: the same config (``ProducerConfig``), partitioner,
accumulator (``append_run_step`` into bulk batches), sender decisions (``SenderCore``: which
batches go, the Produce request, retries, idempotent sequences), ApiVersions negotiation
(``versions``) and Metadata request, over the same sans-IO connection machine
(``kwire.protocol.connection.ClientConnection``) that ``BrokerConnection`` drives with asyncio.
Only waiting differs: this one waits in ``selectors`` on the sockets of the requests in flight.

What it covers: the bulk calls (``produce_many``, ``flush``, ``close``) that ``kwire produce``
makes, on PLAINTEXT listeners, without transactions, to brokers that take record batches
(Produce v3+).  ``NotBlockingCapable`` says when a setting or the broker needs the asyncio
``Producer`` instead (the command then uses it; nothing has been sent).  acks 0, 1 and all,
idempotence (on by default, as Java's and ``Producer``'s), batch.size / batch.num.messages /
linger.ms, retries with backoff, delivery.timeout.ms and request.timeout.ms are the core's.

Connections follow ``Cluster``'s way: a bootstrap connection for the first Metadata, then one per
broker by node id (the bootstrap one closed once the brokers are known), each negotiating
versions first; a connection that fails backs off by reconnect.backoff.ms before the next try.
"""

from __future__ import annotations

import os
import selectors
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kwire.protocol import ApiKey, messages
from kwire.protocol.connection import ClientConnection, FrameError, ResponseReceived, UnawaitedResponse
from kwire.protocol.errors import ProtocolError
from kwire.protocol.primitives import Buffer
from kwire.protocol.records.bulk import encode_headers
from kwire.protocol.schema import api_name
from kwire.protocol.splice import SplicedBytes

from .accumulator import BATCH_OVERHEAD, ProducerBatch
from .backoff import Backoff
from .config import ProducerConfig
from .errors import (
    BrokerConnectionError,
    ClientTimeoutError,
    IllegalStateError,
    NoBrokersAvailableError,
    SecurityProtocolMismatchError,
)
from .idempotence import IdempotenceState
from .lazy_log import LazyLogger
from .metadata import BrokerInfo, ClusterMetadata, metadata_request
from .partitioner import Partitioner
from .producer_bulk import BulkDelivery
from .producer_core import (
    TopicRoute,
    TopicWait,
    accumulator_for,
    append_run_step,
    bulk_groups,
    bulk_keys,
    complete_bulk,
    record_fields,
    too_large,
    values_column,
)
from .producer_errors import InvalidPartitionError, RecordTooLargeError
from .sender_core import FIRST_BATCH_PRODUCE_VERSION, SenderCore
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
    from .transactions import TransactionManager  # (the blocking producer has no transactions)

__all__ = ["BlockingProducer", "NotBlockingCapable", "blocking_capable"]

# (logging imported only when a record could be shown: see lazy_log)
logger = LazyLogger("kwire.client.producer")

# A TLS record starts with its content type (0x15 alert, 0x16 handshake) and major version 3
# (as BrokerConnection checks the first bytes of an answer).
_TLS_RECORD_TYPES = (0x15, 0x16)
# How long a closing connection with acks=0 requests behind it waits for the broker to close its
# side (BrokerConnection's linger).
_LINGER_SECONDS = 5.0
_RECV_SIZE = 1 << 16


class NotBlockingCapable(Exception):
    """The settings or the broker need the asyncio ``Producer`` (nothing was sent)."""


def blocking_capable(config: ProducerConfig) -> str | None:
    """Why ``config`` needs the asyncio producer, or None when the blocking one does the same."""
    if config.transactional_id is not None:
        return "transactions"
    if config.security_protocol != "PLAINTEXT":
        return f"security.protocol {config.security_protocol}"
    return None


class _Pending:
    """A request waiting for its answer: what to call with it (or with why none came), and until when."""

    __slots__ = ("answer", "deadline", "wait")

    def __init__(self, answer: Callable[[Any], None], wait: float):
        self.answer = answer
        self.wait = wait
        self.deadline = time.monotonic() + wait


class _Connection:
    """One broker connection: a blocking socket and the client machine (``ClientConnection``)."""

    def __init__(self, info: BrokerInfo, client_id: str | None, request_timeout: float):
        self.info = info
        self.where = info.address
        self.request_timeout = request_timeout
        self.wire = ClientConnection(client_id=client_id)
        self.sock: socket.socket | None = None
        self.broker_versions: dict[int, VersionRange] = {}
        self.received = 0

    @property
    def usable(self) -> bool:
        return self.sock is not None

    @property
    def in_flight(self) -> int:
        return self.wire.in_flight

    def version_for(self, api_key: int, low: int = 0, high: int | None = None) -> int:
        return common_version(self.broker_versions, api_key, low, high, self.where)

    def open(self, timeout: float) -> None:
        host, port = self.info.host, self.info.port
        # An ASCII host as bytes: for a str getaddrinfo imports the idna codec (a few ms of every
        # command line); for ASCII names the two are the same bytes.
        name = host.encode("ascii") if host.isascii() else host
        try:
            sock = socket.create_connection((name, port), timeout=timeout)  # type: ignore[arg-type]
        except TimeoutError:
            raise BrokerConnectionError(f"connecting to {host}:{port} timed out after {timeout:g} s") from None
        except OSError as exc:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        self.sock = sock

    def send(self, request: messages.Request[Any], version: int, pending: _Pending | None) -> None:
        """Write the request (``pending``: its answer is awaited; None: acks=0, none is)."""
        # In pieces, the record batches by reference: a Produce request's megabytes are written
        # from the batches themselves instead of being copied into one frame (twice).
        parts = self.wire.send_request_parts(request, version, expect_response=pending is not None, context=pending)
        assert self.sock is not None  # (callers send on usable connections)
        try:
            _write_all(self.sock, parts)
        except OSError as exc:
            self.close(BrokerConnectionError(f"connection to {self.where} lost: {exc.strerror or exc}"))

    def receive(self) -> None:
        """Read what the socket has (it is readable) and hand each answer to its request."""
        assert self.sock is not None
        try:
            data = self.sock.recv(_RECV_SIZE)
        except OSError as exc:
            self.close(BrokerConnectionError(f"connection to {self.where} lost: {exc.strerror or exc}"))
            return
        if not data:
            why = (f"{self.where} closed the connection without answering: is it a TLS listener? "
                   "security.protocol is PLAINTEXT") if not self.received else f"connection to {self.where} lost"
            self.close(BrokerConnectionError(why))
            return
        if not self.received and len(data) >= 2 and data[0] in _TLS_RECORD_TYPES and data[1] == 3:
            self.close(SecurityProtocolMismatchError(
                f"{self.where} answered with TLS: it is a TLS listener, and security.protocol is PLAINTEXT "
                f"(use SSL or SASL_SSL)"))
            return
        self.received += len(data)
        try:
            self.wire.receive_data(data)
        except ProtocolError as exc:
            self.close(BrokerConnectionError(f"bad response frame from {self.where}: {exc}"))
            return
        while self.sock is not None:
            event = self.wire.next_event()
            if type(event) is ResponseReceived:
                pending: _Pending = event.outstanding.context
                try:
                    response: Any = _decode(event)
                except ProtocolError as exc:
                    response = exc
                pending.answer(response)
            elif type(event) is UnawaitedResponse:
                continue  # an answer to acks=0 (librdkafka's mock gives them): dropped
            elif type(event) is FrameError:
                self.close(BrokerConnectionError(f"{self.where} sent a bad response: {event.error}"))
            else:
                break  # NEED_DATA

    def expire(self, now: float) -> None:
        """A request past its timeout closes the connection, as Kafka's clients do."""
        for out in self.wire.outstanding():
            pending: _Pending = out.context
            if pending.deadline <= now:
                self.close(ClientTimeoutError(f"{api_name(out.api_key)} v{out.api_version} to {self.where} "
                                              f"got no answer in {pending.wait:g} s"))
                return

    def next_deadline(self) -> float:
        return min((out.context.deadline for out in self.wire.outstanding()), default=float("inf"))

    def close(self, reason: BaseException | None = None) -> None:
        """Close; requests still waiting get ``reason`` (a BrokerConnectionError by default)."""
        sock, self.sock = self.sock, None
        if sock is None:
            return
        if reason is None and self.wire.awaiting_unawaited:
            # acks=0 requests may still be on their way: half-close, and read to the broker's end
            # (an unread answer would make the kernel reset the connection and drop them).
            try:
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(_LINGER_SECONDS)
                while sock.recv(_RECV_SIZE):
                    pass
            except OSError:
                pass
        sock.close()
        error = reason or BrokerConnectionError(f"connection to {self.where} closed")
        for out in self.wire.forget_outstanding():
            out.context.answer(error)


# At most this many pieces per sendmsg: Linux's IOV_MAX (a Produce request to many partitions
# has two pieces per partition).
_IOV_MAX = 1024


def _write_all(sock: socket.socket, parts: Sequence[Buffer | SplicedBytes]) -> None:
    """``sendall`` of a frame in pieces: gather-written (``socket.sendmsg``), resumed where a
    partial write stopped.  Spliced bytes go as their pieces (a ``SealedBatch``'s, by reference)."""
    views = []
    for p in parts:
        if isinstance(p, SplicedBytes):
            views += [memoryview(piece).cast("B") for piece in p.pieces()]
        else:
            views.append(memoryview(p).cast("B"))
    views = [v for v in views if v.nbytes]
    if not hasattr(sock, "sendmsg"):  # (Windows)
        sock.sendall(b"".join(views))
        return
    i = 0
    while i < len(views):
        sent = sock.sendmsg(views[i:i + _IOV_MAX])
        while sent:
            size = views[i].nbytes
            if sent >= size:
                sent -= size
                i += 1
            else:
                views[i] = views[i][sent:]
                sent = 0


def _decode(event: ResponseReceived) -> Any:
    """The answer as ``BrokerConnection`` reads it: ApiVersions with KIP-511's fallback, anything
    else leniently (bytes after the known fields, librdkafka's mock's forbidden null arrays)."""
    if event.api_key == ApiKey.API_VERSIONS and event.api_version > 0:
        return decode_api_versions(event)
    return event.decode(strict=False, forgive_null_arrays=True)


class BlockingProducer(SenderCore):
    """A producer of bulk calls over blocking sockets (see the module's docstring).

    ``produce_many`` queues records and sends what is ready as it goes; ``flush`` waits for the
    rest; ``close`` ends.  Use it from one thread.
    """

    GATHERED_BATCHES = True  # (_write_all sends a SealedBatch's pieces by reference)

    def __init__(self, config: ProducerConfig):
        why = blocking_capable(config)
        if why is not None:
            raise NotBlockingCapable(why)
        self.config = config
        self._request_timeout = config.request_timeout_ms / 1000
        self._max_block = config.max_block_ms / 1000
        self._max_request_size = config.max_request_size
        self._buffer_memory = config.buffer_memory
        self._partitioner = Partitioner.from_config(config)
        self._snapshot = ClusterMetadata()
        self._nodes: dict[int, BrokerInfo] = {
            -1 - i: BrokerInfo(-1 - i, host, port) for i, (host, port) in enumerate(config.bootstrap_addresses)}
        self._retry_at: dict[int, tuple[float, int]] = {}  # node -> (no connect before, failures)
        self._reconnect = Backoff(config.reconnect_backoff_ms, config.reconnect_backoff_max_ms)
        self._routes: dict[str, TopicRoute] = {}
        self._routes_of: ClusterMetadata | None = None
        self._topics: set[str] = set()
        self._metadata_wanted = False
        self._metadata_not_before = 0.0
        self._selector = selectors.DefaultSelector()
        self._registered: dict[_Connection, socket.socket] = {}  # every open connection, and its socket
        self._to_connect: set[int] = set()   # nodes the last round wanted a connection to
        self._producer_id_due = False        # the last round wanted a producer id
        self._idempotent = bool(config.enable_idempotence)
        super().__init__(accumulator_for(config), config, deliver=self._complete_batch,
                         idempotence=IdempotenceState() if self._idempotent else None, legacy=False,
                         metadata=lambda: self._snapshot,
                         backoff=Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms))
        self._closed = False
        self._start()

    # -- starting ---------------------------------------------------------------------------------
    def _start(self) -> None:
        """Connect to a bootstrap server (until max.block.ms) and check that it takes record batches."""
        deadline = time.monotonic() + self._max_block
        attempt = 0
        while True:
            try:
                conn = self._any_connection()
                break
            except BrokerConnectionError as exc:
                pause = self._backoff.delay(attempt)
                if time.monotonic() + pause >= deadline:
                    self._close_all()
                    raise ClientTimeoutError(f"connecting to the bootstrap servers did not succeed within "
                                             f"{self._max_block:g} s; last error: {exc}") from exc
                attempt += 1
                time.sleep(pause)
        try:
            conn.version_for(ApiKey.PRODUCE, FIRST_BATCH_PRODUCE_VERSION)
        except Exception as exc:
            # Message sets (Produce v0-2): the asyncio producer has that path.
            self._close_all()
            raise NotBlockingCapable(f"{conn.where} only speaks Produce v0-2") from exc

    # -- connections ------------------------------------------------------------------------------
    def _open(self, node: int) -> _Connection:
        """A connected, version-negotiated connection to ``node`` (BrokerConnectionError if not)."""
        info = self._nodes[node]
        conn = _Connection(info, self.config.client_id, self._request_timeout)
        try:
            conn.open(self.config.socket_connection_setup_timeout_ms / 1000)
            assert conn.sock is not None
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
            self._registered[conn] = conn.sock
            version = first_api_versions()
            for _ in range(API_VERSIONS_ATTEMPTS):
                answer = read_api_versions(self._call(conn, api_versions_request(), version), version, conn.where)
                if isinstance(answer, int):
                    version = answer
                    continue
                conn.broker_versions = answer[0]
                break
            else:
                raise BrokerConnectionError(f"{conn.where} refused every ApiVersions version")
        except BaseException as exc:
            self._drop(conn, exc if isinstance(exc, Exception) else None)
            not_before, failures = self._retry_at.get(node, (0.0, 0))
            self._retry_at[node] = (time.monotonic() + self._reconnect.delay(failures), failures + 1)
            if isinstance(exc, ClientTimeoutError):
                raise BrokerConnectionError(f"{conn.where} did not answer ApiVersions") from None
            raise
        self._retry_at.pop(node, None)
        self._connections[node] = conn
        return conn

    def _any_connection(self) -> _Connection:
        """An open connection to some broker: an idle open one first, else the next reachable one."""
        open_conns = [c for c in self._connections.values() if c.usable]
        if open_conns:
            idle: _Connection = min(open_conns, key=lambda c: c.in_flight)
            return idle
        known = [n for n in self._nodes if n >= 0] or list(self._nodes)
        known.sort(key=lambda n: self._retry_at.get(n, (0.0, 0))[0])  # brokers not in backoff first
        errors = []
        for node in known:
            wait = self._retry_at.get(node, (0.0, 0))[0] - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                return self._open(node)
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        raise NoBrokersAvailableError("no broker reachable: " + "; ".join(errors))

    def _drop(self, conn: _Connection, reason: BaseException | None = None) -> None:
        conn.close(reason)
        self._forget(conn)

    def _forget(self, conn: _Connection) -> None:
        """Stop watching a closed connection's socket."""
        sock = self._registered.pop(conn, None)
        if sock is not None:
            self._selector.unregister(sock)

    # -- waiting ----------------------------------------------------------------------------------
    def _wait(self, timeout: float, *, watching: bool = False) -> bool:
        """Read the answers that come within ``timeout`` seconds (and time out requests).
        ``watching``: an input registered by ``wait_readable`` is watched too; True when it is
        readable."""
        waiting = [c for c in self._registered if c.in_flight]
        if waiting:
            timeout = min(timeout, max(0.0, min(c.next_deadline() for c in waiting) - time.monotonic()))
        elif not watching:
            if timeout > 0:
                time.sleep(timeout)
            return False
        readable = False
        for key, _ in self._selector.select(None if timeout == float("inf") else timeout):
            conn: _Connection | None = key.data
            if conn is None:
                readable = True
            elif conn.usable:
                conn.receive()
        now = time.monotonic()
        for conn in list(self._registered):
            if conn.usable:
                conn.expire(now)
            if not conn.usable:
                self._forget(conn)
        return readable

    def _call(self, conn: _Connection, request: messages.Request[Any], version: int) -> Any:
        """Send ``request`` and wait for its answer (errors raised; the connection closed on timeout)."""
        box: list[Any] = []
        conn.send(request, version, _Pending(box.append, self._request_timeout))
        while not box:
            self._wait(self._request_timeout)
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    # -- the sender core's hooks ------------------------------------------------------------------
    def _connect(self, node: int) -> None:
        # After the round: a connect reads answers, which change the queues the round walks.
        self._to_connect.add(node)

    def _connect_wanted(self) -> None:
        """Open the connections the last round asked for (after their backoff)."""
        nodes, self._to_connect = self._to_connect, set()
        for node in sorted(nodes):
            if node not in self._nodes or (self.closing and not self.flushing):
                continue
            wait = self._retry_at.get(node, (0.0, 0))[0] - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            old = self._connections.pop(node, None)
            if old is not None:
                self._drop(old)
            try:
                self._open(node)
            except Exception as exc:  # noqa: BLE001 - the core decides what a failed connect means
                logger.info("producer cannot reach node %d: %s", node, exc)
                self._connect_failed(node, exc)

    def _dispatch(self, node: int, conn: _Connection, batches: list[ProducerBatch]) -> None:
        built = self._build(conn, batches)
        if built is None:
            self._request_done(node, batches)
            return
        request, version, names = built
        if self._acks == 0:
            conn.send(request, version, None)
            if conn.usable:
                self._answered(None, version, names, batches)
            else:
                self._request_failed(batches, BrokerConnectionError(f"connection to {conn.where} lost"))
            self._request_done(node, batches)
            return

        def answer(response: Any) -> None:
            try:
                if isinstance(response, BaseException):
                    self._request_failed(batches, response)
                else:
                    self._answered(response, version, names, batches)
            finally:
                self._request_done(node, batches)

        conn.send(request, version, _Pending(answer, self._request_timeout))

    def _want_metadata(self) -> None:
        self._metadata_wanted = True

    def _producer_id_wait(self, now: float, next_round: float) -> float:
        if now < self._init_not_before or self.closing:
            return min(next_round, self._init_not_before)
        self._producer_id_due = True  # asked for after the round (it reads answers)
        return now

    def _get_producer_id(self) -> None:
        """InitProducerId for the idempotent producer, when the last round asked for it."""
        if not self._producer_id_due:
            return
        self._producer_id_due = False
        try:
            conn = self._any_connection()
            response = self._call(conn, self._producer_id_request(), conn.version_for(ApiKey.INIT_PRODUCER_ID))
            self._producer_id_answered(self._producer_id_of(response))
        except Exception as exc:  # noqa: BLE001 - retriable: try again later; otherwise fatal
            if self._producer_id_failed(exc):
                logger.info("no producer id yet: %s", exc)
            else:
                logger.error("the idempotent producer cannot get a producer id: %s", self.fatal_error)

    def _start_add_partitions(self, txn: TransactionManager) -> None:
        raise AssertionError("the blocking producer has no transactions")  # (refused in __init__)

    def _complete_batch(self, batch: ProducerBatch, base_offset: int, log_append_time: int,
                        error: BaseException | None) -> None:
        complete_bulk(batch, base_offset, error)  # every batch of this producer is a bulk one

    # -- metadata ---------------------------------------------------------------------------------
    def _refresh_metadata(self, topics: Sequence[str], allow_auto_create: bool = False) -> ClusterMetadata:
        conn = self._any_connection()
        version = conn.version_for(ApiKey.METADATA)
        response = self._call(conn, metadata_request(version, topics, allow_auto_create), version)
        if getattr(response, "error_code", 0):
            from kwire.protocol.errors import KafkaError

            raise KafkaError.for_code(response.error_code)("Metadata refused")
        fresh = ClusterMetadata.from_response(response)
        self._snapshot = self._snapshot.merged(fresh, topics)
        self._learn_brokers(fresh)
        return self._snapshot

    def _learn_brokers(self, metadata: ClusterMetadata) -> None:
        for node_id, info in metadata.brokers.items():
            if self._nodes.get(node_id) != info:  # new, or moved: the old connection goes to the wrong place
                self._nodes[node_id] = info
                old = self._connections.pop(node_id, None)
                if old is not None:
                    self._drop(old)
        if metadata.brokers:
            # The real brokers are known; the bootstrap connections are no longer needed.
            for node_id in [n for n in self._connections if n < 0]:
                conn = self._connections[node_id]
                if conn.in_flight == 0:
                    del self._connections[node_id]
                    self._drop(conn)

    def _refresh_if_wanted(self) -> None:
        if not self._metadata_wanted or time.monotonic() < self._metadata_not_before:
            return
        self._metadata_wanted = False
        try:
            self._refresh_metadata(sorted(self._topics))
        except Exception as exc:  # noqa: BLE001 - retried on the next need
            logger.debug("producer metadata refresh failed: %s", exc)
        self._metadata_not_before = time.monotonic() + (self._backoff.delay(0) or 0.1)

    def _cached_route(self, topic: str) -> TopicRoute | None:
        metadata = self._snapshot
        if metadata is not self._routes_of:
            self._routes.clear()
            self._routes_of = metadata
        route = self._routes.get(topic)
        if route is None:
            partitions = metadata.partitions_for(topic)
            if partitions:
                route = self._routes[topic] = TopicRoute(topic, len(partitions), metadata.available_partitions(topic))
                self._topics.add(topic)
        return route

    def _fetch_topic(self, topic: str) -> TopicRoute:
        """The topic's route, asking (and letting the broker create it) until max.block.ms, as
        ``AsyncProducer._fetch_topic``: a retriable error is retried, any other raised."""
        route = self._cached_route(topic)
        if route is not None:
            return route
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, not {topic!r}")
        wait = TopicWait(topic, self.config.max_block_ms, self._backoff)
        while wait.left() > 0:
            try:
                metadata = self._refresh_metadata([topic], allow_auto_create=True)
            except Exception as exc:  # noqa: BLE001 - retriable ones are retried until max.block.ms
                wait.failed(exc)
            else:
                route = wait.answered(metadata, self._cached_route(topic))
                if route is not None:
                    return route
            pause = wait.pause()
            if pause > 0:
                time.sleep(pause)
        raise wait.timed_out()

    def _route(self, topic: str, partition: int | None) -> TopicRoute:
        route = self._fetch_topic(topic)
        if partition is not None and (type(partition) is not int or not 0 <= partition < route.count):
            if type(partition) is not int:
                raise TypeError(f"partition must be an int, not {type(partition).__name__}")
            # Perhaps the topic grew: look again before refusing.
            self._refresh_metadata([topic])
            route = self._fetch_topic(topic)
            if not 0 <= partition < route.count:
                raise InvalidPartitionError(f"topic {topic!r} has partitions 0..{route.count - 1}; "
                                            f"partition {partition} does not exist")
        return route

    # -- sending ----------------------------------------------------------------------------------
    def _pump(self, timeout: float) -> None:
        """One round of the sender, then the answers that come within ``timeout`` (at most until
        the round's next deadline)."""
        self._refresh_if_wanted()
        self._connect_wanted()
        self._get_producer_id()
        delay = self._run_once(time.monotonic())
        if not self._acc.incomplete:
            # The round settled the last record (its batches expired, say): nothing is left that
            # a caller waits on, and nothing to wake for before its own timeout.
            return
        if self._to_connect or self._producer_id_due:
            delay = 0.0  # the next round follows them at once
        if delay > 0:
            self._wait(min(delay, timeout))
        else:
            self._wait(0)

    def wait_readable(self, fd: int) -> None:
        """Keep sending (linger, retries, answers) until ``fd`` (a pipe, a terminal) has input:
        what the asyncio producer's background sender does while its caller waits for the next
        line.  A regular file is always readable (and cannot be watched): it returns at once."""
        import stat

        if stat.S_ISREG(os.fstat(fd).st_mode):
            return
        self._selector.register(fd, selectors.EVENT_READ, None)
        try:
            while True:
                self._refresh_if_wanted()
                self._connect_wanted()
                self._get_producer_id()
                delay = self._run_once(time.monotonic())
                if self._to_connect or self._producer_id_due:
                    delay = 0.0
                if self._wait(max(delay, 0.0), watching=True):
                    return
        finally:
            self._selector.unregister(fd)

    def _too_large(self, size: int) -> RecordTooLargeError:
        return too_large(size, self._max_request_size, self._buffer_memory)

    def produce_many(self, topic: str, values: Sequence[bytes | str | None],
                     keys: Sequence[bytes | str | None] | None = None, *, key: bytes | str | None = None,
                     partition: int | None = None,
                     headers: Mapping[str, Any] | list[tuple[str, Any]] | None = None) -> BulkDelivery:
        """``Producer.produce_many``: queue the records (sending what is ready meanwhile); the
        ``BulkDelivery`` counts them as their batches complete."""
        if self._closed:
            raise IllegalStateError("the producer is closed")
        values = values_column(values)
        key_column = bulk_keys(values, keys, key)
        header_list = record_fields(None, None, headers, False)[2]
        timestamp = int(time.time() * 1000)
        delivery = BulkDelivery(topic, len(values))
        if not values:
            return delivery
        route = self._route(topic, partition)
        hdr = encode_headers(header_list) if header_list else b"\x00"
        groups = bulk_groups(self._partitioner, topic, values, key_column, partition, route)
        for n, (p, group, vals, ks) in enumerate(groups):
            try:
                vals = self._append_run(topic, route, p, group, vals, ks, hdr, timestamp, delivery)
            except BaseException as exc:
                # What was not queued fails with the call's error, so that the delivery completes.
                done = getattr(exc, "_bulk_queued", 0)
                delivery._fail(group, done, len(vals), exc)
                for _, later, later_vals, _ in groups[n + 1:]:
                    delivery._fail(later, 0, len(later_vals), exc)
                raise
        return delivery

    def _append_run(self, topic: str, route: TopicRoute, partition: int | None, group: Sequence[int] | None,
                    values: Sequence[bytes | str | None], keys: Any, hdr: bytes, timestamp: int,
                    delivery: BulkDelivery) -> Sequence[bytes | str | None]:
        """``AsyncProducer._append_run`` with the sender run in place of waiting on the loop."""
        acc = self._acc
        max_record = min(self._max_request_size, self._buffer_memory) - BATCH_OVERHEAD
        room = min(acc.batch_size, self._buffer_memory)
        i, count = 0, len(values)
        try:
            while i < count:
                if not acc.has_room(room):
                    self._wait_for_room(room)
                i, closed, values = append_run_step(acc, self._partitioner, topic, route, partition, group, values,
                                                    keys, hdr, i, timestamp, delivery, max_record, self._too_large,
                                                    None)
                if closed:
                    self._pump(0)  # the full batch goes out while the rest is encoded
        except BaseException as exc:
            exc._bulk_queued = i  # type: ignore[attr-defined]
            raise
        return values

    def _wait_for_room(self, size: int) -> None:
        """Send (everything queued, linger or not) until ``size`` bytes fit in buffer.memory,
        max.block.ms at most (``RecordAccumulator.wait_for_room``'s error after it)."""
        acc = self._acc
        deadline = time.monotonic() + self._max_block
        self.flushing += 1  # a full buffer sends everything queued now, as the asyncio sender does
        try:
            while not acc.has_room(size) and acc.buffered:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClientTimeoutError(
                        f"buffer.memory ({acc.buffer_memory} bytes) stayed full for max.block.ms "
                        f"({self._max_block * 1000:g} ms): {acc.buffered} bytes of records are waiting to be "
                        f"delivered")
                self._pump(left)
        finally:
            self.flushing -= 1

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued now and wait (``timeout`` seconds at most) until every record is
        delivered or failed; how many records are still not (``Producer.flush``)."""
        acc = self._acc
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flushing += 1
        try:
            while acc.incomplete:
                left = 3600.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    break
                self._pump(left)
        finally:
            self.flushing -= 1
        return acc.record_count

    def close(self, timeout: float | None = None) -> None:
        """Flush (``timeout`` seconds at most; None: as long as delivery takes), then fail whatever
        is left and disconnect.  ``close(0)`` gives up on queued records at once."""
        if self._closed:
            return
        self._closed = True
        try:
            if timeout is None or timeout > 0:
                left = self.flush(timeout)
                if left:
                    logger.warning("closing with %d record(s) not delivered", left)
        finally:
            self.closing = True
            self.abort(IllegalStateError("the producer was closed before the record was delivered"))
            self._close_all()

    def _close_all(self) -> None:
        for conn in [*self._connections.values(), *self._registered]:
            self._drop(conn)
        self._connections.clear()
        self._registered.clear()
        self._selector.close()

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
