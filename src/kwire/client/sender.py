"""The producer's background task: queued batches out as Produce requests, answers back to records.

Each round it looks at the first queued batch of every partition and sends those that are ready
(full, lingered long enough, or wanted now by flush, close or a full buffer) to their partition's
leader: one request per broker, at most one batch per partition in it, up to ``max.request.size``,
and at most ``max.in.flight.requests.per.connection`` requests out per broker.  A request goes
only to a broker whose connection is already open (the connect runs in the background first), so
it is written the moment it is made and requests to a broker leave in the order they were made.
Batches are encoded when first sent: record batches for Produce v3+, or message sets (magic 1 for
Produce v2, 0 below) for a broker that has nothing newer.

Answers, per partition:

* written (or, idempotent, recognised as a repeat: DUPLICATE_SEQUENCE_NUMBER): records complete
  with their offsets;
* a retriable error, or the connection lost: the batch goes back to the front of its partition's
  queue, to be resent unchanged (same sequence) after ``retry.backoff.ms`` (doubling up to
  ``retry.backoff.max.ms``), to whichever broker leads the partition then.  Errors that mean the
  leader moved (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...) and lost connections
  also refresh the metadata;
* OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH: see ``idempotence``;
* anything else fails the batch's records with the broker's error.

A transactional producer (``transactions``) sends a partition's batches only once the partition is
in the coordinator's transaction: the sender adds the partitions records were queued for with one
AddPartitionsToTxn at a time (those noted meanwhile go in the next one).  Batches carry the
transactional bit and Produce names the transactional id.  A failed batch makes the transaction
abortable (fenced: fatal), and while it is failing or being aborted, queued batches are failed
instead of sent.  ``coordinator_call`` sends the producer's other transactional requests.

``delivery.timeout.ms`` bounds a record's whole life from its batch's creation: a batch still
queued (or waiting to be resent) after it fails with ``DeliveryTimeoutError``.  A batch in flight
is left alone until its request ends (``request.timeout.ms`` bounds that).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    InvalidProducerIdMappingError,
    KafkaError,
    NotCoordinatorError,
    OperationNotAttemptedError,
)

from .accumulator import ProducerBatch, RecordAccumulator
from .cluster import Cluster
from .errors import (
    AuthenticationError,
    BrokerConnectionError,
    ClientError,
    SecurityProtocolMismatchError,
    UnsupportedApiError,
    is_retriable,
)
from .idempotence import MAX_IN_FLIGHT_PER_PARTITION, IdempotenceState
from .producer_errors import DeliveryTimeoutError, ProducerFencedError
from .retry import retrying
from .transactions import (
    TRANSACTION_COORDINATOR,
    TransactionAbortedError,
    TransactionAbortRequiredError,
    TransactionManager,
    TxnState,
)
from .types import TopicPartition

if TYPE_CHECKING:
    from kwire.protocol.messages import Request, Response

    from .config import ProducerConfig
    from .connection import BrokerConnection

    R = TypeVar("R", bound=Response)
T = TypeVar("T")

__all__ = ["Sender", "raise_partition_errors"]

logger = logging.getLogger("kwire.client.producer")

FIRST_BATCH_PRODUCE_VERSION = 3     # Produce v3+ carries record batches (magic 2)
TOPIC_ID_PRODUCE_VERSION = 13       # Produce v13 names topics by id

# Errors after which the client's metadata is wrong (Kafka's InvalidMetadataException family).
_STALE_METADATA = frozenset({
    3,    # UNKNOWN_TOPIC_OR_PARTITION
    5,    # LEADER_NOT_AVAILABLE
    6,    # NOT_LEADER_OR_FOLLOWER
    56,   # KAFKA_STORAGE_ERROR
    74,   # FENCED_LEADER_EPOCH
    75,   # UNKNOWN_LEADER_EPOCH
    100,  # UNKNOWN_TOPIC_ID
    103,  # INCONSISTENT_TOPIC_ID
})
# Broker errors after which the batch may still have been written (the leader appended it, then
# timed out or lost replicas): REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND.
_MAYBE_WRITTEN = frozenset({7, 20})
# What an idempotent producer asks for as its transaction timeout (it has no transactions).
_NO_TRANSACTION_TIMEOUT_MS = 2**31 - 1

TopicData = messages.ProduceRequest.TopicProduceData
PartitionData = TopicData.PartitionProduceData

Deliver = Callable[[ProducerBatch, int, int, BaseException | None], None]


class Sender:
    """Drains the accumulator to the partition leaders.  ``start()`` it inside the event loop."""

    def __init__(self, cluster: Cluster, accumulator: RecordAccumulator, config: ProducerConfig, *,
                 deliver: Deliver, idempotence: IdempotenceState | None, legacy: bool,
                 topics: Callable[[], Iterable[str]], max_produce_version: int | None = None,
                 transactions: TransactionManager | None = None) -> None:
        self._cluster = cluster
        self._txn = transactions
        self._add_task: asyncio.Task[None] | None = None  # the AddPartitionsToTxn out now
        self._acc = accumulator
        self._deliver = deliver
        self._idem = idempotence
        self._legacy = legacy                   # Produce v0-2: message sets, magic 0/1
        self._topics = topics                   # the topics this producer sends to
        self._max_version = max_produce_version
        self._acks = config.acks
        self._retries = config.retries
        self._linger = config.linger_ms / 1000
        self._ack_timeout_ms = config.request_timeout_ms
        self._max_request_size = config.max_request_size
        self._metadata_max_age = config.metadata_max_age_ms / 1000
        assert config.delivery_timeout_ms is not None  # ProducerConfig derives it when not set
        self._delivery_timeout_ms = config.delivery_timeout_ms
        self._max_requests_per_node = max(1, config.max_in_flight_requests_per_connection)
        if idempotence is not None:
            self._max_per_partition = min(MAX_IN_FLIGHT_PER_PARTITION, self._max_requests_per_node)
        elif self._max_requests_per_node == 1:
            self._max_per_partition = 1  # Kafka's ordering guarantee without idempotence
        else:
            self._max_per_partition = 1 << 30
        self._requests_out: dict[int, int] = {}          # per node
        # Open connections by node.  Requests go only to a node whose connection is open, so that
        # each is written the moment it is made: two requests waiting for one connect could
        # otherwise be written in either order.
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Task[BrokerConnection]] = {}
        self._batches_out: dict[TopicPartition, int] = {}  # per partition
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_not_before = 0.0
        self._init_task: asyncio.Task[None] | None = None
        self._init_not_before = 0.0
        self._init_failures = 0
        self.flushing = 0        # flush() calls waiting: everything queued is ready now
        self.closing = False
        self.fatal_error: BaseException | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def wakeup(self) -> None:
        self._wakeup.set()

    async def stop(self) -> None:
        """Stop sending; requests still out are abandoned (their batches completed by the caller)."""
        self.closing = True
        tasks = [self._task, self._metadata_task, self._init_task, self._add_task, *self._requests,
                 *self._connecting.values()]
        for task in tasks:
            if task is not None and not task.done():
                task.cancel()
        pending = [t for t in tasks if t is not None]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    # -- the loop ---------------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wakeup.clear()
            try:
                delay = self._run_once(time.monotonic())
            except Exception:  # noqa: BLE001 - a bug here must not stop every delivery
                logger.exception("producer sender failed; retrying")
                delay = self._cluster.retry_backoff.delay(0) or 0.1
            if delay <= 0:
                await asyncio.sleep(0)
                continue
            timer = loop.call_later(delay, self._wakeup.set) if delay != float("inf") else None
            await self._wakeup.wait()
            if timer is not None:
                timer.cancel()

    def _run_once(self, now: float) -> float:
        """One round: expire, settle sequences, send what is ready.  Seconds until the next round."""
        acc = self._acc
        next_round = self._expire(now)
        idem = self._idem
        txn = self._txn
        if txn is not None:
            if txn.failing:
                self._fail_queued(txn)
            elif txn.has_pending and self._add_task is None:
                self._add_task = asyncio.ensure_future(self._add_partitions(txn, txn.take_pending()))
        if idem is not None:
            if idem.needs_producer_id:
                if txn is not None:
                    return next_round - now  # init_transactions() gets the producer id
                if self.fatal_error is not None:
                    self.abort(self.fatal_error)  # no producer id will come: every record fails with why
                    return float("inf")
                self._want_producer_id(now)
                if self._init_task is None and self._init_not_before > now:
                    next_round = min(next_round, self._init_not_before)
                return next_round - now  # nothing goes out without a producer id
            for tp in idem.pending_resets():
                for batch in idem.settle(tp, self._batches_out.get(tp, 0)):
                    batch.retry_at = 0.0
        if self._cluster.metadata.age() > self._metadata_max_age:
            self._want_metadata()
        if not acc.queues:
            return next_round
        metadata = self._cluster.metadata
        force = self.flushing or self.closing or acc.memory_exhausted
        linger = self._linger
        by_node: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        more = False
        for tp, queue in acc.queues.items():
            if not queue:
                continue
            batch = queue[0]
            if batch.retry_at > now:
                next_round = min(next_round, batch.retry_at)
                continue
            if batch.open and len(queue) == 1 and not force:
                ready_at = batch.created + linger
                if ready_at > now:
                    next_round = min(next_round, ready_at)
                    continue
            leader = metadata.leader(tp.topic, tp.partition)
            if leader is None:
                self._want_metadata()
                continue
            if self._batches_out.get(tp, 0) >= self._max_per_partition:
                continue
            if self._requests_out.get(leader, 0) >= self._max_requests_per_node:
                continue
            conn = self._connections.get(leader)
            if conn is None or not conn.usable:
                self._connect(leader)
                continue
            if idem is not None and not idem.may_send(batch):
                continue
            if txn is not None and not txn.may_send(tp):
                continue  # not in the coordinator's transaction yet
            size = sizes.get(leader, 0)
            if size and size + batch.size > self._max_request_size:
                more = True  # the next request to this broker takes it
                continue
            sizes[leader] = size + batch.size
            by_node.setdefault(leader, []).append(batch)
        for node, batches in by_node.items():
            for batch in batches:
                queue = acc.queues[batch.tp]
                queue.popleft()
                batch.open = False
                if idem is not None and batch.producer_id < 0:
                    idem.stamp(batch)
                batch.attempts += 1
                self._batches_out[batch.tp] = self._batches_out.get(batch.tp, 0) + 1
            self._requests_out[node] = self._requests_out.get(node, 0) + 1
            task = asyncio.ensure_future(self._produce(node, self._connections[node], batches))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)
        if by_node or more:
            return 0.0  # more may be ready: look again at once
        return next_round - now

    def _expire(self, now: float) -> float:
        """Fail queued batches past their delivery timeout; the earliest deadline left."""
        acc = self._acc
        for batch in acc.expired(now):
            self._fail(batch, DeliveryTimeoutError(batch.tp, batch.record_count, self._delivery_timeout_ms,
                                                   batch.last_error), maybe_written=batch.ambiguous)
        earliest = float("inf")
        for queue in acc.queues.values():
            if queue and queue[0].deadline < earliest:
                earliest = queue[0].deadline
        return earliest

    # -- one request ------------------------------------------------------------------------------
    def _connect(self, node: int) -> None:
        """Open a connection to ``node`` in the background; the sender looks again when it is up."""
        if node in self._connecting or self.closing and not self.flushing:
            return
        task = self._connecting[node] = asyncio.ensure_future(self._cluster.connection(node))
        task.add_done_callback(lambda t: self._connected(node, t))

    def _connected(self, node: int, task: asyncio.Task[BrokerConnection]) -> None:
        del self._connecting[node]
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            self._connections[node] = task.result()
        else:
            # The cluster backs off before its next attempt; the leader may have moved meanwhile.
            logger.info("producer cannot reach node %d: %s", node, error)
            metadata = self._cluster.metadata
            # A refused login or TLS handshake is not retried (Java fails the batches at once too).
            refused = isinstance(error, (AuthenticationError, SecurityProtocolMismatchError))
            for tp, queue in self._acc.queues.items():
                if queue and metadata.leader(tp.topic, tp.partition) == node:
                    if refused:
                        while queue:
                            batch = queue.popleft()
                            self._fail(batch, error, maybe_written=batch.ambiguous)
                    else:
                        queue[0].last_error = error  # named if the batch expires
            self._want_metadata()
        self._wakeup.set()

    async def _produce(self, node: int, conn: BrokerConnection, batches: list[ProducerBatch]) -> None:
        try:
            try:
                request, version, names = self._request(conn, batches)
            except Exception as exc:  # noqa: BLE001 - no common version, a codec that cannot encode...
                for batch in batches:
                    self._fail(batch, exc, maybe_written=batch.ambiguous)
                return
            for batch in batches:
                batch.sent = True
            try:
                response = await conn.send(request, version=version, expect_response=self._acks != 0)
            except Exception as exc:  # noqa: BLE001 - lost connection or timeout: maybe written
                if isinstance(exc, ClientError) and exc.retriable:
                    self._want_metadata()
                for batch in batches:
                    self._retry_or_fail(batch, exc)
                return
            if response is None:  # acks=0: nobody tells us more
                for batch in batches:
                    self._succeed(batch, -1, -1)
                return
            self._handle_response(response, version, names, batches)
        finally:
            self._requests_out[node] -= 1
            for batch in batches:
                self._batches_out[batch.tp] -= 1
            self._wakeup.set()

    def _request(self, conn: BrokerConnection, batches: list[ProducerBatch]
                 ) -> tuple[messages.ProduceRequest, int, dict[uuid.UUID | str, str]]:
        if self._legacy:
            version = conn.version_for(ApiKey.PRODUCE, 0, min(2, self._max_version if self._max_version is not None else 2))
            magic = 1 if version == 2 else 0
        else:
            top = self._max_version if self._txn is None else self._txn.produce_ceiling(self._max_version)
            version = conn.version_for(ApiKey.PRODUCE, FIRST_BATCH_PRODUCE_VERSION, top)
            magic = 2
        metadata = self._cluster.metadata
        if version >= TOPIC_ID_PRODUCE_VERSION:
            if any(metadata.topic_id(b.tp.topic).int == 0 for b in batches):
                version = TOPIC_ID_PRODUCE_VERSION - 1  # a topic without a known id: name it
        compression = self._acc.compression
        topics: dict[str, TopicData] = {}
        names: dict[uuid.UUID | str, str] = {}  # what the response calls each topic (id or name) -> its name
        for batch in batches:
            topic = batch.tp.topic
            data = topics.get(topic)
            if data is None:
                if version >= TOPIC_ID_PRODUCE_VERSION:
                    topic_id = metadata.topic_id(topic)
                    data = TopicData(name=topic, topic_id=topic_id, partition_data=[])
                    names[topic_id] = topic
                else:
                    data = TopicData(name=topic, partition_data=[])
                    names[topic] = topic
                topics[topic] = data
            records = batch.encode(compression, magic if self._txn is None else 2, transactional=self._txn is not None)
            data.partition_data.append(PartitionData(index=batch.tp.partition, records=records))
        request = messages.ProduceRequest(transactional_id=None if self._txn is None else self._txn.transactional_id,
                                          acks=self._acks, timeout_ms=self._ack_timeout_ms,
                                          topic_data=list(topics.values()))
        return request, version, names

    def _handle_response(self, response: messages.ProduceResponse, version: int, names: dict[uuid.UUID | str, str],
                         batches: list[ProducerBatch]) -> None:
        by_tp = {batch.tp: batch for batch in batches}
        by_id = version >= TOPIC_ID_PRODUCE_VERSION
        for topic_response in response.responses:
            topic = names.get(topic_response.topic_id if by_id else topic_response.name)
            if topic is None:  # not a topic of this request: nothing of ours there
                continue
            for p in topic_response.partition_responses:
                batch = by_tp.pop(TopicPartition(topic, p.index), None)
                if batch is None:
                    continue
                code = p.error_code
                if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                    self._succeed(batch, p.base_offset, getattr(p, "log_append_time_ms", -1))
                else:
                    error = KafkaError.for_code(code)(p.error_message or f"producing to {batch.tp}")
                    self._handle_error(batch, error)
        for batch in by_tp.values():
            self._retry_or_fail(batch, ClientError(f"the broker's Produce response left out {batch.tp}"))

    def _handle_error(self, batch: ProducerBatch, error: KafkaError) -> None:
        code = error.code
        if code in _STALE_METADATA:
            self._want_metadata()
        idem = self._idem
        if idem is not None and batch.producer_id >= 0:
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                # Not the next sequence: an earlier batch is still on its way (or being resent),
                # and this one goes again after it.  The next one refused: a gap only a new epoch
                # closes.
                if idem.is_next(batch):
                    idem.request_reset(batch.tp, f"the broker refused sequence {batch.sequence} as out of order")
                    if idem.transactional:  # the abort bumps the epoch
                        self._fail(batch, error, maybe_written=batch.ambiguous)
                        return
                self._retry_or_fail(batch, error, retriable=True)
                return
            if code == ErrorCode.UNKNOWN_PRODUCER_ID:
                idem.request_reset(batch.tp, "the broker no longer knows the producer id")
                self._retry_or_fail(batch, error, retriable=not idem.transactional)
                return
            if code == ErrorCode.INVALID_PRODUCER_EPOCH:
                if (batch.producer_id, batch.epoch) != (idem.producer_id, idem.epoch) and not idem.transactional:
                    # Numbered under an epoch the producer has left: renumber it.
                    idem.request_reset(batch.tp, f"epoch {batch.epoch} is stale")
                    self._retry_or_fail(batch, error, retriable=True)
                    return
                self._fail(batch, ProducerFencedError(
                    f"{batch.tp}: the broker refused producer id {batch.producer_id} epoch {batch.epoch} "
                    f"(INVALID_PRODUCER_EPOCH): another producer bumped it"), maybe_written=batch.ambiguous)
                return
        self._retry_or_fail(batch, error)

    # -- outcomes ---------------------------------------------------------------------------------
    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException, *, retriable: bool | None = None) -> None:
        if batch.completed:
            return  # aborted while its request was out
        if batch.sent and (not isinstance(error, KafkaError) or error.code in _MAYBE_WRITTEN):
            batch.ambiguous = True
        if not (is_retriable(error) if retriable is None else retriable):
            self._fail(batch, error, maybe_written=batch.ambiguous)
            return
        now = time.monotonic()
        if now >= batch.deadline:
            self._fail(batch, DeliveryTimeoutError(batch.tp, batch.record_count, self._delivery_timeout_ms, error),
                       maybe_written=batch.ambiguous)
            return
        if batch.attempts > self._retries:
            self._fail(batch, error, maybe_written=batch.ambiguous)
            return
        logger.debug("%s: resending %d records after: %s", batch.tp, batch.record_count, error)
        batch.last_error = error
        batch.retry_at = now + self._cluster.retry_backoff.delay(batch.attempts - 1)
        self._acc.reenqueue(batch)

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if batch.completed:
            return
        if self._idem is not None:
            self._idem.acked(batch)
        self._acc.complete(batch)
        self._deliver(batch, base_offset, log_append_time, None)

    def _fail(self, batch: ProducerBatch, error: BaseException, *, maybe_written: bool) -> None:
        if batch.completed:
            return
        if self._idem is not None:
            self._idem.failed(batch, maybe_written=maybe_written)
        if self._txn is not None and not isinstance(error, (TransactionAbortedError, TransactionAbortRequiredError)):
            self._txn.fail(error)
        self._acc.complete(batch)
        self._deliver(batch, -1, -1, error)

    def _fail_queued(self, txn: TransactionManager) -> None:
        """Fail the batches not sent (queued, or back for a retry) of a failing or aborted transaction."""
        if not any(self._acc.queues.values()):
            return
        if txn.state is TxnState.ABORTING:
            error: BaseException = TransactionAbortedError("the transaction was aborted before the record was sent")
        elif txn.state is TxnState.FATAL_ERROR and txn.error is not None:  # (FATAL_ERROR always has one)
            error = txn.error
        else:
            error = TransactionAbortRequiredError(f"the transaction failed before the record was sent: {txn.error}")
            error.__cause__ = txn.error
        for batch in self._acc.abort_all():
            self._fail(batch, error, maybe_written=batch.ambiguous)

    def abort(self, error: BaseException) -> None:
        """Fail every batch not yet completed (queued or in flight) with ``error``."""
        for batch in self._acc.abort_all():
            self._fail(batch, error, maybe_written=batch.ambiguous)
        for batch in list(self._acc.incomplete):
            self._fail(batch, error, maybe_written=True)

    # -- metadata and producer id -----------------------------------------------------------------
    def _want_metadata(self) -> None:
        if self._metadata_task is not None or self.closing and not self.flushing:
            return
        delay = max(0.0, self._metadata_not_before - time.monotonic())
        self._metadata_task = asyncio.ensure_future(self._refresh_metadata(delay))

    async def _refresh_metadata(self, delay: float) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
            await self._cluster.refresh_metadata(sorted(self._topics()))
        except Exception as exc:  # noqa: BLE001 - retried on the next need
            logger.debug("producer metadata refresh failed: %s", exc)
        finally:
            self._metadata_task = None
            self._metadata_not_before = time.monotonic() + (self._cluster.retry_backoff.delay(0) or 0.1)
            self._wakeup.set()

    def _want_producer_id(self, now: float) -> None:
        if self._init_task is None and now >= self._init_not_before and not self.closing:
            self._init_task = asyncio.ensure_future(self._init_producer_id())

    async def _init_producer_id(self) -> None:
        cluster = self._cluster

        async def attempt() -> messages.InitProducerIdResponse:
            conn = await cluster.any_connection()
            version = conn.version_for(ApiKey.INIT_PRODUCER_ID)
            request = messages.InitProducerIdRequest(transactional_id=None,
                                                     transaction_timeout_ms=_NO_TRANSACTION_TIMEOUT_MS)
            response = await conn.send(request, version=version)
            if response.error_code:
                raise KafkaError.for_code(response.error_code)("InitProducerId for an idempotent producer")
            return response

        try:
            response = await retrying(attempt, timeout=cluster.request_timeout, backoff=cluster.retry_backoff,
                                      what="InitProducerId")
        except Exception as exc:  # noqa: BLE001 - retriable: try again later; otherwise fatal
            if is_retriable(exc):
                logger.info("no producer id yet: %s", exc)
                self._init_not_before = time.monotonic() + self._cluster.retry_backoff.delay(self._init_failures)
                self._init_failures += 1
            else:
                if isinstance(exc, UnsupportedApiError):
                    exc = UnsupportedApiError(f"{exc}; set enable.idempotence=false to produce without it")
                self.fatal_error = exc
                logger.error("the idempotent producer cannot get a producer id: %s", exc)
                self.abort(exc)
        else:
            self._init_failures = 0
            assert self._idem is not None  # only an idempotent producer asks for an id here
            self._idem.set_producer_id(response.producer_id, response.producer_epoch)
        finally:
            self._init_task = None
            self._wakeup.set()

    # -- transactions -----------------------------------------------------------------------------
    async def coordinator_call(self, key: str, key_type: int,
                               build: Callable[[BrokerConnection], tuple[Request[R], int]],
                               check: Callable[[R, int], T], *, what: str, timeout: float) -> T:
        """Send a request to the coordinator of ``key`` until it is answered without a retriable
        error (``timeout`` seconds at most): ``build(conn)`` makes (request, version), ``check(response,
        version)`` raises the response's error or returns the result.  A coordinator that moved
        (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, its connection lost) is looked up again."""
        cluster = self._cluster

        async def attempt() -> T:
            node = await cluster.coordinator(key, key_type)
            conn = await cluster.connection(node)
            request, version = build(conn)
            response = await conn.send(request, version=version)
            return check(response, version)

        def before_retry(exc: BaseException) -> None:
            if isinstance(exc, (NotCoordinatorError, CoordinatorNotAvailableError, BrokerConnectionError)):
                cluster.forget_coordinator(key, key_type)

        return await retrying(attempt, timeout=timeout, backoff=cluster.retry_backoff, what=what,
                              before_retry=before_retry)

    async def _add_partitions(self, txn: TransactionManager, tps: list[TopicPartition]) -> None:
        """AddPartitionsToTxn for ``tps`` (the sender sends their batches once it succeeds)."""
        request_type = messages.AddPartitionsToTxnRequest
        topic_type = request_type.AddPartitionsToTxnTopic
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def build(conn: BrokerConnection) -> tuple[messages.AddPartitionsToTxnRequest, int]:
            # v4+ is the brokers' batched form (KIP-890); clients send v3 and below.
            version = conn.version_for(request_type.API_KEY, 0, 3)
            return request_type(v3_and_below_transactional_id=txn.transactional_id,
                                v3_and_below_producer_id=txn.producer_id,
                                v3_and_below_producer_epoch=txn.epoch,
                                v3_and_below_topics=[topic_type(name=t, partitions=ps) for t, ps in by_topic.items()]), version

        def check(response: messages.AddPartitionsToTxnResponse, version: int) -> None:
            codes = {TopicPartition(t.name, p.partition_index): p.partition_error_code
                     for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}
            raise_partition_errors(codes, "AddPartitionsToTxn")

        try:
            await self.coordinator_call(txn.transactional_id, TRANSACTION_COORDINATOR, build, check,
                                        what=f"AddPartitionsToTxn of {len(tps)} partition(s)",
                                        timeout=self._delivery_timeout_ms / 1000)
        except asyncio.CancelledError:
            txn.partitions_added(tps, asyncio.CancelledError())
            raise
        except Exception as exc:  # noqa: BLE001 - the transaction's outcome
            txn.partitions_added(tps, exc)
            if isinstance(exc, InvalidProducerIdMappingError) and self._idem is not None:
                self._idem.bump_needed = True  # the coordinator lost the id's state: a new epoch (KIP-360)
            txn.fail(exc)
        else:
            txn.partitions_added(tps)
        finally:
            self._add_task = None
            self._wakeup.set()

    async def transaction_quiet(self) -> None:
        """Wait until no AddPartitionsToTxn is out (before EndTxn: it must not reopen the transaction)."""
        while self._add_task is not None:
            await asyncio.wait([self._add_task])


def raise_partition_errors(codes: dict[TopicPartition, int], what: str) -> None:
    """Raise the error that matters most among per-partition ``codes`` (0: none): a non-retriable
    one before a retriable one, and OPERATION_NOT_ATTEMPTED (caused by another) last."""
    failed = {code for code in codes.values() if code}
    if not failed:
        return
    def rank(code: int) -> tuple[int, int]:
        cls = KafkaError.for_code(code)
        return (code == OperationNotAttemptedError.code, cls.retriable)

    code = min(failed, key=rank)
    names = ", ".join(str(tp) for tp, c in sorted(codes.items()) if c == code)
    raise KafkaError.for_code(code)(f"{what} of {names}")
