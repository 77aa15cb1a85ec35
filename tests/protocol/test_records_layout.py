"""The compiled field reader of v2 records (``kwire.protocol.records._layout``) on its own: the
positions and values it reports for a known batch, and its refusal of arguments that do not fit
its buffers.  (tests/spark/test_columns.py checks it against the per-record decoder on random
and corrupt batches.)"""

from __future__ import annotations

import numpy as np
import pytest

from kwire.protocol.records.batch import RecordBatchBuilder

try:
    from kwire.protocol.records import _layout
except ImportError:  # a failure, not a skip: the development install builds it (setup.py)
    _layout = None

RECORDS_AT = 61  # a v2 batch's header is 61 bytes


def _batch() -> bytes:
    builder = RecordBatchBuilder(base_offset=100)
    builder.append(b"key", b"value", timestamp=1_000)
    builder.append(None, b"", timestamp=998, headers=[("h", b"x")])
    return builder.build()


@pytest.fixture
def layout():
    assert _layout is not None, "kwire.protocol.records._layout was not built (needs gcc and Python's headers)"
    return _layout


def test_fields_of_a_known_batch(layout) -> None:
    data = _batch()
    out = np.full((9, 3), -7, dtype=np.int64)
    assert layout.scan_v2(data, RECORDS_AT, len(data), 2, out, 1) == -1
    assert out[:, 0].tolist() == [-7] * 9  # column 0 left alone: the records went from column 1
    ts_delta, off_delta, key_at, key_len, value_at, value_len, header_count, headers_at, end = out[:, 1:].tolist()
    assert ts_delta == [0, -2] and off_delta == [0, 1]
    assert key_len == [3, -1] and value_len == [5, 0] and header_count == [0, 1]
    assert data[key_at[0]:key_at[0] + 3] == b"key"
    assert data[value_at[0]:value_at[0] + 5] == b"value"
    assert headers_at[0] == end[0] and end[1] == len(data)  # no headers: the record ends after the count
    assert data[headers_at[1]:end[1]] == b"\x02h\x02x"  # one header "h" = "x", left to the caller


def test_records_ending_short_of_the_section_or_overrunning_it(layout) -> None:
    data = _batch()
    out = np.empty((9, 2), dtype=np.int64)
    assert layout.scan_v2(data, RECORDS_AT, len(data) + 0, 1, out, 0) == 1  # one record: bytes left over
    assert layout.scan_v2(data, RECORDS_AT, len(data) - 1, 2, out, 0) == 1  # the second runs past the end
    assert layout.scan_v2(memoryview(data)[:RECORDS_AT + 1], RECORDS_AT, RECORDS_AT + 1, 1, out, 0) == 0


def test_arguments_that_do_not_fit_are_refused(layout) -> None:
    data = _batch()
    out = np.empty((9, 2), dtype=np.int64)
    with pytest.raises(ValueError, match="outside a buffer"):
        layout.scan_v2(data, RECORDS_AT, len(data) + 1, 2, out, 0)
    with pytest.raises(ValueError, match="outside a buffer"):
        layout.scan_v2(data, -1, len(data), 2, out, 0)
    with pytest.raises(ValueError, match="do not fit"):
        layout.scan_v2(data, RECORDS_AT, len(data), 2, out, 1)
    with pytest.raises(ValueError, match="shape"):
        layout.scan_v2(data, RECORDS_AT, len(data), 2, np.empty((8, 2), dtype=np.int64), 0)
    with pytest.raises(ValueError, match="shape"):
        layout.scan_v2(data, RECORDS_AT, len(data), 2, np.empty((9, 2), dtype=np.int32), 0)
    with pytest.raises(TypeError):
        layout.scan_v2(data, RECORDS_AT, len(data), 2, data, 0)  # read-only: nowhere to write


