"""Log compaction (cleaner.py, batch_filter.py): what a clean keeps, Kafka's rules."""

from __future__ import annotations

import logging
import struct
import threading

import pytest

from kwire.broker.storage import Cleaner, CleanerConfig, LogCleaner, LogManager, PartitionLog
from kwire.broker.storage.cleaner import CleanAborted
from kwire.broker.storage.cleaner_checkpoint import read_cleaner_checkpoint
from kwire.broker.storage.segment import LogSegment
from kwire.broker.storage.throttler import Throttler
from kwire.protocol.errors import InvalidRecordError, OutOfOrderSequenceNumberError
from kwire.protocol.records import Compression

from .cleaner_helpers import COMPACT, NOW, batches, clean, kv, latest, put, records


@pytest.fixture
def log(tmp_path):
    log = PartitionLog(tmp_path / "t-0", COMPACT)
    yield log
    log.close()


def fill_rounds(log: PartitionLog, rounds: int, keys: int = 5, *, ts: int = 1_000, tag: str = "v") -> None:
    for r in range(rounds):
        put(log, [(f"k{i}", f"{tag}{r}-{i}") for i in range(keys)], ts=ts + r)


def test_latest_record_of_every_key_survives_with_its_offset(log):
    fill_rounds(log, 20)
    log.roll()
    before = records(log)
    result = clean(log)
    after = records(log)
    assert result is not None and result.records_removed == 95
    # Exactly the last record of each key, at the offset it had: gaps, no renumbering.
    assert after == sorted((off, key, value) for key, (off, value) in latest(before).items())
    assert [o for o, _, _ in after] == list(range(95, 100))
    assert log.log_end_offset == 100
    assert log.size_in_bytes < result.bytes_before
    # Reading from an offset that was removed gives the next survivor.
    assert records(log)[0][0] == 95 and log.read(3, 1 << 20)


def test_cleaning_keeps_the_active_segment_and_min_compaction_lag(log):
    fill_rounds(log, 20)  # rolled several times by size: the last segment is active
    active = log.segments[-1]
    active_records = [r for r in records(log) if r[0] >= active.base_offset]
    clean(log)
    assert [r for r in records(log) if r[0] >= active.base_offset] == active_records
    # min.compaction.lag.ms: segments with records younger than the lag are not cleaned.
    log.set_config(COMPACT.with_(min_compaction_lag_ms=5_000))
    fill_rounds(log, 20, ts=8_000, tag="w")
    log.roll()
    young = records(log)
    assert clean(log, now_ms=10_000) is None  # 8_000 > 10_000 - 5_000: everything dirty is too young
    assert records(log) == young
    result = clean(log, now_ms=13_100)
    assert result is not None and len(records(log)) == 5


def test_tombstones_stay_until_delete_retention_after_their_first_clean(log):
    put(log, [("a", "1"), ("b", "1"), ("c", "1")])
    put(log, [("a", None), ("b", "2")])  # a tombstone for a
    log.roll()
    clean(log, now_ms=NOW)
    assert records(log) == [(2, "c", "1"), (3, "a", None), (4, "b", "2")]
    # The batch keeping it carries the delete horizon (KIP-534): the clean's time + delete.retention.ms.
    tomb = next(b for b in batches(log) if any(r.value is None for r in b.records()))
    assert tomb.has_delete_horizon and tomb.delete_horizon_ms == NOW + COMPACT.delete_retention_ms
    put(log, [("d", "1")])
    log.roll()
    clean(log, now_ms=NOW + 999)  # before the horizon: still there
    assert (3, "a", None) in records(log)
    put(log, [("e", "1")])
    log.roll()
    clean(log, now_ms=NOW + 1_000)  # at the horizon: gone
    assert [r[1] for r in records(log)] == ["c", "b", "d", "e"]


def test_horizon_due_cleans_again_without_dirty_records(tmp_path):
    with LogManager(tmp_path, COMPACT) as logs:
        log = logs.create_partition("t", 0)
        put(log, [("a", "1"), ("a", None)])
        log.roll()
        cleaner = LogCleaner(logs, clock=lambda: NOW)
        assert cleaner.clean_once() is not None
        assert records(log) == [(1, "a", None)]
        assert cleaner.clean_once(now_ms=NOW + 10) is None  # nothing dirty, horizon ahead
        assert cleaner.clean_once(now_ms=NOW + 1_000) is not None
        assert records(log) == []


