"""``RecordBatch.records(into=(cls, topic, partition))``: the decoder building the consumer's
9-field records directly, field for field the same as the default ``Record`` path."""

from __future__ import annotations

import gc

import pytest

from kwire.client.types import ConsumerRecord
from kwire.protocol.errors import CorruptRecordError
from kwire.protocol.records import (
    Compression,
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
)

TS = 1_700_000_000_000


def wide(batch: RecordBatch, ts_type: int, epoch: int) -> list[tuple]:
    """What the default path gives, in the consumer's layout (headers as a tuple)."""
    return [("t", 3, r.offset, r.timestamp, ts_type, r.key, r.value, tuple(r.headers), epoch) for r in batch.records()]


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_into_matches_the_default_records(codec):
    big = bytes(range(256)) * 100
    builder = RecordBatchBuilder(compression=codec, base_offset=1000, partition_leader_epoch=7)
    builder.append(None, None, TS)
    builder.append(b"", b"", TS - 5, [])
    builder.append(b"k", big, TS + 10**9, [("a", b"1"), ("b", None), ("ü", b"")])
    for i in range(300):  # multi-byte offset and timestamp deltas
        builder.append(b"k%d" % i, b"v" * (i % 50), TS + i * 100)
    for data in (builder.build(), bytearray(builder.build())):
        batch = RecordBatch(data)
        got = batch.records((ConsumerRecord, "t", 3))
        assert all(type(r) is ConsumerRecord for r in got)
        assert got == wide(batch, 0, 7)
        assert got[0].headers == () and got[2].headers == (("a", b"1"), ("b", None), ("ü", b""))
        assert got[5].offset == 1005 and got[5].leader_epoch == 7 and got[5].topic == "t"


def test_into_with_log_append_time():
    builder = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS + 999)
    builder.extend([(None, b"a", TS, None), (None, b"b", TS + 1, [("h", b"x")])])
    batch = RecordBatch(builder.build())
    got = batch.records((ConsumerRecord, "t", 3))
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(TS + 999, 1), (TS + 999, 1)]
    assert got == wide(batch, 1, -1)


def test_into_refuses_a_control_batch():
    data = build_control_batch(ControlRecordType.COMMIT, producer_id=9, producer_epoch=1, coordinator_epoch=1,
                               base_offset=0, timestamp=TS)
    with pytest.raises(ValueError):
        RecordBatch(data).records((ConsumerRecord, "t", 0))


def test_into_reports_corruption_like_the_default_path():
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", TS)
    data = bytearray(builder.build())
    data[-3] = 0x7F  # the value length runs past the record
    with pytest.raises(CorruptRecordError) as default:
        RecordBatch(bytes(data)).records()
    with pytest.raises(CorruptRecordError) as into:
        RecordBatch(bytes(data)).records((ConsumerRecord, "t", 0))
    assert str(into.value) == str(default.value)


def test_records_without_headers_hold_no_gc_tracked_field():
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", TS)
    (record,) = RecordBatch(builder.build()).records((ConsumerRecord, "t", 0))
    assert not any(gc.is_tracked(field) for field in record)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4], ids=lambda c: c.name)
@pytest.mark.parametrize("step", [1, 7, 64, 1000])
def test_reader_takes_slices_of_the_same_records(codec, step):
    builder = RecordBatchBuilder(compression=codec, base_offset=50, partition_leader_epoch=2)
    for i in range(200):
        builder.append(b"k%d" % i, b"v" * i, TS + i, [("h", b"%d" % i)] if i % 5 == 0 else None)
    batch = RecordBatch(builder.build())
    reader = batch.reader((ConsumerRecord, "t", 3))
    got = []
    while not reader.done:
        part = reader.take(step)
        assert 0 < len(part) <= step
        got += part
    assert got == batch.records((ConsumerRecord, "t", 3)) and len(got) == 200


def test_reader_raises_at_the_corrupt_record_and_again():
    builder = RecordBatchBuilder()
    for i in range(10):
        builder.append(None, b"value%d" % i, TS)
    data = bytearray(builder.build())
    assert data[-8] == 2 * len(b"value9")  # the last record's value length (zigzag) ...
    data[-8] = 2 * 32  # ... runs past it
    reader = RecordBatch(bytes(data)).reader((ConsumerRecord, "t", 0))
    assert [r.value for r in reader.take(9)] == [b"value%d" % i for i in range(9)]
    for _ in range(2):
        with pytest.raises(CorruptRecordError):
            reader.take(5)
    assert not reader.done


def test_reader_reports_bytes_left_after_the_last_record():
    builder = RecordBatchBuilder()
    for _ in range(3):
        builder.append(None, b"v", TS)
    data = bytearray(builder.build())
    # Declare one record fewer: the third record's bytes are left over.
    data[57:61] = (2).to_bytes(4, "big")
    reader = RecordBatch(bytes(data)).reader((ConsumerRecord, "t", 0))
    assert len(reader.take(1)) == 1
    with pytest.raises(CorruptRecordError, match="left after"):
        reader.take(1)
