"""The idempotent producer's bookkeeping: its producer id and epoch, and each partition's sequences.

A broker keeps, per partition and producer id, the epoch and the sequence numbers of the last five
batches it wrote.  It accepts a batch whose base sequence continues them, answers a repeat of one
of those five with the offsets it got the first time, and refuses a gap with
OUT_OF_ORDER_SEQUENCE_NUMBER.  A new epoch must start at sequence 0.  So the producer:

* numbers each partition's records from 0 and stamps a batch with its base sequence when the
  batch is first sent (not at append: the batch is still growing then);
* resends a failed batch with the same id, epoch and sequence, so that if the first attempt was
  written after all the broker recognises the repeat instead of writing it twice;
* keeps at most five batches per partition in flight (the broker remembers five), and resends a
  retried batch only when it is the partition's oldest unfinished one, so retries keep the order;
* when a gap appears that retrying cannot close (a batch failed for good, or expired after it may
  have been sent, or the broker lost the producer's state), waits until nothing of the partition
  is in flight, bumps the epoch, and renumbers the partition's unfinished batches from 0 under it.
  The bump is local, as in Kafka's Java producer: an idempotent producer owns its id, and a broker
  takes a higher epoch that starts at sequence 0.  Other partitions move to the new epoch (from
  sequence 0) once none of their batches under the old one is unfinished.

What the broker's refusals mean (the sender applies this, as Kafka's Java producer does):

* OUT_OF_ORDER_SEQUENCE_NUMBER for the batch right after the last one confirmed: a real gap, so
  the partition is renumbered under a new epoch; for a later batch: an earlier one is still on its
  way, so it is simply resent after it;
* UNKNOWN_PRODUCER_ID: the broker lost the producer's state: renumber under a new epoch;
* INVALID_PRODUCER_EPOCH for a batch numbered under an epoch the producer has since left:
  renumber it; under the current epoch: someone else bumped the producer's epoch, and the batch
  fails with ``ProducerFencedError``;
* DUPLICATE_SEQUENCE_NUMBER: the batch was written before: success.

A transactional producer does not bump its epoch locally: the coordinator owns the epoch.  A gap
(``request_reset``, a stamped batch failing) only sets ``bump_needed``; the failure has made the
transaction abortable, and ``abort_transaction`` asks the coordinator for the next epoch
(InitProducerId with the current id and epoch, KIP-360), under which every partition restarts at 0.

Sequences are kept here as unbounded integers; on the wire they wrap at 2**31 as Kafka's do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_log import LazyLogger
from .types import TopicPartition

if TYPE_CHECKING:
    from .accumulator import ProducerBatch

__all__ = ["IdempotenceState", "PartitionSequences", "MAX_IN_FLIGHT_PER_PARTITION", "wire_sequence"]

# (logging imported only when a record could be shown: see lazy_log)
logger = LazyLogger("kwire.client.producer")

# A broker remembers the last five batches of each producer per partition (Kafka's
# ProducerStateEntry.NUM_BATCHES_TO_RETAIN): only those can be recognised as repeats.
MAX_IN_FLIGHT_PER_PARTITION = 5
_SEQUENCE_MODULUS = 1 << 31
_MAX_EPOCH = (1 << 15) - 1


def wire_sequence(sequence: int) -> int:
    """A sequence as written in a batch header: Kafka's sequences wrap to 0 after 2**31 - 1."""
    return sequence % _SEQUENCE_MODULUS


class PartitionSequences:
    """One partition's numbering under one producer id and epoch."""

    __slots__ = ("producer_id", "epoch", "next_sequence", "last_acked", "unfinished", "reset_needed",
                 "unresolved_until")

    def __init__(self, producer_id: int, epoch: int):
        self.producer_id = producer_id
        self.epoch = epoch
        self.next_sequence = 0
        self.last_acked = -1           # last sequence the broker confirmed under this id and epoch
        # Stamped batches not yet completed (sent, or waiting to be sent again), by sequence.
        self.unfinished: list[ProducerBatch] = []
        self.reset_needed = False      # a gap retrying cannot close: renumber under a new epoch
        self.unresolved_until = -1     # an expired batch ended at this sequence; written or not?