def test_a_pass_leaves_lazy_partitions_unopened_until_their_first_use(tmp_path):
    """After a clean shutdown the internal topics' partitions open on first use (the
    coordinators' loader, after the first requests): the cleaner's pass at start does not open
    them (the broker's first answers do not wait behind it); once opened, they are cleaned."""
    with LogManager(tmp_path, COMPACT) as logs:
        log = logs.create_partition("__internal", 0)
        put(log, [("a", "1"), ("a", "2")])
        log.roll()
    with LogManager(tmp_path, COMPACT, lazy_topics={"__internal"}) as logs:
        cleaner = LogCleaner(logs, clock=lambda: NOW)
        assert cleaner.clean_once() is None and not logs.opened("__internal", 0)
        log = logs.get("__internal", 0)
        assert cleaner.clean_once() is not None
        assert records(log) == [(1, "a", "2")]


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_rewritten_batches_keep_their_codec(log, codec):
    put(log, [("a", "1"), ("b", "1"), ("c", "1")], compression=codec)
    put(log, [("a", "2")], compression=codec)
    log.roll()
    clean(log)
    kept = batches(log)
    assert [b.compression for b in kept] == [codec, codec]
    assert records(log) == [(1, "b", "1"), (2, "c", "1"), (3, "a", "2")]
    for b in kept:
        b.validate()


def test_untouched_batches_are_copied_byte_for_byte(log):
    put(log, [("a", "1"), ("b", "1")])
    put(log, [("c", "1")])
    put(log, [("a", "2")])
    log.roll()
    before = raw_batches(log)
    clean(log)
    after = raw_batches(log)
    assert after[2] == before[2] and after[3] == before[3]  # kept whole: the same bytes
    assert after[0] != before[0]  # lost a record: rewritten


def raw_batches(log: PartitionLog) -> dict[int, bytes]:
    data = b"".join(s.read() for s in log.read(log.log_start_offset, 1 << 30))
    out, pos = {}, 0
    for batch in batches(log):
        out[batch.base_offset] = data[pos:pos + batch.size_in_bytes]
        pos += batch.size_in_bytes
    return out


def test_a_batch_losing_records_keeps_the_others_byte_for_byte(log):
    # The kept records are copied as they are (headers included) into a batch with the same
    # base offset, base timestamp, producer fields and codec; its max timestamp is theirs.
    from kwire.protocol.records import RecordBatchBuilder

    for n, codec in enumerate((Compression.NONE, Compression.ZSTD)):
        b = RecordBatchBuilder(compression=codec, producer_id=7, producer_epoch=0, base_sequence=3 * n)
        b.append(b"a%d" % n, b"old", 5_000, headers=[("h", b"1")])
        b.append(b"b%d" % n, b"keep", 4_000, headers=[("h", b"2"), ("i", None)])
        b.append(b"c%d" % n, b"keep", 3_000)
        log.append(b.build(), now_ms=5_000)
        put(log, [(f"a{n}", "new")], ts=6_000)
    log.roll()
    clean(log)
    first = batches(log)[0]
    assert (first.base_offset, first.record_count, first.last_offset_delta) == (0, 2, 2)
    assert (first.base_timestamp, first.max_timestamp, first.producer_id, first.base_sequence) == (5_000, 4_000, 7, 0)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in first.records()] == [
        (1, b"b0", b"keep", 4_000, [("h", b"2"), ("i", None)]), (2, b"c0", b"keep", 3_000, [])]
    first.validate()
    assert batches(log)[2].compression == Compression.ZSTD and batches(log)[2].record_count == 2


