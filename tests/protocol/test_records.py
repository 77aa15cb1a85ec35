"""Unit tests of kwire's records layer: batches v2, legacy message sets, codecs, blobs."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest
from crc32c import crc32c

from kwire.protocol.errors import CorruptRecordError, DecodeError, EncodeError
from kwire.protocol.records import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    NO_TIMESTAMP,
    Compression,
    ControlRecord,
    ControlRecordType,
    LegacyMessageSetBuilder,
    LegacyRecordBatch,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    compress,
    decompress,
    iter_batches,
    iter_records,
    read_batch,
    rewrite_base_offset,
)
from kwire.protocol.records.compression import xxh32

ALL = list(Compression)
LEGACY = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
TS = 1_700_000_000_000


def build(records, codec=Compression.NONE, **kw) -> bytes:
    builder = RecordBatchBuilder(compression=codec, **kw)
    for rec in records:
        builder.append(*rec)
    return builder.build()


def view(data):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(data, include_control=True)]


# ------------------------------------------------------------------------------------------
# record batch v2

@pytest.mark.parametrize("codec", ALL, ids=lambda c: c.name)
def test_round_trip_edge_values(codec):
    big = bytes(range(256)) * 100  # 25.6 KB: 3-byte length varints
    records = [
        (None, None, TS, None),
        (b"", b"", TS - 5, []),  # empty, not null; negative timestamp delta
        (b"k", big, TS + 10**9, [("a", b"1"), ("b", None), ("ü", b"")]),
        (big[:200], b"v", TS, [("x" * 300, big[:20000])]),
    ]
    data = build(records, codec)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.compression == codec
    assert (batch.base_timestamp, batch.max_timestamp) == (TS, TS + 10**9)
    assert batch.record_count == 4 and batch.last_offset_delta == 3
    got = batch.records()
    assert all(type(r) is Record for r in got)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (0, TS, None, None, []),
        (1, TS - 5, b"", b"", []),
        (2, TS + 10**9, b"k", big, [("a", b"1"), ("b", None), ("ü", b"")]),
        (3, TS, big[:200], b"v", [("x" * 300, big[:20000])]),
    ]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=lambda c: c.name)
def test_many_records_use_multi_byte_deltas(codec):
    # deltas past 8191 need 3-byte varints; past 2**20, 4 bytes (the reader's generic path)
    n = 20_000
    builder = RecordBatchBuilder(compression=codec)
    builder.extend((b"%d" % i, b"v", TS + i * 100, None) for i in range(n))
    builder.append(b"far", b"x", TS + 2**40, offset_delta=3_000_000)
    records = RecordBatch(builder.build()).records()
    assert len(records) == n + 1
    assert [(r.offset, r.timestamp, r.key) for r in records[8190:8194]] == \
        [(i, TS + i * 100, b"%d" % i) for i in range(8190, 8194)]
    assert (records[-1].offset, records[-1].timestamp) == (3_000_000, TS + 2**40)


def test_append_and_extend_write_the_same_bytes():
    records = [(b"k%d" % i, b"v" * i, TS + i, [("h", b"%d" % i)] if i % 2 else None) for i in range(50)]
    one = RecordBatchBuilder()
    for rec in records:
        one.append(*rec)
    many = RecordBatchBuilder()
    many.extend(records[:10])
    many.extend(records[10:])
    assert one.build() == many.build()
    assert len(one) == 50 and one.size_in_bytes == len(one.build())


def test_offset_delta_gaps_like_a_compacted_batch():
    builder = RecordBatchBuilder(base_offset=100)
    builder.append(b"a", b"1", TS)
    builder.append(b"b", b"2", TS, offset_delta=5)
    builder.append(b"c", b"3", TS)
    batch = RecordBatch(builder.build())
    assert [r.offset for r in batch] == [100, 105, 106]
    assert batch.last_offset == 106 and batch.next_offset == 107 and batch.record_count == 3
    with pytest.raises(EncodeError):
        builder.append(b"d", b"4", TS, offset_delta=6)


def test_header_fields_and_attribute_bits():
    data = build([(b"k", b"v", TS)], Compression.GZIP, base_offset=7, partition_leader_epoch=3, producer_id=11,
                 producer_epoch=2, base_sequence=2**31 - 1, transactional=True)
    batch = RecordBatch(data)
    h = batch.header()
    assert h["base_offset"] == 7 and h["partition_leader_epoch"] == 3 and h["magic"] == 2
    assert batch.attributes == 0x11
    assert batch.is_transactional and not batch.is_control and not batch.has_delete_horizon
    assert batch.timestamp_type == TimestampType.CREATE_TIME
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (11, 2, 2**31 - 1)
    assert batch.last_sequence == 2**31 - 1  # one record: last == base
    assert batch.size_in_bytes == len(data) == batch.batch_length + 12
    assert batch.delete_horizon_ms is None


def test_last_sequence_wraps_like_kafka():
    builder = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    builder.extend([(None, b"x", TS, None)] * 4)
    assert RecordBatch(builder.build()).last_sequence == 1


def test_log_append_time_gives_every_record_the_max_timestamp():
    builder = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS + 999)
    builder.extend([(None, b"a", TS, None), (None, b"b", TS + 1, None)])
    batch = RecordBatch(builder.build())
    batch.validate()
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [TS + 999, TS + 999]


def test_delete_horizon_bit():
    data = bytearray(build([(b"k", None, TS)]))
    struct.pack_into(">h", data, 21, 0x40)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    batch = RecordBatch(bytes(data))
    batch.validate()
    assert batch.has_delete_horizon and batch.delete_horizon_ms == TS


def test_empty_batch():
    data = RecordBatchBuilder().build()
    batch = RecordBatch(data)
    batch.validate()
    assert batch.record_count == 0 and batch.records() == []
    assert batch.base_timestamp == batch.max_timestamp == NO_TIMESTAMP


def test_validate_detects_corruption_but_not_base_offset_changes():
    data = bytearray(build([(b"key", b"value", TS)] * 3, Compression.LZ4))
    RecordBatch(data).validate()
    data[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(data).validate()
    assert err.value.path == ["crc"] and err.value.offset == 17
    assert "CRC-32C mismatch" in str(err.value)
    assert not RecordBatch(data).is_valid()


@pytest.mark.parametrize("buffer_type", [bytearray, lambda b: memoryview(bytearray(b))])
def test_rewrite_base_offset_in_place(buffer_type):
    original = build([(b"a", b"1", TS), (b"b", b"2", TS)], Compression.ZSTD, partition_leader_epoch=-1)
    blob = buffer_type(original + original)
    second = list(iter_batches(blob))[1]
    second.set_base_offset(1_000_000, partition_leader_epoch=42)
    rewrite_base_offset(blob, 500)  # the first batch, by position
    first, second = iter_batches(blob)
    for batch in (first, second):
        batch.validate()  # the CRC does not cover those fields
    assert [r.offset for r in first] == [500, 501]
    assert [r.offset for r in second] == [1_000_000, 1_000_001]
    assert (first.partition_leader_epoch, second.partition_leader_epoch) == (-1, 42)
    assert bytes(blob[21:]).startswith(original[21:])  # nothing else changed


def test_rewrite_needs_a_writable_buffer():
    data = build([(b"a", b"1", TS)])
    with pytest.raises(TypeError):
        RecordBatch(data).set_base_offset(5)
    with pytest.raises(CorruptRecordError):
        rewrite_base_offset(bytearray(10), 5)


@pytest.mark.parametrize("kind", list(ControlRecordType))
def test_control_batches(kind):
    data = build_control_batch(kind, producer_id=9, producer_epoch=1, coordinator_epoch=77, base_offset=40,
                               timestamp=TS)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_control and batch.is_transactional
    (record,) = batch.records()
    assert isinstance(record, ControlRecord)
    assert (record.version, record.type, record.coordinator_epoch) == (0, kind, 77)
    assert record.is_commit == (kind == ControlRecordType.COMMIT)
    assert record.is_abort == (kind == ControlRecordType.ABORT)
    data_batch = build([(b"k", b"v", TS)], base_offset=39, producer_id=9, producer_epoch=1, base_sequence=0,
                       transactional=True)
    blob = data_batch + data
    assert [r.offset for r in iter_records(blob)] == [39]
    assert [type(r) for r in iter_records(blob, include_control=True)] == [Record, ControlRecord]


def test_control_record_with_short_key_is_corrupt():
    builder = RecordBatchBuilder(control=True, producer_id=1, producer_epoch=0, transactional=True)
    builder.append(b"\x00", None, TS)
    with pytest.raises(CorruptRecordError, match="control record key"):
        RecordBatch(builder.build()).records()
    with pytest.raises(EncodeError):
        RecordBatchBuilder().append_control(ControlRecordType.COMMIT)


def test_builder_rejects_bad_input():
    builder = RecordBatchBuilder()
    for bad in [("str key", b"v"), (b"k", 12), (b"k", b"v", "soon"), (b"k", b"v", TS, [(1, b"x")]),
                (b"k", b"v", TS, [("h", "not bytes")])]:
        with pytest.raises(EncodeError):
            builder.append(*bad)
    assert len(builder) == 0
    with pytest.raises(EncodeError):
        builder.extend([(b"k", b"v", TS)])  # 3-tuple
    with pytest.raises(EncodeError):
        RecordBatchBuilder(transactional=True)  # no producer id
    with pytest.raises(EncodeError):
        RecordBatchBuilder(compression=7)
    overflow = RecordBatchBuilder(producer_id=1, producer_epoch=40000)
    overflow.append(b"k", b"v", TS)
    with pytest.raises(EncodeError, match="out of range"):
        overflow.build()


def test_extend_keeps_records_written_before_an_error():
    builder = RecordBatchBuilder()
    with pytest.raises(EncodeError):
        builder.extend([(b"a", b"1", TS, None), (b"b", b"2", TS + 1, None), ("bad", b"3", TS, None)])
    builder.append(b"c", b"4", TS + 2)
    assert [(r.offset, r.key, r.timestamp) for r in RecordBatch(builder.build())] == \
        [(0, b"a", TS), (1, b"b", TS + 1), (2, b"c", TS + 2)]


def test_default_timestamp_is_now():
    import time
    before = int(time.time() * 1000)
    data = build([(b"k", b"v")])
    assert before <= RecordBatch(data).records()[0].timestamp <= int(time.time() * 1000)


@pytest.mark.parametrize("make", [bytes, bytearray, memoryview])
def test_reader_accepts_any_buffer(make):
    data = build([(b"k", b"v", TS, [("h", b"x")])] * 3)
    (batch,) = iter_batches(make(data))
    assert [(r.key, r.value, r.headers) for r in batch] == [(b"k", b"v", [("h", b"x")])] * 3
    assert all(type(r.key) is bytes and type(r.value) is bytes for r in batch)


# ------------------------------------------------------------------------------------------
# blobs

def test_iter_batches_stops_cleanly_at_every_truncation_of_the_last_batch():
    first = build([(b"a", b"1", TS)])
    last = build([(b"b", b"2" * 50, TS)] * 3, Compression.SNAPPY, base_offset=1)
    legacy = LegacyMessageSetBuilder(1, compression=Compression.GZIP, base_offset=4)
    legacy.append(b"c", b"3", TS)
    legacy_data = legacy.build()
    for tail in (last, legacy_data):
        for cut in range(len(tail)):
            blob = first + tail[:cut]
            assert [b.size_in_bytes for b in iter_batches(blob)] == [len(first)]
            assert [r.key for r in iter_records(blob)] == [b"a"]
    assert [r.offset for r in iter_records(first + last + legacy_data)] == [0, 1, 2, 3, 4]


def test_blob_errors_name_the_field():
    good = build([(b"a", b"1", TS)])
    bad_magic = bytearray(good)
    bad_magic[16] = 7
    with pytest.raises(CorruptRecordError) as err:
        list(iter_batches(good + bad_magic))
    assert err.value.path == ["magic"] and err.value.offset == len(good) + 16
    tiny = bytearray(good)
    struct.pack_into(">i", tiny, 8, 3)
    with pytest.raises(CorruptRecordError, match="smaller than the smallest"):
        list(iter_batches(tiny))
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 20)  # a v2 batch needs 49
    with pytest.raises(CorruptRecordError) as err:
        list(iter_batches(short))
    assert err.value.path == ["batch_length"]
    with pytest.raises(CorruptRecordError):
        read_batch(good[:10])
    assert list(iter_batches(b"")) == [] and list(iter_batches(good[:11])) == []


def test_record_errors_name_record_and_field():
    data = bytearray(build([(b"key", b"value", TS)] * 3))
    # third record's key length: records start at 61; length, attributes, timestamp and
    # offset deltas take a byte each
    record_size = (len(data) - 61) // 3
    key_len_at = 61 + 2 * record_size + 4
    data[key_len_at] = 0x7E  # 63 bytes: runs past the record
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(data).records()
    assert err.value.path == ["records[2]", "key"] and err.value.offset == key_len_at
    data = bytearray(build([(b"key", b"value", TS)] * 3))
    struct.pack_into(">i", data, 57, 4)  # one record more than there is
    with pytest.raises(CorruptRecordError, match="end after 3 of the 4"):
        RecordBatch(data).records()
    struct.pack_into(">i", data, 57, 2)
    with pytest.raises(CorruptRecordError, match="bytes left after the last of 2"):
        RecordBatch(data).records()
    struct.pack_into(">i", data, 57, 10**6)
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(data).records()
    assert err.value.path == ["record_count"]


def test_bad_header_key_utf8():
    data = bytearray(build([(b"k", b"v", TS, [("é", b"x")])]))
    at = data.index("é".encode())
    data[at] = 0xFF
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(data).records()
    assert err.value.path == ["records[0]", "headers[0].key"]


def test_errors_inside_compressed_records_say_so():
    builder = RecordBatchBuilder(compression=Compression.GZIP)
    builder.append(b"k", b"v", TS)
    good = RecordBatch(builder.build())
    inner = bytearray(decompress(Compression.GZIP, good.raw_records()))
    inner[0] = 0x7E  # record length far too long
    forged = bytes(builder.build()[:61]) + compress(Compression.GZIP, bytes(inner))
    forged = bytearray(forged)
    struct.pack_into(">i", forged, 8, len(forged) - 12)
    with pytest.raises(CorruptRecordError, match="decompressed") as err:
        RecordBatch(forged).records()
    assert err.value.path == ["records[0]", "length"]


def test_max_decompressed_size_applies_per_batch():
    builder = RecordBatchBuilder(compression=Compression.ZSTD)
    builder.append(None, bytes(100_000), TS)
    data = builder.build()
    assert len(RecordBatch(data).records()[0].value) == 100_000
    with pytest.raises(CorruptRecordError, match="maximum"):
        RecordBatch(data, max_decompressed_size=50_000).records()
    with pytest.raises(CorruptRecordError, match="maximum"):
        list(iter_records(data, max_decompressed_size=50_000))


# ------------------------------------------------------------------------------------------
# legacy message sets

@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY, ids=lambda c: c.name)
def test_legacy_round_trip(magic, codec):
    builder = LegacyMessageSetBuilder(magic, compression=codec, base_offset=10)
    rows = [(b"k0", b"v0", TS), (None, b"v1", TS + 1), (b"k2", None, TS - 1), (b"", b"", TS)]
    assert [builder.append(*row) for row in rows] == [10, 11, 12, 13]
    data = builder.build()
    batches = list(iter_batches(data))
    assert len(batches) == (1 if codec else 4)
    for batch in batches:
        assert isinstance(batch, LegacyRecordBatch) and batch.magic == magic
        batch.validate(deep=True)
        assert batch.compression == codec
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(data)]
    assert got == [(10 + i, ts if magic else NO_TIMESTAMP, k, v, []) for i, (k, v, ts) in enumerate(rows)]
    if codec:
        (wrapper,) = batches
        assert wrapper.offset == wrapper.last_offset == 13 and wrapper.base_offset == 10
        assert wrapper.record_count == 4
        assert wrapper.key is None and wrapper.timestamp == (TS + 1 if magic else NO_TIMESTAMP)
        inner = decompress(codec, wrapper.value)
        inner_offsets = [LegacyRecordBatch(inner, pos).offset for pos in _entry_positions(inner)]
        assert inner_offsets == ([0, 1, 2, 3] if magic else [10, 11, 12, 13])


def _entry_positions(data):
    pos = 0
    while pos < len(data):
        yield pos
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]


def test_legacy_refuses_zstd_and_bad_magic():
    with pytest.raises(EncodeError, match="zstd"):
        LegacyMessageSetBuilder(1, compression=Compression.ZSTD)
    with pytest.raises(EncodeError):
        LegacyMessageSetBuilder(2)
    msg = bytearray(_legacy_single(1))
    msg[17] = 4  # attributes: zstd
    with pytest.raises(CorruptRecordError, match="not valid"):
        LegacyRecordBatch(msg).records()


def _legacy_single(magic, key=b"k", value=b"v", ts=TS, attributes=0):
    builder = LegacyMessageSetBuilder(magic)
    builder.append(key, value, ts)
    data = bytearray(builder.build())
    data[17] = attributes
    crc = zlib.crc32(bytes(data[16:]))
    struct.pack_into(">I", data, 12, crc)
    return bytes(data)


def test_legacy_log_append_time_wrapper():
    builder = LegacyMessageSetBuilder(1, compression=Compression.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME,
                                      log_append_time=TS + 50)
    builder.append(b"a", b"1", TS)
    builder.append(b"b", b"2", TS + 1)
    (wrapper,) = iter_batches(builder.build())
    assert wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in wrapper] == [TS + 50, TS + 50]


def test_legacy_log_append_time_plain_messages():
    builder = LegacyMessageSetBuilder(1, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS + 7)
    builder.append(b"a", b"1", TS)
    (message,) = iter_batches(builder.build())
    message.validate()
    assert message.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in message] == [TS + 7]


def test_legacy_v1_wrapper_offset_zero_keeps_relative_offsets():
    """Producers (kafka-python) leave the wrapper offset at 0; like Java, keep inner offsets."""
    builder = LegacyMessageSetBuilder(1, compression=Compression.SNAPPY)
    for i in range(3):
        builder.append(b"%d" % i, b"v", TS)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, 0)  # offset is outside the CRC
    (wrapper,) = iter_batches(data)
    wrapper.validate()
    assert [r.offset for r in wrapper] == [0, 1, 2]


def test_legacy_corruption():
    data = bytearray(_legacy_single(1))
    LegacyRecordBatch(data).validate()
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32 mismatch"):
        LegacyRecordBatch(data).validate()
    inner_compressed = _legacy_single(0, value=compress(Compression.GZIP, _legacy_single(0)), attributes=1)
    outer = bytearray(_legacy_single(0, value=compress(Compression.GZIP, inner_compressed), attributes=1))
    with pytest.raises(CorruptRecordError, match="inside a compressed wrapper"):
        LegacyRecordBatch(outer).records()
    null_value = _legacy_single(1, value=None, attributes=1)
    with pytest.raises(CorruptRecordError, match="null value"):
        LegacyRecordBatch(null_value).records()
    key_too_long = bytearray(_legacy_single(1))
    struct.pack_into(">i", key_too_long, 26, 1000)
    with pytest.raises(CorruptRecordError) as err:
        LegacyRecordBatch(key_too_long)
    assert err.value.path == ["key"] and err.value.offset == 26


# ------------------------------------------------------------------------------------------
# compression

def test_xxh32_vectors():
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


@pytest.mark.parametrize("codec", ALL, ids=lambda c: c.name)
@pytest.mark.parametrize("size", [0, 1, 1000, 70_000, 300_000])
def test_codec_round_trip(codec, size):
    data = (b"kafka records " * (size // 14 + 1))[:size]
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_raw_and_xerial_inputs():
    payload = b"snappy! " * 20_000
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(Compression.SNAPPY, raw) == payload
    xerial = compress(Compression.SNAPPY, payload)
    assert xerial.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress(Compression.SNAPPY, xerial) == payload
    # hand-made xerial stream, little-endian version fields (as some writers produce), 3 blocks
    blocks = [bytes(cramjam.snappy.compress_raw(part)) for part in (b"a" * 10, b"", b"bc" * 5000)]
    handmade = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + b"".join(struct.pack(">i", len(b)) + b for b in blocks)
    assert decompress(Compression.SNAPPY, handmade) == b"a" * 10 + b"bc" * 5000


def test_lz4_frames_from_other_writers():
    payload = b"lz4 frame " * 30_000
    # cramjam writes content checksums; also a frame with the legacy header checksum
    assert decompress(Compression.LZ4, bytes(cramjam.lz4.compress(payload))) == payload
    legacy = compress(Compression.LZ4, payload, legacy_lz4_checksum=True)
    standard = compress(Compression.LZ4, payload)
    assert legacy[6] != standard[6] and legacy[:6] == standard[:6]
    assert decompress(Compression.LZ4, legacy) == payload
    wrong = bytearray(standard)
    wrong[6] = next(b for b in range(256) if b not in (legacy[6], standard[6]))
    with pytest.raises(CorruptRecordError, match="header checksum"):
        decompress(Compression.LZ4, bytes(wrong))


def test_lz4_linked_blocks_and_content_size():
    lz4_frame = pytest.importorskip("lz4.frame")
    payload = bytes(range(256)) * 2000
    frame = lz4_frame.compress(payload, block_linked=True, store_size=True, content_checksum=True,
                               block_checksum=True)
    assert decompress(Compression.LZ4, frame) == payload


def test_gzip_concatenated_members():
    assert decompress(Compression.GZIP, gzip.compress(b"one ") + gzip.compress(b"two")) == b"one two"


@pytest.mark.parametrize("codec", [c for c in ALL if c], ids=lambda c: c.name)
def test_decompression_is_bounded(codec):
    bomb = compress(codec, bytes(2_000_000))
    assert len(decompress(codec, bomb)) == 2_000_000
    with pytest.raises(CorruptRecordError, match="maximum|exceeds"):
        decompress(codec, bomb, max_size=1_000_000)
    assert DEFAULT_MAX_DECOMPRESSED_SIZE >= 64 * 1024 * 1024


def test_forged_sizes_are_refused_before_allocating():
    # snappy: length preamble of 4 GiB on a 6-byte payload
    with pytest.raises(CorruptRecordError, match="preamble"):
        decompress(Compression.SNAPPY, b"\xff\xff\xff\xff\x0f\x00")
    # zstd: single-segment frame claiming 2**60 bytes of content
    forged = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + (2**60).to_bytes(8, "little") + b"\x01\x00\x00"
    with pytest.raises(CorruptRecordError, match="zstd"):
        decompress(Compression.ZSTD, forged)
    # zstd: window of 2 TiB
    forged = b"\x28\xb5\x2f\xfd\x00" + bytes([31 << 3]) + b"\x01\x00\x00"
    with pytest.raises(CorruptRecordError, match="window"):
        decompress(Compression.ZSTD, forged)
    # lz4: content size of 2**60 with a single tiny block
    desc = bytes([0x68, 0x40]) + (2**60).to_bytes(8, "little")
    frame = b"\x04\x22\x4d\x18" + desc + bytes([(xxh32(desc) >> 8) & 0xFF]) + b"\x01\x00\x00\x80x" + bytes(4)
    with pytest.raises(CorruptRecordError, match="content size"):
        decompress(Compression.LZ4, frame)


@pytest.mark.parametrize("codec", [c for c in ALL if c], ids=lambda c: c.name)
@pytest.mark.parametrize("garbage", [b"", b"\x01", b"garbage in, garbage out", bytes(range(256)) * 3])
def test_garbage_raises_corrupt_record_error(codec, garbage):
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


def test_empty_raw_snappy_is_valid():
    assert decompress(Compression.SNAPPY, b"\x00") == b""


@pytest.mark.parametrize("codec", [c for c in ALL if c], ids=lambda c: c.name)
def test_truncated_payloads_raise_corrupt_record_error(codec):
    good = compress(codec, b"truncate me " * 1000)
    for cut in range(0, len(good), max(1, len(good) // 40)):
        try:
            out = decompress(codec, good[:cut])
        except CorruptRecordError:
            continue
        assert out == (b"truncate me " * 1000)[:len(out)]


def test_unknown_codecs():
    with pytest.raises(EncodeError):
        compress(5, b"x")
    with pytest.raises(CorruptRecordError):
        decompress(6, b"x")
    data = bytearray(build([(b"k", b"v", TS)]))
    struct.pack_into(">h", data, 21, 5)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(CorruptRecordError) as err:
        RecordBatch(data).validate()
    assert err.value.path == ["attributes"]
    with pytest.raises(CorruptRecordError):
        RecordBatch(data).compression  # noqa: B018
    with pytest.raises(DecodeError):
        RecordBatch(data).records()


def test_set_log_append_time_rewrites_type_timestamp_and_crc_in_place():
    from kwire.protocol.records import CorruptRecordError, RecordBatch, RecordBatchBuilder, set_log_append_time

    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", 1_000)
    builder.append(b"k", b"w", 2_000)
    buf = bytearray(b"pad" + builder.build())
    set_log_append_time(buf, 1_700_000_000_000, pos=3)
    batch = RecordBatch(bytes(buf), 3)
    batch.validate()  # the CRC was recomputed over the changed fields
    assert batch.timestamp_type == 1 and batch.max_timestamp == 1_700_000_000_000
    assert [r.timestamp for r in batch] == [1_700_000_000_000] * 2  # LogAppendTime applies to every record
    with pytest.raises(CorruptRecordError):
        set_log_append_time(bytearray(b"\x00" * 20), 1)
