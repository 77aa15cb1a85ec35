"""A rate over sampled time windows and the throttle time of a rate above its quota, as Kafka measures
client quotas (its metrics' ``Rate`` over a ``SampledStat``, ``QuotaUtils.throttleTime``).

The rate is the sum of the values recorded in the last ``samples`` windows (the current one
included) over the time they span, counted as at least ``samples - 1`` full windows: a client that
has just started is not measured over a few milliseconds.  Windows older than ``samples`` windows
are forgotten.
"""

from __future__ import annotations

__all__ = ["SampledRate", "throttle_time_ms"]


class _Sample:
    __slots__ = ("start_ms", "value")

    def __init__(self, start_ms: float):
        self.start_ms = start_ms
        self.value = 0.0


class SampledRate:
    """Values recorded per window of ``window_ms``, ``samples`` windows kept; ``rate`` in units per second."""

    __slots__ = ("samples", "window_ms", "_windows", "_current", "last_ms")

    def __init__(self, samples: int, window_ms: float):
        if samples < 2 or window_ms <= 0:
            raise ValueError(f"a sampled rate needs at least 2 windows of a positive length (got {samples}, "
                             f"{window_ms} ms)")
        self.samples = samples
        self.window_ms = window_ms
        self._windows: list[_Sample] = []
        self._current = 0
        self.last_ms = 0.0  # when a value was last recorded (for expiring idle rates)

    def record(self, value: float, now_ms: float) -> None:
        self.last_ms = now_ms
        windows = self._windows
        if not windows:
            windows.append(_Sample(now_ms))
        sample = windows[self._current]
        if now_ms - sample.start_ms >= self.window_ms:  # the window is over: the next one starts now
            self._current = (self._current + 1) % self.samples
            if self._current >= len(windows):
                sample = _Sample(now_ms)
                windows.append(sample)
            else:
                sample = windows[self._current]
                sample.start_ms = now_ms
                sample.value = 0.0
        sample.value += value

    def _purge(self, now_ms: float) -> tuple[float, float]:
        """Forget windows older than ``samples`` windows; (the oldest window's start, the total kept)."""
        expire = self.samples * self.window_ms
        oldest, total = now_ms, 0.0
        for sample in self._windows:
            if now_ms - sample.start_ms >= expire:
                sample.start_ms = now_ms
                sample.value = 0.0
            elif sample.start_ms < oldest:
                oldest = sample.start_ms
            total += sample.value
        return oldest, total

    def _window(self, oldest: float, now_ms: float) -> float:
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate is measured over (Kafka's Rate.windowSize), at least 1 ms."""
        return self._window(self._purge(now_ms)[0], now_ms)

    def rate(self, now_ms: float) -> float:
        """Units per second over the kept windows."""
        oldest, total = self._purge(now_ms)
        return total * 1000.0 / self._window(oldest, now_ms)

    def throttle_ms(self, bound: float, now_ms: float) -> int:
        """How long nothing must be recorded for the rate to come back to ``bound``, 0 when it is
        within it (Kafka's QuotaUtils.throttleTime: (observed - bound) / bound * window, rounded).
        One pass over the windows: this runs for every request a quota covers."""
        oldest, total = self._purge(now_ms)
        window = self._window(oldest, now_ms)
        observed = total * 1000.0 / window
        if observed <= bound:
            return 0
        return min(round((observed - bound) / bound * window), 2**31 - 1)


def throttle_time_ms(rate: SampledRate, bound: float, now_ms: float) -> int:
    """``rate.throttle_ms(bound, now_ms)``."""
    return rate.throttle_ms(bound, now_ms)
