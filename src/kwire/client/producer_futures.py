"""The synchronous producer's per-record futures: ``concurrent.futures.Future``, completed in bulk.

A plain ``concurrent.futures.Future`` makes a ``threading.Condition`` when created and takes its
lock and notifies it when completed: some 3 us per record, more than the rest of producing one.
A ``RecordFuture`` is a real ``concurrent.futures.Future`` (``result()``, ``add_done_callback``,
``concurrent.futures.wait`` all work) that shares its producer's Condition, and ``resolve``
completes a whole batch's futures under that lock once, with one notify.  Waiters wake on any
batch's completion and look again at their own future, which is what a Condition is for.

This relies on the attributes CPython's Future has had since Python 3.2 (checked on import); where
they differ, plain futures completed one by one are used instead.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import _base
from typing import Any

__all__ = ["RecordFuture", "resolve"]

_PENDING = getattr(_base, "PENDING", None)
_FINISHED = getattr(_base, "FINISHED", None)
_LAYOUT = {"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"}


def _layout_known() -> bool:
    try:
        probe = concurrent.futures.Future()
    except Exception:  # noqa: BLE001 - any surprise means: do not rely on the internals
        return False
    return set(vars(probe)) == _LAYOUT and probe._state == _PENDING and _FINISHED is not None


_FAST = _layout_known()


class RecordFuture(concurrent.futures.Future):
    """A record's delivery: its ``RecordMetadata``, or the error that stopped it."""

    def __init__(self, condition: threading.Condition, on_delivery: Callable | None = None):
        if _FAST:
            self._condition = condition
            self._state = _PENDING
            self._result = None
            self._exception = None
            self._waiters = []
            self._done_callbacks = []
        else:
            super().__init__()
        self.on_delivery = on_delivery


def resolve(condition: threading.Condition, futures: Sequence[RecordFuture], results: Sequence[Any],
            error: BaseException | None) -> None:
    """Complete ``futures[i]`` with ``results[i]``, or all of them with ``error``.  Futures
    cancelled by their owners are left alone."""
    if not _FAST:
        for future, result in zip(futures, results, strict=True):
            try:
                future.set_result(result) if error is None else future.set_exception(error)
            except concurrent.futures.InvalidStateError:
                pass
        return
    with_callbacks = []
    pending, finished = _PENDING, _FINISHED
    with condition:
        if error is None:
            for future, result in zip(futures, results, strict=True):
                if future._state != pending:
                    continue
                future._result = result
                future._state = finished
                if future._waiters:
                    for waiter in future._waiters:
                        waiter.add_result(future)
                if future._done_callbacks:
                    with_callbacks.append(future)
        else:
            for future in futures:
                if future._state != pending:
                    continue
                future._exception = error
                future._state = finished
                if future._waiters:
                    for waiter in future._waiters:
                        waiter.add_exception(future)
                if future._done_callbacks:
                    with_callbacks.append(future)
        condition.notify_all()
    for future in with_callbacks:
        future._invoke_callbacks()
