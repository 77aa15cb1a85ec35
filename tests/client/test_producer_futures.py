"""The sync producer's futures (``RecordFuture``): real ``concurrent.futures.Future``s whose
waiter and callback lists are made only when used, completed in bulk by ``resolve``.  Every way
the standard library reaches a future (result, add_done_callback, cancel, wait, as_completed),
alone and through a real Producer against kwire's broker."""

from __future__ import annotations

import concurrent.futures
import gc
import threading

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.producer import Producer
from kwire.client.producer_futures import _FAST, RecordFuture, resolve


@pytest.fixture
def condition():
    return threading.Condition()


def test_the_lazy_lists_are_in_use_on_this_python():
    # On CPython 3.10-3.13 the layout check passes; if it fails, producing still works, slower.
    assert _FAST


def test_a_pending_future_is_one_object_for_the_collector(condition):
    future = RecordFuture(condition)
    referents = gc.get_referents(future)
    assert not [o for o in referents if isinstance(o, list)]
    # Completing it in bulk makes no list either.
    resolve(condition, [future], ["done"], None)
    assert future.result(0) == "done"
    assert future._waiter_list is None and future._callback_list is None


def test_result_and_exception_across_threads(condition):
    ok, bad = RecordFuture(condition), RecordFuture(condition)
    error = ValueError("broken")
    timer = threading.Timer(0.05, lambda: (resolve(condition, [ok], [7], None), resolve(condition, [bad], [0], error)))
    timer.start()
    try:
        assert ok.result(10) == 7
        assert bad.exception(10) is error
        with pytest.raises(ValueError, match="broken"):
            bad.result(0)
    finally:
        timer.join()


def test_done_callbacks_before_and_after_completion(condition):
    calls = []
    future = RecordFuture(condition)
    future.add_done_callback(lambda f: calls.append(("before", f.result())))
    assert calls == []
    resolve(condition, [future], [1], None)
    future.add_done_callback(lambda f: calls.append(("after", f.result())))
    assert calls == [("before", 1), ("after", 1)]


def test_error_reaches_callbacks_and_waiters(condition):
    future, other = RecordFuture(condition), RecordFuture(condition)
    seen = []
    future.add_done_callback(lambda f: seen.append(type(f.exception()).__name__))
    timer = threading.Timer(0.05, resolve, (condition, [future, other], [None, None], KeyError("k")))
    timer.start()
    try:
        done, not_done = concurrent.futures.wait([future, other], timeout=10,
                                                 return_when=concurrent.futures.FIRST_EXCEPTION)
    finally:
        timer.join()
    assert future in done and seen == ["KeyError"]
    assert isinstance(other.exception(0), KeyError)


def test_wait_first_completed_and_all_completed(condition):
    futures = [RecordFuture(condition) for _ in range(3)]
    done, not_done = concurrent.futures.wait(futures, timeout=0)
    assert not done and not_done == set(futures)
    timer = threading.Timer(0.05, resolve, (condition, futures[1:2], ["one"], None))
    timer.start()
    try:
        done, not_done = concurrent.futures.wait(futures, timeout=10, return_when=concurrent.futures.FIRST_COMPLETED)
    finally:
        timer.join()
    assert done == {futures[1]} and not_done == {futures[0], futures[2]}
    # wait() took its waiters away again: nothing left behind in the futures.
    assert all(not f._waiters for f in futures)
    resolve(condition, [futures[0], futures[2]], ["zero", "two"], None)
    done, not_done = concurrent.futures.wait(futures, timeout=0)
    assert done == set(futures) and not not_done


def test_as_completed_yields_each_as_it_completes(condition):
    futures = [RecordFuture(condition) for _ in range(4)]
    resolve(condition, futures[:1], [0], None)

    def finish_rest():
        for i in (3, 1, 2):
            resolve(condition, [futures[i]], [i], None)

    timer = threading.Timer(0.05, finish_rest)
    timer.start()
    try:
        order = [f.result(0) for f in concurrent.futures.as_completed(futures, timeout=10)]
    finally:
        timer.join()
    assert order[0] == 0 and sorted(order) == [0, 1, 2, 3]


def test_cancel_and_bulk_completion_leave_a_cancelled_future_alone(condition):
    calls = []
    cancelled, kept = RecordFuture(condition), RecordFuture(condition)
    cancelled.add_done_callback(calls.append)
    assert cancelled.cancel()
    assert calls == [cancelled]
    resolve(condition, [cancelled, kept], ["x", "y"], None)
    assert cancelled.cancelled() and kept.result(0) == "y"
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled.result(0)


