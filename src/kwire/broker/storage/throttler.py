"""A byte-rate limit for the log cleaner's I/O (Kafka's Throttler, log.cleaner.io.max.bytes.per.second).

Bytes read and written are counted; every ``check_interval_ms`` the rate since the last check
is measured and, when above the limit, the caller sleeps long enough to bring it back to it.
Clock and sleep are injectable so tests can drive it without waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Throttler"]


class Throttler:
    def __init__(self, bytes_per_second: float, *, check_interval_ms: int = 300,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.bytes_per_second = bytes_per_second
        self.check_interval = check_interval_ms / 1000
        self._clock = clock
        self._sleep = sleep
        self._period_start = clock()
        self._observed = 0
        self.slept = 0.0  # total seconds slept, for the cleaner's statistics
        # One throttler for every cleaner thread (as Kafka's): the limit is on their sum.
        self._lock = threading.Lock()

    @property
    def unlimited(self) -> bool:
        return self.bytes_per_second >= 1.7e308  # Kafka's default, Double.MAX_VALUE

    def maybe_throttle(self, observed_bytes: int) -> None:
        if self.unlimited:
            return
        with self._lock:
            self._throttle(observed_bytes)

    def _throttle(self, observed_bytes: int) -> None:
        self._observed += observed_bytes
        now = self._clock()
        elapsed = now - self._period_start
        if elapsed < self.check_interval:
            return
        rate = self._observed / elapsed if elapsed > 0 else float("inf")
        if rate > self.bytes_per_second:
            pause = self._observed / self.bytes_per_second - elapsed
            if pause > 0:
                self._sleep(pause)
                self.slept += pause
        self._period_start = self._clock()
        self._observed = 0
