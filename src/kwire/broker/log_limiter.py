"""Per-connection problems written to the log without flooding it.

One bad connection is worth a warning with its peer's address; ten thousand of them a second (a
scan, a misconfigured client fleet, an attack) would bury everything else in the log and cost
the broker time it should spend serving.  ``ProblemLog`` writes the first ``burst`` problems of
each kind in an interval in full, counts the rest, and writes one line for them when the
interval ends::

    closing connection 7 from 10.0.0.3:5120: bad frame: frame of 2097162 bytes is over ...
    ... (first 10 in full)
    ... and 1975 more like it (bad frame) in the last 10 s

Kafka's broker has no such limit on its per-connection messages (it logs most of them at INFO or
DEBUG, see ``kafka.network.Processor``); the broker here logs them as warnings, so it bounds them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ProblemLog"]

DEFAULT_BURST = 10  # problems of one kind written in full per interval
DEFAULT_INTERVAL_S = 10.0


@dataclass(slots=True)
class _Window:
    """One kind of problem in the interval that began at ``start``."""

    start: float
    written: int = 0
    suppressed: int = 0
    level: int = logging.NOTSET  # the highest level among the suppressed


class ProblemLog:
    """Writes problems to ``logger``: per kind, the first ``burst`` of each ``interval_s`` in full,
    then one summary line with the count of the rest.

    The interval of a kind starts with its first problem.  Its summary is written when the
    interval ends: by a timer on the running event loop (when there is one), else with the next
    problem of that kind or the next ``flush()``.  ``close()`` writes the summaries still due
    (at shutdown).  ``clock`` is for tests.
    """

    def __init__(self, logger: logging.Logger, *, burst: int = DEFAULT_BURST,
                 interval_s: float = DEFAULT_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.logger = logger
        self.burst = burst
        self.interval_s = interval_s
        self.clock = clock
        self._windows: dict[str, _Window] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0  # on the clock

    def log(self, level: int, kind: str, msg: str, *args, exc_info: bool = False) -> None:
        """Log ``msg % args`` at ``level`` as a problem of ``kind``, unless ``burst`` of that kind
        were written in this interval already (then it is counted for the summary)."""
        if not self.logger.isEnabledFor(level):
            return
        now = self.clock()
        window = self._windows.get(kind)
        if window is not None and now - window.start >= self.interval_s:
            self._summarise(kind, window, now)
            window = None
        if window is None:
            window = self._windows[kind] = _Window(now)
        if window.written < self.burst:
            window.written += 1
            self.logger.log(level, msg, *args, exc_info=exc_info)
            return
        window.suppressed += 1
        window.level = max(window.level, level)
        self._schedule(window.start + self.interval_s - now)

    def flush(self) -> None:
        """Write the summaries of the intervals that have ended; forget those with nothing to say."""
        now = self.clock()
        for kind, window in list(self._windows.items()):
            if now - window.start >= self.interval_s:
                self._summarise(kind, window, now)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = [w.start + self.interval_s - now for w in self._windows.values() if w.suppressed]
        if pending:
            self._schedule(min(pending))

    def close(self) -> None:
        """Write every summary still due, whether its interval has ended or not."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self.clock()
        for kind, window in list(self._windows.items()):
            self._summarise(kind, window, now)

    def _summarise(self, kind: str, window: _Window, now: float) -> None:
        del self._windows[kind]
        if window.suppressed:
            seconds = min(now - window.start, self.interval_s)
            self.logger.log(window.level, "... and %d more like it (%s) in the last %.3g s", window.suppressed, kind,
                            seconds)

    def _schedule(self, delay: float) -> None:
        due = self.clock() + delay
        if self._timer is not None:
            if self._timer_due <= due:
                return
            self._timer.cancel()  # an interval that ends sooner
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._timer = None
            return  # no loop: the next problem or flush() writes the summary
        self._timer = loop.call_later(max(delay, 0.0), self._on_timer)
        self._timer_due = due

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()
