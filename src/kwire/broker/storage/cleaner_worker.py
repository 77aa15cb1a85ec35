"""A worker process for the log cleaner: it builds the dedupe map and writes the ``.cleaned``
segments (``CleanPass``) while the broker process only swaps them in.

Why a process: the cleaner's per-batch Python work (headers, the filter's bookkeeping, the
copy) holds the GIL, and the broker's event loop waits for it: with the cleaner as a thread,
produce p50 latency was 0.57-0.67x of a broker without a cleaner (benchmarks/RESULTS.md,
``bench_cleaner.py --only produce``).  Kafka's cleaner threads share a JVM without such a lock;
a process is the way to get the same here.  The broker's cleaner thread then waits on a socket
without the GIL, and does under the partition lock only what it did before: the swap.  Used
when ``CleanerConfig.worker_process`` is set (the broker setting kwire.log.cleaner.worker.process,
``log_cleaner_worker_process`` in its TOML file; off by default: see there why).

What crosses the process boundary (a Unix socket pair, frames of a length and a pickle):
* to the worker: the ``CleanJob`` (segment numbers and sizes, aborted transactions, producer
  state, configs) and duplicates of the segments' descriptors (SCM_RIGHTS).  The segments are
  immutable (never the active one), so the worker reads them as the thread would;
* back: ``("output", first, count)`` for each finished ``.cleaned`` segment (fsynced, closed by
  the worker), which the broker loads and swaps in while the worker goes on with the next;
  then ``("done", PassResult)`` or ``("error", message)``.

Crash safety is unchanged: the worker only writes ``.cleaned`` files, which the loader removes
after a crash; renames (``.cleaned`` -> ``.swap`` -> final) stay in the broker.  If the broker
stops the clean (log closed, cleaner stopping, a swap refused), it kills the worker and removes
the job's ``.cleaned`` files; the next clean starts a new worker.  A worker that dies (killed,
out of memory) fails only the clean under way, which the cleaner tries again: not the log's
fault.  The worker dies with the broker: on Linux by PR_SET_PDEATHSIG, elsewhere when it sees
its parent change between batches or its socket close.
"""

from __future__ import annotations

import logging
import os
import pickle
import selectors
import signal
import socket
import struct
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from kwire.protocol.errors import KafkaStorageError

from ._files import CLEANED_SUFFIX
from .cleaner_pass import CleanAborted, CleanJob, CleanPass, Output, PassResult, remove_cleaned_files
from .segment import LogSegment
from .throttler import Throttler

__all__ = ["CleanerWorker", "WorkerSettings", "main"]

logger = logging.getLogger("kwire.broker.storage.cleaner")

_FRAME = struct.Struct(">QI")  # payload length, descriptors that follow
_MAX_FDS = 200  # per message (Linux takes at most 253 descriptors in one SCM_RIGHTS)
POLL_S = 0.05   # how often the broker side checks for a stop while the worker works
# Workers that could not start or ended without an answer, in a row, before the cleaner stops
# using one and cleans in its thread (a Python that cannot run ``-m``, a process limit).
MAX_FAILURES = 3


def _send(sock: socket.socket, message: object, fds: Sequence[int] = ()) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_FRAME.pack(len(payload), len(fds)))
    for i in range(0, len(fds), _MAX_FDS):
        socket.send_fds(sock, [b"F"], list(fds[i:i + _MAX_FDS]))
    sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        part = sock.recv(min(n - got, 1 << 20))
        if not part:
            return None
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _recv(sock: socket.socket) -> tuple[object, list[int]] | None:
    """A message and its descriptors; None at the end of the stream."""
    head = _recv_exact(sock, _FRAME.size)
    if head is None:
        return None
    length, nfds = _FRAME.unpack(head)
    fds: list[int] = []
    while len(fds) < nfds:
        _, got, _, _ = socket.recv_fds(sock, 1, min(_MAX_FDS, nfds - len(fds)))
        if not got:
            for fd in fds:
                os.close(fd)
            return None
        fds += got
    payload = _recv_exact(sock, length)
    if payload is None:
        for fd in fds:
            os.close(fd)
        return None
    return pickle.loads(payload), fds


class WorkerSettings(NamedTuple):
    """The cleaner's budget for one job (CleanPass's arguments)."""

    map_bytes: int
    compiled: bool
    io_buffer_size: int
    io_max_bytes_per_second: float  # this worker's share of log.cleaner.io.max.bytes.per.second
    throttle_check_interval_ms: int = 300  # CleanerConfig.throttle_check_interval_ms


