"""An append reads each batch header once: what the producer state and the segment's indexes get
from that reading must be what the stored bytes say (a reload, which walks them, is the judge)."""

from __future__ import annotations

import random

import pytest

from kwire.broker.storage import LOG_APPEND_TIME, PartitionLog
from kwire.broker.storage.batch_header import iter_headers, read_header
from kwire.protocol.errors import OutOfOrderSequenceNumberError
from kwire.protocol.records import RecordBatchBuilder, iter_batches

from .helpers import SMALL, log_files, read_all


def _batch(n: int, ts: list[int], *, producer_id: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(f"k{i}".encode(), f"v{i}".encode().ljust(40, b"."), ts[i % len(ts)])
    return b.build()


def test_headers_match_the_batches():
    rng = random.Random(7)
    batches = [_batch(rng.randint(1, 6), [rng.randint(0, 10_000) for _ in range(3)], producer_id=rng.choice([-1, 9]),
                      epoch=2, seq=rng.randint(0, 50)) for _ in range(12)]
    data = b"".join(batches)
    got = list(iter_headers(data))
    want = list(iter_batches(data))
    assert len(got) == len(want) == 12
    pos = 0
    for header, batch in zip(got, want, strict=True):
        assert header.position == pos
        assert (header.base_offset, header.last_offset, header.size, header.max_timestamp) == \
            (batch.base_offset, batch.last_offset, batch.size_in_bytes, batch.max_timestamp)
        assert (header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence) == \
            (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence)
        pos += batch.size_in_bytes
    # Decided offsets run on from the first, whatever the headers say.
    assert [(h.base_offset, h.last_offset) for h in iter_headers(data, first_offset=100)] == \
        [(100 + want[i].base_offset + sum(b.record_count for b in want[:i]),
          100 + sum(b.record_count for b in want[:i + 1]) - 1) for i in range(12)]
    assert read_header(data, got[3].position) == got[3]


@pytest.mark.parametrize("timestamp_type", ["CreateTime", LOG_APPEND_TIME])
def test_multi_batch_appends_index_as_a_reload_does(tmp_path, timestamp_type):
    config = SMALL.with_(message_timestamp_type=timestamp_type)
    log = PartitionLog(tmp_path / "t-0", config)
    rng = random.Random(11)
    for i in range(30):
        # Several batches per append, the largest timestamp not always in the last one.
        blob = b"".join(_batch(rng.randint(1, 4), [rng.randint(1_000, 9_000) for _ in range(2)])
                        for _ in range(rng.randint(1, 4)))
        log.append(blob, now_ms=50_000 + i)
    live = [(s.base_offset, s.next_offset, s.max_timestamp) for s in log.segments]
    lookups = [log.offset_for_timestamp(t) for t in range(0, 60_000, 997)]
    stored = read_all(log)
    log.close()
    assert len(log_files(log.dir)) > 3
    for path in log_files(log.dir):  # the indexes are rebuilt from the stored batches
        path.with_suffix(".index").unlink()
        path.with_suffix(".timeindex").unlink()
    log = PartitionLog(log.dir, config, clean_shutdown=False)
    assert [(s.base_offset, s.next_offset, s.max_timestamp) for s in log.segments] == live
    assert [log.offset_for_timestamp(t) for t in range(0, 60_000, 997)] == lookups
    assert read_all(log) == stored
    if timestamp_type == LOG_APPEND_TIME:
        assert {b.max_timestamp for b in iter_batches(stored)} == set(range(50_000, 50_030))
    log.close()


def test_sequences_of_a_multi_batch_append(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    first = _batch(3, [1], producer_id=5, epoch=0, seq=0)
    second = _batch(2, [2], producer_id=5, epoch=0, seq=3)
    assert log.append(first + second) == (0, 4)
    # A retry of the request is answered with the offsets it got; a batch that skips a
    # sequence number is refused.
    assert log.append(first + second) == (0, 4)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(_batch(1, [3], producer_id=5, epoch=0, seq=6))
    assert log.append(_batch(1, [3], producer_id=5, epoch=0, seq=5)) == (5, 5)
    log.close()
    log = PartitionLog(log.dir, SMALL)  # the state rebuilt from the log agrees
    assert log.append(_batch(1, [4], producer_id=5, epoch=0, seq=6)) == (6, 6)
    log.close()
