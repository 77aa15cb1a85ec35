"""The log cleaner's record walks and dedupe map (offset_map.py): the compiled helper's walks
(kwire.protocol.records._layout map_put_v2 / map_keep_v2 / map_rehash) against their Python
stand-ins on fuzzed, corrupt and edge batches (both read records through the record layer's one
walk), and the map's growth within its buffer."""

from __future__ import annotations

import hashlib
import random

import pytest

from kwire.broker.storage.offset_map import ENTRY_BYTES, INITIAL_SLOTS, OffsetMap, has_compiled_walk
from kwire.protocol.errors import CorruptRecordError
from kwire.protocol.records import Compression, RecordBatch, RecordBatchBuilder, walk

from ...protocol.test_records_walk import EDGE_RECORDS

compiled_only = pytest.mark.skipif(not has_compiled_walk(), reason="the compiled helper is not built")


def _key(rng: random.Random) -> bytes | None:
    roll = rng.random()
    if roll < 0.05:
        return None
    if roll < 0.1:
        return b""
    if roll < 0.2:  # long keys: several MD5 blocks, 2-byte length varints
        return rng.randbytes(rng.randrange(56, 300))
    return b"k%d" % rng.randrange(40)


def _batch(rng: random.Random, base_offset: int) -> bytes:
    b = RecordBatchBuilder(compression=rng.choice([Compression.NONE, Compression.NONE, Compression.LZ4]),
                           base_offset=base_offset)
    ts = rng.choice([0, 1_000, 1 << 40])
    for _ in range(rng.randrange(1, 30)):
        value = None if rng.random() < 0.15 else rng.randbytes(rng.choice([0, 5, 70, 9_000]))
        headers = [("h", rng.randbytes(3))] if rng.random() < 0.2 else None
        # timestamps out of order and far apart: negative and multi-byte deltas
        b.append(_key(rng), value, ts + rng.randrange(-5_000, 5_000) * rng.choice([1, 1 << 20]), headers=headers)
    return b.build()


def _section(raw: bytes):
    batch = RecordBatch(raw)
    buf, start, end, _ = batch.records_section()
    return batch, buf, start, end


def _table(m: OffsetMap) -> bytes:
    return bytes(m._buf[:m.slots * ENTRY_BYTES])


def _both_walks(data: bytes, start: int, count: int) -> list[list]:
    """The compiled and the Python walk's results (put, keep, the table; or the error's text)."""
    outcome = []
    for compiled in (True, False):
        m = OffsetMap(ENTRY_BYTES * 64, compiled=compiled)
        got: list = []
        for method, last_arg in ((m.put_records, 0), (m.keep_records, True)):
            try:
                got.append(method(data, start, len(data), count, 0, last_arg))
            except CorruptRecordError as exc:
                got.append(str(exc))
        got.append(_table(m))
        outcome.append(got)
        m.close()
    return outcome


@compiled_only
def test_compiled_md5_is_md5():
    from kwire.protocol.records import _layout

    rng = random.Random(5)
    for n in list(range(0, 140)) + [1_000, 4_096]:
        key = rng.randbytes(n)
        assert _layout.key_digest(key) == OffsetMap.hash_key(key) == hashlib.md5(key).digest()


