"""One partition's log: an ordered list of segments (Kafka's UnifiedLog, single node).

Offsets: ``log_start_offset`` <= readable offsets < ``log_end_offset``.  With one node every
appended batch is committed at once, so ``high_watermark`` is the log end offset.

Durability: appends go to the page cache; ``flush()`` fsyncs and moves the recovery point
(persisted, with the log start offset, in the partition checkpoint).  After a crash the loader
re-validates everything from the recovery point.  ``flush()`` fsyncs without holding the
partition lock: with ``fsync = "always"`` it runs in a worker thread while the event loop keeps
appending, and an append must not wait for the disk.

Idempotent producers: ``producer_state`` (see producer_state.py) checks every batch with a
producer id before it is stored, and is rebuilt on open from its snapshots and the log.

Transactions: the producer state knows each open transaction's first offset, which bounds the
last stable offset (``last_stable_offset``, what read_committed consumers may read up to).  The
coordinator's markers go through ``append`` like produced batches (``append_marker`` builds one);
an abort of a transaction that wrote here is added to the active segment's ``.txnindex``, where
``aborted_transactions`` finds it for read_committed fetches.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kwire.protocol.errors import KafkaStorageError, OffsetOutOfRangeError
from kwire.protocol.records import ControlRecordType, build_control_batch

from ._files import CLEANED_SUFFIX, SWAP_SUFFIX, fsync_dir
from .checkpoint import PartitionCheckpoint, write_checkpoint
from .config import LogConfig
from .index import INT32_MAX
from .loader import load_partition
from .page_cache import PageCacheLimit
from .producer_state import ProducerStateManager
from .segment import FileSlice, LogSegment
from .txn_index import AbortedTxn
from .validation import prepare_append

__all__ = ["PartitionLog", "CleaningView", "LATEST_TIMESTAMP", "EARLIEST_TIMESTAMP", "MAX_TIMESTAMP", "parse_partition_dir"]

# ListOffsets' special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734: the record with the largest timestamp

logger = logging.getLogger("kwire.broker.storage")

_DIR_NAME = re.compile(r"^(.+)-(\d+)$")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``"my-topic-3"`` -> ``("my-topic", 3)``; None for other names."""
    m = _DIR_NAME.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CleaningView:
    """A partition as the log cleaner sees it at one instant (``PartitionLog.cleaning_view``)."""

    config: LogConfig
    segments: tuple[LogSegment, ...]  # every segment but the active one
    active_base: int
    log_start_offset: int
    last_stable_offset: int
    # producer id -> last offset of its last data batch: those batches stay, even emptied
    last_batch_of_producer: dict[int, int]
    # producer id -> epoch, for producers whose last entry is a marker of a new epoch (no data
    # batch of it yet): their markers of that epoch stay, they carry the epoch that fences
    marker_epoch_of_producer: dict[int, int]


