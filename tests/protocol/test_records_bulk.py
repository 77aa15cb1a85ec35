"""The bulk encoder (``kwire.protocol.records.bulk``): the compiled and the Python encoders write
the same bytes, a sealed batch is the batch ``RecordBatchBuilder`` writes for the same records,
the stopping rules (batch bytes, record count, record size), and the compiled murmur2."""

from __future__ import annotations

import random
import struct

import pytest

from kwire.client.partitioner import java_partition
from kwire.protocol.records import Compression, RecordBatch, RecordBatchBuilder, bulk, crc

compiled_only = pytest.mark.skipif(not bulk.compiled(), reason="the compiled helper _layout is not built")

HEADERS = [("trace", b"abc"), ("none", None), ("caf\u00e9", b"")]


def random_columns(rng: random.Random, n: int) -> tuple[list, list]:
    """Values and keys of every shape: null, empty, short, long enough for 2- and 3-byte varints."""
    sizes = [0, 1, 7, 63, 64, 100, 8191, 8192, 20_000]
    values = [None if rng.random() < 0.1 else rng.randbytes(rng.choice(sizes)) for _ in range(n)]
    keys = [None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 70, 200])) for _ in range(n)]
    return values, keys


def both(*args) -> bytes:
    """The compiled and the Python encoders' answers, checked equal."""
    python = bulk.encode_records_py(*args)
    if bulk.compiled():
        assert bulk.encode_records(*args) == python
    return python


@compiled_only
@pytest.mark.parametrize("seed", range(6))
def test_compiled_and_python_write_the_same_bytes(seed):
    rng = random.Random(seed)
    values, keys = random_columns(rng, 300)
    headers = bulk.encode_headers(HEADERS if seed % 2 else None)
    for key_column in (keys, tuple(keys), None, b"one key", b""):
        first_delta = rng.choice([0, 5, 70, 9000])
        ts_delta = rng.choice([0, 1, -5, 100_000, -(2**40)])
        args = (values, key_column, headers, 3, 290, first_delta, ts_delta, 10**9, 10**6, 10**9)
        assert bulk.encode_records(*args) == bulk.encode_records_py(*args)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.ZSTD])
def test_a_sealed_batch_is_the_builders_batch(codec):
    """Two runs sealed into one batch (as when a batch is filled by two bulk calls) equal the
    batch RecordBatchBuilder builds from the same records, and it validates and reads back."""
    rng = random.Random(7)
    values, keys = random_columns(rng, 120)
    headers = bulk.encode_headers(HEADERS)
    first, stop = both(values, keys, headers, 0, 50, 0, 0, 10**9, 10**6, 10**9)
    assert stop == 50
    second, stop = both(values, keys, headers, 50, 120, 50, 17, 10**9, 10**6, 10**9)
    assert stop == 120
    sealed = bulk.seal_batch([first, second], 120, 1_700_000_000_000, 1_700_000_000_017, compression=codec,
                             producer_id=42, producer_epoch=3, base_sequence=1000, transactional=True)
    builder = RecordBatchBuilder(compression=codec, producer_id=42, producer_epoch=3, base_sequence=1000,
                                 transactional=True)
    for i in range(120):
        builder.append(keys[i], values[i], 1_700_000_000_000 + (0 if i < 50 else 17), HEADERS)
    expected = builder.build()
    if codec == Compression.NONE:
        assert sealed == expected
    batch = RecordBatch(sealed)
    batch.validate()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (42, 3, 1000, True)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in RecordBatch(expected)]


