"""``PartitionLog.flush`` fsyncs without the partition lock: an append (the event loop, with
``fsync = "always"``) does not wait for the disk, and the recovery point only covers what was
synced.  os.fsync is replaced by one that holds the flushing thread until the test lets it go.

The waits below are bounds so that a flush holding the lock fails the test instead of hanging
it; nothing is timed."""

from __future__ import annotations

import os
import threading

import pytest

from kwire.broker.storage import LogConfig, PartitionLog
from kwire.broker.storage.checkpoint import read_checkpoint

from .helpers import fill, make_batch

BOUND = 30  # seconds: only reached when the append is blocked


class StalledFsync:
    """os.fsync that, in the thread named ``flusher``, waits for ``release`` (other threads pass)."""

    def __init__(self, monkeypatch):
        self.real = os.fsync
        self.entered = threading.Event()
        self.release = threading.Event()
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd: int) -> None:
        if threading.current_thread().name == "flusher":
            self.entered.set()
            self.release.wait(BOUND)
        self.real(fd)


def _in_thread(fn, name: str) -> tuple[threading.Thread, threading.Event, list]:
    done, errors = threading.Event(), []

    def body():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=body, name=name, daemon=True)
    t.start()
    return t, done, errors


@pytest.fixture
def log(tmp_path):
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    yield log
    log.close()


def test_an_append_completes_while_a_flush_is_in_its_fsync(log, monkeypatch):
    fill(log, 2)  # offsets 0-5
    fsync = StalledFsync(monkeypatch)
    flusher, flushed, flush_errors = _in_thread(log.flush, "flusher")
    try:
        assert fsync.entered.wait(BOUND)
        appender, appended, append_errors = _in_thread(lambda: log.append(make_batch(3)), "appender")
        assert appended.wait(BOUND), "the append waited for the flush's fsync"
        assert not append_errors and log.log_end_offset == 9
        assert not flushed.is_set() and log.recovery_point == 0  # nothing moves before the fsync is done
    finally:
        fsync.release.set()
    flusher.join(BOUND)
    assert flushed.is_set() and not flush_errors
    # The point covers what the flush synced (offsets 0-5), not the append made during it.
    assert log.recovery_point == 6 and read_checkpoint(log.dir).recovery_point == 6
    log.flush()
    assert log.recovery_point == 9 and read_checkpoint(log.dir).recovery_point == 9


def test_a_close_during_the_fsync_fails_neither(log, monkeypatch):
    fill(log, 2)
    fsync = StalledFsync(monkeypatch)
    flusher, flushed, flush_errors = _in_thread(log.flush, "flusher")
    try:
        assert fsync.entered.wait(BOUND)
        log.close()  # flushes itself and closes the descriptors the flusher still syncs (duplicates)
    finally:
        fsync.release.set()
    flusher.join(BOUND)
    assert flushed.is_set() and not flush_errors
    assert read_checkpoint(log.dir).recovery_point == 6


def test_a_truncation_during_the_fsync_keeps_the_point_where_it_was(log, monkeypatch):
    fill(log, 3)  # offsets 0-8
    fsync = StalledFsync(monkeypatch)
    flusher, flushed, flush_errors = _in_thread(log.flush, "flusher")
    try:
        assert fsync.entered.wait(BOUND)
        log.truncate_to(3)
        fill(log, 2)  # offsets 3-8 again, new batches the flush never saw
    finally:
        fsync.release.set()
    flusher.join(BOUND)
    assert flushed.is_set() and not flush_errors
    assert log.recovery_point == 0
