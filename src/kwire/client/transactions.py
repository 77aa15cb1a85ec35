"""The transactional producer's state machine (Kafka's TransactionManager, KIP-98), without I/O.

The producer drives it: it asks the machine whether a call is allowed now (each ``begin_*`` or
``check_*`` raises the error a caller should see when it is not), sends the requests the machine
says are needed, and reports their outcomes back.  The states are Java's::

    UNINITIALIZED --init_transactions--> INITIALIZING --> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit--> COMMITTING --> READY        (EndTxn(commit) once every record is in)
    IN_TRANSACTION / ABORTABLE_ERROR --abort--> ABORTING --> READY
    IN_TRANSACTION / COMMITTING --a record or request failed--> ABORTABLE_ERROR (only abort leaves it)
    any --fenced, not authorized--> FATAL_ERROR (the producer can only be closed)

Partitions join the coordinator's transaction (AddPartitionsToTxn) before their first batch is
sent: ``add_partition`` notes a partition when a record for it is queued, the sender takes the
noted ones in one request (``take_pending``), and a partition's batches go out only once it is
``in_transaction``.

Transactions v2 (KIP-890 part 2), chosen as Java's TransactionManager chooses it: when the
cluster finalizes ``transaction.version`` 2 or more (``finalized_tv``, from the coordinator's
ApiVersions), each transaction begun is a v2 one (``v2``).  Then nothing is added by the client:
Produce v12+ adds a partition and TxnOffsetCommit v5 a group, EndTxn v5 bumps the epoch and
answers the one the next transaction uses.  Otherwise (an older broker, or a cluster an admin
set to 1) transactions v1 as above.

Errors are sorted as Java sorts them (``classify``): the coordinator moved or is busy
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS...) is retried; another
producer took the transactional id (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) or the id is not
ours to use (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is fatal; anything else failing inside a
transaction makes it abortable: ``commit_transaction`` raises ``TransactionAbortRequiredError``
and ``abort_transaction`` must follow.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    TransactionalIdAuthorizationFailedError,
    TransactionCoordinatorFencedError,
    UnsupportedVersionError,
)
from kwire.protocol.errors import ProducerFencedError as _BrokerProducerFencedError

from .errors import ClientError, IllegalStateError, UnsupportedApiError
from .lazy_log import LazyLogger
from .producer_errors import ProducerFencedError
from .types import TopicPartition

__all__ = [
    "ConsumerGroupMetadata",
    "TRANSACTION_COORDINATOR",
    "TransactionAbortRequiredError",
    "TransactionAbortedError",
    "TransactionError",
    "TransactionManager",
    "TxnState",
    "classify",
    "fenced_error",
]

# (logging imported only when a record could be shown: see lazy_log)
logger = LazyLogger("kwire.client.producer")

# FindCoordinator's key type for a transactional id (0 is a group).
TRANSACTION_COORDINATOR = 1
# The newest Produce version of a transactions v1 producer (KIP-890: v12 adds the partition).
V1_PRODUCE_CEILING = 11


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """Who consumed the offsets a transaction commits (KIP-447): the coordinator refuses them
    from a member the group has since rebalanced out.  ``Consumer.consumer_group_metadata()``."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionError(ClientError):
    """A transactional call that cannot go on (the base of the errors below)."""


class TransactionAbortRequiredError(TransactionError):
    """The transaction failed (a record was not written, offsets were refused...): it cannot be
    committed any more; call ``abort_transaction()``, then begin a new one.  The cause is the
    error that failed it."""

    txn_requires_abort = True


class TransactionAbortedError(TransactionError):
    """A record's transaction was aborted before the record was sent."""


