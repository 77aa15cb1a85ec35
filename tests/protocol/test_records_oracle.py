"""kafka-python 3.0.12 as an oracle: batches it writes decode identically in kwire, and
batches kwire writes decode identically in kafka-python's readers.

kafka-python needs the ``lz4``, ``zstandard`` and ``python-snappy`` packages for those codecs.
When one is missing, the fixture below gives kafka-python a stand-in built on cramjam (an
implementation independent of kwire's codec module), so its record framing, xerial framing
and legacy LZ4 header handling are still what is exercised.
"""

from __future__ import annotations

import random

import cramjam
import pytest

kafka_codec = pytest.importorskip("kafka.codec")
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.legacy_records import LegacyRecordBatch as KLegacyRecordBatch  # noqa: E402
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KLegacyRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

from kwire.protocol.records import (  # noqa: E402
    Compression,
    ControlRecordType,
    LegacyMessageSetBuilder,
    LegacyRecordBatch,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    iter_batches,
    iter_records,
)
from kwire.protocol.records.compression import xxh32  # noqa: E402

V2_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
WORDS = [b"kafka ", b"record ", b"batch ", b"\x00\x01", b"offset ", b"\xff"]


class _CramjamSnappy:
    compress = staticmethod(lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))))
    decompress = staticmethod(lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))))


class _CramjamZstd:
    class ZstdCompressor:
        def compress(self, data):
            return bytes(cramjam.zstd.compress(bytes(data)))

    class ZstdDecompressor:
        def stream_reader(self, fileobj, read_across_frames=True):
            import contextlib
            import io
            return contextlib.closing(io.BytesIO(bytes(cramjam.zstd.decompress(fileobj.read()))))


@pytest.fixture(scope="module", autouse=True)
def kafka_python_codecs():
    """Make sure kafka-python can use every codec (see the module docstring)."""
    import kafka.record.default_records as kdr
    import kafka.record.legacy_records as klr

    mp = pytest.MonkeyPatch()
    if not kafka_codec.has_snappy():
        mp.setattr(kafka_codec, "snappy", _CramjamSnappy)
    if not kafka_codec.has_zstd():
        mp.setattr(kafka_codec, "zstd", _CramjamZstd)
    if not kafka_codec.has_lz4():
        def enc(data):
            return bytes(cramjam.lz4.compress(bytes(data)))

        def dec(data):
            return bytes(cramjam.lz4.decompress(bytes(data)))
        mp.setattr(kafka_codec, "lz4", True)
        for module in (kafka_codec, kdr, klr):
            mp.setattr(module, "lz4_encode", enc, raising=False)
            mp.setattr(module, "lz4_decode", dec, raising=False)
    if kafka_codec.xxhash is None:
        class _XXH:
            def __init__(self, data):
                self._h = xxh32(data)

            def digest(self):
                return self._h.to_bytes(4, "big")
        mp.setattr(kafka_codec, "xxhash", type("xxhash", (), {"xxh32": _XXH}))
    yield
    mp.undo()


def sample_records(n: int = 50, seed: int = 1, headers: bool = True):
    rnd = random.Random(seed)
    out = []
    base = 1_600_000_000_000
    for i in range(n):
        key = None if i % 7 == 3 else rnd.randbytes(rnd.randrange(0, 20))
        # compressible values (kafka-python sends a batch uncompressed if compression does not help)
        value = None if i % 11 == 5 else b"".join(rnd.choice(WORDS) for _ in range(rnd.randrange(0, 60)))
        ts = base + rnd.randrange(-50, 5000)  # out of order on purpose: negative deltas
        hdrs = []
        if headers and i % 3 == 0:
            hdrs = [(f"h{j}", None if j == 1 else rnd.randbytes(j * 3)) for j in range(rnd.randrange(1, 4))]
        if headers and i == 10:
            hdrs.append(("ключ", b"non-ASCII header key"))
        out.append((key, value, ts, hdrs))
    return out


def kafka_v2(records, codec, transactional=False, producer=(-1, -1, -1)):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=1 << 30)
    for offset, (key, value, ts, hdrs) in enumerate(records):
        builder.append(offset, timestamp=ts, key=key, value=value, headers=hdrs)
    return bytes(builder.build())


def expected(records, base_offset=0):
    return [(base_offset + i, ts, key, value, list(h)) for i, (key, value, ts, h) in enumerate(records)]


def kwire_view(data):
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in iter_records(data)]


def kafka_view(data):
    out = []
    for batch in MemoryRecords(data):
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


@pytest.mark.parametrize("codec", V2_CODECS, ids=lambda c: c.name)
def test_kafka_python_v2_batches_decode_in_kwire(codec):
    records = sample_records()
    data = kafka_v2(records, codec)
    (batch,) = list(iter_batches(data))
    assert isinstance(batch, RecordBatch)
    batch.validate()
    assert batch.compression == codec
    assert batch.record_count == len(records)
    assert batch.base_timestamp == records[0][2]
    assert batch.max_timestamp == max(r[2] for r in records)
    assert kwire_view(data) == expected(records)


@pytest.mark.parametrize("codec", V2_CODECS, ids=lambda c: c.name)
def test_kwire_v2_batches_decode_in_kafka_python(codec):
    records = sample_records(seed=2)
    builder = RecordBatchBuilder(compression=codec)
    for key, value, ts, hdrs in records:
        builder.append(key, value, ts, hdrs)
    data = builder.build()
    kbatch = DefaultRecordBatch(data)
    assert kbatch.validate_crc()
    assert kbatch.compression_type == codec
    assert kbatch.records_count == len(records)
    assert kafka_view(data) == expected(records)
    # and back through kwire, with extend() producing the very same bytes
    other = RecordBatchBuilder(compression=codec)
    other.extend(records)
    assert other.build() == data  # every codec here is deterministic
    assert kwire_view(data) == expected(records)