def test_aborted_records_removed_and_markers_removed_once_their_data_is_gone(log):
    a, b = 7000, 8000
    put(log, [("x", "a0"), ("y", "a0")], pid=a, epoch=0, seq=0, transactional=True)
    put(log, [("x", "b0")], pid=b, epoch=0, seq=0, transactional=True)
    log.append_marker(a, 0, commit=False, now_ms=1_000)  # abort a's
    log.append_marker(b, 0, commit=True, now_ms=1_000)   # commit b's
    put(log, [("z", "plain")])
    log.roll()
    aborts = log.aborted_transactions(0, 10)
    assert [t.producer_id for t in aborts] == [a]
    clean(log, now_ms=NOW)
    assert records(log) == [(2, "x", "b0"), (5, "z", "plain")]
    # The cleaned segment carries the .txnindex entries of the segments it replaced.
    assert log.aborted_transactions(0, 10) == aborts
    kinds = [(b.base_offset, b.is_control, b.record_count) for b in batches(log)]
    # a's data batch is a's last batch: kept empty (its sequence survives), so a's abort marker
    # stays too; b's commit stays while b's record does.
    assert (3, True, 1) in kinds and (4, True, 1) in kinds
    # b's record superseded, and b wrote again: the next clean drops b's batch; the one after
    # finds the commit marker without data and gives it its horizon; once that passed it goes.
    put(log, [("x", "plain")])
    put(log, [("q", "b1")], pid=b, epoch=0, seq=1)
    log.roll()
    clean(log, now_ms=NOW)
    assert 2 not in [b.base_offset for b in batches(log)]
    for n, now in enumerate((NOW, NOW + COMPACT.delete_retention_ms)):
        put(log, [(f"w{n}", "1")])
        log.roll()
        clean(log, now_ms=now)
        marker = [b for b in batches(log) if b.base_offset == 4]
        assert (marker == []) == (n == 1)
        if n == 0:
            assert marker[0].delete_horizon_ms == NOW + COMPACT.delete_retention_ms
    assert [r[1] for r in records(log)] == ["z", "x", "q", "w0", "w1"]
    assert log.last_stable_offset == log.log_end_offset


def test_nothing_past_the_last_stable_offset_is_cleaned(log):
    put(log, [("a", "1")])
    put(log, [("a", "open")], pid=9, epoch=0, seq=0, transactional=True)  # open transaction
    put(log, [("a", "2")])
    log.roll()
    assert log.last_stable_offset == 1
    clean(log)
    assert records(log) == [(0, "a", "1"), (1, "a", "open"), (2, "a", "2")]


def test_idempotent_producer_keeps_its_sequence_after_cleaning(log, tmp_path):
    pid = 4242
    put(log, [("a", "1"), ("b", "1")], pid=pid, epoch=3, seq=0)
    put(log, [("a", "2"), ("b", "2")])  # another writer supersedes both records
    log.roll()
    clean(log)
    kept = batches(log)
    # The producer's last batch stays, emptied, with its id, epoch and sequences.
    empty = next(b for b in kept if b.producer_id == pid)
    assert (empty.record_count, empty.producer_epoch, empty.base_sequence, empty.last_offset) == (0, 3, 0, 1)
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        entry = reopened.producer_state.get(pid)
        assert (entry.epoch, entry.last_seq, entry.last_offset) == (3, 1, 1)
        with pytest.raises(OutOfOrderSequenceNumberError):
            put(reopened, [("c", "x")], pid=pid, epoch=3, seq=5)
        put(reopened, [("c", "1")], pid=pid, epoch=3, seq=2)
    finally:
        reopened.close()


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path):
    config = COMPACT.with_(min_cleanable_dirty_ratio=0.99)
    with LogManager(tmp_path, config) as logs:
        log = logs.create_partition("t", 0)
        fill_rounds(log, 4)
        log.roll()
        cleaner = LogCleaner(logs, clock=lambda: NOW)
        assert cleaner.clean_once() is not None  # all dirty: a ratio of 1.0
        fill_rounds(log, 2, ts=5_000, tag="w")
        log.roll()
        assert cleaner.clean_once(now_ms=6_000) is None  # ratio below 0.99, no lag set
        logs.set_topic_config("t", config.with_(max_compaction_lag_ms=1_000))
        assert cleaner.clean_once(now_ms=5_900) is None  # oldest dirty batch (max timestamp 5_004) too young
        assert cleaner.clean_once(now_ms=6_100) is not None
        assert len(records(log)) == 5


def test_small_cleaned_segments_are_merged_in_the_same_clean(log):
    # Grouped by their sizes after cleaning, not before (unlike Kafka's groupSegmentsBySize):
    # sixty rounds of the same 5 keys over many full segments end in one segment.
    fill_rounds(log, 60)
    log.roll()
    many = len(log.segments)
    result = clean(log)
    assert many > 4 and result is not None and result.segments_before == many - 1
    assert len(log.segments) == 2 and result.segments_after == 1  # one cleaned segment + the active one
    assert len(records(log)) == 5
    assert [r[0] for r in records(log)] == list(range(295, 300))


