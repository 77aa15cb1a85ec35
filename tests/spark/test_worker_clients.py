"""The clients a Spark Python worker keeps between tasks, and the garbage collector's permanent
generation that a reused worker moves its loaded objects to (Spark collects after every task)."""

from __future__ import annotations

import gc

import pytest

from kwire.spark import worker_clients


@pytest.fixture
def fresh_worker(monkeypatch):
    """worker_clients as in a newly forked worker; the freeze undone afterwards."""
    monkeypatch.setattr(worker_clients, "_owner_pid", None)
    monkeypatch.setattr(worker_clients, "_clients", {})
    gc.unfreeze()
    yield
    for client in list(worker_clients._clients.values()):
        worker_clients.discard(client)
    gc.unfreeze()


def test_a_reused_worker_freezes_what_is_loaded_at_its_first_client(fresh_worker, monkeypatch, kwire_broker):
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    settings = {"bootstrap.servers": kwire_broker.bootstrap}
    first = worker_clients.consumer(settings)
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # the modules loaded by now (pytest, kwire, ...)
    assert worker_clients.consumer(settings) is first  # kept for the next task
    worker_clients.producer(settings)
    assert gc.get_freeze_count() <= frozen  # once per worker process (frozen objects can still die)


def test_a_worker_that_is_not_reused_freezes_nothing(fresh_worker, monkeypatch, kwire_broker):
    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    worker_clients.consumer({"bootstrap.servers": kwire_broker.bootstrap})
    assert gc.get_freeze_count() == 0
