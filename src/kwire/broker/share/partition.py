"""One share partition's in-flight records (KIP-932): what a share group has delivered of one
topic partition, kept per range of offsets.

The share-partition start offset (SPSO) is the first offset not yet done with; the end offset
(SPEO, ``end``) is the first offset never acquired.  Between them every offset has a state, as in
Kafka's SharePartition:

* AVAILABLE: may be handed to a member (again);
* ACQUIRED: held by one member until it acknowledges, or until its acquisition lock expires
  (``share.record.lock.duration.ms``), which makes it AVAILABLE again;
* ACKNOWLEDGED (ACCEPT) and ARCHIVED (REJECT, a gap, or a record whose delivery count reached
  ``share.delivery.count.limit``): done, never delivered again.

As Kafka's SharePartition keeps an in-flight *batch* per fetched log batch and splits it into
per-offset state only when acknowledgements differ inside it, the state here is a sorted list of
runs (first, last, state, delivery count, member, lock deadline) covering [start, end) without
holes: a fetch of a 500-record batch acquires one run, an acknowledgement of a range changes the
runs it covers (splitting at its edges), and neighbours left alike merge again.  Nothing is done
per record.

Each acquisition counts one delivery.  When the lowest runs are done the start offset moves up
past them and they are forgotten.  What changed since the last snapshot of the state (``dirty``
ranges) is what ``take_changes`` hands the persister as a ShareUpdate; as Kafka's, an acquisition
alone is not written (only acknowledgements, releases and lock expiries are).  An update holds
every change since the snapshot, not only the newest: ``__share_group_state`` is compacted here
(one record per key survives), so its last snapshot and last update alone must give the state,
and a replay of every update in order gives the same.  Nothing here reads a clock: every call
that can expire a lock takes ``now_ms``, so tests advance time instead of sleeping.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import IntEnum

from kwire.protocol.errors import InvalidRecordStateError, InvalidRequestError

__all__ = ["AcknowledgeType", "RecordState", "SharePartition", "AcquiredRange", "StateBatch"]


class RecordState(IntEnum):
    """Kafka's RecordState ids, as its share coordinator persists them (ShareSnapshotValue.DeliveryState)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge AcknowledgeTypes: 0 marks a gap (no record at the offset)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


_ACK_TYPES = frozenset(int(t) for t in AcknowledgeType)

StateBatch = tuple[int, int, int, int]  # (first, last, delivery state, delivery count), as persisted