def test_cleaned_segments_stay_within_segment_bytes(log):
    # Nothing to remove from most segments (distinct keys): they stay as big as they were, and
    # no output grows past segment.bytes; the few shrunk ones merge with their neighbours.
    for r in range(30):
        put(log, [(f"u{r}-{i}", "x" * 20) for i in range(6)] + [("same", f"v{r}")], ts=1_000 + r)
    log.roll()
    before = latest(records(log))
    clean(log)
    assert all(s.size <= COMPACT.segment_bytes for s in log.segments)
    assert latest(records(log)) == before
    assert len(records(log)) == 30 * 6 + 1


def test_segments_are_not_merged_across_int32_relative_offsets(tmp_path):
    # Kafka's rule: a segment's offsets must fit int32 relative to its base (the index stores
    # them so).  Two small segments 2^31 offsets apart stay two segments.
    directory = tmp_path / "t-0"
    directory.mkdir()
    far = 1 << 31
    for base, tag in ((0, "a"), (far, "b"), (far + 10, "c")):
        segment = LogSegment(directory, base, index_interval_bytes=64)
        raw = struct.pack(">q", base) + kv([("k0", tag), (f"only-{tag}", "x")])[8:]
        segment.append(raw, base, base + 1, -1)
        segment.flush()
        segment.close()
    log = PartitionLog(directory, COMPACT)
    try:
        assert [s.base_offset for s in log.segments] == [0, far, far + 10]
        result = clean(log)
        assert result is not None and result.segments_after == 2
        assert [s.base_offset for s in log.segments] == [0, far, far + 10]
        assert records(log) == [(1, "only-a", "x"), (far, "k0", "b"), (far + 1, "only-b", "x"),
                                (far + 10, "k0", "c"), (far + 11, "only-c", "x")]
    finally:
        log.close()


def test_indexes_after_cleaning_match_rebuilt_ones(log, tmp_path):
    for r in range(40):
        put(log, [(f"k{r % 7}", f"v{r}" * 3), (f"j{r}", "x")], ts=1_000 + 10 * r)
    log.roll()
    clean(log)
    put(log, [("k0", "z")], ts=2_000)
    log.roll()
    clean(log)
    cleaned = [(s.base_offset, s.offset_index._entries, s.time_index._entries, s.max_timestamp)
               for s in log.segments]
    lookups = [log.offset_for_timestamp(t) for t in range(990, 1_420, 7)]
    reads = [tuple((s.position, s.length) for s in log.read(o, 300)) for o in range(0, log.log_end_offset)]
    log.close()
    for p in (tmp_path / "t-0").glob("*index"):
        if not p.name.endswith(".txnindex"):
            p.unlink()
    rebuilt = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        assert [(s.base_offset, s.offset_index._entries, s.time_index._entries, s.max_timestamp)
                for s in rebuilt.segments] == cleaned
        assert [rebuilt.offset_for_timestamp(t) for t in range(990, 1_420, 7)] == lookups
        assert [tuple((s.position, s.length) for s in rebuilt.read(o, 300))
                for o in range(0, rebuilt.log_end_offset)] == reads
    finally:
        rebuilt.close()


def test_log_start_offset_is_kept(log):
    fill_rounds(log, 10)
    log.roll()
    log.delete_records(12)
    start = log.log_start_offset
    clean(log)
    assert log.log_start_offset == start == 12
    assert all(o >= 12 for o, _, _ in records(log))


def test_small_dedupe_buffer_converges_over_several_passes(log):
    keys = 40
    for r in range(3):
        for i in range(0, keys, 4):
            put(log, [(f"k{j}", f"v{r}-{j}") for j in range(i, i + 4)], ts=1_000 + r)
    log.roll()
    want = latest(records(log))
    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=24 * 12))  # room for ~10 keys
    passes = 0
    while passes < 30 and cleaner.clean(log, now_ms=NOW) is not None:
        passes += 1
    assert 3 < passes < 30
    assert latest(records(log)) == want and len(records(log)) == keys


def test_checkpoint_keeps_the_clean_dirty_boundary(log, tmp_path):
    fill_rounds(log, 8)
    log.roll()
    result = clean(log)
    assert read_cleaner_checkpoint(log.dir) == result.end_offset == log.segments[-1].base_offset
    assert clean(log) is None  # nothing dirty any more
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        assert clean(reopened) is None
    finally:
        reopened.close()