def test_stopping_rules():
    values = [b"x" * 100] * 50
    one = len(both(values, None, b"\x00", 0, 1, 0, 0, 10**9, 1, 10**9)[0])
    # Bytes: as many whole records as fit.
    data, stop = both(values, None, b"\x00", 0, 50, 0, 0, one * 10 + one // 2, 10**6, 10**9)
    assert stop == 10 and len(data) == one * 10
    # Count: batch.num.messages.
    assert both(values, None, b"\x00", 0, 50, 0, 0, 10**9, 7, 10**9)[1] == 7
    # An empty batch takes its first record whatever its size; a batch with records does not.
    assert both(values, None, b"\x00", 0, 50, 0, 0, 10, 10**6, 10**9)[1] == 1
    assert both(values, None, b"\x00", 0, 50, 4, 0, 10, 10**6, 10**9) == (b"", 0)
    # A record larger than max_record is never taken: the run stops before it.
    mixed = [b"a", b"b", b"x" * 1000, b"c"]
    assert both(mixed, None, b"\x00", 0, 4, 0, 0, 10**9, 10**6, 500)[1] == 2
    assert both(mixed, None, b"\x00", 2, 4, 0, 0, 10**9, 10**6, 500) == (b"", 2)


def test_bad_columns_are_refused_by_name():
    for encode in ([bulk.encode_records_py, bulk.encode_records] if bulk.compiled() else [bulk.encode_records_py]):
        with pytest.raises(TypeError, match="value 1 is str"):
            encode([b"a", "b"], None, b"\x00", 0, 2, 0, 0, 10**9, 10, 10**9)
        with pytest.raises(TypeError, match="key 0 is bytearray"):
            encode([b"a", b"b"], [bytearray(b"k"), b"k"], b"\x00", 0, 2, 0, 0, 10**9, 10, 10**9)
        with pytest.raises(ValueError, match="1 keys for 2 values"):
            encode([b"a", b"b"], [b"k"], b"\x00", 0, 2, 0, 0, 10**9, 10, 10**9)


@compiled_only
def test_compiled_murmur2_is_javas():
    rng = random.Random(3)
    keys = [rng.randbytes(rng.randint(0, 40)) for _ in range(2000)]
    for partitions in (1, 3, 7, 100):
        assert bulk.murmur2_partitions(keys, partitions) == [java_partition(k, partitions) for k in keys]
    assert bulk.murmur2_partitions([b"a", None], 3) is None  # the partitioner decides about None


@pytest.mark.skipif(not crc.compiled(), reason="no compiled crc32c here (not built, or no SSE4.2)")
def test_compiled_crc32c_is_the_packages():
    import crc32c as package

    rng = random.Random(11)
    for n in (0, 1, 7, 8, 9, 63, 4097, 70_001, 1_000_003):
        data = rng.randbytes(n)
        seed = rng.randrange(2**32)
        assert crc.crc32c(data) == package.crc32c(data)
        assert crc.crc32c(data, seed) == package.crc32c(data, seed)
        assert crc.crc32c(memoryview(data)[3:]) == package.crc32c(data[3:])
    assert crc.crc32c(b"b", crc.crc32c(b"a")) == crc.crc32c(b"ab")


@pytest.mark.parametrize("delim", [b"\n", b"\x00", b"\r\n", b"aa", b"aba"])
@pytest.mark.parametrize("seed", range(3))
def test_delimited_values_are_the_split_records_and_encode_the_same(delim, seed, monkeypatch):
    # kwire produce's input read in place: the records bytes.split finds (from the left, so a
    # delimiter that overlaps itself ends records where split ends them), the rest after the
    # last delimiter, and the same record bytes as the list of them, compiled or not.
    rng = random.Random(seed)
    alphabet = b"ab\n\r\x00x"
    data = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 3000)))
    *records, rest = data.split(delim)
    headers = bulk.encode_headers(HEADERS if seed else None)
    for compiled in ([True, False] if bulk.compiled() else [False]):
        if not compiled:
            monkeypatch.setattr(bulk, "_delimited_starts", None)
        buf = bytearray(data + b"junk after the read")  # a read's buffer is larger than the read
        values, stop = bulk.delimited_values(buf, len(data), delim)
        assert list(values) == records and len(values) == len(records)
        assert bytes(buf[stop:len(data)]) == rest
        assert type(values) is (bulk.DelimitedValues if compiled else list)
        if records:
            assert values[-1] == records[-1] and values[1:3] == records[1:3]
            for key in (None, b"k", [b"key"] * len(records)):
                for start, stop_at, max_bytes, max_count in ((0, len(records), 1 << 20, 1 << 20),
                                                            (1 % len(records), len(records), 120, 7)):
                    args = (headers, start, stop_at, start, 3, max_bytes, max_count, 1 << 20)
                    assert bulk.encode_records(values, key, *args) == bulk.encode_records_py(records, key, *args)


@compiled_only
def test_spans_outside_the_data_are_refused():
    starts = struct.pack("=3q", 0, 2, 99)
    with pytest.raises(ValueError, match="span 1 is not inside the data"):
        bulk.encode_records(bulk.DelimitedValues(b"a\nbc\n", starts, 1), None, b"\x00", 0, 2, 0, 0, 99, 99, 99)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_a_batch_in_its_pieces_is_the_sealed_batch(codec):
    # kwire produce's sender writes a bulk batch's pieces by reference (socket.sendmsg): the
    # pieces are the bytes seal_batch joins, the record sections themselves among them.
    rng = random.Random(7)
    values, keys = random_columns(rng, 50)
    sections = [bulk.encode_records(values, keys, b"\x00", a, b, a, 0, 1 << 30, 1 << 30, 1 << 30)[0]
                for a, b in ((0, 20), (20, 50))]
    args = (sections, 50, 1_700_000_000_000, 1_700_000_000_009)
    sealed = bulk.seal_batch_parts(*args, compression=codec, producer_id=7, producer_epoch=1, base_sequence=3)
    joined = bulk.seal_batch(*args, compression=codec, producer_id=7, producer_epoch=1, base_sequence=3)
    assert sealed.read() == joined and len(sealed) == len(joined)
    if codec == Compression.NONE:
        assert any(part is sections[1] for part in sealed.parts)  # not copied
    batch = RecordBatch(joined)
    batch.validate()
    assert [(r.key, r.value) for r in batch] == list(zip(keys, values, strict=True))