@compiled_only
@pytest.mark.parametrize("seed", range(6))
def test_compiled_walks_match_python_walks_on_fuzzed_batches(seed):
    rng = random.Random(seed)
    slots = rng.choice([7, 40, 200, 5_000])
    maps = [OffsetMap(ENTRY_BYTES * slots, compiled=c) for c in (True, False)]
    offset = 0
    batches = []
    for _ in range(40):
        raw = _batch(rng, offset)
        batches.append(raw)
        offset = RecordBatch(raw).next_offset + rng.choice([0, 0, 3])
    start = rng.choice([0, offset // 3])
    # The map: the same stopping points, the same table byte for byte.
    for raw in batches:
        batch, buf, s, e = _section(raw)
        results = [m.put_records(buf, s, e, batch.record_count, batch.base_offset, start) for m in maps]
        assert results[0] == results[1]
        assert len(maps[0]) == len(maps[1]) and _table(maps[0]) == _table(maps[1])
        if results[0] >= 0:
            break
        for m in maps:
            m.latest_offset = batch.last_offset
    # What each batch keeps, whatever the latest offset and the tombstones' fate; with and
    # without the bitmap of the offsets the map holds.
    if rng.random() < 0.5:
        for m in maps:
            m.mark_dirty(start)
    for raw in batches:
        batch, buf, s, e = _section(raw)
        latest = rng.choice([-1, offset // 2, maps[0].latest_offset, offset])
        keep_tombstones = rng.random() < 0.5
        results = []
        for m in maps:
            m.latest_offset = latest
            results.append(m.keep_records(buf, s, e, batch.record_count, batch.base_offset, keep_tombstones))
        assert results[0] == results[1]
        kept, tombstones, max_ts, spans = results[0]
        assert kept >= tombstones >= 0 and len(spans) % 2 == 0
        # The spans hold whole records: read back, they are the records kept, in order.
        if kept:
            assert max_ts > -(1 << 63)
    for m in maps:
        m.close()


@compiled_only
@pytest.mark.parametrize("seed", range(4))
def test_corrupt_records_are_refused_alike(seed):
    rng = random.Random(seed)
    for _ in range(200):
        raw = bytearray(_batch(rng, 0))
        batch = RecordBatch(bytes(raw))
        if batch.compression:
            continue
        for _ in range(rng.randrange(1, 4)):  # flip bytes of the records
            at = rng.randrange(61, len(raw))
            raw[at] = rng.randrange(256)
        cut = rng.choice([len(raw), rng.randrange(61, len(raw) + 1)])
        data = bytes(raw[:cut])
        count = rng.choice([batch.record_count, batch.record_count + 1, max(batch.record_count - 1, 0)])
        outcome = _both_walks(data, 61, count)
        assert outcome[0] == outcome[1]


@pytest.mark.parametrize("compiled", [True, False] if has_compiled_walk() else [False])
def test_the_map_grows_within_its_buffer(compiled):
    budget = ENTRY_BYTES * (INITIAL_SLOTS * 5)
    m = OffsetMap(budget, compiled=compiled)
    assert m.slots == INITIAL_SLOTS
    b = RecordBatchBuilder()
    n = 5_000
    for i in range(n):
        b.append(b"key-%d" % i, b"v", 1_000)
    batch, buf, s, e = _section(b.build())
    assert m.put_records(buf, s, e, n, 0, 0) == -1
    assert len(m) == n and m.slots == 2 * INITIAL_SLOTS
    assert [m.get(b"key-%d" % i) for i in (0, 17, n - 1)] == [0, 17, n - 1]
    # The table cannot grow past the buffer with the old one beside it: 2x -> 3x, then full.
    b = RecordBatchBuilder(base_offset=n)
    more = INITIAL_SLOTS * 3
    for i in range(more):
        b.append(b"more-%d" % i, b"v", 1_000)
    batch, buf, s, e = _section(b.build())
    stopped = m.put_records(buf, s, e, more, n, 0)
    assert m.slots == 3 * INITIAL_SLOTS and m.slots * ENTRY_BYTES * 5 // 3 <= budget
    assert stopped == m.capacity - n and len(m) == m.capacity
    assert m.get(b"key-17") == 17 and m.get(b"more-0") == n
    m.close()


def test_a_key_whose_map_is_full_is_not_found():
    m = OffsetMap(ENTRY_BYTES * 1, load_factor=1.0)
    m.put(b"a", 5)
    assert m.get(b"a") == 5 and m.get(b"b") == -1
    with pytest.raises(OverflowError):
        m.put(b"b", 6)


@pytest.mark.parametrize("compiled", [True, False] if has_compiled_walk() else [False])
@pytest.mark.parametrize("seed", range(4))
def test_the_bitmap_of_mapped_offsets_answers_as_the_map(seed, compiled):
    """After a map is built from every record of [start, latest] (as the cleaner builds it), a
    record there is kept by the bitmap exactly when the map's lookup keeps it."""
    rng = random.Random(seed)
    batches, offset = [], 0
    for _ in range(30):
        raw = _batch(rng, offset)
        batches.append(raw)
        offset = RecordBatch(raw).next_offset
    start = RecordBatch(batches[rng.randrange(10)]).base_offset
    plain, marked = (OffsetMap(ENTRY_BYTES * 20_000, compiled=compiled) for _ in range(2))
    for m in (plain, marked):
        for raw in batches:
            batch, buf, s, e = _section(raw)
            if batch.last_offset >= start:
                assert m.put_records(buf, s, e, batch.record_count, batch.base_offset, start) == -1
                m.latest_offset = batch.last_offset
    assert marked.mark_dirty(start) and not plain._bits
    for raw in batches:
        batch, buf, s, e = _section(raw)
        for keep_tombstones in (True, False):
            kept = marked.keep_records(buf, s, e, batch.record_count, batch.base_offset, keep_tombstones)
            assert kept == plain.keep_records(buf, s, e, batch.record_count, batch.base_offset, keep_tombstones)
        # A batch the bitmap says is wholly superseded keeps nothing (the cleaner skips its walk).
        if marked.none_latest(batch.base_offset, batch.last_offset):
            assert kept[0] == 0 and batch.base_offset >= start
        elif batch.base_offset >= start:
            assert any(bool(marked.keep_records(buf, s, e, batch.record_count, batch.base_offset, t)[0])
                       for t in (True,)) or all(r.key is None for r in batch.records())
    assert not plain.none_latest(start, start)


def test_the_bitmap_stays_within_the_buffer():
    m = OffsetMap(ENTRY_BYTES * 10 + 8)
    m.put(b"a", 1_000)
    m.latest_offset = 1_000
    assert not m.mark_dirty(0)  # 126 bytes of bits beside 240 of table: more than the buffer
    assert m.mark_dirty(990)  # 2 bytes


@compiled_only
def test_the_walks_holding_the_gil_answer_the_same():
    rng = random.Random(9)
    maps = [OffsetMap(ENTRY_BYTES * 500) for _ in range(2)]
    maps[1].release_gil = False
    offset = 0
    for _ in range(20):
        raw = _batch(rng, offset)
        batch, buf, s, e = _section(raw)
        offset = batch.next_offset
        assert len({m.put_records(buf, s, e, batch.record_count, batch.base_offset, 0) for m in maps}) == 1
        for m in maps:
            m.latest_offset = batch.last_offset
        assert len({str(m.keep_records(buf, s, e, batch.record_count, batch.base_offset, True)) for m in maps}) == 1
    assert _table(maps[0]) == _table(maps[1])


@compiled_only
@pytest.mark.parametrize("name", sorted(EDGE_RECORDS))
def test_the_walks_refuse_exactly_the_records_the_record_walk_refuses(name):
    # The cleaner reads records through the record layer's one walk (compiled or Python): a
    # record the walk refuses (a header count that is negative, bytes after a zero header
    # count, a field past the record...) is a clear CorruptRecordError from both of its walks.
    for data, count in ((EDGE_RECORDS[name], 1), (EDGE_RECORDS["good"] + EDGE_RECORDS[name], 2),
                        (EDGE_RECORDS[name] + EDGE_RECORDS["good"], 2)):
        _, verdict = walk.record_columns(data, 0, len(data), count, compiled=False)
        outcome = _both_walks(data, 0, count)
        assert outcome[0] == outcome[1], (name, data)
        refused = [isinstance(result, str) for result in outcome[0][:2]]
        assert refused == [verdict >= 0] * 2, (name, data, outcome[0])
        if verdict >= 0:
            assert f"record {verdict} of the batch at offset 0 is malformed" in outcome[0][0]


@compiled_only
def test_a_forged_record_count_is_refused_alike_without_sizing_anything_by_it():
    data = EDGE_RECORDS["good"] * 3
    outcome = []
    for compiled in (True, False):
        with OffsetMap(ENTRY_BYTES * 64, compiled=compiled) as m:
            got = []
            for method, last_arg in ((m.put_records, 0), (m.keep_records, True)):
                with pytest.raises(CorruptRecordError) as exc:
                    method(data, 0, len(data), 2**31 - 1, 0, last_arg)
                got.append(str(exc.value))
            outcome.append(got)
    assert outcome[0] == outcome[1]
    assert "record 3 of the batch at offset 0 is malformed" in outcome[0][0]
