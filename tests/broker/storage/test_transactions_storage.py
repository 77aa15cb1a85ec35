"""Transactions in the partition log: open transactions and the last stable offset, markers (Kafka's
control batch layout), the aborted-transaction index (``.txnindex``) and how loading rebuilds both."""

from __future__ import annotations

import struct

import pytest

from kwire.broker.storage import AbortedTxn, LogSegment, PartitionLog
from kwire.broker.storage.producer_state import (
    _FILE_HEAD,
    _PRODUCER_V1,
    _STATE_HEAD,
    BatchMetadata,
    ProducerEntry,
    encode_snapshot,
    read_snapshot,
)
from kwire.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from kwire.protocol.records import ControlRecord, RecordBatch, RecordBatchBuilder, iter_batches

from .helpers import SMALL, make_batch, read_all

A, B = 7000, 8000  # producer ids
# Markers are stamped near the batches' timestamps (1_000...): today's clock would make the log
# roll a segment by age (segment.ms counts from the first batch's timestamp, as in Kafka).
NOW = 2_000


class Producer:
    """Batches of one transactional producer, sequences continuing across transactions (v1)."""

    def __init__(self, pid: int, epoch: int = 0):
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(self, n: int = 2, *, transactional: bool = True, size: int = 20) -> bytes:
        b = RecordBatchBuilder(producer_id=self.pid, producer_epoch=self.epoch, base_sequence=self.seq,
                               transactional=transactional)
        for i in range(n):
            b.append(b"k", f"{self.pid}-{self.seq + i}".encode().ljust(size, b"."), 1_000 + i)
        self.seq += n
        return b.build()


@pytest.fixture
def log(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    yield log
    log.close()


def txn_index_entries(log: PartitionLog) -> list[list[AbortedTxn]]:
    return [s.txn_index.entries for s in log.segments]


def lso(log: PartitionLog) -> int:
    return log.last_stable_offset


# -- the last stable offset ---------------------------------------------------------------
def test_an_open_transaction_holds_the_lso_until_its_marker(log):
    a = Producer(A)
    log.append(make_batch(2))                       # 0-1, plain
    assert lso(log) == log.high_watermark == 2
    assert log.append(a.batch(3)) == (2, 4)         # A's transaction starts at 2
    log.append(make_batch(2))                       # 5-6, plain, after it
    log.append(a.batch(1))                          # 7, same transaction
    assert (lso(log), log.high_watermark) == (2, 8)
    assert log.producer_state.ongoing == {A: 2}
    assert log.append_marker(A, 0, commit=True, now_ms=NOW) == 8
    assert (lso(log), log.high_watermark) == (9, 9)
    assert txn_index_entries(log) == [[]]           # a commit is not indexed
    assert log.producer_state.get(A).txn_first_offset == -1


def test_the_lso_is_the_oldest_open_transaction_and_aborts_are_indexed_with_it(log):
    a, b = Producer(A), Producer(B)
    log.append(a.batch(2))                          # A: 0-1
    log.append(b.batch(2))                          # B: 2-3
    log.append(a.batch(1))                          # A: 4
    assert lso(log) == 0
    assert log.append_marker(A, 0, commit=False, now_ms=NOW) == 5
    # Kafka's AbortedTxn: producer, first offset, the marker's offset, the LSO right after (B's start).
    assert txn_index_entries(log) == [[AbortedTxn(A, 0, 5, 2)]]
    assert lso(log) == 2
    log.append(a.batch(1))                          # A's next transaction: 6
    assert log.append_marker(B, 0, commit=False, now_ms=NOW) == 7
    assert txn_index_entries(log)[-1][-1] == AbortedTxn(B, 2, 7, 6)
    assert lso(log) == 6
    log.append_marker(A, 0, commit=True, now_ms=NOW)
    assert lso(log) == log.high_watermark == 9


def test_the_txnindex_file_has_kafkas_34_byte_entries(log):
    a = Producer(A)
    log.append(make_batch(1))
    log.append(a.batch(2))
    log.append_marker(A, 0, commit=False, now_ms=NOW)
    log.flush()
    raw = log.segments[0].txnindex_path.read_bytes()
    assert raw == struct.pack(">hqqqq", 0, A, 1, 3, 4)


def test_lso_never_goes_below_the_log_start(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    a = Producer(A)
    log.append(a.batch(2))
    log.append(make_batch(3))
    assert lso(log) == 0
    log.delete_records(3)
    assert lso(log) == 3
    log.close()


# -- markers --------------------------------------------------------------------------------
@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_is_kafkas_control_batch(log, commit):
    a = Producer(A, epoch=3)
    log.append(a.batch(2))
    offset = log.append_marker(A, 3, commit=commit, coordinator_epoch=0, now_ms=1_234)
    raw = read_all(log, offset)
    (batch,) = iter_batches(raw)
    batch.validate()                                # CRC-32C over attributes..end
    assert isinstance(batch, RecordBatch)
    assert batch.base_offset == offset and batch.record_count == 1
    assert batch.attributes & 0x30 == 0x30          # control | transactional
    assert batch.attributes & 0x07 == 0             # never compressed
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (A, 3, -1)
    (record,) = batch.records()
    assert isinstance(record, ControlRecord)
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, 0)  # version 0, coordinator epoch 0
    assert record.timestamp == 1_234
    assert offset == 2 and log.log_end_offset == 3  # the next offset of the log, like any append


def test_a_marker_older_than_the_producers_epoch_is_refused(log):
    a = Producer(A, epoch=5)
    log.append(a.batch())
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError, match="marker"):
        log.append_marker(A, 4, commit=False, now_ms=NOW)
    assert log.log_end_offset == end and log.producer_state.ongoing == {A: 0}