def test_keyless_record_refused_on_a_compacted_log(log):
    put(log, [("a", "1")])
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key in topic "
                                                  "partition t-0"):
        log.append(kv([("b", "1"), (None, "no key")]), now_ms=1_000)
    assert records(log) == [(0, "a", "1")]
    plain = PartitionLog(log.dir.with_name("u-0"), COMPACT.with_(cleanup_policy="delete"))
    try:
        plain.append(kv([(None, "no key")]), now_ms=1_000)
    finally:
        plain.close()


def test_retention_only_with_the_delete_policy(log):
    fill_rounds(log, 10)
    log.set_config(COMPACT.with_(retention_ms=1))
    assert log.apply_retention(now_ms=NOW) == []
    log.set_config(COMPACT.with_(retention_ms=1, cleanup_policy="compact,delete"))
    assert log.apply_retention(now_ms=NOW)


def test_policy_change_starts_and_stops_cleaning(tmp_path):
    plain = COMPACT.with_(cleanup_policy="delete")
    with LogManager(tmp_path, plain) as logs:
        log = logs.create_partition("t", 0)
        fill_rounds(log, 6)
        log.roll()
        cleaner = LogCleaner(logs, clock=lambda: NOW)
        assert cleaner.clean_once() is None
        logs.set_topic_config("t", COMPACT)
        assert log.config is COMPACT
        assert cleaner.clean_once() is not None
        fill_rounds(log, 6, tag="w")
        log.roll()
        logs.set_topic_config("t", plain)
        assert cleaner.clean_once() is None


def test_each_clean_is_logged_with_its_sizes(tmp_path, caplog):
    with LogManager(tmp_path, COMPACT) as logs:
        log = logs.create_partition("t", 0)
        fill_rounds(log, 6)
        log.roll()
        with caplog.at_level(logging.INFO, logger="kwire.broker.storage.cleaner"):
            result = LogCleaner(logs).clean_once(now_ms=NOW)
        line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("cleaned t-0"))
        assert f"{result.bytes_before} bytes -> {result.bytes_after} bytes" in line
        assert f"{result.records_removed} of" in line and " s" in line


def test_background_threads_clean_and_stop(tmp_path):
    with LogManager(tmp_path, COMPACT) as logs:
        log = logs.create_partition("t", 0)
        fill_rounds(log, 10)
        log.roll()
        cleaner = logs.start_cleaner(CleanerConfig(threads=2, backoff_ms=10))
        for _ in range(500):
            if read_cleaner_checkpoint(log.dir):
                break
            cleaner._stop.wait(0.01)
        logs.stop_cleaner()
        assert len(records(log)) == 5
        assert not any(t.is_alive() for t in cleaner._threads)


def test_throttler_sleeps_to_the_limit():
    t = [0.0]
    slept = []
    throttler = Throttler(1_000, check_interval_ms=100, clock=lambda: t[0], sleep=slept.append)
    throttler.maybe_throttle(500)
    t[0] = 0.1
    throttler.maybe_throttle(500)  # 1000 bytes in 0.1 s: 10x the limit
    assert slept == [pytest.approx(0.9)]


def test_closing_the_log_during_a_clean_aborts_it(log, tmp_path):
    fill_rounds(log, 10)
    log.roll()
    before = records(log)
    cleaner = Cleaner(CleanerConfig(), hook=lambda step: log.close() if step == "cleaned" else None)
    with pytest.raises(CleanAborted):
        cleaner.clean(log, now_ms=NOW)
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    reopened = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        assert records(reopened) == before and not reopened.load_findings
    finally:
        reopened.close()


def test_segments_changed_during_a_clean_refuse_the_swap(log):
    fill_rounds(log, 10)
    log.roll()
    cleaner = Cleaner(CleanerConfig(), hook=lambda step: log.delete_records(40) if step == "cleaned" else None)
    with pytest.raises(CleanAborted, match="segments changed"):
        cleaner.clean(log, now_ms=NOW)
    assert [o for o, _, _ in records(log)] == list(range(40, 50))
    assert clean(log) is not None and len(records(log)) == 5


