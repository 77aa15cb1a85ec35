"""The producer's batches keep single records as columns and encode them when first sent: the
bytes must be exactly what ``RecordBatchBuilder`` (the reference encoder) writes for the same
records, whatever their timestamps, nulls and headers, and for message sets too."""

from __future__ import annotations

import gc
import random

import pytest

from kwire.client import accumulator
from kwire.client.accumulator import ProducerBatch, RecordAccumulator, record_size
from kwire.client.types import TopicPartition
from kwire.protocol.records import Compression, LegacyMessageSetBuilder, RecordBatchBuilder, iter_batches

TP = TopicPartition("t", 0)


def sample(n: int, *, seed: int = 1, headers: bool = False) -> list[tuple]:
    rnd = random.Random(seed)
    ts = 1_700_000_000_000
    out = []
    for i in range(n):
        # Runs of one timestamp, steps forward, and now and then one back (a user's timestamp).
        ts += rnd.choice((0, 0, 0, 1, 3, 20_000, -5))
        key = None if i % 7 == 3 else b"user-%d" % rnd.randrange(1000)
        value = None if i % 11 == 5 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
        hdrs = [("h", b"%d" % i), ("n", None)] if headers and i % 3 == 0 else None
        out.append((key, value, ts, hdrs))
    return out


def batch_of(records: list[tuple]) -> ProducerBatch:
    batch = ProducerBatch(TP, 0.0, 1.0)
    for i, (key, value, ts, headers) in enumerate(records):
        batch.add(key, value, ts, headers, i)
    return batch


@pytest.mark.parametrize("runs", [True, False], ids=["compiled-runs", "builder"])
@pytest.mark.parametrize("headers", [False, True], ids=["no-headers", "headers"])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4, Compression.GZIP])
def test_a_batch_encodes_as_the_reference_builder(codec, headers, runs, monkeypatch):
    if runs:
        assert accumulator._RUNS, "the compiled encoder is not built"
    monkeypatch.setattr(accumulator, "_RUNS", runs)
    records = sample(500, headers=headers)
    batch = batch_of(records)
    batch.set_producer_state(7, 2, 40)
    builder = RecordBatchBuilder(compression=codec, producer_id=7, producer_epoch=2, base_sequence=40)
    builder.extend(records)
    assert batch.encode(codec, 2) == builder.build()
    got = list(iter_batches(batch.encode(codec, 2)))
    assert len(got) == 1
    assert [(r[1], r[2], r[3]) for r in got[0].records()] == [(ts, key, value) for key, value, ts, _ in records]


def test_one_record_and_a_transactional_batch():
    records = [(None, b"only", 5, None)]
    batch = batch_of(records)
    batch.set_producer_state(3, 0, 0)
    builder = RecordBatchBuilder(producer_id=3, producer_epoch=0, base_sequence=0, transactional=True)
    builder.extend(records)
    assert batch.encode(Compression.NONE, 2, transactional=True) == builder.build()


@pytest.mark.parametrize("magic", [0, 1])
def test_message_sets_take_the_columns_too(magic):
    records = sample(50)
    batch = batch_of(records)
    builder = LegacyMessageSetBuilder(magic, compression=Compression.NONE)
    for key, value, ts, _ in records:
        builder.append(key, value, ts if magic else None)
    assert batch.encode(Compression.NONE, magic) == builder.build()


def test_headers_arriving_late_line_up_with_their_records():
    records = [(b"a", b"1", 10, None), (b"b", b"2", 10, None), (b"c", b"3", 11, [("x", b"y")]), (b"d", b"4", 11, None)]
    batch = batch_of(records)
    assert batch.headers == [None, None, [("x", b"y")], None]
    assert list(batch.records()) == records


def test_queued_records_hold_no_object_per_record_for_the_collector():
    acc = RecordAccumulator(batch_size=1 << 20, linger=0.0, delivery_timeout=60.0, buffer_memory=1 << 30)
    records = sample(2000, seed=3)
    tokens = [object() for _ in records]  # untracked stand-ins for the futures
    before = len(gc.get_objects())
    for (key, value, ts, headers), token in zip(records, tokens, strict=True):
        assert acc.append(TP, key, value, ts, headers, token, record_size(key, value, headers))
    assert acc.record_count == 2000 and len(acc.queues[TP]) == 1
    # One batch: itself, its deque, and a few lists, however many records it holds.
    assert len(gc.get_objects()) - before < 20
