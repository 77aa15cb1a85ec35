"""LogSegment on its own: append, index lookups, reads, timestamps, recovery, truncation."""

from __future__ import annotations

import os

import pytest

from kwire.broker.storage import LogSegment
from kwire.protocol.records import RecordBatch, iter_batches

from .helpers import make_batch, stored_form


def _segment_with(tmp_path, count=40, base=100, interval=200, records=2):
    seg = LogSegment(tmp_path, base, index_interval_bytes=interval)
    stored = []
    offset = base
    for i in range(count):
        data = stored_form(make_batch(records, ts=10_000 + 100 * i, tag=f"s{i}"), offset)
        seg.append(data, offset, offset + records - 1, 10_000 + 100 * i + records - 1)
        stored.append((offset, data))
        offset += records
    return seg, stored


def test_file_names_are_20_digit_base_offsets(tmp_path):
    seg = LogSegment(tmp_path, 42)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00000000000000000042.index", "00000000000000000042.log", "00000000000000000042.timeindex",
                     "00000000000000000042.txnindex"]
    seg.close()


def test_index_is_sparse_and_every_offset_reads_its_batch(tmp_path):
    seg, stored = _segment_with(tmp_path)
    # Entries every ~200 bytes of ~100-byte batches: sparse, but present.
    assert 0 < len(seg.offset_index) < len(stored)
    assert seg.next_offset == 100 + 2 * len(stored)
    for base, data in stored:
        for offset in (base, base + 1):
            piece = seg.read(offset, 1)  # max_bytes 1: exactly the holding batch (min one batch)
            assert piece.read() == data, offset
    seg.close()


