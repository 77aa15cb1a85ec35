"""Whole fetched batches out of the consumer (``getbatches`` / ``poll_batches``): the records
they hold are exactly those ``getmany`` would give, positions move past each batch, a seek into
a batch says where the application's records start, ``getmany`` and ``getbatches`` mix without
losing or repeating a record, and markers, aborted transactions and legacy message sets are
handled as ``getmany`` handles them."""

from __future__ import annotations

import asyncio

import pytest

from kwire.client.consumer import AsyncConsumer, Consumer
from kwire.client.types import ConsumerRecord, FetchedBatch, TopicPartition
from kwire.protocol.records.legacy import LegacyMessageSetBuilder

from .test_consumer_records import (
    CODECS,
    _batch,
    as_tuple,
    broker,
    fetcher_holding,
    mock_bootstrap,
    produce,
    quick,
    run,
    sample_records,
    transaction_log,
)

__all__ = ["broker", "mock_bootstrap"]  # fixtures


def _records_of(items: list[FetchedBatch]) -> list[ConsumerRecord]:
    """The application's records of fetched batches, decoded with the consumer's own decoder."""
    out = []
    for item in items:
        if item.batch is None:
            out += item.records
        else:
            tp = item.tp
            out += [r for r in item.batch.records((ConsumerRecord, tp.topic, tp.partition)) if r.offset >= item.start]
    return out


async def _batches_until(consumer: AsyncConsumer, n: int, *, max_records: int | None = None,
                         timeout: float = 20) -> list[FetchedBatch]:
    items: list[FetchedBatch] = []
    deadline = asyncio.get_running_loop().time() + timeout
    while sum(len(_records_of([i])) for i in items) < n and asyncio.get_running_loop().time() < deadline:
        items += await consumer.getbatches(timeout_ms=200, max_records=max_records)
    return items


def test_batches_hold_exactly_the_produced_records_for_every_codec(broker):
    topic = "batches-codecs"
    acked = []
    for codec in CODECS:
        acked += produce(broker.bootstrap, topic, [(*r, i % 2) for i, r in enumerate(sample_records(150, codec))],
                         **{"compression.type": codec})

    async def main():
        async with AsyncConsumer(quick(broker.bootstrap, auto_offset_reset="earliest")) as c:
            tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
            c.assign(tps)
            items = await _batches_until(c, len(acked), max_records=100)
            return items, {tp: await c.position(tp) for tp in tps}, await c.end_offsets(tps)

    items, positions, ends = run(main())
    got = _records_of(items)
    assert sorted(as_tuple(r) for r in got) == sorted(acked)
    assert all(i.batch is not None for i in items)  # kwire's broker stores v2 batches only
    assert positions == ends
    # Batches come whole: never more than one batch beyond max_records per call, and the
    # positions a batch leaves behind are its next offset.
    for tp in positions:
        offsets = [r.offset for r in got if r.partition == tp.partition]
        assert offsets == sorted(offsets) and len(offsets) == len(set(offsets))


def test_a_seek_into_a_batch_starts_the_applications_records_there(broker):
    topic = "batches-seek"
    acked = produce(broker.bootstrap, topic, [(None, b"v%d" % i, [], 0) for i in range(50)], **{"linger.ms": 50})

    async def main():
        async with AsyncConsumer(quick(broker.bootstrap)) as c:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 17)
            return await _batches_until(c, 33)

    items = run(main())
    first = items[0]
    assert first.start == 17
    assert first.batch.base_offset < 17 <= first.batch.last_offset  # one batch holds them all
    assert [r.value for r in _records_of(items)] == [v for _, _, _, v, _ in acked[17:]]


def test_getmany_then_getbatches_neither_loses_nor_repeats_a_record(broker):
    topic = "batches-mixed"
    acked = produce(broker.bootstrap, topic, [(None, b"m%d" % i, [], 0) for i in range(300)])

    async def main():
        async with AsyncConsumer(quick(broker.bootstrap, auto_offset_reset="earliest")) as c:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            head = []
            while not head:
                head = await c.getmany(timeout_ms=200, max_records=5)
            items = await _batches_until(c, len(acked) - len(head))
            tail = await c.getmany(timeout_ms=300)
            return head, items, tail, await c.position(tp)

    head, items, tail, position = run(main())
    assert len(head) == 5
    # The rest of the batch getmany began comes first, decoded; then whole batches.
    assert items[0].batch is None and items[0].start == 5
    assert all(i.batch is not None for i in items[1:])
    values = [r.value for r in head + _records_of(items) + tail]
    assert values == [v for _, _, _, v, _ in acked]
    assert position == 300