def test_a_fencing_marker_ends_the_old_epoch(log):
    """The coordinator aborts a zombie's transaction under a bumped epoch: the zombie's old epoch
    is refused from then on, and the new epoch starts at sequence 0."""
    zombie = Producer(A, epoch=0)
    log.append(zombie.batch(2))
    log.append_marker(A, 1, commit=False, now_ms=NOW)
    assert log.producer_state.get(A).epoch == 1 and log.producer_state.get(A).batches == ()
    with pytest.raises(InvalidProducerEpochError):
        log.append(zombie.batch())
    successor = Producer(A, epoch=2)
    successor.seq = 5
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(successor.batch())
    successor.seq = 0
    assert log.append(successor.batch(1)) == (3, 3)


def test_a_marker_of_a_transaction_that_wrote_nothing_here_changes_nothing_but_the_epoch(log):
    log.append(make_batch(2))
    log.append_marker(B, 0, commit=False, now_ms=NOW)
    assert txn_index_entries(log) == [[]]
    assert lso(log) == log.high_watermark == 3
    assert log.producer_state.get(B).epoch == 0


# -- read_committed reads -------------------------------------------------------------------
def test_reads_stop_before_the_lso_and_say_where_they_end(log):
    a = Producer(A)
    log.append(make_batch(2))                       # 0-1
    log.append(make_batch(2))                       # 2-3
    log.append(a.batch(2))                          # 4-5: open
    log.append(make_batch(2))                       # 6-7
    slices = log.read(0, 1 << 20, max_offset=lso(log))
    assert [b.base_offset for b in iter_batches(b"".join(s.read() for s in slices))] == [0, 2]
    assert slices[-1].next_offset == 4
    assert log.read(4, 1 << 20, max_offset=lso(log)) == []
    everything = log.read(0, 1 << 20)
    assert everything[-1].next_offset == 8