def test_read_respects_max_bytes_with_whole_batches(tmp_path):
    seg, stored = _segment_with(tmp_path, count=10)
    size = len(stored[0][1])
    piece = seg.read(100, 3 * size + size // 2)
    assert piece.length == 3 * size
    assert [b.base_offset for b in iter_batches(piece.read())] == [100, 102, 104]
    assert seg.read(100, 10, min_one_batch=False) is None
    assert seg.read(seg.next_offset, 1000) is None
    seg.close()


def _expected_read(batches, next_offset, start, max_bytes, min_one_batch, max_offset):
    """``LogSegment.read`` worked out from the list of stored ``(position, base offset, size)``."""
    limit = next_offset if max_offset is None else min(max_offset, next_offset)
    if start >= limit or not batches:
        return None
    first = max([i for i, (_, base, _) in enumerate(batches) if base <= start], default=0)
    first_pos = end = batches[first][0]
    following = next_offset
    for i in range(first, len(batches)):
        pos, base, size = batches[i]
        over = pos + size - first_pos > max_bytes
        if base >= limit or (over and (i > first or not min_one_batch)):
            following = base
            break
        end = pos + size
        if over:  # the first batch alone, however big: it is all there is
            following = batches[i + 1][1] if i + 1 < len(batches) else next_offset
            break
    return None if end == first_pos else (first_pos, end - first_pos, following)


@pytest.mark.parametrize("seed", range(6))
def test_read_finds_the_holding_batch_in_one_walk_whatever_the_sizes_and_gaps(tmp_path, seed):
    """Batches of 40 B to 300 KB (so header walks switch between 64 KiB chunks and header-sized
    reads), offset gaps, sparse or dense indexes: every read gives what the stored list says."""
    import random

    rng = random.Random(seed)
    base0 = rng.choice([0, 1000])
    seg = LogSegment(tmp_path, base0, index_interval_bytes=rng.choice([1, 4096, 1 << 20]))
    batches, offset, position = [], base0, 0
    for i in range(rng.randint(1, 30)):
        n = rng.randint(1, 10)
        data = stored_form(make_batch(n, tag=f"b{i}", value_size=rng.choice([4, 1000, 30_000])), offset)
        seg.append(data, offset, offset + n - 1, 1_000 + n - 1)
        batches.append((position, offset, len(data)))
        position += len(data)
        offset += n + rng.choice([0, 0, 3])  # a gap now and then (as compaction or aborts leave)
    for _ in range(300):
        start = rng.randint(base0 - 3, offset + 2)
        max_bytes = rng.choice([0, 100, 5_000, 70_000, 1 << 20, 1 << 30])
        max_offset = rng.choice([None, base0, rng.randint(base0, offset + 2)])
        min_one_batch = rng.random() < 0.7
        piece = seg.read(start, max_bytes, min_one_batch=min_one_batch, max_offset=max_offset)
        got = None if piece is None else (piece.position, piece.length, piece.next_offset)
        assert got == _expected_read(batches, seg.next_offset, start, max_bytes, min_one_batch, max_offset), \
            (start, max_bytes, min_one_batch, max_offset)
    seg.close()


def test_slice_can_be_sent_with_sendfile(tmp_path):
    seg, stored = _segment_with(tmp_path, count=5)
    piece = seg.read(104, 1 << 20)
    out = tmp_path / "out.bin"
    with open(out, "wb") as f:
        assert piece.send_to(f.fileno()) == piece.length
    assert out.read_bytes() == b"".join(d for _, d in stored[2:])
    seg.close()


def test_find_offset_by_timestamp(tmp_path):
    seg, stored = _segment_with(tmp_path, count=30)
    # batch i holds records at 10000+100i and 10000+100i+1
    assert seg.find_offset_by_timestamp(0) == (100, 10_000)
    assert seg.find_offset_by_timestamp(10_001) == (101, 10_001)
    assert seg.find_offset_by_timestamp(10_002) == (102, 10_100)
    assert seg.find_offset_by_timestamp(12_050) == (142, 12_100)
    assert seg.find_offset_by_timestamp(12_901) == (159, 12_901)
    assert seg.find_offset_by_timestamp(12_902) is None
    assert seg.find_offset_by_timestamp(0, min_offset=131) == (131, 11_501)
    seg.close()


def test_load_after_reopen_matches(tmp_path):
    seg, stored = _segment_with(tmp_path, count=30)
    seg.flush()
    next_offset, max_ts = seg.next_offset, seg.max_timestamp
    seg.close()
    again = LogSegment(tmp_path, 100, index_interval_bytes=200)
    assert again.load() is None
    assert (again.next_offset, again.max_timestamp) == (next_offset, max_ts)
    assert again.read(133, 1).read() == stored[16][1]
    again.close()


def test_recover_clean_segment_truncates_nothing_and_rebuilds_same_index(tmp_path):
    seg, _ = _segment_with(tmp_path, count=30)
    seg.flush()
    index_bytes = seg.index_path.read_bytes()
    assert seg.recover() == 0
    assert seg.recovery_problem is None
    assert seg.index_path.read_bytes() == index_bytes
    seg.close()


@pytest.mark.parametrize("damage", ["torn", "garbage", "flip"])
def test_recover_cuts_the_damaged_tail(tmp_path, damage):
    seg, stored = _segment_with(tmp_path, count=10)
    seg.close()
    log = tmp_path / "00000000000000000100.log"
    data = bytearray(log.read_bytes())
    last_start = len(data) - len(stored[-1][1])
    if damage == "torn":
        del data[-7:]
    elif damage == "garbage":
        data += os.urandom(100)
        last_start = len(data) - 100
    else:
        data[-3] ^= 0xFF
    log.write_bytes(bytes(data))
    seg = LogSegment(tmp_path, 100, index_interval_bytes=200)
    truncated = seg.recover()
    assert truncated == len(data) - last_start
    assert seg.recovery_problem
    kept = stored if damage == "garbage" else stored[:-1]
    assert log.read_bytes() == b"".join(d for _, d in kept)
    assert seg.next_offset == kept[-1][0] + 2
    for b in iter_batches(log.read_bytes()):
        b.validate()
    seg.close()


def test_recover_cap_on_batch_size(tmp_path):
    seg, stored = _segment_with(tmp_path, count=3)
    size = len(stored[0][1])
    assert seg.recover(max_bytes=size - 1) == 3 * size
    assert "more than" in seg.recovery_problem
    seg.close()


def test_truncate_to_drops_the_holding_batch_and_later(tmp_path):
    seg, stored = _segment_with(tmp_path, count=20)
    removed = seg.truncate_to(121)  # inside batch 10 (offsets 120, 121)
    assert removed == sum(len(d) for _, d in stored[10:])
    assert seg.next_offset == 120
    assert seg.max_timestamp == 10_000 + 100 * 9 + 1
    assert seg.read(118, 1).read() == stored[9][1]
    assert seg.find_offset_by_timestamp(10_950) is None
    data = stored_form(make_batch(2, ts=50), 120)
    seg.append(data, 120, 121, 51)
    assert seg.read(120, 1).read() == data
    size = seg.size
    assert seg.truncate_to(100) == size  # everything
    assert seg.size == 0 and seg.next_offset == 100 and len(seg.offset_index) == 0
    seg.close()


def test_slice_survives_segment_delete(tmp_path):
    seg, stored = _segment_with(tmp_path, count=3)
    piece = seg.read(100, 1 << 20)
    seg.delete()
    assert list(tmp_path.iterdir()) == []
    assert piece.read() == b"".join(d for _, d in stored)
    assert RecordBatch(piece.read()).base_offset == 100
