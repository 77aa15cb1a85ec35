"""One clean's reading and writing (Kafka's Cleaner.doClean without the swap): the dedupe map of
the dirty range, then the copy of the cleanable segments through ``BatchFilter`` into
``.cleaned`` segments, each handed to ``emit`` to be swapped in.

It knows the segments only by their numbers and open descriptors (``CleanJob``), never the
``PartitionLog``: the segments it reads are immutable, so it runs the same in the broker's
cleaner thread or in a worker process (cleaner_worker.py), which takes the cleaner's Python
work out of the broker process's GIL.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kwire.protocol.errors import KafkaStorageError
from kwire.protocol.records import HEADER_SIZE, LOG_OVERHEAD, RecordBatch
from kwire.protocol.records.batch_header import batch_size

from ._files import CLEANED_SUFFIX, pread_exact, segment_path
from .batch_filter import BatchFilter, FilterStats, TransactionTracker, empty_batch
from .index import INT32_MAX
from .offset_map import OffsetMap
from .segment import LogSegment
from .throttler import Throttler
from .txn_index import AbortedTxn

__all__ = ["CleanAborted", "CleanJob", "CleanPass", "PassResult", "SegmentInfo", "Output"]



class CleanAborted(Exception):
    """The clean stopped before its swap (log closed or changed, cleaner stopping)."""


@dataclass(frozen=True)
class SegmentInfo:
    """What a clean needs of one immutable segment (read with the descriptor beside it)."""

    base_offset: int
    next_offset: int
    size: int
    aborts: tuple[AbortedTxn, ...]  # its .txnindex entries

    @classmethod
    def of(cls, segment: LogSegment) -> SegmentInfo:
        return cls(segment.base_offset, segment.next_offset, segment.size, tuple(segment.txn_index.entries))


@dataclass(frozen=True)
class CleanJob:
    """One clean of one log: the cleanable segments and what the filter needs, read by the
    cleaner from the log (``PartitionLog.cleaning_view``) before the pass starts."""

    name: str
    directory: str
    segments: tuple[SegmentInfo, ...]   # from the log start, every one below first_uncleanable
    first_dirty: int
    first_uncleanable: int
    horizon_due: bool                   # clean the clean section even with nothing dirty
    now_ms: int
    aborted: tuple[AbortedTxn, ...]     # of the range, from the .txnindex files
    last_batch_of_producer: dict[int, int]
    marker_epoch_of_producer: dict[int, int]
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int


@dataclass
class PassResult:
    end: int                       # the new cleaner checkpoint; -1: nothing to clean
    bytes_before: int = 0
    bytes_after: int = 0
    segments_before: int = 0
    segments_after: int = 0
    stats: FilterStats = field(default_factory=FilterStats)


class Output:
    """A ``.cleaned`` segment being written, and the job's segments it replaces so far
    (``job.segments[first:first + count]``)."""

    __slots__ = ("segment", "first", "count", "pending", "pending_bytes", "changed", "first_abort", "last",
                 "handed_over")

    def __init__(self, segment: LogSegment, first: int, first_abort: int):
        self.segment = segment
        self.first = first
        self.count = 0
        self.pending: list[bytes | memoryview] = []  # kept batches not written yet
        self.pending_bytes = 0
        self.changed = False
        self.first_abort = first_abort   # its first entry in the filter's kept_aborts
        self.last: RecordBatch | None = None  # the last batch read of its group
        self.handed_over = False  # emitted, or deleted: no longer the pass's to delete

    @property
    def base(self) -> int:
        return self.segment.base_offset

    @property
    def size(self) -> int:
        return self.segment.size + self.pending_bytes

    def fits(self, nbytes: int, segment: SegmentInfo, max_bytes: int) -> bool:
        """Whether ``nbytes`` more, ending with ``segment``'s offsets, stay within segment.bytes
        and the int32 relative offsets of the index (Kafka's groupSegmentsBySize rules)."""
        return self.size + nbytes <= max_bytes and segment.next_offset - 1 - self.base <= INT32_MAX


def _batches(fd: int, size: int, chunk: int) -> Iterator[memoryview]:
    """The raw batches of a segment file, read ``chunk`` bytes at a time (a bigger batch whole)."""
    pos, buf, buf_start = 0, memoryview(b""), 0
    while pos + LOG_OVERHEAD <= size:
        off = pos - buf_start
        if off + LOG_OVERHEAD > len(buf):
            buf, buf_start, off = memoryview(pread_exact(fd, min(chunk, size - pos), pos)), pos, 0
        n = batch_size(buf, off)
        if n < HEADER_SIZE or pos + n > size:
            raise KafkaStorageError(f"bad batch length {n - LOG_OVERHEAD} at position {pos}")
        if off + n > len(buf):
            buf, buf_start, off = memoryview(pread_exact(fd, min(max(chunk, n), size - pos), pos)), pos, 0
        yield buf[off:off + n]
        pos += n


def remove_cleaned_files(directory: str, bases) -> None:
    """Remove the ``.cleaned`` files of segments ``bases`` (left by a clean that stopped)."""
    for base in bases:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            segment_path(Path(directory), base, suffix + CLEANED_SUFFIX).unlink(missing_ok=True)


class CleanPass:
    """The map and the copy of one ``CleanJob``.  ``check()`` runs between batches (it raises
    ``CleanAborted`` to stop); ``emit(output)`` swaps a finished ``.cleaned`` segment in (it
    raises ``CleanAborted`` if it cannot); ``hook(step)`` lets tests stop the process."""

    def __init__(self, job: CleanJob, fds: list[int], *, map_bytes: int, compiled: bool, io_buffer_size: int,
                 throttler: Throttler, check: Callable[[], None], emit: Callable[[Output], None],
                 hook: Callable[[str], None] | None = None):
        self.job = job
        self.fds = fds
        self.map_bytes = map_bytes
        self.compiled = compiled
        self.chunk = io_buffer_size
        self.throttler = throttler
        self.check = check
        self.emit = emit
        self.hook = hook

    def run(self) -> PassResult:
        job = self.job
        first_dirty = job.first_dirty
        offset_map = OffsetMap(self.map_bytes, compiled=self.compiled)
        try:
            end = self._build_offset_map(offset_map)
            if end <= first_dirty:
                if not job.horizon_due:
                    return PassResult(-1)
                offset_map.latest_offset = first_dirty - 1  # the clean section only
                end = first_dirty
            offset_map.mark_dirty(first_dirty)
            count = sum(1 for s in job.segments if s.base_offset < end)
            result = PassResult(end, segments_before=count)
            result.bytes_before = sum(s.size for s in job.segments[:count])
            batch_filter = BatchFilter(offset_map, now_ms=job.now_ms, delete_retention_ms=job.delete_retention_ms,
                                       aborted=job.aborted, last_batch_of_producer=job.last_batch_of_producer,
                                       marker_epoch_of_producer=job.marker_epoch_of_producer, stats=result.stats)
            result.bytes_after, result.segments_after = self._copy(count, batch_filter)
            return result
        finally:
            offset_map.close()

    def _build_offset_map(self, offset_map: OffsetMap) -> int:
        """Map every key of the data records in ``[first_dirty, first_uncleanable)`` (aborted
        ones left out, as Kafka's buildOffsetMap) until the map is full; returns the offset up
        to which it is complete (Kafka's latestOffset + 1)."""
        job = self.job
        start, end = job.first_dirty, job.first_uncleanable
        # Only the aborts whose marker is at or past ``start``: the batches read here begin in the
        # segment holding ``start``, so the markers of earlier ones are never seen to close them.
        txns = TransactionTracker([t for t in job.aborted if t.last_offset >= start])
        for segment, fd in zip(job.segments, self.fds, strict=True):
            if segment.next_offset <= start:
                continue
            for raw in _batches(fd, segment.size, self.chunk):
                self.check()
                self.throttler.maybe_throttle(len(raw))
                batch = RecordBatch(raw)
                if batch.base_offset >= end:
                    return offset_map.latest_offset + 1
                if batch.is_control:
                    records = batch.records()
                    txns.on_marker(batch, records[0].type if records else None)
                elif not txns.on_batch(batch) and batch.last_offset >= start:
                    buf, pos, stop, _ = batch.records_section()
                    if offset_map.put_records(buf, pos, stop, batch.record_count, batch.base_offset, start) >= 0:
                        # Full (Kafka's rule): the keys taken from this batch stay (their older
                        # records can go), but the batch is past what the map covers, so all of
                        # it is kept and the next pass starts there.
                        if offset_map.latest_offset < start:
                            raise KafkaStorageError(
                                f"{job.name}: log.cleaner.dedupe.buffer.size is too small: the batch at "
                                f"offset {batch.base_offset} has more keys than the {offset_map.capacity} "
                                "the dedupe map of a cleaner thread holds")
                        return offset_map.latest_offset + 1
                if batch.last_offset >= start:
                    offset_map.latest_offset = batch.last_offset
        return offset_map.latest_offset + 1

    def _copy(self, count: int, batch_filter: BatchFilter) -> tuple[int, int]:
        """Copy the first ``count`` segments through the filter into cleaned segments of at most
        segment.bytes and emit each; returns (bytes after, segments after).

        Kafka groups the segments by their sizes *before* cleaning (groupSegmentsBySize), so a
        clean of twenty full segments that keeps 1% of them leaves twenty tiny segments until the
        next clean.  Here the groups are formed by the sizes *after* cleaning: a segment is
        copied straight into the open output while the output's size plus the segment's (its
        most) fits; otherwise it is copied into an output of its own, which is then appended to
        the open one if the two fit together (a second copy, of at most segment.bytes per output
        made), or else the open one is finished and swapped in.  Kafka's other rules stay: an
        output never spans more offsets than its index's int32 relative offsets, and never
        reaches into the active segment (not among the job's segments)."""
        max_bytes = self.job.segment_bytes
        current: Output | None = None
        fresh: Output | None = None
        after = outputs = 0
        aborts = batch_filter.txns.kept_aborts
        try:
            for n in range(count):
                segment = self.job.segments[n]
                if current is not None and current.fits(segment.size, segment, max_bytes):
                    self._copy_segment(n, current, batch_filter)
                    continue
                fresh = self._open_output(n, len(aborts))
                self._copy_segment(n, fresh, batch_filter)
                if current is not None and current.fits(fresh.size, segment, max_bytes):
                    self._merge(current, fresh)
                else:
                    if current is not None:
                        after += self._finish(current, aborts[current.first_abort:fresh.first_abort])
                        outputs += 1
                    current = fresh
                fresh = None
            if current is not None:
                after += self._finish(current, aborts[current.first_abort:])
                outputs += 1
                current = None
        finally:
            for out in (current, fresh):
                if out is not None and not out.handed_over:
                    out.segment.delete()
        return after, outputs

    def _open_output(self, n: int, first_abort: int) -> Output:
        base = self.job.segments[n].base_offset
        remove_cleaned_files(self.job.directory, [base])  # left by an aborted clean
        return Output(LogSegment(self.job.directory, base, index_interval_bytes=self.job.index_interval_bytes,
                                 file_suffix=CLEANED_SUFFIX), n, first_abort)

    def _copy_segment(self, n: int, out: Output, batch_filter: BatchFilter) -> None:
        """Append what the filter keeps of segment ``n`` to ``out``."""
        if out.count:
            out.changed = True  # segments merged
        out.count += 1
        check, hook, throttler = self.check, self.hook, self.throttler
        for raw in _batches(self.fds[n], self.job.segments[n].size, self.chunk):
            check()
            out.last = batch = RecordBatch(raw)
            kept = batch_filter.filter(raw, batch)
            # Every byte read counts, dropped or kept, with what is written (Kafka's cleanInto
            # throttles on the read buffer plus the output buffer): a clean that drops most of
            # its input is held to the rate too.
            throttler.maybe_throttle(len(raw) + (len(kept) if kept is not None else 0))
            if kept is None:
                out.changed = True
                continue
            if kept is not raw:
                out.changed = True
            self._add(out, kept)
            if hook:
                hook("copying")

    def _add(self, out: Output, batch: bytes | memoryview) -> None:
        out.pending.append(batch)
        out.pending_bytes += len(batch)
        if out.pending_bytes >= self.chunk:
            _write(out.segment, out.pending)
            out.pending_bytes = 0

    def _merge(self, into: Output, other: Output) -> None:
        """Append ``other``'s batches (written and pending) to ``into`` and drop ``other``."""
        other_file = other.segment
        fd = os.dup(other_file.log_fd()) if other_file.size else -1
        try:
            if fd >= 0:
                for raw in _batches(fd, other_file.size, self.chunk):
                    self.check()
                    self._add(into, raw)
                    self.throttler.maybe_throttle(2 * len(raw))
        finally:
            if fd >= 0:
                os.close(fd)
        for raw in other.pending:
            self._add(into, raw)
        into.count += other.count
        into.changed = True
        into.last = other.last
        other.handed_over = True
        other_file.delete()

    def _finish(self, out: Output, kept_aborts: list[AbortedTxn]) -> int:
        """Complete ``out`` and emit it; returns its size (its one segment's when nothing
        changed and that segment stays)."""
        group = self.job.segments[out.first:out.first + out.count]
        # The aborts whose markers this group keeps with data: its .txnindex.
        if not out.changed and [t for s in group for t in s.aborts] == kept_aborts:
            out.handed_over = True
            out.segment.delete()
            return sum(s.size for s in group)  # nothing to remove: the segment stays as it is
        cleaned = out.segment
        # The cleaned segment ends where the group did, so the loader can tell which old
        # segments a .swap replaces (those whose base is below its end): when the group's
        # last batch went, an empty batch owned by no producer keeps its offsets.
        end = _end_of(out.pending) if out.pending else cleaned.next_offset
        if out.last is not None and end < group[-1].next_offset:
            out.pending.append(empty_batch(out.last, keep_producer=False))
        _write(cleaned, out.pending)
        out.pending_bytes = 0
        for txn in kept_aborts:
            cleaned.txn_index.append(txn)
        cleaned.on_become_inactive()
        cleaned.flush()
        if self.hook:
            self.hook("cleaned")
        self.check()
        # From here on the files are the swap's (the loader finishes or removes them after a
        # failure); only a swap refused before it began deletes them.
        out.handed_over = True
        self.emit(out)
        return cleaned.size


def _write(segment: LogSegment, out: list) -> None:
    if not out:
        return
    data = b"".join(out)
    out.clear()
    first = RecordBatch(data)
    segment.append(data, first.base_offset, _end_of([data]) - 1, -1)


def _end_of(out: list) -> int:
    """The offset after the last batch of the pending output."""
    data = out[-1]
    pos = 0
    last_end = -1
    while pos < len(data):
        b = RecordBatch(data, pos)
        last_end = b.next_offset
        pos += b.size_in_bytes
    return last_end
