"""The synchronous producer's per-record futures: ``concurrent.futures.Future``, completed in bulk.

A plain ``concurrent.futures.Future`` makes a ``threading.Condition`` when created and takes its
lock and notifies it when completed: some 3 us per record, more than the rest of producing one.
A ``RecordFuture`` is a real ``concurrent.futures.Future`` (``result()``, ``add_done_callback``,
``concurrent.futures.wait`` all work) that shares its producer's Condition, and ``resolve``
completes a whole batch's futures under that lock once, with one notify.  Waiters wake on any
batch's completion and look again at their own future, which is what a Condition is for.

A producer may hold hundreds of thousands of undelivered records (``buffer.memory``), each with
its future, so what a future costs the cyclic garbage collector matters: a full collection walks
every tracked object, and a plain Future is three of them (itself and its ``_waiters`` and
``_done_callbacks`` lists, almost always empty).  A ``RecordFuture`` makes those lists only when
something reads them (``add_done_callback``, ``wait``, ``as_completed``...): one tracked object per
record, and full collections a third as long.  And a future its caller dropped at once, the usual
``producer.produce(...)`` statement, is not kept at all (``unobserved``).

This relies on the attributes CPython's Future has had since Python 3.2, and on its code reaching
the two lists only as attributes (``self._waiters.append``, ``for w in self._waiters``: so in
3.10-3.13), both checked on import; where they differ, plain futures completed one by one are used
instead.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import _base
from typing import Any

__all__ = ["RecordFuture", "resolve", "unobserved"]

# The module's private state names; "" where missing (then _layout_known is False).
_PENDING: str = getattr(_base, "PENDING", "")
_FINISHED: str = getattr(_base, "FINISHED", "")
_LAYOUT = {"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"}


def _layout_known() -> bool:
    try:
        probe: concurrent.futures.Future[None] = concurrent.futures.Future()
    except Exception:  # noqa: BLE001 - any surprise means: do not rely on the internals
        return False
    return set(vars(probe)) == _LAYOUT and probe._state == _PENDING and _FINISHED != ""


_FAST = _layout_known()


class RecordFuture(concurrent.futures.Future[Any]):
    """A record's delivery: its ``RecordMetadata``, or the error that stopped it."""

    # The two lists in slots, made when first read (None until then): see the module's docstring.
    __slots__ = ("_waiter_list", "_callback_list", "on_delivery")

    def __init__(self, condition: threading.Condition, on_delivery: Callable[..., object] | None = None) -> None:
        self._waiter_list: list[Any] | None = None
        self._callback_list: list[Any] | None = None
        if _FAST:
            self._condition = condition
            self._state = _PENDING
            self._result = None
            self._exception = None
        else:
            super().__init__()
        self.on_delivery = on_delivery

    # Future's own code reads and appends to these; a read makes the list (an empty list read
    # for iteration is the rare path: cancel, or completing a future someone waits on).
    @property
    def _waiters(self) -> list[Any]:
        waiters = self._waiter_list
        if waiters is None:
            waiters = self._waiter_list = []
        return waiters

    @_waiters.setter
    def _waiters(self, value: list[Any]) -> None:
        self._waiter_list = value

    @property
    def _done_callbacks(self) -> list[Any]:
        callbacks = self._callback_list
        if callbacks is None:
            callbacks = self._callback_list = []
        return callbacks

    @_done_callbacks.setter
    def _done_callbacks(self, value: list[Any]) -> None:
        self._callback_list = value


def _lazy_lists_work() -> bool:
    """Future's methods and ``wait``/``as_completed`` find the lazily made lists (their code
    reaches ``_waiters``/``_done_callbacks`` by attribute, not through ``__dict__``)."""
    try:
        called: list[concurrent.futures.Future[Any]] = []
        condition = threading.Condition()
        first, second = RecordFuture(condition), RecordFuture(condition)
        first.add_done_callback(called.append)
        done, _ = concurrent.futures.wait([first, second], timeout=0)
        if done or first._waiter_list or second._callback_list is not None:
            return False  # wait() removed its waiters again; nothing was read from second
        resolve(condition, [first], [1], None)
        second.set_result(2)
        done, _ = concurrent.futures.wait([first, second], timeout=0)
        return (called == [first] and len(done) == 2 and [f.result() for f in
                concurrent.futures.as_completed([first, second], timeout=0)] in ([1, 2], [2, 1]))
    except Exception:  # noqa: BLE001 - any surprise means: do not rely on the internals
        return False


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
                if future._waiter_list:
                    for waiter in future._waiter_list:
                        waiter.add_result(future)
                if future._callback_list:
                    with_callbacks.append(future)
        else:
            for future in futures:
                if future._state != pending:
                    continue
                future._exception = error
                future._state = finished
                if future._waiter_list:
                    for waiter in future._waiter_list:
                        waiter.add_exception(future)
                if future._callback_list:
                    with_callbacks.append(future)
        condition.notify_all()
    for future in with_callbacks:
        future._invoke_callbacks()  # type: ignore[attr-defined]  # Future's own (private, not in typeshed)


_FAST = _FAST and _lazy_lists_work()
if not _FAST:
    # Future's own lists, made by Future.__init__ as it likes (the slots stay unused).
    del RecordFuture._waiters, RecordFuture._done_callbacks


# -- futures nobody can observe ----------------------------------------------------------------
# Most callers drop produce()'s future at once (``producer.produce(...)`` as a statement).  A
# future that nothing but the producer references, with no callback, waiter or weak reference,
# can never be looked at again: the producer need not keep it until delivery, and then a queued
# record is no object at all for the collector.  Only reference counts can tell, so this is
# used where they are exact and counted the same way everywhere (CPython with the GIL, up to
# 3.13; 3.14 borrows references on the stack), and calibrated here with the same call shape.


def _probe(future: RecordFuture) -> int:
    return sys.getrefcount(future)  # (unobserved's shape: the caller's variable, one call)


def _alone_count() -> int | None:
    if not (_FAST and sys.implementation.name == "cpython" and sys.version_info < (3, 14)
            and getattr(sys, "_is_gil_enabled", lambda: True)()):
        return None
    condition = threading.Condition()
    future = RecordFuture(condition)
    alone = _probe(future)
    held = [future]
    if _probe(future) != alone + 1 or _probe(RecordFuture(condition)) > alone:
        return None  # counts that do not follow references one for one: do not rely on them
    del held
    return alone


_ALONE = _alone_count()


def unobserved(future: RecordFuture) -> bool:
    """Whether the caller's one variable is the only way to ``future`` (and no callback, waiter or
    weak reference waits on it): completing it would change nothing anyone can see.  False
    wherever that cannot be known."""
    return (_ALONE is not None and sys.getrefcount(future) <= _ALONE and future.on_delivery is None
            and future._callback_list is None and future._waiter_list is None
            and not weakref.getweakrefcount(future))