class PartitionLog:
    """The log of one partition, in directory ``dir`` (conventionally ``<topic>-<n>``).

    Opening loads (and after an unclean shutdown recovers) the segments; ``load_findings``
    lists what loading had to repair.  All methods are thread-safe (one lock per partition).
    """

    def __init__(self, dir: Path, config: LogConfig | None = None, *, clean_shutdown: bool = False,
                 page_cache: PageCacheLimit | None = None):
        self.dir = Path(dir)
        self.config = config or LogConfig()
        self.name = self.dir.name
        self._lock = threading.RLock()
        # Serialises checkpoint writes (one temp file name), including those made by flush()
        # without the partition lock.  Order: partition lock, then this one; never the reverse.
        self._checkpoint_lock = threading.Lock()
        self._truncations = 0  # truncate_to() calls: a flush spanning one must not move the point
        # Held by a cleaner's swap from its commit (the renames to .swap) to its end, and by a
        # truncation, which must not remove offsets a committed swap covers.  Order: this lock,
        # then the partition lock.
        self._swap_lock = threading.Lock()
        loaded = load_partition(self.dir, self.config, clean_shutdown=clean_shutdown)
        self._segments: list[LogSegment] = loaded.segments
        self._bases: list[int] = [s.base_offset for s in self._segments]
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self.load_findings: list[str] = loaded.findings
        self.producer_state = ProducerStateManager(self.dir)
        try:
            self._load_producer_state(loaded.file_names)
        except BaseException:
            for segment in self._segments:
                segment.close()
            raise
        self._page_cache = page_cache
        self._closed = False
        self._dropped = False

    def _load_producer_state(self, file_names: frozenset[str] | None = None) -> None:
        # Only snapshots at or below the recovery point: the batches they count were fsynced
        # (and, after a crash, checked again by the loader), so none of them can have been lost.
        # A later one (a roll without flush_on_roll) is passed over and the log replayed instead.
        # A segment whose .txnindex is missing or unreadable has it emptied; the replay then
        # starts at or before that segment and fills it again.
        rebuild_from = None
        # ``file_names``: the loader's listing of the directory, when just opened.
        if self.producer_state.predates_transactions(self._segments, file_names):
            # Written by a kwire without transactions (which refused transactional batches):
            # there is no abort to index, and every transactional batch since is newer than any
            # snapshot it left, so the usual replay covers them.  No rebuild, no warnings.
            logger.info("%s: data written before transactions; created its .txnindex files", self.name)
            for segment in self._segments:
                segment.txn_index_rebuilt()
        for segment in self._segments:
            problem = segment.txn_index_problem()
            if problem:
                self.load_findings.append(f"segment {segment.base_offset}: {problem}; rebuilding it from the log")
                segment.txn_index_rebuilt()
                if rebuild_from is None:
                    rebuild_from = segment.base_offset
        self.load_findings += self.producer_state.load(self._segments, snapshot_limit=self._recovery_point,
                                                       now_ms=_now_ms(), txn_rebuild_from=rebuild_from,
                                                       file_names=file_names)

    # -- offsets ----------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed reads stop: the first offset of the oldest open transaction, or
        the high watermark when none is open.  Never below the log start offset (retention or
        DeleteRecords may have removed an open transaction's first batches; Kafka's rule too)."""
        with self._lock:
            first = self.producer_state.first_unstable_offset
            hw = self.high_watermark
            return hw if first is None else min(max(first, self._log_start_offset), hw)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def dropped(self) -> bool:
        """Closed without a flush (its partition deleted): what was appended since the last
        flush may never have reached the disk."""
        return self._dropped

    @property
    def closed(self) -> bool:
        return self._closed

    def set_config(self, config: LogConfig) -> None:
        """A dynamic config change (AlterConfigs): appends, rolls, retention and the cleaner use
        ``config`` from the next call on."""
        with self._lock:
            self.config = config

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"partition log {self.name} is closed")

    def _checkpoint(self) -> None:
        with self._checkpoint_lock:
            write_checkpoint(self.dir, PartitionCheckpoint(self._log_start_offset, self._recovery_point))

    # -- appending --------------------------------------------------------------------------
    def append(self, batch_bytes: bytes | bytearray | memoryview, *, leader_epoch: int = 0,
               now_ms: int | None = None, allow_control: bool = False, reuse_buffer: bool = False) -> tuple[int, int]:
        """Validate the batches, assign offsets from the log end, store them.

        Returns (base offset, last offset) of what was appended.  With LogAppendTime the
        batches' max timestamp becomes ``now_ms`` (default: the clock).  Refused input raises
        a kwire.protocol.errors Kafka error (see ``validation.prepare_append`` and
        ``ProducerStateManager.check_append``) and changes nothing, ``batch_bytes`` included.
        ``allow_control`` is for the broker's own transaction markers.

        ``batch_bytes`` is left as it was, unless ``reuse_buffer``: then the caller gives it up
        and, if writable, the offsets are written into it and it is stored from there (no copy).

        A retry of an idempotent producer's batch (same producer, epoch and sequence range as
        one of its last 5) is not stored again: the offsets it got the first time are returned,
        as Kafka answers such a retry with success.
        """
        with self._lock:
            self._check_open()
            now = _now_ms() if now_ms is None else now_ms
            prepared = prepare_append(batch_bytes, next_offset=self.log_end_offset, config=self.config,
                                      leader_epoch=leader_epoch, now_ms=now, allow_control=allow_control,
                                      reuse_buffer=reuse_buffer, partition=self.name)
            check = self.producer_state.check_append(prepared.data, now, headers=prepared.headers)
            if check.duplicate is not None:
                return check.duplicate
            prepared.stamp()  # every check passed: only now is a byte of the batches written
            if self._should_roll(len(prepared.data), prepared.max_timestamp, prepared.last_offset, now):
                self.roll(now_ms=now)
            active = self._segments[-1]
            position = active.size
            active.append(prepared.data, prepared.base_offset, prepared.last_offset, prepared.max_timestamp,
                          prepared.headers)
            if self._page_cache is not None:
                self._page_cache.appended(self, active, position, active.size)
            # Only now: a failed write must not leave sequences the log doesn't hold.
            for aborted in self.producer_state.apply(check, prepared.last_offset + 1):
                # In the segment holding the marker, as Kafka: a fetch finds it from there on.
                active.txn_index.append(aborted)
            return prepared.base_offset, prepared.last_offset

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, *, coordinator_epoch: int = 0,
                      now_ms: int | None = None) -> int:
        """Write a transaction marker (Kafka's control batch: attributes control | transactional,
        one record with key (0, 1 commit / 0 abort) and value (0, coordinator epoch)) for the
        producer, ending its transaction here.  Returns the marker's offset.

        ``InvalidProducerEpochError`` when the producer already wrote with a newer epoch."""
        now = _now_ms() if now_ms is None else now_ms
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        batch = build_control_batch(kind, producer_id=producer_id, producer_epoch=producer_epoch,
                                    coordinator_epoch=coordinator_epoch, timestamp=now)
        base, _ = self.append(batch, now_ms=now, allow_control=True)
        return base

    def _should_roll(self, size: int, max_timestamp: int, last_offset: int, now_ms: int) -> bool:
        active = self._segments[-1]
        if active.size == 0:
            return False
        if active.size + size > self.config.segment_bytes:
            return True
        if last_offset - active.base_offset > INT32_MAX:  # relative offsets are int32
            return True
        config = self.config
        # Kafka's LogConfig.maxSegmentMs: a compacted log also rolls by max.compaction.lag.ms,
        # or the records of its active segment (never cleaned) could wait longer than that.
        max_segment_ms = min(config.segment_ms, config.max_compaction_lag_ms) if config.compact else config.segment_ms
        return active.roll_age_ms(now_ms, max_timestamp) >= max_segment_ms

    def roll(self, *, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            active = self._segments[-1]
            if active.size == 0:
                return active
            active.on_become_inactive()
            if self._page_cache is not None:
                self._page_cache.rolled(self, active)
            new_base = self.log_end_offset
            if self.config.flush_on_roll:
                self._flush_locked()
            segment = LogSegment(self.dir, new_base, index_interval_bytes=self.config.index_interval_bytes)
            if segment.size:
                segment.close()
                raise KafkaStorageError(f"{segment.log_path} already exists with {segment.size} bytes")
            if now_ms is not None:
                segment.created_at_ms = now_ms
            self._segments.append(segment)
            self._bases.append(new_base)
            # As Kafka: a snapshot per segment, so loading replays at most the newest segments.
            self.producer_state.take_snapshot(self._bases)
            return segment

    def duplicate_segment_fd(self, segment: LogSegment) -> int | None:
        """A duplicate of ``segment``'s ``.log`` descriptor (the caller closes it), or None if
        the segment is no longer part of this open log."""
        with self._lock:
            if self._closed or not any(s is segment for s in self._segments):
                return None
            return os.dup(segment.log_fd())

    # -- reading ----------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
             max_offset: int | None = None) -> list[FileSlice]:
        """Whole stored batches from the one holding ``offset``, up to ``max_bytes`` in total,
        possibly from several segments.  With ``min_one_batch`` the first batch is returned
        even if bigger than ``max_bytes`` (as Kafka does for the first partition of a fetch).
        ``max_offset``: no batch starting at or after it (read_committed reads to the LSO,
        which is always a batch's first offset or the log end).

        ``OffsetOutOfRangeError`` unless log_start_offset <= offset <= log_end_offset; at the
        log end the result is empty.  The first batch may start before ``offset`` (a consumer
        skips the records below it, as with Kafka).  Each slice's ``next_offset`` is the offset
        after its last batch.
        """
        with self._lock:
            self._check_open()
            start, end = self._log_start_offset, self.log_end_offset
            if not start <= offset <= end:
                raise OffsetOutOfRangeError(f"offset {offset} is not in [{start}, {end}] of {self.name}")
            slices: list[FileSlice] = []
            remaining = max_bytes
            limit = end if max_offset is None else min(max_offset, end)
            i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
            for segment in self._segments[i:]:
                if offset >= limit:
                    break
                if offset >= segment.next_offset:
                    continue  # empty (or fully below offset): the next segment has it
                piece = segment.read(offset, remaining, min_one_batch=min_one_batch and not slices,
                                     max_offset=limit)
                if piece is None:
                    break
                slices.append(piece)
                remaining -= piece.length
                offset = piece.next_offset
                if offset < segment.next_offset or remaining <= 0:
                    break
            return slices

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions that may hold records in ``[start_offset, end_offset)`` (what
        a read_committed fetch of that range returns), from the segments' ``.txnindex``.

        An abort is indexed in the segment of its marker, which is at or after the segment
        holding ``start_offset``; the search goes on until an entry shows that no later abort
        can concern the range (Kafka's collectAbortedTransactions)."""
        with self._lock:
            self._check_open()
            found: list[AbortedTxn] = []
            i = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
            for segment in self._segments[i:]:
                txns, complete = segment.txn_index.collect(start_offset, end_offset)
                found.extend(txns)
                if complete:
                    break
            return found

    def offset_for_timestamp(self, timestamp: int, *, committed: bool = False) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) of the first record with a timestamp >= ``timestamp``
        at or after the log start offset, None if there is none.

        -1 (latest) gives (log end, -1), -2 (earliest) (log start, -1), -3 the record with the
        largest timestamp.  ``committed`` (read_committed): latest is the last stable offset, and
        a record found at or past it is not there yet (as Kafka).
        """
        with self._lock:
            self._check_open()
            if committed and timestamp != EARLIEST_TIMESTAMP:
                lso = self.last_stable_offset
                if timestamp == LATEST_TIMESTAMP:
                    return lso, -1
                found = self.offset_for_timestamp(timestamp)
                return found if found is None or found[0] < lso else None
            if timestamp == LATEST_TIMESTAMP:
                return self.log_end_offset, -1
            if timestamp == EARLIEST_TIMESTAMP:
                return self._log_start_offset, -1
            if timestamp == MAX_TIMESTAMP:
                best = max(self._segments, key=lambda s: s.max_timestamp)
                if best.max_timestamp < 0:
                    return None
                return best.find_offset_by_timestamp(best.max_timestamp, self._log_start_offset)
            if timestamp < 0:
                raise ValueError(f"unsupported special timestamp {timestamp}")
            for segment in self._segments:
                if segment.next_offset <= self._log_start_offset or segment.max_timestamp < timestamp:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found
            return None

    # -- deleting ---------------------------------------------------------------------------
    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: make ``before_offset`` the log start offset (if higher) and delete the
        segments wholly below it.  Returns the new log start offset."""
        doomed: list[LogSegment] = []
        with self._lock:
            self._check_open()
            if not 0 <= before_offset <= self.high_watermark:
                raise OffsetOutOfRangeError(f"cannot delete records before {before_offset}: "
                                            f"high watermark of {self.name} is {self.high_watermark}")
            if before_offset > self._log_start_offset:
                self._log_start_offset = before_offset
                # Persist first: a crash after deleting files but before this would let the
                # records below the new start reappear at the next load.
                self._checkpoint()
                count = 0
                while count + 1 < len(self._segments) and self._segments[count + 1].base_offset <= before_offset:
                    count += 1
                doomed = self._delete_oldest(count)
            start = self._log_start_offset
        _remove_files(doomed)
        return start

    def apply_retention(self, now_ms: int | None = None) -> list[int]:
        """Delete the oldest segments that break retention.ms or retention.bytes (Kafka's
        rules: a segment expires when its largest timestamp is older than retention.ms; by
        size, drop oldest segments while the log stays at or above retention.bytes without
        them), only when cleanup.policy holds "delete".  The active segment can go too: a fresh
        one is rolled first.  Returns the base offsets deleted."""
        with self._lock:
            doomed = self._expired_segments(now_ms)
        _remove_files(doomed)
        return [s.base_offset for s in doomed]

    def _expired_segments(self, now_ms: int | None) -> list[LogSegment]:
        """apply_retention's work under the lock: the segments dropped, renamed to ``.deleted``."""
        self._check_open()
        now = _now_ms() if now_ms is None else now_ms
        # Producer expiry rides on the periodic retention pass (Kafka runs it on a timer).
        self.producer_state.remove_expired(now)
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        if not self.config.delete:
            # cleanup.policy=compact: no retention by time or size, only the segments below
            # the log start offset go (Kafka's deleteOldSegments does the same).
            retention_ms = retention_bytes = -1
        excess = self.size_in_bytes - retention_bytes if retention_bytes >= 0 else 0
        doomed = 0
        segments = self._segments
        for i, segment in enumerate(segments):
            if segment.size == 0:
                break  # the empty active segment
            if i + 1 < len(segments) and segments[i + 1].base_offset <= self._log_start_offset:
                pass  # wholly below the log start offset (a delete_records interrupted by a crash)
            elif retention_ms >= 0 and now - segment.largest_timestamp > retention_ms:
                pass
            elif retention_bytes >= 0 and excess - segment.size >= 0:
                pass
            else:
                break
            excess -= segment.size
            doomed += 1
        if doomed == 0:
            return []
        if doomed == len(self._segments):
            self.roll(now_ms=now)
        return self._delete_oldest(doomed)

    def _delete_oldest(self, count: int) -> list[LogSegment]:
        """Drop the ``count`` oldest segments; their files are renamed to ``.deleted`` and the
        caller unlinks them (``remove_deleted_files``) after releasing the partition lock."""
        if count <= 0:
            return []
        # Producer state outlives the batches that built it (Kafka keeps a producer until it
        # expires), so once they are gone a rebuild must start from a snapshot at or above the
        # new first segment.  roll() wrote one at its base (usable after a crash: the recovery
        # point moves up to it below); if that is missing, take one now, after a flush so that
        # it is at or below the recovery point.
        new_first = self._segments[count].base_offset
        if self.producer_state.producers and not self.producer_state.snapshot_path(new_first).exists():
            self._flush_locked()
            self.producer_state.take_snapshot(self._bases)
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        new_start = max(self._log_start_offset, self._segments[0].base_offset)
        if new_start != self._log_start_offset:
            self._log_start_offset = new_start
            self._recovery_point = max(self._recovery_point, new_start)
        self._checkpoint()
        for segment in doomed:
            segment.mark_deleted()
        self.producer_state.delete_snapshots_below(self._segments[0].base_offset)
        return doomed

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset`` (for a future follower/unclean
        leader path; the single-node broker does not need it).  Waits for a cleaner's swap under
        way (see ``replace_segments``)."""
        doomed: list[LogSegment] = []
        with self._swap_lock, self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            if offset < self._log_start_offset:
                raise OffsetOutOfRangeError(f"cannot truncate {self.name} below its start {self._log_start_offset}")
            # First, so a crash part-way can't leave a snapshot of batches no longer in the log.
            self.producer_state.delete_snapshots_above(offset)
            while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                doomed.append(self._segments.pop())
                doomed[-1].mark_deleted()
                self._bases.pop()
            self._segments[-1].truncate_to(offset)
            self._truncations += 1
            self._recovery_point = min(self._recovery_point, self.log_end_offset)
            self._checkpoint()
            # Forget the removed batches' sequences: rebuild from a snapshot and the log.
            self._load_producer_state()
        _remove_files(doomed)

    # -- cleaning (see cleaner.py) -----------------------------------------------------------
    def cleaning_view(self) -> CleaningView | None:
        """What the log cleaner needs to pick and clean this log, read at one instant under the
        lock; None when the log is closed.  The segments listed are immutable (never the
        active one), so the cleaner reads them without the lock."""
        with self._lock:
            if self._closed:
                return None
            producers = self.producer_state.producers.values()
            last_data = {e.producer_id: e.last_offset for e in producers if e.batches}
            marker_epochs = {e.producer_id: e.epoch for e in producers if not e.batches}
            return CleaningView(self.config, tuple(self._segments[:-1]), self._segments[-1].base_offset,
                                self._log_start_offset, self.last_stable_offset, last_data, marker_epochs)

    def duplicate_descriptors(self, segments: list[LogSegment]) -> list[int] | None:
        """Duplicates of the ``.log`` descriptors of ``segments`` (the caller closes them), or None
        if the log is closed or one of them is no longer part of it: the cleaner reads through
        these, so a close or deletion meanwhile can't hand it another file under the same number."""
        with self._lock:
            if self._closed or not all(any(s is t for t in self._segments) for s in segments):
                return None
            return [os.dup(s.log_fd()) for s in segments]

    def replace_segments(self, old: list[LogSegment], new: LogSegment, *,
                         hook: Callable[[str], None] | None = None) -> bool:
        """Put the cleaned segment ``new`` (files ``*.cleaned``, fsynced, covering exactly the
        offsets of ``old``) in place of the consecutive segments ``old`` (Kafka's
        UnifiedLog.replaceSegments).  False when the log was closed or ``old`` is no longer what
        the log holds (retention, DeleteRecords or a truncation ran meanwhile); ``new``'s files
        are then the caller's to delete (they may have been renamed to ``.swap`` already).

        Crash safety, Kafka's order: the ``.cleaned`` files become ``.swap`` (indexes first, the
        ``.log`` last: that rename commits the clean), the old segments' files become
        ``.deleted``, the ``.swap`` files take the final names, and the ``.deleted`` files are
        unlinked last (Kafka's asyncDeleteSegment).  The loader completes a swap it finds half
        done and removes ``.deleted`` files.  ``hook(step)`` is called after each step (tests
        stop a process there).

        Only the renames that change what the log holds are made under the partition lock, which
        the event loop's appends wait for: the commit (the renames to ``.swap`` and a directory
        fsync that makes them durable before any old file is renamed) comes before it, and after
        it the directory fsync that makes the final names durable (Kafka's single flushDir) and
        the unlinking of the old files (slow for a large file), where Kafka waits
        file.delete.delay.ms for readers that hold a segment without the lock.  kwire's readers
        take the lock and keep the ``.log`` descriptor open, so the files go at once.

        Committing before the final check under the lock is safe: if retention or DeleteRecords
        removed some of ``old`` meanwhile, a crash before the caller deletes the ``.swap`` files
        makes the loader install the cleaned copy of offsets that are, at worst, below the log
        start offset (kept in the checkpoint, which those write first), so never read.  A
        truncation (the only change that removes offsets above the log start) waits for the
        swap (``_swap_lock``)."""
        with self._swap_lock:
            with self._lock:
                if self._closed or self._position_of(old) is None:
                    return False
            new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            fsync_dir(self.dir)
            if hook:
                hook("swap")
            if not self._swap_locked(old, new, hook):
                return False
        try:
            fsync_dir(self.dir)
        except FileNotFoundError:
            pass  # the partition was deleted meanwhile: nothing left to make durable
        if hook:
            hook("synced")
        for segment in old:
            segment.remove_deleted_files()
        return True

    def _position_of(self, old: list[LogSegment]) -> int | None:
        """Where the consecutive segments ``old`` start in the log, None if they are not all there."""
        try:
            i = next(n for n, s in enumerate(self._segments) if s is old[0])
        except StopIteration:
            return None
        if len(self._segments) - 1 < i + len(old) or \
                any(a is not b for a, b in zip(self._segments[i:i + len(old)], old, strict=True)):
            return None
        return i

    def _swap_locked(self, old: list[LogSegment], new: LogSegment, hook: Callable[[str], None] | None) -> bool:
        with self._lock:
            if self._closed:
                return False
            i = self._position_of(old)
            if i is None:
                return False
            for n, segment in enumerate(old):
                segment.mark_deleted()
                if hook and n == 0:
                    hook("delete-first")
            if hook:
                hook("deleted")
            new.change_file_suffixes(SWAP_SUFFIX, "")
            self._segments[i:i + len(old)] = [new]
            self._bases[i:i + len(old)] = [new.base_offset]
            if hook:
                hook("renamed")
            return True

    # -- durability -------------------------------------------------------------------------
    def flush(self) -> None:
        """fsync every segment that may hold data past the recovery point, then advance it.

        The fsyncs run without the partition lock, so appends carry on meanwhile (Kafka's
        UnifiedLog.flush does the same).  What to sync is taken under the lock: the log end
        offset and duplicated descriptors of the segments past the recovery point.  The point
        then moves to that end offset, never further: what was appended during the fsyncs may
        not be covered and waits for the next flush.
        """
        with self._lock:
            if self._closed:
                return  # close() flushed it, or it was deleted (a group commit may still hold it)
            end = self.log_end_offset
            if end <= self._recovery_point:
                return
            truncations = self._truncations
            fds: list[int] = []
            try:
                for segment in self._segments:
                    if segment.next_offset > self._recovery_point:
                        fds.extend(segment.sync_descriptors())
            except BaseException:
                _close_all(fds)
                raise
        try:
            for fd in fds:
                os.fsync(fd)
        finally:
            _close_all(fds)
        with self._lock:
            if self._closed or self._truncations != truncations or end <= self._recovery_point:
                return  # closed (close() flushed), cut back meanwhile, or a later flush got further
            self._recovery_point = end
        # Also outside the partition lock: writing the checkpoint is two more fsyncs.
        with self._checkpoint_lock:
            if self._closed:
                return
            # The newest values, read here: a change made meanwhile under the partition lock is
            # followed by its own checkpoint write, which waits for this one.
            try:
                write_checkpoint(self.dir, PartitionCheckpoint(self._log_start_offset, self._recovery_point))
            except OSError:
                if not self._closed:  # else deleted meanwhile (close_without_flush takes no lock of ours)
                    raise

    def _flush_locked(self) -> None:
        end = self.log_end_offset
        if end == self._recovery_point:
            return
        for segment in self._segments:
            if segment.next_offset > self._recovery_point:
                segment.flush()
        self._recovery_point = end
        self._checkpoint()

    def close(self) -> None:
        """Flush and close the files.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                self._flush_locked()
                # At the log end after a flush: the next open (clean or not) starts from it.
                self.producer_state.take_snapshot(self._bases)
            finally:
                for segment in self._segments:
                    segment.close()
                self._closed = True

    def close_without_flush(self) -> None:
        """Close the files only (before deleting the partition)."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = self._dropped = True

    def __repr__(self) -> str:
        return (f"PartitionLog({self.name!r}, start={self._log_start_offset}, end={self.log_end_offset}, "
                f"segments={len(self._segments)})")


def _remove_files(segments: list[LogSegment]) -> None:
    """Unlink the ``.deleted`` files of segments dropped under the partition lock, after it."""
    for segment in segments:
        segment.remove_deleted_files()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
