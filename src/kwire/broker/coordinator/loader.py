"""Loading the coordinators' internal partitions after the broker listens, as Kafka does.

Kafka's coordinators load their partitions of ``__consumer_offsets`` and ``__transaction_state``
after the broker has started (a load is scheduled per partition when the broker becomes its
leader); while a partition loads, requests for the groups or transactional ids it holds are
answered COORDINATOR_LOAD_IN_PROGRESS (FindCoordinator still answers), which clients retry.
kwire does the same, so a restart does not wait for up to 100 partitions to be opened and
replayed before the broker accepts connections:

* each ``__consumer_offsets`` partition with a log is replayed in a worker (opening its log, which
  the log manager left unopened after a clean shutdown) and installed into the group
  coordinator on the event loop (``GroupCoordinator.load_partition``): from then on its groups
  are served;
* ``__transaction_state`` is replayed in the worker too, and installed once every group
  partition is (``TransactionCoordinator.install_state``): completing a transaction a crash
  left half done ends the offsets it staged in its groups, so they must be there first.

One worker thread (started when there is something to load), one partition at a time, in
order.  The first request for a group of a partition still to load (``GroupCoordinator.loading``,
the check every handler makes before it reads a group, tells ``wanted``) does not wait for the
worker: if the partition is small (up to ``inline_bytes`` of log, ``INLINE_BYTES`` by default,
and as much in all until the loop's next turn: a test suite's groups take a few KiB per
partition) and not being read in the worker already, it is replayed and installed right there, on the event loop, through the same ``read_partition`` and
``load_partition`` as the worker's, so that request is served at once instead of answered
COORDINATOR_LOAD_IN_PROGRESS and retried.  That is kwire's own shortcut: Kafka refuses until the
partition's scheduled load is done.  A larger partition keeps Kafka's behaviour: the request is
refused and the partition is the worker's next.  The bound keeps the loop's pause short (a few
ms of CPU for a partition at the threshold: see ``INLINE_BYTES``).  The partitions nobody asks
for stay in the worker rather than on the loop: measured on the 50-group restart, loading them
all on the loop's turns delayed the first requests more than the worker's competition for the
GIL did (benchmarks/RESULTS.md, 2026-11-27 second session, H21).

``__transaction_state`` gets the same treatment (``TransactionCoordinator.loading`` tells
``transactions_wanted``): its install needs every group partition first, so when what is left
(the group partitions not loaded and the transaction state) is small in all and the worker is
idle, the whole rest is loaded and installed on the loop at once; when the worker is busy (the
usual case while loading: the request is refused), on the loop's turn its read ends; when the
rest is larger, the requests wait for the worker, refused meanwhile, as Kafka's.

The worker starts late: its reads are held until the loop has answered its first requests
(``QUIET_MS``, ``HOLD_MS``; kwire's own).  Kafka schedules its loads at once, on threads that run
beside the request handlers on other cores; here one interpreter runs both, and a worker reading
the partitions nobody asked for takes the GIL from the loop in 5 ms slices, so the first answers
after a restart came later than before there were internal topics (benchmarks/RESULTS.md,
2026-11-27 fourth session, H2).  The hold adds no work before those answers: it looks every
``QUIET_MS`` whether requests came, and lets the worker go once a look finds that requests were
answered and none came since the one before (the clients' start is over), at once when a client is
refused COORDINATOR_LOAD_IN_PROGRESS for a partition (it waits for the worker: holding would only
keep it waiting; a refused ListGroups, which names none, at the next look), when ``release()`` is
called (``EmbeddedBroker.wait_loaded``), and at the latest about ``HOLD_MS`` after start.  Requests for a small partition are served inside the request meanwhile,
as before; those of larger ones are refused, as Kafka's, and end the hold.

A partition that fails to load is logged and stays loading (its requests keep getting the
retriable error) rather than being served empty.

Tests give an ``executor`` and a ``schedule`` they run by hand, a ``post`` that runs at once, and
a ``call_later`` whose timers they fire (or none: no hold), to hold the load at any point
(``schedule`` runs what follows a load on the loop: the transaction state's install and the end,
on a turn of their own rather than inside the request).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kwire.protocol.coordinator_records import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from ..transactions import TransactionCoordinator
    from .coordinator import GroupCoordinator

__all__ = ["HOLD_MS", "INLINE_BYTES", "PARTITION_COST_BYTES", "QUIET_MS", "CoordinatorLoader", "Executor"]

logger = logging.getLogger("kwire.broker.coordinator.loader")

# The largest partition (bytes of log segments) a request asks for that is replayed on the event
# loop, inside that request; larger ones are refused while the worker loads them (Kafka's way).
# Measured (benchmarks/bench_coordinator_inline_load.py, 2026-11-27 third session, a loaded VM):
# 32 KiB, about 300 commits of one batch each, cost the loop ~6 ms of CPU (~11 ms for the first
# load in the process, which builds the record codecs); 256 KiB cost ~30 ms.  A test suite's
# groups take a few KiB per partition.
INLINE_BYTES = 32 * 1024
# Opening a partition (its segment, indexes and producer snapshot) before its replay costs the
# loop about as much as 4 KiB of commits: measured (2026-11-27 fourth session, H2, a loaded VM),
# the first transactional request after a 50-group restart loaded the 45 partitions left, a few
# hundred bytes each, inside the request: 44-66 ms of CPU.  Each partition counts this much
# besides its bytes, so one small partition still loads inside its request but a rest of many
# waits for the worker (the request refused, as Kafka's).
PARTITION_COST_BYTES = 4 * 1024

# The worker's hold after start (see the module's doc): every QUIET_MS the loader looks whether
# requests came; it lets the worker go once requests were answered and none came during the last
# QUIET_MS, or at the look HOLD_MS after start (counted in looks: later only if the loop runs
# its timers late) when requests never pause or none come (a broker nobody talks to).  A client starting
# (ApiVersions, Metadata, FindCoordinator, OffsetFetch or JoinGroup) sends its requests less than
# a few ms apart; a consumer's steady requests (heartbeats, fetches) leave gaps longer than 20 ms.
# HOLD_MS = 0: no hold (the worker starts at once, as before the fourth session of 2026-11-27;
# bench_broker_start.py --base-set compares the two).
QUIET_MS = 20
HOLD_MS = 250


class Executor(Protocol):
    """What the loader needs of an executor (``concurrent.futures.ThreadPoolExecutor`` has it)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