def test_uncompressed_v2_bytes_identical_to_kafka_python():
    records = sample_records(seed=3)
    builder = RecordBatchBuilder(partition_leader_epoch=0)  # kafka-python writes 0, Java -1
    for key, value, ts, hdrs in records:
        builder.append(key, value, ts, hdrs)
    assert builder.build() == kafka_v2(records, 0)


@pytest.mark.parametrize("codec", V2_CODECS, ids=lambda c: c.name)
def test_producer_fields_and_transactional_round_trip(codec):
    records = sample_records(5, seed=4)
    data = kafka_v2(records, codec, transactional=True, producer=(123456789, 7, 4242))
    batch = RecordBatch(data)
    batch.validate()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123456789, 7, 4242)
    assert batch.is_transactional and not batch.is_control
    assert batch.last_sequence == 4242 + 4

    builder = RecordBatchBuilder(compression=codec, producer_id=987654321, producer_epoch=3, base_sequence=99,
                                 transactional=True)
    builder.extend(records)
    kbatch = DefaultRecordBatch(builder.build())
    assert kbatch.validate_crc()
    assert (kbatch.producer_id, kbatch.producer_epoch, kbatch.base_sequence) == (987654321, 3, 99)
    assert kbatch.is_transactional and not kbatch.is_control_batch


@pytest.mark.parametrize("kind", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batch_reads_in_kafka_python(kind):
    data = build_control_batch(kind, producer_id=55, producer_epoch=2, coordinator_epoch=9, base_offset=1000,
                               timestamp=1_700_000_000_000)
    kbatch = DefaultRecordBatch(data)
    assert kbatch.validate_crc()
    assert kbatch.is_control_batch and kbatch.is_transactional
    (krec,) = list(kbatch)
    assert (krec.version, krec.type, krec.offset) == (0, int(kind), 1000)
    assert krec.commit == (kind == ControlRecordType.COMMIT)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_kafka_python_legacy_decodes_in_kwire(magic, codec):
    records = sample_records(30, seed=5, headers=False)
    builder = KLegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for offset, (key, value, ts, _) in enumerate(records):
        builder.append(offset, timestamp=ts, key=key, value=value)
    data = bytes(builder.build())
    batches = list(iter_batches(data))
    assert all(isinstance(b, LegacyRecordBatch) and b.magic == magic for b in batches)
    for b in batches:
        b.validate(deep=True)
    want_ts = [(ts if magic else -1) for _, _, ts, _ in records]
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(data)]
    assert got == [(i, want_ts[i], k, v, []) for i, (k, v, _, _) in enumerate(records)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_kwire_legacy_decodes_in_kafka_python(magic, codec):
    records = sample_records(30, seed=6, headers=False)
    builder = LegacyMessageSetBuilder(magic, compression=codec, base_offset=500)
    for key, value, ts, _ in records:
        builder.append(key, value, ts)
    data = builder.build()
    got = []
    for kbatch in MemoryRecords(data):
        assert isinstance(kbatch, KLegacyRecordBatch)
        assert kbatch.validate_crc()
        for r in kbatch:
            assert r.validate_crc()
            got.append((r.offset, r.timestamp, r.key, r.value))
    want_ts = [(ts if magic else None) for _, _, ts, _ in records]
    assert got == [(500 + i, want_ts[i], k, v) for i, (k, v, _, _) in enumerate(records)]
    # kwire agrees with itself too
    assert [(r.offset, r.key, r.value) for r in iter_records(data)] == \
        [(500 + i, k, v) for i, (k, v, _, _) in enumerate(records)]


def test_kafka_python_magic0_lz4_writes_the_legacy_header_checksum():
    """kafka-python's magic-0 LZ4 frames carry Kafka 0.8's broken header checksum; kwire reads them."""
    builder = KLegacyRecordBatchBuilder(magic=0, compression_type=3, batch_size=1 << 30)
    builder.append(0, timestamp=None, key=b"k", value=b"v" * 100)
    data = bytes(builder.build())
    batch = LegacyRecordBatch(data)
    frame = batch.value
    flg_bd = frame[4:6]
    assert frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF  # hashed with the magic bytes
    assert frame[6] != (xxh32(flg_bd) >> 8) & 0xFF  # i.e. not the standard checksum
    assert [(r.key, r.value) for r in batch] == [(b"k", b"v" * 100)]


def test_kwire_magic0_lz4_writes_the_legacy_header_checksum():
    builder = LegacyMessageSetBuilder(0, compression=Compression.LZ4)
    builder.append(b"k", b"v" * 100)
    frame = LegacyRecordBatch(builder.build()).value
    assert frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF
    builder = LegacyMessageSetBuilder(1, compression=Compression.LZ4)
    builder.append(b"k", b"v" * 100, 1)
    frame = LegacyRecordBatch(builder.build()).value
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF


def test_mixed_blob_with_partial_tail_matches_kafka_python():
    records = sample_records(20, seed=7)
    legacy = KLegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 30)
    for offset, (key, value, ts, _) in enumerate(records[:5]):
        legacy.append(offset, timestamp=ts, key=key, value=value)
    blob = bytes(legacy.build()) + kafka_v2(records, Compression.LZ4) + kafka_v2(records, 0)[:-7]
    assert kwire_view(blob) == kafka_view(blob)
    assert len(list(iter_batches(blob))) == 2
