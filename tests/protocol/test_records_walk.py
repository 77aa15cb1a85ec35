"""The record walk (``kwire.protocol.records.walk``): its compiled accelerator and its Python
fallback give identical results (return value and every column) on fuzzed batches, valid and
damaged: compressed, control, transactional, null keys and values, headers, multi-byte varints.
And the walk's positions are the per-record decoder's keys, values and timestamps."""

from __future__ import annotations

import warnings
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.protocol.errors import CorruptRecordError
from kwire.protocol.records import (
    Compression,
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    walk,
)
from kwire.protocol.records import batch as batch_module
from tests.tiers import examples

try:
    from kwire.protocol.records import _layout
except ImportError:  # a failure below, not a skip: the development install builds it (setup.py)
    _layout = None

# The consumer's 9-field record, as RecordBatch.records(into=...) builds it.
Wide = namedtuple("Wide", "topic partition offset timestamp timestamp_type key value headers leader_epoch")

FUZZ = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
TS = 1_700_000_000_000

payloads = st.none() | st.binary(max_size=200) | st.binary(min_size=120, max_size=9000).map(lambda b: b[:9000])
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=40)), max_size=3)
records = st.lists(
    st.tuples(payloads, payloads, st.integers(min_value=-(2**42), max_value=2**42), headers,
              st.integers(min_value=0, max_value=20_000)),  # timestamp offset, offset-delta gap
    max_size=25,
)
codecs = st.sampled_from(list(Compression))


@pytest.fixture(scope="module")
def accelerator():
    assert _layout is not None, "kwire.protocol.records._layout was not built (needs gcc and Python's headers)"
    return _layout


def _build(recs, codec: int, *, transactional: bool, log_append_time: bool) -> bytes:
    builder = RecordBatchBuilder(compression=codec, producer_id=7 if transactional else -1, producer_epoch=1,
                                 base_sequence=0 if transactional else -1, transactional=transactional,
                                 timestamp_type=1 if log_append_time else 0,
                                 log_append_time=TS if log_append_time else None)
    delta = 0
    for key, value, ts, hdrs, gap in recs:
        builder.append(key, value, TS + ts, hdrs, offset_delta=delta)
        delta += 1 + gap
    return builder.build()


def _python_walk(vector_min: int):
    """The Python fallback with its numpy fast path taken from ``vector_min`` records."""
    def scan(*args):
        saved, walk._VECTOR_MIN = walk._VECTOR_MIN, vector_min
        try:
            return walk.scan_records_python(*args)
        finally:
            walk._VECTOR_MIN = saved
    return scan


def _assert_identical(buf, first: int, stop: int, count: int) -> int:
    """The accelerator's result, after checking the Python fallback's (record by record, and
    with numpy) is the same, and so are the columns they filled (prefilled alike)."""
    width = max(count, 0) + 2
    results = []
    for scan in (_layout.scan_v2, _python_walk(1), _python_walk(10**9)):
        out = np.full((9, width), -7, dtype=np.int64)
        results.append((scan(buf, first, stop, count, out, 1), out))
    (native, native_out), *pythons = results
    for python, python_out in pythons:
        assert python == native
        assert np.array_equal(python_out, native_out)
    return native


