"""Records written by the pure-Python clients people use today (kafka-python, aiokafka) are
read back exactly by kwire's consumer, from kwire's broker; and kwire's producer's records by
aiokafka (confluent-kafka and kafka-python read them in test_producer.py)."""

from __future__ import annotations

import asyncio

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client import Consumer, Producer, TopicPartition
from tests.broker.clients import aiokafka_produce, kafka_python_produce, records

PARTITIONS = 3


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=PARTITIONS) as b:
        yield b


def read_all(bootstrap: str, topic: str, n: int) -> list:
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        got: list = []
        for _ in range(100):
            got += consumer.poll(0.2)
            if len(got) >= n:
                break
        got += consumer.poll(0.3)  # nothing more than was written
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("peer", ["kafka-python", "aiokafka"])
def test_kwire_consumer_reads_what_python_clients_wrote(broker, peer, codec):
    topic = f"interop-{peer}-{codec}"
    recs = records(topic, 150)
    if peer == "kafka-python":
        acked = kafka_python_produce(broker.bootstrap, topic, recs, compression_type=None if codec == "none" else codec)
    else:
        acked = asyncio.run(aiokafka_produce(broker.bootstrap, topic, recs,
                                             compression_type=None if codec == "none" else codec))
    got = read_all(broker.bootstrap, topic, len(recs))
    assert len(got) == len(recs)
    written = {(p, o): (k, v, list(h)) for (p, o), (k, v, h) in zip(acked, recs, strict=True)}
    assert {(r.partition, r.offset): (r.key, r.value, list(r.headers)) for r in got} == written
    for partition in range(PARTITIONS):
        offsets = [r.offset for r in got if r.partition == partition]
        assert offsets == sorted(offsets)


def test_aiokafka_reads_what_kwire_wrote(broker):
    import aiokafka

    topic = "interop-kwire-to-aiokafka"
    recs = records(topic, 200)
    with Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4"}) as producer:
        futures = [producer.produce(topic, v, key=k, headers=h) for k, v, h in recs]
        assert producer.flush(30) == 0
    written = {(f.result().partition, f.result().offset): rec for f, rec in zip(futures, recs, strict=True)}

    async def consume():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                             enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
            got = {}
            for _ in range(100):
                for tp, msgs in (await consumer.getmany(timeout_ms=200)).items():
                    for m in msgs:
                        got[(tp.partition, m.offset)] = (m.key, m.value, [(k, v) for k, v in m.headers])
                if len(got) >= len(recs):
                    break
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == written
