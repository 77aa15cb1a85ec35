"""The producer: ``AsyncProducer`` for asyncio code, ``Producer`` for everything else.

::

    async with AsyncProducer({"bootstrap.servers": "localhost:9092"}, linger_ms=5) as producer:
        future = await producer.send("orders", b"value", key=b"key")   # queued; no network wait
        metadata = await future                                          # delivered: RecordMetadata

    with Producer({"bootstrap.servers": "localhost:9092"}) as producer:
        producer.produce("orders", b"value", key="key", on_delivery=report)  # a concurrent Future
        producer.poll(0)              # runs delivery callbacks of delivered records, in this thread
        producer.flush(10)

Settings are Kafka's (``ProducerConfig``): a dict of dotted names, keywords with underscores, or
both.  Besides them both producers take ``on_delivery=callable(error, RecordMetadata)``, called
once per record (error None when it was delivered; otherwise the metadata's offset is -1).

``send``/``produce`` encode nothing and touch no socket: the record joins its partition's open
batch (``accumulator``), and the background ``sender`` ships batches to the partition leaders.
They wait (``max.block.ms`` at most) only for what they cannot do without: the metadata of a topic
seen for the first time, or room in ``buffer.memory``.

Many records at once (a file, a data frame's column): ``send_many``/``produce_many`` take a list
of values (and of keys, or one key for all) and encode them straight into their partitions'
batches, with no future and no callback per record; a ``BulkDelivery`` counts what was delivered
and says where it went.  The same batches, sender, partitioner, idempotence and transactions as
single records::

    delivery = producer.produce_many("lines", [b"a", b"b", b"c"], key=b"k")  # queued
    producer.flush()
    delivery.delivered, delivery.failed, delivery.error, delivery.partitions()

Delivery callbacks: ``AsyncProducer`` calls ``on_delivery`` in the event loop as records complete.
``Producer`` runs on the shared client loop thread (``LoopThread``) but calls callbacks, like
confluent-kafka, only from ``poll()``, ``flush()`` and ``close()``, in the thread that calls them:
never on the loop thread.  A program that gives callbacks should call ``poll`` now and then; the
futures ``produce`` returns complete either way.

Transactions (``transactional.id``; Java's API with confluent-kafka's method names)::

    producer = Producer({"bootstrap.servers": "localhost:9092", "transactional.id": "billing-1"})
    producer.init_transactions()            # fences older producers of the id, ends their transaction
    producer.begin_transaction()
    producer.produce("out", b"value")
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 42}, consumer.consumer_group_metadata())
    producer.commit_transaction()           # or abort_transaction(); both flush first

``AsyncProducer`` has the same methods (coroutines but ``begin_transaction``).  A record or request
failing in a transaction makes ``commit_transaction`` raise ``TransactionAbortRequiredError``: abort,
then begin again.  Being fenced (``ProducerFencedError``: another producer took the id) is final:
every later transactional call raises it again.  ``init_transactions``, ``commit_transaction`` and
``abort_transaction`` wait ``timeout`` seconds (default ``max.block.ms``); after a
``ClientTimeoutError`` the same call may be made again to keep waiting for the operation, which
goes on meanwhile, as in Java.  See ``transactions`` for the states.  On a cluster that finalizes
transaction.version 2 (Kafka 4.x's default, and kwire's broker) transactions are v2 (KIP-890 part
2), as Java's: no AddPartitionsToTxn or AddOffsetsToTxn, TxnOffsetCommit v5, and EndTxn v5 bumps
the epoch, fencing any zombie of the last transaction at its partitions; v1 otherwise.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import itertools
import logging
import operator
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import KafkaError
from kwire.protocol.records import Compression
from kwire.protocol.records.bulk import encode_headers
from kwire.settings import ConfigError

from .accumulator import BATCH_OVERHEAD, ProducerBatch, RecordAccumulator, record_size
from .cluster import GROUP_COORDINATOR, Cluster
from .config import ProducerConfig
from .errors import ClientTimeoutError, IllegalStateError, UnsupportedApiError
from .facade import mirrors
from .idempotence import IdempotenceState
from .loop_thread import LoopThread
from .partitioner import Partitioner
from .producer_bulk import BulkDelivery
from .producer_core import (
    CODECS,
    TopicRoute,
    TopicWait,
    accumulator_for,
    append_run_step,
    bulk_groups,
    bulk_keys,
    checked_timestamp,
    complete_bulk,
    record_fields,
    too_large,
    values_column,
)
from .producer_errors import InvalidPartitionError, RecordTooLargeError
from .producer_futures import RecordFuture, resolve, unobserved
from .retry import retrying
from .sender import FIRST_BATCH_PRODUCE_VERSION, Sender, raise_partition_errors
from .transactions import (
    RETRY,
    TRANSACTION_COORDINATOR,
    ConsumerGroupMetadata,
    TransactionAbortRequiredError,
    TransactionManager,
    TxnState,
    classify,
)
from .types import OffsetAndMetadata, RecordMetadata, TopicPartition

if TYPE_CHECKING:
    from kwire.protocol.messages import Request, Response

    from .connection import BrokerConnection
    from .metadata import ClusterMetadata

    ResponseT = TypeVar("ResponseT", bound=Response)  # the answer to a transactional request
T = TypeVar("T")

__all__ = ["AsyncProducer", "BulkDelivery", "Producer", "DeliveryCallback"]

logger = logging.getLogger("kwire.client.producer")

DeliveryCallback = Callable[[BaseException | None, RecordMetadata], Any]
# A record a caller's thread hands to the loop: topic, partition, key, value, timestamp, headers,
# its future and its estimated size.
_HandedRecord = tuple[str, "int | None", "bytes | None", "bytes | None", int, "list[tuple[str, bytes | None]] | None",
                      "RecordFuture", int]

_NEW, _RUNNING, _CLOSING, _CLOSED = range(4)


def _record_done(delivery: BulkDelivery, index: int, future: Any) -> None:
    """One record of a bulk call sent record by record (an old broker's message sets)."""
    error = asyncio.CancelledError() if future.cancelled() else future.exception()
    if error is None:
        metadata = future.result()
        delivery._complete(metadata.partition, metadata.offset, (index,), 0, 1, None)
    else:
        delivery._complete(-1, -1, (index,), 0, 1, error)


_ON_DELIVERY = operator.attrgetter("on_delivery")
_HANDOFF_FIELDS = 8  # a record in the sync producer's handoff: topic .. size (Producer.produce)


def _split_settings(conf: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Take the producer's own options (not Kafka settings) out of ``conf`` and ``kwargs``.
    ``conf`` is a mapping of Kafka settings, a ready ``ProducerConfig``, or None."""
    conf = dict(conf) if isinstance(conf, Mapping) else conf
    own = {}
    for key in ("on_delivery", "_max_produce_version"):
        if isinstance(conf, dict) and key in conf:
            own[key] = conf.pop(key)
        if key in kwargs:
            own[key] = kwargs.pop(key)
    return conf, kwargs, own


class AsyncProducer:
    """An asyncio Kafka producer.  ``await start()`` (or ``async with``) before sending."""

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any):
        conf, kwargs, own = _split_settings(conf, kwargs)
        if isinstance(conf, ProducerConfig):
            config = conf.with_(**kwargs) if kwargs else conf
        else:
            config = ProducerConfig.from_settings(conf, **kwargs)
        self.config = config
        self._on_delivery: DeliveryCallback | None = own.get("on_delivery")
        # Tests force an old broker's Produce range with this (e.g. 2 for message sets, magic 1).
        self._max_produce_version: int | None = own.get("_max_produce_version")
        # The config turns idempotence off when acks/retries/in-flight rule it out and it was not
        # asked for; whether it was asked for also decides what an old broker means (start()).
        self._idempotent = bool(config.enable_idempotence)
        self._idempotence_explicit = "enable_idempotence" in getattr(config, "_given", ()) \
            or config.transactional_id is not None
        self._txn = None if config.transactional_id is None else \
            TransactionManager(config.transactional_id, config.transaction_timeout_ms)
        self._txn_op: tuple[str, asyncio.Future[None]] | None = None  # a transactional call still running
        self._idem: IdempotenceState | None = None
        self._compression = CODECS[config.compression_type]
        self._max_block = self.config.max_block_ms / 1000
        self._max_request_size = self.config.max_request_size
        self._buffer_memory = self.config.buffer_memory
        self._partitioner = Partitioner.from_config(self.config)
        self._state = _NEW
        self._legacy = False
        # Made by start(); nothing reads them before (a producer not started is refused, or closes
        # without them).
        self._cluster: Cluster
        self._accumulator: RecordAccumulator
        self._sender: Sender
        self._loop: asyncio.AbstractEventLoop
        self._routes: dict[str, TopicRoute] = {}
        self._routes_of: ClusterMetadata | None = None  # the metadata snapshot _routes was computed from
        self._topics: set[str] = set()     # topics sent to: kept in the metadata refreshes
        self._topic_waits: dict[str, asyncio.Future[TopicRoute]] = {}

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to a bootstrap server and learn its versions; background sending starts."""
        if self._state != _NEW:
            raise IllegalStateError("this producer was already started")
        self._loop = asyncio.get_running_loop()
        config = self.config
        self._cluster = cluster = Cluster(config)
        try:
            conn = await retrying(cluster.any_connection, timeout=self._max_block, backoff=cluster.retry_backoff,
                                  what="connecting to the bootstrap servers")
            self._legacy = self._choose_format(conn)
        except BaseException:
            await cluster.close()
            raise
        idempotence = self._idem = IdempotenceState(transactional=self._txn is not None) if self._idempotent else None
        self._accumulator = accumulator_for(config)
        self._sender = Sender(cluster, self._accumulator, config, deliver=self._complete_batch,
                              idempotence=idempotence, legacy=self._legacy, topics=lambda: self._topics,
                              max_produce_version=self._max_produce_version, transactions=self._txn)
        self._accumulator.wakeup = self._sender.wakeup
        self._sender.start()
        self._state = _RUNNING

    def _choose_format(self, conn: BrokerConnection) -> bool:
        """Record batches (Produce v3+), or message sets for a broker that only has Produce 0-2."""
        top = self._max_produce_version
        if conn.supports(ApiKey.PRODUCE, FIRST_BATCH_PRODUCE_VERSION, top):
            return False
        if not conn.supports(ApiKey.PRODUCE, 0, top if top is not None and top < 2 else 2):
            raise UnsupportedApiError(f"{conn.host}:{conn.port} has no Produce version kwire speaks")
        if self._txn is not None:
            raise UnsupportedApiError(f"transactional.id is set, but {conn.host}:{conn.port} only speaks Produce v0-2 "
                                      "(message format v0/v1, which has no transactions)")
        if self._idempotent:
            if self._idempotence_explicit:
                raise UnsupportedApiError(
                    f"enable.idempotence=true, but {conn.host}:{conn.port} only speaks Produce v0-2 "
                    "(message format v0/v1, which has no producer ids)")
            logger.warning("%s:%d only speaks Produce v0-2 (message format v0/v1): idempotence is off",
                           conn.host, conn.port)
            self._idempotent = False
        if self._compression == Compression.ZSTD:
            raise ConfigError("compression.type=zstd needs Produce v3+ (record batches); "
                              f"{conn.host}:{conn.port} only speaks Produce v0-2")
        return True

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now (linger or not) and wait until every record sent so far
        is delivered or failed.  ``ClientTimeoutError`` if that takes longer than ``timeout``."""
        self._check_started()
        await self._flush(timeout)

    async def _flush(self, timeout: float | None) -> None:
        sender, accumulator = self._sender, self._accumulator
        waits = [batch.done() for batch in accumulator.incomplete]
        if not waits:
            return
        sender.flushing += 1
        sender.wakeup()
        try:
            _, pending = await asyncio.wait(waits, timeout=timeout)
        finally:
            sender.flushing -= 1
        if pending:
            raise ClientTimeoutError(f"flush: {accumulator.record_count} record(s) still not delivered "
                                     f"after {timeout:g} s")

    async def close(self, timeout: float | None = None) -> None:
        """Flush (for ``timeout`` seconds at most; None waits as long as delivery takes), then fail
        whatever is left, stop and disconnect.  ``close(0)`` gives up on queued records at once."""
        if self._state in (_CLOSING, _CLOSED):
            return
        if self._state == _NEW:
            self._state = _CLOSED
            return
        self._state = _CLOSING
        try:
            if timeout is None or timeout > 0:
                try:
                    await self._flush(timeout)
                except ClientTimeoutError:
                    logger.warning("closing with %d record(s) not delivered", self._accumulator.record_count)
        finally:
            self._sender.abort(IllegalStateError("the producer was closed before the record was delivered"))
            await self._sender.stop()
            await self._cluster.close()
            self._state = _CLOSED

    def _check_started(self) -> None:
        if self._state != _RUNNING:
            raise IllegalStateError("the producer is " + ("not started" if self._state == _NEW else "closed"))

    # -- sending ----------------------------------------------------------------------------------
    async def send(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Mapping[str, Any] | list[tuple[str, Any]] | None = None) -> asyncio.Future[RecordMetadata]:
        """Queue a record; returns a future of its ``RecordMetadata`` (await it for delivery).

        Waits only for a new topic's metadata or for room in ``buffer.memory`` (``max.block.ms``
        at most; then ``ClientTimeoutError``).  A record too large to ever send fails its future
        with ``RecordTooLargeError``.
        """
        if self._state != _RUNNING:
            self._check_started()
        if self._txn is not None:
            self._txn.check_send()
        key, value, headers = record_fields(key, value, headers, self._legacy)
        timestamp = int(time.time() * 1000) if timestamp_ms is None else checked_timestamp(timestamp_ms)
        size = record_size(key, value, headers)
        future = self._loop.create_future()
        if size > self._max_request_size or size > self._buffer_memory:
            error = self._too_large(size)
            if self._txn is not None:
                self._txn.fail(error)  # as Java: a record refused in a transaction fails the transaction
            future.set_exception(error)
            if self._on_delivery is not None:
                future.exception()  # reported through the callback
                self._call(self._on_delivery, error, RecordMetadata(
                    topic, -1 if partition is None else partition, -1, timestamp,
                    -1 if key is None else len(key), -1 if value is None else len(value)))
            return future
        # The topic's route from the cached snapshot without a coroutine call when it is there.
        route = self._routes.get(topic) if self._cluster.metadata is self._routes_of else None
        if route is None or partition is not None and (type(partition) is not int
                                                       or not 0 <= partition < route.count):
            route = await self._route(topic, partition)
        accumulator = self._accumulator
        if not accumulator.has_room(size):
            await accumulator.wait_for_room(size, self._max_block)
        if self._state != _RUNNING:
            self._check_started()  # closed while this send waited
        if self._txn is not None:
            self._txn.check_send()  # (a commit or abort may have begun while this send waited)
        self._append(topic, route, partition, key, value, timestamp, headers, future, size)
        return future

    def _too_large(self, size: int) -> RecordTooLargeError:
        return too_large(size, self._max_request_size, self._buffer_memory)

    async def send_many(self, topic: str, values: Sequence[bytes | str | None],
                        keys: Sequence[bytes | str | None] | None = None, *, key: bytes | str | None = None,
                        partition: int | None = None, timestamp_ms: int | None = None,
                        headers: Mapping[str, Any] | list[tuple[str, Any]] | None = None) -> BulkDelivery:
        """Queue many records at once: ``values[i]`` with ``keys[i]`` (or ``key`` for all; neither:
        keyless), each with the same ``headers`` and timestamp (default: now).  Returns when every
        record is in a batch; the ``BulkDelivery`` counts them as they are delivered (``await`` it).

        The records go where ``send`` would put them one by one (``partition``, the key's
        partition, or sticky batches of keyless records) and are encoded straight into batches,
        without a future or a callback per record (``on_delivery`` is not called for them).  Waits
        as ``send`` does (a new topic's metadata, room in ``buffer.memory``) and raises what it
        raises; records too large to send fail in the delivery with ``RecordTooLargeError``.
        """
        if self._state != _RUNNING:
            self._check_started()
        if self._txn is not None:
            self._txn.check_send()
        values = values_column(values)
        key_column = bulk_keys(values, keys, key)
        header_list = record_fields(None, None, headers, self._legacy)[2]
        timestamp = int(time.time() * 1000) if timestamp_ms is None else checked_timestamp(timestamp_ms)
        delivery = BulkDelivery(topic, len(values), self._loop)
        if not values:
            return delivery
        route = await self._route(topic, partition)
        if self._legacy:
            await self._send_many_singly(topic, route, values, key_column, partition, timestamp, delivery)
            return delivery
        hdr = encode_headers(header_list) if header_list else b"\x00"
        groups = bulk_groups(self._partitioner, topic, values, key_column, partition, route)
        for n, (p, group, vals, ks) in enumerate(groups):
            try:
                vals = await self._append_run(topic, route, p, group, vals, ks, hdr, timestamp, delivery)
            except BaseException as exc:
                # What was not queued fails with the call's error, so that the delivery completes.
                done = getattr(exc, "_bulk_queued", 0)
                delivery._fail(group, done, len(vals), exc)
                for _, later, later_vals, _ in groups[n + 1:]:
                    delivery._fail(later, 0, len(later_vals), exc)
                raise
        return delivery

    async def _append_run(self, topic: str, route: TopicRoute, partition: int | None, group: Sequence[int] | None,
                          values: Sequence[bytes | str | None], keys: Any, hdr: bytes, timestamp: int,
                          delivery: BulkDelivery) -> Sequence[bytes | str | None]:
        """Queue ``values`` (records ``group`` of the call, or all of it) for ``partition`` (None:
        sticky, a partition per batch).  An exception carries how many were queued (``_bulk_queued``)."""
        acc = self._accumulator
        partitioner = self._partitioner
        max_record = min(self._max_request_size, self._buffer_memory) - BATCH_OVERHEAD
        room = min(acc.batch_size, self._buffer_memory)
        i, count = 0, len(values)
        try:
            while i < count:
                if not acc.has_room(room):
                    await acc.wait_for_room(room, self._max_block)
                    if self._state != _RUNNING:
                        self._check_started()
                    if self._txn is not None:
                        self._txn.check_send()
                i, closed, values = append_run_step(acc, partitioner, topic, route, partition, group, values, keys,
                                                    hdr, i, timestamp, delivery, max_record, self._too_large,
                                                    self._txn)
                if closed:
                    await asyncio.sleep(0)  # the sender ships the full batch while the rest is encoded
        except BaseException as exc:
            exc._bulk_queued = i  # type: ignore[attr-defined]
            raise
        return values

    async def _send_many_singly(self, topic: str, route: TopicRoute, values: Sequence[bytes | str | None], keys: Any,
                                partition: int | None, timestamp: int, delivery: BulkDelivery) -> None:
        """``send_many`` to a broker that only takes message sets (Produce v0-2): record by record."""
        for i, value in enumerate(values):
            try:
                record_key = keys[i] if isinstance(keys, (list, tuple)) else keys
                value = record_fields(None, value, None, True)[1]
                size = record_size(record_key, value, None)
                if size > self._max_request_size or size > self._buffer_memory:
                    delivery._fail((i,), 0, 1, self._too_large(size))
                    continue
                accumulator = self._accumulator
                if not accumulator.has_room(size):
                    await accumulator.wait_for_room(size, self._max_block)
                    self._check_started()
            except BaseException as exc:
                delivery._fail(None, i, len(values), exc)
                raise
            token = self._record_token()
            token.add_done_callback(functools.partial(_record_done, delivery, i))
            self._append(topic, route, partition, record_key, value, timestamp, None, token, size)

    def _record_token(self) -> Any:
        """What ``_complete_batch`` completes for one record: a future of its metadata."""
        return self._loop.create_future()

    def _append(self, topic: str, route: TopicRoute, partition: int | None, key: bytes | None,
                value: bytes | None, timestamp: int, headers: Any, token: Any, size: int) -> None:
        """Put a checked record in its partition's batch (explicit, keyed or sticky)."""
        accumulator = self._accumulator
        if partition is not None:
            tp = route.partitions[partition]
            accumulator.append(tp, key, value, timestamp, headers, token, size)
        else:
            # As Java: when the record would open a new batch, the partitioner hears of it first, so a
            # keyless record's sticky partition moves on once its batch is closed.
            partitioner = self._partitioner
            partition = partitioner.partition(topic, key, route.count, route.available)
            tp = route.partitions[partition]
            if not accumulator.append(tp, key, value, timestamp, headers, token, size, new_batch=False):
                partitioner.on_new_batch(topic, partition)
                partition = partitioner.partition(topic, key, route.count, route.available)
                tp = route.partitions[partition]
                accumulator.append(tp, key, value, timestamp, headers, token, size)
        if self._txn is not None:
            self._txn.add_partition(tp)

    async def _route(self, topic: str, partition: int | None) -> TopicRoute:
        """The topic's partitions, from the metadata (fetched, and created if the broker
        auto-creates, the first time); checks an explicit ``partition`` against them."""
        route = self._cached_route(topic) or await self._wait_for_topic(topic)
        if partition is not None and (type(partition) is not int or not 0 <= partition < route.count):
            if type(partition) is not int:
                raise TypeError(f"partition must be an int, not {type(partition).__name__}")
            # Perhaps the topic grew: look again before refusing.
            await self._cluster.refresh_metadata([topic])
            route = await self._wait_for_topic(topic)
            if not 0 <= partition < route.count:
                raise InvalidPartitionError(f"topic {topic!r} has partitions 0..{route.count - 1}; "
                                            f"partition {partition} does not exist")
        return route

    def _cached_route(self, topic: str) -> TopicRoute | None:
        """The topic's route from the current metadata snapshot, if that has the topic."""
        metadata = self._cluster.metadata
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

    async def _wait_for_topic(self, topic: str) -> TopicRoute:
        route = self._cached_route(topic)
        if route is not None:
            return route
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, not {topic!r}")
        wait = self._topic_waits.get(topic)
        if wait is None:
            wait = self._topic_waits[topic] = asyncio.ensure_future(self._fetch_topic(topic))
            wait.add_done_callback(lambda _: self._topic_waits.pop(topic, None))
        return await asyncio.shield(wait)

    async def _fetch_topic(self, topic: str) -> TopicRoute:
        cluster = self._cluster
        wait = TopicWait(topic, self.config.max_block_ms, cluster.retry_backoff)
        while (left := wait.left()) > 0:
            try:
                metadata = await asyncio.wait_for(cluster.refresh_metadata([topic], allow_auto_create=True), left)
            except asyncio.TimeoutError:
                break
            except Exception as exc:  # noqa: BLE001 - retriable ones are retried until max.block.ms
                wait.failed(exc)
            else:
                route = wait.answered(metadata, self._cached_route(topic))
                if route is not None:
                    return route
            pause = wait.pause()
            if pause > 0:
                await asyncio.sleep(pause)
        raise wait.timed_out()

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition numbers (fetching its metadata, or creating it as the broker allows)."""
        self._check_started()
        route = await self._wait_for_topic(topic)
        return list(range(route.count))

    # -- transactions -----------------------------------------------------------------------------
    @property
    def _tm(self) -> TransactionManager:
        """The transaction manager, in the code only a transactional producer runs."""
        assert self._txn is not None  # its callers are reached through _transactions()
        return self._txn

    @property
    def _idempotence(self) -> IdempotenceState:
        """The sequence state, in the code only an idempotent (or transactional) producer runs."""
        assert self._idem is not None  # start() made it; a transactional producer is idempotent
        return self._idem

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError("transactional methods need a transactional.id in the producer's settings")
        self._check_started()
        return self._txn

    def begin_transaction(self) -> None:
        """Start a transaction: records sent and offsets given until commit or abort belong to it."""
        self._transactions().begin()

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Get the transactional id's producer id and epoch from its coordinator, once, before the
        first transaction.  Fences any earlier producer with the id and aborts its open transaction."""
        txn = self._transactions()

        async def work(bound: float) -> None:
            producer_id, epoch = await self._init_producer_id(None, bound)
            self._idempotence.set_producer_id(producer_id, epoch)
            txn.initialized(producer_id, epoch)
            self._sender.wakeup()

        await self._txn_call("init_transactions", txn.begin_init, work, timeout)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every record of the transaction, then commit it (EndTxn).  Raises
        ``TransactionAbortRequiredError`` when something in the transaction failed."""
        txn = self._transactions()

        async def work(bound: float) -> None:
            await self._flush(None)                 # each record delivered or failed
            await self._sender.transaction_quiet()
            self._raise_if_failed("commit the transaction")
            if txn.started:
                try:
                    await self._end_txn(True, bound)
                except Exception:
                    self._raise_if_failed("commit the transaction")
                    raise
            if txn.upgrading_to_v2:
                await self._bump_epoch(bound)
            txn.completed()

        await self._txn_call("commit_transaction", txn.begin_commit, work, timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent fail with ``TransactionAbortedError``, those
        sent are never seen by read_committed consumers; its offsets are not committed."""
        txn = self._transactions()

        async def work(bound: float) -> None:
            self._sender.wakeup()                   # fails the queued records
            await self._flush(None)                 # the records in flight end
            await self._sender.transaction_quiet()
            if txn.state is TxnState.FATAL_ERROR and txn.error is not None:  # (FATAL_ERROR always has one)
                raise txn.error
            if txn.started:
                await self._end_txn(False, bound)
            if self._idempotence.bump_needed or txn.upgrading_to_v2:
                # A record failed and left its partition's sequences with a gap: the coordinator
                # bumps the epoch for this producer id (KIP-360), and every partition restarts at 0.
                # (A v2 EndTxn bumped it already: the new epoch cleared bump_needed.)
                await self._bump_epoch(bound)
            txn.completed()

        await self._txn_call("abort_transaction", txn.begin_abort, work, timeout)

    async def _bump_epoch(self, bound: float) -> None:
        """InitProducerId with the current id and epoch (KIP-360): the coordinator bumps the epoch
        for this producer, and every partition's sequence restarts at 0."""
        txn = self._tm
        producer_id, epoch = await self._init_producer_id((txn.producer_id, txn.epoch), bound)
        self._idempotence.set_producer_id(producer_id, epoch)
        txn.producer_id, txn.epoch = producer_id, epoch

    async def send_offsets_to_transaction(self, offsets: Any, group_metadata: ConsumerGroupMetadata | str,
                                          timeout: float | None = None) -> None:
        """Commit consumed ``offsets`` (partition -> next offset to read, or a list of objects with
        topic, partition and offset, as confluent-kafka's) for the consumer group of
        ``group_metadata`` (``Consumer.consumer_group_metadata()``, or a group id) with the
        transaction: they count only if it commits."""
        txn = self._transactions()
        chosen = _transaction_offsets(offsets)
        group = group_metadata if isinstance(group_metadata, ConsumerGroupMetadata) else \
            ConsumerGroupMetadata(str(group_metadata))

        async def work(bound: float) -> None:
            if not chosen:
                return  # nothing to commit (Java's no-op)
            txn.started = True
            try:
                if not txn.v2:  # v2: TxnOffsetCommit v5 adds the group itself
                    await self._add_offsets(group.group_id, bound)
                await self._txn_offset_commit(chosen, group, bound)
            except Exception as exc:
                raise self._txn_failed(exc) from None

        await self._txn_call("send_offsets_to_transaction", lambda: txn.check_send("send offsets"), work, timeout)

    async def _txn_call(self, name: str, begin: Callable[[], None], work: Callable[[float], Awaitable[None]],
                        timeout: float | None) -> None:
        """Run one transactional operation, waiting ``timeout`` seconds for it (None: max.block.ms,
        negative: no limit).  After a timeout the operation goes on; calling the same method again
        waits for it (Java's rule), calling another is refused until then."""
        op = self._txn_op
        if op is not None and op[0] != name and op[1].done():
            op = self._txn_op = None  # it ended since it timed out; its outcome is in the state now
        if op is not None and op[0] != name:
            raise IllegalStateError(f"{op[0]}() is still in progress (it timed out): call it again to finish it")
        wait = self._max_block if timeout is None else (None if timeout < 0 else timeout)
        if op is None:
            begin()
            bound = max(wait or 0.0, self._max_block, self._cluster.request_timeout)
            task = asyncio.ensure_future(work(bound))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # read by a caller, or never
            op = self._txn_op = (name, task)
        done, _ = await asyncio.wait([op[1]], timeout=wait)
        if not done:
            raise ClientTimeoutError(f"{name}() did not finish within {wait:g} s; it goes on: call {name}() "
                                     "again to wait for it")
        self._txn_op = None
        op[1].result()

    def _raise_if_failed(self, action: str) -> None:
        txn = self._tm
        if txn.state is TxnState.FATAL_ERROR and txn.error is not None:  # (FATAL_ERROR always has one)
            raise txn.error.with_traceback(None)
        if txn.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortRequiredError(
                f"cannot {action}: it failed ({txn.error}); call abort_transaction()") from txn.error

    def _txn_failed(self, exc: BaseException) -> BaseException:
        """What a failed transactional request means: retriable errors (a timeout) leave the state
        as it is; others go to the state machine, which turns fencing into ProducerFencedError."""
        if classify(exc) == RETRY:
            return exc
        return self._tm.fail(exc)

    async def _coordinator(self, build: Callable[[BrokerConnection], tuple[Request[ResponseT], int]],
                           check: Callable[[ResponseT, int], T], what: str, bound: float, *,
                           group: str | None = None) -> T:
        txn = self._tm
        key, key_type = (txn.transactional_id, TRANSACTION_COORDINATOR) if group is None else (group, GROUP_COORDINATOR)
        return await self._sender.coordinator_call(key, key_type, build, check, what=what, timeout=bound)

    async def _init_producer_id(self, current: tuple[int, int] | None, bound: float) -> tuple[int, int]:
        """InitProducerId for the transactional id; ``current``: the id and epoch to bump (KIP-360)."""
        txn = self._tm
        request_type = messages.InitProducerIdRequest

        def build(conn: BrokerConnection) -> tuple[messages.InitProducerIdRequest, int]:
            self._note_transaction_version(conn)
            # v3+ carries the current id and epoch; v6 adds two-phase commit (KIP-939), not used.
            version = conn.version_for(request_type.API_KEY, 0, 5)
            if current is not None and version < 3:
                raise UnsupportedApiError("bumping the epoch after a failed record needs InitProducerId v3+ (KIP-360)")
            request = request_type(transactional_id=txn.transactional_id, transaction_timeout_ms=txn.timeout_ms)
            if version >= 3:
                request.producer_id, request.producer_epoch = current or (-1, -1)
            return request, version

        def check(response: messages.InitProducerIdResponse, version: int) -> tuple[int, int]:
            if response.error_code:
                raise KafkaError.for_code(response.error_code)(
                    f"InitProducerId for transactional.id {txn.transactional_id!r}")
            return response.producer_id, response.producer_epoch

        try:
            return await self._coordinator(build, check, "InitProducerId", bound)
        except Exception as exc:
            raise self._txn_failed(exc) from None

    async def _end_txn(self, commit: bool, bound: float) -> None:
        txn = self._tm
        request_type = messages.EndTxnRequest
        what = f"EndTxn({'commit' if commit else 'abort'}) for transactional.id {txn.transactional_id!r}"

        def build(conn: BrokerConnection) -> tuple[messages.EndTxnRequest, int]:
            self._note_transaction_version(conn)
            # v5: transactions v2 (KIP-890), the epoch bumped at every end; v0-4 keep it.
            version = conn.version_for(request_type.API_KEY, 5, 5) if txn.v2 else \
                conn.version_for(request_type.API_KEY, 0, 4)
            return request_type(transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                                producer_epoch=txn.epoch, committed=commit), version

        def check(response: messages.EndTxnResponse, version: int) -> None:
            if response.error_code:
                raise KafkaError.for_code(response.error_code)(what)
            if version >= 5 and response.producer_id >= 0:
                # The id and epoch of the next transaction (a new id at epoch 0 once the epoch ran
                # out); every partition's sequence restarts at 0 with them, as in Java.
                self._idempotence.set_producer_id(response.producer_id, response.producer_epoch)
                txn.producer_id, txn.epoch = response.producer_id, response.producer_epoch

        try:
            await self._coordinator(build, check, what, bound)
        except Exception as exc:
            raise self._txn_failed(exc) from None

    def _note_transaction_version(self, conn: BrokerConnection) -> None:
        """The cluster's transaction.version as the coordinator reports it (KIP-584): the next
        transaction begun is a v2 one at 2 or more, if the coordinator speaks EndTxn v5."""
        level = conn.finalized_features.get("transaction.version", 0)
        self._tm.finalized_tv = level if conn.supports(messages.EndTxnRequest.API_KEY, 5, 5) else min(level, 1)

    async def _add_offsets(self, group_id: str, bound: float) -> None:
        txn = self._tm
        request_type = messages.AddOffsetsToTxnRequest

        def build(conn: BrokerConnection) -> tuple[messages.AddOffsetsToTxnRequest, int]:
            version = conn.version_for(request_type.API_KEY, 0, 4)
            return request_type(transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                                producer_epoch=txn.epoch, group_id=group_id), version

        def check(response: messages.AddOffsetsToTxnResponse, version: int) -> None:
            if response.error_code:
                raise KafkaError.for_code(response.error_code)(f"AddOffsetsToTxn for group {group_id!r}")

        await self._coordinator(build, check, "AddOffsetsToTxn", bound)

    async def _txn_offset_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                                 group: ConsumerGroupMetadata, bound: float) -> None:
        """TxnOffsetCommit to the group's coordinator, which stages the offsets until EndTxn."""
        txn = self._tm
        request_type = messages.TxnOffsetCommitRequest
        topic_type = request_type.TxnOffsetCommitRequestTopic
        partition_type = topic_type.TxnOffsetCommitRequestPartition
        by_topic: dict[str, list[messages.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition]] = {}
        for tp, om in offsets.items():
            by_topic.setdefault(tp.topic, []).append(partition_type(
                partition_index=tp.partition, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
                committed_metadata=om.metadata))

        def build(conn: BrokerConnection) -> tuple[messages.TxnOffsetCommitRequest, int]:
            # v3 adds the member's generation and id (KIP-447); v5 is transactions v2 (KIP-890),
            # which adds the group to the transaction, and only that.
            version = conn.version_for(request_type.API_KEY, 5, 5) if txn.v2 else \
                conn.version_for(request_type.API_KEY, 0, 4)
            request = request_type(transactional_id=txn.transactional_id, group_id=group.group_id,
                                   producer_id=txn.producer_id, producer_epoch=txn.epoch,
                                   topics=[topic_type(name=t, partitions=ps) for t, ps in by_topic.items()])
            if version >= 3:
                request.generation_id, request.member_id = group.generation_id, group.member_id
                request.group_instance_id = group.group_instance_id
            return request, version

        def check(response: messages.TxnOffsetCommitResponse, version: int) -> None:
            codes = {TopicPartition(t.name, p.partition_index): p.error_code
                     for t in response.topics for p in t.partitions}
            raise_partition_errors(codes, f"TxnOffsetCommit for group {group.group_id!r}")

        await self._coordinator(build, check, "TxnOffsetCommit", bound, group=group.group_id)

    # -- delivery ---------------------------------------------------------------------------------
    def _complete_batch(self, batch: ProducerBatch, base_offset: int, log_append_time: int,
                        error: BaseException | None) -> None:
        """Complete each record's future (and call on_delivery): the sender's verdict on a batch."""
        if batch.sections is not None:
            complete_bulk(batch, base_offset, error)
            return
        topic, partition = batch.tp
        callback = self._on_delivery
        offset = base_offset
        if error is None:
            for key, value, timestamp, future in zip(batch.keys, batch.values, batch.timestamps, batch.tokens,
                                                     strict=True):
                metadata = RecordMetadata(topic, partition, offset, timestamp if log_append_time < 0 else log_append_time,
                                          -1 if key is None else len(key), -1 if value is None else len(value))
                if offset >= 0:
                    offset += 1
                if not future.done():
                    future.set_result(metadata)
                if callback is not None:
                    self._call(callback, None, metadata)
            return
        for key, value, timestamp, future in zip(batch.keys, batch.values, batch.timestamps, batch.tokens, strict=True):
            if not future.done():
                future.set_exception(error)
                if callback is not None:
                    future.exception()  # reported through the callback: no "never retrieved" warning
            if callback is not None:
                self._call(callback, error, RecordMetadata(topic, partition, -1, timestamp, -1 if key is None else len(key),
                                                           -1 if value is None else len(value)))

    @staticmethod
    def _call(callback: DeliveryCallback, error: BaseException | None, metadata: RecordMetadata) -> None:
        try:
            callback(error, metadata)
        except Exception:  # noqa: BLE001 - one bad callback must not stop the others
            logger.exception("on_delivery callback failed")


def _transaction_offsets(offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    """``send_offsets_to_transaction``'s offsets as partition -> OffsetAndMetadata: from a mapping
    of partitions to offsets (ints or OffsetAndMetadata), or from objects with topic, partition and
    offset (confluent-kafka's TopicPartition list)."""
    items: Iterable[tuple[Any, Any]]
    if isinstance(offsets, Mapping):
        items = offsets.items()
    else:
        items = [((o.topic, o.partition), OffsetAndMetadata(o.offset, getattr(o, "metadata", None) or "",
                                                           _or(getattr(o, "leader_epoch", None), -1)))
                 for o in offsets]
    chosen = {}
    for tp, value in items:
        om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
        tp = TopicPartition(*tp)
        if om.offset < 0:
            raise ValueError(f"cannot commit offset {om.offset} for {tp}")
        chosen[tp] = om
    return chosen


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


class _SyncCore(AsyncProducer):
    """The AsyncProducer behind ``Producer``: records arrive through a queue from other threads,
    and outcomes go to ``RecordFuture``s and a queue of callbacks for the callers' threads."""

    def __init__(self, conf: Mapping[str, Any] | None, kwargs: dict[str, Any]):
        super().__init__(conf, **kwargs)
        # Appended by callers, drained on the loop: each record as _HANDOFF_FIELDS items in a row (one
        # atomic extend), not a tuple: a tuple holding the future was a second object per record
        # for the young collections until the drain.
        # (Items of every type of a record's fields: Any.)
        self.handoff: collections.deque[Any] = collections.deque()
        self.drain_scheduled = False
        self.taken_bytes = 0                                     # written by the loop thread only
        self.condition = threading.Condition()                   # shared by every RecordFuture
        # (callback, error, metadata)
        self.callbacks: collections.deque[tuple[Callable[..., object], BaseException | None,
                                                RecordMetadata | None]] = collections.deque()
        self.callbacks_ready = threading.Event()

    def drain_handoff(self) -> None:
        """On the loop: move records produced by other threads into their batches, in order."""
        self.drain_scheduled = False
        handoff = self.handoff
        take = handoff.popleft
        # The last topic's route: nothing here awaits, so the metadata cannot change meanwhile.
        last_topic = last_route = None
        while handoff:
            # (Into variables, nothing else: the future's references are counted below.)
            topic, partition, key, value = take(), take(), take(), take()
            timestamp, headers, future, size = take(), take(), take(), take()
            self.taken_bytes += size
            if self._state != _RUNNING:
                self.fail_record(future, key, value, timestamp, topic, partition,
                                 IllegalStateError("the producer was closed before the record was queued"))
                continue
            if self._txn is not None and self._txn.state is not TxnState.IN_TRANSACTION:
                try:
                    self._txn.check_send()
                except Exception as exc:  # noqa: BLE001 - the record's outcome
                    self.fail_record(future, key, value, timestamp, topic, partition, exc)
                continue
            if topic == last_topic:
                route = last_route
            else:
                route = self._cached_route(topic)
                last_topic, last_route = (topic, route) if route is not None else (None, None)
            if route is None or (partition is not None and partition >= route.count):
                # The topic's metadata went away since produce() looked: wait like send() does.
                # Records after it may overtake it; that is a topic changing under the producer.
                asyncio.ensure_future(self._append_late((topic, partition, key, value, timestamp, headers, future,
                                                         size)))
                continue
            if unobserved(future):
                # The caller dropped it and nothing waits on it: the batch keeps no future (and
                # the collector walks no object) for this record.  Its outcome still counts in
                # flush() and len(); only the future, which nobody can reach, is not completed.
                future = None
            self._append(topic, route, partition, key, value, timestamp, headers, future, size)

    async def _append_late(self, record: _HandedRecord) -> None:
        """A handed-off record whose topic must be looked up again (``drain_handoff``)."""
        topic, partition, key, value, timestamp, headers, future, size = record
        try:
            route = await self._route(topic, partition)
            if self._state != _RUNNING:
                raise IllegalStateError("the producer was closed before the record was queued")
            if self._txn is not None:
                self._txn.check_send()
        except Exception as exc:  # noqa: BLE001 - the record's outcome
            self.fail_record(future, key, value, timestamp, topic, partition, exc)
            return
        self._append(topic, route, partition, key, value, timestamp, headers, future, size)

    async def wait_for_room(self, size: int) -> None:
        self.drain_handoff()
        await self._accumulator.wait_for_room(size, self._max_block)

    async def flush_all(self, timeout: float | None) -> None:
        self.drain_handoff()
        await self.flush(timeout)

    async def close_all(self, timeout: float | None) -> None:
        self.drain_handoff()
        await self.close(timeout)

    async def begin_all(self) -> None:
        self.begin_transaction()

    async def commit_all(self, timeout: float | None) -> None:
        self.drain_handoff()  # records produced before the call are in the transaction
        await self.commit_transaction(timeout)

    async def abort_all(self, timeout: float | None) -> None:
        self.drain_handoff()
        await self.abort_transaction(timeout)

    def fail_record(self, future: RecordFuture, key: bytes | None, value: bytes | None, timestamp: int, topic: str,
                    partition: int | None, error: BaseException) -> None:
        """A record that never made it into a batch (any thread)."""
        metadata = RecordMetadata(topic, -1 if partition is None else partition, -1, timestamp,
                                  -1 if key is None else len(key), -1 if value is None else len(value))
        resolve(self.condition, (future,), (metadata,), error)
        if future.on_delivery is not None:
            self.callbacks.append((future.on_delivery, error, metadata))
            self.callbacks_ready.set()

    def _record_token(self) -> RecordFuture:
        return RecordFuture(self.condition)

    async def send_many_all(self, *args: Any, **kwargs: Any) -> BulkDelivery:
        self.drain_handoff()  # records produced before the call go first
        return await self.send_many(*args, **kwargs)

    def _complete_batch(self, batch: ProducerBatch, base_offset: int, log_append_time: int,
                        error: BaseException | None) -> None:
        if batch.sections is not None:
            complete_bulk(batch, base_offset, error)
            return
        topic, partition = batch.tp
        if base_offset < 0:
            offsets: Iterator[int] = itertools.repeat(-1)
        else:
            offsets = itertools.count(base_offset)
        timestamps = itertools.repeat(log_append_time) if log_append_time >= 0 and error is None else batch.timestamps
        rows: Iterable[tuple[int, bytes | None, bytes | None, int]] = zip(offsets, batch.keys, batch.values, timestamps,
                                                                          strict=False)
        futures = batch.tokens
        dropped = futures.count(None)  # records whose future nobody could see (drain_handoff)
        if dropped:
            if dropped == len(futures):
                return
            rows = itertools.compress(rows, futures)  # (a RecordFuture is true, None false)
            futures = [future for future in futures if future is not None]
        metadatas = [RecordMetadata(topic, partition, offset, timestamp, -1 if key is None else len(key),
                                    -1 if value is None else len(value))
                     for offset, key, value, timestamp in rows]
        resolve(self.condition, futures, metadatas, error)
        # Which records have a callback, looked up in C: most often none has one.
        on_delivery = list(map(_ON_DELIVERY, futures))
        if on_delivery.count(None) == len(on_delivery):
            return
        callbacks = self.callbacks
        for callback, metadata in zip(on_delivery, metadatas, strict=True):
            if callback is not None:
                callbacks.append((callback, error, metadata))
        self.callbacks_ready.set()


class Producer:
    """A synchronous Kafka producer, safe to share between threads.

    Runs an ``AsyncProducer`` on the process's client loop thread.  ``produce`` queues a record
    and returns a ``concurrent.futures.Future`` of its ``RecordMetadata``.  Delivery callbacks
    (``on_delivery`` given here or per record) run only inside ``poll``, ``flush`` and ``close``,
    in the calling thread, as with confluent-kafka.
    """

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any):
        conf, kwargs, own = _split_settings(conf, kwargs)
        self._default_callback: DeliveryCallback | None = own.pop("on_delivery", None)
        kwargs.update(own)
        self._lt = LoopThread.get()
        core = self._core = _SyncCore(conf, kwargs)
        self._wait(core.start())
        self._handed_bytes = 0          # written by producing threads; core.taken_bytes by the loop
        self._handed_lock = threading.Lock()
        # topic -> (metadata snapshot, partition count): what produce() checked last
        self._known_topics: dict[str, tuple[Any, int]] = {}
        self._closed = False

    @property
    def config(self) -> ProducerConfig:
        """The producer's settings, parsed and checked (read-only)."""
        return self._core.config

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop thread and return its result, raising what it raises.

        (Not ``LoopThread.run``: with no timeout of its own, a ``ClientTimeoutError`` the
        coroutine raises must reach the caller as it is.)
        """
        future = self._lt.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def produce(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                partition: int | None = None, timestamp: int | None = None,
                headers: Mapping[str, Any] | list[tuple[str, Any]] | None = None,
                on_delivery: DeliveryCallback | None = None) -> concurrent.futures.Future[RecordMetadata]:
        """Queue a record; a Future of its ``RecordMetadata``.  ``on_delivery(error, metadata)``
        runs from a later ``poll``/``flush``/``close`` in the thread that calls it.

        Blocks (``max.block.ms`` at most, then ``ClientTimeoutError``) only for a topic's first
        metadata or for room in ``buffer.memory``.
        """
        if self._closed:
            raise IllegalStateError("the producer is closed")
        core = self._core
        if core._txn is not None:
            core._txn.check_send()
        if headers or (value is not None and type(value) is not bytes) or (key is not None and type(key) is not bytes):
            key, value, headers = record_fields(key, value, headers, core._legacy)
        else:
            headers = None  # (the common case without a call: this runs once per record)
        ts = int(time.time() * 1000) if timestamp is None else checked_timestamp(timestamp)
        size = record_size(key, value, headers)
        future = RecordFuture(core.condition, on_delivery or self._default_callback)
        if size > core._max_request_size or size > core._buffer_memory:
            error = core._too_large(size)
            if core._txn is not None:
                self._lt.call_soon(core._txn.fail, error)  # the transaction fails with it (on the loop)
            core.fail_record(future, key, value, ts, topic, partition, error)
            return future
        known = self._known_topics.get(topic)
        if known is None or (partition is not None and (known[0] is not core._cluster.metadata or type(partition)
                                                        is not int or not 0 <= partition < known[1])):
            self._check_topic(topic, partition)
        waiting = self._handed_bytes - core.taken_bytes
        if core._accumulator.buffered + waiting + size > core._buffer_memory:
            self._wait(core.wait_for_room(size))
        with self._handed_lock:
            self._handed_bytes += size
        core.handoff.extend((topic, partition, key, value, ts, headers, future, size))  # _HANDOFF_FIELDS
        if not core.drain_scheduled:
            core.drain_scheduled = True
            self._lt.call_soon(core.drain_handoff)
        return future

    def produce_many(self, topic: str, values: Sequence[bytes | str | None],
                     keys: Sequence[bytes | str | None] | None = None, *, key: bytes | str | None = None,
                     partition: int | None = None, timestamp: int | None = None,
                     headers: Mapping[str, Any] | list[tuple[str, Any]] | None = None) -> BulkDelivery:
        """Queue many records at once: ``values[i]`` with ``keys[i]`` (or ``key`` for all; neither:
        keyless), each with the same ``headers`` and ``timestamp`` (default: now).  Returns once
        every record is in a batch, with a ``BulkDelivery`` that counts them as they are delivered
        (``flush()``, or ``delivery.result(timeout)``, waits for that).

        The records go where ``produce`` would put them one by one, in order after the records
        produced before, encoded straight into batches: no future and no ``on_delivery`` callback
        per record, which makes it many times cheaper per record.  Blocks as ``produce`` does (a
        new topic's metadata, room in ``buffer.memory``; then ``ClientTimeoutError``); records too
        large to send fail in the delivery with ``RecordTooLargeError``.
        """
        if self._closed:
            raise IllegalStateError("the producer is closed")
        return self._wait(self._core.send_many_all(topic, values, keys, key=key, partition=partition,
                                                   timestamp_ms=timestamp, headers=headers))

    def _check_topic(self, topic: str, partition: int | None) -> None:
        """Wait for the topic's metadata (on the loop) unless the current snapshot has it, and
        check an explicit partition against it."""
        core = self._core
        metadata = core._cluster.metadata
        partitions = metadata.partitions_for(topic) if isinstance(topic, str) and topic else None
        if partitions and (partition is None or (type(partition) is int and 0 <= partition < len(partitions))):
            self._known_topics[topic] = (metadata, len(partitions))
            return
        metadata = core._cluster.metadata
        route = self._wait(core._route(topic, partition))
        self._known_topics[topic] = (metadata, route.count)

    def poll(self, timeout: float | None = 0) -> int:
        """Run the delivery callbacks of records completed so far, waiting up to ``timeout``
        seconds (None: until one) for a first one.  Returns how many ran."""
        core = self._core
        if not core.callbacks and timeout != 0:
            deadline = None if timeout is None else time.monotonic() + timeout
            # The event is also set when a flush or a transactional call ends (see
            # _wait_running_callbacks): wait again unless a callback came.
            while not core.callbacks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                core.callbacks_ready.clear()
                if not core.callbacks:
                    core.callbacks_ready.wait(left)
        return self._run_callbacks()

    def _run_callbacks(self) -> int:
        core = self._core
        core.callbacks_ready.clear()
        callbacks = core.callbacks
        ran = 0
        while callbacks:
            try:
                callback, error, metadata = callbacks.popleft()
            except IndexError:
                break
            ran += 1
            try:
                callback(error, metadata)
            except Exception:  # noqa: BLE001 - the others still run
                logger.exception("on_delivery callback failed")
        return ran

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait (``timeout`` seconds at most) for it, running delivery
        callbacks meanwhile.  Returns how many records are still undelivered (0: all done)."""
        core = self._core
        future = self._lt.submit(core.flush_all(timeout))
        self._wait_running_callbacks(future)
        try:
            future.result()
        except ClientTimeoutError:
            pass
        except IllegalStateError:
            if not self._closed:
                raise
        self._run_callbacks()
        return len(self)

    def _wait_running_callbacks(self, future: concurrent.futures.Future[Any]) -> None:
        core = self._core
        future.add_done_callback(lambda _: core.callbacks_ready.set())  # wake at once when it ends
        while not future.done():
            core.callbacks_ready.wait(0.1)
            self._run_callbacks()

    def close(self, timeout: float | None = None) -> None:
        """Flush (``timeout`` seconds at most), fail what is left, disconnect; runs the last callbacks."""
        if self._closed:
            return
        self._closed = True
        future = self._lt.submit(self._core.close_all(timeout))
        self._wait_running_callbacks(future)
        future.result()
        self._run_callbacks()

    @mirrors(AsyncProducer.partitions_for, blocking=True)
    def partitions_for(self, topic: str) -> list[int]:
        return self._wait(self._core.partitions_for(topic))

    # -- transactions (confluent-kafka's names; see the module docstring) -------------------------
    def init_transactions(self, timeout: float | None = None) -> None:
        """Get the producer id and epoch of ``transactional.id``, fencing older producers of it.
        Once, before the first transaction; ``timeout`` seconds (None: max.block.ms)."""
        self._wait(self._core.init_transactions(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: records produced and offsets sent until commit or abort belong to it."""
        self._wait(self._core.begin_all())

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush the transaction's records (running delivery callbacks) and commit it.  Raises
        ``TransactionAbortRequiredError`` when something in it failed: abort_transaction() then."""
        self._wait_transactional(self._core.commit_all(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction; records not yet sent fail (their callbacks run here)."""
        self._wait_transactional(self._core.abort_all(timeout))

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: ConsumerGroupMetadata | str,
                                    timeout: float | None = None) -> None:
        """Commit a consumer group's ``offsets`` (partition -> next offset, or confluent-kafka's list
        of TopicPartition with offsets) with the transaction; ``group_metadata`` from
        ``Consumer.consumer_group_metadata()``."""
        self._wait(self._core.send_offsets_to_transaction(offsets, group_metadata, timeout))

    def _wait_transactional(self, coro: Any) -> None:
        future = self._lt.submit(coro)
        try:
            self._wait_running_callbacks(future)
            future.result()
        except BaseException:
            future.cancel()
            raise
        finally:
            self._run_callbacks()

    def __len__(self) -> int:
        """Records produced and not yet completed, plus completed ones whose callbacks wait for poll."""
        core = self._core
        return len(core.handoff) // _HANDOFF_FIELDS + (core._accumulator.record_count if core._accumulator else 0) + len(core.callbacks)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
