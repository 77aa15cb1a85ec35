"""The page cache limit: old appended ranges leave the page cache, their bytes stay on disk.

Residency is read with mincore(2) on a mapping of the segment file, so these tests look at the
kernel's page cache itself, not at the limit's own bookkeeping.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import time
from pathlib import Path

import pytest

from kwire.broker.storage import LogConfig, LogManager, PartitionLog
from kwire.broker.storage.page_cache import PageCacheLimit, page_cache_control_available
from tests.waiting import wait_for

from .helpers import log_files, make_batch, read_all, stored_form

pytestmark = pytest.mark.skipif(not page_cache_control_available(),
                                reason="sync_file_range and posix_fadvise are Linux calls")

PAGE = os.sysconf("SC_PAGE_SIZE")
LIMIT = 1 << 20
CHUNK = 64 << 10

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


def resident(path: Path, start: int = 0, end: int | None = None) -> int:
    """Bytes of ``path[start:end]`` in the page cache, in whole pages."""
    size = path.stat().st_size
    end = size if end is None else min(end, size)
    if end <= start:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            first, last = start // PAGE, (end + PAGE - 1) // PAGE
            return sum(vec[i] & 1 for i in range(first, last)) * PAGE
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def total_resident(directory: Path) -> int:
    return sum(resident(p) for p in log_files(directory))


def wait_until_at_most(measure, bound: int, what: str, timeout: float = 10.0) -> None:
    """Wait until ``measure()`` <= ``bound``; the error says how far off it stayed."""
    deadline = time.monotonic() + timeout
    while (value := measure()) > bound:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still {value:,} bytes after {timeout} s (bound {bound:,})")
        time.sleep(0.02)


def append_batches(log: PartitionLog, count: int, value_size: int = 1000, records: int = 16) -> list:
    out = []
    for i in range(count):
        batch = make_batch(records, tag=f"b{i}", value_size=value_size)
        base, _ = log.append(batch)
        out.append((base, batch))
    return out


def read_in_fetches(log: PartitionLog, total: int, fetch: int = 256 << 10) -> bytes:
    """At least ``total`` bytes from the log start, read as a consumer would: a range is read
    right after the log hands it out, ``fetch`` bytes at a time (a read larger than the limit
    may have its first ranges dropped before they are read)."""
    out, offset = [], log.log_start_offset
    while sum(map(len, out)) < total:
        slices = log.read(offset, fetch)
        assert slices, f"the log ended before {total} bytes"
        out += [s.read() for s in slices]
        offset = slices[-1].next_offset
    return b"".join(out)


@pytest.fixture
def limited(tmp_path):
    cache = PageCacheLimit(LIMIT, chunk=CHUNK)
    log = PartitionLog(tmp_path / "t-0", LogConfig(), page_cache=cache)
    yield log, cache
    cache.close()
    log.close()


def test_old_ranges_leave_the_page_cache_and_read_back_from_disk(limited):
    log, cache = limited
    appended = append_batches(log, 400)  # ~6.5 MB in ~16 KB batches, one segment
    path = log_files(log.dir)[0]
    size = path.stat().st_size
    assert size > 6 * LIMIT
    # The queue may hold LIMIT bytes, the open run up to a chunk more.
    wait_for(lambda: cache.dropped_bytes >= size - LIMIT - CHUNK, "the old ranges to be dropped")
    assert resident(path) <= LIMIT + CHUNK + PAGE
    assert resident(path, 0, size - LIMIT - CHUNK) <= PAGE  # edge pages shared with kept ranges
    assert resident(path, size - LIMIT // 2) >= LIMIT // 2 - PAGE  # the newest bytes stay
    # Nothing was lost: every byte reads back as it was appended (from disk now).
    assert read_all(log) == b"".join(stored_form(batch, base) for base, batch in appended)


def test_reads_are_left_to_the_kernel(limited):
    log, cache = limited
    append_batches(log, 400)
    path = log_files(log.dir)[0]
    size = path.stat().st_size
    wait_for(lambda: cache.dropped_bytes >= size - LIMIT - CHUNK, "the old ranges to be dropped")
    dropped = cache.dropped_bytes
    old = read_in_fetches(log, 3 * LIMIT)  # from disk, into the page cache, where it stays
    time.sleep(0.2)
    assert cache.dropped_bytes == dropped
    # Nearly all of it stays cached: the kernel may page a few out on its own (this VM runs a
    # DAMON "pageout" scheme; 31 of 768 pages went once), where dropping the reads leaves none.
    assert resident(path, 0, 3 * LIMIT) >= 0.9 * 3 * LIMIT
    assert read_in_fetches(log, 3 * LIMIT) == old


def test_a_log_under_the_limit_keeps_everything_and_starts_no_thread(limited):
    log, cache = limited
    append_batches(log, 40)  # ~650 KB
    path = log_files(log.dir)[0]
    assert resident(path) == pytest.approx(path.stat().st_size, abs=PAGE)
    assert cache.dropped_bytes == 0 and cache._thread is None


def test_deleted_segments_in_the_queue_are_skipped(tmp_path, caplog):
    cache = PageCacheLimit(LIMIT, chunk=CHUNK)
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=256 << 10), page_cache=cache)
    try:
        with caplog.at_level(logging.WARNING, logger="kwire.broker.storage"):
            appended = append_batches(log, 200)  # ~3.2 MB over ~13 segments
            first = log.segments[0]
            # Most segments go while their ranges may still be queued.
            log.delete_records(appended[150][0])
            assert log.duplicate_segment_fd(first) is None
            appended += append_batches(log, 200)
            wait_for(lambda: total_resident(log.dir) <= LIMIT + 2 * CHUNK + 2 * PAGE, "the page cache to shrink")
        assert not [r for r in caplog.records if "could not release" in r.getMessage()]
        assert read_all(log) == b"".join(stored_form(b, base) for base, b in appended[150:])
        thread = cache._thread
        assert thread is not None and thread.is_alive()
    finally:
        cache.close()
        log.close()
    assert not thread.is_alive()  # close() stops it


def test_a_range_that_cannot_be_released_is_logged_and_the_rest_still_go(limited, caplog, monkeypatch):
    log, cache = limited
    real = log.duplicate_segment_fd
    failures = []

    def out_of_descriptors(segment):
        if not failures:
            failures.append(segment)
            raise OSError(24, "Too many open files")
        return real(segment)

    monkeypatch.setattr(log, "duplicate_segment_fd", out_of_descriptors)
    with caplog.at_level(logging.WARNING, logger="kwire.broker.storage"):
        append_batches(log, 400)
        path = log_files(log.dir)[0]
        size = path.stat().st_size
        # The thread lived on: everything but the failed range and the kept ones is dropped.
        wait_until_at_most(lambda: resident(path, 0, size - LIMIT - CHUNK), 2 << 20,
                           "the old ranges in the page cache")
    assert failures and cache._thread.is_alive()
    assert any("could not release" in r.getMessage() and "Too many open files" in r.getMessage()
               for r in caplog.records)


def test_truncation_then_appends(limited):
    log, cache = limited
    appended = append_batches(log, 200)
    old_end = log_files(log.dir)[0].stat().st_size
    log.truncate_to(appended[100][0])
    appended = appended[:100] + append_batches(log, 300)
    path = log_files(log.dir)[0]
    size = path.stat().st_size
    # Pages rewritten after the truncation while the thread dropped the ranges queued before it
    # may stay (dirty again, DONTNEED passes them over); what was written past the old end goes.
    wait_for(lambda: resident(path, old_end, size - LIMIT - CHUNK) <= PAGE, "the new ranges to be dropped")
    assert read_all(log) == b"".join(stored_form(batch, base) for base, batch in appended)


def test_the_manager_shares_one_limit_and_reopened_logs_queue_what_they_append(tmp_path):
    with LogManager(tmp_path / "d", page_cache_bytes=-1) as manager:
        assert manager.page_cache is None
        assert manager.create_partition("t", 0)._page_cache is None
    with LogManager(tmp_path / "d", page_cache_bytes=LIMIT) as manager:
        logs = [manager.get("t", 0), manager.create_partition("t", 1)]
        assert {id(log._page_cache) for log in logs} == {id(manager.page_cache)}
        append_batches(logs[0], 40)
    with LogManager(tmp_path / "d", page_cache_bytes=LIMIT) as manager:
        log = manager.get("t", 0)
        segment = log.segments[0]
        before = segment.size
        assert segment.cache_run is None
        append_batches(log, 40)
        run = segment.cache_run
        # From where the reopened segment ended: queued whole chunks, the rest in the open run.
        assert manager.page_cache._held + (run.end - run.start) == segment.size - before
        assert run.end == segment.size


def test_the_limit_is_at_least_one_chunk():
    with pytest.raises(ValueError, match="at least"):
        PageCacheLimit(CHUNK - 1, chunk=CHUNK)
