"""Property tests: random records round trip through every codec, and random damage to valid
batches raises only kwire's DecodeError family (or decodes), promptly and without large
allocations."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.protocol.errors import DecodeError
from kwire.protocol.records import (
    Compression,
    ControlRecordType,
    LegacyMessageSetBuilder,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    compress,
    decompress,
    iter_batches,
)
from tests.tiers import examples

FAST = settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
TS = 1_700_000_000_000
MAX_DECOMPRESSED = 1 << 20  # keep forged payloads small in these tests

payloads = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=10), payloads), max_size=3)
v2_records = st.lists(
    st.tuples(payloads, payloads, st.integers(min_value=-(2**40), max_value=2**40), headers),
    max_size=40,
)


@FAST
@given(records=v2_records, codec=st.sampled_from(list(Compression)),
       producer=st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)),
       base_offset=st.integers(0, 2**62), bulk=st.booleans())
def test_v2_round_trip(records, codec, producer, base_offset, bulk):
    builder = RecordBatchBuilder(compression=codec, base_offset=base_offset, producer_id=producer[0],
                                 producer_epoch=producer[1], base_sequence=producer[2])
    rows = [(k, v, TS + d, h) for k, v, d, h in records]
    if bulk:
        builder.extend(rows)
    else:
        for row in rows:
            builder.append(*row)
    data = builder.build()
    (batch,) = iter_batches(data)
    batch.validate()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert batch.record_count == len(rows)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert got == [(base_offset + i, ts, k, v, list(h)) for i, (k, v, ts, h) in enumerate(rows)]


@FAST
@given(rows=st.lists(st.tuples(payloads, payloads, st.integers(0, 2**40)), max_size=30),
       magic=st.sampled_from([0, 1]),
       codec=st.sampled_from([Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]),
       base_offset=st.integers(0, 2**40))
def test_legacy_round_trip(rows, magic, codec, base_offset):
    builder = LegacyMessageSetBuilder(magic, compression=codec, base_offset=base_offset)
    for row in rows:
        builder.append(*row)
    data = builder.build()
    got = []
    for batch in iter_batches(data):
        batch.validate(deep=True)
        got += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    assert got == [(base_offset + i, ts if magic else -1, k, v) for i, (k, v, ts) in enumerate(rows)]


@FAST
@given(data=st.binary(max_size=2000), codec=st.sampled_from([c for c in Compression if c]))
def test_codecs_round_trip_and_survive_garbage(data, codec):
    assert decompress(codec, compress(codec, data)) == data
    try:
        decompress(codec, data, max_size=MAX_DECOMPRESSED)
    except DecodeError:
        pass


# ------------------------------------------------------------------------------------------
# damage

def _v2(codec, **kw):
    builder = RecordBatchBuilder(compression=codec, **kw)
    builder.extend([(b"key%d" % i, b"value " * i, TS + i * 37 - 100, [("h", b"x")] if i % 3 == 0 else None)
                    for i in range(12)])
    builder.append(None, None, TS)
    return builder.build()


def _legacy(magic, codec):
    builder = LegacyMessageSetBuilder(magic, compression=codec, base_offset=3)
    for i in range(6):
        builder.append(b"k%d" % i if i % 2 else None, b"legacy value " * i, TS + i)
    return builder.build()


SEEDS = (
    [_v2(c) for c in Compression]
    + [_legacy(m, c) for m in (0, 1) for c in (Compression.NONE, Compression.GZIP, Compression.SNAPPY,
                                                Compression.LZ4)]
    + [build_control_batch(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0)]
)


def _exercise(data: bytes) -> None:
    """Everything a consumer would do; only DecodeError may come out."""
    for batch in iter_batches(data, max_decompressed_size=MAX_DECOMPRESSED):
        try:
            batch.validate()
        except DecodeError:
            pass
        for record in batch:
            record.offset, record.key, record.value, record.headers  # noqa: B018
        if isinstance(batch, RecordBatch) and batch.is_control:
            for record in batch:
                record.type, record.version  # noqa: B018


def _check(data: bytes) -> None:
    tracemalloc.start()
    try:
        _exercise(data)
    except DecodeError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    # nothing sized by a forged length: a few copies of the input and the decompression cap
    assert peak < 4 * MAX_DECOMPRESSED + 50 * len(data) + 1_000_000, peak


mutation = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1,
                                        max_size=4)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("int32"), st.integers(0, 10**6),
              st.sampled_from([0, 1, -1, 7, 48, 49, 2**31 - 1, -(2**31), 1000, 60])),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 8)),
)


def _mutate(data: bytes, how) -> bytes:
    buf = bytearray(data)
    if not buf:
        return bytes(how[2]) if how[0] == "insert" else b""
    kind = how[0]
    if kind == "flip":
        for pos, mask in how[1]:
            buf[pos % len(buf)] ^= mask
    elif kind == "truncate":
        del buf[how[1] % len(buf):]
    elif kind == "int32":
        pos = how[1] % max(1, len(buf) - 4)
        buf[pos:pos + 4] = struct.pack(">i", how[2])
    elif kind == "insert":
        pos = how[1] % len(buf)
        buf[pos:pos] = how[2]
    else:
        pos = how[1] % len(buf)
        del buf[pos:pos + how[2]]
    return bytes(buf)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(SEEDS), how=mutation, fix_crc=st.booleans())
def test_damaged_blobs_raise_only_decode_errors(seed, how, fix_crc):
    damaged = bytearray(_mutate(seed, how))
    if fix_crc and len(damaged) >= 61 and damaged[16] == 2:
        # a consistent CRC makes validate() pass, so the record parser sees the damage
        damaged[17:21] = struct.pack(">I", crc32c(bytes(damaged[21:])))
    _check(bytes(damaged))


def _recompress_v2(batch: bytes, inner: bytes) -> bytes:
    codec = batch[22] & 7
    body = compress(codec, inner) if codec else inner
    out = bytearray(batch[:61]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from(list(Compression)), how=mutation,
       count=st.sampled_from([None, 0, 1, 12, 13, 14, 10**6, -1]))
def test_damaged_records_inside_valid_compression(codec, how, count):
    """Damage the (decompressed) records, then recompress with a correct length and CRC."""
    seed = _v2(codec)
    inner = decompress(codec, seed[61:])
    damaged = _recompress_v2(seed, _mutate(inner, how))
    if count is not None:
        damaged = bytearray(damaged)
        struct.pack_into(">i", damaged, 57, count)
        struct.pack_into(">I", damaged, 17, crc32c(bytes(damaged[21:])))
        damaged = bytes(damaged)
    _check(damaged)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(magic=st.sampled_from([0, 1]), codec=st.sampled_from([Compression.GZIP, Compression.SNAPPY, Compression.LZ4]),
       how=mutation)
def test_damaged_legacy_inner_message_sets(magic, codec, how):
    seed = bytearray(_legacy(magic, codec))
    value_at = 12 + (22 if magic else 14)  # entry header + message overhead, null key
    inner = decompress(codec, bytes(seed[value_at:]))
    value = compress(codec, _mutate(inner, how), legacy_lz4_checksum=magic == 0)
    out = seed[:value_at - 4] + struct.pack(">i", len(value)) + value
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 12, zlib.crc32(bytes(out[16:])))
    _check(bytes(out))


@pytest.mark.parametrize("seed", SEEDS, ids=range(len(SEEDS)))
def test_every_truncation_yields_the_complete_batches_only(seed):
    sizes = [b.size_in_bytes for b in iter_batches(seed)]
    for cut in range(len(seed) + 1):
        complete, total = [], 0
        for size in sizes:
            if total + size > cut:
                break
            complete.append(size)
            total += size
        assert [b.size_in_bytes for b in iter_batches(seed[:cut])] == complete