@FUZZ
@given(recs=records, codec=codecs, transactional=st.booleans(), log_append_time=st.booleans(), data=st.data())
def test_accelerator_and_python_agree_on_fuzzed_batches(accelerator, recs, codec, transactional, log_append_time,
                                                        data) -> None:
    batch = RecordBatch(_build(recs, codec, transactional=transactional, log_append_time=log_append_time))
    buf, first, stop, _ = batch.records_section()
    count = batch.record_count
    assert _assert_identical(buf, first, stop, count) == -1  # a valid batch walks whole

    # Damage: bytes overwritten anywhere, or the last byte of a field that says where the next
    # ones lie (a record length, a key or value length, a header count) set to a nearby or an
    # extreme value; the section cut short; the count forged.
    damaged = bytearray(buf)
    out = np.zeros((9, count), dtype=np.int64)
    walk.scan_records_python(buf, first, stop, count, out, 0)
    starts = [first, *out[8, :-1].tolist()] if count else []
    if stop > first:
        for _ in range(data.draw(st.integers(min_value=1, max_value=4), label="hits")):
            if count and data.draw(st.booleans(), label="at a field"):
                i = data.draw(st.integers(min_value=0, max_value=count - 1), label="record")
                at = data.draw(st.sampled_from([starts[i], int(out[2, i]) - 1, int(out[4, i]) - 1,
                                                int(out[7, i]) - 1]), label="field")
                damaged[at] = data.draw(st.sampled_from([0, 1, 2, 3, 0x7F, 0x80, 0xFF, (damaged[at] + 2) & 0xFF,
                                                         (damaged[at] - 2) & 0xFF]), label="byte")
            else:
                at = data.draw(st.integers(min_value=first, max_value=stop - 1), label="at")
                damaged[at] = data.draw(st.integers(min_value=0, max_value=255), label="byte")
    cut = data.draw(st.integers(min_value=first, max_value=stop), label="stop")
    forged = count + data.draw(st.integers(min_value=-2, max_value=2), label="count change")
    _assert_identical(bytes(damaged), first, cut, max(forged, 0))


@FUZZ
@given(kind=st.sampled_from([ControlRecordType.ABORT, ControlRecordType.COMMIT]),
       coordinator_epoch=st.integers(min_value=0, max_value=2**31 - 1))
def test_accelerator_and_python_agree_on_control_batches(accelerator, kind, coordinator_epoch) -> None:
    data = build_control_batch(kind, producer_id=3, producer_epoch=2, coordinator_epoch=coordinator_epoch,
                               timestamp=TS)
    batch = RecordBatch(data)
    assert batch.is_control and batch.is_transactional
    buf, first, stop, _ = batch.records_section()
    assert _assert_identical(buf, first, stop, batch.record_count) == -1


# Hand-made records at each check of the walk (zigzag varints: 2n is n, 2n+1 is -(n+1)).
EDGE_RECORDS = {
    "good": bytes([12, 0, 0, 0, 1, 1, 0]),
    "zero length": bytes([0]),
    "negative length": bytes([1, 0, 0, 0, 1, 1, 0]),
    "length past the section": bytes([14, 0, 0, 0, 1, 1, 0]),
    "bytes after a zero header count": bytes([14, 0, 0, 0, 1, 1, 0, 5]),
    "negative header count": bytes([12, 0, 0, 0, 1, 1, 1]),
    "headers left to the caller": bytes([16, 0, 0, 0, 1, 1, 2, 0, 1]),
    "key past the record": bytes([12, 0, 0, 0, 4, 1, 0]),
    "value past the record": bytes([12, 0, 0, 0, 1, 4, 0]),
    "six-byte offset delta": bytes([22, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0, 1, 1, 0]),
    "varint cut by the record's end": bytes([6, 0, 0, 0x80]),
    "length varint cut by the section's end": bytes([0x80]),
}


@pytest.mark.parametrize("name", sorted(EDGE_RECORDS))
def test_accelerator_and_python_agree_on_edge_records(accelerator, name) -> None:
    record = EDGE_RECORDS[name]
    for data, count in ((record, 1), (EDGE_RECORDS["good"] + record, 2), (record + EDGE_RECORDS["good"], 2)):
        result = _assert_identical(data, 0, len(data), count)
        assert (result == -1) == (name in ("good", "headers left to the caller")), (name, data, result)


def test_accelerator_and_python_agree_on_a_ten_byte_timestamp_delta_past_64_bits(accelerator) -> None:
    # length 15 | attributes | timestamp delta: 10 bytes, the last with bits beyond the 64th
    # (C drops them) | offset delta 0 | null key | null value | no headers
    record = bytes([30, 0]) + b"\xff" * 9 + b"\x7f" + bytes([0, 1, 1, 0])
    assert _assert_identical(record, 0, len(record), 1) == -1
    out = np.zeros((9, 1), dtype=np.int64)
    walk.scan_records_python(record, 0, len(record), 1, out, 0)
    assert out[0, 0] == -(2**63)  # zigzag of 2**64 - 1: the 64-bit value, bits past it dropped


