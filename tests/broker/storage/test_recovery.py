"""Loading after a crash: torn tails, garbage, bit flips, lost or corrupt indexes, strays."""

from __future__ import annotations

import logging
import os

import pytest

from kwire.broker.storage import LogManager, PartitionLog
from kwire.broker.storage.checkpoint import CHECKPOINT_NAME, read_checkpoint
from kwire.protocol.records import RecordBatchBuilder

from .helpers import SMALL, batch_offsets, fill, log_files, make_batch, read_all, stored_form


def _crashed_log(tmp_path, count=40, config=SMALL):
    """A log written and then abandoned without flush or clean shutdown."""
    log = PartitionLog(tmp_path / "t-0", config)
    appended = fill(log, count)
    expected = [stored_form(b, base) for base, _, b in appended]
    log.close_without_flush()
    return log.dir, appended, expected


def _reopen(directory, config=SMALL, caplog=None):
    if caplog is not None:
        caplog.set_level(logging.WARNING, logger="kwire.broker.storage")
    return PartitionLog(directory, config)


def _check_every_offset(log, appended):
    for base, last, batch in appended:
        for offset in (base, last):
            assert log.read(offset, 1)[0].read() == stored_form(batch, base), offset


def test_crash_without_damage_loses_nothing(tmp_path):
    directory, appended, expected = _crashed_log(tmp_path)
    log = _reopen(directory)
    assert log.load_findings == []
    assert log.recovery_point < log.log_end_offset == appended[-1][1] + 1
    assert read_all(log) == b"".join(expected)
    log.close()


