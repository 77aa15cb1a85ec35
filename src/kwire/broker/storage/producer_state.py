"""Producers' state in one partition (Kafka's ProducerStateManager): sequences and transactions.

For every producer id that wrote to the partition the broker keeps its epoch and the sequence
ranges and offsets of its last 5 batches (a producer has at most 5 requests in flight, so a
retry can only repeat one of those).  A batch is accepted when it continues the producer's
sequence; a retry of one of the last 5 is answered with the offsets it got the first time.

Transactions: a producer's first transactional batch opens its transaction in this partition
at that batch's offset; the transaction coordinator's marker (a control batch, commit or abort)
closes it.  The first offsets of the open transactions give the last stable offset (LSO) that
read_committed consumers read up to; an abort of a transaction that wrote here is returned as an
``AbortedTxn`` for the segment's ``.txnindex``.  A producer with an open transaction may not write
non-transactional batches (Kafka's rule), and a marker older than the producer's epoch is refused.

Only the 61-byte batch headers are read, never the data records; a marker's one small record is
read to tell commit from abort.

Durability, as Kafka: ``<offset:020d>.snapshot`` files in the partition directory hold the
state of every batch below ``offset``; they are written when a segment rolls, on close and
before segments are deleted.  Loading takes the newest usable snapshot and replays the batch
headers after it, re-making the ``.txnindex`` entries of the aborts it replays.

Snapshot format (big-endian)::

    magic b"KWPS" | version int8 (2) | crc32c uint32 of everything after it |
    offset int64 | producer count int32 |
    per producer: producer id int64 | epoch int16 | last update ms int64 |
                  first offset of its open transaction int64 (-1: none) | batch count int8 |
        per batch (oldest first): first sequence int32 | last sequence int32 |
                                  first offset int64 | last offset int64

Version 1 (written before transactions) lacks the transaction's offset and is still read.
Files are replaced atomically (``atomic_write``); the CRC catches anything else.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from crc32c import crc32c

from kwire.protocol.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceNumberError,
)
from kwire.protocol.records import ControlRecordType, RecordBatch

from ._files import atomic_write, fsync_dir
from .batch_header import BatchHeader, iter_headers, read_header
from .index import INT32_MAX
from .txn_index import AbortedTxn

if TYPE_CHECKING:
    from .segment import LogSegment

__all__ = [
    "BatchHeader", "BatchMetadata", "CompletedTxn", "ProducerEntry", "ProducerStateManager", "AppendCheck",
    "CorruptSnapshotError", "NUM_BATCHES_TO_RETAIN", "PRODUCER_ID_EXPIRATION_MS", "SNAPSHOT_SUFFIX",
    "read_header", "iter_headers",
]

logger = logging.getLogger("kwire.broker.storage")

NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (max.in.flight <= 5)
PRODUCER_ID_EXPIRATION_MS = 24 * 60 * 60 * 1000  # Kafka's producer.id.expiration.ms default
SNAPSHOT_SUFFIX = ".snapshot"

_MAGIC = b"KWPS"
_VERSION = 2
_FILE_HEAD = struct.Struct(">4sBI")
_STATE_HEAD = struct.Struct(">qi")
_PRODUCER = struct.Struct(">qhqqB")
_PRODUCER_V1 = struct.Struct(">qhqB")
_BATCH = struct.Struct(">iiqq")


def marker_type(data: bytes | bytearray | memoryview, pos: int = 0) -> ControlRecordType | None:
    """COMMIT or ABORT for the transaction marker batch at ``pos``; None for other control
    records (KRaft's, or one we can't read: they don't end transactions)."""
    try:
        records = RecordBatch(data, pos).records()
        kind = records[0].type if records else None
    except (CorruptRecordError, IndexError, struct.error):
        return None
    return ControlRecordType(kind) if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT) else None


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended in this partition (only those that wrote data here)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer's state.  Immutable: an append builds new entries and swaps them in only
    once the batches are stored, so a refused or failed append leaves nothing behind."""

    producer_id: int
    epoch: int
    # The last <= 5 batches of ``epoch``, oldest first; empty after a marker of a newer epoch
    # (the coordinator fenced the old one: the next batch must start the new epoch at sequence 0).
    batches: tuple[BatchMetadata, ...]
    # The broker's clock at the last append (or at the load that replayed it), for expiration.
    # Kafka uses the batch's max timestamp; the broker's clock can't be skewed by producers.
    last_update_ms: int
    # First offset of the producer's open transaction in this partition; -1 when none is open.
    txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def in_transaction(self) -> bool:
        return self.txn_first_offset >= 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def with_batch(self, epoch: int, batch: BatchMetadata, now_ms: int, txn_first_offset: int) -> ProducerEntry:
        # A new epoch starts a new sequence: the old epoch's batches can't be duplicates any more.
        kept = self.batches[-(NUM_BATCHES_TO_RETAIN - 1):] if epoch == self.epoch else ()
        return ProducerEntry(self.producer_id, epoch, (*kept, batch), now_ms, txn_first_offset)

    def with_marker(self, epoch: int, now_ms: int) -> ProducerEntry:
        """The transaction ended (by a marker of ``epoch``): none is open any more."""
        kept = self.batches if epoch == self.epoch else ()
        return ProducerEntry(self.producer_id, epoch, kept, now_ms, -1)

    def txn_offset_after(self, header: BatchHeader) -> int:
        """The open transaction's first offset once the data batch ``header`` is appended."""
        if self.in_transaction:
            if not header.is_transactional:
                raise InvalidTxnStateError(f"producer {self.producer_id} has a transaction open since offset "
                                           f"{self.txn_first_offset}: its batch at {header.base_offset} must be "
                                           "transactional")
            return self.txn_first_offset
        return header.base_offset if header.is_transactional else -1


