"""A bound on how much of what the broker writes stays in the page cache.

Kafka leaves its log files to the page cache and lets the kernel decide what stays.  kwire keeps
only the newest ``limit`` bytes it wrote there: older ranges are written back
(``sync_file_range``) and dropped (``posix_fadvise(DONTNEED)``) by a background thread, so the
pages they held are freed and the next writes reuse them while they are still backed.  What
consumers read is left to the kernel, as with Kafka: a consumer further behind than ``limit``
reads from disk once, and the pages it brings in stay for the next reader.

Why: in virtual machines that give free memory back to the host (virtio-balloon free page
reporting, as on Firecracker microVMs), the first write to a page the guest has not used lately
costs about 10 us, so a log that grows into new page-cache pages is written at 300-450 MB/s,
almost all of it page faults; the same writes into pages that were freed a moment ago run at
several GB/s (benchmarks/RESULTS.md).  Elsewhere the bound costs little: only data older than the
newest ``limit`` bytes is written back early (the kernel would write it within 30 s anyway).  A
small test topic never reaches the bound.

Dropping reads (counting read ranges in the queue too) was tried: a consumer re-reading a 1 GB
topic then read it from disk every time, at 0.66-0.93x the speed of reading it from the page
cache (three alternated rounds each in three runs, librdkafka consumer).

Nothing is lost by dropping: ``DONTNEED`` frees only clean pages, after their writeback.
Appended bytes are queued per segment in ranges of ``chunk`` bytes.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import mmap
import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .log import PartitionLog
    from .segment import LogSegment

__all__ = ["PageCacheLimit", "MIN_PAGE_CACHE_BYTES", "page_cache_control_available"]

logger = logging.getLogger("kwire.broker.storage")

_CHUNK = 1024 * 1024
# The largest page-cache folio (a PMD: 2 MiB with 4 KiB pages, on x86-64 and arm64).
_FOLIO_ALIGN = max(2 * 1024 * 1024, mmap.PAGESIZE)
MIN_PAGE_CACHE_BYTES = _CHUNK
# sync_file_range flags (linux/fs.h).
_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4


def _load_sync_file_range():
    if not sys.platform.startswith("linux") or not hasattr(os, "posix_fadvise"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


def page_cache_control_available() -> bool:
    """Whether this platform has ``sync_file_range`` and ``posix_fadvise`` (Linux)."""
    return _sync_file_range is not None


class _OpenRun:
    """A segment's appended bytes ``[start, end)`` not queued yet (less than a chunk)."""

    __slots__ = ("start", "end")

    def __init__(self, start: int):
        self.start = self.end = start


class _Range:
    __slots__ = ("log", "segment", "start", "end", "writeback_started")

    def __init__(self, log: PartitionLog, segment: LogSegment, start: int, end: int):
        self.log = log
        self.segment = segment
        self.start = start
        self.end = end
        self.writeback_started = False


def _merged(ranges: list[_Range]) -> list[_Range]:
    """``ranges`` with the adjacent ones of each segment joined (order: by segment, then start)."""
    out: list[_Range] = []
    for r in sorted(ranges, key=lambda r: (id(r.segment), r.start)):
        last = out[-1] if out else None
        if last is not None and last.segment is r.segment and last.end == r.start:
            out[-1] = _Range(r.log, r.segment, last.start, r.end)
        else:
            out.append(r)
    return out


