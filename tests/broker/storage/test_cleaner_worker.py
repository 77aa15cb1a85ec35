"""The cleaner's worker process (cleaner_worker.py): the same cleans as in the cleaner's thread,
and a clean stopped in the middle leaves the log as it was, with no worker and no ``.cleaned``
file behind."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from kwire.broker.storage import Cleaner, CleanerConfig, LogCleaner, LogManager, PartitionLog
from kwire.broker.storage._files import CLEANED_SUFFIX
from kwire.broker.storage.cleaner_checkpoint import read_cleaner_checkpoint
from kwire.broker.storage.cleaner_pass import CleanAborted, CleanJob, SegmentInfo
from kwire.broker.storage.cleaner_worker import CleanerWorker, WorkerSettings

from .cleaner_helpers import COMPACT, NOW, latest, put, records


@pytest.fixture
def worker():
    w = CleanerWorker()
    yield w
    w.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _history(directory, seed: int) -> PartitionLog:
    """Keyed puts (tombstones, codecs, an idempotent producer) over small segments."""
    rng = random.Random(seed)
    log = PartitionLog(directory, COMPACT.with_(segment_bytes=rng.choice([600, 1024, 4096])))
    seq = 0
    for _ in range(80):
        if rng.random() < 0.1:
            log.roll()
            continue
        pairs = [(f"k{rng.randrange(15)}", None if rng.random() < 0.15 else f"v{rng.randrange(1000)}")
                 for _ in range(rng.randrange(1, 5))]
        producer = {}
        if rng.random() < 0.3:
            producer = {"pid": 7, "epoch": 0, "seq": seq}
            seq += len(pairs)
        put(log, pairs, compression=rng.choice([0, 0, 1, 4]), **producer)
    log.roll()
    return log


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_clean_in_the_worker_leaves_the_same_log_as_in_the_thread(tmp_path, worker, seed):
    logs = [_history(tmp_path / f"{where}-0", seed) for where in ("thread", "worker")]
    try:
        for now in (NOW, NOW + 5_000):  # the second clean drops the tombstones past their horizon
            results = [Cleaner(CleanerConfig(dedupe_buffer_size=24 * 100), worker=w).clean(
                log, now_ms=now, horizon_due=now > NOW) for log, w in zip(logs, (None, worker), strict=True)]
            assert results[0] is not None and results[1] is not None
            assert (results[0].bytes_after, results[0].segments_after, results[0].records_removed) == \
                (results[1].bytes_after, results[1].segments_after, results[1].records_removed)
            assert [s.base_offset for s in logs[0].segments] == [s.base_offset for s in logs[1].segments]
            assert records(logs[0]) == records(logs[1])
        for log in logs:
            assert not [p for p in log.dir.iterdir() if p.name.endswith(CLEANED_SUFFIX)]
        assert worker.pid is not None  # one process for all the cleans
        directory = logs[1].dir
        kept = records(logs[1])
        logs[1].close()
        logs[1] = PartitionLog(directory, COMPACT)
        assert records(logs[1]) == kept
    finally:
        for log in logs:
            log.close()


def _job(log: PartitionLog) -> tuple[CleanJob, list[int]]:
    view = log.cleaning_view()
    segments = [s for s in view.segments if s.size]
    fds = log.duplicate_descriptors(segments)
    job = CleanJob(log.name, str(log.dir), tuple(SegmentInfo.of(s) for s in segments), view.log_start_offset,
                   view.active_base, False, NOW, (), dict(view.last_batch_of_producer),
                   dict(view.marker_epoch_of_producer), view.config.delete_retention_ms, 600,
                   view.config.index_interval_bytes)
    return job, fds


def test_a_refused_swap_stops_the_worker_and_removes_its_cleaned_files(tmp_path, worker):
    log = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        for r in range(40):  # distinct keys: little to remove, so several outputs of 600 bytes
            put(log, [(f"k{r}-{i}", "x" * 10) for i in range(3)] + [("same", f"v{r}")], ts=1_000 + r)
        log.roll()
        before = records(log)
        job, fds = _job(log)
        settings = WorkerSettings(1 << 20, True, 1 << 16, 1.7e308)
        swaps = []

        def refuse(first, count, cleaned):
            swaps.append((first, count))
            cleaned.delete()
            raise CleanAborted("refused")

        try:
            with pytest.raises(CleanAborted):
                worker.run(job, fds, settings, swap=refuse, check=lambda: None)
        finally:
            for fd in fds:
                os.close(fd)
        assert swaps and swaps[0][0] == 0
        assert worker.pid is None  # killed mid-pass
        assert not [p for p in log.dir.iterdir() if p.name.endswith(CLEANED_SUFFIX)]
        assert records(log) == before
        # The next clean starts a new worker.
        result = Cleaner(CleanerConfig(), worker=worker).clean(log, now_ms=NOW)
        assert result is not None and result.records_removed == 39  # the older "same" records
        assert [r for r in records(log) if r[1] == "same"] == [before[-1]]
    finally:
        log.close()


def test_a_stop_during_a_clean_kills_the_worker(tmp_path, worker):
    log = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        for r in range(30):
            put(log, [(f"k{i}", f"v{r}") for i in range(4)], ts=1_000 + r)
        log.roll()
        before = records(log)
        stop = threading.Event()
        checks = []

        def check():  # the broker's side: the cleaner is told to stop while the worker works
            checks.append(1)
            stop.set()
            raise CleanAborted("stopping")

        job, fds = _job(log)
        try:
            with pytest.raises(CleanAborted):
                worker.run(job, fds, WorkerSettings(1 << 20, True, 1 << 16, 1.7e308),
                           swap=lambda *a: None, check=check)
        finally:
            for fd in fds:
                os.close(fd)
        assert checks and worker.pid is None
        assert not [p for p in log.dir.iterdir() if p.name.endswith(CLEANED_SUFFIX)]
        assert records(log) == before
    finally:
        log.close()


def test_the_cleaner_threads_clean_in_workers_and_stop_them(tmp_path):
    config = COMPACT.with_(min_cleanable_dirty_ratio=0.01)
    with LogManager(tmp_path, config) as logs:
        log = logs.create_partition("t", 0)
        for r in range(20):
            put(log, [(f"k{i}", f"v{r}") for i in range(5)], ts=1_000 + r)
        log.roll()
        cleaned = threading.Event()
        cleaner = LogCleaner(logs, CleanerConfig(backoff_ms=10, worker_process=True), clock=lambda: NOW,
                             hook=lambda step: cleaned.set() if step == "renamed" else None)
        cleaner.start()
        try:
            assert cleaned.wait(30)
            pids = cleaner.worker_pids()
        finally:
            cleaner.stop()
        assert len(pids) == 1 and pids[0] != os.getpid()
        assert not _alive(pids[0]) and cleaner.worker_pids() == []
        assert len(records(log)) <= 10
        assert [r[2] for r in records(log)][-5:] == ["v19"] * 5


def test_a_worker_killed_between_cleans_is_replaced(tmp_path, worker):
    log = PartitionLog(tmp_path / "t-0", COMPACT)
    first = None
    try:
        for round_ in range(2):
            for r in range(10):
                put(log, [(f"k{i}", f"v{round_}-{r}") for i in range(4)], ts=1_000 + r)
            log.roll()
            if first is not None:
                os.kill(first, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while worker.pid is not None and time.monotonic() < deadline:  # reaped
                    time.sleep(0.01)
            result = Cleaner(CleanerConfig(), worker=worker).clean(log, now_ms=NOW)
            assert result is not None
            first = first or worker.pid
        assert worker.pid not in (None, first) and worker.failures == 0
        assert [v for _, _, v in records(log)] == ["v1-9"] * 4
    finally:
        log.close()


# -- a worker killed with SIGKILL in the middle of a clean ---------------------------------------
def _stray_files(directory) -> list[str]:
    """Files a clean leaves only while it runs (the loader removes or finishes them after a crash)."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((CLEANED_SUFFIX, ".swap", ".deleted")))