def _new_entry(header: BatchHeader, now_ms: int) -> ProducerEntry:
    return ProducerEntry(header.producer_id, header.producer_epoch, (), now_ms)


def _metadata(header: BatchHeader) -> BatchMetadata:
    return BatchMetadata(header.base_sequence, header.last_sequence, header.base_offset, header.last_offset)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True)
class AppendCheck:
    """The outcome of ``ProducerStateManager.check_append``: either the offsets of the original
    batches (a retry: append nothing) or the entries to store once the batches are written,
    with the transactions the append's markers end."""

    duplicate: tuple[int, int] | None
    updates: Mapping[int, ProducerEntry]
    completed: tuple[CompletedTxn, ...] = ()


class CorruptSnapshotError(ValueError):
    """A snapshot file that can't be used."""


class ProducerStateManager:
    """Producer state of the partition in ``directory``, up to ``map_end_offset``.

    Not thread-safe on its own: the owning ``PartitionLog`` calls it under its lock.
    """

    def __init__(self, directory: Path, *, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS):
        self.dir = Path(directory)
        self.expiration_ms = expiration_ms
        self._producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its open transaction (the entries say it too; this is
        # the index the LSO is computed from).
        self._ongoing: dict[int, int] = {}
        self.map_end_offset = 0  # the state reflects every batch below this offset

    @property
    def producers(self) -> Mapping[int, ProducerEntry]:
        return MappingProxyType(self._producers)

    @property
    def ongoing(self) -> Mapping[int, int]:
        """Producer id -> first offset of each open transaction."""
        return MappingProxyType(self._ongoing)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        return min(self._ongoing.values(), default=None)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def _put(self, entry: ProducerEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.in_transaction:
            self._ongoing[entry.producer_id] = entry.txn_first_offset
        else:
            self._ongoing.pop(entry.producer_id, None)

    def _stable_offset_after(self, txn: CompletedTxn) -> int:
        """The LSO right after ``txn`` ended (Kafka's AbortedTxn.lastStableOffset)."""
        return min((first for pid, first in self._ongoing.items() if pid != txn.producer_id),
                   default=txn.last_offset + 1)

    def _aborted(self, txn: CompletedTxn) -> AbortedTxn:
        return AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, self._stable_offset_after(txn))

    # -- appends ----------------------------------------------------------------------------
    def check_append(self, data: bytes | bytearray | memoryview, now_ms: int, *,
                     first_offset: int | None = None, headers: Sequence[BatchHeader] | None = None) -> AppendCheck:
        """Check the batches of one append against the state: their offsets are those in
        ``data``, or, with ``first_offset``, consecutive from it (offsets decided, not yet written).
        ``headers``: the batches' headers as the caller already read them (with the decided
        offsets), instead of reading them again from ``data``.

        Batch by batch, each seeing the ones before it, so several batches of one producer in a
        request must follow each other.  Raises (nothing changed):
        ``InvalidTxnStateError``: a non-transactional batch of a producer whose transaction is open;
        ``InvalidRecordError``: a producer id without a sequence or epoch, a transactional batch
        without a producer id;
        ``InvalidProducerEpochError``: an epoch older than the producer's (markers included);
        ``OutOfOrderSequenceNumberError``: a gap, a reorder, a new epoch not starting at 0, or
        a request mixing retried batches with new ones.
        Control batches (the coordinator's markers) end the producer's open transaction.
        """
        updates: dict[int, ProducerEntry] = {}
        completed: list[CompletedTxn] = []
        duplicates: list[BatchMetadata] = []
        new_batches = 0
        if headers is None:
            headers = iter_headers(data, first_offset=first_offset)
        for header in headers:
            pid = header.producer_id
            if header.is_control:
                new_batches += 1
                marker = marker_type(data, header.position) if pid >= 0 else None
                if marker is not None:
                    entry = updates.get(pid) or self._producers.get(pid)
                    txn, updates[pid] = self._end_txn(entry, header, marker, now_ms)
                    if txn is not None:
                        completed.append(txn)
                continue
            if pid < 0:
                if header.is_transactional:
                    raise InvalidRecordError(f"{self.dir.name}: transactional batch at offset {header.base_offset} "
                                             "has no producer id")
                new_batches += 1
                continue
            if header.base_sequence < 0 or header.producer_epoch < 0:
                # Kafka's LogValidator refuses the missing sequence; a missing epoch would turn
                # off the sequence checks of this producer for good, so it is refused too.
                raise InvalidRecordError(f"{self.dir.name}: batch of producer {pid} has epoch "
                                         f"{header.producer_epoch}, sequence {header.base_sequence}")
            entry = updates.get(pid) or self._producers.get(pid)
            if entry is not None:
                original = entry.find_duplicate(header.producer_epoch, header.base_sequence, header.last_sequence)
                if original is not None:
                    duplicates.append(original)
                    continue
                self._check_sequence(entry, header)
            # else: a producer without state (new, expired, or all its batches deleted) may start
            # at any sequence: Kafka 2.5+ (KIP-360) no longer answers UNKNOWN_PRODUCER_ID here.
            new_batches += 1
            base = entry or _new_entry(header, now_ms)
            updates[pid] = base.with_batch(header.producer_epoch, _metadata(header), now_ms,
                                           base.txn_offset_after(header))
        if duplicates:
            if new_batches:
                # Kafka answers a request holding a duplicate with the duplicate's offsets and
                # drops the rest (its clients send one batch per partition).  Dropping new
                # batches while reporting success would lose them, so refuse instead.
                raise OutOfOrderSequenceNumberError(
                    f"{self.dir.name}: the request mixes {len(duplicates)} retried batch(es) with {new_batches} new")
            return AppendCheck((duplicates[0].first_offset, duplicates[-1].last_offset), {})
        return AppendCheck(None, updates, tuple(completed))

    def _end_txn(self, entry: ProducerEntry | None, header: BatchHeader, marker: ControlRecordType,
                 now_ms: int) -> tuple[CompletedTxn | None, ProducerEntry]:
        if entry is not None and header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(f"{self.dir.name}: marker of producer {header.producer_id} has epoch "
                                            f"{header.producer_epoch}, older than its epoch {entry.epoch}")
        # As Kafka: a marker of a transaction that wrote nothing here completes nothing (no LSO
        # to move, nothing to index), but still moves the producer to the marker's epoch.
        txn = None
        if entry is not None and entry.in_transaction:
            txn = CompletedTxn(header.producer_id, entry.txn_first_offset, header.base_offset,
                               marker == ControlRecordType.ABORT)
        return txn, (entry or _new_entry(header, now_ms)).with_marker(header.producer_epoch, now_ms)

    def _check_sequence(self, entry: ProducerEntry, header: BatchHeader) -> None:
        pid, epoch, seq = header.producer_id, header.producer_epoch, header.base_sequence
        where = f"{self.dir.name}: producer {pid}"
        if epoch < entry.epoch:
            # Kafka 2.7+ answers INVALID_PRODUCER_EPOCH (not PRODUCER_FENCED) to a produce.
            raise InvalidProducerEpochError(f"{where}: epoch {epoch} is older than the current epoch {entry.epoch}")
        if epoch > entry.epoch:
            if seq != 0:
                raise OutOfOrderSequenceNumberError(f"{where}: new epoch {epoch} must start at sequence 0, not {seq}")
        elif not _in_sequence(entry.last_seq, seq):
            raise OutOfOrderSequenceNumberError(f"{where} epoch {epoch}: sequence {seq} does not follow {entry.last_seq}")

    def apply(self, check: AppendCheck, end_offset: int) -> list[AbortedTxn]:
        """Store a checked append's entries once its batches are in the log (ending before
        ``end_offset``).  Returns the aborted transactions to add to the active segment's index."""
        for entry in check.updates.values():
            self._put(entry)
        self.map_end_offset = end_offset
        return [self._aborted(txn) for txn in check.completed if txn.aborted]

    def replay(self, header: BatchHeader, now_ms: int, batch: bytes | None = None) -> AbortedTxn | None:
        """Take a stored batch into the state without checks (loading: the log is the truth).
        ``batch``: the whole batch, needed for a control batch (its record says commit or abort).
        Returns the aborted transaction a marker ended, for the ``.txnindex``."""
        aborted = None
        pid = header.producer_id
        if pid >= 0:
            entry = self._producers.get(pid)
            if header.is_control:
                marker = marker_type(batch) if batch is not None else None
                if marker is not None:
                    if entry is not None and entry.in_transaction and marker == ControlRecordType.ABORT:
                        txn = CompletedTxn(pid, entry.txn_first_offset, header.base_offset, True)
                        self._ongoing.pop(pid, None)
                        aborted = self._aborted(txn)
                    self._put((entry or _new_entry(header, now_ms)).with_marker(header.producer_epoch, now_ms))
            else:
                base = entry or _new_entry(header, now_ms)
                first = base.txn_first_offset if base.in_transaction else \
                    (header.base_offset if header.is_transactional else -1)
                self._put(base.with_batch(header.producer_epoch, _metadata(header), now_ms, first))
        self.map_end_offset = header.last_offset + 1
        return aborted

    def remove_expired(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``expiration_ms`` (Kafka's producer.id.expiration.ms); a
        forgotten producer's next batch is accepted at any sequence.  A producer with an open
        transaction is kept (it holds the LSO until the coordinator ends it)."""
        expired = [pid for pid, e in self._producers.items()
                   if not e.in_transaction and now_ms - e.last_update_ms >= self.expiration_ms]
        for pid in expired:
            del self._producers[pid]
        return expired

    # -- loading ----------------------------------------------------------------------------
    def load(self, segments: Sequence[LogSegment], *, snapshot_limit: int, now_ms: int,
             txn_rebuild_from: int | None = None, file_names: Iterable[str] | None = None) -> list[str]:
        """Rebuild the state of ``segments`` (the whole log): the newest readable snapshot at or
        below ``snapshot_limit`` (the recovery point: every batch below it was fsynced and then
        checked by the loader) and above the first segment's base, then the headers after it.

        The segments' ``.txnindex`` entries of markers at or after the replay's start are
        dropped and made again by the replay, so an index never holds an abort the log lost
        or misses one it has.  ``txn_rebuild_from``: the base of the first segment whose index
        must be made whole again (missing, unreadable): the replay starts at or before it.
        ``file_names``: the directory's listing if the caller has it (see ``snapshot_files``).

        Removes snapshots above the log end (they describe batches that are gone) and below the
        first segment (batches deleted since then could be missing from them).  Returns findings.
        """
        findings: list[str] = []
        first_base, log_end = segments[0].base_offset, segments[-1].next_offset
        limit = snapshot_limit if txn_rebuild_from is None else min(snapshot_limit, txn_rebuild_from)
        self._producers = {}
        self._ongoing = {}
        start = first_base
        usable = []
        for offset, path in self.snapshot_files(file_names):
            if offset > log_end:
                # Follows from a cut the loader already reported: a log message is enough.
                logger.info("%s: deleted producer snapshot %s above the log end offset %d",
                            self.dir.name, path.name, log_end)
                _unlink(path)
            elif offset < first_base:
                _unlink(path)
            elif offset <= limit:
                usable.append((offset, path))
        for offset, path in reversed(usable):
            try:
                self._producers = read_snapshot(path, offset)
            except CorruptSnapshotError as exc:
                findings.append(f"deleted unreadable producer snapshot {path.name}: {exc}")
                _unlink(path)
                continue
            start = offset
            break
        self._ongoing = {pid: e.txn_first_offset for pid, e in self._producers.items() if e.in_transaction}
        self.map_end_offset = start
        rebuilt = []
        for segment in segments:
            index = segment.txn_index
            before = len(index)
            index.truncate_to(start)
            kept = len(index)
            if segment.next_offset > start:
                for raw in segment.batch_headers(start):
                    aborted = self.replay(read_header(raw), now_ms, raw)
                    if aborted is not None:
                        index.append(aborted)
            if kept != before or len(index) != kept:  # changed (an untouched index needs no fsync)
                rebuilt.append(index)
        for index in rebuilt:
            # Entries below the recovery point must be as durable as the log they describe.
            index.flush()
        self.map_end_offset = log_end
        for message in findings:
            logger.warning("%s: %s", self.dir.name, message)
        return findings

    # -- snapshots --------------------------------------------------------------------------
    def predates_transactions(self, segments: Sequence[LogSegment], file_names: Iterable[str] | None = None) -> bool:
        """Whether the partition was last written by a kwire without transactions: data but no
        ``.txnindex`` file at all, and no snapshot of version 2 or later (a kwire with
        transactions writes one on every roll and close)."""
        if not any(s.size for s in segments) or any(s.txn_index.existed for s in segments):
            return False
        for _, path in self.snapshot_files(file_names):
            try:
                with open(path, "rb") as f:
                    head = f.read(_FILE_HEAD.size)
            except OSError:
                continue
            if len(head) == _FILE_HEAD.size and _FILE_HEAD.unpack(head)[1] >= 2:
                return False
        return True

    def snapshot_files(self, file_names: Iterable[str] | None = None) -> list[tuple[int, Path]]:
        """(offset, path) of every snapshot file, oldest first; from ``file_names`` (the
        directory's listing, when the caller has just made one) or else a listing made here."""
        found = []
        for name in os.listdir(self.dir) if file_names is None else file_names:
            stem = name[:-len(SNAPSHOT_SUFFIX)]
            if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
                found.append((int(stem), self.dir / name))
        return sorted(found)

    def snapshot_path(self, offset: int) -> Path:
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def take_snapshot(self, segment_bases: Collection[int]) -> Path:
        """Write the state at ``map_end_offset``; then drop snapshots it makes redundant: older
        ones except those at segment bases (kept as Kafka does, for truncation), and any below
        the first segment."""
        offset = self.map_end_offset
        path = self.snapshot_path(offset)
        try:
            atomic_write(path, encode_snapshot(offset, self._producers))
        except OSError as exc:
            raise KafkaStorageError(f"{path}: cannot write producer snapshot: {exc}") from exc
        first = min(segment_bases)
        self._delete_snapshots(lambda o: o < first or (o < offset and o not in segment_bases))
        return path

    def delete_snapshots_above(self, offset: int) -> None:
        self._delete_snapshots(lambda o: o > offset)

    def delete_snapshots_below(self, offset: int) -> None:
        self._delete_snapshots(lambda o: o < offset)

    def _delete_snapshots(self, doomed) -> None:
        removed = False
        for offset, path in self.snapshot_files():
            if doomed(offset):
                _unlink(path)
                removed = True
        if removed:
            fsync_dir(self.dir)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def encode_snapshot(offset: int, producers: Mapping[int, ProducerEntry]) -> bytes:
    body = bytearray(_STATE_HEAD.pack(offset, len(producers)))
    for pid in sorted(producers):
        entry = producers[pid]
        body += _PRODUCER.pack(pid, entry.epoch, entry.last_update_ms, entry.txn_first_offset, len(entry.batches))
        for batch in entry.batches:
            body += _BATCH.pack(*batch)
    return _FILE_HEAD.pack(_MAGIC, _VERSION, crc32c(body)) + bytes(body)


def read_snapshot(path: Path, offset: int) -> dict[int, ProducerEntry]:
    """The producers stored in ``path``; ``CorruptSnapshotError`` unless it is whole and for ``offset``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorruptSnapshotError(str(exc)) from None
    if len(data) < _FILE_HEAD.size + _STATE_HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes are too short")
    magic, version, crc = _FILE_HEAD.unpack_from(data)
    if magic != _MAGIC or version not in (1, _VERSION):
        raise CorruptSnapshotError(f"not a kwire producer snapshot (magic {magic!r}, version {version})")
    body = memoryview(data)[_FILE_HEAD.size:]
    if crc32c(body) != crc:
        raise CorruptSnapshotError("CRC mismatch")
    stored_offset, count = _STATE_HEAD.unpack_from(body)
    if stored_offset != offset:
        raise CorruptSnapshotError(f"holds offset {stored_offset}")
    producers: dict[int, ProducerEntry] = {}
    pos = _STATE_HEAD.size
    try:
        for _ in range(count):
            if version == 1:
                pid, epoch, last_update, n = _PRODUCER_V1.unpack_from(body, pos)
                txn_first = -1
                pos += _PRODUCER_V1.size
            else:
                pid, epoch, last_update, txn_first, n = _PRODUCER.unpack_from(body, pos)
                pos += _PRODUCER.size
            batches = tuple(BatchMetadata(*_BATCH.unpack_from(body, pos + i * _BATCH.size)) for i in range(n))
            pos += n * _BATCH.size
            # Only a marker of a newer epoch leaves a producer without batches (v2), and then no
            # transaction is open.
            if not batches and (version == 1 or txn_first >= 0):
                raise CorruptSnapshotError(f"producer {pid} has no batches")
            if txn_first < -1 or n > NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshotError(f"producer {pid}: impossible transaction offset or batch count")
            producers[pid] = ProducerEntry(pid, epoch, batches, last_update, txn_first)
    except struct.error:
        raise CorruptSnapshotError("truncated") from None
    if pos != len(body):
        raise CorruptSnapshotError(f"{len(body) - pos} trailing bytes")
    return producers