def test_aborted_transactions_of_a_range_come_from_the_markers_segments(tmp_path):
    """A transaction spanning segments is indexed in its marker's segment; a read of its first
    segment still finds it (Kafka's search goes on until an entry's LSO passes the range)."""
    log = PartitionLog(tmp_path / "t-0", SMALL)
    a, b = Producer(A), Producer(B)
    first = log.append(a.batch(3, size=200))[0]
    while len(log.segments) < 3:
        log.append(make_batch(3, value_size=200))
    log.append_marker(A, 0, commit=False, now_ms=NOW)
    marker_segment = len(log.segments) - 1
    assert txn_index_entries(log)[marker_segment] == [AbortedTxn(A, first, log.log_end_offset - 1, log.log_end_offset)]
    assert all(not e for e in txn_index_entries(log)[:marker_segment])
    assert log.aborted_transactions(0, 3) == [AbortedTxn(A, 0, log.log_end_offset - 1, log.log_end_offset)]
    later = log.log_end_offset
    log.append(b.batch(2))
    log.append_marker(B, 0, commit=False, now_ms=NOW)
    assert log.aborted_transactions(later, later + 3) == [AbortedTxn(B, later, later + 2, later + 3)]
    assert log.aborted_transactions(later + 3, later + 10) == []  # ended before the range
    assert [t.producer_id for t in log.aborted_transactions(0, later + 3)] == [A, B]
    log.close()


# -- durability and rebuilding ------------------------------------------------------------
def _mixed(log: PartitionLog) -> None:
    """Several segments with committed, aborted and one open transaction of two producers."""
    a, b = Producer(A), Producer(B)
    for round_ in range(6):
        log.append(a.batch(2, size=150))
        log.append(make_batch(2, value_size=150))
        log.append(b.batch(1, size=150))
        log.append_marker(A, 0, commit=round_ % 2 == 0, now_ms=NOW)
        log.append_marker(B, 0, commit=round_ % 3 == 0, now_ms=NOW)
    log.append(b.batch(2, size=150))                # left open


def _state(log: PartitionLog):
    return (log.last_stable_offset, dict(log.producer_state.ongoing), txn_index_entries(log),
            {pid: (e.epoch, e.batches, e.txn_first_offset) for pid, e in log.producer_state.producers.items()})


def test_clean_restart_keeps_the_open_transaction_without_reading_the_log(tmp_path, monkeypatch):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    _mixed(log)
    assert len(log.segments) > 2 and any(txn_index_entries(log))
    expected = _state(log)
    assert expected[0] < log.high_watermark
    log.close()

    def no_scan(self, start_offset):
        raise AssertionError("a clean restart must not scan the log")

    monkeypatch.setattr(LogSegment, "batch_headers", no_scan)
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert log.load_findings == []
    assert _state(log) == expected
    log.close()


def test_unclean_restart_rebuilds_open_transactions_and_the_index(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    _mixed(log)
    expected = _state(log)
    log.close_without_flush()
    log = PartitionLog(log.dir, SMALL)
    assert log.load_findings == []
    assert _state(log) == expected
    log.close()


@pytest.mark.parametrize("damage", ["delete", "torn", "garbage"])
def test_a_lost_or_damaged_txnindex_is_rebuilt_from_the_log(tmp_path, damage):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    _mixed(log)
    expected = _state(log)
    log.close()
    victims = [s.txnindex_path for s in log.segments if s.txn_index.entries]
    assert len(victims) > 1
    for path in victims:
        if damage == "delete":
            path.unlink()
        elif damage == "torn":
            path.write_bytes(path.read_bytes() + b"\x00\x01\x02")
        else:  # an entry naming a marker the segment doesn't have
            path.write_bytes(struct.pack(">hqqqq", 0, A, 10**9, 10**9 + 1, 10**9 + 2))
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert len(log.load_findings) == len(victims)
    assert all("rebuilding it from the log" in f for f in log.load_findings)
    assert _state(log) == expected
    log.close()
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)  # and the rebuilt files are whole
    assert log.load_findings == [] and _state(log) == expected
    log.close()


