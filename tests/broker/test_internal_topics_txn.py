"""Transactions in Kafka's internal topics: send_offsets_to_transaction writes the offsets as a
transactional batch in the group's __consumer_offsets partition, made the group's by the commit
marker and dropped by the abort marker; the transaction coordinator's state is TransactionLog
records in __transaction_state; both hold after a restart, and an earlier kwire's
transactions.json is migrated once."""

from __future__ import annotations

import json
import logging
import time

import confluent_kafka
import kafka

from kwire.broker import EmbeddedBroker
from kwire.broker.internal_topics import partition_for
from kwire.broker.topics import META_DIR
from kwire.protocol import messages
from kwire.protocol.coordinator_records import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    TransactionStatus,
    decode_key,
    decode_value,
)
from kwire.protocol.records import iter_batches

QUIET = {"log_level": 3}


def _seed(bootstrap: str, n: int = 10) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(n):
        p.produce("in", value=b"%d" % i)
    assert p.flush(10) == 0


def _committed(bootstrap: str, group: str) -> int:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        return c.committed([confluent_kafka.TopicPartition("in", 0)], 10)[0].offset
    finally:
        c.close()


def _batches(broker: EmbeddedBroker, topic: str, partition: int):
    log = broker.state.logs.get(topic, partition)
    data = b"".join(s.read() for s in log.read(log.log_start_offset, 1 << 20))
    return list(iter_batches(data))


def test_send_offsets_to_transaction_commits_and_aborts_through_markers(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data, default_partitions=1) as broker:
        _seed(broker.bootstrap)
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "txg",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                             **QUIET})
        consumer.subscribe(["in"])
        deadline = time.monotonic() + 15
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-1",
                                             **QUIET})
        producer.init_transactions(10)
        for position, commit in ((4, True), (9, False)):
            producer.begin_transaction()
            producer.produce("out", value=b"x")
            producer.send_offsets_to_transaction([confluent_kafka.TopicPartition("in", 0, position)],
                                                 consumer.consumer_group_metadata(), 10)
            (producer.commit_transaction if commit else producer.abort_transaction)(10)
        consumer.close()
        producer.flush(5)
        assert _committed(broker.bootstrap, "txg") == 4

        # In the group's partition: each TxnOffsetCommit a transactional batch, each followed by
        # its producer's marker (COMMIT for the first, ABORT for the second).
        partition = partition_for("txg", 50)
        seen = []
        for batch in _batches(broker, OFFSETS_TOPIC, partition):
            if batch.is_control:
                seen.append(("commit" if batch.records()[0].is_commit else "abort", batch.producer_id))
            elif batch.is_transactional:
                for record in batch.records():
                    key = decode_key(record.key, OFFSETS_TOPIC)
                    seen.append(("offset", key.group, key.topic, key.partition,
                                 decode_value(key, record.value).offset, batch.producer_id))
        pid = broker.state.transactions.describe("tx-1").producer_id
        assert seen == [("offset", "txg", "in", 0, 4, pid), ("commit", pid),
                        ("offset", "txg", "in", 0, 9, pid), ("abort", pid)]

        # The transaction coordinator's state: TransactionLog records of tx-1 in its partition,
        # the group's __consumer_offsets partition among the transaction's partitions.
        states = []
        for batch in _batches(broker, TRANSACTION_STATE_TOPIC, partition_for("tx-1", 50)):
            for record in batch.records():
                key = decode_key(record.key, TRANSACTION_STATE_TOPIC)
                assert key.transactional_id == "tx-1"
                value = decode_value(key, record.value)
                states.append((TransactionStatus(value.transaction_status), value.producer_id,
                               {(p.topic, i) for p in value.transaction_partitions or [] for i in p.partition_ids}))
        assert states[-1][:2] == (TransactionStatus.COMPLETE_ABORT, pid)
        ongoing = [parts for status, _, parts in states if status is TransactionStatus.ONGOING]
        assert ongoing and (OFFSETS_TOPIC, partition) in ongoing[-1]

    with EmbeddedBroker(data, default_partitions=1) as broker:  # a restart: the committed offset, never the aborted
        assert broker.wait_loaded()  # (the coordinators load after start; the state is read directly below)
        assert _committed(broker.bootstrap, "txg") == 4
        assert broker.state.coordinator.pending_txn_partitions("txg") == set()
        txn = broker.state.transactions.describe("tx-1")
        assert txn.state.value == "CompleteAbort" and txn.producer_id == pid
        # The producer id goes on with the next epoch.
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-1",
                                             **QUIET})
        producer.init_transactions(10)
        assert broker.state.transactions.describe("tx-1").producer_id == pid


