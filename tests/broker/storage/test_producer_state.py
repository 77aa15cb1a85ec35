"""Idempotent producers in the partition log: Kafka's sequence checks, duplicates, durability."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from kwire.broker.storage import LogSegment, PartitionLog
from kwire.broker.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerEntry,
    encode_snapshot,
    read_snapshot,
)
from kwire.protocol.errors import (
    CorruptMessageError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
)
from kwire.protocol.records import RecordBatchBuilder

from .helpers import SMALL, log_files, make_batch, read_all

INT32_MAX = 0x7FFFFFFF
PID = 4000


def idem(seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0, ts: int = 1_000, transactional: bool = False,
         tag: str = "") -> bytes:
    """A batch of ``n`` records from producer ``pid`` starting at sequence ``seq``."""
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=transactional)
    for i in range(n):
        b.append(f"k{i}".encode(), f"{tag}{pid}-{epoch}-{seq}-{i}".encode().ljust(20, b"."), ts + i)
    return b.build()


def snapshots(directory) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in directory.glob("*.snapshot"))


def state_of(log: PartitionLog, pid: int = PID):
    """(epoch, batches) of a producer, or None: what must survive restarts."""
    entry = log.producer_state.get(pid)
    return None if entry is None else (entry.epoch, entry.batches)


@pytest.fixture
def log(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    yield log
    log.close()


def unchanged(log: PartitionLog):
    """Snapshot of what a refused append must not change."""
    return log.log_end_offset, read_all(log), dict(log.producer_state.producers)


# -- sequence checks --------------------------------------------------------------------------
def test_in_order_batches_are_appended_and_tracked(log):
    assert log.append(idem(0, 3)) == (0, 2)
    assert log.append(idem(3, 2)) == (3, 4)
    assert log.append(make_batch(2)) == (5, 6)  # batches without a producer id are not checked
    assert log.append(idem(5, 1)) == (7, 7)
    entry = log.producer_state.get(PID)
    assert entry.epoch == 0 and entry.last_seq == 5 and entry.last_offset == 7
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 2, 0, 2), (3, 4, 3, 4), (5, 5, 7, 7)]


@pytest.mark.parametrize("which", range(NUM_BATCHES_TO_RETAIN))
def test_retry_of_any_of_the_last_five_batches_returns_its_offsets(log, which):
    batches = [idem(2 * i, 2) for i in range(7)]  # 7 batches: the last 5 are retained
    offsets = [log.append(b) for b in batches]
    before = unchanged(log)
    target = 2 + which
    assert log.append(batches[target]) == offsets[target]
    assert unchanged(log) == before


def test_retry_older_than_the_last_five_is_out_of_order(log):
    batches = [idem(i) for i in range(NUM_BATCHES_TO_RETAIN + 1)]
    for b in batches:
        log.append(b)
    before = unchanged(log)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(batches[0])  # Kafka only remembers 5: an older retry looks like a reorder
    assert unchanged(log) == before


def test_retry_with_another_sequence_range_is_not_a_duplicate(log):
    log.append(idem(0, 3))
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idem(0, 2))  # same start, other end: not the batch we stored


@pytest.mark.parametrize("seq", [2, 7, INT32_MAX])
def test_gap_is_out_of_order(log, seq):
    log.append(idem(0))
    before = unchanged(log)
    with pytest.raises(OutOfOrderSequenceNumberError, match="does not follow 0"):
        log.append(idem(seq))
    assert unchanged(log) == before
    assert log.append(idem(1)) == (1, 1)


def test_reorder_is_out_of_order(log):
    log.append(idem(0, 3))
    log.append(idem(3, 3))
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idem(1, 1))  # inside what was written, but not a batch boundary


def test_older_epoch_is_fenced(log):
    log.append(idem(0, epoch=3))
    before = unchanged(log)
    with pytest.raises(InvalidProducerEpochError):
        log.append(idem(1, epoch=2))
    with pytest.raises(InvalidProducerEpochError):
        log.append(idem(0, epoch=0))
    assert unchanged(log) == before


def test_new_epoch_must_restart_at_sequence_zero(log):
    first = log.append(idem(0, 2, epoch=0))
    log.append(idem(2, 2, epoch=0))
    with pytest.raises(OutOfOrderSequenceNumberError, match="must start at sequence 0"):
        log.append(idem(4, epoch=1))
    assert log.append(idem(0, 2, epoch=1)) == (4, 5)
    assert log.producer_state.get(PID).epoch == 1
    assert len(log.producer_state.get(PID).batches) == 1  # the old epoch's batches are forgotten
    with pytest.raises(InvalidProducerEpochError):
        log.append(idem(0, 2, epoch=0))  # a late retry of the old epoch is fenced, not a duplicate
    assert first == (0, 1)
    assert log.append(idem(2, epoch=1)) == (6, 6)


def test_unknown_producer_may_start_at_any_sequence(log):
    # Kafka 2.5+ (KIP-360): no UNKNOWN_PRODUCER_ID; state may have expired or been deleted.
    assert log.append(idem(417, 2, pid=9)) == (0, 1)
    assert log.producer_state.get(9).last_seq == 418
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idem(0, pid=9))  # from then on the sequence is checked


def test_sequence_wraps_at_int32_max(log):
    log.append(idem(INT32_MAX - 3, 2))           # MAX-3 .. MAX-2
    wrapping = idem(INT32_MAX - 1, 3)            # MAX-1, MAX, 0
    assert log.append(wrapping) == (2, 4)
    assert log.producer_state.get(PID).last_seq == 0
    assert log.append(wrapping) == (2, 4)        # its retry is recognized across the wrap
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idem(0))
    assert log.append(idem(1)) == (5, 5)


def test_sequence_after_exactly_int32_max_is_zero(log):
    log.append(idem(INT32_MAX - 1, 2))  # ends at MAX
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idem(INT32_MAX))
    assert log.append(idem(0, pid=PID)) == (2, 2)


def test_producers_are_independent(log):
    log.append(idem(0, pid=1))
    log.append(idem(0, pid=2))
    log.append(idem(1, pid=1))
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idem(2, pid=2))
    assert log.append(idem(1, pid=2)) == (3, 3)


# -- several batches in one request ----------------------------------------------------------
def test_request_is_checked_batch_by_batch_and_applied_atomically(log):
    log.append(idem(0, pid=1))
    before = unchanged(log)
    bad = idem(1, pid=1) + idem(0, pid=2) + idem(3, pid=1)  # the third leaves a gap after the first
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(bad)
    assert unchanged(log) == before
    assert log.producer_state.get(2) is None
    good = idem(1, 2, pid=1) + idem(0, pid=2) + make_batch(1) + idem(3, pid=1)
    assert log.append(good) == (1, 5)
    assert (log.producer_state.get(1).last_seq, log.producer_state.get(2).last_seq) == (3, 0)


def test_retried_multi_batch_request_returns_the_original_offsets(log):
    log.append(idem(0, pid=1))
    request = idem(1, 2, pid=1) + idem(0, 3, pid=2)
    assert log.append(request) == (1, 5)
    before = unchanged(log)
    assert log.append(request) == (1, 5)
    assert unchanged(log) == before


def test_duplicate_mixed_with_new_batches_is_refused(log):
    first = idem(0, pid=1)
    log.append(first)
    before = unchanged(log)
    with pytest.raises(OutOfOrderSequenceNumberError, match="mixes"):
        log.append(first + idem(1, pid=1))  # answering success would silently drop the new one
    with pytest.raises(OutOfOrderSequenceNumberError, match="mixes"):
        log.append(make_batch(1) + first)
    assert unchanged(log) == before


def test_same_batch_twice_in_one_request_is_refused(log):
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idem(0) + idem(0))
    assert log.log_end_offset == 0 and log.producer_state.get(PID) is None


def test_refused_structure_leaves_producer_state_alone(log):
    log.append(idem(0))
    corrupt = bytearray(idem(1))
    corrupt[-1] ^= 1
    with pytest.raises(CorruptMessageError):
        log.append(bytes(corrupt))
    assert log.append(idem(1)) == (1, 1)


# -- what this broker refuses ----------------------------------------------------------------
def test_a_producer_with_an_open_transaction_may_only_write_transactional_batches(log):
    assert log.append(idem(0, transactional=True)) == (0, 0)
    before = unchanged(log)
    with pytest.raises(InvalidTxnStateError, match="must be transactional"):
        log.append(idem(1))
    with pytest.raises(InvalidTxnStateError):
        log.append(idem(1, transactional=True) + idem(2))  # the whole request is refused
    assert unchanged(log) == before
    assert log.append(idem(1, transactional=True)) == (1, 1)


def test_producer_id_without_sequence_or_epoch_is_invalid(log):
    with pytest.raises(InvalidRecordError):
        log.append(idem(-1))
    with pytest.raises(InvalidRecordError):
        log.append(idem(0, epoch=-1))
    assert log.log_end_offset == 0


# -- durability ------------------------------------------------------------------------------
def _fill_idempotent(log: PartitionLog, count: int, *, pid: int = PID, start: int = 0) -> list[tuple[bytes, tuple]]:
    """``count`` 3-record batches of one producer; returns (batch, offsets) of each."""
    out = []
    for i in range(count):
        batch = idem(start + 3 * i, 3, pid=pid, ts=1_000 + i)
        out.append((batch, log.append(batch, now_ms=1_000 + i)))
    return out


def test_clean_restart_loads_the_snapshot_without_reading_the_log(tmp_path, monkeypatch):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    written = _fill_idempotent(log, 30)  # several segments
    expected = state_of(log)
    log.close()
    assert log.log_end_offset in snapshots(log.dir)

    def no_scan(self, start_offset):
        raise AssertionError("a clean restart must not scan the log")

    monkeypatch.setattr(LogSegment, "batch_headers", no_scan)
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert state_of(log) == expected
    assert log.append(written[-1][0]) == written[-1][1]  # a retry after the restart
    assert log.append(idem(90)) == (90, 90)
    log.close()


def test_unclean_restart_rebuilds_from_snapshot_and_log(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    written = _fill_idempotent(log, 30)
    log.append(idem(0, pid=7, epoch=2))
    expected, expected_7 = state_of(log), state_of(log, 7)
    end = log.log_end_offset
    log.close_without_flush()  # no flush, no final snapshot: a crash
    assert end not in snapshots(log.dir)
    log = PartitionLog(log.dir, SMALL)
    assert log.load_findings == []
    assert (state_of(log), state_of(log, 7)) == (expected, expected_7)
    for batch, offsets in written[-NUM_BATCHES_TO_RETAIN:]:
        assert log.append(batch) == offsets
    assert log.log_end_offset == end
    log.close()


def test_unclean_restart_without_any_snapshot_scans_everything(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    written = _fill_idempotent(log, 30)
    expected = state_of(log)
    log.close_without_flush()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()
    log = PartitionLog(log.dir, SMALL)
    assert state_of(log) == expected
    assert log.append(written[-1][0]) == written[-1][1]
    log.close()


def test_snapshot_above_the_recovery_point_is_not_trusted(tmp_path):
    config = SMALL.with_(flush_on_roll=False)
    log = PartitionLog(tmp_path / "t-0", config)
    log.append(idem(0, pid=1))
    while len(log.segments) < 2:
        log.append(make_batch(3))
    assert log.recovery_point == 0
    roll_snapshot = log.segments[1].base_offset
    assert roll_snapshot in snapshots(log.dir)
    log.close_without_flush()
    # Were the snapshot above the recovery point used, producer 1 (only in segment 0) would vanish.
    (log.dir / f"{roll_snapshot:020d}.snapshot").write_bytes(encode_snapshot(roll_snapshot, {}))
    log = PartitionLog(log.dir, config)
    assert log.producer_state.get(1).last_seq == 0
    log.close()


def test_snapshots_of_batches_lost_in_a_crash_are_deleted(tmp_path):
    config = SMALL.with_(flush_on_roll=False)  # roll snapshots above the recovery point
    log = PartitionLog(tmp_path / "t-0", config)
    written = _fill_idempotent(log, 30)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3 and set(bases[1:]) <= set(snapshots(log.dir))
    log.close_without_flush()
    first = log_files(log.dir)[0]
    data = bytearray(first.read_bytes())
    data[len(written[0][0]) + 30] ^= 0x01  # corrupt the second batch: everything after it is lost
    first.write_bytes(bytes(data))
    log = PartitionLog(log.dir, config)
    assert log.log_end_offset == 3
    assert snapshots(log.dir) == []
    # Left behind, the snapshot at bases[1] would be trusted once the log grows past it and is
    # flushed, bringing back sequences that are no longer in the log.
    while log.log_end_offset <= bases[1]:
        log.append(make_batch(3))
    log.flush()
    log.close_without_flush()
    log = PartitionLog(log.dir, config)
    assert state_of(log) == (0, (BatchMetadata(0, 2, 0, 2),))  # only the batch that survived
    log.close()


def test_snapshot_below_the_first_segment_is_discarded(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    _fill_idempotent(log, 30)
    first = log.segments[-1].base_offset
    log.delete_records(first)
    log.close()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()
    # A snapshot older than the first segment may miss (or, as here, invent) producers of the
    # batches deleted since: it is not used.
    stale = log.dir / f"{1:020d}.snapshot"
    stale.write_bytes(encode_snapshot(1, {99: ProducerEntry(99, 5, (BatchMetadata(0, 0, 0, 0),), 0)}))
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert not stale.exists()
    assert list(log.producer_state.producers) == [PID]  # from a scan of the remaining segment
    assert all(b.first_offset >= first for b in state_of(log)[1])
    log.close()


def test_truncation_removes_later_snapshots_before_touching_the_log(tmp_path, monkeypatch):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    _fill_idempotent(log, 30)
    target = log.segments[1].base_offset + 3
    assert max(snapshots(log.dir)) > target

    def crash(self, offset):
        raise OSError("simulated crash during truncation")

    monkeypatch.setattr(LogSegment, "truncate_to", crash)
    with pytest.raises(OSError):
        log.truncate_to(target)
    assert max(snapshots(log.dir)) <= target
    log.close_without_flush()


def test_corrupt_snapshot_is_reported_and_the_log_scanned(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    written = _fill_idempotent(log, 5)
    expected = state_of(log)
    log.close()
    path = log.dir / f"{log.log_end_offset:020d}.snapshot"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        read_snapshot(path, log.log_end_offset)
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert "unreadable producer snapshot" in log.load_findings[0]
    assert not path.exists()
    assert state_of(log) == expected
    assert log.append(written[-1][0]) == written[-1][1]
    log.close()


def test_retry_after_kill_9_is_a_duplicate(tmp_path):
    """A real SIGKILL right after an acknowledged append: the retry must not be stored twice."""
    directory = tmp_path / "t-0"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path[:0] = {sys.path!r}
        from kwire.broker.storage import LogConfig, PartitionLog
        from kwire.protocol.records import RecordBatchBuilder

        def idem(seq):
            b = RecordBatchBuilder(producer_id={PID}, producer_epoch=0, base_sequence=seq)
            for i in range(3):
                b.append(b"k", b"v" * 20, 1_000 + i)
            return b.build()

        log = PartitionLog({str(directory)!r}, LogConfig(segment_bytes=2048, index_interval_bytes=256))
        for seq in range(0, 30, 3):
            log.append(idem(seq))
        sys.stdout.write(repr((idem(30), log.append(idem(30)))))  # the acknowledgement
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    retry, acknowledged = ast.literal_eval(proc.stdout)
    log = PartitionLog(directory, SMALL)
    end = log.log_end_offset
    assert end == acknowledged[1] + 1
    assert log.append(retry) == acknowledged
    assert log.log_end_offset == end
    assert log.append(idem(33, 3)) == (end, end + 2)
    log.close()


def test_torn_tail_after_a_crash_forgets_the_lost_batch(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    a, b = idem(0, 3), idem(3, 3)
    assert log.append(a) == (0, 2)
    assert log.append(b) == (3, 5)
    log.close_without_flush()
    last = log_files(log.dir)[-1]
    os.truncate(last, last.stat().st_size - len(b) // 2)  # b half written
    log = PartitionLog(log.dir, SMALL)
    assert log.log_end_offset == 3
    assert log.producer_state.get(PID).last_seq == 2
    assert log.append(a) == (0, 2)     # still a duplicate
    assert log.append(b) == (3, 5)     # stored anew: the first copy was lost
    assert log.log_end_offset == 6
    log.close()


# -- truncation, retention, expiry -----------------------------------------------------------
def test_truncate_to_drops_the_removed_batches_state(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    written = _fill_idempotent(log, 30)
    cut_batch, cut_offsets = written[20]
    log.truncate_to(cut_offsets[0])
    assert log.log_end_offset == cut_offsets[0]
    assert all(s <= log.log_end_offset for s in snapshots(log.dir))
    assert state_of(log)[1][-1].last_offset == cut_offsets[0] - 1
    assert log.append(written[19][0]) == written[19][1]   # still there: a duplicate
    assert log.append(cut_batch) == cut_offsets             # gone: appended again
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(written[25][0])
    log.close()
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert state_of(log)[1][-1].last_offset == cut_offsets[1]
    log.close()


@pytest.mark.parametrize("roll_snapshot", ["kept", "lost"])
def test_state_outlives_segments_deleted_by_retention_and_a_crash(tmp_path, roll_snapshot):
    config = SMALL.with_(retention_ms=1_000)
    log = PartitionLog(tmp_path / "t-0", config)
    written = _fill_idempotent(log, 10)
    log.roll()
    for _ in range(3):  # newer traffic: only the producer's segments expire
        log.append(make_batch(3, ts=10_000), now_ms=10_000)
    if roll_snapshot == "lost":  # then retention must take a snapshot before deleting
        (log.dir / f"{log.segments[-1].base_offset:020d}.snapshot").unlink()
    log.apply_retention(now_ms=10_500)
    assert log.log_start_offset > written[-1][1][1]   # every batch of the producer is gone
    assert all(s >= log.segments[0].base_offset for s in snapshots(log.dir))
    expected = state_of(log)
    assert expected[1][-1].last_offset == written[-1][1][1]
    log.close_without_flush()
    log = PartitionLog(log.dir, config)
    assert state_of(log) == expected  # from the snapshot taken before the deletion
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idem(31, pid=PID))
    assert log.append(written[-1][0]) == written[-1][1]  # Kafka answers with the original offsets
    end = log.log_end_offset
    assert log.append(idem(30, pid=PID)) == (end, end)
    log.close()


def test_delete_records_keeps_state_and_snapshots_consistent(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    written = _fill_idempotent(log, 30)
    expected = state_of(log)
    log.delete_records(written[-3][1][0])
    assert log.segments[0].base_offset > 0 and state_of(log) == expected
    assert min(snapshots(log.dir)) >= log.segments[0].base_offset
    log.close_without_flush()
    log = PartitionLog(log.dir, SMALL)
    assert state_of(log) == expected
    assert log.append(written[-1][0]) == written[-1][1]
    log.close()


def test_idle_producers_expire_with_retention(log):
    log.append(idem(0, pid=1), now_ms=1_000)
    log.append(idem(0, pid=2), now_ms=5_000)
    log.producer_state.expiration_ms = 10_000
    log.apply_retention(now_ms=10_999)
    assert set(log.producer_state.producers) == {1, 2}
    log.apply_retention(now_ms=11_000)
    assert set(log.producer_state.producers) == {2}
    assert log.append(idem(57, pid=1), now_ms=11_000) == (2, 2)  # forgotten: any sequence again


def test_snapshots_do_not_pile_up(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    for seq in range(3):  # restarts without rolling: each close replaces the previous end snapshot
        log.append(idem(seq))
        log.close()
        log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert snapshots(log.dir) == [log.log_end_offset]
    _fill_idempotent(log, 30, start=3)
    bases = [s.base_offset for s in log.segments]
    assert set(snapshots(log.dir)) <= set(bases)
    log.close()
    assert snapshots(log.dir) == sorted(set(bases[1:]) | {log.log_end_offset})

