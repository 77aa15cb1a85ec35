"""Log compaction (Kafka's LogCleaner, Cleaner and LogCleanerManager).

For partitions whose cleanup.policy holds "compact", background threads keep only the latest
record of every key:

* **Choosing** (``LogCleaner.grab_filthiest``): a log's *dirty* part runs from its cleaner
  checkpoint (``cleaner-offset-checkpoint``) to the first uncleanable offset: never the active
  segment, never past the last stable offset, never a segment holding records younger than
  min.compaction.lag.ms.  The log with the highest dirty ratio (dirty bytes / all cleanable
  bytes) above min.cleanable.dirty.ratio is cleaned (Kafka compares with ``>``, so a ratio of
  1.0 turns cleaning off unless max.compaction.lag.ms forces it); one whose oldest dirty batch is older
  than max.compaction.lag.ms is cleaned whatever its ratio; one whose kept tombstones or markers
  have reached their delete horizon is cleaned again to remove them.
* **Cleaning** (``Cleaner.clean``): the dirty part's keys go into a dedupe map (``OffsetMap``,
  bounded by log.cleaner.dedupe.buffer.size: when it fills, the pass cleans up to there and the
  next pass goes on).  Then every segment from the log's start up to the end of the mapped range
  is copied into ``<base>.log.cleaned`` files, keeping what ``BatchFilter`` keeps, merging
  consecutive segments while what is kept fits in segment.bytes (see ``Cleaner._copy``).
  Each dirty batch is walked twice, as in Kafka (once for the map, once for the copy), by the compiled walks of offset_map.py, which release the GIL (see
  ``Cleaner._check``).  The copy runs without the partition lock: produce and fetch go
  on.  Only the swap (``PartitionLog.replace_segments``) takes the lock, after checking that
  the segments it replaces are still the log's.
* **Crash safety**: ``.cleaned`` -> ``.swap`` -> old segments deleted -> final names; the
  loader removes ``.cleaned`` files and completes swaps (see loader.py).

``LogCleaner.clean_once(now_ms=...)`` runs one pass in the caller's thread: tests drive the
cleaner with it and an injected clock.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kwire.protocol.errors import KafkaStorageError
from kwire.protocol.records import HEADER_SIZE, RecordBatch

from ._files import CLEANED_SUFFIX, pread_exact, segment_path
from .batch_filter import BatchFilter, FilterStats, TransactionTracker, empty_batch
from .cleaner_checkpoint import read_cleaner_checkpoint, write_cleaner_checkpoint
from .config import LONG_MAX
from .index import INT32_MAX
from .log import CleaningView, PartitionLog
from .offset_map import OffsetMap, has_compiled_walk
from .segment import LogSegment
from .throttler import Throttler

if TYPE_CHECKING:
    from .manager import LogManager

__all__ = ["CleanerConfig", "CleanResult", "CleanAborted", "Cleaner", "LogCleaner", "LogToClean",
           "log_to_clean"]

logger = logging.getLogger("kwire.broker.storage.cleaner")

_PREFIX = struct.Struct(">qi")
_DOUBLE_MAX = 1.7976931348623157e308
# Without the compiled helper: the longest the cleaner works in Python before handing the GIL over.
PYTHON_SLICE_S = 0.001


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CleanerConfig:
    """The cleaner's budget, Kafka's log.cleaner.* broker settings."""

    enable: bool = True                           # log.cleaner.enable
    threads: int = 1                              # log.cleaner.threads
    dedupe_buffer_size: int = 128 * 1024 * 1024   # log.cleaner.dedupe.buffer.size, shared by the threads
    io_buffer_size: int = 512 * 1024              # log.cleaner.io.buffer.size: read/write chunk
    io_max_bytes_per_second: float = _DOUBLE_MAX  # log.cleaner.io.max.bytes.per.second
    backoff_ms: int = 15_000                      # log.cleaner.backoff.ms: sleep when nothing to clean

    @classmethod
    def from_broker(cls, config) -> CleanerConfig:
        """From a ``kwire.broker.config.BrokerConfig``."""
        return cls(config.log_cleaner_enable, config.log_cleaner_threads, config.log_cleaner_dedupe_buffer_size,
                   config.log_cleaner_io_buffer_size, config.log_cleaner_io_max_bytes_per_second,
                   config.log_cleaner_backoff_ms)


class CleanAborted(Exception):
    """The clean stopped before its swap (log closed or changed, cleaner stopping)."""


@dataclass(frozen=True)
class CleanResult:
    name: str
    bytes_before: int        # of the segments cleaned
    bytes_after: int
    records_read: int
    records_removed: int
    segments_before: int
    segments_after: int
    first_dirty_offset: int
    end_offset: int          # the new cleaner checkpoint
    duration_s: float
    # The earliest delete horizon (ms) of the tombstones and markers kept: a clean after it
    # can remove them.  None when none was kept.
    next_delete_horizon_ms: int | None


@dataclass(frozen=True)
class LogToClean:
    """A compacted log's cleanable range (Kafka's LogToClean)."""

    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    forced: bool  # max.compaction.lag.ms passed for its oldest dirty batch

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _cleanable_offsets(view: CleaningView, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty, first uncleanable, forced) as Kafka's LogCleanerManager.cleanableOffsets."""
    log_end = view.active_base  # the cleaner never looks past the active segment anyway
    first_dirty = checkpoint if checkpoint is not None else view.log_start_offset
    if not view.log_start_offset <= first_dirty <= max(log_end, view.log_start_offset):
        first_dirty = view.log_start_offset  # Kafka resets an out-of-range checkpoint to the log start
    config = view.config
    first_uncleanable = min(view.active_base, view.last_stable_offset)
    dirty = [s for s in view.segments if s.next_offset > first_dirty and s.size]
    if config.min_compaction_lag_ms > 0:
        horizon = now_ms - config.min_compaction_lag_ms
        for segment in dirty:
            if segment.largest_timestamp > horizon:
                first_uncleanable = min(first_uncleanable, segment.base_offset)
                break
    forced = False
    if config.max_compaction_lag_ms < LONG_MAX:
        stamps = [s.first_batch_timestamp for s in dirty if s.first_batch_timestamp > 0]
        forced = bool(stamps) and now_ms - config.max_compaction_lag_ms > min(stamps)
    return first_dirty, max(first_uncleanable, first_dirty), forced