def _fill(log: PartitionLog, rounds: int = 60, keys: int = 8) -> None:
    """Every key rewritten ``rounds`` times, values padded so the log spans many 1 KiB segments."""
    for r in range(rounds):
        put(log, [(f"k{i}", f"v{r}-{i}".ljust(60, ".")) for i in range(keys)], ts=1_000 + r)
    log.roll()


# Throttled from the first millisecond (log.cleaner.io.max.bytes.per.second; with Kafka's 300 ms
# check interval a clean this small finishes unthrottled, between two polls of the test): each
# clean lasts seconds, its .cleaned file on disk for about half of them, so the kill always
# lands mid-copy.
SLOW = CleanerConfig(io_max_bytes_per_second=20_000, throttle_check_interval_ms=1)


def _kill_when_writing(directory, pid_of, seconds: float = 30) -> int:
    """SIGKILL the worker (``pid_of()``) once a ``.cleaned`` file of its clean is on disk: it is
    then mid-copy.  Returns the pid killed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pid = pid_of()
        if pid is not None and any(p.name.endswith(CLEANED_SUFFIX) for p in directory.iterdir()):
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.005)
    raise AssertionError("the worker never wrote a .cleaned segment")


def test_a_worker_killed_mid_clean_fails_that_clean_and_loses_nothing(tmp_path, worker):
    log = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        _fill(log)
        before = records(log)
        cleaner = Cleaner(SLOW, worker=worker)
        outcome: list = []

        def clean():
            try:
                outcome.append(cleaner.clean(log, now_ms=NOW))
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome.append(exc)

        thread = threading.Thread(target=clean)
        thread.start()
        killed = _kill_when_writing(log.dir, lambda: worker.pid)
        thread.join(60)
        assert len(outcome) == 1 and isinstance(outcome[0], CleanAborted), outcome
        assert "exited" in str(outcome[0])
        assert worker.failures == 1 and worker.usable and worker.pid is None
        assert _stray_files(log.dir) == []  # its .cleaned segment removed
        # What was swapped in before the kill is a finished clean of those segments: every
        # key's latest record is there at its offset.
        now = records(log)
        assert latest(now) == latest(before) and set(now) <= set(before)
        # A restart (recovery) sees the same log.
        directory = log.dir
        log.close()
        log = PartitionLog(directory, COMPACT)
        assert records(log) == now
        # The clean is tried again, in a new worker, and finishes.
        result = Cleaner(CleanerConfig(), worker=worker).clean(log, now_ms=NOW)
        assert result is not None and worker.pid not in (None, killed) and worker.failures == 0
        assert records(log) == sorted((offset, key, value) for key, (offset, value) in latest(before).items())
        assert _stray_files(log.dir) == []
    finally:
        log.close()


def test_the_cleaner_retries_a_log_whose_worker_was_killed(tmp_path):
    config = COMPACT.with_(min_cleanable_dirty_ratio=0.01)
    with LogManager(tmp_path, config) as logs:
        log = logs.create_partition("t", 0)
        _fill(log)
        expected = sorted((offset, key, value) for key, (offset, value) in latest(records(log)).items())
        cleaner = LogCleaner(logs, CleanerConfig(backoff_ms=10, worker_process=True, io_max_bytes_per_second=20_000,
                                                 throttle_check_interval_ms=1),
                             clock=lambda: NOW)
        cleaner.start()
        try:
            killed = _kill_when_writing(log.dir, lambda: (cleaner.worker_pids() or [None])[0])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and read_cleaner_checkpoint(log.dir) != log.segments[-1].base_offset:
                time.sleep(0.02)
            assert read_cleaner_checkpoint(log.dir) == log.segments[-1].base_offset  # the retry finished
            pids = cleaner.worker_pids()
        finally:
            cleaner.stop()
        assert pids and killed not in pids  # cleaned by a new worker
        assert not cleaner._uncleanable  # a dead worker is not the log's fault
        assert records(log) == expected
        assert _stray_files(log.dir) == []
    with LogManager(tmp_path, config) as logs:  # a restart reads the cleaned log
        assert records(logs.get("t", 0)) == expected


def test_the_worker_map_takes_the_thread_share_of_the_dedupe_buffer(tmp_path, worker):
    """log.cleaner.dedupe.buffer.size bounds the worker's map as it bounds the thread's: with
    room for fewer keys than the log has, both clean up to the same offset (the map full), and
    two cleaner threads give each worker half."""
    logs = [PartitionLog(tmp_path / f"{where}-0", COMPACT.with_(segment_bytes=4096)) for where in ("thread", "worker")]
    try:
        for log in logs:
            for r in range(3):
                for base in range(0, 400, 50):  # 400 keys, each written three times
                    put(log, [(f"k{k}", f"v{r}") for k in range(base, base + 50)], ts=1_000 + r)
            log.roll()
        # Room for 450 keys in all (500 slots, load factor 0.9), 225 for each of two threads.
        config = CleanerConfig(threads=2, dedupe_buffer_size=24 * 500)
        results = [Cleaner(config, worker=w).clean(log, now_ms=NOW) for log, w in zip(logs, (None, worker), strict=True)]
        assert results[0] is not None and results[1] is not None
        assert results[0].end_offset == results[1].end_offset
        # The map held half the budget's keys: the pass stopped short of the 400 keys' end.
        assert results[1].end_offset < logs[1].segments[-1].base_offset
        assert records(logs[0]) == records(logs[1])
    finally:
        for log in logs:
            log.close()


def test_a_worker_killed_before_it_read_the_job_fails_that_clean_only(tmp_path, worker):
    """Killed with the job still unread in its socket, the broker's read gets ECONNRESET rather
    than the end of the stream: still a dead worker (the clean retried), not a broken log."""
    log = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        _fill(log, rounds=10)
        assert Cleaner(CleanerConfig(), worker=worker).clean(log, now_ms=NOW) is not None  # started it
        _fill(log, rounds=10)
        before = records(log)
        pid = worker.pid
        os.kill(pid, signal.SIGSTOP)  # it cannot read the next job
        killed = []

        def check():  # first called once the job is sent and nothing came back for a while
            if not killed:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        job, fds = _job(log)
        try:
            with pytest.raises(CleanAborted, match="exited"):
                worker.run(job, fds, WorkerSettings(1 << 20, True, 1 << 16, 1.7e308), swap=lambda *a: None,
                           check=check)
        finally:
            for fd in fds:
                os.close(fd)
        assert killed and worker.failures == 1 and worker.pid is None
        assert records(log) == before and _stray_files(log.dir) == []
        assert Cleaner(CleanerConfig(), worker=worker).clean(log, now_ms=NOW) is not None  # a new worker
        assert worker.pid not in (None, pid)
    finally:
        log.close()


def test_the_setting_is_refused_where_descriptors_cannot_be_passed(monkeypatch):
    """On a platform without socket.send_fds (Windows) the broker refuses the setting at start
    (and AlterConfigs, which builds the same BrokerConfig) rather than failing every clean."""
    from kwire.broker.config import WORKER_PROCESS_SUPPORTED, ConfigError, load_config

    # The default follows the platform (decided when kwire.broker.config is imported): on here.
    assert WORKER_PROCESS_SUPPORTED and load_config(None).log_cleaner_worker_process
    monkeypatch.delattr(socket, "send_fds")
    with pytest.raises(ConfigError, match="log_cleaner_worker_process needs Unix sockets"):
        load_config(None, log_cleaner_worker_process=True)
    assert not load_config(None, log_cleaner_worker_process=False).log_cleaner_worker_process


def test_a_worker_is_waited_on_past_fd_setsize(tmp_path, worker):
    """A broker with many segments open holds descriptors past 1024 (FD_SETSIZE), where
    select() refuses a socket: the wait on the worker must not depend on the socket's number."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1400:
        pytest.fail(f"the test needs RLIMIT_NOFILE >= 1400 (it is {soft})")
    log = PartitionLog(tmp_path / "t-0", COMPACT)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # the worker's socket comes after
    try:
        _fill(log, rounds=12)
        expected = sorted((offset, key, value) for key, (offset, value) in latest(records(log)).items())
        result = Cleaner(CleanerConfig(), worker=worker).clean(log, now_ms=NOW)
        assert result is not None and worker.failures == 0
        assert worker._sock is not None and worker._sock.fileno() > 1024
        assert records(log) == expected
    finally:
        for fd in held:
            os.close(fd)
        log.close()


def test_a_worker_whose_broker_closed_on_unread_answers_exits_quietly():
    """The broker stopping mid-clean closes its end with the worker's answers unread: the worker's
    next read is a connection reset, which ends it with status 0 and no traceback (a CLI run of
    `kwire broker` stopped during a clean printed one)."""
    script = (
        "import os, socket, sys\n"
        "from kwire.broker.storage import cleaner_worker\n"
        "worker, broker = socket.socketpair()\n"
        "worker.sendall(b'an answer the broker never reads')\n"
        "broker.close()\n"
        "sys.exit(cleaner_worker.main(['worker', str(worker.detach()), str(os.getppid())]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