def _log_bytes(directory: Path) -> int:
    """The bytes of a partition's segments (one directory listing; a missing one: 0)."""
    try:
        with os.scandir(directory) as entries:
            return sum(e.stat().st_size for e in entries if e.name.endswith(".log"))
    except FileNotFoundError:
        return 0


def _load_cost(directory: Path) -> int:
    """What loading a partition costs the loop, counted in bytes of log against the inline
    budget: its segments' bytes and ``PARTITION_COST_BYTES`` for opening it (a missing one: 0)."""
    if not directory.is_dir():
        return 0
    return _log_bytes(directory) + PARTITION_COST_BYTES


def _topic_cost(data_dir: Path, topic: str) -> int:
    """``_load_cost`` of every partition of ``topic`` in ``data_dir``."""
    prefix = f"{topic}-"
    try:
        with os.scandir(data_dir) as entries:
            dirs = [e.path for e in entries if e.name.startswith(prefix)]
    except FileNotFoundError:
        return 0
    return sum(_load_cost(Path(d)) for d in dirs)


class CoordinatorLoader:
    """Loads what ``groups`` and ``transactions`` (built with ``load=False``) still have to load.

    ``post(fn)`` runs ``fn`` on the event loop from another thread (``loop.call_soon_threadsafe``):
    the worker's results are installed there, where the handlers run, so the coordinators need
    no locks.  ``schedule(fn)`` runs ``fn`` on the loop's next turn (``loop.call_soon``; default:
    ``post``).  ``data_dir`` holds the partitions' directories, sized to choose whether a
    partition asked for is loaded at once on the loop (None: never); ``inline_bytes`` the most
    loaded there (default ``INLINE_BYTES``).  ``call_later(seconds, fn)`` (``loop.call_later``: it
    returns a handle with ``cancel()``) holds the worker's reads until the loop has answered its first requests, ``requests_seen()``
    the count of requests the broker has read so far (None: no hold, the worker starts at once).
    """

    def __init__(self, groups: GroupCoordinator, transactions: TransactionCoordinator, *,
                 post: Callable[[Callable[[], None]], None], executor: Executor | None = None,
                 schedule: Callable[[Callable[[], None]], Any] | None = None, data_dir: Path | None = None,
                 inline_bytes: int | None = None,
                 call_later: Callable[[float, Callable[[], None]], Any] | None = None,
                 requests_seen: Callable[[], int] | None = None):
        self._groups = groups
        self._transactions = transactions
        self._post = post
        self._schedule = schedule or post
        self._executor: Executor | None = executor  # None: a worker thread of our own, once needed
        self._own_executor = executor is None
        self._data_dir = None if data_dir is None else Path(data_dir)
        self._inline_bytes = INLINE_BYTES if inline_bytes is None else inline_bytes
        self._txn_state: dict | None = None
        self._closed = False
        self._pending = 0  # loads not handled yet (on the event loop)
        self._lock = threading.Lock()  # _closed and the executor: close() may come from another thread
        # Held while a load runs on the loop: close() (the broker's stop runs it in another
        # thread while the loop goes on) waits for it before the logs it reads close.
        self._inline = threading.RLock()
        self._remaining: list[int] = []  # not started, in order
        self._reading = False  # a load is in the worker
        self._txn_to_read = False
        self._txn_wanted = False  # a transaction request was refused: the rest on the loop if small
        self._turn_bytes = 0  # loaded on the loop since its last turn (_take_turn_bytes)
        self._turn_scheduled = False
        self._started: float | None = None
        self._call_later = call_later
        self._requests_seen = requests_seen
        self.holding = False  # the worker's reads wait for the loop's first requests (_look)
        self._hold_timer: Any = None
        self._hold_looks = 0
        self._hold_seen = 0  # requests_seen() at the previous look
        self._refusals = 0  # the group coordinator's refusals at start
        self.inline_loads = 0  # loads done on the loop (partitions asked for), for tests and stats
        self.failed: list[str] = []  # what could not be loaded (logged), for tests
        self.done = threading.Event()  # set once everything is installed (or failed)

    def start(self) -> None:
        """Start loading (on the event loop): the group partitions, then the transaction state."""
        if self._closed:
            return
        self._started = time.monotonic()
        self._remaining = self._groups.loading_partitions
        self._txn_to_read = not self._transactions.loaded
        self._pending = len(self._remaining) + self._txn_to_read
        if not self._remaining and self._txn_to_read and not self._transactions.state_on_disk():
            # Nothing stored (a new data dir): no worker thread, the broker is ready at once.
            self._txn_to_read = False
            self._pending -= 1
            self._transactions.install_state({})
        if not self._pending:
            self._finished()
            return
        self._groups.on_wanted = self.wanted
        self._transactions.on_wanted = self.transactions_wanted
        if self._call_later is not None and self._requests_seen is not None and HOLD_MS > 0:
            # No worker thread yet, no read: the loop answers its first requests alone.
            self.holding = True
            self._hold_seen = self._requests_seen()
            self._refusals = self._groups.load_refusals
            self._hold_timer = self._call_later(QUIET_MS / 1e3, self._look)
        for partition in self._groups.wanted_partitions():  # (asked for before the loader started)
            self.wanted(partition)
        self._next()

    def _look(self) -> None:
        """(On the event loop, every ``QUIET_MS`` while holding) the worker let go once the loop
        has answered requests and none came since the previous look, or a client was refused
        (ListGroups, which names no partition, shows only in the count), or after ``HOLD_MS``."""
        self._hold_timer = None
        if self._closed or not self.holding:
            return
        self._hold_looks += 1
        seen = self._requests_seen()
        quiet = seen == self._hold_seen and seen > 0
        self._hold_seen = seen
        if quiet or self._groups.load_refusals > self._refusals or self._hold_looks * QUIET_MS >= HOLD_MS:
            self.release()
        else:
            self._hold_timer = self._call_later(QUIET_MS / 1e3, self._look)

    def release(self) -> None:
        """(On the event loop) the worker's reads start now, if they were held."""
        if not self.holding:
            return
        self.holding = False
        timer, self._hold_timer = self._hold_timer, None
        if timer is not None:
            timer.cancel()
        self._after_load()

    def wanted(self, partition: int) -> None:
        """(On the event loop, inside the request) ``partition`` was asked for: loaded now if it
        is small and not being read in the worker already, else it is the worker's next (and
        the worker's hold ends: the refused client waits for it)."""
        if self._closed or partition not in self._remaining:
            return
        if self._data_dir is not None and self._take_turn_bytes(
                _load_cost(self._data_dir / f"{OFFSETS_TOPIC}-{partition}")):
            self._remaining.remove(partition)
            self._load_inline(partition)
            return
        self.release()  # (the worker takes it next: _next prefers what is wanted)

    def _take_turn_bytes(self, size: int) -> bool:
        """Whether ``size`` bytes more may be loaded on the loop before its next turn: at most
        ``inline_bytes`` in all, so one request naming many groups (DescribeGroups, OffsetFetch
        v8+) or many requests at once do not add up to a long pause; their other groups are
        refused, as Kafka's, and are the worker's next (as a large partition asked for is)."""
        if self._turn_bytes + size > self._inline_bytes:
            return False
        self._turn_bytes += size
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self._schedule(self._next_turn)
        return True

    def _next_turn(self) -> None:
        """(On the event loop, the turn after loads done inside requests) the budget again, and
        what follows those loads."""
        self._turn_scheduled = False
        self._turn_bytes = 0
        self._after_load()

    def transactions_wanted(self) -> None:
        """(On the event loop, inside the request) a transaction request was refused: the rest
        (group partitions and the transaction state) loaded now if small and the worker idle, on
        the loop's turn the worker's read ends if it is busy, else when the worker gets there."""
        self._txn_wanted = True
        if not self._reading:
            self._after_load()
        if self._txn_to_read:
            self.release()  # too large for the loop: the refused client waits for the worker

    def _load_rest_inline(self) -> None:
        """(On the event loop) the transaction state is wanted and nothing is in the worker: what
        is left, loaded here if small in all (``_after_load`` installs it)."""
        if not self._txn_to_read or self._data_dir is None:
            return
        if len(self._remaining) * PARTITION_COST_BYTES > self._inline_bytes - self._turn_bytes:
            return  # too many partitions: not even their directories are listed
        left = sum(_load_cost(self._data_dir / f"{OFFSETS_TOPIC}-{p}") for p in self._remaining)
        if not self._take_turn_bytes(left + _topic_cost(self._data_dir, TRANSACTION_STATE_TOPIC)):
            return
        self._txn_wanted = False
        while self._remaining:
            self._load_inline(self._remaining.pop(0))
        self._txn_to_read = False
        self._run_here(self._transactions.read_state, (), self._txn_state_read)

    def _load_inline(self, partition: int) -> None:
        """(On the event loop) a small partition read and installed at once."""
        self._run_here(self._groups.store.read_partition, (partition,), self._group_partition_read)

    def _run_here(self, fn: Callable[..., Any], args: tuple,
                  then: Callable[[concurrent.futures.Future], None]) -> None:
        """(On the event loop) a read the worker would do, done here, its result handled as the
        worker's is (one code path: the same read, the same install)."""
        with self._inline:
            if self._closed:
                return
            future: concurrent.futures.Future = concurrent.futures.Future()
            try:
                future.set_result(fn(*args))
            except Exception as exc:  # noqa: BLE001 - handled as a worker's failure
                future.set_exception(exc)
            self.inline_loads += 1
            then(future)

    def _next(self) -> None:
        """(On the event loop) the next load into the worker, one at a time so the next can be
        chosen when it starts: a partition a client asked for (too large for the loop), else the
        lowest; the transaction state last.  Nothing while the worker is held."""
        if self._closed or self._reading or self.holding:
            return
        if self._remaining:
            wanted = self._groups.wanted_partitions()
            partition = min((p for p in self._remaining if p in wanted), default=self._remaining[0])
            self._remaining.remove(partition)
            fn, then, args = self._groups.store.read_partition, self._group_partition_read, (partition,)
        elif self._txn_to_read:
            self._txn_to_read = False
            fn, then, args = self._transactions.read_state, self._txn_state_read, ()
        else:
            return
        with self._lock:
            if self._closed:
                return
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="kwire-coordinator-load")
            executor = self._executor
        try:
            future = executor.submit(fn, *args)
        except RuntimeError:  # shut down meanwhile (the broker closes)
            return
        self._reading = True
        future.add_done_callback(lambda f: self._hand_over(then, f))

    def _hand_over(self, then: Callable[[concurrent.futures.Future], None], future: concurrent.futures.Future) -> None:
        """(In the worker) the result to the event loop; nothing once the broker closes."""
        if future.cancelled() or self._closed:
            return
        try:
            self._post(lambda: self._from_worker(then, future))
        except RuntimeError:  # the loop is closed: the broker stopped meanwhile
            pass

    def _from_worker(self, then: Callable[[concurrent.futures.Future], None], future: concurrent.futures.Future) -> None:
        self._reading = False
        then(future)
        self._after_load()  # (a turn of its own: not inside a request, the budget is not touched)

    def _group_partition_read(self, future: concurrent.futures.Future) -> None:
        exc = future.exception()
        if exc is not None:
            self._failed("a __consumer_offsets partition", exc)
        elif not self._closed:
            self._groups.load_partition(*future.result())
        self._pending -= 1

    def _txn_state_read(self, future: concurrent.futures.Future) -> None:
        exc = future.exception()
        if exc is not None:
            self._failed("__transaction_state", exc)
        else:
            self._txn_state = future.result()
        self._pending -= 1

    def _after_load(self) -> None:
        """(On the event loop) what follows a load: the next one into the worker (submitted
        from here, so the worker waits while the loop takes its turn between two partitions),
        the rest on the loop if a transaction request wants it, the transactions once the
        groups are all in, and the end."""
        if self._closed:
            return
        if self._txn_wanted and not self._reading:
            self._load_rest_inline()
        self._next()
        if (self._txn_state is not None and not self._groups.loading_partitions
                and not self._transactions.loaded):
            # (A group partition that failed keeps the transactions loading too.)
            state, self._txn_state = self._txn_state, None
            try:
                self._transactions.install_state(state)
            except Exception as exc:  # noqa: BLE001 - logged; the coordinator stays loading
                self._failed("__transaction_state", exc)
        if self._pending == 0 and not self.done.is_set():
            self._finished()

    def _finished(self) -> None:
        self.holding = False  # (everything was loaded on the loop meanwhile)
        timer, self._hold_timer = self._hold_timer, None
        if timer is not None:
            timer.cancel()
        self._groups.on_wanted = None
        self._transactions.on_wanted = None
        with self._lock:
            executor, own = self._executor, self._own_executor
        if own and executor is not None:
            executor.shutdown(wait=False)
        if self._started is not None and not self.failed:
            logger.info("coordinators loaded in %.0f ms: %d group(s)", (time.monotonic() - self._started) * 1e3,
                        len(self._groups.store.groups))
        self.done.set()

    def _failed(self, what: str, exc: BaseException) -> None:
        logger.error("could not load %s: %s; requests for it keep getting COORDINATOR_LOAD_IN_PROGRESS", what, exc,
                     exc_info=exc)
        self.failed.append(f"{what}: {exc}")

    def close(self) -> None:
        """Stop loading: the partition being read finishes, the rest is dropped."""
        with self._lock:
            self._closed = True
            executor = self._executor
        with self._inline:  # a load on the loop finishes first
            pass
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