def log_to_clean(log: PartitionLog, now_ms: int, view: CleaningView | None = None) -> LogToClean | None:
    """The cleanable range of ``log`` now, None if it is closed."""
    view = view or log.cleaning_view()
    if view is None:
        return None
    first_dirty, first_uncleanable, forced = _cleanable_offsets(view, read_cleaner_checkpoint(log.dir), now_ms)
    clean_bytes = sum(s.size for s in view.segments if s.next_offset <= first_dirty)
    dirty_bytes = sum(s.size for s in view.segments
                      if s.next_offset > first_dirty and s.base_offset < first_uncleanable)
    return LogToClean(log, first_dirty, first_uncleanable, clean_bytes, dirty_bytes, forced)


class _Output:
    """A ``.cleaned`` segment being written, and the old segments it replaces so far."""

    __slots__ = ("segment", "group", "pending", "pending_bytes", "changed", "first_abort", "last", "handed_over")

    def __init__(self, segment: LogSegment, first_abort: int):
        self.segment = segment
        self.group: list[LogSegment] = []
        self.pending: list[bytes | memoryview] = []  # kept batches not written yet
        self.pending_bytes = 0
        self.changed = False
        self.first_abort = first_abort   # its first entry in the filter's kept_aborts
        self.last: RecordBatch | None = None  # the last batch read of its group
        self.handed_over = False  # the swap began: the files are the loader's to finish or remove

    @property
    def base(self) -> int:
        return self.segment.base_offset

    @property
    def size(self) -> int:
        return self.segment.size + self.pending_bytes

    def fits(self, nbytes: int, segment: LogSegment, max_bytes: int) -> bool:
        """Whether ``nbytes`` more, ending with ``segment``'s offsets, stay within segment.bytes
        and the int32 relative offsets of the index (Kafka's groupSegmentsBySize rules)."""
        return self.size + nbytes <= max_bytes and segment.next_offset - 1 - self.base <= INT32_MAX


