"""Named one-shot timers on the running asyncio loop (session, join, sync and pending-member timeouts).

The coordinator is built before the broker's loop runs (in a worker thread, even), so the loop
is taken lazily: the first ``schedule`` inside a running loop binds it.  Scheduling a key again
replaces its timer, which is what "a heartbeat resets the session timer" needs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["Timers"]

logger = logging.getLogger("kwire.broker.coordinator")


class Timers:
    def __init__(self, on_bind: Callable[[asyncio.AbstractEventLoop], None] | None = None):
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}
        self._on_bind = on_bind

    def bind(self) -> asyncio.AbstractEventLoop | None:
        """The running loop, bound on first sight; None outside a running loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if loop is not self._loop:
            if self._loop is not None:
                # A new loop (tests run one per asyncio.run): the old loop's timers can't fire any more.
                self.cancel_all()
            self._loop = loop
            self._loop_thread = threading.get_ident()
            if self._on_bind is not None:
                self._on_bind(loop)
        return loop

    def schedule(self, key: Hashable, delay_ms: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` after ``delay_ms`` unless cancelled or rescheduled first."""
        loop = self.bind()
        if loop is None:
            raise RuntimeError("coordinator timers need a running event loop")
        old = self._handles.pop(key, None)
        if old is not None:
            old.cancel()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if self._handles.get(key) is handle:
                del self._handles[key]
            try:
                fn(*args)
            except Exception:
                logger.exception("coordinator timer %r failed", key)

        handle = loop.call_later(max(delay_ms, 0) / 1000, fire)
        self._handles[key] = handle

    def cancel(self, key: Hashable) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_matching(self, predicate: Callable[[Hashable], bool]) -> None:
        for key in [k for k in self._handles if predicate(k)]:
            self.cancel(key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        """Cancel every timer (callable from any thread)."""
        handles, self._handles = list(self._handles.values()), {}
        self.run_in_loop(_cancel_each, handles)

    def run_in_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop's thread: now if that is this thread (or no loop runs), else soon.

        The broker closes its state from a worker thread while the loop still runs.
        """
        loop = self._loop
        if loop is not None and loop.is_running() and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)


def _cancel_each(handles: list[asyncio.TimerHandle]) -> None:
    for handle in handles:
        handle.cancel()