class IdempotenceState:
    """Producer id, epoch and per-partition sequences of one idempotent producer (event loop only)."""

    def __init__(self, *, transactional: bool = False) -> None:
        self.producer_id = -1
        self.epoch = -1
        self.needs_producer_id = True
        self.transactional = transactional
        self.bump_needed = False   # transactional: a gap that only a new epoch from the coordinator closes
        self._partitions: dict[TopicPartition, PartitionSequences] = {}
        self._unsettled: set[TopicPartition] = set()  # partitions with reset_needed or unresolved_until

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        """Take the id and epoch InitProducerId granted.  Partitions move to them as they go quiet."""
        logger.info("%s producer id %d, epoch %d", "transactional" if self.transactional else "idempotent",
                    producer_id, epoch)
        self.producer_id = producer_id
        self.epoch = epoch
        self.needs_producer_id = False
        self.bump_needed = False

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0 and not self.needs_producer_id

    # -- drain ------------------------------------------------------------------------------------
    def may_send(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` (its partition's first queued batch) may be sent now."""
        part = self._partitions.get(batch.tp)
        if part is None:
            return True
        if part.reset_needed or part.unresolved_until >= 0:
            return False  # wait until the partition is quiet and renumbered (or resolved)
        if batch.producer_id >= 0:
            # A retry goes out only as the partition's oldest unfinished batch, so batches reach
            # the broker in sequence order.
            return bool(part.unfinished) and part.unfinished[0] is batch
        if (part.producer_id, part.epoch) != (self.producer_id, self.epoch):
            # Batches under the old epoch must finish before sequence 0 under the new one.
            return not part.unfinished
        return True

    def stamp(self, batch: ProducerBatch) -> None:
        """Give a never-sent batch the producer id, epoch and the partition's next sequences."""
        part = self._partitions.get(batch.tp)
        if part is None or (part.producer_id, part.epoch) != (self.producer_id, self.epoch):
            # may_send() allowed it, so nothing of the old epoch is unfinished: start again at 0.
            part = self._partitions[batch.tp] = PartitionSequences(self.producer_id, self.epoch)
        batch.set_producer_state(self.producer_id, self.epoch, part.next_sequence)
        part.next_sequence += batch.record_count
        part.unfinished.append(batch)

    # -- outcomes ---------------------------------------------------------------------------------
    def acked(self, batch: ProducerBatch) -> None:
        """The broker wrote ``batch`` (or recognised it as a repeat)."""
        part = self._partitions.get(batch.tp)
        if part is None:
            return
        _remove(part.unfinished, batch)
        if (batch.producer_id, batch.epoch) == (part.producer_id, part.epoch):
            last = batch.sequence + batch.record_count - 1
            if last > part.last_acked:
                part.last_acked = last

    def is_next(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` directly follows what the broker confirmed (so a refusal is a real gap)."""
        part = self._partitions.get(batch.tp)
        return part is not None and batch.sequence == part.last_acked + 1 \
            and bool(part.unfinished) and part.unfinished[0] is batch

    def request_reset(self, tp: TopicPartition, why: str) -> None:
        """Renumber ``tp`` under a new epoch once none of its batches is in flight."""
        part = self._partitions.get(tp)
        if self.transactional:
            if part is not None:
                logger.info("%s: %s; the epoch is bumped when the transaction is aborted", tp, why)
                self.bump_needed = True
            return
        if part is not None and not part.reset_needed:
            logger.info("%s: %s; its sequences restart under a new epoch", tp, why)
            part.reset_needed = True
            self._unsettled.add(tp)

    def failed(self, batch: ProducerBatch, *, maybe_written: bool) -> None:
        """``batch`` will not be sent again (failed for good, or expired).

        Its sequences leave a gap unless it was written: a batch that may have been written makes
        the partition unresolved until the broker's answers to later batches (or their absence)
        tell; one that certainly was not makes the later batches unacceptable as numbered.
        """
        part = self._partitions.get(batch.tp)
        if part is None or batch.producer_id < 0:
            return
        _remove(part.unfinished, batch)
        if (batch.producer_id, batch.epoch) != (part.producer_id, part.epoch):
            return  # numbered under an epoch the partition has left: no gap in the current one
        if self.transactional:
            self.bump_needed = True  # written or not, the coordinator's next epoch settles it
            return
        if maybe_written:
            part.unresolved_until = max(part.unresolved_until, batch.sequence + batch.record_count - 1)
            self._unsettled.add(batch.tp)
        elif part.unfinished or part.next_sequence > batch.sequence + batch.record_count:
            self.request_reset(batch.tp, f"batch at sequence {batch.sequence} failed")
        else:
            # The last batch numbered: simply hand its sequences out again.
            part.next_sequence = batch.sequence

    def settle(self, tp: TopicPartition, in_flight: int) -> list[ProducerBatch]:
        """Resolve ``tp``'s pending renumbering now that ``in_flight`` of its batches are out.

        Returns the batches renumbered (their bytes must be rebuilt before they are sent again).
        """
        part = self._partitions.get(tp)
        if part is None or not (part.reset_needed or part.unresolved_until >= 0):
            self._unsettled.discard(tp)
            return []
        if in_flight:
            return []
        if not part.reset_needed:
            if part.last_acked >= part.unresolved_until:
                part.unresolved_until = -1  # a later batch was accepted: the expired one was written
                self._unsettled.discard(tp)
                return []
            part.reset_needed = True
        if (part.producer_id, part.epoch) == (self.producer_id, self.epoch):
            self._bump_epoch()
        if self.needs_producer_id:
            return []  # renumbered once InitProducerId has granted the new id
        renumbered = part.unfinished
        fresh = self._partitions[tp] = PartitionSequences(self.producer_id, self.epoch)
        for batch in renumbered:
            batch.set_producer_state(self.producer_id, self.epoch, fresh.next_sequence)
            fresh.next_sequence += batch.record_count
        fresh.unfinished = renumbered
        self._unsettled.discard(tp)
        return renumbered

    def _bump_epoch(self) -> None:
        if self.epoch >= _MAX_EPOCH - 1:
            # Out of epochs: a new producer id is needed (the sender asks InitProducerId).
            self.needs_producer_id = True
            return
        self.epoch += 1
        logger.info("producer id %d bumped to epoch %d", self.producer_id, self.epoch)

    def pending_resets(self) -> list[TopicPartition]:
        """Partitions waiting to be renumbered or resolved (``settle`` each once it is quiet)."""
        return list(self._unsettled)


def _remove(batches: list[ProducerBatch], batch: ProducerBatch) -> None:
    for i, b in enumerate(batches):
        if b is batch:
            del batches[i]
            return