@pytest.mark.parametrize("damage", ["torn", "garbage", "flip"])
def test_damaged_tail_is_truncated_and_reported(tmp_path, caplog, damage):
    directory, appended, expected = _crashed_log(tmp_path)
    last_file = log_files(directory)[-1]
    data = bytearray(last_file.read_bytes())
    last_batch_start = len(data) - len(expected[-1])
    if damage == "torn":
        del data[-(len(expected[-1]) // 2):]  # the last batch half written
        survivors, cut, why = len(expected) - 1, len(data) - last_batch_start, "torn"
    elif damage == "garbage":
        garbage = b"\x00" * 8 + b"\x7f\xff\xff\xff" + os.urandom(50)  # a bogus, huge length
        data += garbage
        survivors, cut, why = len(expected), len(garbage), "torn"
    else:
        data[-10] ^= 0x40  # a bit flip inside the last batch's records
        survivors, cut, why = len(expected) - 1, len(expected[-1]), "CRC"
    last_file.write_bytes(bytes(data))

    log = _reopen(directory, caplog=caplog)
    (finding,) = log.load_findings
    assert f"truncated {cut} bytes" in finding and f"segment {int(last_file.stem)}" in finding
    assert why in finding
    assert finding in caplog.text
    assert read_all(log) == b"".join(expected[:survivors])
    assert log.log_end_offset == appended[survivors - 1][1] + 1
    _check_every_offset(log, appended[:survivors])
    # The log goes on from there.
    assert log.append(make_batch(2)) == (log.log_end_offset - 2, log.log_end_offset - 1)
    log.close()


def test_corruption_in_an_unflushed_middle_segment_drops_the_later_ones(tmp_path):
    config = SMALL.with_(flush_on_roll=False)  # recovery point stays at 0: every segment is recovered
    directory, appended, expected = _crashed_log(tmp_path, config=config)
    files = log_files(directory)
    assert len(files) >= 4
    victim = files[1]
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF
    victim.write_bytes(bytes(data))
    log = _reopen(directory, config)
    assert len(log.load_findings) == 2
    assert f"segment {int(victim.stem)}: truncated" in log.load_findings[0]
    assert "deleting" in log.load_findings[1] and str(int(files[2].stem)) in log.load_findings[1]
    assert [int(p.stem) for p in log_files(directory)] == [int(files[0].stem), int(victim.stem)]
    # What is left is exactly the batches before the damaged one.
    kept = len(log_files(directory)[0].read_bytes()) + len(victim.read_bytes())
    assert read_all(log) == b"".join(expected)[:kept]
    assert log.log_end_offset == appended[len(batch_offsets(read_all(log))) - 1][1] + 1
    assert len(victim.read_bytes()) < len(data)
    assert not list(directory.glob(f"{files[2].stem}.*"))
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_missing_indexes_are_rebuilt_identically(tmp_path, clean):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    appended = fill(log, 40)
    log.close()
    first = log_files(log.dir)[0]
    index, timeindex = first.with_suffix(".index"), first.with_suffix(".timeindex")
    originals = index.read_bytes(), timeindex.read_bytes()
    assert originals[0] and originals[1]
    index.unlink()
    timeindex.unlink()
    log = PartitionLog(log.dir, SMALL, clean_shutdown=clean)
    (finding,) = log.load_findings
    assert "missing" in finding and "rebuilt" in finding
    assert (index.read_bytes(), timeindex.read_bytes()) == originals
    _check_every_offset(log, appended)
    log.close()


def test_corrupt_index_is_rebuilt(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    appended = fill(log, 40)
    log.close()
    index = log_files(log.dir)[0].with_suffix(".index")
    original = index.read_bytes()
    index.write_bytes(original[:8] + b"\x7f\xff\xff\xff\x7f\xff\xff\xff" + original[16:] + b"\x01")
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert "rebuilt" in log.load_findings[0]
    assert index.read_bytes() == original
    _check_every_offset(log, appended)
    log.close()


def test_stray_and_orphan_files_are_removed(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    fill(log, 5)
    log.close()
    strays = ["00000000000000000000.log.deleted", CHECKPOINT_NAME + ".tmp", "00000000000000000003.log.cleaned",
              "00000000000000009999.index", "00000000000000009999.timeindex"]
    for name in strays:
        (log.dir / name).write_bytes(b"junk")
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert len(log.load_findings) == len(strays)
    assert all(not (log.dir / name).exists() for name in strays)
    assert log.log_end_offset == 15
    log.close()


def test_log_start_offset_survives_a_crash(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    fill(log, 40)
    log.delete_records(50)
    log.close_without_flush()
    log = PartitionLog(log.dir, SMALL)
    assert log.log_start_offset == 50
    log.close()


def test_unreadable_checkpoint_recovers_everything(tmp_path):
    directory, appended, expected = _crashed_log(tmp_path)
    (directory / CHECKPOINT_NAME).write_text("garbage")
    log = _reopen(directory)
    assert "checkpoint unreadable" in log.load_findings[0]
    assert read_all(log) == b"".join(expected)
    log.close()


def test_segment_files_lost_below_the_log_start(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    fill(log, 40)
    log.delete_records(100)
    log.close()
    for path in log.dir.iterdir():
        if path.suffix in (".log", ".index", ".timeindex", ".txnindex"):
            path.unlink()
    (log.dir / "00000000000000000000.log").write_bytes(b"")  # an older, empty segment remains
    log = PartitionLog(log.dir, SMALL, clean_shutdown=True)
    assert "below the log start offset" in log.load_findings[0]
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append(make_batch(1)) == (100, 100)
    log.close()


def test_log_start_offset_inside_the_first_segment_survives_a_crash(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    fill(log, 40)
    log.delete_records(2)  # no segment to delete: only the checkpoint records it
    log.close_without_flush()
    log = PartitionLog(log.dir, SMALL)
    assert log.log_start_offset == 2
    log.close()


def test_a_clean_restart_leaves_the_checkpoint_file_alone(tmp_path):
    """Reopening after a clean shutdown rewrites no checkpoint (two fsyncs per partition at every
    start otherwise); one that must change is written."""
    with LogManager(tmp_path, SMALL) as manager:
        log = manager.create_partition("t", 0)
        fill(log, 5)
    path = tmp_path / "t-0" / CHECKPOINT_NAME
    before = path.stat().st_ino
    with LogManager(tmp_path, SMALL) as manager:
        assert manager.get("t", 0).log_end_offset == 15
    assert path.stat().st_ino == before  # atomic_write would have renamed a new file over it
    # A checkpoint behind the log end (a crash after appends) is moved by the next clean open.
    path.write_text("0\n0 3\n")
    with LogManager(tmp_path, SMALL) as manager:
        assert manager.clean_shutdown
    assert path.stat().st_ino != before
    assert read_checkpoint(tmp_path / "t-0").recovery_point == 15


def test_a_clean_open_lists_the_directory_once_and_syncs_nothing(tmp_path, monkeypatch):
    """After a clean shutdown, opening a log lists its directory once (the producer snapshots
    are found in that listing too) and fsyncs nothing: not the checkpoint, not a .txnindex
    holding an abort (whose entries were made durable before the shutdown)."""
    log = PartitionLog(tmp_path / "t-0", SMALL)
    fill(log, 20)
    txn = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    txn.append(b"k", b"aborted", 1_000)
    log.append(txn.build(), now_ms=1_000)
    log.append_marker(7, 0, commit=False, now_ms=1_000)
    fill(log, 20)
    expected = read_all(log)
    log.close()
    listings: list = []
    syncs: list = []
    real_scandir, real_listdir, real_fsync = os.scandir, os.listdir, os.fsync
    monkeypatch.setattr(os, "scandir", lambda path=".": listings.append(path) or real_scandir(path))
    monkeypatch.setattr(os, "listdir", lambda path=".": listings.append(path) or real_listdir(path))
    monkeypatch.setattr(os, "fsync", lambda fd: syncs.append(fd) or real_fsync(fd))
    reopened = PartitionLog(tmp_path / "t-0", SMALL, clean_shutdown=True)
    monkeypatch.undo()
    try:
        assert len(listings) == 1 and syncs == []
        assert len(reopened.segments) > 3 and reopened.load_findings == []
        assert [t.producer_id for s in reopened.segments for t in s.txn_index.entries] == [7]
        assert read_all(reopened) == expected and reopened.last_stable_offset == reopened.log_end_offset
    finally:
        reopened.close()
