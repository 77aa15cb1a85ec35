"""The client's view of a cluster: connections to its brokers and the metadata that routes requests.

Everything the producer, the consumer and the admin client send goes through ``Cluster.send``:
to a node by id (a partition leader, a group coordinator) or to any broker.  One connection per
broker is opened on first use and reopened after it breaks, waiting out the reconnect backoff
(``reconnect.backoff.ms`` doubling up to ``reconnect.backoff.max.ms``).

Bootstrap servers get negative node ids (-1, -2, ...) until the first Metadata answer names the
real brokers, as in Kafka's clients; their connections are then closed.

Every connection is made with the client's ``ConnectionSecurity`` (TLS context, SASL login), built
once here from the config.  A login or TLS failure is not retried (``AuthenticationError``); a
broker that closes connections before answering anything, several times in a row, is taken to
speak another security protocol on that port (``SecurityProtocolMismatchError``), so that plain
TCP to a TLS listener fails fast instead of being retried until the timeout.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, TypeVar, overload

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import KafkaError
from kwire.protocol.messages import Request, Response

from .connection import BrokerConnection, SilentCloseError
from .errors import (
    BrokerConnectionError,
    IllegalStateError,
    NoBrokersAvailableError,
    SecurityProtocolMismatchError,
    TlsError,
)
from .metadata import BrokerInfo, ClusterMetadata, metadata_request
from .retry import Backoff, retrying
from .security import ConnectionSecurity

if TYPE_CHECKING:
    from .config import CommonConfig

__all__ = ["Cluster"]

R = TypeVar("R", bound=Response)

logger = logging.getLogger("kwire.client")

GROUP_COORDINATOR = 0
# Connections in a row that a broker closed before answering anything, before the client concludes
# that the port speaks another security protocol (one could be a broker restarting).
SILENT_CLOSES_BEFORE_MISMATCH = 3
# Bootstrap order is shuffled with a generator of our own, not the application's global one.
_SHUFFLE = random.Random()


class _Node:
    """Connection state of one broker: the open connection, a connect in progress, and backoff."""

    __slots__ = ("info", "conn", "connecting", "failures", "retry_at", "silent_closes")

    def __init__(self, info: BrokerInfo):
        self.info = info
        self.conn: BrokerConnection | None = None
        self.connecting: asyncio.Future[BrokerConnection] | None = None
        self.failures = 0
        self.retry_at = 0.0
        self.silent_closes = 0  # connections in a row closed before any answer


class Cluster:
    """Connections and metadata shared by one client.  Use inside a running event loop."""

    def __init__(self, config: CommonConfig) -> None:
        self.config = config
        # Built now: a bad certificate file is a ConfigError when the client is made.
        self.security = ConnectionSecurity.from_config(config)
        self.metadata = ClusterMetadata()
        self._nodes: dict[int, _Node] = {}
        for i, (host, port) in enumerate(config.bootstrap_addresses):
            self._nodes[-1 - i] = _Node(BrokerInfo(-1 - i, host, port))
        self._reconnect = Backoff(config.reconnect_backoff_ms, config.reconnect_backoff_max_ms)
        self.retry_backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._refreshing: asyncio.Future[ClusterMetadata] | None = None
        self._coordinators: dict[tuple[int, str], int] = {}
        self._retired: set[BrokerConnection] = set()  # connections past their SASL session, still answering
        self._closed = False

    @property
    def request_timeout(self) -> float:
        return self.config.request_timeout_ms / 1000

    # -- connections ------------------------------------------------------------------------------
    async def connection(self, node_id: int) -> BrokerConnection:
        """The open connection to a node, connecting (after any backoff) when there is none."""
        if self._closed:
            raise IllegalStateError("the client is closed")
        node = self._nodes.get(node_id)
        if node is None:
            raise BrokerConnectionError(f"node {node_id} is not in the cluster metadata")
        if node.conn is not None and node.conn.usable:
            return node.conn
        if node.connecting is None:
            node.connecting = asyncio.ensure_future(self._connect(node))
        # shield: one caller giving up must not cancel the connect the others wait on.
        return await asyncio.shield(node.connecting)

    async def _connect(self, node: _Node) -> BrokerConnection:
        previous = node.conn
        if previous is not None:  # how the last connection ended tells whether the port speaks our protocol
            if isinstance(previous.close_reason, SilentCloseError):
                self._silent_close(node, previous.close_reason)
            elif previous.served:
                node.silent_closes = 0
            if not previous.closed:  # retiring: it closes itself once answered, or with the client
                self._retired = {c for c in self._retired if not c.closed} | {previous}
            node.conn = None
        try:
            wait = node.retry_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            config = self.config
            conn = await BrokerConnection.open(
                node.info.host, node.info.port, node_id=node.info.node_id, client_id=config.client_id,
                connect_timeout=config.socket_connection_setup_timeout_ms / 1000,
                request_timeout=self.request_timeout,
                max_in_flight=config.max_in_flight_requests_per_connection, security=self.security)
        except Exception as exc:
            # Any failure backs off, a refused login too: a client retrying in a loop must not
            # hammer the broker (which slows failed logins down anyway).
            node.retry_at = time.monotonic() + self._reconnect.delay(node.failures)
            node.failures += 1
            if isinstance(exc, SilentCloseError):
                self._silent_close(node, exc)
            else:
                node.silent_closes = 0
            raise
        finally:
            node.connecting = None
        node.failures = 0
        if self._closed:
            conn.close()
            raise IllegalStateError("the client is closed")
        node.conn = conn
        logger.debug("connected to node %d at %s", node.info.node_id, node.info.address)
        return conn

    @staticmethod
    def _silent_close(node: _Node, exc: SilentCloseError) -> None:
        """Count a connection the broker dropped unanswered; a few in a row: SecurityProtocolMismatchError."""
        node.silent_closes += 1
        if node.silent_closes >= SILENT_CLOSES_BEFORE_MISMATCH:
            node.silent_closes = 0
            if exc.after_tls:
                raise TlsError(f"{exc} ({SILENT_CLOSES_BEFORE_MISMATCH} TLS connections in a row closed "
                               "unanswered)") from exc
            raise SecurityProtocolMismatchError(
                f"{exc} ({SILENT_CLOSES_BEFORE_MISMATCH} connections in a row closed unanswered: the port "
                f"speaks another security protocol)") from exc

    async def any_connection(self) -> BrokerConnection:
        """An open connection to some broker: an idle open one first, else the next reachable one."""
        open_conns = [n.conn for n in self._nodes.values() if n.conn is not None and n.conn.usable]
        if open_conns:
            return min(open_conns, key=lambda c: c.in_flight)
        known = [n for n in self._nodes.values() if n.info.node_id >= 0] or list(self._nodes.values())
        _SHUFFLE.shuffle(known)
        known.sort(key=lambda n: n.retry_at)  # brokers not in backoff first
        errors = []
        for node in known:
            try:
                return await self.connection(node.info.node_id)
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        raise NoBrokersAvailableError("no broker reachable: " + "; ".join(errors))

    @overload
    async def send(self, request: Request[R], node_id: int | None = None, *, version: int | None = None,
                   low: int = 0, high: int | None = None, expect_response: Literal[True] = True,
                   timeout: float | None = None) -> R: ...

    @overload
    async def send(self, request: Request[R], node_id: int | None = None, *, version: int | None = None,
                   low: int = 0, high: int | None = None, expect_response: bool,
                   timeout: float | None = None) -> R | None: ...

    async def send(self, request: Request[R], node_id: int | None = None, *, version: int | None = None,
                   low: int = 0, high: int | None = None, expect_response: bool = True,
                   timeout: float | None = None) -> R | None:
        """Send to ``node_id`` (any broker when None); the keywords as for ``BrokerConnection.send``."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        return await conn.send(request, version=version, low=low, high=high, expect_response=expect_response,
                               timeout=timeout)

    # -- metadata ---------------------------------------------------------------------------------
    async def refresh_metadata(self, topics: Iterable[str] | None = None, *,
                               allow_auto_create: bool = False) -> ClusterMetadata:
        """Ask a broker for the metadata of ``topics`` (all topics when None) and keep the answer.

        Concurrent refreshes of all topics share one request.
        """
        wanted = None if topics is None else sorted(set(topics))
        if wanted is None and not allow_auto_create and self._refreshing is not None:
            return await asyncio.shield(self._refreshing)
        future = asyncio.ensure_future(retrying(
            lambda: self._fetch_metadata(wanted, allow_auto_create), timeout=self.request_timeout,
            backoff=self.retry_backoff, what="Metadata"))
        if wanted is None and not allow_auto_create:
            self._refreshing = future
            future.add_done_callback(lambda _: setattr(self, "_refreshing", None))
        return await asyncio.shield(future)

    async def _fetch_metadata(self, topics: list[str] | None, allow_auto_create: bool) -> ClusterMetadata:
        conn = await self.any_connection()
        version = conn.version_for(ApiKey.METADATA)
        response = await conn.send(metadata_request(version, topics, allow_auto_create), version=version)
        if getattr(response, "error_code", 0):
            raise KafkaError.for_code(response.error_code)("Metadata refused")
        fresh = ClusterMetadata.from_response(response)
        self.metadata = self.metadata.merged(fresh, topics)
        self._learn_brokers(fresh)
        return self.metadata

    def _learn_brokers(self, metadata: ClusterMetadata) -> None:
        for node_id, info in metadata.brokers.items():
            node = self._nodes.get(node_id)
            if node is None:
                self._nodes[node_id] = _Node(info)
            elif node.info != info:  # moved: the old connection goes to the wrong place
                if node.conn is not None:
                    node.conn.close()
                self._nodes[node_id] = _Node(info)
        if metadata.brokers:
            # The real brokers are known; the bootstrap connections are no longer needed.
            for node_id in [n for n in self._nodes if n < 0]:
                node = self._nodes[node_id]
                if node.conn is not None and node.conn.in_flight == 0:
                    node.conn.close()
                    node.conn = None

    async def metadata_for(self, topics: Iterable[str], *, allow_auto_create: bool = False,
                           max_age: float | None = None) -> ClusterMetadata:
        """Metadata that covers ``topics``, refreshed when one is missing or the snapshot is too old."""
        topics = set(topics)
        max_age = self.config.metadata_max_age_ms / 1000 if max_age is None else max_age
        current = self.metadata
        if current.age() <= max_age and all(current.partitions_for(t) for t in topics):
            return current
        return await self.refresh_metadata(topics, allow_auto_create=allow_auto_create)

    # -- coordinators -----------------------------------------------------------------------------
    async def coordinator(self, key: str, key_type: int = GROUP_COORDINATOR, *, retry: bool = True) -> int:
        """The node id of the coordinator for a group (or transaction) id, looked up once and kept.

        ``retry=False``: one FindCoordinator, its retriable errors (COORDINATOR_NOT_AVAILABLE,
        COORDINATOR_LOAD_IN_PROGRESS) raised for the caller to retry: the admin client does, in
        its one retry policy bounded by the call's timeout, as Kafka's Admin (a lookup is part of
        the call there, not a wait of its own)."""
        cached = self._coordinators.get((key_type, key))
        if cached is not None and cached in self._nodes:
            return cached
        if not retry:
            return await self._find_coordinator(key, key_type)
        return await retrying(lambda: self._find_coordinator(key, key_type), timeout=self.request_timeout,
                              backoff=self.retry_backoff, what=f"FindCoordinator for {key!r}")

    async def _find_coordinator(self, key: str, key_type: int) -> int:
        conn = await self.any_connection()
        version = conn.version_for(ApiKey.FIND_COORDINATOR)
        request = messages.FindCoordinatorRequest()
        if version >= 4:  # KIP-699: a batch of keys
            request.coordinator_keys = [key]
        else:
            request.key = key
        if version >= 1:
            request.key_type = key_type
        response = await conn.send(request, version=version)
        if version >= 4:
            entry = response.coordinators[0]
            error, node_id, host, port = entry.error_code, entry.node_id, entry.host, entry.port
        else:
            error, node_id, host, port = response.error_code, response.node_id, response.host, response.port
        if error:
            raise KafkaError.for_code(error)(f"FindCoordinator for {key!r}")
        info = BrokerInfo(node_id, host, port)
        node = self._nodes.get(node_id)
        if node is None or (node.info.host, node.info.port) != (host, port):
            self._nodes[node_id] = _Node(info)
        self._coordinators[(key_type, key)] = node_id
        return node_id

    def forget_coordinator(self, key: str, key_type: int = GROUP_COORDINATOR) -> None:
        """Drop a cached coordinator (after NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE)."""
        self._coordinators.pop((key_type, key), None)

    # -- closing ----------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        self._closed = True
        conns = [n.conn for n in self._nodes.values() if n.conn is not None] + list(self._retired)
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()
