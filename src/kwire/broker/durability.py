"""Group commit: producers waiting for their data to be on disk share one fsync.

With ``fsync = "always"`` an acks=all Produce is answered only after its partition's log was
fsynced.  Waiters that arrive while a flush runs are served by the next one, which covers all
of them, so N concurrent producers cost about one fsync per round instead of N.
The fsync runs in a worker thread so the event loop keeps serving other connections.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

logger = logging.getLogger("kwire.broker.durability")

__all__ = ["GroupCommit"]


class GroupCommit:
    def __init__(self) -> None:
        self._pending: dict[int, object] = {}  # id(log) -> log (anything with .flush())
        self._waiters: list[asyncio.Future] = []
        self._running = False
        self.flushes = 0  # rounds done, for tests and stats

    def request(self, logs) -> asyncio.Future | concurrent.futures.Future:
        """Ask for ``logs`` to be fsynced soon; the future completes when they are.

        Without a running event loop (handlers called directly) the flush happens at once.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            _flush_all(logs)
            self.flushes += 1
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result(None)
            return done  # type: ignore[return-value]
        fut = loop.create_future()
        for log in logs:
            self._pending[id(log)] = log
        self._waiters.append(fut)
        if not self._running:
            self._running = True
            loop.create_task(self._run())
        return fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                logs, waiters = list(self._pending.values()), self._waiters
                self._pending, self._waiters = {}, []
                try:
                    await loop.run_in_executor(None, _flush_all, logs)
                except Exception as exc:  # noqa: BLE001 - handed to every waiter
                    logger.error("fsync failed: %s", exc)
                    for w in waiters:
                        if not w.done():
                            w.set_exception(exc)
                    continue
                self.flushes += 1
                for w in waiters:
                    if not w.done():
                        w.set_result(None)
        finally:
            self._running = False


def _flush_all(logs) -> None:
    for log in logs:
        log.flush()
