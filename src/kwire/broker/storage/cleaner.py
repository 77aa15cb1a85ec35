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
  ``Cleaner._check``), or, with ``CleanerConfig.worker_process``, in a worker process
  (cleaner_worker.py), out of the broker's GIL.  The copy runs without the partition lock:
  produce and fetch go on.  Only the swap (``PartitionLog.replace_segments``) takes the lock, after checking that
  the segments it replaces are still the log's.
* **Crash safety**: ``.cleaned`` -> ``.swap`` -> old segments ``.deleted`` -> final names ->
  ``.deleted`` files unlinked; the loader removes ``.cleaned`` and ``.deleted`` files and
  completes swaps (see loader.py).  Only the renames are made under the partition lock.

``LogCleaner.clean_once(now_ms=...)`` runs one pass in the caller's thread: tests drive the
cleaner with it and an injected clock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kwire.protocol.errors import KafkaStorageError

from .cleaner_checkpoint import read_cleaner_checkpoint, write_cleaner_checkpoint
from .cleaner_pass import CleanAborted, CleanJob, CleanPass, SegmentInfo
from .config import LONG_MAX
from .log import CleaningView, PartitionLog
from .offset_map import has_compiled_walk
from .segment import LogSegment
from .throttler import Throttler

if TYPE_CHECKING:
    from .cleaner_worker import CleanerWorker
    from .manager import LogManager

__all__ = ["CleanerConfig", "CleanResult", "CleanAborted", "Cleaner", "LogCleaner", "LogToClean",
           "log_to_clean"]

logger = logging.getLogger("kwire.broker.storage.cleaner")

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
    # kwire's own (kwire.log.cleaner.worker.process, BrokerConfig.log_cleaner_worker_process):
    # each cleaner thread reads and writes in a worker process of its own (cleaner_worker.py), so
    # the cleaner's Python work does not hold the broker's GIL.  The broker turns it on where the
    # platform can pass descriptors (config.WORKER_PROCESS_SUPPORTED), by measurement: on the quiet
    # 2-core VM (``bench_cleaner.py --only produce --cleaner-in both --slices 9``, RESULTS.md)
    # producers kept 0.82x throughput and 0.86x p50 latency of a broker without cleaning with
    # the worker, 0.89x and 0.72x with the thread (the goal: 0.8 for both).  Without the network
    # the event loop's wake-up lateness during a clean was 0.14 ms with the worker as with no
    # clean, 1.97 ms with the thread; clean speed the same.  Its cost: one more process per
    # cleaner thread, ~30 MB RSS, started at the first clean.  Off here, for the storage on its
    # own (tests, tools): a LogCleaner made without the broker cleans in its thread.
    worker_process: bool = False
    # How often the throttler measures the rate: Kafka's LogCleaner builds its Throttler with a
    # fixed 300 ms (not a broker setting), so a clean shorter than that is never slowed.  Tests
    # shorten it to make a small clean last long enough to be interrupted.
    throttle_check_interval_ms: int = 300

    @classmethod
    def from_broker(cls, config) -> CleanerConfig:
        """From a ``kwire.broker.config.BrokerConfig``."""
        return cls(config.log_cleaner_enable, config.log_cleaner_threads, config.log_cleaner_dedupe_buffer_size,
                   config.log_cleaner_io_buffer_size, config.log_cleaner_io_max_bytes_per_second,
                   config.log_cleaner_backoff_ms, config.log_cleaner_worker_process)


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


