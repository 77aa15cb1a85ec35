"""The group coordinator's state in __consumer_offsets, as Kafka's records: what real clients
commit is readable by a plain consumer of the topic with Kafka's schemas, is served again after
a restart, and a data dir with the journal of an earlier kwire is migrated once."""

from __future__ import annotations

import asyncio
import logging
import time

import aiokafka
import aiokafka.structs
import confluent_kafka
import confluent_kafka.admin
import kafka
import kafka.structs

from kwire.broker import EmbeddedBroker
from kwire.broker.coordinator import GroupStore
from kwire.broker.coordinator.coordinator import GROUPS_DIR
from kwire.broker.coordinator.offsets import CommittedOffset
from kwire.broker.coordinator.store import JOURNAL_NAME, GroupRecord, MemberRecord
from kwire.broker.internal_topics import partition_for
from kwire.broker.topics import META_DIR
from kwire.protocol import messages
from kwire.protocol.coordinator_records import OFFSETS_TOPIC, decode_key, decode_value

TOPIC = "orders"
PARTITIONS = 3


def _commit_with_confluent(bootstrap: str) -> None:
    """A subscribed consumer group (JoinGroup/SyncGroup: a GroupMetadata record) commits."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g-confluent",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 20
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)
        assert c.assignment(), "no assignment"
        c.commit(offsets=[confluent_kafka.TopicPartition(TOPIC, 0, 5, metadata="from-librdkafka"),
                          confluent_kafka.TopicPartition(TOPIC, 1, 6)], asynchronous=False)
    finally:
        c.close()


def _commit_with_kafka_python(bootstrap: str) -> None:
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id="g-kafka-python", enable_auto_commit=False)
    try:
        c.assign([kafka.TopicPartition(TOPIC, 2)])
        c.commit({kafka.TopicPartition(TOPIC, 2): kafka.structs.OffsetAndMetadata(7, "from-kafka-python", -1)})
    finally:
        c.close()


def _commit_with_aiokafka(bootstrap: str) -> None:
    async def scenario():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="g-aiokafka", enable_auto_commit=False)
        await c.start()
        try:
            tp = aiokafka.TopicPartition(TOPIC, 0)
            c.assign([tp])
            await c.commit({tp: aiokafka.structs.OffsetAndMetadata(8, "from-aiokafka")})
        finally:
            await c.stop()

    asyncio.run(scenario())


EXPECTED = {  # (group, topic, partition) -> (offset, metadata)
    ("g-confluent", TOPIC, 0): (5, "from-librdkafka"),
    ("g-confluent", TOPIC, 1): (6, ""),
    ("g-kafka-python", TOPIC, 2): (7, "from-kafka-python"),
    ("g-aiokafka", TOPIC, 0): (8, "from-aiokafka"),
}


def _read_offsets_topic(bootstrap: str, partitions: list[int]) -> list:
    """Every record of these partitions of __consumer_offsets, with a plain consumer (no group)."""
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                            auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        tps = [kafka.TopicPartition(OFFSETS_TOPIC, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        got = []
        deadline = time.monotonic() + 20
        while any(c.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                got.extend(records)
        return got
    finally:
        c.close()


def test_commits_of_three_clients_are_kafka_records_and_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    started = int(time.time() * 1000)
    with EmbeddedBroker(data) as broker:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(timeout=15)
        _commit_with_confluent(broker.bootstrap)
        _commit_with_kafka_python(broker.bootstrap)
        _commit_with_aiokafka(broker.bootstrap)

        groups = {g for g, _, _ in EXPECTED}
        partitions = sorted({partition_for(g, 50) for g in groups})
        commits = {}
        group_records = {}
        for record in _read_offsets_topic(broker.bootstrap, partitions):
            key = decode_key(record.key, OFFSETS_TOPIC)
            value = decode_value(key, record.value)
            assert record.partition == partition_for(key.group, 50)  # Kafka's placement
            if isinstance(key, messages.OffsetCommitKey):
                commits[(key.group, key.topic, key.partition)] = value
            elif isinstance(key, messages.GroupMetadataKey) and value is not None:
                group_records.setdefault(key.group, []).append(value)
        # (confluent-kafka sends a str metadata with its C string's NUL; Kafka stores it so too.)
        assert {k: (v.offset, v.metadata.rstrip("\x00")) for k, v in commits.items()} == EXPECTED
        assert all(started <= v.commit_timestamp <= int(time.time() * 1000) for v in commits.values())
        # The subscribed group's generation, protocol and assignment are there too, and its
        # last record is the group left Empty by the consumer's close.
        stable = [g for g in group_records["g-confluent"] if g.members]
        assert stable and stable[-1].protocol_type == "consumer" and stable[-1].protocol
        assert stable[-1].generation >= 1 and stable[-1].members[0].assignment
        assert group_records["g-confluent"][-1].members == []

    with EmbeddedBroker(data) as broker:  # a restart: every group's offsets come from the topic
        # kafka-python's admin raises COORDINATOR_LOAD_IN_PROGRESS (as against Kafka) rather than
        # retrying it: wait for the coordinators' load after start.
        assert broker.wait_loaded()
        admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            for group in groups:
                served = admin.list_group_offsets({group: None})[group]
                want = {(t, p): v for (g, t, p), v in EXPECTED.items() if g == group}
                assert {(tp.topic, tp.partition): (om.offset, om.metadata.rstrip("\x00"))
                        for tp, om in served.items()} == want
        finally:
            admin.close()
        assert not (data / META_DIR / GROUPS_DIR / JOURNAL_NAME).exists()  # no journal any more


def _write_old_journal(data_dir) -> None:
    """A journal as kwire before __consumer_offsets left it (written by its store)."""
    store = GroupStore(data_dir / META_DIR / GROUPS_DIR)
    store.put_group(GroupRecord("old-group", "consumer", 4, "range", "m-1", "Empty", 1_700_000_000_000, ()))
    store.put_offsets("old-group", {(TOPIC, 0): CommittedOffset(40, 2, "kept", 1_700_000_000_001),
                                    (TOPIC, 1): CommittedOffset(41, -1, "", 1_700_000_000_002)})
    store.put_offsets("solo", {(TOPIC, 2): CommittedOffset(9, -1, "", 1_700_000_000_003)})
    store.put_offsets("gone", {(TOPIC, 2): CommittedOffset(1, -1, "", 1_700_000_000_004)})
    store.delete_group("gone")
    store.put_group(GroupRecord("with-members", "consumer", 2, "range", "m-1", "Stable", 1_700_000_000_005,
                                (MemberRecord("m-1", None, "c", "/127.0.0.1", 300, 10, b"sub", b"asg"),)))
    store.close()


def _served(bootstrap: str, group: str) -> dict:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {(tp.topic, tp.partition): (om.offset, om.metadata)
                for tp, om in admin.list_group_offsets({group: None})[group].items()}
    finally:
        admin.close()


def test_the_journal_of_an_earlier_kwire_is_migrated_once(tmp_path, caplog):
    data = tmp_path / "data"
    with EmbeddedBroker(data) as broker:  # the topics the journal's offsets belong to
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(timeout=15)
    _write_old_journal(data)
    journal = data / META_DIR / GROUPS_DIR / JOURNAL_NAME
    caplog.set_level(logging.INFO, logger="kwire.broker.coordinator")

    with EmbeddedBroker(data) as broker:
        migrations = [r for r in caplog.records if "to __consumer_offsets" in r.getMessage()]
        assert len(migrations) == 1 and migrations[0].levelno == logging.INFO
        assert _served(broker.bootstrap, "old-group") == {(TOPIC, 0): (40, "kept"), (TOPIC, 1): (41, "")}
        assert _served(broker.bootstrap, "solo") == {(TOPIC, 2): (9, "")}
        assert _served(broker.bootstrap, "gone") == {}
        assert broker.state.coordinator.group("old-group").generation_id == 4
        assert broker.state.coordinator.group("with-members").generation_id == 2
        offsets_log = broker.state.logs.get(OFFSETS_TOPIC, partition_for("old-group", 50))
        end = offsets_log.log_end_offset
    assert not journal.exists() and journal.with_name(JOURNAL_NAME + ".migrated").exists()

    caplog.clear()
    with EmbeddedBroker(data) as broker:  # no second migration: the topic alone
        assert broker.wait_loaded()  # (see above: kafka-python's admin does not retry a loading group)
        assert not [r for r in caplog.records if "to __consumer_offsets" in r.getMessage()]
        assert _served(broker.bootstrap, "old-group") == {(TOPIC, 0): (40, "kept"), (TOPIC, 1): (41, "")}
        assert broker.state.logs.get(OFFSETS_TOPIC, partition_for("old-group", 50)).log_end_offset == end


def test_a_migration_interrupted_before_the_rename_is_done_again(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data) as broker:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(timeout=15)
    _write_old_journal(data)
    journal = data / META_DIR / GROUPS_DIR / JOURNAL_NAME
    saved = journal.read_bytes()
    with EmbeddedBroker(data):
        pass
    # A crash after the records were written, before the journal was renamed: it is still there.
    journal.with_name(JOURNAL_NAME + ".migrated").unlink()
    journal.write_bytes(saved)
    with EmbeddedBroker(data) as broker:
        assert _served(broker.bootstrap, "old-group") == {(TOPIC, 0): (40, "kept"), (TOPIC, 1): (41, "")}
        assert _served(broker.bootstrap, "solo") == {(TOPIC, 2): (9, "")}
    assert not journal.exists()
