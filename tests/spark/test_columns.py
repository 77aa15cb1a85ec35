"""The columnar decoder against the per-record decoder: the same rows, for any batch.

``records_to_batch`` (from the records kwire's per-record decoder builds) is the reference;
``batches_to_arrow`` must give the identical Arrow batch, whatever the field widths (1 to 5
byte varints, 10-byte timestamp deltas), nulls, headers, codecs, timestamp types and ranges,
and refuse corrupt batches with the per-record decoder's error.  Every test runs twice: with the
compiled helper that reads the records' fields (``kwire.protocol.records._layout``, built by
``pip install``) and with the record walk's Python fallback and numpy copies that stand in for
it where it is not built.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from kwire.client.types import ConsumerRecord
from kwire.protocol.errors import CorruptRecordError
from kwire.protocol.records import iter_batches, walk
from kwire.protocol.records.batch import RecordBatch, RecordBatchBuilder
from kwire.spark import columns
from kwire.spark.columns import batches_to_arrow
from kwire.spark.schema import records_to_batch

TOPIC, PARTITION = "events", 3


@pytest.fixture(autouse=True, params=["compiled", "python"])
def field_reader(request, monkeypatch) -> str:
    """Run the test with the compiled field reader, then with the Python one."""
    if request.param == "compiled":
        # Not a skip: the development install builds it (setup.py), and a build that silently
        # failed would otherwise leave the compiled path untested.
        assert columns._layout is not None, "kwire.protocol.records._layout was not built (needs gcc and Python's headers)"
    else:
        # Both halves of the compiled helper: the protocol's record walk falls back to Python
        # (its one-time warning is not the subject here), the column copies to numpy and Arrow.
        monkeypatch.setattr(columns, "_layout", None)
        monkeypatch.setattr(walk, "_layout", None)
        monkeypatch.setattr(walk, "_warned", True)
    return request.param


def _reference(batches, include_headers: bool, start: int = 0, end: int | None = None) -> pa.RecordBatch:
    records = [r for b in batches for r in b.records((ConsumerRecord, TOPIC, PARTITION))
               if r[2] >= start and (end is None or r[2] < end)]
    return records_to_batch(records, TOPIC, PARTITION, include_headers)


def _random_bytes(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


def _build(rng: random.Random, *, base_offset: int, count: int, compression: int = 0, log_append_time=None,
           headers: bool = True, sizes=(0, 1, 5, 63, 64, 200, 8191, 8192, 70_000), gaps=(1, 1, 1, 2, 200, 20_000)
           ) -> bytes:
    builder = RecordBatchBuilder(compression=compression, base_offset=base_offset,
                                 timestamp_type=1 if log_append_time is not None else 0,
                                 log_append_time=log_append_time)
    base_ts = rng.choice([0, 1_700_000_000_000, 2**40])
    delta = 0
    for _ in range(count):
        key = None if rng.random() < 0.2 else _random_bytes(rng, rng.choice(sizes))
        value = None if rng.random() < 0.1 else _random_bytes(rng, rng.choice(sizes))
        hdrs = None
        if headers and rng.random() < 0.3:
            hdrs = [(f"h{i}-é", None if rng.random() < 0.3 else _random_bytes(rng, rng.choice((0, 3, 300))))
                    for i in range(rng.randint(1, 3))]
        # Timestamps far from the base take long varlongs, backwards ones negative deltas.
        ts = base_ts + rng.choice([0, 1, -1, 100, 70_000, -(2**35), 2**45])
        builder.append(key, value, timestamp=ts, headers=hdrs, offset_delta=delta)
        delta += rng.choice(gaps)
    return builder.build()


def _chain(rng: random.Random, n: int, build) -> bytes:
    """``n`` batches whose offsets follow each other, as in a log (with gaps, as after compaction)."""
    out, base = [], 0
    for _ in range(n):
        data = build(base)
        out.append(data)
        base = RecordBatch(data).next_offset + rng.choice([0, 0, 5])
    return b"".join(out)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("include_headers", [False, True])
def test_random_uncompressed_batches_of_one_buffer(seed: int, include_headers: bool) -> None:
    rng = random.Random(seed)
    data = _chain(rng, 5, lambda base: _build(rng, base_offset=base, count=rng.randint(1, 40)))
    batches = list(iter_batches(memoryview(data)))
    got = batches_to_arrow(batches, TOPIC, PARTITION, include_headers)
    want = _reference(batches, include_headers)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want)


@pytest.mark.parametrize("compression", [1, 2, 3, 4])
def test_compressed_batches(compression: int) -> None:
    rng = random.Random(compression)
    data = _chain(rng, 4, lambda base: _build(rng, base_offset=base, count=30, compression=compression,
                                              sizes=(0, 10, 500)))
    batches = list(iter_batches(data))
    assert all(b.compression == compression for b in batches)
    got = batches_to_arrow(batches, TOPIC, PARTITION, True)
    assert got.equals(_reference(batches, True))
    assert got.num_rows == 120


def test_log_append_time_mixed_with_create_time() -> None:
    rng = random.Random(7)
    data = (_build(rng, base_offset=0, count=5, gaps=(1,))
            + _build(rng, base_offset=5, count=5, log_append_time=1_800_000_000_123, gaps=(1,))
            + _build(rng, base_offset=10, count=5, gaps=(1,)))
    batches = list(iter_batches(data))
    got = batches_to_arrow(batches, TOPIC, PARTITION, False)
    assert got.equals(_reference(batches, False))
    assert got.column("timestampType").to_pylist() == [0] * 5 + [1] * 5 + [0] * 5
    assert {t.value for t in got.column("timestamp")[5:10]} == {1_800_000_000_123_000}


@pytest.mark.parametrize(("start", "end"), [(0, None), (3, None), (0, 7), (3, 7), (2, 3), (9, 9), (20, 30)])
def test_offset_window(start: int, end: int | None) -> None:
    rng = random.Random(start)
    data = _build(rng, base_offset=0, count=5, sizes=(4,), gaps=(1,)) + _build(rng, base_offset=5, count=5,
                                                                                sizes=(4,), gaps=(1,))
    batches = list(iter_batches(data))
    got = batches_to_arrow(batches, TOPIC, PARTITION, False, start=start, end=end)
    assert got.equals(_reference(batches, False, start, end))
    assert all(o >= start and (end is None or o < end) for o in got.column("offset").to_pylist())


def test_no_batches_give_an_empty_batch_of_the_schema() -> None:
    got = batches_to_arrow([], TOPIC, PARTITION, True)
    assert got.num_rows == 0
    assert got.schema.equals(_reference([], True).schema)


def test_batches_from_two_buffers_are_joined() -> None:
    rng = random.Random(3)
    first = list(iter_batches(memoryview(_build(rng, base_offset=0, count=10, gaps=(1,)))))
    second = list(iter_batches(bytearray(_build(rng, base_offset=10, count=10, gaps=(1,)))))
    got = batches_to_arrow(first + second, TOPIC, PARTITION, True)
    assert got.equals(_reference(first + second, True))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("include_headers", [False, True])
def test_values_laid_out_in_the_answers_buffer_give_the_same_rows(seed: int, include_headers: bool) -> None:
    """``in_place``: the values column is made inside a writable buffer (a fetch answer's); the
    rows are the same, and the batches of that buffer not handed over are left intact."""
    rng = random.Random(100 + seed)
    data = bytearray(_chain(rng, 6, lambda base: _build(rng, base_offset=base, count=rng.randint(1, 40))))
    before = bytes(data)
    batches = list(iter_batches(memoryview(data)))
    given, rest = batches[:4], batches[4:]
    rest_at = sum(b.size_in_bytes for b in given)  # the batches lie one after the other from 0
    start = given[0].base_offset + rng.randint(0, 2)  # a seek into the first batch
    want = _reference(given, include_headers, start)
    got = batches_to_arrow(given, TOPIC, PARTITION, include_headers, start=start, in_place=True)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want)
    assert data[rest_at:] == before[rest_at:]  # the answer's other batches: untouched
    for batch in rest:
        batch.validate()
    values = got.column("value").buffers()[2]
    start_of_data = np.frombuffer(data, dtype=np.uint8).ctypes.data
    inside = start_of_data <= values.address < start_of_data + len(data)
    if columns._layout is None:
        assert data == before and not inside  # the Python stand-in copies
    else:
        assert inside  # laid out in the answer's own buffer, not copied


def test_in_place_values_of_a_read_only_buffer_are_copied() -> None:
    rng = random.Random(5)
    data = _chain(rng, 3, lambda base: _build(rng, base_offset=base, count=20))
    batches = list(iter_batches(memoryview(data)))
    got = batches_to_arrow(batches, TOPIC, PARTITION, True, in_place=True)
    assert got.equals(_reference(batches, True))  # bytes cannot be written: nothing was


def test_in_place_values_keep_nulls_and_empty_values() -> None:
    data = _single([None, b"", b"abc", None, b"de", b""])
    batches = list(iter_batches(memoryview(data)))
    got = batches_to_arrow(batches, TOPIC, PARTITION, False, in_place=True)
    assert got.column("value").to_pylist() == [None, b"", b"abc", None, b"de", b""]
    all_null = list(iter_batches(memoryview(_single([None, None]))))
    assert batches_to_arrow(all_null, TOPIC, PARTITION, False, in_place=True).column("value").to_pylist() == [None] * 2


def _single(values: list[bytes | None]) -> bytearray:
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(b"k", value, timestamp=1)
    return bytearray(builder.build())


def test_a_record_overrunning_its_length_is_refused_with_the_decoders_error() -> None:
    data = _single([b"abc", b"defgh"])
    # The second record's value length (last varint before "defgh" and the header count)
    # claims one byte more than the record holds.
    at = data.rindex(b"defgh") - 1
    assert data[at] == 10  # zigzag 5
    data[at] = 12
    batch = RecordBatch(bytes(data))
    with pytest.raises(CorruptRecordError) as reference:
        batch.records()
    with pytest.raises(CorruptRecordError) as got:
        batches_to_arrow([batch], TOPIC, PARTITION, False)
    assert str(got.value) == str(reference.value)


def test_a_record_count_above_the_records_held_is_refused() -> None:
    data = _single([b"abc"])
    data[57:61] = (2).to_bytes(4, "big")  # record count
    with pytest.raises(CorruptRecordError):
        batches_to_arrow([RecordBatch(bytes(data))], TOPIC, PARTITION, False)


@pytest.mark.parametrize("count", [-1, 2**31 - 1, 30])
def test_a_forged_record_count_is_refused_before_anything_is_sized_by_it(count: int) -> None:
    data = _single([b"abc", b"def"])  # 2 records of 9 bytes: 30 cannot fit in their 18
    data[57:61] = count.to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordError):
        batches_to_arrow([RecordBatch(bytes(data))], TOPIC, PARTITION, False)


def test_a_negative_record_length_is_refused() -> None:
    data = _single([b"abc", b"def"])
    data[61] = 1  # zigzag -1 as the first record's length
    with pytest.raises(CorruptRecordError):
        batches_to_arrow([RecordBatch(bytes(data))], TOPIC, PARTITION, True)


def test_random_corruption_never_yields_rows_the_decoder_refuses() -> None:
    rng = random.Random(11)
    clean = bytearray(_build(rng, base_offset=0, count=8, sizes=(0, 3, 130)))
    refused = 0
    for _ in range(400):
        data = bytearray(clean)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(61, len(data))] = rng.randrange(256)
        batch = RecordBatch(bytes(data))
        try:
            want = _reference([batch], True)
        except (CorruptRecordError, UnicodeDecodeError):
            refused += 1
            with pytest.raises((CorruptRecordError, UnicodeDecodeError)):
                batches_to_arrow([batch], TOPIC, PARTITION, True)
            continue
        assert batches_to_arrow([batch], TOPIC, PARTITION, True).equals(want)
    assert refused > 50
