"""``Producer.produce_many`` / ``AsyncProducer.send_many`` against kwire's broker, read back by
confluent-kafka: keyless (sticky) and keyed records where single records would go, headers and
nulls, order with single records around them, batch bounds, records too large, compression,
idempotence, transactions, and an old broker's message sets."""

from __future__ import annotations

import asyncio
import uuid

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.producer import AsyncProducer, BulkDelivery, Producer
from kwire.client.producer_errors import RecordTooLargeError
from kwire.protocol.records import iter_batches

from .test_producer import PARTITIONS, QUIET, java_partition, read_back
from .test_producer_legacy import OldBroker, stored


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=PARTITIONS) as b:
        yield b


@pytest.fixture
def topic(request) -> str:
    return f"bulk-{request.node.name[:40]}-{uuid.uuid4().hex[:6]}".replace("[", "-").replace("]", "")


def stored_batches(broker: EmbeddedBroker, topic: str, partition: int) -> list:
    """The batches of one partition as the broker stored them (its log files, read directly)."""
    directory = broker.data_dir / f"{topic}-{partition}"
    return list(iter_batches(b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))))


def test_keyless_records_land_in_order_with_their_offsets(broker, topic):
    values = [b"value-%06d" % i for i in range(5000)]
    with Producer({"bootstrap.servers": broker.bootstrap, "batch.size": 20_000}) as producer:
        delivery = producer.produce_many(topic, values)
        assert producer.flush(30) == 0
    assert isinstance(delivery, BulkDelivery) and delivery.done()
    assert (delivery.delivered, delivery.failed, delivery.error) == (5000, 0, None)
    got = read_back(broker.bootstrap, topic, 5000)
    where = {g.value: (g.partition, g.offset) for g in got}
    assert delivery.offsets() == [where[v] for v in values]
    # Sticky: each batch in one partition, records in order within each partition.
    for p in range(PARTITIONS):
        mine = sorted((g.offset, g.value) for g in got if g.partition == p)
        assert [v for _, v in mine] == sorted(v for _, v in mine)
    summary = {s.partition: s for s in delivery.partitions()}
    assert sum(s.records for s in summary.values()) == 5000
    for s in summary.values():
        offsets = [g.offset for g in got if g.partition == s.partition]
        assert (s.first_offset, s.last_offset) == (min(offsets), max(offsets))
    assert len(summary) > 1, "sticky batches of 20 kB should have moved to another partition"


def test_keyed_records_go_where_java_puts_them_with_headers_and_nulls(broker, topic):
    keys = [b"key-%d" % (i % 37) for i in range(900)]
    values = [None if i % 10 == 0 else b"v%d" % i for i in range(900)]
    keys[5] = b""   # an empty key is a key (murmur2 of nothing)
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        delivery = producer.produce_many(topic, values, keys, headers=[("source", b"bulk"), ("nothing", None)])
        producer.flush(30)
    assert delivery.delivered == 900
    got = read_back(broker.bootstrap, topic, 900)
    by_partition = {p: sorted((g for g in got if g.partition == p), key=lambda g: g.offset) for p in range(PARTITIONS)}
    offsets = delivery.offsets()
    for p, records in by_partition.items():
        sent = [(keys[i], values[i]) for i in range(900) if java_partition(keys[i], PARTITIONS) == p]
        assert [(g.key, g.value) for g in records] == sent
        assert all(g.headers == (("source", b"bulk"), ("nothing", None)) for g in records)
    for i, (p, offset) in enumerate(offsets):
        assert p == java_partition(keys[i], PARTITIONS)
        assert any(g.offset == offset and g.key == keys[i] for g in by_partition[p])


def test_one_key_for_all_str_values_and_a_partition(broker, topic):
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        one_key = producer.produce_many(topic, ["caf\u00e9", b"x"], key="k")
        placed = producer.produce_many(topic, [b"p1", b"p2"], partition=(java_partition(b"k", PARTITIONS) + 1) % 3)
        producer.flush(30)
    got = {g.value: g for g in read_back(broker.bootstrap, topic, 4)}
    assert got["caf\u00e9".encode()].key == b"k" and got[b"x"].partition == java_partition(b"k", PARTITIONS)
    assert {got[b"p1"].partition, got[b"p2"].partition} == {placed.partitions()[0].partition}
    assert one_key.partitions()[0].records == 2


def test_bulk_calls_keep_their_order_with_single_records(broker, topic):
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50}) as producer:
        producer.produce(topic, b"a", partition=1)
        producer.produce_many(topic, [b"b", b"c"], partition=1)
        producer.produce(topic, b"d", partition=1)
        producer.produce_many(topic, [b"e"], partition=1)
        producer.flush(30)
    got = sorted(read_back(broker.bootstrap, topic, 5), key=lambda g: g.offset)
    assert [g.value for g in got] == [b"a", b"b", b"c", b"d", b"e"]


def test_batch_size_and_batch_num_messages_bound_the_batches(broker, topic):
    values = [b"%04d" % i + b"x" * 96 for i in range(1000)]
    with Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 64, "linger.ms": 0}) as producer:
        producer.produce_many(topic, values, partition=0)
        producer.flush(30)
    batches = stored_batches(broker, topic, 0)
    assert [b.record_count for b in batches] == [64] * 15 + [40]
    assert [r.value for b in batches for r in b] == values