def test_segments_changed_after_the_swap_commit_refuse_it(log):
    # DeleteRecords between the commit (the renames to .swap, made without the partition lock)
    # and the swap itself: refused, and the committed files go.
    fill_rounds(log, 10)
    log.roll()
    cleaner = Cleaner(CleanerConfig(), hook=lambda step: log.delete_records(40) if step == "swap" else None)
    with pytest.raises(CleanAborted, match="segments changed"):
        cleaner.clean(log, now_ms=NOW)
    assert [o for o, _, _ in records(log)] == list(range(40, 50))
    assert not [p.name for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    assert clean(log) is not None and len(records(log)) == 5


def test_a_swap_holds_the_partition_lock_only_for_its_renames(log):
    # Kafka's order: .cleaned -> .swap (the commit), old files -> .deleted, .swap -> final
    # names, then the old files are unlinked.  The commit's directory fsync, the last fsync
    # and the unlinking run without the partition lock: an append from another thread goes
    # through at those steps (with the lock held it would wait, and the join time out).
    fill_rounds(log, 10)
    log.roll()
    old_logs = [s.log_path.name for s in log.segments[:-1]]
    seen: dict[str, list[str]] = {}

    def hook(step):
        if step in ("swap", "synced"):
            worker = threading.Thread(target=put, args=(log, [(f"during-{step}", "x")]))
            worker.start()
            worker.join(timeout=10)
            assert not worker.is_alive(), f"append blocked at step {step}"
            seen[step] = sorted(p.name for p in log.dir.iterdir())

    Cleaner(CleanerConfig(), hook=hook).clean(log, now_ms=NOW)
    assert f"{0:020d}.log.swap" in seen["swap"] and f"{0:020d}.log.cleaned" not in seen["swap"]
    # At "synced" the old segments' files are renamed, not yet unlinked.
    assert {f"{n}.deleted" for n in old_logs} <= set(seen["synced"])
    assert not [p.name for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    assert [k for _, k, _ in records(log)][-2:] == ["during-swap", "during-synced"]


def test_a_log_whose_clean_fails_is_left_alone(tmp_path, caplog):
    with LogManager(tmp_path, COMPACT) as logs:
        log = logs.create_partition("t", 0)
        fill_rounds(log, 6)
        log.roll()

        def fail(step):
            if step == "cleaned":
                raise OSError("disk on fire")

        cleaner = LogCleaner(logs, clock=lambda: NOW, hook=fail)
        with caplog.at_level(logging.ERROR, logger="kwire.broker.storage.cleaner"):
            assert cleaner.clean_once() is None
        assert "cleaning t-0 failed" in caplog.text
        assert cleaner.grab_filthiest(NOW) is None


def test_the_marker_that_fenced_a_producer_stays(log):
    # The coordinator ended producer 5's transaction with a new epoch (a fencing abort): the
    # producer's last entry is that marker, which the cleaner keeps (emptied once its horizon
    # passed) so the new epoch survives, as Kafka's isBatchLastRecordOfProducer.
    put(log, [("a", "txn")], pid=5, epoch=0, seq=0, transactional=True)
    log.append_marker(5, 1, commit=False, now_ms=1_000)
    for n, now in enumerate((NOW, NOW, NOW + COMPACT.delete_retention_ms, NOW + 2 * COMPACT.delete_retention_ms)):
        put(log, [(f"x{n}", "1")])
        log.roll()
        clean(log, now_ms=now)
    kept = {b.base_offset: b for b in batches(log)}
    assert 0 not in kept and kept[1].is_control and kept[1].producer_id == 5 and kept[1].producer_epoch == 1


def test_produce_and_fetch_go_on_while_a_clean_copies(log):
    fill_rounds(log, 10)
    log.roll()
    done = []

    def other_thread():
        base, _ = put(log, [("during", "clean")], ts=1_000)
        done.append((base, records(log)[-1]))

    def hook(step):
        if step == "copying" and not done:
            # Another thread appends and reads while the cleaner copies: the partition lock is
            # not held (with it held, this thread would wait and the join time out).
            worker = threading.Thread(target=other_thread)
            worker.start()
            worker.join(timeout=10)
            assert done, "append/read blocked by the clean"

    Cleaner(CleanerConfig(), hook=hook).clean(log, now_ms=NOW)
    assert done[0] == (50, (50, "during", "clean"))
    assert records(log)[-1] == (50, "during", "clean")


def test_deleting_the_topic_during_a_clean_aborts_it_quietly(tmp_path, caplog):
    with LogManager(tmp_path, COMPACT) as logs:
        log = logs.create_partition("t", 0)
        fill_rounds(log, 10)
        log.roll()
        cleaner = LogCleaner(logs, clock=lambda: NOW,
                             hook=lambda step: logs.delete_topic("t") if step == "copying" and logs.topics() else None)
        with caplog.at_level(logging.INFO, logger="kwire.broker.storage.cleaner"):
            assert cleaner.clean_once() is None
        assert "failed" not in caplog.text and "aborted" in caplog.text
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("t-0")]


# Seeds 11 and 13 once caught a stale .txnindex entry, 19 a history needing many passes.
@pytest.mark.parametrize("seed", [0, 1, 2, 11, 13, 19])
def test_random_histories_keep_each_keys_last_record(tmp_path, seed):
    """Random puts (tombstones, codecs, idempotent producers, committed and aborted transactions),
    rolls and cleans with small dedupe maps: every record left is the one produced at its offset,
    none of an aborted transaction; each key's last record is the last produced (a tombstone past
    its horizon may be gone, with every older record of its key); a reload reads the same.  The
    compiled walks and the Python ones leave the same bytes."""
    from kwire.broker.storage.offset_map import has_compiled_walk

    paths = [True, False] if has_compiled_walk() else [False]
    logs = [_random_history(tmp_path / f"compiled-{c}", seed, compiled=c) for c in paths]
    assert all(raw == logs[0] for raw in logs)


def _random_history(tmp_path, seed: int, *, compiled: bool) -> dict[int, bytes]:
    import random

    rng = random.Random(seed)
    log = PartitionLog(tmp_path / "t-0", COMPACT.with_(segment_bytes=rng.choice([600, 1024, 4096])))
    produced: dict[int, tuple[str, str | None]] = {}
    seqs: dict[int, int] = {}
    now = NOW
    try:
        txn: list[int] = []  # offsets written by the open transaction of producer 200
        for _ in range(60):
            roll = rng.random()
            if roll < 0.1:
                log.roll()
            elif roll < 0.15 and txn:
                commit = rng.random() < 0.5
                log.append_marker(200, 0, commit=commit, now_ms=1_000)
                if not commit:
                    for offset in txn:
                        del produced[offset]
                txn = []
            elif roll < 0.25:
                now += rng.choice([0, 400, 1_200])
                Cleaner(CleanerConfig(dedupe_buffer_size=24 * rng.choice([8, 100])), compiled=compiled).clean(
                    log, now_ms=now)
            else:
                pairs = [(f"k{rng.randrange(12)}", None if rng.random() < 0.15 else f"v{rng.randrange(1000)}")
                         for _ in range(rng.randrange(1, 5))]
                producer = {}
                if rng.random() < 0.4:
                    pid = rng.choice([100, 101, 200])
                    producer = {"pid": pid, "epoch": 0, "seq": seqs.get(pid, 0), "transactional": pid == 200}
                    seqs[pid] = seqs.get(pid, 0) + len(pairs)
                base, _ = put(log, pairs, compression=rng.choice([0, 0, 1, 4]), **producer)
                for i, pair in enumerate(pairs):
                    produced[base + i] = pair
                    if producer.get("transactional"):
                        txn.append(base + i)
        if txn:
            log.append_marker(200, 0, commit=True, now_ms=1_000)
        log.roll()
        for _ in range(60):  # small maps: several passes to get through the whole log
            if Cleaner(CleanerConfig(dedupe_buffer_size=24 * 8), compiled=compiled).clean(log, now_ms=now) is None:
                break
        kept = records(log)
        assert [o for o, _, _ in kept] == sorted(o for o, _, _ in kept)
        assert all(produced[o] == (k, v) for o, k, v in kept)
        last = latest((o, k, v) for o, (k, v) in sorted(produced.items()))
        have = latest(kept)
        for key, (offset, value) in last.items():
            if key in have:
                assert have[key] == (offset, value)
            else:
                assert value is None  # a tombstone whose horizon passed: the key is gone
        for producer_id, next_seq in seqs.items():
            assert log.producer_state.get(producer_id).last_seq == next_seq - 1
        log.close()
        log = PartitionLog(tmp_path / "t-0", COMPACT)
        assert records(log) == kept
        for producer_id, next_seq in seqs.items():
            assert log.producer_state.get(producer_id).last_seq == next_seq - 1
        return raw_batches(log)
    finally:
        log.close()


def test_an_abort_leaves_the_txnindex_once_its_data_is_gone(log):
    # Kafka's cleaned index: an abort's entry stays only while its marker stays for its data.
    # A stale entry (marker gone) would make the producer's next, committed, transaction look
    # aborted to the next clean.
    put(log, [("a", "aborted")], pid=5, epoch=0, seq=0, transactional=True)
    log.append_marker(5, 0, commit=False, now_ms=1_000)
    put(log, [("b", "x")], pid=5, epoch=0, seq=1)  # the producer's last batch is now this one
    for n, now in enumerate((NOW, NOW, NOW + COMPACT.delete_retention_ms)):
        put(log, [(f"w{n}", "1")])
        log.roll()
        clean(log, now_ms=now)
    assert [b.base_offset for b in batches(log) if b.is_control] == []
    assert log.aborted_transactions(0, log.log_end_offset) == []
    put(log, [("c", "committed")], pid=5, epoch=0, seq=2, transactional=True)
    log.append_marker(5, 0, commit=True, now_ms=1_000)
    put(log, [("w9", "1")])
    log.roll()
    clean(log, now_ms=NOW + COMPACT.delete_retention_ms)
    assert ("c", "committed") in [(k, v) for _, k, v in records(log)]


def test_a_dedupe_buffer_too_small_for_one_batch_is_an_error(tmp_path, caplog):
    with LogManager(tmp_path, COMPACT) as logs:
        log = logs.create_partition("t", 0)
        put(log, [(f"k{i}", "v") for i in range(10)])
        log.roll()
        cleaner = LogCleaner(logs, CleanerConfig(dedupe_buffer_size=24 * 5), clock=lambda: NOW)
        with caplog.at_level(logging.ERROR, logger="kwire.broker.storage.cleaner"):
            assert cleaner.clean_once() is None
        assert "log.cleaner.dedupe.buffer.size is too small" in caplog.text
        assert cleaner.grab_filthiest(NOW) is None  # not picked again and again


def test_offset_map_is_kafkas_fixed_buffer():
    from kwire.broker.storage.offset_map import ENTRY_BYTES, OffsetMap

    with OffsetMap(ENTRY_BYTES * 100) as m:
        assert (m.slots, m.capacity) == (100, 90)  # Kafka's 24-byte slots, load factor 0.9
        for i in range(90):
            m.put(f"key{i}".encode(), i)
        m.put(b"key3", 1_000)  # a newer offset for a key already there takes no slot
        assert len(m) == 90 and m.free == 0
        assert [m.get(f"key{i}".encode()) for i in (0, 3, 89)] == [0, 1_000, 89]
        assert m.get(b"absent") == -1


def test_a_compacted_log_rolls_by_max_compaction_lag(tmp_path):
    config = COMPACT.with_(segment_bytes=1 << 20, max_compaction_lag_ms=1_000)
    log = PartitionLog(tmp_path / "t-0", config)
    try:
        put(log, [("a", "1")], ts=1_000)
        put(log, [("a", "2")], ts=1_999)
        assert len(log.segments) == 1
        put(log, [("a", "3")], ts=2_000)  # 1_000 ms after the active segment's first batch
        assert len(log.segments) == 2
        log.set_config(config.with_(cleanup_policy="delete"))  # only for compacted logs
        put(log, [("a", "4")], ts=3_100)
        assert len(log.segments) == 2
    finally:
        log.close()


def test_cleaner_io_is_throttled(log):
    fill_rounds(log, 20)
    log.roll()
    ticks = iter(range(10**6))
    slept: list[float] = []
    # A clock that moves 10 ms per look, and a limit of 1 KB/s: the clean must be told to wait.
    throttler = Throttler(1_000, check_interval_ms=50, clock=lambda: next(ticks) / 100, sleep=slept.append)
    Cleaner(CleanerConfig(), throttler=throttler).clean(log, now_ms=NOW)
    assert sum(slept) > 1


def test_the_throttler_counts_the_batches_a_clean_drops(tmp_path):
    """Kafka's cleanInto throttles on every byte read and written: a clean that drops almost
    everything it reads is held to log.cleaner.io.max.bytes.per.second all the same."""
    class Counting(Throttler):
        counted = 0

        def maybe_throttle(self, observed_bytes: int) -> None:
            Counting.counted += observed_bytes

    log = PartitionLog(tmp_path / "t-0", COMPACT)
    try:
        for r in range(20):
            put(log, [(f"k{i}", f"v{r}-{i}") for i in range(4)], ts=1_000 + r)
            log.roll()
        result = Cleaner(CleanerConfig(), throttler=Counting(1e9)).clean(log, now_ms=NOW)
        assert result is not None and result.records_removed > 0
        # The map's read and the copy's read of every dirty byte, plus what was written.
        assert Counting.counted >= 2 * result.bytes_before + result.bytes_after
    finally:
        log.close()
