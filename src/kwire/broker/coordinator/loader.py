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

One worker thread, one partition at a time, in order except that a partition a client asked for
goes first: the load is bounded and does not compete with the event loop for more than one core.  A partition that fails to load is logged and stays loading
(its requests keep getting the retriable error) rather than being served empty.

Tests give an ``executor`` they run by hand and a ``post`` that runs at once, to hold the load
at any point.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..transactions import TransactionCoordinator
    from .coordinator import GroupCoordinator

__all__ = ["CoordinatorLoader", "Executor"]

logger = logging.getLogger("kwire.broker.coordinator.loader")


class Executor(Protocol):
    """What the loader needs of an executor (``concurrent.futures.ThreadPoolExecutor`` has it)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


class CoordinatorLoader:
    """Loads what ``groups`` and ``transactions`` (built with ``load=False``) still have to load.

    ``post(fn)`` runs ``fn`` on the event loop (``loop.call_soon_threadsafe``): the results are
    installed there, where the handlers run, so the coordinators need no locks.
    """

    def __init__(self, groups: GroupCoordinator, transactions: TransactionCoordinator, *,
                 post: Callable[[Callable[[], None]], None], executor: Executor | None = None):
        self._groups = groups
        self._transactions = transactions
        self._post = post
        self._own_executor = executor is None
        self._executor: Executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="kwire-coordinator-load")
        self._txn_state: dict | None = None
        self._closed = False
        self._pending = 0  # loads not handled yet (on the event loop)
        self._lock = threading.Lock()  # the loads still to submit: taken by the worker and start()
        self._remaining: list[int] = []
        self._txn_to_read = False
        self._started: float | None = None
        self.failed: list[str] = []  # what could not be loaded (logged), for tests
        self.done = threading.Event()  # set once everything is installed (or failed)

    def start(self) -> None:
        """Start loading (on the event loop): the group partitions, then the transaction state."""
        if self._closed:
            return
        self._started = time.monotonic()
        with self._lock:
            self._remaining = self._groups.loading_partitions
            self._txn_to_read = self._transactions.loading()
            self._pending = len(self._remaining) + self._txn_to_read
        if not self._remaining and self._txn_to_read and not self._transactions.state_on_disk():
            # Nothing stored (a new data dir): no worker thread, the broker is ready at once.
            self._txn_to_read = False
            self._pending -= 1
            self._transactions.install_state({})
        if not self._pending:
            self._finished()
        self._submit_next()

    def _submit_next(self) -> None:
        """One load at a time, so the next can be chosen when it starts: the partition of a
        group a client asked for while loading first (a restarted test suite's group is served
        after one partition's load, not after all of them), else the lowest."""
        with self._lock:
            if self._closed:
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
        try:
            future = self._executor.submit(fn, *args)
        except RuntimeError:  # shut down meanwhile (the broker closes)
            return
        future.add_done_callback(lambda f: self._hand_over(then, f))

    def _hand_over(self, then: Callable[[concurrent.futures.Future], None], future: concurrent.futures.Future) -> None:
        """(In the worker) the result to the event loop; nothing once the broker closes."""
        if future.cancelled() or self._closed:
            return
        try:
            self._post(lambda: then(future))
        except RuntimeError:  # the loop is closed: the broker stopped meanwhile
            pass

    def _group_partition_read(self, future: concurrent.futures.Future) -> None:
        exc = future.exception()
        if exc is not None:
            self._failed("a __consumer_offsets partition", exc)
        elif not self._closed:
            self._groups.load_partition(*future.result())
        self._handled()

    def _txn_state_read(self, future: concurrent.futures.Future) -> None:
        exc = future.exception()
        if exc is not None:
            self._failed("__transaction_state", exc)
        else:
            self._txn_state = future.result()
        self._handled()

    def _handled(self) -> None:
        """(On the event loop) one load handled: the transactions once the groups are all in.
        The next load is submitted from here, so the worker waits while the loop takes its
        turn (the requests that came meanwhile) between two partitions."""
        self._pending -= 1
        self._submit_next()
        if (self._txn_state is not None and not self._closed and not self._groups.loading_partitions
                and self._transactions.loading()):
            # (A group partition that failed keeps the transactions loading too.)
            state, self._txn_state = self._txn_state, None
            try:
                self._transactions.install_state(state)
            except Exception as exc:  # noqa: BLE001 - logged; the coordinator stays loading
                self._failed("__transaction_state", exc)
        if self._pending == 0:
            self._finished()

    def _finished(self) -> None:
        if self._own_executor:
            self._executor.shutdown(wait=False)
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
        self._executor.shutdown(wait=True, cancel_futures=True)
