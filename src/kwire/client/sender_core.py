"""The producer's sender without I/O: which batches go out, in what request, and what each answer
means for them.  ``Sender`` (asyncio) and ``BlockingProducer`` (a plain socket) drive it.

Each round (``_run_once``) looks at the first queued batch of every partition and takes those that
are ready (full, lingered long enough, or wanted now by flush, close or a full buffer) for their
partition's leader: one request per broker, at most one batch per partition in it, up to
``max.request.size``, and at most ``max.in.flight.requests.per.connection`` requests out per
broker.  A request goes only to a broker whose connection is already open (the driver connects
first: ``_connect``), so it is written the moment it is made (``_dispatch``) and requests to a
broker leave in the order they were made.  Batches are encoded when first sent: record batches
for Produce v3+, or message sets (magic 1 for Produce v2, 0 below) for a broker that has nothing
newer.

Answers, per partition (``_answered``, ``_request_failed``):

* written (or, idempotent, recognised as a repeat: DUPLICATE_SEQUENCE_NUMBER): records complete
  with their offsets;
* a retriable error, or the connection lost: the batch goes back to the front of its partition's
  queue, to be resent unchanged (same sequence) after ``retry.backoff.ms`` (doubling up to
  ``retry.backoff.max.ms``), to whichever broker leads the partition then.  Errors that mean the
  leader moved (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...) and lost connections
  also ask for fresh metadata (``_want_metadata``);
* OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH: see ``idempotence``;
* anything else fails the batch's records with the broker's error.

``delivery.timeout.ms`` bounds a record's whole life from its batch's creation: a batch still
queued (or waiting to be resent) after it fails with ``DeliveryTimeoutError``.  A batch in flight
is left alone until its request ends (``request.timeout.ms`` bounds that).

What needs I/O or a clock of the driver's is a hook: ``_connect(node)``, ``_dispatch(node, conn,
batches)`` (send the request ``_request`` builds, then report with ``_answered`` or
``_request_failed``, and ``_request_done``), ``_want_metadata()``, ``_producer_id_wait(now,
next_round)`` (an idempotent producer without its id asks for one: ``_producer_id_request``,
then ``_producer_id_answered`` or ``_producer_id_failed``) and ``_start_add_partitions(txn)``
(transactions: the asyncio sender only).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import ErrorCode, KafkaError

from .accumulator import ProducerBatch, RecordAccumulator
from .errors import (
    AuthenticationError,
    ClientError,
    SecurityProtocolMismatchError,
    UnsupportedApiError,
    is_retriable,
)
from .idempotence import MAX_IN_FLIGHT_PER_PARTITION, IdempotenceState
from .lazy_log import LazyLogger
from .producer_errors import DeliveryTimeoutError, ProducerFencedError
from .types import TopicPartition

# kwire.client.transactions is imported where a transaction is (a producer with a
# transactional.id has loaded it already): kwire produce's blocking producer never has one, and
# its import (a dataclass, an enum, the exceptions) was a few ms of that command's start-up.
if TYPE_CHECKING:
    from .backoff import Backoff
    from .config import ProducerConfig
    from .metadata import ClusterMetadata
    from .transactions import TransactionManager

__all__ = ["FIRST_BATCH_PRODUCE_VERSION", "TOPIC_ID_PRODUCE_VERSION", "SenderCore", "VersionSource"]

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

# (logging imported only when a record could be shown: see lazy_log)
logger = LazyLogger("kwire.client.producer")


class VersionSource(Protocol):
    """What the core asks of a connection: the version of a request both sides speak."""

    def version_for(self, api_key: int, low: int = 0, high: int | None = None) -> int: ...


class SenderCore:
    """The sender's state and decisions; a driver subclasses it and fills in the hooks."""

    # Whether the driver's transport writes a bulk batch's pieces by reference (a SealedBatch in
    # the Produce request) rather than the batch as one bytes.
    GATHERED_BATCHES = False

    def __init__(self, accumulator: RecordAccumulator, config: ProducerConfig, *, deliver: Deliver,
                 idempotence: IdempotenceState | None, legacy: bool, metadata: Callable[[], ClusterMetadata],
                 backoff: Backoff, max_produce_version: int | None = None,
                 transactions: TransactionManager | None = None) -> None:
        self._txn = transactions
        self._acc = accumulator
        self._deliver = deliver
        self._idem = idempotence
        self._metadata = metadata               # the driver's current metadata snapshot
        self._backoff = backoff                 # retry.backoff.ms .. retry.backoff.max.ms
        self._legacy = legacy                   # Produce v0-2: message sets, magic 0/1
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
        # Open connections by node (the driver's; ``usable`` ones take requests).
        self._connections: dict[int, Any] = {}
        self._batches_out: dict[TopicPartition, int] = {}  # per partition
        self._init_not_before = 0.0
        self._init_failures = 0
        self.flushing = 0        # flush() calls waiting: everything queued is ready now
        self.closing = False
        self.fatal_error: BaseException | None = None

    # -- the driver's hooks -----------------------------------------------------------------------
    def _connect(self, node: int) -> None:
        """Open a connection to ``node``; the next round sends to it once it is in ``_connections``."""
        raise NotImplementedError

    def _dispatch(self, node: int, conn: Any, batches: list[ProducerBatch]) -> None:
        """Send ``batches`` (taken for ``node``) in one request on ``conn``."""
        raise NotImplementedError

    def _want_metadata(self) -> None:
        """The metadata is stale: refresh it (in the background, or before the next round)."""
        raise NotImplementedError

    def _producer_id_wait(self, now: float, next_round: float) -> float:
        """An idempotent producer has no producer id: get one going; the time of the next round."""
        raise NotImplementedError

    def _start_add_partitions(self, txn: TransactionManager) -> None:
        """AddPartitionsToTxn for the partitions records were queued for (transactions)."""
        raise NotImplementedError

    # -- one round --------------------------------------------------------------------------------
    def _run_once(self, now: float) -> float:
        """One round: expire, settle sequences, send what is ready.  Seconds until the next round."""
        acc = self._acc
        next_round = self._expire(now)
        idem = self._idem
        txn = self._txn
        if txn is not None:
            if txn.failing:
                self._fail_queued(txn)
            elif txn.has_pending:
                self._start_add_partitions(txn)
        if idem is not None:
            if idem.needs_producer_id:
                if txn is not None:
                    return next_round - now  # init_transactions() gets the producer id
                if self.fatal_error is not None:
                    self.abort(self.fatal_error)  # no producer id will come: every record fails with why
                    return float("inf")
                return self._producer_id_wait(now, next_round) - now  # nothing goes out without one
            for tp in idem.pending_resets():
                for batch in idem.settle(tp, self._batches_out.get(tp, 0)):
                    batch.retry_at = 0.0
        metadata = self._metadata()
        if metadata.age() > self._metadata_max_age:
            self._want_metadata()
        if not acc.queues:
            return next_round
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
            self._dispatch(node, self._connections[node], batches)
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

    def _connect_failed(self, node: int, error: BaseException) -> None:
        """A connection to ``node`` could not be opened (the driver backs off before the next try)."""
        metadata = self._metadata()
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

    # -- one request ------------------------------------------------------------------------------
    def _build(self, conn: VersionSource, batches: list[ProducerBatch]
               ) -> tuple[messages.ProduceRequest, int, dict[uuid.UUID | str, str]] | None:
        """The request of ``batches`` for ``conn`` (marked sent), or None when it cannot be made
        (no common version, a codec that cannot encode...): the batches failed then."""
        try:
            built = self._request(conn, batches)
        except Exception as exc:  # noqa: BLE001 - failed to the records, not raised
            for batch in batches:
                self._fail(batch, exc, maybe_written=batch.ambiguous)
            return None
        for batch in batches:
            batch.sent = True
        return built

    def _request_failed(self, batches: list[ProducerBatch], exc: BaseException) -> None:
        """The request got no answer (lost connection, timeout): maybe written."""
        if isinstance(exc, ClientError) and exc.retriable:
            self._want_metadata()
        for batch in batches:
            self._retry_or_fail(batch, exc)

    def _answered(self, response: messages.ProduceResponse | None, version: int,
                  names: dict[uuid.UUID | str, str], batches: list[ProducerBatch]) -> None:
        """The request's answer (None: acks=0, nobody tells us more)."""
        if response is None:
            for batch in batches:
                self._succeed(batch, -1, -1)
            return
        self._handle_response(response, version, names, batches)

    def _request_done(self, node: int, batches: list[ProducerBatch]) -> None:
        """The request to ``node`` is over, whatever became of it."""
        self._requests_out[node] -= 1
        for batch in batches:
            self._batches_out[batch.tp] -= 1

    def _request(self, conn: VersionSource, batches: list[ProducerBatch]
                 ) -> tuple[messages.ProduceRequest, int, dict[uuid.UUID | str, str]]:
        if self._legacy:
            version = conn.version_for(ApiKey.PRODUCE, 0, min(2, self._max_version if self._max_version is not None else 2))
            magic = 1 if version == 2 else 0
        else:
            top = self._max_version if self._txn is None else self._txn.produce_ceiling(self._max_version)
            version = conn.version_for(ApiKey.PRODUCE, FIRST_BATCH_PRODUCE_VERSION, top)
            magic = 2
        metadata = self._metadata()
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
            records = batch.encode(compression, magic if self._txn is None else 2, transactional=self._txn is not None,
                                   gathered=self.GATHERED_BATCHES)
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
        batch.retry_at = now + self._backoff.delay(batch.attempts - 1)
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
        if self._txn is not None:
            from .transactions import TransactionAbortedError, TransactionAbortRequiredError

            if not isinstance(error, (TransactionAbortedError, TransactionAbortRequiredError)):
                self._txn.fail(error)
        self._acc.complete(batch)
        self._deliver(batch, -1, -1, error)

    def _fail_queued(self, txn: TransactionManager) -> None:
        """Fail the batches not sent (queued, or back for a retry) of a failing or aborted transaction."""
        from .transactions import TransactionAbortedError, TransactionAbortRequiredError, TxnState

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

    # -- producer id ------------------------------------------------------------------------------
    @staticmethod
    def _producer_id_request() -> messages.InitProducerIdRequest:
        """An idempotent (not transactional) producer's InitProducerId."""
        return messages.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=_NO_TRANSACTION_TIMEOUT_MS)

    @staticmethod
    def _producer_id_of(response: messages.InitProducerIdResponse) -> messages.InitProducerIdResponse:
        """The answer, or its error raised."""
        if response.error_code:
            raise KafkaError.for_code(response.error_code)("InitProducerId for an idempotent producer")
        return response

    def _producer_id_answered(self, response: messages.InitProducerIdResponse) -> None:
        self._init_failures = 0
        assert self._idem is not None  # only an idempotent producer asks for an id here
        self._idem.set_producer_id(response.producer_id, response.producer_epoch)

    def _producer_id_failed(self, exc: BaseException) -> bool:
        """No producer id: retriable, try again after a backoff (True); otherwise fatal, and every
        record fails with why (False)."""
        if is_retriable(exc):
            self._init_not_before = time.monotonic() + self._backoff.delay(self._init_failures)
            self._init_failures += 1
            return True
        if isinstance(exc, UnsupportedApiError):
            exc = UnsupportedApiError(f"{exc}; set enable.idempotence=false to produce without it")
        self.fatal_error = exc
        self.abort(exc)
        return False