def test_an_open_transactions_offsets_commit_after_a_restart(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data, default_partitions=1) as broker:
        _seed(broker.bootstrap)
        port = broker.port
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="tx-2")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({kafka.TopicPartition("in", 0): kafka.structs.OffsetAndMetadata(7, "", -1)},
                                             "grp2")
        assert broker.state.coordinator.pending_txn_partitions("grp2") == {("in", 0)}
        producer.close(timeout=5)  # leaves the transaction open, as Kafka's producers do
        assert broker.state.transactions.describe("tx-2").state.value == "Ongoing"
    with EmbeddedBroker(data, port=port, default_partitions=1) as broker:
        assert broker.wait_loaded()
        txn = broker.state.transactions.describe("tx-2")
        assert txn.state.value == "Ongoing" and txn.groups == {"grp2"}  # found again from the offsets topic
        assert broker.state.coordinator.pending_txn_partitions("grp2") == {("in", 0)}
        assert broker.call(broker.state.transactions.end_txn, "tx-2", txn.producer_id, txn.producer_epoch,
                           True).error == 0
        assert _committed(broker.bootstrap, "grp2") == 7
    with EmbeddedBroker(data, default_partitions=1) as broker:
        assert _committed(broker.bootstrap, "grp2") == 7


def test_transactions_json_of_an_earlier_kwire_is_migrated_once(tmp_path, caplog):
    data = tmp_path / "data"
    (data / META_DIR).mkdir(parents=True)
    legacy = {"version": 1, "transactions": [
        {"id": "old-tx", "pid": 1234, "epoch": 3, "last_pid": -1, "last_epoch": -1, "timeout_ms": 60000,
         "state": "CompleteCommit", "partitions": [], "groups": [], "start_ms": 5, "update_ms": 6}]}
    path = data / META_DIR / "transactions.json"
    path.write_text(json.dumps(legacy))
    caplog.set_level(logging.INFO, logger="kwire.broker.transactions")
    with EmbeddedBroker(data) as broker:
        assert broker.wait_loaded()
        txn = broker.state.transactions.describe("old-tx")
        assert (txn.producer_id, txn.producer_epoch, txn.state.value) == (1234, 3, "CompleteCommit")
    assert len([r for r in caplog.records if "to __transaction_state" in r.getMessage()]) == 1
    assert not path.exists() and path.with_name("transactions.json.migrated").exists()
    caplog.clear()
    with EmbeddedBroker(data) as broker:
        assert broker.wait_loaded()
        assert broker.state.transactions.describe("old-tx").producer_epoch == 3
        records = [decode_key(r.key, TRANSACTION_STATE_TOPIC)
                   for b in _batches(broker, TRANSACTION_STATE_TOPIC, partition_for("old-tx", 50)) for r in b.records()]
        assert records == [messages.TransactionLogKey(transactional_id="old-tx")]  # written once
    assert not [r for r in caplog.records if "to __transaction_state" in r.getMessage()]


def test_offsets_staged_for_a_topic_deleted_before_the_commit_stay_deleted_after_a_restart(state):
    from .conftest import serve
    from .test_transactions_handlers import add_offsets, create, end_txn, init, reopen, txn_offset_commit

    create(state, "gone", 1)
    create(state, "kept", 1)
    _, pid, epoch = init(state, "tx")
    assert add_offsets(state, "tx", pid, epoch, "g") == 0
    assert txn_offset_commit(state, "tx", pid, epoch, "g", {("gone", 0): 5, ("kept", 0): 6}) == {
        ("gone", 0): 0, ("kept", 0): 0}
    delete = messages.DeleteTopicsRequest(topic_names=["gone"], timeout_ms=1000)
    assert serve(state, delete, 4).responses[0].error_code == 0
    assert end_txn(state, "tx", pid, epoch, True) == 0
    assert [(t, p) for t, p, _ in state.coordinator.fetch_offsets("g", None)] == [("kept", 0)]
    state = reopen(state)
    try:
        create(state, "gone", 1)  # a new topic of that name starts without the old offsets
        assert [(t, p, c.offset) for t, p, c in state.coordinator.fetch_offsets("g", None)] == [("kept", 0, 6)]
    finally:
        state.close()