class TxnState(enum.Enum):
    """Where a transactional producer is in its transaction's life, with the names of Java's
    TransactionManager.State."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING_TRANSACTION"
    ABORTING = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


RETRY, FATAL, ABORTABLE = "retry", "fatal", "abortable"
# INVALID_PRODUCER_ID_MAPPING is not among them: since KIP-360 it is abortable, the abort bumping
# the epoch (the sender sees to that).
_FATAL = (ProducerFencedError, _BrokerProducerFencedError, InvalidProducerEpochError,
          TransactionalIdAuthorizationFailedError, TransactionCoordinatorFencedError, InvalidTxnStateError,
          ClusterAuthorizationFailedError, UnsupportedVersionError, UnsupportedApiError)
_FENCED = (ProducerFencedError, _BrokerProducerFencedError, InvalidProducerEpochError,
           TransactionCoordinatorFencedError)


def classify(error: BaseException) -> str:
    """RETRY, FATAL or ABORTABLE: what an error of a transactional request means for the producer."""
    if isinstance(error, _FATAL):
        return FATAL
    if isinstance(error, (KafkaError, ClientError)) and error.retriable:
        return RETRY
    return ABORTABLE


def fenced_error(error: BaseException, transactional_id: str) -> BaseException:
    """The error to raise for a fatal ``error``: fencing of any kind as ``ProducerFencedError``."""
    if isinstance(error, ProducerFencedError) or not isinstance(error, _FENCED):
        return error
    fenced = ProducerFencedError(
        f"transactional.id {transactional_id!r}: another producer with this id took over ({error.name}); "
        "this producer can only be closed")
    fenced.__cause__ = error
    return fenced


class TransactionManager:
    """The transaction state of one producer (event loop only).  See the module docstring."""

    def __init__(self, transactional_id: str, timeout_ms: int):
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.epoch = -1
        self.error: BaseException | None = None       # what made the state ABORTABLE_ERROR or FATAL_ERROR
        self.in_transaction: set[TopicPartition] = set()  # added to the coordinator's transaction
        self._pending: set[TopicPartition] = set()        # to add, with the next AddPartitionsToTxn
        self._adding: set[TopicPartition] = set()         # in the AddPartitionsToTxn out now
        # A request that may have opened the transaction at the coordinator was sent: the
        # transaction must be ended with EndTxn.
        self.started = False
        # The cluster's transaction.version as the coordinator last reported it (0: unknown), and
        # whether the current transaction is a v2 one (fixed when it begins, as in Java).
        self.finalized_tv = 0
        self.v2 = False

    # -- the caller's view ------------------------------------------------------------------------
    def _raise_error_state(self, action: str) -> None:
        if self.state is TxnState.FATAL_ERROR:
            raise self.error.with_traceback(None)  # type: ignore[union-attr]
        if self.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortRequiredError(
                f"cannot {action}: the transaction failed ({self.error}); call abort_transaction()") from self.error

    def begin_init(self) -> None:
        """init_transactions(): allowed once, before anything else (or again after it timed out)."""
        self._raise_error_state("init_transactions")
        if self.state not in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            raise IllegalStateError("init_transactions() was already called: this producer's transactions "
                                    "are initialized")
        self.state = TxnState.INITIALIZING

    def initialized(self, producer_id: int, epoch: int) -> None:
        """InitProducerId answered (first init, or an epoch bump after an abort)."""
        self.producer_id, self.epoch = producer_id, epoch
        if self.state in (TxnState.INITIALIZING, TxnState.ABORTING):
            self._clear()
            self.state = TxnState.READY

    def begin(self) -> None:
        """begin_transaction(): local only, as in Kafka (the coordinator hears of it with the first
        partition or offsets)."""
        self._raise_error_state("begin_transaction")
        if self.state is TxnState.READY:
            self.state = TxnState.IN_TRANSACTION
            self.v2 = self.finalized_tv >= 2
            return
        if self.state in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            raise IllegalStateError("call init_transactions() before begin_transaction()")
        if self.state is TxnState.IN_TRANSACTION:
            raise IllegalStateError("a transaction is already in progress: commit or abort it first")
        raise IllegalStateError(f"cannot begin a transaction while {self.state.value}: "
                                "finish the pending commit_transaction() or abort_transaction() call")

    def check_send(self, action: str = "send") -> None:
        """Records and offsets join a transaction only while one is in progress."""
        if self.state is TxnState.IN_TRANSACTION:
            return
        self._raise_error_state(action)
        if self.state in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            raise IllegalStateError(f"cannot {action}: a transactional producer needs init_transactions() "
                                    "and begin_transaction() first")
        if self.state is TxnState.READY:
            raise IllegalStateError(f"cannot {action} outside a transaction: call begin_transaction() first")
        raise IllegalStateError(f"cannot {action} while the transaction is {self.state.value}")

    def begin_commit(self) -> None:
        """commit_transaction(): from IN_TRANSACTION (or again after a commit timed out)."""
        if self.state is TxnState.COMMITTING:
            return
        self._raise_error_state("commit the transaction")
        if self.state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError(f"no transaction to commit ({self.state.value}): call begin_transaction() first"
                                    if self.state in (TxnState.READY, TxnState.UNINITIALIZED, TxnState.INITIALIZING)
                                    else f"cannot commit while {self.state.value}")
        self.state = TxnState.COMMITTING

    def begin_abort(self) -> None:
        """abort_transaction(): from IN_TRANSACTION or ABORTABLE_ERROR (or again after it timed out)."""
        if self.state is TxnState.FATAL_ERROR:
            raise self.error.with_traceback(None)  # type: ignore[union-attr]
        if self.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
            self.state = TxnState.ABORTING
            self._pending.clear()  # never added: nothing of them was sent
            return
        if self.state is TxnState.COMMITTING:
            raise IllegalStateError("commit_transaction() is still in progress (it timed out): call it again")
        raise IllegalStateError(f"no transaction to abort ({self.state.value})")

    @property
    def upgrading_to_v2(self) -> bool:
        """A v1 transaction ends while the cluster now finalizes transaction.version 2: the next
        (v2) transaction starts on a bumped epoch, as Java's clientSideEpochBumpRequired, so that
        nothing of the v1 transaction counts as part of it."""
        return not self.v2 and self.finalized_tv >= 2 and self.producer_id >= 0

    def completed(self) -> None:
        """EndTxn succeeded (or was not needed): ready for the next transaction."""
        self._clear()
        self.state = TxnState.READY

    def _clear(self) -> None:
        self.in_transaction.clear()
        self._pending.clear()
        self.started = False
        self.error = None

    # -- failures ---------------------------------------------------------------------------------
    def fail(self, error: BaseException) -> BaseException:
        """A request or a record of the transaction failed with ``error``; returns the error to raise.

        Fatal errors end all transactional work; others make the open transaction abortable
        (nothing changes while it is being aborted, or before one is open).
        """
        if classify(error) == FATAL:
            error = fenced_error(error, self.transactional_id)
            if self.state is not TxnState.FATAL_ERROR:
                logger.error("transactional.id %r: %s", self.transactional_id, error)
                self.state, self.error = TxnState.FATAL_ERROR, error
            return self.error  # type: ignore[return-value]
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            logger.info("transactional.id %r: the transaction must be aborted: %s", self.transactional_id, error)
            self.state, self.error = TxnState.ABORTABLE_ERROR, error
        return error

    @property
    def failing(self) -> bool:
        """Queued records cannot be sent in the current transaction (it failed or is being aborted)."""
        return self.state in (TxnState.ABORTABLE_ERROR, TxnState.ABORTING, TxnState.FATAL_ERROR)

    # -- partitions -------------------------------------------------------------------------------
    def add_partition(self, tp: TopicPartition) -> None:
        """A record for ``tp`` was queued in the transaction.  In a v2 transaction its Produce
        adds the partition: it may be sent at once."""
        if self.v2:
            self.in_transaction.add(tp)
            self.started = True
        elif tp not in self.in_transaction and tp not in self._adding:
            self._pending.add(tp)

    def produce_ceiling(self, top: int | None) -> int | None:
        """The newest Produce version for this transaction's batches: v11 in a v1 transaction
        (v12+ would have the partition leader add the partition, which is v2's; Java caps it
        the same way), ``top`` (the producer's own limit, None: none) otherwise."""
        if self.v2:
            return top
        return V1_PRODUCE_CEILING if top is None else min(top, V1_PRODUCE_CEILING)

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s batches may go out (the coordinator has the partition in the transaction)."""
        return tp in self.in_transaction

    @property
    def has_pending(self) -> bool:
        return bool(self._pending) and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)

    def take_pending(self) -> list[TopicPartition]:
        """The partitions for the next AddPartitionsToTxn (marked as being added)."""
        taken = sorted(self._pending)
        self._adding.update(taken)
        self._pending.clear()
        self.started = True
        return taken

    def partitions_added(self, tps: Iterable[TopicPartition], error: BaseException | None = None) -> None:
        """AddPartitionsToTxn's outcome: added, or ``error`` (which ``fail`` has already judged)."""
        tps = list(tps)
        self._adding.difference_update(tps)
        if error is None:
            self.in_transaction.update(tps)