def test_a_record_too_large_fails_alone(broker, topic):
    values = [b"small-1", b"x" * 50_000, b"small-2"]
    with Producer({"bootstrap.servers": broker.bootstrap, "max.request.size": 10_000}) as producer:
        delivery = producer.produce_many(topic, values, partition=0)
        producer.flush(30)
    assert (delivery.delivered, delivery.failed) == (2, 1)
    assert isinstance(delivery.error, RecordTooLargeError) and "max.request.size" in str(delivery.error)
    offsets = delivery.offsets()
    assert offsets[1] is None and offsets[0][1] + 1 == offsets[2][1]
    assert [g.value for g in read_back(broker.bootstrap, topic, 2)] == [b"small-1", b"small-2"]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_bulk_batches(broker, topic, codec):
    values = [b"compress me %d" % i for i in range(3000)]
    with Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec}) as producer:
        producer.produce_many(topic, values, partition=2)
        producer.flush(30)
    got = sorted(read_back(broker.bootstrap, topic, 3000), key=lambda g: g.offset)
    assert [g.value for g in got] == values


def test_idempotent_bulk_batches_carry_consecutive_sequences(broker, topic):
    with Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 100, "linger.ms": 0}) as producer:
        producer.produce_many(topic, [b"%d" % i for i in range(450)], partition=0)
        producer.produce(topic, b"single", partition=0)
        producer.flush(30)
    batches = stored_batches(broker, topic, 0)
    assert [(b.base_sequence, b.record_count) for b in batches] == [(0, 100), (100, 100), (200, 100), (300, 100),
                                                                    (400, 50), (450, 1)]
    assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1 and batches[0].producer_id >= 0


def test_a_transaction_commits_or_aborts_bulk_records(broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"bulk-{topic}"})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        aborted = producer.produce_many(topic, [b"aborted-%d" % i for i in range(100)])
        producer.abort_transaction(30)
        producer.begin_transaction()
        committed = producer.produce_many(topic, [b"committed-%d" % i for i in range(100)])
        producer.commit_transaction(30)
    finally:
        producer.close(10)
    assert aborted.done() and committed.delivered == 100
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{topic}",
                                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                         **QUIET})
    try:
        consumer.subscribe([topic])
        seen = []
        for _ in range(60):
            seen += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
            if len(seen) >= 100:
                break
    finally:
        consumer.close()
    assert sorted(seen) == sorted(b"committed-%d" % i for i in range(100))


def test_async_send_many_is_awaited(broker, topic):
    async def main():
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap}) as producer:
            delivery = await producer.send_many(topic, [b"a", b"b", b"c"], [b"1", b"2", b"3"])
            assert await delivery is delivery
            return delivery

    delivery = asyncio.run(main())
    assert delivery.delivered == 3 and all(o is not None for o in delivery.offsets())


def test_bad_columns_are_refused_by_name(broker, topic):
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        with pytest.raises(ValueError, match="2 keys for 3 values"):
            producer.produce_many(topic, [b"a", b"b", b"c"], [b"k", b"k"])
        with pytest.raises(ValueError, match="not both"):
            producer.produce_many(topic, [b"a"], [b"k"], key=b"k")
        with pytest.raises(TypeError, match="value 1"):
            producer.produce_many(topic, [b"a", 7])
        assert producer.produce_many(topic, []).done()


def test_an_old_broker_gets_bulk_records_as_message_sets():
    """A broker with only Produce v0-2 takes no record batches: the records go one by one into
    message sets (magic 1), and the delivery still counts them."""
    async def main():
        async with OldBroker((0, 2)) as old:
            async with AsyncProducer({"bootstrap.servers": old.bootstrap}) as producer:
                delivery = await producer.send_many("old", [b"old-%d" % i for i in range(50)], key=b"k",
                                                    timestamp_ms=7)
                await producer.flush(30)
            return old, delivery

    old, delivery = asyncio.run(asyncio.wait_for(main(), 60))
    assert delivery.delivered == 50
    partition = delivery.partitions()[0].partition
    assert delivery.offsets() == [(partition, i) for i in range(50)]
    assert stored(old, "old") == [(partition, 1, 0, b"k", b"old-%d" % i, 7) for i in range(50)]


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_0_and_1(broker, topic, acks):
    values = [b"a%d" % i for i in range(300)]
    with Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "enable.idempotence": False}) as producer:
        delivery = producer.produce_many(topic, values, partition=1)
        producer.flush(30)
    assert delivery.delivered == 300
    got = sorted(read_back(broker.bootstrap, topic, 300), key=lambda g: g.offset)
    assert [g.value for g in got] == values
    if acks == 0:  # nobody says where they went: offsets -1, as single records' metadata
        assert set(delivery.offsets()) == {(1, -1)}
        assert [(s.partition, s.records, s.first_offset, s.last_offset) for s in delivery.partitions()] == \
            [(1, 300, -1, -1)]
    else:
        assert delivery.offsets() == [(1, g.offset) for g in got]
