"""Real clients against a broker restarted while its coordinators still load (as Kafka's after a
restart): a data dir with many groups' committed offsets and an open transaction; the restarted
broker's background load is held.  A client's group in a small partition is served by its first
OffsetFetch (kwire loads that partition inside the request); above the size threshold the client
is answered COORDINATOR_LOAD_IN_PROGRESS and retries until the load is let go, as with Kafka.
The open transaction's producer id is taken over by a new producer afterwards."""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.consumer import Consumer as KwireConsumer
from kwire.client.types import TopicPartition as KwireTopicPartition

from .clients import confluent_read_all
from .test_transactions_clients import QUIET

GROUPS = 30
PARTITIONS = 2


def expected(g: int, partition: int) -> int:
    return 1 + (g + partition) % 10


class GatedExecutor:
    """One worker thread whose jobs start only once ``release()`` is called; ``schedule`` holds
    the loader's later turns of the event loop (what follows a load done inside a request)
    until then too."""

    def __init__(self) -> None:
        self._gate = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-load")
        self._lock = threading.Lock()
        self._held: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []

    def schedule(self, fn: Callable[[], None]) -> None:
        """(On the broker's event loop) ``fn`` on its next turn, once released."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._gate.is_set():
                self._held.append((loop, fn))
                return
        loop.call_soon(fn)

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future:
        def held() -> Any:
            if not self._gate.wait(60):
                raise TimeoutError("the test never released the load")
            return fn(*args)

        return self._pool.submit(held)

    def release(self) -> None:
        with self._lock:
            self._gate.set()
            held, self._held = self._held, []
        for loop, fn in held:
            loop.call_soon_threadsafe(fn)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._gate.set()
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """The data dir: GROUPS groups' offsets of topic "events", and an open transaction that
    produced to it and staged offsets of group "txn-group"."""
    data = tmp_path_factory.mktemp("loading") / "data"
    broker = EmbeddedBroker(data, default_partitions=PARTITIONS)
    broker.start()
    try:
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
        for i in range(PARTITIONS * 10):
            p.produce("events", b"value-%d" % i, partition=i % PARTITIONS)
        assert p.flush(30) == 0
        for g in range(GROUPS):
            c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"group-{g}",
                                          "enable.auto.commit": False, **QUIET})
            c.commit(offsets=[confluent_kafka.TopicPartition("events", i, expected(g, i)) for i in range(PARTITIONS)],
                     asynchronous=False)
            c.close()
        tx = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "loader-tx",
                                       "transaction.timeout.ms": 600_000, **QUIET})
        tx.init_transactions(15)
        tx.begin_transaction()
        tx.produce("events", b"uncommitted", partition=0)
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "txn-group", **QUIET})
        tx.send_offsets_to_transaction([confluent_kafka.TopicPartition("events", 0, 7)],
                                       c.consumer_group_metadata(), 15)
        c.close()
        assert tx.flush(15) == 0
    finally:
        broker.stop()
    return data


def _restarted(template, tmp_path) -> tuple[EmbeddedBroker, GatedExecutor]:
    data = tmp_path / "data"
    shutil.copytree(template, data)
    broker = EmbeddedBroker(data)
    gate = GatedExecutor()
    broker.broker.coordinator_load_executor = gate
    broker.broker.coordinator_load_schedule = gate.schedule
    broker.start()
    return broker, gate


def _confluent(bootstrap: str, group: str) -> dict[int, int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  **QUIET})
    try:
        got = c.committed([confluent_kafka.TopicPartition("events", i) for i in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def _kafka_python(bootstrap: str, group: str) -> dict[int, int]:
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {i: c.committed(kafka.TopicPartition("events", i)) for i in range(PARTITIONS)}
    finally:
        c.close()


def _kwire(bootstrap: str, group: str) -> dict[int, int]:
    c = KwireConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([KwireTopicPartition("events", i) for i in range(PARTITIONS)], timeout=30)
        return {tp.partition: meta.offset for tp, meta in got.items()}
    finally:
        c.close()


CLIENTS = pytest.mark.parametrize("client", [_confluent, _kafka_python, _kwire], ids=["confluent", "kafka-python", "kwire"])


def _group_not_in_the_worker(broker: EmbeddedBroker) -> int:
    """A group whose partition is not the one the held worker has started on (the lowest)."""
    coordinator = broker.state.coordinator
    first = coordinator.loading_partitions[0]
    return next(g for g in range(GROUPS) if coordinator.store.partition_of(f"group-{g}") != first)


@CLIENTS
def test_clients_read_their_offsets_on_the_first_offset_fetch(template, tmp_path, client):
    """kwire's shortcut: a group of a small partition still to load is served by the client's
    first OffsetFetch (its partition loaded inside it), no COORDINATOR_LOAD_IN_PROGRESS, while
    the background load is held."""
    broker, gate = _restarted(template, tmp_path)
    try:
        broker.call(lambda: None)  # the loader's start, posted to the loop before, has run
        coordinator, loader = broker.state.coordinator, broker.state.loader
        g = _group_not_in_the_worker(broker)
        assert coordinator.loading() and coordinator.load_refusals == 1  # (that call's own)
        assert client(broker.bootstrap, f"group-{g}") == {i: expected(g, i) for i in range(PARTITIONS)}
        assert coordinator.load_refusals == 1  # no refusal for the client
        assert loader.inline_loads == 1 and not loader.done.is_set()  # (the worker is still held)
        gate.release()
        assert broker.wait_loaded(30) and not loader.failed
        for g in range(0, GROUPS, 7):
            assert client(broker.bootstrap, f"group-{g}") == {i: expected(g, i) for i in range(PARTITIONS)}
    finally:
        broker.stop()


@CLIENTS
def test_clients_retry_a_refusal_above_the_threshold(template, tmp_path, client, monkeypatch):
    """Above the size threshold (here: every partition), Kafka's way: the client's request is
    answered COORDINATOR_LOAD_IN_PROGRESS while the partition loads in the worker, it retries
    and gets its offsets once the load is let go."""
    from kwire.broker.coordinator import loader as loader_module

    monkeypatch.setattr(loader_module, "INLINE_BYTES", -1)
    broker, gate = _restarted(template, tmp_path)
    try:
        coordinator = broker.state.coordinator
        assert coordinator.loading()
        refused = coordinator.load_refusals  # (the loading() above counts as one)
        g = 3
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client, broker.bootstrap, f"group-{g}")
            deadline = time.monotonic() + 30
            while coordinator.load_refusals == refused and not answer.done() and time.monotonic() < deadline:
                time.sleep(0.01)  # the client's first OffsetFetch
            assert coordinator.load_refusals > refused, answer.exception() if answer.done() else "no request came"
            assert not answer.done()  # it waits for the load, retrying
            gate.release()
            assert answer.result(60) == {i: expected(g, i) for i in range(PARTITIONS)}
        assert broker.state.loader.inline_loads == 0
        for g in range(0, GROUPS, 7):
            assert client(broker.bootstrap, f"group-{g}") == {i: expected(g, i) for i in range(PARTITIONS)}
    finally:
        broker.stop()


def test_the_open_transaction_is_there_after_the_load(template, tmp_path):
    broker, gate = _restarted(template, tmp_path)
    try:
        broker.call(broker.state.loader.release)  # the worker's hold ended: its first read waits at the gate
        assert broker.call(broker.state.transactions.loading)  # (on the broker's loop, as a handler asks)
        gate.release()
        assert broker.state.loader.done.wait(30) and not broker.state.loader.failed
        txn = broker.state.transactions.describe("loader-tx")
        assert txn is not None and txn.state.value == "Ongoing" and txn.groups == {"txn-group"}
        # A new producer of the id aborts it (its epoch bumped); nothing of it was committed.
        tx = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "loader-tx", **QUIET})
        tx.init_transactions(30)
        assert broker.state.transactions.describe("loader-tx").state.value in ("CompleteAbort", "Empty")
        values = [v for _, v in confluent_read_all(broker.bootstrap, "events", "read_committed",
                                                   partitions=PARTITIONS)]
        assert b"uncommitted" not in values and len(values) == PARTITIONS * 10
        assert _confluent(broker.bootstrap, "txn-group") == {0: -1001, 1: -1001}
    finally:
        broker.stop()


@pytest.mark.parametrize("where", ["at once", "in the worker"])
def test_an_unheld_load_serves_every_group(template, tmp_path, monkeypatch, where):
    """The load as the broker runs it: a small partition asked for loaded inside the request (the
    usual case), or every one in the worker thread when each counts as large."""
    from kwire.broker.coordinator import loader

    if where == "in the worker":
        monkeypatch.setattr(loader, "INLINE_BYTES", -1)
    data = tmp_path / "data"
    shutil.copytree(template, data)
    broker = EmbeddedBroker(data)
    broker.start()
    try:
        for g in range(0, GROUPS, 4):  # asked at once: some while their partitions still load
            assert _confluent(broker.bootstrap, f"group-{g}") == {i: expected(g, i) for i in range(PARTITIONS)}
        assert broker.wait_loaded(30) and not broker.state.loader.failed
        loads = len(broker.state.coordinator.store.partitions_on_disk()) + 1  # (+ __transaction_state)
        assert broker.state.loader.inline_loads <= (loads if where == "at once" else 0)
        assert broker.state.transactions.describe("loader-tx").state.value == "Ongoing"
    finally:
        broker.stop()


def test_the_load_starts_once_the_first_requests_are_answered(template, tmp_path, monkeypatch):
    """The worker's hold on a running broker: nothing is read until a client's requests were
    answered and a look finds none since the one before (HOLD_MS made longer than the test, so
    only that can start it)."""
    from kwire.broker.coordinator import loader

    monkeypatch.setattr(loader, "HOLD_MS", 600_000)
    data = tmp_path / "data"
    shutil.copytree(template, data)
    broker = EmbeddedBroker(data)
    broker.start()
    try:
        assert broker.call(lambda: broker.state.loader.holding)
        assert broker.call(lambda: broker.state.coordinator.loading_partitions)  # nothing read yet
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        assert "events" in admin.list_topics(timeout=15).topics
        assert broker.state.loader.done.wait(30) and not broker.state.loader.failed
        assert broker.state.loader.inline_loads == 0  # (the worker read them all)
    finally:
        broker.stop()


def test_wait_loaded_ends_the_hold(template, tmp_path, monkeypatch):
    """A test that restarts a broker and waits for its load before looking inside does not wait
    out the hold: nobody sends a request here."""
    from kwire.broker.coordinator import loader

    monkeypatch.setattr(loader, "HOLD_MS", 600_000)
    data = tmp_path / "data"
    shutil.copytree(template, data)
    broker = EmbeddedBroker(data)
    broker.start()
    try:
        assert broker.call(lambda: broker.state.loader.holding)
        assert broker.wait_loaded(30) and not broker.state.loader.failed
        assert broker.state.transactions.describe("loader-tx").state.value == "Ongoing"
    finally:
        broker.stop()