def test_set_result_of_the_base_class_still_works(condition):
    """Future's own completion path (the fallback when the layout is unknown) reads the lists."""
    future = RecordFuture(condition)
    calls = []
    future.add_done_callback(calls.append)
    future.set_result(5)
    assert future.result(0) == 5 and calls == [future]
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(6)


def test_a_producers_futures_work_with_wait_as_completed_and_callbacks():
    with EmbeddedBroker(default_partitions=2) as broker, \
            Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5}) as producer:
        called = []
        futures = [producer.produce("futures", b"v%d" % i, key=b"k%d" % (i % 5)) for i in range(200)]
        futures[0].add_done_callback(called.append)
        done, not_done = concurrent.futures.wait(futures, timeout=20)
        assert not not_done and len(done) == 200
        metadatas = [f.result(0) for f in concurrent.futures.as_completed(futures, timeout=20)]
        assert len({(m.partition, m.offset) for m in metadatas}) == 200
        assert called == [futures[0]]
        late = producer.produce("futures", b"late")
        late_calls = []
        late.add_done_callback(late_calls.append)  # from this thread, before or after delivery
        assert next(concurrent.futures.as_completed([late], timeout=20)) is late
        assert late_calls == [late] and late.result(0).offset >= 0


_FALLBACK = """
import concurrent.futures, threading
plain_init = concurrent.futures.Future.__init__

def init(self):  # a Future with one attribute more than the layout kwire relies on
    plain_init(self)
    self._extra = None

concurrent.futures.Future.__init__ = init
from kwire.client.producer_futures import _FAST, RecordFuture, resolve
assert not _FAST
assert "_waiters" not in RecordFuture.__dict__
condition = threading.Condition()
futures = [RecordFuture(condition) for _ in range(3)]
assert isinstance(futures[0]._waiters, list) and "_waiters" in vars(futures[0])
called = []
futures[0].add_done_callback(called.append)
assert futures[2].cancel()
resolve(condition, futures, [0, 1, 2], None)
assert called == [futures[0]]
done, _ = concurrent.futures.wait(futures, timeout=0)
assert done == set(futures[:2]) and futures[1].result(0) == 1 and futures[2].cancelled()  # (wait: as Future)
resolve(condition, [RecordFuture(condition)], [None], KeyError("k"))
print("ok")
"""


def test_an_unknown_future_layout_falls_back_to_futures_as_python_makes_them():
    """Where Future's attributes differ from what the bulk completion relies on, RecordFuture is
    a plain subclass completed one by one (run in a fresh interpreter: the check runs on import)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FALLBACK], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_unobserved_means_no_reference_callback_waiter_or_weakref_but_the_callers(condition):
    import weakref

    from kwire.client.producer_futures import unobserved

    future = RecordFuture(condition)
    assert unobserved(future)
    held = [future]
    assert not unobserved(future)
    del held
    ref = weakref.ref(future)
    assert not unobserved(future)
    del ref
    assert unobserved(future)
    assert not unobserved(RecordFuture(condition, on_delivery=print))
    future.add_done_callback(lambda f: None)
    assert not unobserved(future)
    waited = RecordFuture(condition)
    concurrent.futures.wait([waited], timeout=0)  # made its waiter list (empty again)
    assert not unobserved(waited)


def test_dropped_futures_are_not_kept_and_their_records_still_count():
    """``producer.produce(...)`` as a statement: the queued record keeps no future, and flush,
    len() and the offsets are as if it did."""
    import time

    with EmbeddedBroker(default_partitions=1) as broker, \
            Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 60_000}) as producer:
        kept_first = producer.produce("dropped", b"first")
        for i in range(300):
            producer.produce("dropped", b"v%d" % i)
        chained = []
        producer.produce("dropped", b"chained").add_done_callback(chained.append)
        kept_last = producer.produce("dropped", b"last")
        deadline = time.monotonic() + 20
        while producer._core.handoff and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(producer) == 303  # all queued (linger), none delivered yet
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, RecordFuture)]
        assert len(alive) == 3, alive  # first, chained (its callback waits) and last
        assert producer.flush(20) == 0
        assert len(producer) == 0
        assert kept_first.result(0).offset == 0 and kept_last.result(0).offset == 302
        assert len(chained) == 1 and chained[0].result(0).offset == 301