class _Run:
    """Offsets first..last sharing one state (Kafka's InFlightBatch, or one of its offset states)."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline")

    def __init__(self, first: int, last: int, state: RecordState, count: int = 0, member: str | None = None,
                 deadline: int = 0) -> None:
        self.first, self.last, self.state, self.count = first, last, state, count
        self.member, self.deadline = member, deadline

    def same(self, other: _Run) -> bool:
        return (self.state == other.state and self.count == other.count and self.member == other.member
                and self.deadline == other.deadline)

    def __repr__(self) -> str:
        return f"_Run({self.first}-{self.last} {self.state.name} x{self.count} {self.member})"


def _first_of(run: _Run) -> int:
    return run.first


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
        self._runs: list[_Run] = []
        # Kafka's findNextFetchOffset: set when something became AVAILABLE below ``end``.
        self._maybe_available = False
        # The earliest lock deadline, None when it must be looked for again.
        self._min_deadline: int | None = None
        # For the persister: the offset ranges changed since the last snapshot, whether something
        # changed since the last write (``_new``, or the start offset moved), or (``_reset``) that
        # the whole state must be written again.
        self._dirty: list[tuple[int, int]] = []
        self._new = False
        self._start_written = start_offset
        self._reset = True

    # -- reading ------------------------------------------------------------------------------
    def _index(self, offset: int) -> int:
        """The index of the run holding ``offset`` (start <= offset < end)."""
        return bisect_right(self._runs, offset, key=_first_of) - 1

    def state_of(self, offset: int) -> RecordState:
        if offset < self.start_offset:
            return RecordState.ACKNOWLEDGED
        if offset >= self.end:
            return RecordState.AVAILABLE
        return self._runs[self._index(offset)].state

    def delivery_count_of(self, offset: int) -> int:
        if not self.start_offset <= offset < self.end:
            return 0
        return self._runs[self._index(offset)].count

    def next_lock_deadline(self) -> int | None:
        if self._min_deadline is None:
            self._min_deadline = min((r.deadline for r in self._runs if r.state == RecordState.ACQUIRED),
                                     default=-1)
        return None if self._min_deadline < 0 else self._min_deadline

    def has_available(self) -> bool:
        """Whether some offset below ``end`` could be acquired now (released or lock expired)."""
        return any(r.state == RecordState.AVAILABLE for r in self._runs)

    def in_flight(self) -> int:
        return sum(r.last - r.first + 1 for r in self._runs if r.state in (RecordState.AVAILABLE,
                                                                             RecordState.ACQUIRED))

    def done_in_flight(self) -> int:
        """Offsets past the start offset already done with (the lag does not count them)."""
        return sum(r.last - r.first + 1 for r in self._runs if r.state in _DONE)

    def state_batches(self) -> list[tuple[int, int, RecordState, int]]:
        """(first, last, state, delivery count) runs of the offsets between start and end, as the
        share coordinator keeps them.  An ACQUIRED record is kept as AVAILABLE with its count: a
        lock does not outlive the broker (Kafka's SharePartition loads none either)."""
        return self._batches(self._runs)

    @staticmethod
    def _batches(runs: Iterable[_Run]) -> list[tuple[int, int, RecordState, int]]:
        out: list[tuple[int, int, RecordState, int]] = []
        for r in runs:
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            if out and out[-1][1] == r.first - 1 and out[-1][2] == state and out[-1][3] == r.count:
                out[-1] = (out[-1][0], r.last, state, r.count)
            else:
                out.append((r.first, r.last, state, r.count))
        return out

    def load(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        """Install persisted state: the start offset and (first, last, state, count) runs.  Offsets
        the runs leave out (before the first, between two) were never delivered: AVAILABLE with
        no delivery (Kafka's SharePartition reads such gaps from the log again)."""
        self.start_offset = start_offset
        self._runs = []
        end = start_offset
        for first, last, state, count in sorted(batches):
            first = max(first, end)
            if last < first:
                continue
            if first > end:
                self._runs.append(_Run(end, first - 1, RecordState.AVAILABLE))
            st = RecordState(state)
            self._runs.append(_Run(first, last, RecordState.AVAILABLE if st == RecordState.ACQUIRED else st, count))
            end = last + 1
        self.end = end
        self._coalesce(0, len(self._runs))
        self._maybe_available = True
        self._min_deadline = None
        self._advance_start()
        self._dirty, self._new, self._start_written, self._reset = [], False, self.start_offset, False

    # -- changes for the persister ------------------------------------------------------------
    def has_changes(self) -> bool:
        """Whether something changed since the last ``take_changes``."""
        return self._reset or self._new or self._start_written != self.start_offset

    def take_changes(self, *, snapshot: bool = False) -> tuple[bool, list[tuple[int, int, RecordState, int]]] | None:
        """What to write now, or None when nothing changed since the last call: (whole, batches).
        ``whole`` (asked for with ``snapshot``, or after a reset): the batches are the whole state,
        a snapshot, and the changes start over from it.  Else the batches are the current state of
        every range changed since the last snapshot (a ShareUpdate, with the start offset)."""
        if not self.has_changes():
            return None
        whole = self._reset or snapshot
        if whole:
            batches = self.state_batches()
            self._dirty = []
        else:
            batches = []
            self._dirty = [(max(first, self.start_offset), last) for first, last in _merged(self._dirty)
                           if last >= self.start_offset]
            for first, last in self._dirty:
                last = min(last, self.end - 1)
                if first > last:
                    continue
                runs = self._runs[self._index(first):self._index(last) + 1]
                clipped = [(max(r.first, first), min(r.last, last), r) for r in runs]
                batches.extend(self._batches(_Run(f, la, r.state, r.count) for f, la, r in clipped))
        self._new, self._start_written, self._reset = False, self.start_offset, False
        return whole, batches

    def _mark(self, first: int, last: int) -> None:
        self._new = True
        if self._dirty and self._dirty[-1][1] + 1 >= first and self._dirty[-1][0] <= first:
            self._dirty[-1] = (self._dirty[-1][0], max(last, self._dirty[-1][1]))
        else:
            self._dirty.append((first, last))

    # -- splitting and merging runs -------------------------------------------------------------
    def _split(self, offset: int) -> int:
        """Make ``offset`` (start <= offset <= end) the first offset of a run; that run's index."""
        if offset >= self.end:
            return len(self._runs)
        i = self._index(offset)
        r = self._runs[i]
        if r.first == offset:
            return i
        tail = _Run(offset, r.last, r.state, r.count, r.member, r.deadline)
        r.last = offset - 1
        self._runs.insert(i + 1, tail)
        return i + 1

    def _coalesce(self, i: int, j: int) -> None:
        """Merge alike neighbours among runs i-1..j (the range just changed and its two sides)."""
        runs = self._runs
        k = max(i, 1)
        stop = min(j + 1, len(runs))
        while k < stop:
            a, b = runs[k - 1], runs[k]
            if a.same(b) and a.last + 1 == b.first:
                a.last = b.last
                del runs[k]
                stop -= 1
            else:
                k += 1

    # -- locks ---------------------------------------------------------------------------------
    def expire_locks(self, now_ms: int) -> int:
        """Release every record whose acquisition lock ran out; how many were released."""
        deadline = self.next_lock_deadline()
        if deadline is None or deadline > now_ms:
            return 0
        return self._release_where(lambda r: r.deadline <= now_ms)

    def release_member(self, member_id: str) -> int:
        """Release every record ``member_id`` holds (it left the group or closed its session)."""
        return self._release_where(lambda r: r.member == member_id)

    def _release_where(self, which) -> int:
        n = 0
        for r in self._runs:
            if r.state == RecordState.ACQUIRED and which(r):
                self._release(r)
                self._mark(r.first, r.last)
                n += r.last - r.first + 1
        if n:
            self._coalesce(0, len(self._runs))
            self._advance_start()
        return n

    def _release(self, r: _Run) -> None:
        # A record delivered delivery_count_limit times is archived instead of offered again.
        if r.count >= self.delivery_count_limit:
            r.state = RecordState.ARCHIVED
        else:
            r.state = RecordState.AVAILABLE
            self._maybe_available = True
        r.member, r.deadline = None, 0
        self._min_deadline = None

    # -- acquiring ------------------------------------------------------------------------------
    def acquire(self, member_id: str, batches: list[tuple[int, int]], max_records: int, lock_ms: int,
                now_ms: int, skip: Collection[int] = frozenset(), *,
                strict: bool = False) -> list[AcquiredRange]:
        """Acquire for ``member_id`` the acquirable offsets of the log ``batches`` ((first, last)
        offsets of whole batches, in order) until ``max_records``; a batch is taken whole (Kafka's
        batch-optimized acquire mode, so a batch may exceed the limit) unless ``strict`` (the
        record-limit mode of ShareFetch v2, KIP-1206: never more than ``max_records``).  A batch
        whose first offset is in ``skip`` (a control batch, an aborted transaction's batch) is
        archived instead; offsets no batch holds (compacted away) too.  Returns the acquired runs
        with their delivery counts."""
        acquired: list[AcquiredRange] = []
        taken = 0
        deadline = now_ms + lock_ms
        for first, last in batches:
            if taken >= max_records:
                break
            if last < self.start_offset:
                continue
            lo = max(first, self.start_offset)
            if lo < self.end and first not in skip:
                taken = self._acquire_existing(member_id, lo, min(last, self.end - 1), deadline, max_records,
                                               taken, strict, acquired)
                if strict and taken >= max_records:
                    break
            if last < self.end:
                continue
            lo = max(lo, self.end)
            if lo > self.end:  # offsets between two batches: nothing there to deliver
                self._append_run(_Run(self.end, lo - 1, RecordState.ARCHIVED))
            if first in skip:
                self._append_run(_Run(lo, last, RecordState.ARCHIVED))
                continue
            # share.partition.max.record.locks bounds the window from the start offset to the end
            # (Kafka's numInFlightRecords): a stuck record stops new acquisitions, not the
            # redelivery of those below the end.
            hi = min(last, self.start_offset + self.max_in_flight - 1)
            if strict:
                hi = min(hi, lo + max_records - taken - 1)
            if hi < lo:
                break
            self._append_run(_Run(lo, hi, RecordState.ACQUIRED, 1, member_id, deadline), dirty=False)
            self._note_deadline(deadline)
            _add(acquired, lo, hi, 1)
            taken += hi - lo + 1
            if hi < last:
                break
        self._advance_start()
        return acquired

    def _append_run(self, run: _Run, *, dirty: bool = True) -> None:
        if run.state in _DONE and dirty:
            self._mark(run.first, run.last)
        if self._runs and self._runs[-1].same(run) and self._runs[-1].last + 1 == run.first:
            self._runs[-1].last = run.last
        else:
            self._runs.append(run)
        self.end = run.last + 1

    def _note_deadline(self, deadline: int) -> None:
        if self._min_deadline is not None and (self._min_deadline < 0 or deadline < self._min_deadline):
            self._min_deadline = deadline

    def _acquire_existing(self, member_id: str, lo: int, hi: int, deadline: int, max_records: int, taken: int,
                          strict: bool, acquired: list[AcquiredRange]) -> int:
        """Acquire the AVAILABLE offsets among lo..hi (below ``end``)."""
        if not self._maybe_available:
            return taken
        i = self._index(lo)
        while i < len(self._runs):
            r = self._runs[i]
            if r.first > hi:
                break
            if r.state != RecordState.AVAILABLE:
                i += 1
                continue
            a, b = max(r.first, lo), min(r.last, hi)
            if strict:
                b = min(b, a + max_records - taken - 1)
            i = self._split(a)
            self._split(b + 1)
            r = self._runs[i]
            r.state, r.member, r.deadline = RecordState.ACQUIRED, member_id, deadline
            r.count += 1
            self._note_deadline(deadline)
            _add(acquired, a, b, r.count)
            taken += b - a + 1
            self._coalesce(i, i + 1)
            i = self._index(b) + 1
            if strict and taken >= max_records:
                break
        return taken

    def first_acquirable(self) -> int:
        """The lowest offset a fetch should read from: the first AVAILABLE one, else ``end``
        (Kafka's nextFetchOffset: looked for only after something was released)."""
        if self._maybe_available:
            for r in self._runs:
                if r.state == RecordState.AVAILABLE:
                    return r.first
            self._maybe_available = False
        return self.end

    # -- acknowledging ------------------------------------------------------------------------
    def acknowledge(self, member_id: str, first: int, last: int, types: list[int], lock_ms: int, now_ms: int,
                    *, renew_allowed: bool = False) -> None:
        """Apply one acknowledgement batch: ``types`` has one type for the whole range or one per
        offset.  All or nothing: InvalidRecordStateError if an offset is not ACQUIRED by this
        member (Kafka's answer for acknowledging records not acquired), InvalidRequestError for
        a malformed batch."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise InvalidRequestError(f"acknowledgement batch {first}-{last} with {len(types)} acknowledge types")
        for t in set(types):
            if t not in _ACK_TYPES or (t == AcknowledgeType.RENEW and not renew_allowed):
                raise InvalidRequestError(f"acknowledge type {t} is not valid here")
        if last < self.start_offset:
            return  # all done with already: Kafka's SharePartition skips such a batch, no error
        if first < self.start_offset and any(t != AcknowledgeType.GAP for t in types):
            raise InvalidRecordStateError(f"offsets {first}-{last}: below the share-partition start offset "
                                          f"{self.start_offset} (already acknowledged)")
        lo = max(first, self.start_offset)
        if lo > last:
            return
        if last >= self.end:
            raise InvalidRecordStateError(f"offset {max(lo, self.end)} is not acquired by member {member_id}")
        i = self._index(lo)
        while i < len(self._runs) and self._runs[i].first <= last:
            r = self._runs[i]
            if r.state != RecordState.ACQUIRED or r.member != member_id:
                raise InvalidRecordStateError(f"offset {max(r.first, lo)} is not acquired by member {member_id}")
            i += 1
        if len(types) == 1:
            self._apply(lo, last, types[0], lock_ms, now_ms)
        else:
            # Per-offset types: one change per stretch of equal types (Kafka splits its in-flight
            # batch into offset states only here).
            begin = lo
            for off in range(lo + 1, last + 2):
                if off > last or types[off - first] != types[begin - first]:
                    self._apply(begin, off - 1, types[begin - first], lock_ms, now_ms)
                    begin = off
        self._advance_start()

    def _apply(self, lo: int, hi: int, t: int, lock_ms: int, now_ms: int) -> None:
        i = self._split(lo)
        j = self._split(hi + 1)
        for r in self._runs[i:j]:
            if t == AcknowledgeType.ACCEPT:
                r.state, r.member, r.deadline = RecordState.ACKNOWLEDGED, None, 0
            elif t in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
                r.state, r.member, r.deadline = RecordState.ARCHIVED, None, 0
            elif t == AcknowledgeType.RELEASE:
                self._release(r)
            else:  # RENEW: the member keeps it for another lock duration
                r.deadline = now_ms + lock_ms
        self._min_deadline = None
        if t != AcknowledgeType.RENEW:
            self._mark(lo, hi)
        self._coalesce(i, j)

    def _advance_start(self) -> None:
        runs = self._runs
        n = 0
        while n < len(runs) and runs[n].state in _DONE:
            n += 1
        if n:
            self.start_offset = runs[n - 1].last + 1
            del runs[:n]
        elif not runs:
            self.start_offset = self.end

    def reset_to(self, offset: int) -> None:
        """Start over at ``offset`` (AlterShareGroupOffsets, or a start below the log start)."""
        self._runs = []
        self.start_offset = self.end = offset
        self._maybe_available = False
        self._min_deadline = None
        self._dirty, self._reset = [], True


def _add(acquired: list[AcquiredRange], first: int, last: int, count: int) -> None:
    if acquired and acquired[-1].last_offset == first - 1 and acquired[-1].delivery_count == count:
        acquired[-1] = AcquiredRange(acquired[-1].first_offset, last, count)
    else:
        acquired.append(AcquiredRange(first, last, count))


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out
