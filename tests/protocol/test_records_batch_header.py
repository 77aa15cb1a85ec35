"""The v2 batch header view (``kwire.protocol.records.batch_header``): the fields it reads are
the ones the builder wrote, each narrow reader agrees with the whole view, and the broker's
writes keep the batch valid (the base offset outside the CRC, LogAppendTime and ``write_crc``
inside it)."""

from __future__ import annotations

import pytest

from kwire.protocol.errors import CorruptRecordError
from kwire.protocol.records import ControlRecordType, RecordBatch, RecordBatchBuilder, build_control_batch
from kwire.protocol.records import batch_header as v2


def _batch(**kwargs) -> bytes:
    builder = RecordBatchBuilder(base_offset=40, partition_leader_epoch=3, compression=3, producer_id=9,
                                 producer_epoch=2, base_sequence=17, transactional=True, **kwargs)
    builder.append(b"k", b"v", 1_000)
    builder.append(None, b"w", 1_005)
    return builder.build()


def test_the_view_reads_what_the_builder_wrote() -> None:
    data = _batch()
    header = v2.read_header(data)
    assert header == RecordBatch(data).header_fields
    assert (header.base_offset, header.partition_leader_epoch, header.magic, header.record_count) == (40, 3, 2, 2)
    assert header.size == len(data) and header.batch_length == len(data) - v2.LOG_OVERHEAD
    assert (header.last_offset_delta, header.last_offset, header.next_offset) == (1, 41, 42)
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_005)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence) == (9, 2, 17, 18)
    assert header.compression_codec == 3 and header.is_transactional
    assert not (header.is_control or header.is_log_append_time or header.has_delete_horizon)
    assert header.crc == v2.compute_crc(data)


def test_each_narrow_reader_agrees_with_the_view_at_any_position() -> None:
    data = b"\x00" * 5 + _batch() + build_control_batch(ControlRecordType.COMMIT, producer_id=9, producer_epoch=2)
    first = v2.read_header(data, 5)
    pos = 5 + first.size
    for at in (5, pos):
        header = v2.read_header(data, at)
        assert v2.read_prefix(data, at) == (header.base_offset, header.batch_length)
        assert v2.read_last_offset_delta(data, at) == header.last_offset_delta
        assert v2.read_max_timestamp(data, at) == header.max_timestamp
        assert v2.read_attributes(data, at) == header.attributes
        assert v2.read_producer(data, at) == (header.producer_id, header.producer_epoch)
        assert data[at + v2.MAGIC_AT] == 2
    assert v2.read_header(data, pos).is_control


@pytest.mark.parametrize(("base", "delta", "last"), [(-1, 5, -1), (0, 0, 0), (10, 4, 14),
                                                     (2**31 - 2, 3, 1), (2**31 - 1, 1, 0)])
def test_last_sequence_wraps_at_int32_max_like_kafka(base: int, delta: int, last: int) -> None:
    assert v2.last_sequence(base, delta) == last


def test_rewriting_the_base_offset_keeps_the_crc_valid() -> None:
    data = bytearray(_batch())
    v2.rewrite_base_offset(data, 1_000_000, partition_leader_epoch=8)
    header = v2.read_header(data)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000, 8)
    RecordBatch(data).validate()
    with pytest.raises(TypeError, match="writable buffer"):
        v2.rewrite_base_offset(bytes(data), 1)


def test_log_append_time_is_stamped_with_a_new_crc() -> None:
    data = bytearray(_batch())
    v2.set_log_append_time(data, 77_777)
    header = v2.read_header(data)
    assert header.is_log_append_time and header.max_timestamp == 77_777
    RecordBatch(data).validate()
    assert [r.timestamp for r in RecordBatch(data).records()] == [77_777, 77_777]


def test_write_crc_repairs_a_changed_covered_byte_and_refuses_what_is_not_a_batch() -> None:
    data = bytearray(_batch())
    data[v2.ATTRIBUTES_AT + 1] |= v2.DELETE_HORIZON_BIT
    assert not RecordBatch(data).is_valid()
    v2.write_crc(data)
    assert RecordBatch(data).is_valid() and RecordBatch(data).has_delete_horizon
    with pytest.raises(CorruptRecordError, match="not a v2 record batch"):
        v2.write_crc(bytearray(10))
    short = data[:-1]
    with pytest.raises(CorruptRecordError, match="runs past the buffer"):
        v2.write_crc(short)


def test_build_batch_gives_back_the_batch_its_header_and_records_came_from() -> None:
    data = _batch()
    header = v2.read_header(data)
    assert v2.batch_size(data) == len(data)
    # The length and CRC it is given are not used: they are computed.
    rebuilt = v2.build_batch(header._replace(batch_length=0, crc=0), data[v2.HEADER_SIZE:])
    assert bytes(rebuilt) == data
    changed = v2.build_batch(header._replace(base_offset=99), data[v2.HEADER_SIZE:])
    assert RecordBatch(bytes(changed)).base_offset == 99  # and its CRC checks
