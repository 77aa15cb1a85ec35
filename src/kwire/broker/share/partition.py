"""One share partition's in-flight records (KIP-932): what a share group has delivered of one
topic partition, offset by offset.

The share-partition start offset (SPSO) is the first offset not yet done with; the end offset
(SPEO, ``end``) is the first offset never acquired.  Between them every offset has a state, as in
Kafka's SharePartition:

* AVAILABLE: may be handed to a member (again);
* ACQUIRED: held by one member until it acknowledges, or until its acquisition lock expires
  (``share.record.lock.duration.ms``), which makes it AVAILABLE again;
* ACKNOWLEDGED (ACCEPT) and ARCHIVED (REJECT, a gap, or a record whose delivery count reached
  ``share.delivery.count.limit``): done, never delivered again.

Each acquisition counts one delivery.  When the lowest offsets are done the start offset moves up
past them and they are forgotten.  Nothing here reads a clock: every call that can expire a lock
takes ``now_ms``, so tests advance time instead of sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from kwire.protocol.errors import InvalidRecordStateError, InvalidRequestError

__all__ = ["AcknowledgeType", "RecordState", "SharePartition", "AcquiredRange"]


class RecordState(IntEnum):
    """Kafka's RecordState ids, as its share coordinator persists them (ShareSnapshotValue.DeliveryState)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge AcknowledgeTypes: 0 marks a gap (no record at the offset)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int = 0
    member_id: str | None = None
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