def test_the_sync_consumer_steps_over_transaction_markers(mock_bootstrap):
    """librdkafka's transactional producer against its mock: markers take offsets in the log,
    and never come out as batches."""
    import confluent_kafka

    topic = "batches-txn"
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_bootstrap, "transactional.id": "kwire-b1",
                                         "log_level": 0})
    producer.init_transactions(10)
    values = []
    for txn in range(3):
        producer.begin_transaction()
        for i in range(4):
            values.append(b"t%d-%d" % (txn, i))
            producer.produce(topic, value=values[-1], partition=0)
        producer.commit_transaction(10)
    tp = TopicPartition(topic, 0)
    with Consumer(**quick(mock_bootstrap, auto_offset_reset="earliest", check_crcs=False)) as c:
        c.assign([tp])
        items: list[FetchedBatch] = []
        for _ in range(50):
            items += c.poll_batches(timeout=0.2)
            if c.position(tp) >= 15:
                break
        assert all(not i.batch.is_control for i in items)
        got = _records_of(items)
        assert [r.value for r in got] == values
        assert [r.offset for r in got] == [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13]
        assert c.position(tp) == 15


async def _batches_from_bytes(records: bytes, aborted, isolation: str, max_records: int = 100):
    """Sans-IO, as test_consumer_records: every drain_batches call's items until none are left."""
    fetcher, state = fetcher_holding(records, aborted, isolation, end=99)
    calls = []
    while True:
        items = fetcher.drain_batches(max_records)
        if not items:
            return calls, state.position
        calls.append(items)


def test_read_committed_batches_leave_out_aborted_transactions_and_markers():
    log, aborted = transaction_log()
    for isolation, expected in (("read_committed", [b"c0", b"c1", b"plain", b"a2"]),
                                ("read_uncommitted", [b"c0", b"c1", b"a0", b"a1", b"plain", b"a2"])):
        calls, position = asyncio.run(_batches_from_bytes(log, aborted, isolation))
        items = [i for call in calls for i in call]
        assert [r.value for r in _records_of(items)] == expected
        assert all(i.batch is not None and not i.batch.is_control for i in items)
        assert position == 9


def test_max_records_bounds_whole_batches_but_one_always_comes():
    log = b"".join([_batch(0, [b"a"] * 10), _batch(10, [b"b"] * 10), _batch(20, [b"c"] * 10)])
    calls, position = asyncio.run(_batches_from_bytes(log, [], "read_uncommitted", max_records=15))
    assert [[i.batch.base_offset for i in call] for call in calls] == [[0, 10], [20]]
    calls, _ = asyncio.run(_batches_from_bytes(log, [], "read_uncommitted", max_records=1))
    assert [[i.batch.base_offset for i in call] for call in calls] == [[0], [10], [20]]
    assert position == 30


@pytest.mark.parametrize(("magic", "codec"), [(0, 0), (1, 0), (1, 1), (1, 2)])
def test_legacy_message_sets_come_out_decoded(magic: int, codec: int):
    """Message format v0/v1 (a Kafka 0.10 log), which kwire's broker does not store: built with
    kwire's codec and put through the fetcher's response path."""
    builder = LegacyMessageSetBuilder(magic, compression=codec, base_offset=0)
    for i in range(6):
        builder.append(b"k%d" % i, b"v%d" % i, timestamp=1_700_000_000_000 + i)
    log = builder.build() + _batch(6, [b"v6", b"v7"])
    calls, position = asyncio.run(_batches_from_bytes(log, [], "read_uncommitted"))
    items = [i for call in calls for i in call]
    assert items[0].batch is None and items[0].start == 0
    assert items[-1].batch is not None and items[-1].start == 6
    assert [r.value for r in _records_of(items)] == [b"v%d" % i for i in range(8)]
    assert position == 8