class CleanerWorker:
    """The broker's end of one worker process (one per cleaner thread), started on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self.failures = 0  # in a row

    @property
    def usable(self) -> bool:
        return self.failures < MAX_FAILURES

    def _failed(self, what: str) -> None:
        self.failures += 1
        if self.usable:
            logger.warning("log cleaner worker process: %s; the next clean starts another", what)
        else:
            logger.warning("log cleaner worker process: %s, %d times in a row: cleaning in the cleaner's thread "
                           "from now on", what, self.failures)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        src = str(Path(__file__).resolve().parents[3])  # the directory holding the kwire package
        env = dict(os.environ)
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "kwire.broker.storage.cleaner_worker", str(theirs.fileno()), str(os.getpid())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        logger.info("log cleaner worker process %d started", self._proc.pid)

    def run(self, job: CleanJob, fds: list[int], settings: WorkerSettings, *,
            swap: Callable[[int, int, LogSegment], None], check: Callable[[], None]) -> PassResult:
        """Run ``job`` in the worker; ``swap(first, count, cleaned)`` each output as it comes,
        ``check()`` between (it raises ``CleanAborted`` to stop).  A stopped or failed clean
        leaves no ``.cleaned`` file of the job behind."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            try:
                self._start()
            except OSError as exc:
                self._failed(f"could not start ({exc})")
                raise CleanAborted(f"{job.name}: the cleaner worker process could not start") from exc
        sock = self._sock
        assert sock is not None
        busy = False
        # A selector, not select.select: a broker with many segments open holds descriptors past
        # FD_SETSIZE (1024), where select() refuses the socket ("filedescriptor out of range").
        waiting = selectors.DefaultSelector()
        waiting.register(sock, selectors.EVENT_READ)
        try:
            try:
                _send(sock, (job, settings), fds)
            except OSError as exc:  # it ended since the last clean
                self.close()
                self._failed(f"gone before the clean of {job.name} ({exc})")
                raise CleanAborted(f"{job.name}: the cleaner worker process was gone") from exc
            busy = True
            while True:
                if not waiting.select(POLL_S):
                    check()
                    continue
                try:
                    got = _recv(sock)
                except OSError:  # ECONNRESET: it died with our job unread in its socket
                    got = None
                if got is None:  # not the log's fault: the clean is tried again, not given up
                    busy = False
                    self._failed(f"exited during the clean of {job.name} (code {self._proc.wait()})")
                    remove_cleaned_files(job.directory, [s.base_offset for s in job.segments])
                    raise CleanAborted(f"{job.name}: the cleaner worker process exited")
                self.failures = 0
                message, _ = got
                kind = message[0]
                if kind == "output":
                    _, first, count = message
                    swap(first, count, self._load_output(job, first))
                    check()
                elif kind == "done":
                    busy = False
                    return message[1]
                else:
                    busy = False
                    raise KafkaStorageError(message[1])
        except BaseException:
            if busy:
                self.close()  # stop it mid-pass: it may be writing
                remove_cleaned_files(job.directory, [s.base_offset for s in job.segments])
            raise
        finally:
            waiting.close()

    @staticmethod
    def _load_output(job: CleanJob, first: int) -> LogSegment:
        cleaned = LogSegment(Path(job.directory), job.segments[first].base_offset,
                             index_interval_bytes=job.index_interval_bytes, file_suffix=CLEANED_SUFFIX)
        problem = cleaned.load()
        if problem:
            cleaned.delete()
            raise KafkaStorageError(f"{job.name}: the cleaner worker's output is unreadable: {problem}")
        return cleaned

    def close(self) -> None:
        """Stop the process (killed: it only ever holds ``.cleaned`` files)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None


# -- the worker's side -------------------------------------------------------------------------
def _die_with_parent() -> None:
    """Linux: get SIGKILL when the broker's thread that started us ends."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    try:
        return _serve(argv)
    except ConnectionError:
        # The broker closed its end (it stopped, or gave up on this clean): nothing to answer,
        # and not an error worth a traceback in the broker's log.
        return 0


def _serve(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[1]))
    parent = int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the broker decides when we stop
    _die_with_parent()
    if os.getppid() != parent:
        return 1  # the broker went before PR_SET_PDEATHSIG was set

    def check() -> None:
        if os.getppid() != parent:
            os._exit(1)

    def emit(out: Output) -> None:
        out.segment.close()  # the broker renames the files
        _send(sock, ("output", out.first, out.count))

    while True:
        got = _recv(sock)
        if got is None:
            return 0
        (job, settings), fds = got
        try:
            result = CleanPass(job, fds, map_bytes=settings.map_bytes, compiled=settings.compiled,
                               io_buffer_size=settings.io_buffer_size,
                               throttler=Throttler(settings.io_max_bytes_per_second,
                                                   check_interval_ms=settings.throttle_check_interval_ms),
                               check=check, emit=emit).run()
            reply: tuple = ("done", result)
        except KafkaStorageError as exc:
            reply = ("error", str(exc))
        except Exception:  # noqa: BLE001 - the broker logs it and marks the log uncleanable
            reply = ("error", f"{job.name}: clean failed in the cleaner worker:\n{traceback.format_exc()}")
        finally:
            for fd in fds:
                os.close(fd)
        _send(sock, reply)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
