"""Transactions on a broker at transaction.version 2 (KIP-890 part 2, Kafka 4.3's default) and at 1
(an admin's UpdateFeatures), with real clients: kwire's producer speaks v2 at 2 (no
AddPartitionsToTxn or AddOffsetsToTxn, TxnOffsetCommit v5, EndTxn v5 and a new epoch per
transaction) and v1 at 1, as Java's TransactionManager; confluent-kafka 2.16 (librdkafka speaks
transactions v1 only: InitProducerId v4, AddPartitionsToTxn v0, AddOffsetsToTxn v0, EndTxn v1,
TxnOffsetCommit v3, Produce v10) and kafka-python keep working on a v2 cluster; read_committed
readers see only committed data; consume-transform-produce with send_offsets_to_transaction is
exactly once.  Which requests a client sent is read from the broker's request log."""

from __future__ import annotations

import collections
import logging
import re
import time

import confluent_kafka
import kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.client import Admin, Consumer, Producer, TopicPartition
from kwire.client.admin_quorum import FeatureUpgrade

from ..broker.clients import confluent_read_all
from .test_transactions import kwire_read_all

PARTITIONS = 3
QUIET = {"log_level": 0}
TXN_APIS = ("Produce", "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit")


class RequestLog(logging.Handler):
    """(api name, version) -> count of the requests the broker received (its DEBUG request log)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: collections.Counter = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        m = re.match(r"(\w+)Request v(\d+) correlation", record.getMessage())
        if m and m.group(1) in TXN_APIS:
            self.seen[(m.group(1), int(m.group(2)))] += 1

    def versions(self, api: str) -> set[int]:
        return {v for (name, v), n in self.seen.items() if name == api and n}


@pytest.fixture
def requests():
    handler = RequestLog()
    logger = logging.getLogger("kwire.broker.requests")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def start_broker(tmp_path, level: int):
    broker = EmbeddedBroker(tmp_path / "data", default_partitions=PARTITIONS)
    broker.start()
    if level != 2:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.update_features({"transaction.version": level}, upgrade=FeatureUpgrade.SAFE_DOWNGRADE)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert admin.describe_features().finalized.get("transaction.version", 0) == level
    return broker


def values(prefix: str, n: int = 12) -> list[tuple[int, bytes]]:
    return [(i % PARTITIONS, b"%s-%d" % (prefix.encode(), i)) for i in range(n)]


def check_isolation(bootstrap: str, topic: str, committed: list, aborted: list) -> None:
    assert sorted(kwire_read_all(bootstrap, topic, "read_committed")) == sorted(committed)
    assert sorted(kwire_read_all(bootstrap, topic, "read_uncommitted")) == sorted(committed + aborted)
    assert sorted(confluent_read_all(bootstrap, topic, "read_committed")) == sorted(committed)


@pytest.mark.parametrize("level", [2, 1])
def test_kwire_commits_and_aborts_with_the_clusters_transaction_version(tmp_path, requests, level):
    broker = start_broker(tmp_path, level)
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "kw", "linger.ms": 5})
        committed, aborted = values("c"), values("a")
        try:
            p.init_transactions(10)
            for rounds in range(2):
                p.begin_transaction()
                for partition, value in committed[rounds::2]:
                    p.produce("kw", value, partition=partition)
                p.commit_transaction(10)
                p.begin_transaction()
                for partition, value in aborted[rounds::2]:
                    p.produce("kw", value, partition=partition)
                p.flush(10)
                p.abort_transaction(10)
        finally:
            p.close()
        check_isolation(broker.bootstrap, "kw", committed, aborted)
        txn = broker.state.transactions.describe("kw")
        if level >= 2:
            # v2: every end bumped the epoch (4 transactions); nothing added by the client.
            assert txn.producer_epoch == 4 and txn.client_tv == 2
            assert requests.versions("EndTxn") == {5}
            assert not requests.versions("AddPartitionsToTxn") and not requests.versions("AddOffsetsToTxn")
            assert min(requests.versions("Produce")) >= 12
        else:
            assert txn.producer_epoch == 0
            assert requests.versions("EndTxn") == {4} and requests.versions("AddPartitionsToTxn") == {3}
            assert max(requests.versions("Produce")) == 11  # v12+ is v2's (Java's cap too)
    finally:
        broker.stop()


@pytest.mark.parametrize("level", [2, 1])
def test_kwire_consume_transform_produce_is_exactly_once(tmp_path, requests, level):
    broker = start_broker(tmp_path, level)
    try:
        with Producer({"bootstrap.servers": broker.bootstrap}) as source:
            for i in range(30):
                source.produce("in", b"%d" % i, partition=i % PARTITIONS)
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ctp"})
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ctp-group", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        try:
            p.init_transactions(10)
            c.subscribe(["in"])
            done, deadline, abort_next = 0, time.monotonic() + 60, True
            while done < 30:
                assert time.monotonic() < deadline, done
                records = c.poll(0.5)
                if not records:
                    continue
                p.begin_transaction()
                for r in records:
                    p.produce("out", r.value + b"!", partition=r.partition)
                offsets = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in records}
                p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 10)
                if abort_next:  # the first batch once aborted: read again from the last commit
                    p.abort_transaction(10)
                    abort_next = False
                    for tp in {TopicPartition(r.topic, r.partition) for r in records}:
                        committed = c.committed([tp])[tp]
                        c.seek(tp, committed.offset if committed is not None and committed.offset >= 0 else 0)
                    continue
                p.commit_transaction(10)
                done += len(records)
        finally:
            c.close()
            p.close()
        out = kwire_read_all(broker.bootstrap, "out", "read_committed")
        assert sorted(v for _, v in out) == sorted(b"%d!" % i for i in range(30))  # each once
        if level >= 2:
            assert requests.versions("TxnOffsetCommit") == {5} and not requests.versions("AddOffsetsToTxn")
        else:
            assert requests.versions("TxnOffsetCommit") == {4} and requests.versions("AddOffsetsToTxn") == {4}
    finally:
        broker.stop()


def test_confluent_kafka_and_kafka_python_on_a_v2_cluster(tmp_path, requests):
    broker = start_broker(tmp_path, 2)
    try:
        committed, aborted = values("ck"), values("ck-abort")
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ck",
                                      "linger.ms": 5, **QUIET})
        p.init_transactions(10)
        for batch, commit in ((committed, True), (aborted, False)):
            p.begin_transaction()
            for partition, value in batch:
                p.produce("mixed", value=value, partition=partition)
            c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ck-group", **QUIET})
            p.send_offsets_to_transaction([confluent_kafka.TopicPartition("mixed", 0, 1)],
                                          c.consumer_group_metadata(), 10)
            c.close()
            p.flush(10)
            p.commit_transaction(10) if commit else p.abort_transaction(10)
        # librdkafka 2.16 speaks transactions v1; the broker serves it as Kafka does, epoch kept.
        assert requests.versions("EndTxn") == {1} and requests.versions("AddPartitionsToTxn") == {0}
        assert requests.versions("TxnOffsetCommit") == {3} and max(requests.versions("Produce")) <= 11
        assert broker.state.transactions.describe("ck").producer_epoch == 0

        kp = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp", linger_ms=5)
        kp_committed, kp_aborted = values("kp"), values("kp-abort")
        kp.init_transactions()
        for batch, commit in ((kp_committed, True), (kp_aborted, False)):
            kp.begin_transaction()
            for partition, value in batch:
                kp.send("mixed", value=value, partition=partition)
            kp.flush()
            kp.commit_transaction() if commit else kp.abort_transaction()
        kp.close()
        check_isolation(broker.bootstrap, "mixed", committed + kp_committed, aborted + kp_aborted)
    finally:
        broker.stop()


def test_a_cluster_upgraded_to_v2_gets_a_bumped_epoch_then_v2_transactions(tmp_path, requests):
    """Java's clientSideEpochBumpRequired: the producer sees transaction.version 2 on a new
    connection; the v1 transaction it is in ends as v1, then InitProducerId bumps the epoch and
    the next transaction is v2."""
    data = tmp_path / "data"
    broker = start_broker(tmp_path, 1)
    port = broker.port
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "up", "reconnect.backoff.ms": 50})
    try:
        p.init_transactions(10)
        p.begin_transaction()
        p.produce("up", b"v1", partition=0)
        p.commit_transaction(10)
        assert requests.versions("EndTxn") == {4} and requests.seen[("InitProducerId", 5)] == 1
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.update_features({"transaction.version": 2})
        broker.stop()  # the producer's connections see the new level when they reconnect
        broker = EmbeddedBroker(data, port=port, default_partitions=PARTITIONS)
        broker.start()
        for value in (b"still-v1", b"v2"):
            p.begin_transaction()
            p.produce("up", value, partition=0)
            p.commit_transaction(30)
        txn = broker.state.transactions.describe("up")
        # epoch 0 (v1), bumped to 1 by InitProducerId after the last v1 transaction, 2 by EndTxn v5
        assert (txn.producer_epoch, txn.client_tv) == (2, 2)
        assert requests.versions("EndTxn") == {4, 5} and requests.seen[("InitProducerId", 5)] == 2
    finally:
        p.close()
        broker.stop()
    with EmbeddedBroker(data, default_partitions=PARTITIONS) as broker:
        assert sorted(v for _, v in kwire_read_all(broker.bootstrap, "up", "read_committed")) == [
            b"still-v1", b"v1", b"v2"]
