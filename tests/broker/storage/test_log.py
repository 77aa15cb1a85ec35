"""PartitionLog: appends, reads, offsets, validation, timestamps, deletion, retention, restart."""

from __future__ import annotations

import pytest

from kwire.broker.storage import LOG_APPEND_TIME, LogConfig, PartitionLog
from kwire.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnsupportedForMessageFormatError,
)
from kwire.protocol.records import (
    ControlRecordType,
    LegacyMessageSetBuilder,
    RecordBatch,
    TimestampType,
    build_control_batch,
    iter_batches,
)

from .helpers import SMALL, batch_offsets, fill, log_files, make_batch, read_all, stored_form


@pytest.fixture
def log(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    yield log
    log.close()


def test_new_log_is_empty(log):
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert log.read(0, 1000) == []
    assert [p.name for p in log_files(log.dir)] == ["00000000000000000000.log"]


def test_append_assigns_offsets_and_reads_back_byte_exact_across_rolls(log):
    appended = fill(log, 60)  # ~150-byte batches, 2 KiB segments
    assert appended[0][:2] == (0, 2) and appended[-1][:2] == (177, 179)
    assert log.log_end_offset == 180
    assert len(log.segments) > 3
    assert all(s.size <= SMALL.segment_bytes for s in log.segments)
    # Files named by their first offset.
    assert [int(p.stem) for p in log_files(log.dir)] == [s.base_offset for s in log.segments]
    expected = b"".join(stored_form(batch, base) for base, _, batch in appended)
    assert read_all(log) == expected
    for batch in iter_batches(read_all(log)):
        batch.validate()  # offsets rewritten without breaking the CRC
    # Every offset reads the batch holding it first.
    for base, last, batch in appended:
        for offset in range(base, last + 1):
            first = log.read(offset, 1)
            assert len(first) == 1 and first[0].read() == stored_form(batch, base), offset


def test_read_crosses_segments_with_whole_batches(log):
    appended = fill(log, 40)
    size = len(appended[0][2])
    seg1 = log.segments[1]
    start = seg1.base_offset - 3  # last batch of segment 0
    slices = log.read(start, 5 * size)
    assert len(slices) == 2
    data = b"".join(s.read() for s in slices)
    assert len(data) == 5 * size
    assert batch_offsets(data)[0] == (start, start + 2)
    assert [b for b, _ in batch_offsets(data)] == list(range(start, start + 15, 3))


def test_min_one_batch(log):
    big = make_batch(2, value_size=600)
    log.append(big)
    fill(log, 2)
    assert log.read(0, 10, min_one_batch=False) == []
    (piece,) = log.read(0, 10)
    assert piece.read() == stored_form(big, 0)
    # the fetch limit still holds after the first batch
    assert len(log.read(0, len(big) + 10)) == 1


def test_offset_out_of_range(log):
    fill(log, 3)
    assert log.read(9, 100) == []  # the log end: nothing yet
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.delete_records(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    assert batch_offsets(log.read(4, 1000)[0].read())[0] == (3, 5)  # batch holding 4


def _refused(log, data, error):
    before = (log.log_end_offset, [p.read_bytes() for p in log_files(log.dir)])
    with pytest.raises(error):
        log.append(data)
    assert (log.log_end_offset, [p.read_bytes() for p in log_files(log.dir)]) == before


def test_corrupt_or_invalid_input_is_refused_and_changes_nothing(log):
    fill(log, 2)
    good = make_batch(3)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    _refused(log, bytes(flipped), CorruptMessageError)
    _refused(log, good[:-5], CorruptMessageError)  # truncated
    _refused(log, good + good[:30], CorruptMessageError)  # trailing partial batch
    _refused(log, good + bytes(flipped), CorruptMessageError)  # second batch bad: first not stored either
    _refused(log, b"", CorruptMessageError)
    legacy = LegacyMessageSetBuilder(magic=1)
    legacy.append(b"k", b"v", 5)
    _refused(log, legacy.build(), UnsupportedForMessageFormatError)
    control = build_control_batch(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0)
    _refused(log, control, InvalidRecordError)
    assert log.append(control, allow_control=True) == (6, 6)


def test_input_buffer_is_not_modified(log):
    fill(log, 2)
    batch = bytearray(make_batch(2))
    copy = bytes(batch)
    log.append(batch, leader_epoch=7)
    assert bytes(batch) == copy
    stored = log.read(6, 1000)[0].read()
    assert stored == stored_form(copy, 6, leader_epoch=7)
    assert RecordBatch(stored).partition_leader_epoch == 7


def test_size_limits(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL.with_(max_message_bytes=300))
    _refused(log, make_batch(2, value_size=400), MessageTooLargeError)
    many = b"".join(make_batch(2, tag=str(i)) for i in range(20))  # > 2 KiB segment
    _refused(log, many, RecordListTooLargeError)
    assert log.append(b"".join(make_batch(2, tag=str(i)) for i in range(3))) == (0, 5)
    assert batch_offsets(read_all(log)) == [(0, 1), (2, 3), (4, 5)]
    assert batch_offsets(log.read(3, 1)[0].read()) == [(2, 3)]
    log.close()


def test_log_append_time(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL.with_(message_timestamp_type=LOG_APPEND_TIME))
    log.append(make_batch(3, ts=5), now_ms=777_000)
    (batch,) = iter_batches(read_all(log))
    batch.validate()  # CRC recomputed
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == 777_000
    assert [r.timestamp for r in batch] == [777_000] * 3
    assert log.offset_for_timestamp(700_000) == (0, 777_000)
    log.close()


def test_offset_for_timestamp(log):
    fill(log, 50, ts0=1_000, ts_step=10)  # batch i: records at 1000+10i, +1, +2
    assert log.offset_for_timestamp(-1) == (150, -1)
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(0) == (0, 1_000)
    assert log.offset_for_timestamp(1_002) == (2, 1_002)
    assert log.offset_for_timestamp(1_003) == (3, 1_010)
    for i in range(50):  # across all segments
        assert log.offset_for_timestamp(1_000 + 10 * i + 1) == (3 * i + 1, 1_000 + 10 * i + 1)
    assert log.offset_for_timestamp(1_493) is None
    assert log.offset_for_timestamp(-3) == (149, 1_492)
    log.delete_records(100)
    assert log.offset_for_timestamp(0) == (100, 1_331)


def test_delete_records_deletes_whole_segments_below(log):
    appended = fill(log, 40)
    bases = [s.base_offset for s in log.segments]
    cut = bases[2] + 1
    assert log.delete_records(cut) == cut
    assert log.log_start_offset == cut
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert int(log_files(log.dir)[0].stem) == bases[2]
    assert log.delete_records(5) == cut  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(log.high_watermark + 1)
    tail = b"".join(stored_form(b, base) for base, _, b in appended if base >= bases[2])
    assert read_all(log) == tail
    # everything: the active segment stays, empty reads at the end
    assert log.delete_records(log.log_end_offset) == 120
    assert log.read(120, 100) == []
    assert log.append(make_batch(1)) == (120, 120)


def test_retention_by_bytes(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL.with_(retention_bytes=5000))
    fill(log, 80)
    before = [(s.base_offset, s.size) for s in log.segments]
    # Kafka's rule: drop the oldest segments while what remains is still >= retention.bytes.
    excess, expected = log.size_in_bytes - 5000, []
    for base, size in before:
        if excess - size < 0:
            break
        excess -= size
        expected.append(base)
    assert len(expected) >= 2
    assert log.apply_retention(now_ms=2_000) == expected
    assert log.size_in_bytes >= 5000 > log.size_in_bytes - log.segments[0].size
    assert log.log_start_offset == log.segments[0].base_offset == before[len(expected)][0]
    assert [int(p.stem) for p in log_files(log.dir)] == [b for b, _ in before[len(expected):]]
    assert log.apply_retention(now_ms=2_000) == []
    assert log.read(log.log_start_offset, 100)
    log.close()


def test_retention_by_time(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL.with_(retention_ms=1_000))
    fill(log, 40, ts0=10_000, ts_step=100)  # timestamps 10000..13902
    segs = list(log.segments)
    assert log.apply_retention(now_ms=segs[0].max_timestamp + 1_000) == []  # not older than retention
    deleted = log.apply_retention(now_ms=segs[1].max_timestamp + 1_001)
    assert deleted == [segs[0].base_offset, segs[1].base_offset]
    assert log.log_start_offset == segs[2].base_offset
    # everything expired: the active segment goes too, a fresh one starts at the log end
    end = log.log_end_offset
    assert len(log.apply_retention(now_ms=100_000)) == len(segs) - 2
    assert (log.log_start_offset, log.log_end_offset) == (end, end)
    assert [s.base_offset for s in log.segments] == [end]
    assert log.append(make_batch(1, ts=100_000)) == (end, end)
    log.close()


def test_roll_by_time(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL.with_(segment_bytes=1 << 20, segment_ms=1_000))
    log.append(make_batch(1, ts=5_000), now_ms=5_000)
    log.append(make_batch(1, ts=5_500), now_ms=5_500)
    assert len(log.segments) == 1
    log.append(make_batch(1, ts=6_000), now_ms=6_000)  # first batch's timestamp is 1 s old
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_restart_after_clean_close_keeps_everything(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    appended = fill(log, 30)
    log.delete_records(7)
    before = read_all(log)
    segs = [(s.base_offset, s.next_offset, s.max_timestamp) for s in log.segments]
    log.close()
    log = PartitionLog(tmp_path / "t-0", SMALL, clean_shutdown=True)
    assert log.load_findings == []
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (7, 90, 90)
    assert [(s.base_offset, s.next_offset, s.max_timestamp) for s in log.segments] == segs
    assert read_all(log) == before
    assert log.offset_for_timestamp(1_000 + 10 * 20) == (60, 1_200)
    assert log.append(make_batch(2)) == (90, 91)
    assert appended
    log.close()


def test_closed_log_refuses_work(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    log.close()
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.append(make_batch(1))


def test_config_validation():
    with pytest.raises(ValueError):
        LogConfig(message_timestamp_type="Nope")
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=1 << 31)


def test_read_stops_at_a_batch_that_does_not_fit_even_if_the_next_segment_would(log):
    small = make_batch(1)
    for _ in range(3):
        log.append(small)
    log.append(make_batch(2, value_size=600))  # offsets 3-4, too big for the fetch below
    log.roll()
    log.append(small)  # offset 5, in the next segment: must not be returned after a hole
    assert [s.base_offset for s in log.segments] == [0, 5]
    data = b"".join(s.read() for s in log.read(0, 4 * len(small) + 10))
    assert batch_offsets(data) == [(0, 0), (1, 1), (2, 2)]


def test_retention_by_bytes_boundary_is_inclusive(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    fill(log, 40)
    first = log.segments[0]
    # Exactly what remains without the first segment: Kafka deletes it (diff - size >= 0).
    log.config = SMALL.with_(retention_bytes=log.size_in_bytes - first.size)
    assert log.apply_retention(now_ms=2_000) == [first.base_offset]
    log.config = SMALL.with_(retention_bytes=log.size_in_bytes - log.segments[0].size + 1)
    assert log.apply_retention(now_ms=2_000) == []
    log.close()
