"""The clients a Spark Python worker keeps between tasks, and the garbage collector's permanent
generation that a reused worker moves its loaded objects to once its first task is done (Spark
collects after every task)."""

from __future__ import annotations

import gc

import pytest

from kwire.spark import worker_clients
from kwire.spark.fetch import read_range
from kwire.spark.options import parse_source_options
from kwire.spark.planning import OffsetRange

from .conftest import create_topic, produce


@pytest.fixture
def fresh_worker(monkeypatch):
    """worker_clients as in a newly forked worker; the freeze undone afterwards."""
    monkeypatch.setattr(worker_clients, "_owner_pid", None)
    monkeypatch.setattr(worker_clients, "_frozen_pid", None)
    monkeypatch.setattr(worker_clients, "_clients", {})
    gc.unfreeze()
    yield
    for client in list(worker_clients._clients.values()):
        worker_clients.discard(client)
    gc.unfreeze()


def _read(bootstrap: str, topic: str, n: int) -> int:
    options = parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})
    return sum(batch.num_rows for batch in read_range(OffsetRange(topic, 0, 0, n), options))


def test_a_reused_worker_freezes_what_is_loaded_when_its_first_task_ends(fresh_worker, monkeypatch, kwire_broker):
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    create_topic(kwire_broker.bootstrap, "frozen", 1)
    produce(kwire_broker.bootstrap, "frozen", [(b"k", b"v%d" % i, None) for i in range(50)])
    settings = {"bootstrap.servers": kwire_broker.bootstrap}
    first = worker_clients.consumer(settings)
    assert gc.get_freeze_count() == 0  # not when the task starts: PySpark imports more during it
    assert _read(kwire_broker.bootstrap, "frozen", 50) == 50
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # the modules loaded by now (pytest, kwire, ...)
    assert worker_clients.consumer(settings) is first  # kept for the next task
    assert _read(kwire_broker.bootstrap, "frozen", 50) == 50
    worker_clients.task_done()
    assert gc.get_freeze_count() <= frozen  # once per worker process (frozen objects can still die)


def test_a_worker_that_is_not_reused_freezes_nothing(fresh_worker, monkeypatch, kwire_broker):
    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    create_topic(kwire_broker.bootstrap, "not-frozen", 1)
    produce(kwire_broker.bootstrap, "not-frozen", [(b"k", b"v", None)])
    assert _read(kwire_broker.bootstrap, "not-frozen", 1) == 1
    assert gc.get_freeze_count() == 0


def test_a_worker_without_the_compiled_reader_says_so_once(fresh_worker, monkeypatch, kwire_broker, caplog):
    from kwire.spark import columns, fetch
    monkeypatch.setattr(columns, "_layout", None)
    monkeypatch.setattr(fetch, "_said_stand_in", [])
    create_topic(kwire_broker.bootstrap, "stand-in", 1)
    produce(kwire_broker.bootstrap, "stand-in", [(b"k", b"v%d" % i, None) for i in range(5)])
    with caplog.at_level("INFO", logger="kwire.spark"):
        assert _read(kwire_broker.bootstrap, "stand-in", 5) == 5
        assert _read(kwire_broker.bootstrap, "stand-in", 5) == 5
    said = [r for r in caplog.records if "Python stand-in" in r.getMessage()]
    assert len(said) == 1
