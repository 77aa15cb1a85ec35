"""Kafka's exponential backoff with jitter (KIP-580), on its own: the blocking producer uses it
without the asyncio retry loop of ``retry``."""

from __future__ import annotations

import random

__all__ = ["Backoff"]

# Its own generator: a library must not draw from (and so shift) the application's seeded
# global random stream.
_JITTER = random.Random()


class Backoff:
    """Exponential backoff with jitter; ``delay(attempt)`` in seconds, attempt counting from 0."""

    def __init__(self, initial_ms: int, maximum_ms: int, jitter: float = 0.2):
        self.initial = max(initial_ms, 0) / 1000
        self.maximum = max(maximum_ms, initial_ms, 0) / 1000
        self.jitter = jitter

    def delay(self, attempt: int) -> float:
        base = min(self.initial * (2 ** min(attempt, 32)), self.maximum)
        return base * _JITTER.uniform(1 - self.jitter, 1 + self.jitter) if base else 0.0
