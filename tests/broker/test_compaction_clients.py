"""Compacted topics as each real client sees them (Kafka's log compaction semantics): the topic is
created through the client's own admin API with cleanup.policy=compact, the client writes key
updates and tombstones, the broker's cleaner threads compact the log, and the client reads from the
beginning the latest value of every live key, at the offset its producer was told, with the deleted
keys gone once delete.retention.ms has passed, and the files on disk smaller."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import kafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker
from kwire.broker.storage.cleaner_checkpoint import read_cleaner_checkpoint

KEYS, ROUNDS, DELETED = 12, 8, (0, 5, 11)
# Kafka's own test setting for segments under segment.bytes' 1 MiB floor; a dirty ratio no log
# passes (cleaning needs a ratio above it) until the test lowers it, so the size before cleaning is
# measured whole; tombstones removed by the first clean after the one that saw them.
CONFIGS = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0", "internal.segment.bytes": "2048",
           "delete.retention.ms": "0"}


def _writes() -> list[tuple[bytes, bytes | None]]:
    out: list[tuple[bytes, bytes | None]] = []
    for r in range(ROUNDS):
        out += [(f"key-{k}".encode(), f"value-{r}-{k}".encode().ljust(60, b".")) for k in range(KEYS)]
    out += [(f"key-{k}".encode(), None) for k in DELETED]
    return out


# -- each client: create the topic, write, read back ----------------------------------------------
def _confluent(bootstrap: str, topic: str, writes, step) -> list[tuple[int, bytes, bytes | None]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures die with it
    admin.create_topics([NewTopic(topic, 1, 1, config=CONFIGS)])[topic].result(timeout=30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    offsets: list[int] = []
    for key, value in writes:
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()))
        producer.flush(30)
    step()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + 20
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None and got:
            break
        if msg is not None and not msg.error():
            got.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    return offsets, got


def _kafka_python(bootstrap: str, topic: str, writes, step):
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([kafka.admin.NewTopic(topic, num_partitions=1, replication_factor=1, topic_configs=CONFIGS)])
    admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    offsets = [producer.send(topic, key=key, value=value).get(timeout=30).offset for key, value in writes]
    producer.close()
    step()
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=1500)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [(m.offset, m.key, m.value) for m in consumer]
    consumer.close()
    return offsets, got


def _aiokafka(bootstrap: str, topic: str, writes, step):
    async def write() -> list[int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(topic, 1, 1, topic_configs=CONFIGS)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        await producer.start()
        try:
            return [(await producer.send_and_wait(topic, key=key, value=value)).offset for key, value in writes]
        finally:
            await producer.stop()

    async def read() -> list:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list = []
            for _ in range(40):
                batches = await consumer.getmany(tp, timeout_ms=500)
                if not batches and got:
                    break
                got += [(m.offset, m.key, m.value) for m in batches.get(tp, [])]
            return got
        finally:
            await consumer.stop()

    offsets = asyncio.run(write())
    step()
    return offsets, asyncio.run(read())


@pytest.mark.parametrize("client", [_confluent, _kafka_python, _aiokafka], ids=["confluent-kafka", "kafka-python",
                                                                                 "aiokafka"])
def test_each_client_reads_the_latest_value_of_every_live_key_after_cleaning(tmp_path, client):
    topic, writes = "compacted", _writes()
    with EmbeddedBroker(tmp_path / "data", log_cleaner_backoff_ms=20) as broker:
        sizes = {}

        def compact() -> None:
            """Make everything cleanable, then wait (bounded) until the cleaner has cleaned it
            all and a second pass has removed the tombstones (delete.retention.ms is 0)."""
            log = broker.call(lambda: broker.state.logs.get(topic, 0))
            assert read_cleaner_checkpoint(log.dir) is None  # nothing cleaned yet
            sizes["before"] = log.size_in_bytes
            broker.call(log.roll)
            broker.call(lambda: broker.state.logs.set_topic_config(
                topic, log.config.with_(min_cleanable_dirty_ratio=0.01)))
            end = len(writes)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if read_cleaner_checkpoint(log.dir) == end and _tombstones_gone(log):
                    break
                time.sleep(0.05)
            sizes["after"] = log.size_in_bytes

        offsets, got = client(broker.bootstrap, topic, writes, compact)

    assert -1 not in offsets and offsets == list(range(len(writes)))
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (key, value) in zip(offsets, writes, strict=True):
        latest[key] = (offset, value)
    expected = sorted((offset, key, value) for key, (offset, value) in latest.items() if value is not None)
    assert sorted(got) == expected
    assert len(expected) == KEYS - len(DELETED)
    assert sizes["after"] < sizes["before"] / 4


def _tombstones_gone(log) -> bool:
    from kwire.protocol.records import iter_batches

    data = b"".join(s.read() for s in log.read(log.log_start_offset, 1 << 24))
    return not any(r.value is None for b in iter_batches(data) for r in b.records())