@FUZZ
@given(raw=st.binary(max_size=300), count=st.integers(min_value=0, max_value=50))
def test_accelerator_and_python_agree_on_random_bytes(accelerator, raw, count) -> None:
    _assert_identical(raw, 0, len(raw), count)


@FUZZ
@given(recs=records, codec=codecs)
def test_the_walk_finds_the_decoders_records(recs, codec) -> None:
    batch = RecordBatch(_build(recs, codec, transactional=False, log_append_time=False))
    buf, first, stop, _ = batch.records_section()
    n = batch.record_count
    out = np.zeros((9, n), dtype=np.int64)
    assert walk.scan_records_python(buf, first, stop, n, out, 0) == -1
    ts_delta, off_delta, key_at, key_len, value_at, value_len, header_count, headers_at, end = out.tolist()
    for i, record in enumerate(batch.records()):
        assert record.offset == batch.base_offset + off_delta[i]
        assert record.timestamp == batch.base_timestamp + ts_delta[i]
        assert record.key == (None if key_len[i] < 0 else bytes(buf[key_at[i]:key_at[i] + key_len[i]]))
        assert record.value == (None if value_len[i] < 0 else bytes(buf[value_at[i]:value_at[i] + value_len[i]]))
        assert header_count[i] == len(record.headers)
        assert (headers_at[i] == end[i]) == (not record.headers)


def test_python_walk_refuses_arguments_that_do_not_fit() -> None:
    data = _build([(b"k", b"v", 0, [], 0)], Compression.NONE, transactional=False, log_append_time=False)
    out = np.empty((9, 2), dtype=np.int64)
    with pytest.raises(ValueError, match="outside a buffer"):
        walk.scan_records_python(data, 61, len(data) + 1, 1, out, 0)
    with pytest.raises(ValueError, match="do not fit"):
        walk.scan_records_python(data, 61, len(data), 2, out, 1)
    with pytest.raises(ValueError, match="shape"):
        walk.scan_records_python(data, 61, len(data), 1, np.empty((8, 2), dtype=np.int32), 0)


def test_without_the_accelerator_the_walk_warns_once_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(walk, "_layout", None)
    monkeypatch.setattr(walk, "_warned", False)
    data = _build([(b"k", b"v", 0, [], 0)], Compression.NONE, transactional=False, log_append_time=False)
    out = np.empty((9, 1), dtype=np.int64)
    with pytest.warns(walk.RecordWalkWarning, match="not built"):
        assert walk.scan_records(data, 61, len(data), 1, out, 0) == -1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert walk.scan_records(data, 61, len(data), 1, out, 0) == -1  # once: no second warning
    assert not walk.accelerated()
    assert "pure Python" in walk.accelerator_status()


def test_with_the_accelerator_the_status_says_compiled(accelerator) -> None:
    assert walk.accelerated() and "compiled" in walk.accelerator_status()


def _sections_with(layout, buf, sections, width: int):
    saved, walk._layout = walk._layout, layout
    saved_warned, walk._warned = walk._warned, True
    try:
        out = np.full((9, width), -7, dtype=np.int64)
        return walk.scan_sections(buf, sections, out), out
    finally:
        walk._layout, walk._warned = saved, saved_warned


@FUZZ
@given(batches=st.lists(records, min_size=1, max_size=4), data=st.data())
def test_sections_of_many_batches_agree_with_and_without_the_accelerator(accelerator, batches, data) -> None:
    blobs = [_build(recs, Compression.NONE, transactional=False, log_append_time=False) for recs in batches]
    buf = bytearray(b"".join(blobs))
    sections, at = [], 0
    for blob in blobs:
        batch = RecordBatch(blob)
        sections.append((at + 61, at + len(blob), batch.record_count))
        at += len(blob)
    width = sum(count for _, _, count in sections) + 1
    if data.draw(st.booleans(), label="damage"):
        k = data.draw(st.integers(min_value=0, max_value=len(sections) - 1), label="batch")
        first, stop, _ = sections[k]
        if stop > first:
            buf[data.draw(st.integers(min_value=first, max_value=stop - 1), label="at")] = \
                data.draw(st.integers(min_value=0, max_value=255), label="byte")
    native, native_out = _sections_with(accelerator, bytes(buf), sections, width)
    python, python_out = _sections_with(None, bytes(buf), sections, width)
    assert python == native
    assert np.array_equal(python_out, native_out)
    if native is None:
        assert all(_assert_identical(bytes(buf), *section) == -1 for section in sections)
    else:
        k, bad = native
        assert _assert_identical(bytes(buf), *sections[k]) == bad


