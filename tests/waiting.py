"""Waiting in tests for something another thread or process does: one bounded poll loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout: float = 10.0, step: float = 0.02) -> T:
    """Call ``check`` every ``step`` seconds until it returns something true, and return that;
    after ``timeout`` seconds fail the test, saying what it waited for."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / step) + 2):
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