def _batches(fd: int, size: int, chunk: int) -> Iterator[memoryview]:
    """The raw batches of a segment file, read ``chunk`` bytes at a time (a bigger batch whole)."""
    pos, buf, buf_start = 0, memoryview(b""), 0
    while pos + 12 <= size:
        off = pos - buf_start
        if off + 12 > len(buf):
            buf, buf_start, off = memoryview(pread_exact(fd, min(chunk, size - pos), pos)), pos, 0
        n = _PREFIX.unpack_from(buf, off)[1] + 12
        if n < HEADER_SIZE or pos + n > size:
            raise KafkaStorageError(f"bad batch length {n - 12} at position {pos}")
        if off + n > len(buf):
            buf, buf_start, off = memoryview(pread_exact(fd, min(max(chunk, n), size - pos), pos)), pos, 0
        yield buf[off:off + n]
        pos += n


class Cleaner:
    """Cleans one log at a time (one per cleaner thread, with its own dedupe map)."""

    def __init__(self, config: CleanerConfig | None = None, *, throttler: Throttler | None = None,
                 stop: threading.Event | None = None, hook: Callable[[str], None] | None = None,
                 compiled: bool | None = None):
        """``compiled``: walk records with the compiled helper (default: when it is built), or
        False for the Python walks (same results; the tests run both)."""
        self.config = config or CleanerConfig()
        self.throttler = throttler or Throttler(self.config.io_max_bytes_per_second)
        self._stop = stop or threading.Event()
        self.hook = hook
        self._map_bytes = self.config.dedupe_buffer_size // max(self.config.threads, 1)
        self._compiled = has_compiled_walk() if compiled is None else compiled
        self._yield_at = 0.0
        self._slice = 0.0 if self._compiled else PYTHON_SLICE_S  # see _check

    def _check(self, log: PartitionLog) -> None:
        """Between two batches: abort if asked to, and let the broker's threads run.

        How the cleaner shares the GIL, chosen by measurement (bench_cleaner.py --only produce:
        p50 produce latency with the cleaner busy, cleaner-off/cleaner-on; the shared 2-core VM
        made every figure move by +-0.2 between runs).  The heavy loops (the walks of the
        records, MD5, the map's probes) run in the compiled helper without the GIL, once or
        twice a batch, so the broker's event loop can take the GIL at every batch; the cleaner
        adds no explicit yield: 0.84x, then 0.58-0.67x once the copy stopped hashing dirty keys
        (shorter GIL-free walks, load 2-3).  Tried and dropped:
        - ``time.sleep(0)`` every batch (the pure-Python cleaner's way): 0.58x.  Each sleeps
          ~60 us (the kernel's timer slack), so the cleaner gets slower and no fairer.
        - ``time.sleep(0)`` every 0.5 ms of work: 0.42x (load 3.4); the same with the walks
          holding the GIL (``OffsetMap.release_gil``: no short releases, which keep resetting
          the waiting thread's switch-interval timer in CPython, so it only gets the GIL when
          it wins a race): 0.11x and 0.18x against 0.08x and 0.09x without, alternated at load
          5-8, where every figure is noise.
        - The cleaner thread at nice 10 (``os.setpriority`` on its thread id): p50 0.63x
          against 0.58x, but p99 121 ms against 32 ms: preempted while holding the GIL, it
          kept the event loop waiting.
        - Walking all the batches of 256 KiB in one call without the GIL (fewer, longer
          GIL-free stretches): 0.21x.  Gathering them is itself ms of Python holding the GIL
          when batches are small, and the event loop waits the interpreter's 5 ms switch
          interval for it.
        - A child process doing the copy (no GIL shared at all) was not tried: it leaves the two
          cores as busy, and needs the segments, the producer state and the hooks across a
          process boundary.
        Without the compiled helper the walks are Python and never release the GIL: then the
        cleaner sleeps(0) once per ``PYTHON_SLICE_S`` of work."""
        if self._slice:
            now = time.perf_counter()
            if now >= self._yield_at:
                time.sleep(0)
                self._yield_at = time.perf_counter() + self._slice
        if self._stop.is_set() or log.closed:
            raise CleanAborted(f"{log.name}: clean aborted ({'cleaner stopping' if self._stop.is_set() else 'closed'})")

    def clean(self, log: PartitionLog, *, now_ms: int | None = None, horizon_due: bool = False) -> CleanResult | None:
        """Clean the cleanable range of ``log`` (whatever its dirty ratio), None when there is
        nothing to clean.  ``horizon_due``: clean the clean section even with nothing dirty, to
        remove tombstones and markers whose delete horizon has passed.  ``CleanAborted`` if the
        log closes or changes under it."""
        now = _now_ms() if now_ms is None else now_ms
        t0 = time.monotonic()
        view = log.cleaning_view()
        if view is None:
            return None
        target = log_to_clean(log, now, view)
        assert target is not None
        first_dirty, first_uncleanable = target.first_dirty_offset, target.first_uncleanable_offset
        candidates = [s for s in view.segments if s.base_offset < first_uncleanable and s.size]
        if not candidates or (target.dirty_bytes == 0 and not horizon_due):
            return None
        fds = log.duplicate_descriptors(candidates)
        if fds is None:
            raise CleanAborted(f"{log.name}: closed or changed before the clean started")
        fd_of = {id(s): fd for s, fd in zip(candidates, fds, strict=True)}
        offset_map = OffsetMap(self._map_bytes, compiled=self._compiled)
        try:
            try:
                aborted = log.aborted_transactions(candidates[0].base_offset, first_uncleanable)
            except KafkaStorageError:
                raise CleanAborted(f"{log.name}: closed before the clean started") from None
            end = self._build_offset_map(log, candidates, fd_of, first_dirty, first_uncleanable, aborted, offset_map)
            if end <= first_dirty:
                if not horizon_due:
                    return None
                offset_map.latest_offset = first_dirty - 1  # the clean section only
                end = first_dirty
            offset_map.mark_dirty(first_dirty)
            to_clean = [s for s in candidates if s.base_offset < end]
            stats = FilterStats()
            batch_filter = BatchFilter(offset_map, now_ms=now, delete_retention_ms=view.config.delete_retention_ms,
                                       aborted=aborted, last_batch_of_producer=view.last_batch_of_producer,
                                       marker_epoch_of_producer=view.marker_epoch_of_producer, stats=stats)
            before = sum(s.size for s in to_clean)
            after, outputs = self._copy(log, to_clean, fd_of, batch_filter, view.config.segment_bytes,
                                        view.config.index_interval_bytes)
        finally:
            offset_map.close()
            for fd in fds:
                os.close(fd)
        write_cleaner_checkpoint(log.dir, end)
        if self.hook:
            self.hook("checkpointed")
        result = CleanResult(log.name, before, after, stats.records_read, stats.records_removed, len(to_clean),
                             outputs, first_dirty, end, time.monotonic() - t0, stats.min_delete_horizon)
        # One line per clean, like Kafka's "Cleaner 0: Log ... cleaned: x MB -> y MB".
        logger.info("cleaned %s: %d bytes -> %d bytes (%.1f%% smaller), %d of %d records removed, "
                    "%d segment(s) -> %d, offsets %d-%d dirty, in %.3f s", log.name, before, after,
                    100.0 * (before - after) / before if before else 0.0, stats.records_removed,
                    stats.records_read, len(to_clean), outputs, first_dirty, end, result.duration_s)
        return result

    def _build_offset_map(self, log: PartitionLog, segments: list[LogSegment], fd_of: dict[int, int], start: int,
                          end: int, aborted, offset_map: OffsetMap) -> int:
        """Map every key of the data records in ``[start, end)`` (aborted ones left out, as
        Kafka's buildOffsetMap) until the map is full; returns the offset up to which it is
        complete (Kafka's latestOffset + 1)."""
        # Only the aborts whose marker is at or past ``start``: the batches read here begin in the
        # segment holding ``start``, so the markers of earlier ones are never seen to close them.
        txns = TransactionTracker([t for t in aborted if t.last_offset >= start])
        chunk = self.config.io_buffer_size
        for segment in segments:
            if segment.next_offset <= start:
                continue
            for raw in _batches(fd_of[id(segment)], segment.size, chunk):
                self._check(log)
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
                                f"{log.name}: log.cleaner.dedupe.buffer.size is too small: the batch at "
                                f"offset {batch.base_offset} has more keys than the {offset_map.capacity} "
                                "the dedupe map of a cleaner thread holds")
                        return offset_map.latest_offset + 1
                if batch.last_offset >= start:
                    offset_map.latest_offset = batch.last_offset
        return offset_map.latest_offset + 1

    def _copy(self, log: PartitionLog, segments: list[LogSegment], fd_of: dict[int, int],
              batch_filter: BatchFilter, max_bytes: int, index_interval_bytes: int) -> tuple[int, int]:
        """Copy ``segments`` through the filter into cleaned segments of at most segment.bytes
        and swap each in; returns (bytes after, segments after).

        Kafka groups the segments by their sizes *before* cleaning (groupSegmentsBySize), so a
        clean of twenty full segments that keeps 1% of them leaves twenty tiny segments until the
        next clean.  Here the groups are formed by the sizes *after* cleaning: a segment is
        copied straight into the open output while the output's size plus the segment's (its
        most) fits; otherwise it is copied into an output of its own, which is then appended to
        the open one if the two fit together (a second copy, of at most segment.bytes per output
        made), or else the open one is finished and swapped in.  Kafka's other rules stay: an
        output never spans more offsets than its index's int32 relative offsets, and never
        reaches into the active segment (not among ``segments``)."""
        current: _Output | None = None
        fresh: _Output | None = None
        after = outputs = 0
        aborts = batch_filter.txns.kept_aborts
        try:
            for segment in segments:
                if current is not None and current.fits(segment.size, segment, max_bytes):
                    self._copy_segment(log, segment, fd_of[id(segment)], current, batch_filter)
                    continue
                fresh = self._open_output(log, segment.base_offset, index_interval_bytes, len(aborts))
                self._copy_segment(log, segment, fd_of[id(segment)], fresh, batch_filter)
                if current is not None and current.fits(fresh.size, segment, max_bytes):
                    self._merge(log, current, fresh)
                else:
                    if current is not None:
                        after += self._finish(log, current, aborts[current.first_abort:fresh.first_abort])
                        outputs += 1
                    current = fresh
                fresh = None
            if current is not None:
                after += self._finish(log, current, aborts[current.first_abort:])
                outputs += 1
                current = None
        finally:
            for out in (current, fresh):
                if out is not None and not out.handed_over:
                    out.segment.delete()
        return after, outputs

    def _open_output(self, log: PartitionLog, base: int, index_interval_bytes: int, first_abort: int) -> _Output:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):  # left by an aborted clean
            segment_path(log.dir, base, suffix + CLEANED_SUFFIX).unlink(missing_ok=True)
        return _Output(LogSegment(log.dir, base, index_interval_bytes=index_interval_bytes,
                                  file_suffix=CLEANED_SUFFIX), first_abort)

    def _copy_segment(self, log: PartitionLog, segment: LogSegment, fd: int, out: _Output,
                      batch_filter: BatchFilter) -> None:
        """Append what the filter keeps of ``segment`` to ``out``."""
        if out.group:
            out.changed = True  # segments merged
        out.group.append(segment)
        chunk = self.config.io_buffer_size
        for raw in _batches(fd, segment.size, chunk):
            self._check(log)
            out.last = batch = RecordBatch(raw)
            kept = batch_filter.filter(raw, batch)
            if kept is None:
                out.changed = True
                continue
            if kept is not raw:
                out.changed = True
            self._add(out, kept)
            self.throttler.maybe_throttle(len(raw) + len(kept))
            if self.hook:
                self.hook("copying")

    def _add(self, out: _Output, batch: bytes | memoryview) -> None:
        out.pending.append(batch)
        out.pending_bytes += len(batch)
        if out.pending_bytes >= self.config.io_buffer_size:
            self._write(out.segment, out.pending)
            out.pending_bytes = 0

    def _merge(self, log: PartitionLog, into: _Output, other: _Output) -> None:
        """Append ``other``'s batches (written and pending) to ``into`` and drop ``other``."""
        other_file = other.segment
        fd = os.dup(other_file.log_fd()) if other_file.size else -1
        try:
            if fd >= 0:
                for raw in _batches(fd, other_file.size, self.config.io_buffer_size):
                    self._check(log)
                    self._add(into, raw)
                    self.throttler.maybe_throttle(2 * len(raw))
        finally:
            if fd >= 0:
                os.close(fd)
        for raw in other.pending:
            self._add(into, raw)
        into.group += other.group
        into.changed = True
        into.last = other.last
        other_file.delete()

    def _finish(self, log: PartitionLog, out: _Output, kept_aborts: list) -> int:
        """Complete ``out`` and swap it in for its group; returns its size (the group's when
        nothing changed and it stays)."""
        group = out.group
        # The aborts whose markers this group keeps with data: its .txnindex.
        if not out.changed and [t for s in group for t in s.txn_index.entries] == kept_aborts:
            out.segment.delete()
            out.handed_over = True
            return sum(s.size for s in group)  # nothing to remove: the segment stays as it is
        cleaned = out.segment
        # The cleaned segment ends where the group did, so the loader can tell which old
        # segments a .swap replaces (those whose base is below its end): when the group's
        # last batch went, an empty batch owned by no producer keeps its offsets.
        group_end = group[-1].next_offset
        end = _end_of(out.pending) if out.pending else cleaned.next_offset
        if out.last is not None and end < group_end:
            out.pending.append(empty_batch(out.last, keep_producer=False))
        self._write(cleaned, out.pending)
        out.pending_bytes = 0
        for txn in kept_aborts:
            cleaned.txn_index.append(txn)
        cleaned.on_become_inactive()
        cleaned.flush()
        if self.hook:
            self.hook("cleaned")
        self._check(log)
        # From here on the files are the loader's to finish or remove after a failure:
        # only a swap refused before it began may delete them.
        out.handed_over = True
        if not log.replace_segments(group, cleaned, hook=self.hook):
            cleaned.delete()
            raise CleanAborted(f"{log.name}: segments changed during the clean")
        return cleaned.size

    @staticmethod
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


