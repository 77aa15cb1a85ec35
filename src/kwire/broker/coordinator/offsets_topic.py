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
delete, transactional offsets wait for their marker.  KIP-848 consumer groups', KIP-1071 streams
groups' and KIP-932 share groups' records are kept per group for their coordinators
(``StoredGroup.consumer``, ``StoredGroup.streams``, ``share_groups``).  A record of a type this broker does not use is skipped, and so is an
unreadable one, each with a warning: the log keeps them.

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
from kwire.protocol.records import RecordBatchBuilder

from ..internal_topics import log_batches
from .offsets import CommittedOffset
from .store import GroupRecord, MemberRecord, StoredGroup

# KIP-848 consumer groups' record types (their values are read by coordinator.consumer.records).
CONSUMER_GROUP_KEYS = (messages.ConsumerGroupMetadataKey, messages.ConsumerGroupPartitionMetadataKey,
                       messages.ConsumerGroupMemberMetadataKey, messages.ConsumerGroupTargetAssignmentMetadataKey,
                       messages.ConsumerGroupTargetAssignmentMemberKey, messages.ConsumerGroupCurrentMemberAssignmentKey)
# KIP-932 share groups' record types (read by kwire.broker.share.records).
SHARE_GROUP_KEYS = (messages.ShareGroupMetadataKey, messages.ShareGroupPartitionMetadataKey,
                    messages.ShareGroupMemberMetadataKey, messages.ShareGroupTargetAssignmentMetadataKey,
                    messages.ShareGroupTargetAssignmentMemberKey, messages.ShareGroupCurrentMemberAssignmentKey,
                    messages.ShareGroupStatePartitionMetadataKey)
# KIP-1071 streams groups' record types (read by coordinator.streams.records).
STREAMS_GROUP_KEYS = (messages.StreamsGroupMetadataKey, messages.StreamsGroupTopologyKey,
                      messages.StreamsGroupMemberMetadataKey, messages.StreamsGroupTargetAssignmentMetadataKey,
                      messages.StreamsGroupTargetAssignmentMemberKey, messages.StreamsGroupCurrentMemberAssignmentKey)

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
    # Kafka's loader: a group with members comes back Stable with them (GroupCoordinator._restore), else Empty.
    members = tuple(MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                                 m.session_timeout, bytes(m.subscription), bytes(m.assignment))
                    for m in value.members)
    return GroupRecord(group_id, value.protocol_type or None, value.generation, value.protocol, value.leader,
                       "Stable" if members else "Empty", value.current_state_timestamp, members)


