"""Durable group state in ``__consumer_offsets``, as Kafka's group coordinator writes it.

Each group lives in partition ``abs(javaStringHashCode(group_id)) % partitions`` of the internal
topic (see kwire.broker.internal_topics) as Kafka's own records (kwire.protocol.coordinator_records):

* ``OffsetCommitKey`` (v1) -> ``OffsetCommitValue`` per committed partition: v3, or v1 when the
  commit set an explicit expire timestamp (Kafka's GroupCoordinatorRecordHelpers);
* ``GroupMetadataKey`` (v2) -> ``GroupMetadataValue`` v3: protocol type, generation, protocol,
  leader, state timestamp, members with their subscription and assignment;
* a null value (tombstone) deletes a key: OffsetDelete, expired offsets, DeleteGroups (its group
  record and every offset).

One request's records go in one batch, so a crash never leaves half a commit.  TxnOffsetCommit
writes its OffsetCommit records in a transactional batch of the producer (id, epoch); the
transaction coordinator's COMMIT marker in that partition makes them the group's, an ABORT marker
drops them (Kafka's OffsetMetadataManager.replayEndTransactionMarker).  Loading replays every
partition that exists on disk in offset order: the newest record of a key wins, tombstones
delete, transactional offsets wait for their marker.  A record of a type this broker does not
use (KIP-848 or share groups, written by a Kafka) is skipped, and so is an unreadable one, each
with a warning: the log keeps them.

Durability follows the broker's ``fsync`` policy, as the journal it replaces: "always" flushes
the partition before a write returns (unless the caller defers it: ``fsync=False`` and a later
``flush()``), "interval" leaves it to ``flush()``, "never" to the OS and to the log's own flushes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from kwire.protocol import messages
from kwire.protocol.coordinator_records import (
    OFFSETS_TOPIC,
    CoordinatorRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from kwire.protocol.errors import DecodeError
from kwire.protocol.records import RecordBatchBuilder, iter_batches

from .offsets import CommittedOffset, newer_txn_offsets
from .store import GroupRecord, MemberRecord, StoredGroup

if TYPE_CHECKING:
    from ..internal_topics import InternalTopics
    from ..storage import PartitionLog

__all__ = ["OffsetsTopicStore", "OFFSET_COMMIT_VALUE_VERSION", "GROUP_METADATA_VALUE_VERSION"]

logger = logging.getLogger("kwire.broker.coordinator.offsets_topic")

# What Kafka 4.x writes (GroupCoordinatorRecordHelpers): OffsetCommitValue v3, v1 only to carry
# an expire timestamp; GroupMetadataValue v3.
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
_READ_CHUNK = 1 << 20
_SEQUENCE_WRAP = 1 << 31

OffsetKey = messages.OffsetCommitKey
GroupKey = messages.GroupMetadataKey


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def offset_record(group_id: str, topic: str, partition: int, c: CommittedOffset | None) -> tuple[bytes, bytes | None]:
    """(key, value) of a committed offset; a tombstone for None."""
    key = encode_key(OffsetKey(group=group_id, topic=topic, partition=partition))
    if c is None:
        return key, None
    version = OFFSET_COMMIT_VALUE_VERSION if c.expire_timestamp_ms is None else OFFSET_COMMIT_VALUE_WITH_EXPIRY
    value = messages.OffsetCommitValue(offset=c.offset, leader_epoch=c.leader_epoch, metadata=c.metadata,
                                       commit_timestamp=c.commit_timestamp_ms,
                                       expire_timestamp=-1 if c.expire_timestamp_ms is None else c.expire_timestamp_ms)
    return key, encode_value(value, version)


def group_record(record: GroupRecord | None, group_id: str) -> tuple[bytes, bytes | None]:
    """(key, value) of a group's metadata; a tombstone for None."""
    key = encode_key(GroupKey(group=group_id))
    if record is None:
        return key, None
    Member = messages.GroupMetadataValue.MemberMetadata
    value = messages.GroupMetadataValue(
        protocol_type=record.protocol_type or "", generation=record.generation_id, protocol=record.protocol_name,
        leader=record.leader_id, current_state_timestamp=record.state_timestamp_ms,
        members=[Member(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                        client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                        session_timeout=m.session_timeout_ms, subscription=m.metadata, assignment=m.assignment)
                 for m in record.members])
    return key, encode_value(value, GROUP_METADATA_VALUE_VERSION)


def _committed(value) -> CommittedOffset:
    expire = getattr(value, "expire_timestamp", -1)
    return CommittedOffset(value.offset, value.leader_epoch, value.metadata or "", value.commit_timestamp,
                           None if expire is None or expire < 0 else expire)


def _group(group_id: str, value) -> GroupRecord:
    # Kafka's loader: a group with members comes back Stable (its members must rejoin here), else Empty.
    members = tuple(MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                                 m.session_timeout, bytes(m.subscription), bytes(m.assignment))
                    for m in value.members)
    return GroupRecord(group_id, value.protocol_type or None, value.generation, value.protocol, value.leader,
                       "Stable" if members else "Empty", value.current_state_timestamp, members)


