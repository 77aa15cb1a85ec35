"""The transactional producer retries what Kafka's clients retry: a busy or loading coordinator
(CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, answered by kwire's broker with its
coordinator's calls wrapped to refuse a few times), and a coordinator that is not the one the
producer cached (NOT_COORDINATOR from librdkafka's three-broker mock cluster: looked up again)."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.transactions import EndTxnResult
from kwire.client import Admin, ClientTimeoutError, Consumer, IllegalStateError, Producer, TopicPartition
from kwire.client.admin_quorum import FeatureUpgrade
from kwire.client.producer import AsyncProducer
from kwire.client.transactions import TRANSACTION_COORDINATOR
from kwire.protocol.errors import ConcurrentTransactionsError, CoordinatorLoadInProgressError

QUIET = {"log_level": 0}


def refuse_first(calls: list, code: int, times: int, answer=lambda code: code):
    """Wrap a coordinator method: answer ``code`` (as ``answer`` makes it the method's result) the
    first ``times`` calls, then do the real thing."""
    def wrap(real):
        def wrapped(*args, **kwargs):
            calls.append(real.__name__)
            if calls.count(real.__name__) <= times:
                return answer(code)
            return real(*args, **kwargs)
        return wrapped
    return wrap


def test_busy_and_loading_coordinators_are_retried(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=2) as broker:
        # transactions v1, whose AddPartitionsToTxn and AddOffsetsToTxn are counted below (v2:
        # tests/client/test_transactions_v2.py)
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.update_features({"transaction.version": 1}, upgrade=FeatureUpgrade.SAFE_DOWNGRADE)
        coordinator = broker.state.transactions
        calls: list[str] = []
        busy = refuse_first(calls, ConcurrentTransactionsError.code, 2)
        loading = refuse_first(calls, CoordinatorLoadInProgressError.code, 1)
        coordinator.add_partitions = busy(coordinator.add_partitions)
        coordinator.add_offsets = loading(coordinator.add_offsets)
        coordinator.end_txn = refuse_first(calls, ConcurrentTransactionsError.code, 2, EndTxnResult)(coordinator.end_txn)
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "retry-1", "retry.backoff.ms": 10,
                      "retry.backoff.max.ms": 50})
        try:
            p.init_transactions(10)
            p.begin_transaction()
            p.produce("retried", b"a", partition=0)
            p.produce("retried", b"b", partition=1)
            p.send_offsets_to_transaction({TopicPartition("retried", 0): 1}, "retry-group", 10)
            p.commit_transaction(10)
        finally:
            p.close()
        # Two refusals, then the partitions added: in one request, or in two when the first record
        # went out before the second was produced (a loaded machine).
        assert calls.count("add_partitions") in (3, 4) and calls.count("end_txn") == 3
        assert calls.count("add_offsets") == 2
        tps = [TopicPartition("retried", 0), TopicPartition("retried", 1)]
        with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "retry-group"}) as c:
            assert c.committed(tps)[tps[0]].offset == 1
        with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest",
                       "isolation.level": "read_committed"}) as c:
            c.assign(tps)
            got = []
            deadline = time.monotonic() + 10
            while len(got) < 2:
                assert time.monotonic() < deadline, got
                got += [r.value for r in c.poll(0.2)]
            assert sorted(got) == [b"a", b"b"]


@pytest.fixture(scope="module")
def mock_bootstrap():
    """librdkafka's mock cluster with 3 brokers (one of them the transaction coordinator)."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 3, **QUIET})
    md = owner.list_topics(timeout=10)
    yield ",".join(f"{b.host}:{b.port}" for b in sorted(md.brokers.values(), key=lambda b: b.id))
    owner.flush(1)


def test_a_wrong_coordinator_answers_not_coordinator_and_is_looked_up_again(mock_bootstrap):
    async def main():
        async with AsyncProducer({"bootstrap.servers": mock_bootstrap, "transactional.id": "mock-txn",
                                  "retry.backoff.ms": 20}) as p:
            await p.init_transactions(10)
            cluster = p._cluster
            right = cluster._coordinators[(TRANSACTION_COORDINATOR, "mock-txn")]
            await cluster.refresh_metadata()
            wrong = next(n for n in sorted(cluster.metadata.brokers) if n != right)
            cluster._coordinators[(TRANSACTION_COORDINATOR, "mock-txn")] = wrong  # as after a move
            p.begin_transaction()
            sent = [await p.send("mock-txn-topic", b"v%d" % i, partition=i % 4) for i in range(8)]
            await p.commit_transaction(10)
            assert cluster._coordinators[(TRANSACTION_COORDINATOR, "mock-txn")] == right
            return [f.result().offset for f in sent]

    offsets = asyncio.run(asyncio.wait_for(main(), 30))
    assert all(o >= 0 for o in offsets)
    c = confluent_kafka.Consumer({"bootstrap.servers": mock_bootstrap, "group.id": "mock-reader",
                                  "isolation.level": "read_committed", "enable.partition.eof": True, **QUIET})
    c.assign([confluent_kafka.TopicPartition("mock-txn-topic", q, confluent_kafka.OFFSET_BEGINNING) for q in range(4)])
    got, at_end = [], set()
    deadline = time.monotonic() + 10
    try:
        while len(at_end) < 4:
            assert time.monotonic() < deadline, got
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                at_end.add(m.partition())
                continue
            got.append(m.value())
    finally:
        c.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(8))


def test_a_commit_that_times_out_goes_on_and_is_finished_by_calling_it_again(tmp_path):
    """Java's rule: after a timeout the commit goes on in the background; the same call again
    waits for it, another transactional call is refused meanwhile."""
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as broker:
        coordinator = broker.state.transactions
        real_end, busy_until = coordinator.end_txn, time.monotonic() + 3600

        def end_txn(*args, **kwargs):
            if time.monotonic() < busy_until:
                return EndTxnResult(ConcurrentTransactionsError.code)
            return real_end(*args, **kwargs)

        coordinator.end_txn = end_txn
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "slow-1", "retry.backoff.ms": 10,
                      "retry.backoff.max.ms": 50})
        try:
            p.init_transactions(10)
            p.begin_transaction()
            p.produce("slow", b"x", partition=0)
            with pytest.raises(ClientTimeoutError, match=r"call commit_transaction\(\) again"):
                p.commit_transaction(0.3)
            with pytest.raises(IllegalStateError, match=r"commit_transaction\(\) is still in progress"):
                p.abort_transaction(1)
            busy_until = time.monotonic()  # the coordinator is done with whatever kept it busy
            p.commit_transaction(10)
            p.begin_transaction()  # ready for the next one
            p.abort_transaction(10)
        finally:
            p.close()
        with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest",
                       "isolation.level": "read_committed"}) as c:
            c.assign([TopicPartition("slow", 0)])
            got = []
            deadline = time.monotonic() + 10
            while not got:
                assert time.monotonic() < deadline
                got += [r.value for r in c.poll(0.2)]
            assert got == [b"x"]