class OffsetsTopicStore:
    """The groups of one broker in ``__consumer_offsets``.  ``load_all()`` (or the loader, a
    partition at a time) replays the topic into ``groups``."""

    def __init__(self, topics: InternalTopics, *, fsync: str = "never",
                 notify: Callable[[tuple[str, int]], None] | None = None):
        self._topics = topics
        self._fsync_always = fsync == "always"
        self._notify = notify
        self._lock = threading.Lock()  # the set of logs to flush; flush() runs in a worker thread
        self._unflushed: dict[int, PartitionLog] = {}
        self._closed = False
        self.fsyncs = 0  # partition flushes done for the store, for tests and stats
        # The groups of the partitions loaded so far (``load_all``, or ``read_partition`` then
        # ``install`` per partition, as the coordinator's loader does after start).
        self.groups: dict[str, StoredGroup] = {}
        # The share groups' newest ShareGroup* records (key bytes -> decoded key, value) by group id.
        self.share_groups: dict[str, dict[bytes, tuple]] = {}
        # What the replay found wrong (unknown or unreadable records), for the log and for tests.
        self.findings: list[str] = []

    # --- reading

    def partitions_on_disk(self) -> list[int]:
        """The topic's partitions that have a log (the others hold no group)."""
        return self._topics.existing_partitions(OFFSETS_TOPIC)

    def load_all(self) -> None:
        """Replay every partition now (a broker that loads before it listens, tests)."""
        for partition in self.partitions_on_disk():
            self.install(*self.read_partition(partition))

    def read_partition(self, partition: int) -> tuple[int, dict[str, StoredGroup], list[str]]:
        """Replay one partition: (partition, its groups, what was found wrong).  Reads only the
        log, so the loader runs it off the event loop; ``install`` applies the result."""
        groups: dict[str, StoredGroup] = {}
        findings: list[str] = []
        log = self._topics.existing_log(OFFSETS_TOPIC, partition)
        if log is not None:
            self._replay(partition, log, groups, findings)
        return partition, groups, findings

    def install(self, partition: int, groups: dict[str, StoredGroup], findings: list[str]) -> None:
        """Make a replayed partition's groups the store's (on the event loop).  A share group's
        records go to ``share_groups`` (the share groups take them), and a group id holding only
        those leaves ``groups``: the classic coordinator does not restore it as one of its own."""
        for group_id, stored in list(groups.items()):
            if stored.share:
                self.share_groups[group_id] = stored.share
                stored.share = {}
                if stored.record is None and not stored.offsets and not stored.pending and not stored.consumer:
                    del groups[group_id]
        self.groups.update(groups)
        self.findings.extend(findings)
        for finding in findings:
            logger.warning("%s: %s", OFFSETS_TOPIC, finding)

    def _replay(self, partition: int, log: PartitionLog, groups: dict[str, StoredGroup], findings: list[str]) -> None:
        # The newest value of each key, as stored (decoded once at the end: a key is usually
        # written many times), and per producer the records of its open transaction.
        latest: dict[bytes, tuple[int, bytes | None]] = {}  # key -> (offset, value)
        staged: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        for batch in log_batches(log):
            if batch.is_control:
                for record in batch.records():
                    if record.is_commit or record.is_abort:
                        self._end_staged(partition, latest, staged.pop(batch.producer_id, []), record.is_commit,
                                         findings)
                continue
            try:
                records = batch.records()
            except DecodeError as exc:
                findings.append(f"partition {partition} offset {batch.base_offset}: unreadable batch ({exc})")
                continue
            if batch.is_transactional:
                staged.setdefault(batch.producer_id, []).extend((r.offset, r.key, r.value) for r in records)
            else:
                for r in records:
                    latest[r.key] = (r.offset, r.value)
        for key, (offset, value) in latest.items():
            self._apply(partition, offset, key, value, groups, findings)
        for producer_id, records in staged.items():
            for offset, key, value in records:
                decoded = self._decode(partition, offset, key, value, findings)
                if decoded is not None and isinstance(decoded[0], OffsetKey) and decoded[1] is not None:
                    k = decoded[0]
                    groups.setdefault(k.group, StoredGroup()).pending.setdefault(producer_id, {})[
                        (k.topic, k.partition)] = _committed(decoded[1])

    @staticmethod
    def _decode(partition: int, offset: int, key: bytes | None, value: bytes | None, findings: list[str]):
        """(key, value) decoded, or None (noted in ``findings``) for a record kwire can't use."""
        try:
            k = decode_key(key, OFFSETS_TOPIC)
            v = decode_value(k, value)
        except CoordinatorRecordError as exc:
            findings.append(f"partition {partition} offset {offset}: {exc}; skipped")
            return None
        if not isinstance(k, (OffsetKey, GroupKey, *CONSUMER_GROUP_KEYS, *SHARE_GROUP_KEYS, *STREAMS_GROUP_KEYS)):
            findings.append(f"partition {partition} offset {offset}: a {type(k).__name__} record "
                            "(a group type kwire does not run); skipped")
            return None
        return k, v

    def _apply(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
               groups: dict[str, StoredGroup], findings: list[str]) -> None:
        """A key's newest plain record into ``groups``."""
        decoded = self._decode(partition, offset, key, value, findings)
        if decoded is None:
            return
        k, v = decoded
        if isinstance(k, CONSUMER_GROUP_KEYS):
            # A KIP-848 group's records, rebuilt by its coordinator (coordinator.consumer.records).
            if v is not None:
                groups.setdefault(k.group_id, StoredGroup()).consumer[key] = (k, v)
            return
        if isinstance(k, STREAMS_GROUP_KEYS):
            # A streams group's records, rebuilt by its coordinator (coordinator.streams.records).
            if v is not None:
                groups.setdefault(k.group_id, StoredGroup()).streams[key] = (k, v)
            return
        if isinstance(k, SHARE_GROUP_KEYS):
            # A share group's records, rebuilt by the share groups (kwire.broker.share.records).
            if v is not None:
                groups.setdefault(k.group_id, StoredGroup()).share[key] = (k, v)
            return
        if v is None:
            return  # deleted (DeleteGroups tombstones the group's offsets with its metadata)
        if isinstance(k, OffsetKey):
            groups.setdefault(k.group, StoredGroup()).offsets[(k.topic, k.partition)] = _committed(v)
        else:
            groups.setdefault(k.group, StoredGroup()).record = _group(k.group, v)

    def _end_staged(self, partition: int, latest: dict[bytes, tuple[int, bytes | None]],
                    records: list[tuple[int, bytes, bytes | None]], commit: bool, findings: list[str]) -> None:
        """A marker: a commit makes the transaction's offsets the newest of their keys, except
        where a plain commit is newer (commit times stand in for log order, as the live
        coordinator decides: see ``newer_txn_offsets``); an abort drops them."""
        if not commit:
            return
        for offset, key, value in records:
            current = latest.get(key)
            if current is not None and current[1] is not None:
                staged = self._decode(partition, offset, key, value, findings)
                committed = self._decode(partition, current[0], key, current[1], findings)
                if (staged is not None and committed is not None and staged[1] is not None
                        and committed[1].commit_timestamp > staged[1].commit_timestamp):
                    continue
            latest[key] = (offset, value)

    def _drop_if_empty(self, group_id: str) -> None:
        stored = self.groups.get(group_id)
        if stored is not None and stored.record is None and not stored.offsets and not stored.pending \
                and not stored.consumer and not stored.streams:
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
                commit: bool | None = None, deleted: Iterable[tuple[str, int]] = ()) -> None:
        """A transaction ended: drop what it staged, make ``committed`` the group's.  The
        transaction coordinator's marker in the group's partition says so in the log; if the
        partition still holds the producer's transaction open (its marker not written), it is
        written here (``commit``: default, whether anything is committed).  ``deleted``: staged
        partitions whose topic is gone; tombstones after the marker keep a replay from
        committing them."""
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
        gone = [tp for tp in deleted if tp not in committed]
        if gone:
            self._append(group_id, [offset_record(group_id, t, p, None) for t, p in gone])
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

    def append_records(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """Write a KIP-848 group's (key, value) records in one batch of its partition."""
        self._append(group_id, records)

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
