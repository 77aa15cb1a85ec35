"""What the transaction coordinator knows of one transactional id (Kafka's TransactionMetadata).

States and the transitions between them are Kafka's::

    Empty -> Ongoing -> PrepareCommit -> CompleteCommit -> Ongoing ...
                     -> PrepareAbort  -> CompleteAbort  -> Ongoing ...
    Empty / CompleteCommit / CompleteAbort -> PrepareAbort   (transactions v2: an abort with
                                                              nothing added still bumps the epoch)

An Ongoing transaction holds the partitions and groups the producer added; PrepareCommit /
PrepareAbort mean the decision is made and the markers are being written (the partitions still
listed are those without one yet); Complete* means every marker is written.  The names are what
DescribeTransactions and ListTransactions report.  Dead is a transactional id that expired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["TxnState", "TransactionMetadata", "EPOCH_EXHAUSTED", "MAX_EPOCH", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka's TransactionMetadata.isEpochExhausted: the epoch can't be bumped past this (the
# coordinator keeps one more for fencing); a producer at it gets a new producer id instead.
EPOCH_EXHAUSTED = 2**15 - 2
MAX_EPOCH = 2**15 - 1  # Short.MAX_VALUE: only a fence or a transactions v2 bump reaches it


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"  # Kafka reports it; kwire fences and aborts in one step

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


# state -> the states it may be entered from.
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    # From Empty and Complete*: the empty abort of a transactions v2 client (Kafka's
    # TransactionState.PREPARE_ABORT lists them since KIP-890 part 2).
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                       TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset(),
}


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    # The id and epoch before the last change (an epoch bump or a new id when the epoch ran
    # out), so a producer retrying its InitProducerId after a lost answer is recognised (KIP-360).
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    start_ms: int = -1   # when the transaction began (its first AddPartitions/AddOffsets); -1 if none
    update_ms: int = -1  # the last change, for transactional id expiration
    # Transactions v2 (KIP-890 part 2): the producer id the client gets when this transaction
    # completes, allocated when ending it had to bump an exhausted epoch (Kafka's
    # nextProducerId), and the transaction version of the client's last request that changed
    # the state (0 or 2, Kafka's clientTransactionVersion; both are in the stored record).
    next_producer_id: int = NO_PRODUCER_ID
    client_tv: int = 0

    def transition_to(self, state: TxnState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"transactional id {self.transactional_id!r}: illegal transition "
                               f"{self.state.value} -> {state.value}")
        if state is TxnState.ONGOING and self.state is not TxnState.ONGOING:
            self.start_ms = now_ms
            self.partitions.clear()
            self.groups.clear()
        elif state is TxnState.EMPTY:
            self.start_ms = -1  # as Kafka: no transaction, no start time
        self.state = state
        self.update_ms = now_ms

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= EPOCH_EXHAUSTED

    def to_json(self) -> dict[str, Any]:
        return {"id": self.transactional_id, "pid": self.producer_id, "epoch": self.producer_epoch,
                "last_pid": self.last_producer_id, "last_epoch": self.last_producer_epoch,
                "timeout_ms": self.timeout_ms, "state": self.state.value,
                "partitions": sorted([t, p] for t, p in self.partitions), "groups": sorted(self.groups),
                "start_ms": self.start_ms, "update_ms": self.update_ms,
                "next_pid": self.next_producer_id, "client_tv": self.client_tv}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TransactionMetadata:
        return cls(transactional_id=str(obj["id"]), producer_id=int(obj["pid"]), producer_epoch=int(obj["epoch"]),
                   timeout_ms=int(obj["timeout_ms"]), state=TxnState(obj["state"]),
                   last_producer_id=int(obj["last_pid"]), last_producer_epoch=int(obj["last_epoch"]),
                   partitions={(str(t), int(p)) for t, p in obj["partitions"]},
                   groups={str(g) for g in obj["groups"]}, start_ms=int(obj["start_ms"]),
                   update_ms=int(obj["update_ms"]), next_producer_id=int(obj.get("next_pid", NO_PRODUCER_ID)),
                   client_tv=int(obj.get("client_tv", 0)))
