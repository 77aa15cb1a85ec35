"""Named one-shot timers for the coordinators (session, join, sync and pending-member timeouts).

They run on the running asyncio loop, or on an injected ``ManualClock`` whose time moves only
when told: the coordinators' timeout and rebalance tests advance that clock instead of sleeping.
The coordinator is built before the broker's loop runs (in a worker thread, even), so the loop
is taken lazily: the first ``schedule`` inside a running loop binds it.  Scheduling a key again
replaces its timer, which is what "a heartbeat resets the session timer" needs.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["ManualClock", "Timers"]

logger = logging.getLogger("kwire.broker.coordinator")


class ManualClock:
    """Wall-clock milliseconds that move only when told (``advance``), and timers that fire as
    the clock passes their due time, in due order, each seeing the clock at its due time.

    A coordinator given one as its ``clock`` stamps commits with it and runs its timeouts on it.
    """

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms
        self._due: list[tuple[float, int, _ManualHandle]] = []
        self._order = itertools.count()

    def __call__(self) -> int:
        return int(self.now_ms)

    def call_later(self, delay_s: float, fn: Callable[..., Any], *args: Any) -> _ManualHandle:
        """As ``loop.call_later``, on this clock's time."""
        handle = _ManualHandle(fn, args)
        heapq.heappush(self._due, (self.now_ms + max(delay_s, 0) * 1000, next(self._order), handle))
        return handle

    def advance(self, ms: float) -> None:
        """Move the clock ``ms`` forward, running every timer that falls due on the way
        (including those the timers themselves set within the span)."""
        target = self.now_ms + ms
        while self._due and self._due[0][0] <= target:
            due, _, handle = heapq.heappop(self._due)
            if handle.cancelled:
                continue
            self.now_ms = max(self.now_ms, due)
            handle.run()
        self.now_ms = target

    def advance_to_next(self) -> None:
        """Move the clock to the next timer due and run it (and any due at the same time)."""
        while self._due and self._due[0][2].cancelled:
            heapq.heappop(self._due)
        if self._due:
            self.advance(max(self._due[0][0] - self.now_ms, 0))

    def pending(self) -> int:
        """Timers not yet fired or cancelled."""
        return sum(not h.cancelled for _, _, h in self._due)


class _ManualHandle:
    __slots__ = ("cancelled", "_args", "_fn")

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self._fn, self._args, self.cancelled = fn, args, False

    def cancel(self) -> None:
        self.cancelled = True

    def run(self) -> None:
        self.cancelled = True  # one shot
        self._fn(*self._args)


class Timers:
    def __init__(self, on_bind: Callable[[asyncio.AbstractEventLoop], None] | None = None, *,
                 clock: ManualClock | None = None):
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._handles: dict[Hashable, Any] = {}  # asyncio.TimerHandle or _ManualHandle
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
        if loop is None and self._clock is None:
            raise RuntimeError("coordinator timers need a running event loop")
        old = self._handles.pop(key, None)
        if old is not None:
            old.cancel()
        handle: Any = None

        def fire() -> None:
            if self._handles.get(key) is handle:
                del self._handles[key]
            try:
                fn(*args)
            except Exception:
                logger.exception("coordinator timer %r failed", key)

        scheduler: Any = self._clock if self._clock is not None else loop
        handle = scheduler.call_later(max(delay_ms, 0) / 1000, fire)
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