def test_index_entries_of_markers_lost_in_a_crash_are_dropped(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    a = Producer(A)
    log.append(a.batch(2))
    log.flush()
    kept_end = log.log_end_offset
    log.append_marker(A, 0, commit=False, now_ms=NOW)           # indexed, then lost with the log's tail
    assert txn_index_entries(log) == [[AbortedTxn(A, 0, 2, 3)]]
    log.close_without_flush()
    segment_log = log.segments[-1].log_path
    segment_log.write_bytes(segment_log.read_bytes()[:-10])  # the marker torn
    log = PartitionLog(log.dir, SMALL)
    assert log.log_end_offset == kept_end
    assert txn_index_entries(log) == [[]]
    assert log.producer_state.ongoing == {A: 0} and lso(log) == 0
    log.close()


def test_retention_and_truncation_remove_index_entries_with_their_segments(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    _mixed(log)
    i = next(i for i, s in enumerate(log.segments) if s.txn_index.entries)
    doomed = [s.txnindex_path for s in log.segments[:i + 1]]
    assert all(p.exists() for p in doomed) and i + 2 < len(log.segments)
    log.delete_records(log.segments[i + 1].base_offset)
    assert not any(p.exists() for p in doomed)
    marker = next(t for s in log.segments for t in s.txn_index.entries)
    log.truncate_to(marker.last_offset)             # cut just before a marker
    assert all(t.last_offset < marker.last_offset for s in log.segments for t in s.txn_index.entries)
    assert marker.producer_id in log.producer_state.ongoing  # its transaction is open again
    assert log.load_findings == []                  # segments made by this run have their index
    log.close()


def test_a_producer_with_an_open_transaction_does_not_expire(log):
    log.producer_state.expiration_ms = 10
    log.append(Producer(A).batch())
    log.append(Producer(B).batch(transactional=False), now_ms=1)
    log.producer_state.remove_expired(now_ms=10**12)
    assert set(log.producer_state.producers) == {A}


def test_snapshots_written_before_transactions_still_load(tmp_path):
    """Version 1 snapshots (no transaction field) are read; new ones are version 2."""
    path = tmp_path / f"{5:020d}.snapshot"
    body = _STATE_HEAD.pack(5, 1) + _PRODUCER_V1.pack(A, 2, 99, 1) + struct.pack(">iiqq", 0, 4, 0, 4)
    from crc32c import crc32c

    path.write_bytes(_FILE_HEAD.pack(b"KWPS", 1, crc32c(body)) + body)
    assert read_snapshot(path, 5) == {A: ProducerEntry(A, 2, (BatchMetadata(0, 4, 0, 4),), 99, -1)}
    entry = ProducerEntry(B, 1, (BatchMetadata(0, 1, 3, 4),), 7, 3)
    fenced = ProducerEntry(A, 4, (), 8, -1)  # after a marker of a newer epoch
    path.write_bytes(encode_snapshot(5, {B: entry, A: fenced}))
    assert path.read_bytes()[4] == 2
    assert read_snapshot(path, 5) == {A: fenced, B: entry}


def test_a_log_from_before_transactions_gets_empty_indexes_without_a_replay(tmp_path, monkeypatch):
    """Upgrading: no .txnindex anywhere and only version 1 snapshots (that kwire refused
    transactional batches): the indexes are created empty, nothing is reported or re-read."""
    log = PartitionLog(tmp_path / "t-0", SMALL)
    for i in range(20):
        log.append(make_batch(3, value_size=150, ts=1_000 + i))
    log.close()
    for path in log.dir.glob("*.txnindex"):
        path.unlink()
    for path in log.dir.glob("*.snapshot"):  # as the old kwire wrote them: version 1, no producers here
        offset = int(path.name.split(".")[0])
        body = _STATE_HEAD.pack(offset, 0)
        from crc32c import crc32c

        path.write_bytes(_FILE_HEAD.pack(b"KWPS", 1, crc32c(body)) + body)

    def no_scan(self, start_offset):
        raise AssertionError("an upgrade must not re-read the log")

    monkeypatch.setattr(LogSegment, "batch_headers", no_scan)
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert log.load_findings == []
    assert len(list(log.dir.glob("*.txnindex"))) == len(log.segments) > 1
    assert log.last_stable_offset == log.high_watermark == 60
    log.close()