def test_gather_copies_the_spans_one_after_the_other(layout) -> None:
    data = b"0123456789"
    at = np.array([2, 0, 9, 5], dtype=np.int64)
    length = np.array([3, -1, 1, 0], dtype=np.int64)  # -1: a null, copies nothing
    out = np.zeros(4, dtype=np.uint8)
    assert layout.gather(data, at, length, out) is None
    assert out.tobytes() == b"2349"


def test_gather_refuses_spans_outside_the_buffer_or_an_output_of_another_size(layout) -> None:
    data = b"0123456789"
    with pytest.raises(ValueError, match="outside a buffer"):
        layout.gather(data, np.array([8], dtype=np.int64), np.array([3], dtype=np.int64), np.empty(3, np.uint8))
    with pytest.raises(ValueError, match="outside a buffer"):
        layout.gather(data, np.array([-1], dtype=np.int64), np.array([1], dtype=np.int64), np.empty(1, np.uint8))
    with pytest.raises(ValueError, match="room for 4"):
        layout.gather(data, np.array([0], dtype=np.int64), np.array([3], dtype=np.int64), np.empty(4, np.uint8))
    with pytest.raises(ValueError, match="same size"):
        layout.gather(data, np.array([0, 1], dtype=np.int64), np.array([3], dtype=np.int64), np.empty(3, np.uint8))
    with pytest.raises(ValueError, match="int64"):
        layout.gather(data, np.array([0], dtype=np.int32), np.array([3], dtype=np.int32), np.empty(3, np.uint8))


def test_pack_moves_the_spans_down_inside_the_buffer(layout) -> None:
    data = bytearray(b"xxAAyBBBzzCw")
    at = np.array([2, 5, 8, 10], dtype=np.int64)
    length = np.array([2, 3, -1, 1], dtype=np.int64)  # -1: a null, moves nothing
    assert layout.pack(data, at, length, 1) == 7
    assert data[1:7] == b"AABBBC"
    assert data[:1] == b"x" and data[7:] == b"BzzCw"  # outside the packed part: as it was


def test_pack_of_spans_already_in_place_or_empty(layout) -> None:
    data = bytearray(b"abcdef")
    assert layout.pack(data, np.array([0, 3], dtype=np.int64), np.array([3, 3], dtype=np.int64), 0) == 6
    assert data == b"abcdef"
    assert layout.pack(data, np.array([], dtype=np.int64), np.array([], dtype=np.int64), 4) == 4
    assert data == b"abcdef"


@pytest.mark.parametrize(("at", "length", "into", "match"), [
    ([4, 2], [1, 1], 0, "before the end"),   # out of order: the second would be overwritten first
    ([2, 3], [3, 1], 0, "before the end"),   # overlapping
    ([2], [1], 3, "before the end"),         # `into` after the first span
    ([5], [2], 0, "outside a buffer"),
    ([-1], [1], 0, "outside a buffer"),
    ([0], [1], 7, "outside a buffer"),
])
def test_pack_refuses_spans_it_could_not_move_safely_and_leaves_the_buffer_alone(layout, at, length, into,
                                                                                match) -> None:
    data = bytearray(b"abcdef")
    with pytest.raises(ValueError, match=match):
        layout.pack(data, np.array(at, dtype=np.int64), np.array(length, dtype=np.int64), into)
    assert data == b"abcdef"


def test_pack_needs_a_writable_buffer_and_int64_arrays_of_one_size(layout) -> None:
    with pytest.raises(TypeError):
        layout.pack(b"abcdef", np.array([1], dtype=np.int64), np.array([1], dtype=np.int64), 0)
    with pytest.raises(ValueError, match="same size"):
        layout.pack(bytearray(6), np.array([1, 2], dtype=np.int64), np.array([1], dtype=np.int64), 0)
    with pytest.raises(ValueError, match="int64"):
        layout.pack(bytearray(6), np.array([1], dtype=np.int32), np.array([1], dtype=np.int32), 0)
