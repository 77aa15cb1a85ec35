"""The producer's background task: ``SenderCore`` (which batches go out, what answers mean) driven
by asyncio.

The core (``sender_core``) decides; this module does the I/O it asks for as tasks of the event
loop: connecting to leaders (``Cluster``), one task per Produce request, metadata refreshes, the
idempotent producer's InitProducerId, and a transactional producer's coordinator requests.

A transactional producer (``transactions``) sends a partition's batches only once the partition is
in the coordinator's transaction: the sender adds the partitions records were queued for with one
AddPartitionsToTxn at a time (those noted meanwhile go in the next one).  Batches carry the
transactional bit and Produce names the transactional id.  A failed batch makes the transaction
abortable (fenced: fatal), and while it is failing or being aborted, queued batches are failed
instead of sent.  ``coordinator_call`` sends the producer's other transactional requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    CoordinatorNotAvailableError,
    InvalidProducerIdMappingError,
    KafkaError,
    NotCoordinatorError,
    OperationNotAttemptedError,
)

from .accumulator import ProducerBatch, RecordAccumulator
from .cluster import Cluster
from .errors import BrokerConnectionError
from .retry import retrying
from .sender_core import FIRST_BATCH_PRODUCE_VERSION, TOPIC_ID_PRODUCE_VERSION, Deliver, SenderCore
from .transactions import TRANSACTION_COORDINATOR, TransactionManager
from .types import TopicPartition

if TYPE_CHECKING:
    from kwire.protocol.messages import Request, Response

    from .config import ProducerConfig
    from .connection import BrokerConnection
    from .idempotence import IdempotenceState

    R = TypeVar("R", bound=Response)
T = TypeVar("T")

__all__ = ["FIRST_BATCH_PRODUCE_VERSION", "TOPIC_ID_PRODUCE_VERSION", "Sender", "raise_partition_errors"]

logger = logging.getLogger("kwire.client.producer")


class Sender(SenderCore):
    """Drains the accumulator to the partition leaders.  ``start()`` it inside the event loop."""

    def __init__(self, cluster: Cluster, accumulator: RecordAccumulator, config: ProducerConfig, *,
                 deliver: Deliver, idempotence: IdempotenceState | None, legacy: bool,
                 topics: Callable[[], Iterable[str]], max_produce_version: int | None = None,
                 transactions: TransactionManager | None = None) -> None:
        super().__init__(accumulator, config, deliver=deliver, idempotence=idempotence, legacy=legacy,
                         metadata=lambda: cluster.metadata, backoff=cluster.retry_backoff,
                         max_produce_version=max_produce_version, transactions=transactions)
        self._cluster = cluster
        self._add_task: asyncio.Task[None] | None = None  # the AddPartitionsToTxn out now
        self._topics = topics                   # the topics this producer sends to
        # Requests go only to a node whose connection is open, so that each is written the moment
        # it is made: two requests waiting for one connect could otherwise be written in either order.
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Task[BrokerConnection]] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_not_before = 0.0
        self._init_task: asyncio.Task[None] | None = None

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

    # -- the core's hooks --------------------------------------------------------------------------
    def _start_add_partitions(self, txn: TransactionManager) -> None:
        if self._add_task is None:
            self._add_task = asyncio.ensure_future(self._add_partitions(txn, txn.take_pending()))

    def _producer_id_wait(self, now: float, next_round: float) -> float:
        self._want_producer_id(now)
        if self._init_task is None and self._init_not_before > now:
            next_round = min(next_round, self._init_not_before)
        return next_round

    def _dispatch(self, node: int, conn: BrokerConnection, batches: list[ProducerBatch]) -> None:
        task = asyncio.ensure_future(self._produce(node, conn, batches))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

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
            self._connect_failed(node, error)
        self._wakeup.set()

    async def _produce(self, node: int, conn: BrokerConnection, batches: list[ProducerBatch]) -> None:
        try:
            built = self._build(conn, batches)
            if built is None:
                return
            request, version, names = built
            try:
                response = await conn.send(request, version=version, expect_response=self._acks != 0)
            except Exception as exc:  # noqa: BLE001 - lost connection or timeout: maybe written
                self._request_failed(batches, exc)
                return
            self._answered(response, version, names, batches)
        finally:
            self._request_done(node, batches)
            self._wakeup.set()

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
            return self._producer_id_of(await conn.send(self._producer_id_request(), version=version))

        try:
            response = await retrying(attempt, timeout=cluster.request_timeout, backoff=cluster.retry_backoff,
                                      what="InitProducerId")
        except Exception as exc:  # noqa: BLE001 - retriable: try again later; otherwise fatal
            if self._producer_id_failed(exc):
                logger.info("no producer id yet: %s", exc)
            else:
                logger.error("the idempotent producer cannot get a producer id: %s", self.fatal_error)
        else:
            self._producer_id_answered(response)
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