class OffsetsTopicStore:
    """The groups of one broker in ``__consumer_offsets``.  Opening it replays the topic into ``groups``."""

    def __init__(self, topics: InternalTopics, *, fsync: str = "never",
                 notify: Callable[[tuple[str, int]], None] | None = None):
        self._topics = topics
        self._fsync_always = fsync == "always"
        self._notify = notify
        self._lock = threading.Lock()  # the set of logs to flush; flush() runs in a worker thread
        self._unflushed: dict[int, PartitionLog] = {}
        self._closed = False
        self.fsyncs = 0  # partition flushes done for the store, for tests and stats
        self.groups: dict[str, StoredGroup] = {}
        # What the replay found wrong (unknown or unreadable records), for the log and for tests.
        self.findings: list[str] = []
        for partition, log in sorted(topics.existing_logs(OFFSETS_TOPIC), key=lambda x: x[0]):
            self._replay(partition, log)
        for finding in self.findings:
            logger.warning("%s: %s", OFFSETS_TOPIC, finding)

    # --- reading

    def _replay(self, partition: int, log: PartitionLog) -> None:
        # producer id -> group -> staged offsets, until the producer's marker in this partition.
        staged: dict[int, dict[str, dict[tuple[str, int], CommittedOffset]]] = {}
        offset, end = log.log_start_offset, log.log_end_offset
        while offset < end:
            slices = log.read(offset, _READ_CHUNK)
            if not slices:
                break
            data = b"".join(s.read() for s in slices)
            next_offset = offset
            for batch in iter_batches(data):
                next_offset = batch.next_offset
                if batch.is_control:
                    for record in batch.records():
                        if record.is_commit or record.is_abort:
                            self._end_staged(staged.pop(batch.producer_id, {}), commit=record.is_commit)
                    continue
                txn = staged.setdefault(batch.producer_id, {}) if batch.is_transactional else None
                try:
                    records = batch.records()
                except DecodeError as exc:
                    self.findings.append(f"partition {partition} offset {batch.base_offset}: unreadable batch ({exc})")
                    continue
                for record in records:
                    if record.offset >= offset:
                        self._apply(partition, record, txn)
            offset = next_offset if next_offset > offset else end  # (no progress: stop, never loop)
        for producer_id, groups in staged.items():
            for group_id, offsets in groups.items():
                self.groups.setdefault(group_id, StoredGroup()).pending.setdefault(producer_id, {}).update(offsets)

    def _apply(self, partition: int, record, txn: dict[str, dict] | None) -> None:
        try:
            key = decode_key(record.key, OFFSETS_TOPIC)
            value = decode_value(key, record.value)
        except CoordinatorRecordError as exc:
            self.findings.append(f"partition {partition} offset {record.offset}: {exc}; skipped")
            return
        if isinstance(key, OffsetKey):
            tp = (key.topic, key.partition)
            if txn is not None:
                if value is not None:
                    txn.setdefault(key.group, {})[tp] = _committed(value)
                return
            if value is None:
                stored = self.groups.get(key.group)
                if stored is not None:
                    stored.offsets.pop(tp, None)
                    self._drop_if_empty(key.group)
            else:
                self.groups.setdefault(key.group, StoredGroup()).offsets[tp] = _committed(value)
        elif isinstance(key, GroupKey):
            if value is None:
                self.groups.pop(key.group, None)  # DeleteGroups: its offsets were tombstoned with it
            else:
                self.groups.setdefault(key.group, StoredGroup()).record = _group(key.group, value)
        else:
            self.findings.append(f"partition {partition} offset {record.offset}: a {type(key).__name__} record "
                                 "(a group type kwire does not run); skipped")

    def _end_staged(self, groups: dict[str, dict[tuple[str, int], CommittedOffset]], *, commit: bool) -> None:
        if not commit:
            return
        for group_id, offsets in groups.items():
            stored = self.groups.setdefault(group_id, StoredGroup())
            stored.offsets.update(newer_txn_offsets(stored.offsets, offsets))

    def _drop_if_empty(self, group_id: str) -> None:
        stored = self.groups.get(group_id)
        if stored is not None and stored.record is None and not stored.offsets and not stored.pending:
            del self.groups[group_id]

    # --- writing

    def partition_of(self, group_id: str) -> int:
        return self._topics.partition_of(OFFSETS_TOPIC, group_id)

    def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]], *, fsync: bool = True,
                producer: tuple[int, int] | None = None) -> None:
        """One batch of ``records`` in the group's partition (transactional for ``producer``)."""
        if self._closed:
            raise RuntimeError(f"the group store of {OFFSETS_TOPIC} is closed")
        partition = self.partition_of(group_id)
        log = self._topics.partition_log(OFFSETS_TOPIC, partition)
        if producer is None:
            builder = RecordBatchBuilder()
        else:
            pid, epoch = producer
            builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, transactional=True,
                                         base_sequence=self._next_sequence(log, pid, epoch))
        now = _now_ms()
        for key, value in records:
            builder.append(key, value, now)
        try:
            log.append(builder.build(), now_ms=now)
        except Exception as exc:  # a refusal of the log is a failed write for the coordinator
            if isinstance(exc, OSError):
                raise
            raise OSError(f"{OFFSETS_TOPIC}-{partition}: {exc}") from exc
        if self._notify is not None:
            self._notify((OFFSETS_TOPIC, partition))
        if fsync and self._fsync_always:
            log.flush()
            self.fsyncs += 1
        else:
            with self._lock:
                self._unflushed[id(log)] = log

    @staticmethod
    def _next_sequence(log: PartitionLog, producer_id: int, epoch: int) -> int:
        """The broker writes a producer's transactional offsets with the sequence its state expects
        (Kafka's coordinator appends skip the check; kwire's log makes none)."""
        entry = log.producer_state.get(producer_id)
        if entry is None or entry.epoch != epoch or not entry.batches:
            return 0
        return (entry.last_seq + 1) % _SEQUENCE_WRAP

    def put_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], CommittedOffset], *,
                    fsync: bool = True) -> None:
        """Record committed offsets (durably, per the fsync policy) before the commit is answered.

        ``fsync=False``: not even with fsync "always"; the caller answers after a later ``flush()``.
        """
        if not offsets:
            return
        self._append(group_id, [offset_record(group_id, t, p, c) for (t, p), c in offsets.items()], fsync=fsync)
        self.groups.setdefault(group_id, StoredGroup()).offsets.update(offsets)

    def put_txn_offsets(self, group_id: str, producer_id: int, offsets: Mapping[tuple[str, int], CommittedOffset],
                        *, fsync: bool = True, producer_epoch: int = 0) -> None:
        """Record offsets a transaction staged: a transactional batch of the producer, which its
        transaction's marker in this partition commits or aborts."""
        if not offsets:
            return
        self._append(group_id, [offset_record(group_id, t, p, c) for (t, p), c in offsets.items()], fsync=fsync,
                     producer=(producer_id, producer_epoch))
        self.groups.setdefault(group_id, StoredGroup()).pending.setdefault(producer_id, {}).update(offsets)

    def end_txn(self, group_id: str, producer_id: int, committed: Mapping[tuple[str, int], CommittedOffset], *,
                commit: bool | None = None) -> None:
        """A transaction ended: drop what it staged, make ``committed`` the group's.  The
        transaction coordinator's marker in the group's partition says so in the log; if the
        partition still holds the producer's transaction open (its marker not written), it is
        written here (``commit``: default, whether anything is committed)."""
        stored = self.groups.get(group_id)
        if stored is None or producer_id not in stored.pending:
            return
        log = self._topics.partition_log(OFFSETS_TOPIC, self.partition_of(group_id))
        if producer_id in log.producer_state.ongoing:
            entry = log.producer_state.get(producer_id)
            log.append_marker(producer_id, entry.epoch if entry is not None else 0,
                              bool(committed) if commit is None else commit)
            if self._fsync_always:
                log.flush()
                self.fsyncs += 1
            else:
                with self._lock:
                    self._unflushed[id(log)] = log
        del stored.pending[producer_id]
        stored.offsets.update(committed)
        self._drop_if_empty(group_id)

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Tombstones for the group's offsets of these partitions (those it has)."""
        stored = self.groups.get(group_id)
        gone = [tp for tp in partitions if stored is not None and tp in stored.offsets]
        if not gone:
            return
        self._append(group_id, [offset_record(group_id, t, p, None) for t, p in gone])
        for tp in gone:
            del stored.offsets[tp]
        self._drop_if_empty(group_id)

    def put_group(self, record: GroupRecord) -> None:
        self._append(record.group_id, [group_record(record, record.group_id)])
        self.groups.setdefault(record.group_id, StoredGroup()).record = record

    def delete_group(self, group_id: str) -> None:
        """Tombstones for the group's metadata and every offset it has (Kafka's DeleteGroups)."""
        stored = self.groups.get(group_id)
        if stored is None:
            return
        records = [offset_record(group_id, t, p, None) for t, p in stored.offsets]
        records.append(group_record(None, group_id))
        self._append(group_id, records)
        del self.groups[group_id]

    # --- maintenance

    def compact(self) -> None:
        """Nothing to do: the log cleaner compacts the topic."""

    def flush(self) -> None:
        """Flush the partitions written since the last flush.  Safe to call from another thread."""
        with self._lock:
            logs = list(self._unflushed.values())
            self._unflushed.clear()
        done = 0
        try:
            for log in logs:
                log.flush()
                self.fsyncs += 1
                done += 1
        except OSError:
            with self._lock:
                for log in logs[done:]:
                    self._unflushed.setdefault(id(log), log)
            raise

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True

    @property
    def fsyncs_every_write(self) -> bool:
        """fsync "always": writes are durable before they are answered."""
        return self._fsync_always

    @property
    def dirty(self) -> bool:
        """Written but not flushed yet (fsync = "interval" or "never", or a deferred write)."""
        with self._lock:
            return bool(self._unflushed)

    @property
    def closed(self) -> bool:
        return self._closed