class SharePartition:
    """The in-flight state of one (group, topic, partition)."""

    def __init__(self, start_offset: int, *, delivery_count_limit: int = 5, max_in_flight: int = 2000):
        self.start_offset = start_offset
        self.end = start_offset
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self._records: dict[int, _InFlight] = {}
        # Bumped when the state changes in a way worth persisting.
        self.changes = 0

    # -- reading ------------------------------------------------------------------------------
    def state_of(self, offset: int) -> RecordState:
        if offset < self.start_offset:
            return RecordState.ACKNOWLEDGED
        r = self._records.get(offset)
        return r.state if r is not None else RecordState.AVAILABLE

    def delivery_count_of(self, offset: int) -> int:
        r = self._records.get(offset)
        return r.delivery_count if r is not None else 0

    def next_lock_deadline(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self._records.values() if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def has_available(self) -> bool:
        """Whether some offset below ``end`` could be acquired now (released or lock expired)."""
        return any(r.state == RecordState.AVAILABLE for r in self._records.values())

    def in_flight(self) -> int:
        return sum(1 for r in self._records.values() if r.state in (RecordState.AVAILABLE, RecordState.ACQUIRED))

    def state_batches(self) -> list[tuple[int, int, RecordState, int]]:
        """(first, last, state, delivery count) runs of the offsets between start and end, as the
        share coordinator keeps them.  An ACQUIRED record is kept as AVAILABLE with its count: a
        lock does not outlive the broker (Kafka's SharePartition loads none either)."""
        out: list[tuple[int, int, RecordState, int]] = []
        for off in sorted(self._records):
            r = self._records[off]
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            if out and out[-1][1] == off - 1 and out[-1][2] == state and out[-1][3] == r.delivery_count:
                out[-1] = (out[-1][0], off, state, r.delivery_count)
            else:
                out.append((off, off, state, r.delivery_count))
        return out

    def load(self, start_offset: int, batches: list[tuple[int, int, int, int]]) -> None:
        """Install persisted state: the start offset and (first, last, state, count) runs."""
        self.start_offset = start_offset
        self._records.clear()
        end = start_offset
        for first, last, state, count in batches:
            for off in range(max(first, start_offset), last + 1):
                self._records[off] = _InFlight(RecordState(state) if state != RecordState.ACQUIRED
                                               else RecordState.AVAILABLE, count)
            end = max(end, last + 1)
        self.end = end
        self._advance_start()

    # -- locks ---------------------------------------------------------------------------------
    def expire_locks(self, now_ms: int) -> int:
        """Release every record whose acquisition lock ran out; how many were released."""
        n = 0
        for r in self._records.values():
            if r.state == RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms:
                self._release(r)
                n += 1
        if n:
            self.changes += 1
            self._advance_start()
        return n

    def release_member(self, member_id: str) -> int:
        """Release every record ``member_id`` holds (it left the group or closed its session)."""
        n = 0
        for r in self._records.values():
            if r.state == RecordState.ACQUIRED and r.member_id == member_id:
                self._release(r)
                n += 1
        if n:
            self.changes += 1
            self._advance_start()
        return n

    def _release(self, r: _InFlight) -> None:
        # A record delivered delivery_count_limit times is archived instead of offered again.
        r.state = RecordState.ARCHIVED if r.delivery_count >= self.delivery_count_limit else RecordState.AVAILABLE
        r.member_id = None
        r.lock_deadline_ms = 0

    # -- acquiring ------------------------------------------------------------------------------
    def acquire(self, member_id: str, batches: list[tuple[int, int]], max_records: int, lock_ms: int,
                now_ms: int, skip: frozenset[int] | set[int] = frozenset(), *,
                strict: bool = False) -> list[AcquiredRange]:
        """Acquire for ``member_id`` the acquirable offsets of the log ``batches`` ((first, last)
        offsets of whole batches, in order) until ``max_records``; a batch is taken whole (Kafka's
        batch-optimized acquire mode, so a batch may exceed the limit) unless ``strict`` (the
        record-limit mode of ShareFetch v2, KIP-1206: never more than ``max_records``).  Offsets
        in ``skip`` (control batches) are archived instead.  Returns the acquired runs with their
        delivery counts."""
        acquired: list[AcquiredRange] = []
        taken = 0
        deadline = now_ms + lock_ms
        for first, last in batches:
            if taken >= max_records:
                break
            if last < self.start_offset:
                continue
            for off in range(max(first, self.start_offset), last + 1):
                if strict and taken >= max_records:
                    break
                if off in skip:
                    if off >= self.end:
                        self._records[off] = _InFlight(RecordState.ARCHIVED)
                        self.end = off + 1
                    continue
                if off >= self.end:
                    # share.partition.max.record.locks bounds the window from the start offset to
                    # the end (Kafka's numInFlightRecords): a stuck record stops new acquisitions,
                    # not the redelivery of those below the end.
                    if self.end - self.start_offset >= self.max_in_flight:
                        break
                    r = self._records[off] = _InFlight(RecordState.AVAILABLE)
                    self.end = off + 1
                else:
                    r = self._records.get(off)
                    if r is None or r.state != RecordState.AVAILABLE:
                        continue
                r.state = RecordState.ACQUIRED
                r.member_id = member_id
                r.delivery_count += 1
                r.lock_deadline_ms = deadline
                taken += 1
                if acquired and acquired[-1].last_offset == off - 1 and acquired[-1].delivery_count == r.delivery_count:
                    acquired[-1] = AcquiredRange(acquired[-1].first_offset, off, r.delivery_count)
                else:
                    acquired.append(AcquiredRange(off, off, r.delivery_count))
        if acquired or skip:
            self.changes += 1
            self._advance_start()
        return acquired

    def first_acquirable(self) -> int:
        """The lowest offset a fetch should read from: the first AVAILABLE one, else ``end``."""
        avail = [o for o, r in self._records.items() if r.state == RecordState.AVAILABLE]
        return min(avail) if avail else self.end

    # -- acknowledging ------------------------------------------------------------------------
    def acknowledge(self, member_id: str, first: int, last: int, types: list[int], lock_ms: int, now_ms: int,
                    *, renew_allowed: bool = False) -> None:
        """Apply one acknowledgement batch: ``types`` has one type for the whole range or one per
        offset.  All or nothing: InvalidRecordStateError if an offset is not ACQUIRED by this
        member (Kafka's answer for acknowledging records not acquired), InvalidRequestError for
        a malformed batch."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise InvalidRequestError(f"acknowledgement batch {first}-{last} with {len(types)} acknowledge types")
        if first < self.start_offset and any(t != AcknowledgeType.GAP for t in types):
            raise InvalidRecordStateError(f"offsets {first}-{last}: below the share-partition start offset "
                                          f"{self.start_offset} (already acknowledged)")
        for t in types:
            if t not in tuple(AcknowledgeType) or (t == AcknowledgeType.RENEW and not renew_allowed):
                raise InvalidRequestError(f"acknowledge type {t} is not valid here")
        for off in range(max(first, self.start_offset), last + 1):
            r = self._records.get(off)
            if r is None or r.state != RecordState.ACQUIRED or r.member_id != member_id:
                raise InvalidRecordStateError(f"offset {off} is not acquired by member {member_id}")
        for i, off in enumerate(range(first, last + 1)):
            if off < self.start_offset:
                continue
            t = types[0] if len(types) == 1 else types[i]
            r = self._records[off]
            if t == AcknowledgeType.ACCEPT:
                r.state, r.member_id = RecordState.ACKNOWLEDGED, None
            elif t in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
                r.state, r.member_id = RecordState.ARCHIVED, None
            elif t == AcknowledgeType.RELEASE:
                self._release(r)
            else:  # RENEW: the member keeps it for another lock duration
                r.lock_deadline_ms = now_ms + lock_ms
        self.changes += 1
        self._advance_start()

    def _advance_start(self) -> None:
        start = self.start_offset
        while start < self.end:
            r = self._records.get(start)
            if r is None or r.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            del self._records[start]
            start += 1
        self.start_offset = start

    def reset_to(self, offset: int) -> None:
        """Start over at ``offset`` (AlterShareGroupOffsets, or a start below the log start)."""
        self._records.clear()
        self.start_offset = self.end = offset
        self.changes += 1
