"""Compacted topics through the broker: Produce refuses keyless records for them (Kafka's
InvalidRecordException) without touching the request's other partitions, and a real client
(confluent-kafka) reads back the latest value of every key, at its offset, after the broker's
cleaner threads compacted the log."""

from __future__ import annotations

import time

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker
from kwire.broker.handlers.topic_admin import create_topic
from kwire.broker.storage.cleaner_checkpoint import read_cleaner_checkpoint
from kwire.protocol import messages
from kwire.protocol.errors import InvalidRecordError
from kwire.protocol.records import RecordBatchBuilder

from .conftest import serve


def _batch(*pairs) -> bytes:
    b = RecordBatchBuilder()
    for key, value in pairs:
        b.append(key, value, 1_700_000_000_000)
    return b.build()


def test_keyless_record_refused_for_the_compacted_partition_only(state):
    create_topic(state, "compacted", 1, {"cleanup.policy": "compact"})
    create_topic(state, "plain", 1, {})
    R = messages.ProduceRequest
    P = R.TopicProduceData.PartitionProduceData
    req = R(acks=-1, timeout_ms=1000, topic_data=[
        R.TopicProduceData(name="compacted", partition_data=[P(index=0, records=_batch((b"k", b"1"), (None, b"x")))]),
        R.TopicProduceData(name="plain", partition_data=[P(index=0, records=_batch((None, b"x")))]),
    ])
    resp = serve(state, req, 9)
    by_topic = {t.name: t.partition_responses[0] for t in resp.responses}
    assert by_topic["compacted"].error_code == InvalidRecordError.code
    assert "Compacted topic cannot accept message without key in topic partition compacted-0" \
        in by_topic["compacted"].error_message
    assert by_topic["plain"].error_code == 0
    assert state.logs.get("compacted", 0).log_end_offset == 0  # nothing of that batch stored
    assert state.logs.get("plain", 0).log_end_offset == 1


def _on_disk(broker: EmbeddedBroker, topic: str) -> int:
    return sum(p.stat().st_size for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def test_confluent_consumer_reads_the_compacted_topic(tmp_path):
    topic, keys, rounds = "compacted-e2e", 20, 15
    with EmbeddedBroker(tmp_path / "data", log_cleaner_backoff_ms=20) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # A dirty ratio no log passes (cleaning needs one above it) until the size before cleaning
        # has been read: the cleaner threads would otherwise clean while the records are written.
        config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0"}
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=30)
        # Kafka's floor for segment.bytes is 1 MiB: small segments are set on the log directly.
        log = broker.call(lambda: broker.state.logs.get(topic, 0))
        assert log.config.compact
        broker.call(lambda: broker.state.logs.set_topic_config(topic, log.config.with_(segment_bytes=2048)))

        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        produced: dict[int, tuple[bytes, bytes]] = {}

        def delivered(err, msg):
            assert err is None, err
            produced[msg.offset()] = (msg.key(), msg.value())

        for r in range(rounds):
            for k in range(keys):
                producer.produce(topic, key=f"key-{k}".encode(), value=f"value-{r}-{k}".encode().ljust(40, b"."),
                                 on_delivery=delivered)
            producer.flush(30)
        refused: list = []
        producer.produce(topic, key=None, value=b"no key", on_delivery=lambda err, msg: refused.append(err))
        producer.flush(30)
        assert refused and refused[0].code() == confluent_kafka.KafkaError.INVALID_RECORD
        assert read_cleaner_checkpoint(log.dir) is None  # nothing cleaned yet
        size_before = _on_disk(broker, topic)
        broker.call(lambda: log.roll())  # everything produced is now cleanable
        broker.call(lambda: broker.state.logs.set_topic_config(topic, log.config.with_(min_cleanable_dirty_ratio=0.01)))

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and read_cleaner_checkpoint(log.dir) != keys * rounds:
            time.sleep(0.05)
        assert read_cleaner_checkpoint(log.dir) == keys * rounds
        assert _on_disk(broker, topic) < size_before / 5

        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-compacted",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < keys and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.offset(), msg.key(), msg.value()))
        assert consumer.poll(1) is None
        consumer.close()

    latest = {}
    for offset in sorted(produced):
        latest[produced[offset][0]] = (offset, produced[offset][1])
    # One record per key, the last one written, at the offset the producer was told.
    assert sorted(got) == sorted((offset, key, value) for key, (offset, value) in latest.items())
    assert all(produced[offset] == (key, value) for offset, key, value in got)