# -- the per-record decoder (RecordBatch.records, its reader) on the walk ---------------------
def _decoded(data: bytes, compiled: bool | None, slices: int | None, into: tuple | None):
    """What decoding ``data`` gives with the compiled walk (None) or the Python one (False):
    the records, or the error (its type and message) where they do not decode."""
    saved, batch_module._COMPILED_WALK = batch_module._COMPILED_WALK, compiled
    try:
        batch = RecordBatch(data)
        if slices is None:
            return batch.records(into)
        reader, got = batch.reader(into or (Wide, "t", 3)), []
        while not reader.done:
            got += reader.take(slices)
        return got
    except (CorruptRecordError, ValueError) as exc:
        return type(exc).__name__, str(exc)
    finally:
        batch_module._COMPILED_WALK = saved


@FUZZ
@given(recs=records, codec=codecs, log_append_time=st.booleans(), data=st.data())
def test_the_decoder_gives_the_same_records_and_errors_on_both_walks(accelerator, recs, codec, log_append_time,
                                                                    data) -> None:
    raw = bytearray(_build(recs, codec, transactional=False, log_append_time=log_append_time))
    damaged = data.draw(st.booleans(), label="damage") and len(raw) > 61
    if damaged:
        for _ in range(data.draw(st.integers(min_value=1, max_value=4), label="hits")):
            raw[data.draw(st.integers(min_value=61, max_value=len(raw) - 1), label="at")] = \
                data.draw(st.integers(min_value=0, max_value=255), label="byte")
        if data.draw(st.booleans(), label="forge the count"):
            raw[57:61] = data.draw(st.integers(min_value=0, max_value=40), label="count").to_bytes(4, "big")
    slices = data.draw(st.none() | st.integers(min_value=1, max_value=7), label="slices")
    into = data.draw(st.none() | st.just((Wide, "t", 3)), label="into")
    compiled = _decoded(bytes(raw), None, slices, into)
    assert _decoded(bytes(raw), False, slices, into) == compiled
    # An intact batch decodes to the same records in slices as whole (a reader stops at the
    # count the header gives: bytes after a forged count are not its business).
    if not damaged and slices is not None:
        assert _decoded(bytes(raw), None, None, into or (Wide, "t", 3)) == compiled


@pytest.mark.parametrize("name", sorted(EDGE_RECORDS))
def test_the_decoder_refuses_edge_records_alike_on_both_walks(accelerator, name) -> None:
    for records_section, count in ((EDGE_RECORDS[name], 1), (EDGE_RECORDS["good"] + EDGE_RECORDS[name], 2)):
        header = bytearray(_build([(None, None, 0, [], 0)], Compression.NONE, transactional=False,
                                  log_append_time=False)[:61])
        header[8:12] = (49 + len(records_section)).to_bytes(4, "big")  # batch length
        header[57:61] = count.to_bytes(4, "big")
        data = bytes(header) + records_section
        compiled = _decoded(data, None, None, None)
        assert _decoded(data, False, None, None) == compiled
        if name == "good":
            assert isinstance(compiled, list) and len(compiled) == count
        elif name != "headers left to the caller":
            # a clear error naming the record and what is wrong with it
            assert compiled[0] == "CorruptRecordError", compiled
            assert "records" in compiled[1], compiled


@pytest.mark.parametrize("compiled", [True, False])
def test_record_columns_bounds_a_forged_count_by_the_bytes(accelerator, compiled) -> None:
    data = EDGE_RECORDS["good"] * 3
    for count in (4, 2**31 - 1):  # more records than the bytes hold: the 4th is the bad one
        columns, bad = walk.record_columns(data, 0, len(data), count, compiled=compiled)
        assert bad == 3
        assert columns[8][:3] == [7, 14, 21]  # where each record ends
        assert len(columns[0]) <= len(data) // walk.MIN_RECORD_SIZE + 1