class PageCacheLimit:
    """Keeps the newest ``limit`` bytes the broker appended in the page cache and drops older
    ranges in a background thread (started when first needed).

    ``appended`` and ``rolled`` are called under the partition's lock; the thread takes a
    partition's lock only to duplicate a segment's descriptor (never while holding its own).
    """

    def __init__(self, limit: int, *, chunk: int = _CHUNK):
        if limit < chunk:
            raise ValueError(f"a page cache limit must be at least {chunk} bytes, got {limit}")
        self.limit = limit
        self.chunk = chunk
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: collections.deque[_Range] = collections.deque()
        self._held = 0  # bytes in the queue
        self._slack = min(limit // 8, 16 * chunk)  # how far below the limit a wake-up drops
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.dropped_bytes = 0  # for tests and stats

    # -- called under a partition's lock --------------------------------------------------------
    def appended(self, log: PartitionLog, segment: LogSegment, start: int, end: int) -> None:
        """Bytes ``[start, end)`` were appended to ``segment``."""
        run = segment.cache_run
        if run is None:
            run = segment.cache_run = _OpenRun(start)
        elif start != run.end:  # cut back since (truncate_to): queue what was there, start anew
            if run.end > run.start:
                self._queue_range(log, segment, run.start, run.end)
            run.start = start
        run.end = end
        while run.end - run.start >= self.chunk:
            self._queue_range(log, segment, run.start, run.start + self.chunk)
            run.start += self.chunk

    def rolled(self, log: PartitionLog, segment: LogSegment) -> None:
        """``segment`` stopped being active: its unqueued tail joins the queue."""
        run = segment.cache_run
        if run is not None and run.end > run.start:
            self._queue_range(log, segment, run.start, run.end)
            run.start = run.end

    def _queue_range(self, log: PartitionLog, segment: LogSegment, start: int, end: int) -> None:
        with self._lock:
            if self._stopping:
                return
            self._queue.append(_Range(log, segment, start, end))
            self._held += end - start
            if self._held > self.limit:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="kwire-page-cache", daemon=True)
                    self._thread.start()
                self._wake.notify()

    # -- the background thread ------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and self._held <= self.limit:
                    self._wake.wait()
                if self._stopping:
                    return
                # Down to a little below the limit at once: one wake-up and a few calls per
                # segment for many chunks, not a wake-up and three calls for each.
                doomed: list[_Range] = []
                target = self.limit - self._slack
                while self._queue and self._held > target:
                    r = self._queue.popleft()
                    self._held -= r.end - r.start
                    doomed.append(r)
                # Start the writeback of what comes next, so it is done when its turn comes.
                ahead, lead = [], 0
                for r in self._queue:
                    if lead >= self.limit // 4:
                        break
                    lead += r.end - r.start
                    if not r.writeback_started:
                        r.writeback_started = True
                        ahead.append(r)
            for r in _merged(ahead):
                self._apply(r, drop=False)
            for r in _merged(doomed):
                self._apply(r, drop=True)

    def _apply(self, r: _Range, *, drop: bool) -> None:
        try:
            fd = r.log.duplicate_segment_fd(r.segment)
        except Exception as exc:  # e.g. out of descriptors: this range stays, the thread goes on
            logger.warning("%s: could not release bytes %d-%d from the page cache: %s",
                           r.segment.log_path, r.start, r.end, exc)
            return
        if fd is None:
            return  # the segment was deleted or its log closed
        # The kernel drops only folios wholly inside the range, and the page cache holds folios
        # of up to 2 MiB, aligned to their size: so from the 2 MiB boundary at or below r.start.
        # What lies between was appended before r, so the folio straddling r.start is dropped
        # now, the one straddling r.end with the next range.
        start = r.start - r.start % _FOLIO_ALIGN
        try:
            if drop:
                # Wait for the writeback (a no-op for clean pages), then free the pages.
                if _sync_file_range(fd, start, r.end - start, _WAIT_BEFORE | _WRITE | _WAIT_AFTER) != 0:
                    raise OSError(ctypes.get_errno(), "sync_file_range")
                os.posix_fadvise(fd, start, r.end - start, os.POSIX_FADV_DONTNEED)
                self.dropped_bytes += r.end - r.start
            elif _sync_file_range(fd, start, r.end - start, _WRITE) != 0:
                raise OSError(ctypes.get_errno(), "sync_file_range")
        except OSError as exc:
            # The data stays where it is (in the page cache); only the bound slips.
            logger.warning("%s: could not release bytes %d-%d from the page cache: %s",
                           r.segment.log_path, r.start, r.end, exc)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Stop the thread (what is queued stays in the page cache).  Idempotent."""
        with self._lock:
            self._stopping = True
            self._queue.clear()
            self._held = 0
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join()