class Cleaner:
    """Cleans one log at a time (one per cleaner thread, with its own dedupe map)."""

    def __init__(self, config: CleanerConfig | None = None, *, throttler: Throttler | None = None,
                 stop: threading.Event | None = None, hook: Callable[[str], None] | None = None,
                 compiled: bool | None = None, worker: CleanerWorker | None = None):
        """``compiled``: walk records with the compiled helper (default: when it is built), or
        False for the Python walks (same results; the tests run both).  ``worker``: run the map
        and the copy in that worker process (cleaner_worker.py), the swaps here; ``hook`` then
        sees only the swap's steps."""
        self.config = config or CleanerConfig()
        self.throttler = throttler or Throttler(self.config.io_max_bytes_per_second,
                                          check_interval_ms=self.config.throttle_check_interval_ms)
        self._stop = stop or threading.Event()
        self.hook = hook
        self._map_bytes = self.config.dedupe_buffer_size // max(self.config.threads, 1)
        self._compiled = has_compiled_walk() if compiled is None else compiled
        self._worker = worker
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
        - The map and the copy in a worker process (``CleanerConfig.worker_process``,
          cleaner_worker.py): the GIL is then not shared at all, and this check runs in the
          broker only between the worker's messages.  Off by default: see that setting.
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
        try:
            try:
                aborted = log.aborted_transactions(candidates[0].base_offset, first_uncleanable)
            except KafkaStorageError:
                raise CleanAborted(f"{log.name}: closed before the clean started") from None
            config = view.config
            job = CleanJob(log.name, str(log.dir), tuple(SegmentInfo.of(s) for s in candidates), first_dirty,
                           first_uncleanable, horizon_due, now, tuple(aborted), dict(view.last_batch_of_producer),
                           dict(view.marker_epoch_of_producer), config.delete_retention_ms, config.segment_bytes,
                           config.index_interval_bytes)

            def swap(first: int, count: int, cleaned: LogSegment) -> None:
                if not log.replace_segments(candidates[first:first + count], cleaned, hook=self.hook):
                    cleaned.delete()
                    raise CleanAborted(f"{log.name}: segments changed during the clean")

            if self._worker is not None and self._worker.usable:
                from .cleaner_worker import WorkerSettings

                # The worker throttles by itself: its share of the rate the threads share here.
                settings = WorkerSettings(self._map_bytes, self._compiled, self.config.io_buffer_size,
                                          self.config.io_max_bytes_per_second / max(self.config.threads, 1),
                                          self.config.throttle_check_interval_ms)
                outcome = self._worker.run(job, fds, settings, swap=swap, check=lambda: self._check(log))
            else:
                outcome = CleanPass(job, fds, map_bytes=self._map_bytes, compiled=self._compiled,
                                    io_buffer_size=self.config.io_buffer_size, throttler=self.throttler,
                                    check=lambda: self._check(log), hook=self.hook,
                                    emit=lambda out: swap(out.first, out.count, out.segment)).run()
        finally:
            for fd in fds:
                os.close(fd)
        if outcome.end < 0:
            return None
        end, stats = outcome.end, outcome.stats
        write_cleaner_checkpoint(log.dir, end)
        if self.hook:
            self.hook("checkpointed")
        before, after = outcome.bytes_before, outcome.bytes_after
        result = CleanResult(log.name, before, after, stats.records_read, stats.records_removed,
                             outcome.segments_before, outcome.segments_after, first_dirty, end,
                             time.monotonic() - t0, stats.min_delete_horizon)
        # One line per clean, like Kafka's "Cleaner 0: Log ... cleaned: x MB -> y MB".
        logger.info("cleaned %s: %d bytes -> %d bytes (%.1f%% smaller), %d of %d records removed, "
                    "%d segment(s) -> %d, offsets %d-%d dirty, in %.3f s", log.name, before, after,
                    100.0 * (before - after) / before if before else 0.0, stats.records_removed,
                    stats.records_read, outcome.segments_before, outcome.segments_after, first_dirty, end,
                    result.duration_s)
        return result

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
        self._throttler = Throttler(self.config.io_max_bytes_per_second,
                                   check_interval_ms=self.config.throttle_check_interval_ms)
        self._lock = threading.Lock()
        self._in_progress: set[int] = set()  # id() of logs being cleaned
        self._uncleanable: dict[int, PartitionLog] = {}  # logs whose clean failed (Kafka's uncleanable partitions)
        # id(log) -> (log, earliest delete horizon of what its last clean kept)
        self._horizons: dict[int, tuple[PartitionLog, int]] = {}
        self._threads: list[threading.Thread] = []
        self._local = threading.local()  # .worker: the calling cleaner thread's worker process
        self._workers: list[CleanerWorker] = []

    def _cleaner(self) -> Cleaner:
        return Cleaner(self.config, throttler=self._throttler, stop=self._stop, hook=self.hook,
                       worker=self._thread_worker())

    def _thread_worker(self) -> CleanerWorker | None:
        """The calling cleaner thread's worker process (None outside the threads, or with
        ``worker_process`` off), made at the thread's first clean: a broker starting with nothing
        to clean does not import what the worker needs while it answers its first requests."""
        local = self._local
        if getattr(local, "worker", None) is None and getattr(local, "wants_worker", False):
            from .cleaner_worker import CleanerWorker

            local.worker = CleanerWorker()
            with self._lock:
                self._workers.append(local.worker)
        return getattr(local, "worker", None)

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
                if not self.logs.opened(*key):
                    # A lazy partition not opened since a clean shutdown (the internal topics,
                    # which the coordinators' loader opens after the first requests): this pass
                    # does not open it, so the broker's start does not wait behind it; a pass
                    # after its first use weighs it.
                    continue
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
        self._local.wants_worker = self.config.worker_process  # (made at the first clean: _thread_worker)
        try:
            while not self._stop.is_set():
                try:
                    result = self.clean_once()
                except Exception:  # noqa: BLE001 - one log's failure must not stop the cleaner
                    logger.exception("log cleaner pass failed")
                    result = None
                if result is None:
                    self._stop.wait(self.config.backoff_ms / 1000)
        finally:
            worker = getattr(self._local, "worker", None)
            if worker is not None:
                worker.close()
                with self._lock:
                    self._workers.remove(worker)

    def worker_pids(self) -> list[int]:
        """The process ids of the cleaner threads' worker processes running now."""
        with self._lock:
            return [pid for pid in (w.pid for w in self._workers) if pid is not None]

    def stop(self) -> None:
        """Stop the threads: a clean under way is aborted before its swap (or completes it, if
        already swapping) and leaves the log as it was or cleaned."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self._threads.clear()
