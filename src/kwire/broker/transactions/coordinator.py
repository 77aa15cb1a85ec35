"""The transaction coordinator (Kafka's TransactionCoordinator, KIP-98; transactions v1 and v2).

Per transactional id it keeps a producer id and epoch and the transaction's state, partitions
and groups (``state.TransactionMetadata``), stored in ``__transaction_state`` as Kafka's records
before a request that changed them is answered (``store``).  A group is in a transaction through
its ``__consumer_offsets`` partition, as in Kafka, so a restart finds its groups again from
those partitions and the offsets they staged.  Behaviour follows Kafka's coordinator, which is what clients are
written against:

* InitProducerId gives a new id (first time) or bumps the epoch, which fences the previous
  producer of the id: its next request is answered PRODUCER_FENCED (INVALID_PRODUCER_EPOCH from a
  partition).  An open transaction is aborted first, with its markers written under a bumped
  epoch.  Kafka answers that InitProducerId with CONCURRENT_TRANSACTIONS and bumps the epoch a
  second time when the client retries; markers are local here, so the abort completes at once
  and the retry's answer (the epoch bumped twice) is given straight away.  At the end of the
  epoch range the id gets a new producer id; a client retrying after a lost answer (KIP-360,
  v3+) is recognised by its previous id and epoch.
* AddPartitionsToTxn / AddOffsetsToTxn open the transaction (Ongoing) and add to it; Produce
  of transactional data and TxnOffsetCommit are checked against it (``verify_produce``,
  ``check_txn_offset_commit``, KIP-890 part 1: data for a partition the producer didn't add is
  refused).  A transactions v2 client (KIP-890 part 2) adds nothing itself: Produce v12+ adds its
  partition and TxnOffsetCommit v5+ its group, as Kafka's partition leader and group coordinator
  do for it through AddPartitionsToTxnManager.
* EndTxn of a v2 client (v5+) bumps the epoch (its markers carry the new one, so a zombie of the
  old epoch is fenced at the partitions too) and answers the id and epoch to use next; an
  exhausted epoch gets a new producer id (Kafka's nextProducerId).  It may abort with nothing
  added, and a retry is recognised by its epoch being one behind (Kafka's table in
  TransactionCoordinator.endTransaction).  Which version a request speaks is its own
  (``version``); the cluster's transaction.version only picks the record format and whether the
  coordinator's own aborts (timeout, fencing) bump the epoch once more, as Kafka's.
* EndTxn: the decision (PrepareCommit / PrepareAbort) is stored, then a marker goes to every
  partition of the transaction and the group coordinator commits or drops the offsets staged by
  the transaction; with the markers durable (fsync "always": a group commit of their logs) the
  transaction is CompleteCommit / CompleteAbort.  The answer waits for that, so the client's
  next transaction need not retry CONCURRENT_TRANSACTIONS.  A marker that can't be written
  leaves the transaction preparing (answered CONCURRENT_TRANSACTIONS meanwhile) and is retried.
* A transaction open longer than its timeout (from its first AddPartitions) is aborted by the
  broker with a bumped epoch (one timer per open transaction on the event loop), so a zombie
  producer is fenced.  Idle transactional ids expire after ``transactional_id_expiration_ms``.
* Restart: preparing transactions are completed; an open one keeps its partitions' LSO until it
  is ended or times out (its timer counts from its start, wall clock).  A transaction a partition
  holds open but the coordinator has no record of (its state file lost or behind, possible only
  after a power cut with fsync "never"/"interval") joins the producer's open transaction of that
  epoch, or else is aborted, so no LSO stays stuck.  A broker loads this state after it listens
  (``install_state``, from ``coordinator.loader``, once every group is loaded), as Kafka's
  coordinator loads its partitions; until then requests answer COORDINATOR_LOAD_IN_PROGRESS.

Handlers run on the event loop one at a time, so there is no locking.  Error results are
Kafka error codes; the handlers map them to what each request version knows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwire.protocol.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
)

from ..coordinator.timers import Timers
from ..internal_topics import OFFSETS_TOPIC
from ..topics import META_DIR
from .markers import MarkerWriter
from .state import EPOCH_EXHAUSTED, MAX_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionMetadata, TxnState
from .store import TransactionStore
from .version import FEATURE, TV_0, TV_2, supports_epoch_bump

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..coordinator import GroupCoordinator
    from ..durability import GroupCommit
    from ..internal_topics import InternalTopics
    from ..producer_ids import ProducerIdManager
    from ..state import PartitionWaiters
    from ..storage import LogManager, PartitionLog
    from ..topics import TopicRegistry

__all__ = ["TransactionCoordinator", "InitResult", "EndTxnResult", "MARKER_RETRY_MS", "EXPIRATION_CHECK_INTERVAL_MS"]

logger = logging.getLogger("kwire.broker.transactions")

MARKER_RETRY_MS = 1000
EXPIRATION_CHECK_INTERVAL_MS = 60 * 60 * 1000  # transaction.remove.expired.transaction.cleanup.interval.ms


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class InitResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    """EndTxn's answer: an error code, and for a transactions v2 client the producer id and
    epoch of its next transaction (-1 for v1 clients, as Kafka answers them)."""
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


def _finalized_transaction_version(data_dir: Path) -> Callable[[], int]:
    """The cluster's finalized transaction.version, read from the broker's feature store (the
    file UpdateFeatures writes; the store re-reads it when it changes)."""
    from ..handlers.features import FeatureStore  # here: the handlers import this package

    store = FeatureStore(data_dir)
    return lambda: store.current().levels.get(FEATURE, 0)


class TransactionCoordinator:
    """All transactional ids of the broker.  Build it after the logs and the group coordinator
    (it completes what a restart left half done), ``start()`` it on the event loop (timers),
    ``close()`` it on shutdown."""

    def __init__(self, data_dir: Path, config: BrokerConfig, *, producer_ids: ProducerIdManager, logs: LogManager,
                 topics: TopicRegistry, waiters: PartitionWaiters, durability: GroupCommit,
                 groups: GroupCoordinator, internal_topics: InternalTopics, clock: Callable[[], int] | None = None,
                 load: bool = True, transaction_version: Callable[[], int] | None = None):
        self._config = config
        self._producer_ids = producer_ids
        self._logs = logs
        self._durability = durability
        self._groups = groups
        self._clock = clock or _wall_clock_ms
        # The cluster's transaction.version (a callable: UpdateFeatures may change it at any time).
        self.transaction_version = transaction_version or _finalized_transaction_version(Path(data_dir))
        self._store = TransactionStore(internal_topics, Path(data_dir) / META_DIR, fsync=config.fsync,
                                       notify=waiters.notify, transaction_version=self.transaction_version)
        self._markers = MarkerWriter(logs, topics, waiters)
        self._timers = Timers(on_bind=self._on_loop)
        # Logs that got a preparing transaction's markers, to fsync before it completes ("always").
        self._unsynced: dict[str, list[PartitionLog]] = {}
        self._closed = False
        # With load=False the broker's loader replays __transaction_state after it listens
        # (read_state off the loop, then install_state on it); requests answer
        # COORDINATOR_LOAD_IN_PROGRESS until then, as Kafka's while a partition loads.
        self._txns: dict[str, TransactionMetadata] = {}
        self._loaded = False
        # Told each time a request finds the state loading (the loader loads the rest now if small).
        self.on_wanted: Callable[[], None] | None = None
        if load:
            self.install_state(self._store.read_all())

    # ------------------------------------------------------------------ loading

    @property
    def loaded(self) -> bool:
        return self._loaded

    def loading(self) -> bool:
        """Whether the state is still being loaded (every request then answers
        COORDINATOR_LOAD_IN_PROGRESS, as Kafka's TransactionStateManager for a loading partition).
        Handlers ask this first: the loader is told (``on_wanted``), which loads what is left at
        once when it is small (kwire's shortcut, see coordinator.loader)."""
        if not self._loaded and self.on_wanted is not None:
            self.on_wanted()
        return not self._loaded

    def state_on_disk(self) -> bool:
        """Whether __transaction_state has a partition on disk (else there is nothing to read)."""
        return self._store.state_on_disk()

    def read_state(self) -> dict[str, TransactionMetadata]:
        """The stored state, replayed from the logs (the loader runs it off the event loop)."""
        return self._store.read_all()

    def install_state(self, txns: dict[str, TransactionMetadata]) -> None:
        """Take the replayed state, then complete what the last run left half done (it needs the
        groups: install it after __consumer_offsets is loaded)."""
        if self._loaded or self._closed:
            return
        self._txns = self._store.install(txns)
        self._restore_groups()
        self._loaded = True
        self._recover()
        self._schedule_loaded(self._clock())

    # ------------------------------------------------------------------ lifecycle

    def _restore_groups(self) -> None:
        """The groups of each open or preparing transaction, which the stored record lists as
        their __consumer_offsets partitions: those with offsets staged by its producer there."""
        for txn in self._txns.values():
            if txn.state is TxnState.ONGOING or txn.state.preparing:
                for group_id in self._groups.groups_with_staged_offsets(txn.producer_id):
                    if (OFFSETS_TOPIC, self._groups.store.partition_of(group_id)) in txn.partitions:
                        txn.groups.add(group_id)

    def _recover(self) -> None:
        if self._txns:
            logger.info("loaded %d transactional id(s), %d transaction(s) open", len(self._txns),
                        sum(t.state is TxnState.ONGOING for t in self._txns.values()))
        self._reconcile_partitions()
        for txn in list(self._txns.values()):
            if txn.state.preparing:
                logger.info("completing the %s of %s left by the last run", txn.state.value, txn.transactional_id)
                self._complete(txn)

    def _reconcile_partitions(self) -> None:
        """Partitions holding a transaction open that the coordinator does not list (see the
        module doc): join it to the producer's open transaction of that epoch, else abort it."""
        by_pid = {t.producer_id: t for t in self._txns.values()}
        changed = False
        for topic, partition in self._logs.partitions():
            log = self._logs.get(topic, partition)
            for pid in list(log.producer_state.ongoing):
                entry = log.producer_state.get(pid)
                epoch = entry.epoch if entry is not None else 0
                txn = by_pid.get(pid)
                if txn is not None and txn.producer_epoch == epoch and (txn.state is TxnState.ONGOING
                                                                          or txn.state.preparing):
                    if (topic, partition) not in txn.partitions:
                        logger.warning("%s-%d holds an open transaction of %s that its state did not list; added",
                                       topic, partition, txn.transactional_id)
                        txn.partitions.add((topic, partition))
                        changed = True
                    continue
                logger.warning("%s-%d holds an open transaction of producer %d epoch %d that no coordinator "
                               "state explains; aborting it", topic, partition, pid, epoch)
                try:
                    log.append_marker(pid, epoch, False)
                except (KafkaError, OSError) as exc:
                    logger.error("could not abort it: %s", exc)
        if changed:
            self._save()

    def _on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._schedule_loaded(self._clock())
        self._schedule(("expiration",), EXPIRATION_CHECK_INTERVAL_MS, self._expiration_tick)

    def _schedule_loaded(self, now: int) -> None:
        """The timers of the loaded transactions (none yet without a running loop: _on_loop
        schedules them when one binds)."""
        for txn in self._txns.values():
            if txn.state is TxnState.ONGOING:
                self._schedule_timeout(txn, now)
            elif txn.state.preparing:  # its markers (or their fsync) failed before the loop ran
                self._schedule(("markers", txn.transactional_id), MARKER_RETRY_MS, self._retry_markers,
                               txn.transactional_id)

    def start(self) -> None:
        """Bind the timers to the running event loop (transaction timeouts, retries, expiration)."""
        self._timers.bind()

    def flush(self) -> None:
        """fsync the state file (the broker calls this periodically with ``fsync = "interval"``)."""
        if not self._closed:
            self._store.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._timers.cancel_all()
        self._store.close()

    # ------------------------------------------------------------------ helpers

    def _schedule(self, key: tuple, delay_ms: float, fn: Callable[..., Any], *args: Any) -> None:
        """A timer on the event loop; none without a running loop (handlers called directly)."""
        if self._timers.bind() is None:
            return

        def guarded() -> None:
            if not self._closed:
                fn(*args)

        self._timers.schedule(key, delay_ms, guarded)

    def _schedule_timeout(self, txn: TransactionMetadata, now: int) -> None:
        self._schedule(("timeout", txn.transactional_id), max(txn.start_ms + txn.timeout_ms - now, 0),
                       self._timeout_fired, txn.transactional_id)

    def _save(self) -> None:
        self._store.save(self._txns.values())

    def _change(self, txn: TransactionMetadata, before: TransactionMetadata | None) -> int:
        """Store the state with ``txn`` changed; on failure put ``before`` back (None: ``txn`` was
        new) and answer COORDINATOR_NOT_AVAILABLE, which clients retry."""
        try:
            self._save()
            return ErrorCode.NONE
        except OSError as exc:
            logger.error("could not store the state of transactional id %s: %s", txn.transactional_id, exc)
            if before is None:
                self._txns.pop(txn.transactional_id, None)
            else:
                self._txns[txn.transactional_id] = before
            return CoordinatorNotAvailableError.code

    def _check_producer(self, txn: TransactionMetadata | None, producer_id: int, epoch: int) -> int:
        """Kafka's checks of a client's transactional request against the id's metadata."""
        if txn is None or txn.producer_id != producer_id:
            return InvalidProducerIdMappingError.code
        if txn.producer_epoch != epoch:
            return ProducerFencedError.code
        if txn.state.preparing:
            return ConcurrentTransactionsError.code
        return ErrorCode.NONE

    def _coordinator_bumps(self) -> bool:
        """Whether an abort the coordinator makes on its own bumps the epoch once more (Kafka's
        uses the cluster's transaction version for those: at 2, the epoch bump of v2)."""
        return supports_epoch_bump(self.transaction_version())

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None = None) -> InitResult | Awaitable[InitResult]:
        """A producer id and epoch for the transactional id (``expected``: the (id, epoch) a v3+
        client already has).  An awaitable when an open transaction's abort waits for its markers
        to be fsynced."""
        if self.loading():
            return InitResult(CoordinatorLoadInProgressError.code)
        if not 0 < timeout_ms <= self._config.transaction_max_timeout_ms:
            return InitResult(InvalidTransactionTimeoutError.code)
        txn = self._txns.get(transactional_id)
        if txn is None:
            try:
                pid = self._producer_ids.allocate()
            except KafkaError as exc:
                return InitResult(exc.code)
            # Epoch -1: the first bump below makes it 0.
            txn = TransactionMetadata(transactional_id, pid, NO_PRODUCER_EPOCH, timeout_ms, update_ms=self._clock())
            self._txns[transactional_id] = txn
            return self._bump(txn, timeout_ms, expected, new=True)
        if expected is not None and not self._valid_producer_id(txn, expected):
            return InitResult(ProducerFencedError.code)
        if txn.state.preparing:
            return InitResult(ConcurrentTransactionsError.code)
        if txn.state is TxnState.ONGOING:
            logger.info("InitProducerId of %s aborts its open transaction (producer %d epoch %d)", transactional_id,
                        txn.producer_id, txn.producer_epoch)
            error = self._fence(txn)
            if error:
                return InitResult(error)
            bump = self._coordinator_bumps()
            pending = self._end(txn, commit=False, bump=bump, client_tv=TV_2 if bump else TV_0)
            if isinstance(pending, int):
                return InitResult(pending) if pending else self._bump(txn, timeout_ms, expected)
            return self._then(pending, lambda _: self._bump(txn, timeout_ms, expected))
        return self._bump(txn, timeout_ms, expected)

    @staticmethod
    def _valid_producer_id(txn: TransactionMetadata, expected: tuple[int, int]) -> bool:
        """Kafka's isValidProducerId: the id is this one, or the previous one whose epoch ran out
        (a retry after a rotation whose answer was lost), or the metadata is brand new."""
        pid, epoch = expected
        return (txn.producer_epoch == NO_PRODUCER_EPOCH or pid == txn.producer_id
                or (pid == txn.last_producer_id and epoch >= EPOCH_EXHAUSTED))

    def _bump(self, txn: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None, *,
              new: bool = False) -> InitResult:
        """Kafka's prepareIncrementProducerEpoch / prepareProducerIdRotation, then Empty."""
        if self._txns.get(txn.transactional_id) is not txn or txn.state.preparing:
            return InitResult(ConcurrentTransactionsError.code)  # changed while an abort was made durable
        before = None if new else copy.deepcopy(txn)
        now = self._clock()
        expected_epoch = expected[1] if expected is not None else None
        if txn.epoch_exhausted and (expected_epoch is None or expected_epoch == txn.producer_epoch):
            try:
                new_pid = self._producer_ids.allocate()
            except KafkaError as exc:
                return InitResult(exc.code)
            txn.last_producer_id, txn.producer_id = txn.producer_id, new_pid
            txn.last_producer_epoch = txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            txn.producer_epoch = 0
        elif expected_epoch is None:
            txn.last_producer_epoch, txn.producer_epoch = NO_PRODUCER_EPOCH, txn.producer_epoch + 1
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
            txn.last_producer_epoch, txn.producer_epoch = txn.producer_epoch, txn.producer_epoch + 1
        elif expected_epoch == txn.last_producer_epoch:
            pass  # a retry of a bump that succeeded: the same answer again
        else:
            return InitResult(ProducerFencedError.code)
        txn.timeout_ms = timeout_ms
        txn.transition_to(TxnState.EMPTY, now)
        error = self._change(txn, before)
        if error:
            return InitResult(error)
        return InitResult(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)

    def _fence(self, txn: TransactionMetadata) -> int:
        """Bump the epoch of an open transaction before the broker aborts it, so that its producer
        can't go on with it (Kafka's prepareFenceProducerEpoch).  The new epoch is never given out:
        the next InitProducerId bumps again."""
        before = copy.deepcopy(txn)
        if txn.producer_epoch < EPOCH_EXHAUSTED + 1:
            txn.producer_epoch += 1
        txn.last_producer_epoch = NO_PRODUCER_EPOCH
        return self._change(txn, before)

    # ------------------------------------------------------------------ AddPartitions / AddOffsets

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Collection[tuple[str, int]], client_tv: int = TV_0) -> int:
        """Add partitions to the producer's transaction (opening it); an error code.  ``client_tv``:
        the transaction version the request speaks (kept in the state, as Kafka's)."""
        if self.loading():
            return CoordinatorLoadInProgressError.code
        txn = self._txns.get(transactional_id)
        error = self._check_producer(txn, producer_id, epoch)
        if error:
            return error
        assert txn is not None
        if txn.state is TxnState.ONGOING and set(partitions) <= txn.partitions:
            return ErrorCode.NONE
        return self._add(txn, partitions, (), client_tv)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                    client_tv: int = TV_0) -> int:
        """Add a group's offsets to the producer's transaction: as Kafka, the group's
        __consumer_offsets partition joins it (its marker there commits or aborts the offsets
        TxnOffsetCommit writes); an error code."""
        if self.loading():
            return CoordinatorLoadInProgressError.code
        txn = self._txns.get(transactional_id)
        error = self._check_producer(txn, producer_id, epoch)
        if error:
            return error
        assert txn is not None
        if txn.state is TxnState.ONGOING and group_id in txn.groups:
            return ErrorCode.NONE
        return self._add(txn, [(OFFSETS_TOPIC, self._groups.store.partition_of(group_id))], (group_id,), client_tv)

    def _add(self, txn: TransactionMetadata, partitions: Iterable[tuple[str, int]], groups: Iterable[str],
             client_tv: int) -> int:
        before = copy.deepcopy(txn)
        now = self._clock()
        starting = txn.state is not TxnState.ONGOING
        txn.transition_to(TxnState.ONGOING, now)
        txn.client_tv = client_tv
        txn.partitions.update(partitions)
        txn.groups.update(groups)
        error = self._change(txn, before)
        if not error and starting:
            self._schedule_timeout(txn, now)
        return error

    # ------------------------------------------------------------------ checks for Produce and TxnOffsetCommit

    def _ongoing(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[int, TransactionMetadata | None]:
        """(0, the producer's ongoing transaction), or (the error code, None) that Produce and
        TxnOffsetCommit answer (a fenced epoch is INVALID_PRODUCER_EPOCH for both; no open
        transaction, Kafka's verification answer TRANSACTION_ABORTABLE, which the handlers turn
        into INVALID_TXN_STATE for versions before it)."""
        txn = self._txns.get(transactional_id)
        error = self._check_producer(txn, producer_id, epoch)
        if error == ProducerFencedError.code:
            return InvalidProducerEpochError.code, None
        if error:
            return error, None
        assert txn is not None
        if txn.state is not TxnState.ONGOING:
            return TransactionAbortableError.code, None
        return ErrorCode.NONE, txn

    @staticmethod
    def _as_partition_error(code: int) -> int:
        """A coordinator's answer as a partition leader or group coordinator passes it on
        (Kafka's AddPartitionsToTxnManager: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH there)."""
        return InvalidProducerEpochError.code if code == ProducerFencedError.code else code

    def verify_produce(self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int,
                       *, add: bool = False) -> int:
        """Whether transactional data of the producer may go to the partition: 0, or Kafka's
        answer to a Produce.  ``add`` (Produce v12+, transactions v2): the partition joins the
        producer's transaction, which this opens if none is."""
        if self.loading():
            # Kafka's verification gets COORDINATOR_LOAD_IN_PROGRESS and answers the Produce
            # with a retriable error, as for a transaction being completed.
            return ConcurrentTransactionsError.code
        if add:
            return self._as_partition_error(
                self.add_partitions(transactional_id, producer_id, epoch, [(topic, partition)], TV_2))
        error, txn = self._ongoing(transactional_id, producer_id, epoch)
        if error:
            return error
        return ErrorCode.NONE if (topic, partition) in txn.partitions else TransactionAbortableError.code

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                                *, add: bool = False) -> int:
        """Whether the producer may stage offsets of the group: 0, or an error code (as Kafka's
        group coordinator answers it).  ``add`` (TxnOffsetCommit v5+, transactions v2): the
        group joins the producer's transaction first, as AddOffsetsToTxn would."""
        if self.loading():
            return CoordinatorLoadInProgressError.code
        if add:
            code = self.add_offsets(transactional_id, producer_id, epoch, group_id, TV_2)
            if code:
                return self._as_partition_error(code)
        error, txn = self._ongoing(transactional_id, producer_id, epoch)
        if error:
            return error
        if group_id in txn.groups:
            return ErrorCode.NONE
        if (OFFSETS_TOPIC, self._groups.store.partition_of(group_id)) in txn.partitions:
            # Added before a restart (the stored record keeps the group's partition, not its id).
            txn.groups.add(group_id)
            return ErrorCode.NONE
        return TransactionAbortableError.code

    # ------------------------------------------------------------------ EndTxn

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                client_tv: int = TV_0) -> EndTxnResult | Awaitable[EndTxnResult]:
        """Commit or abort the producer's transaction (``client_tv``: the version the request
        speaks, Kafka's transactionVersionForEndTxn); the answer, or an awaitable of it when it
        waits for the markers' fsync."""
        if self.loading():
            return EndTxnResult(CoordinatorLoadInProgressError.code)
        if client_tv >= TV_2:
            return self._end_txn_v2(transactional_id, producer_id, epoch, commit)
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return EndTxnResult(InvalidProducerIdMappingError.code)
        if txn.producer_epoch != epoch:
            return EndTxnResult(ProducerFencedError.code)
        state = txn.state
        wanted_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        wanted_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state is TxnState.ONGOING:
            pending = self._end(txn, commit, client_tv=client_tv)
            if isinstance(pending, int):
                return EndTxnResult(pending)
            return self._then(pending, EndTxnResult)
        if state is wanted_complete:
            return EndTxnResult(ErrorCode.NONE)  # a retry of an EndTxn that was done
        if state is wanted_prepare:
            return EndTxnResult(ConcurrentTransactionsError.code)
        return EndTxnResult(self._refuse_end(transactional_id, commit, state))

    @staticmethod
    def _refuse_end(transactional_id: str, commit: bool, state: TxnState) -> int:
        logger.info("EndTxn(%s) of %s in state %s refused", "commit" if commit else "abort", transactional_id,
                    state.value)
        return InvalidTxnStateError.code

    def _end_txn_v2(self, transactional_id: str, producer_id: int, epoch: int,
                    commit: bool) -> EndTxnResult | Awaitable[EndTxnResult]:
        """EndTxn of a transactions v2 client, by Kafka's rules (TransactionCoordinator.endTransaction):
        every end bumps the epoch; a retry (the epoch one behind, or the last epoch of a rotated
        producer id) gets the answer again; an abort needs no open transaction."""
        txn = self._txns.get(transactional_id)
        if txn is None:
            return EndTxnResult(InvalidProducerIdMappingError.code)
        retry_on_overflow = (txn.last_producer_id == producer_id and epoch == EPOCH_EXHAUSTED
                             and txn.producer_epoch == 0)
        retry_on_bump = txn.producer_epoch == epoch + 1
        state = txn.state
        if state.preparing:
            valid_epoch = retry_on_bump
        elif state.complete:
            valid_epoch = retry_on_bump or retry_on_overflow or epoch == txn.producer_epoch
        else:
            valid_epoch = epoch == txn.producer_epoch
        if txn.producer_id != producer_id and not retry_on_overflow:
            return EndTxnResult(InvalidProducerIdMappingError.code)
        if not valid_epoch:
            return EndTxnResult(ProducerFencedError.code)
        retry = retry_on_bump or retry_on_overflow
        wanted_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        wanted_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state is TxnState.ONGOING:
            return self._end_v2(txn, commit, empty=False)
        if state.preparing:
            return EndTxnResult(ConcurrentTransactionsError.code if state is wanted_prepare
                                else self._refuse_end(transactional_id, commit, state))
        if retry:
            if state is wanted_complete:
                return EndTxnResult(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)
            return EndTxnResult(self._refuse_end(transactional_id, commit, state))
        if not commit:  # Empty, CompleteCommit or CompleteAbort: an abort with nothing added
            return self._end_v2(txn, commit, empty=True)
        return EndTxnResult(self._refuse_end(transactional_id, commit, state))

    def _end_v2(self, txn: TransactionMetadata, commit: bool, *, empty: bool) -> EndTxnResult | asyncio.Future:
        pending = self._end(txn, commit, bump=True, rotate=True, empty=empty, client_tv=TV_2)
        if isinstance(pending, int):
            return EndTxnResult(pending) if pending else self._next_producer(txn)
        return self._then(pending, lambda _: self._next_producer(txn))

    @staticmethod
    def _next_producer(txn: TransactionMetadata) -> EndTxnResult:
        """The id and epoch a v2 client goes on with: the new producer id at epoch 0 when the
        epoch ran out (before or after the transaction completed), else the bumped epoch."""
        if txn.next_producer_id != NO_PRODUCER_ID:
            return EndTxnResult(ErrorCode.NONE, txn.next_producer_id, 0)
        return EndTxnResult(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)

    def _end(self, txn: TransactionMetadata, commit: bool, *, bump: bool = False, rotate: bool = False,
             empty: bool = False, client_tv: int = TV_0) -> int | asyncio.Future:
        """Decide the transaction (Prepare*), store it, then complete it.  ``bump``: the epoch
        goes up by one first (Kafka's prepareAbortOrCommit for transactions v2; never past the
        maximum), ``rotate``: an exhausted epoch gets the next producer id, taken on completion;
        ``empty``: a v2 abort with nothing added, which starts now."""
        before = copy.deepcopy(txn)
        self._timers.cancel(("timeout", txn.transactional_id))
        now = self._clock()
        if bump:
            if rotate and txn.epoch_exhausted:
                try:
                    txn.next_producer_id = self._producer_ids.allocate()
                except KafkaError as exc:
                    self._txns[txn.transactional_id] = before
                    if before.state is TxnState.ONGOING:
                        self._schedule_timeout(before, now)
                    return exc.code
            txn.last_producer_epoch = txn.producer_epoch
            txn.producer_epoch = min(txn.producer_epoch + 1, MAX_EPOCH)
        txn.client_tv = client_tv
        txn.transition_to(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, now)
        if empty:
            txn.start_ms = now
        error = self._change(txn, before)
        if error:
            restored = self._txns.get(txn.transactional_id)
            if restored is not None and restored.state is TxnState.ONGOING:
                self._schedule_timeout(restored, self._clock())
            return error
        return self._complete(txn)

    def _complete(self, txn: TransactionMetadata) -> int | asyncio.Future:
        """Write the markers of a prepared transaction and end its groups' staged offsets; once
        the markers are durable, it is complete.  0, or an awaitable of 0 while their fsync runs:
        the decision is stored, so the client's EndTxn succeeded even if a marker has to be
        retried.  The completion does not depend on anyone awaiting (a client may hang up)."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        tid = txn.transactional_id
        result = self._markers.write(txn.producer_id, txn.producer_epoch, commit, sorted(txn.partitions))
        self._unsynced.setdefault(tid, []).extend(result.written)
        # What is still listed is what still lacks its marker (as DescribeTransactions shows it).
        txn.partitions = set(result.failed)
        failed_groups = set()
        for group_id in sorted(txn.groups):
            if (OFFSETS_TOPIC, self._groups.store.partition_of(group_id)) in result.failed:
                failed_groups.add(group_id)  # its marker comes first (the retry writes both)
                continue
            try:
                self._groups.end_txn_offsets(group_id, txn.producer_id, commit)
            except OSError as exc:
                logger.error("could not end the offsets of %s in group %s: %s", tid, group_id, exc)
                failed_groups.add(group_id)
        txn.groups = failed_groups
        if txn.partitions or txn.groups:
            self._try_save()
            self._schedule(("markers", tid), MARKER_RETRY_MS, self._retry_markers, tid)
            return ErrorCode.NONE
        return self._make_durable(txn)

    def _make_durable(self, txn: TransactionMetadata) -> int | asyncio.Future:
        """fsync the logs that got the transaction's markers (fsync "always"), then finish it."""
        logs = self._unsynced.get(txn.transactional_id, [])
        if self._config.fsync != "always" or not logs:
            self._finish(txn)
            return ErrorCode.NONE
        try:
            durable = self._durability.request(logs)
        except OSError as exc:  # no event loop: the fsync ran at once
            return self._fsync_failed(txn, exc)
        if isinstance(durable, concurrent.futures.Future):  # likewise
            exc = durable.exception()
            if exc is not None:
                return self._fsync_failed(txn, exc)
            self._finish(txn)
            return ErrorCode.NONE
        done = durable.get_loop().create_future()

        def settle(fut: asyncio.Future) -> None:
            exc = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
            if exc is None:
                self._finish(txn)
            else:
                self._fsync_failed(txn, exc)
            if not done.done():
                done.set_result(ErrorCode.NONE)

        durable.add_done_callback(settle)
        return done

    def _finish(self, txn: TransactionMetadata) -> None:
        if self._txns.get(txn.transactional_id) is not txn or not txn.state.preparing:
            return
        self._unsynced.pop(txn.transactional_id, None)
        txn.transition_to(TxnState.COMPLETE_COMMIT if txn.state is TxnState.PREPARE_COMMIT
                          else TxnState.COMPLETE_ABORT, self._clock())
        if txn.next_producer_id != NO_PRODUCER_ID:
            # The exhausted epoch's transaction is complete: the new producer id takes over at
            # epoch 0 (Kafka's prepareComplete for transactions v2).
            txn.last_producer_id, txn.producer_id = txn.producer_id, txn.next_producer_id
            txn.producer_epoch, txn.next_producer_id = 0, NO_PRODUCER_ID
        txn.partitions.clear()
        txn.groups.clear()
        # If this write fails, the file still says Prepare*: the next start completes it again.
        self._try_save()

    def _fsync_failed(self, txn: TransactionMetadata, exc: BaseException) -> int:
        logger.error("the markers of %s may not be on disk (fsync failed: %s); retrying", txn.transactional_id, exc)
        self._schedule(("markers", txn.transactional_id), MARKER_RETRY_MS, self._retry_markers, txn.transactional_id)
        return ErrorCode.NONE

    def _retry_markers(self, transactional_id: str) -> None:
        """Markers (or their fsync) that failed: try again (a timer calls this)."""
        txn = self._txns.get(transactional_id)
        if txn is None or not txn.state.preparing:
            return
        if txn.partitions or txn.groups:
            self._complete(txn)
        else:
            self._make_durable(txn)

    def _try_save(self) -> None:
        try:
            self._save()
        except OSError as exc:
            logger.error("could not store the transaction state: %s", exc)

    # ------------------------------------------------------------------ timeouts and expiration

    def _timeout_fired(self, transactional_id: str) -> None:
        txn = self._txns.get(transactional_id)
        if txn is None or txn.state is not TxnState.ONGOING:
            return
        now = self._clock()
        if txn.start_ms + txn.timeout_ms > now:
            self._schedule_timeout(txn, now)  # the wall clock lags the loop's: not yet
            return
        self.abort_timed_out(transactional_id)  # completes on its own; nobody waits for it

    def abort_timed_out(self, transactional_id: str) -> int | Awaitable[int]:
        """Abort the transaction of ``transactional_id`` as timed out: fence its producer (epoch
        bump) and write abort markers.  The timers call it; tests may too."""
        txn = self._txns.get(transactional_id)
        if txn is None or txn.state is not TxnState.ONGOING:
            return ErrorCode.NONE
        logger.info("transaction of %s (producer %d epoch %d) timed out after %d ms: aborting it", transactional_id,
                    txn.producer_id, txn.producer_epoch, self._clock() - txn.start_ms)
        error = self._fence(txn)
        if error:
            self._schedule(("timeout", transactional_id), MARKER_RETRY_MS, self._timeout_fired, transactional_id)
            return error
        bump = self._coordinator_bumps()
        return self._end(txn, commit=False, bump=bump, client_tv=TV_2 if bump else TV_0)

    def _expiration_tick(self) -> None:
        try:
            self.expire_transactional_ids()
        finally:
            self._schedule(("expiration",), EXPIRATION_CHECK_INTERVAL_MS, self._expiration_tick)

    def expire_transactional_ids(self, now_ms: int | None = None) -> list[str]:
        """Forget ids without an open transaction idle for transactional.id.expiration.ms (Kafka's
        rule); their next InitProducerId starts over with a new producer id."""
        if not self._loaded:
            return []
        now = self._clock() if now_ms is None else now_ms
        limit = self._config.transactional_id_expiration_ms
        gone = [tid for tid, t in self._txns.items()
                if (t.state is TxnState.EMPTY or t.state.complete) and now - t.update_ms >= limit]
        for tid in gone:
            del self._txns[tid]
        if gone:
            logger.info("%d transactional id(s) expired", len(gone))
            self._try_save()
        return gone

    # ------------------------------------------------------------------ admin

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's metadata (read it, don't change it), None if unknown."""
        return self._txns.get(transactional_id)

    def list_transactions(self, states: Collection[str] = (), producer_ids: Collection[int] = (),
                          min_duration_ms: int = -1, pattern: re.Pattern | None = None) -> list[TransactionMetadata]:
        """ListTransactions: every id, or those matching all the filters given (Kafka's rules:
        the duration counts from the last transaction's start; the pattern matches the whole id)."""
        now = self._clock()
        out = []
        for txn in sorted(self._txns.values(), key=lambda t: t.transactional_id):
            if states and txn.state.value not in states:
                continue
            if producer_ids and txn.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and now - txn.start_ms <= min_duration_ms:
                continue
            if pattern is not None and not pattern.fullmatch(txn.transactional_id):
                continue
            out.append(txn)
        return out

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _then(fut: asyncio.Future, fn: Callable[[Any], Any]) -> asyncio.Future:
        """A future of ``fn(result of fut)``, run when ``fut`` is done, awaited or not (a client
        that hangs up leaves no half-done work and no coroutine never awaited)."""
        out = fut.get_loop().create_future()

        def done(f: asyncio.Future) -> None:
            if out.done():
                return
            if f.cancelled() or f.exception() is not None:
                out.set_exception(f.exception() if not f.cancelled() else asyncio.CancelledError())
            else:
                out.set_result(fn(f.result()))

        fut.add_done_callback(done)
        return out