class LogCleaner:
    """The broker's cleaner: ``threads`` background threads cleaning the filthiest compacted
    log in turn (Kafka's LogCleaner with its LogCleanerManager)."""

    def __init__(self, logs: LogManager, config: CleanerConfig | None = None, *,
                 clock: Callable[[], int] = _now_ms, hook: Callable[[str], None] | None = None):
        self.logs = logs
        self.config = config or CleanerConfig()
        self.clock = clock
        self.hook = hook
        self._stop = threading.Event()
        self._throttler = Throttler(self.config.io_max_bytes_per_second)
        self._lock = threading.Lock()
        self._in_progress: set[int] = set()  # id() of logs being cleaned
        self._uncleanable: dict[int, PartitionLog] = {}  # logs whose clean failed (Kafka's uncleanable partitions)
        # id(log) -> (log, earliest delete horizon of what its last clean kept)
        self._horizons: dict[int, tuple[PartitionLog, int]] = {}
        self._threads: list[threading.Thread] = []

    def _cleaner(self) -> Cleaner:
        return Cleaner(self.config, throttler=self._throttler, stop=self._stop, hook=self.hook)

    def grab_filthiest(self, now_ms: int) -> tuple[LogToClean, bool] | None:
        """The compacted log to clean next, marked in progress, and whether only its delete
        horizons call for it; None when none needs cleaning."""
        best: tuple[float, LogToClean, bool] | None = None
        with self._lock:
            # Forget logs closed since (deleted topics), as Kafka's maintainUncleanablePartitions.
            for table in (self._horizons, self._uncleanable):
                for key in [k for k, v in table.items() if (v[0] if isinstance(v, tuple) else v).closed]:
                    del table[key]
            for key in self.logs.partitions():
                try:
                    log = self.logs.get(*key)
                except Exception:  # noqa: BLE001 - deleted meanwhile, or the manager closed
                    continue
                if id(log) in self._in_progress or not log.config.compact or self._uncleanable.get(id(log)) is log:
                    continue
                target = log_to_clean(log, now_ms)
                if target is None:
                    continue
                due = self._horizons.get(id(log))
                horizon_due = due is not None and due[0] is log and due[1] <= now_ms
                # Kafka's grabFilthiestCompactedLog: a ratio above min.cleanable.dirty.ratio, or
                # max.compaction.lag.ms passed with something to clean; the highest ratio first.
                eligible = target.dirty_bytes > 0 and (
                    target.forced or target.dirty_ratio > log.config.min_cleanable_dirty_ratio)
                if not eligible and not horizon_due:
                    continue
                rank = target.dirty_ratio
                if best is None or rank > best[0]:
                    best = (rank, target, not eligible)
            if best is None:
                return None
            self._in_progress.add(id(best[1].log))
            return best[1], best[2]

    def clean_once(self, now_ms: int | None = None) -> CleanResult | None:
        """Clean the filthiest log, if any needs it, in the calling thread."""
        now = self.clock() if now_ms is None else now_ms
        picked = self.grab_filthiest(now)
        if picked is None:
            return None
        target, horizon_only = picked
        log = target.log
        try:
            result = self._cleaner().clean(log, now_ms=now, horizon_due=horizon_only or self._due(log, now))
        except CleanAborted as exc:
            logger.info("%s", exc)
            return None
        except Exception:
            if log.closed:  # closed or deleted under the clean: its files went with it
                logger.info("%s: clean aborted, the log was closed", log.name)
                return None
            # Kafka marks such a partition uncleanable and goes on with the others: retrying it
            # every backoff would only log the same failure again.
            logger.exception("cleaning %s failed; it will not be cleaned again until the broker restarts", log.name)
            with self._lock:
                self._uncleanable[id(log)] = log
            return None
        finally:
            with self._lock:
                self._in_progress.discard(id(log))
        with self._lock:
            if result is not None and result.next_delete_horizon_ms is not None:
                self._horizons[id(log)] = (log, result.next_delete_horizon_ms)
            elif result is not None:
                self._horizons.pop(id(log), None)
        return result

    def _due(self, log: PartitionLog, now_ms: int) -> bool:
        with self._lock:
            due = self._horizons.get(id(log))
            return due is not None and due[0] is log and due[1] <= now_ms

    # -- threads ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._threads or not self.config.enable:
            return
        self._stop.clear()
        for n in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"kwire-log-cleaner-{n}", daemon=True)
            self._threads.append(thread)
            thread.start()
        logger.info("log cleaner started with %d thread(s)", self.config.threads)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = self.clean_once()
            except Exception:  # noqa: BLE001 - one log's failure must not stop the cleaner
                logger.exception("log cleaner pass failed")
                result = None
            if result is None:
                self._stop.wait(self.config.backoff_ms / 1000)

    def stop(self) -> None:
        """Stop the threads: a clean under way is aborted before its swap (or completes it, if
        already swapping) and leaves the log as it was or cleaned."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self._threads.clear()
