"""Share-partition state in ``__share_group_state``, as Kafka's share coordinator keeps it.

Each share partition's state is keyed (group id, topic id, partition).  The key's partition of the
topic is Kafka's ``abs("groupId:topicId:partition".hashCode()) % partitions``
(SharePartitionKey.asCoordinatorKey with ShareCoordinatorService's partitionFor).  As Kafka's
ShareCoordinatorShard writes them:

* a ``ShareSnapshotKey`` -> ``ShareSnapshotValue`` holds the whole state: the start offset and the
  (first, last, delivery state, delivery count) runs of the in-flight records; the first write of
  a key is one, and so is every write once ``snapshot_every`` updates followed the last one
  (Kafka's ``share.coordinator.snapshot.update.records.per.snapshot``, 500);
* a ``ShareUpdateKey`` -> ``ShareUpdateValue`` in between holds a change: the new start offset and
  the runs that changed, with the snapshot epoch of the snapshot it follows.  kwire's updates hold
  every change since that snapshot (Kafka's, each change alone): kwire keeps the topic compacted,
  where only the last snapshot and the last update of a key survive, and they must say it all.

Replaying a key is its last snapshot, then each later update merged in (Kafka's
PersisterStateBatchCombiner): an update's runs replace what they overlap, and everything below its
start offset goes.  A null value (tombstone) deletes the key's state.

Durability follows the broker's ``fsync`` policy like the other internal-topic writers: the logs
written are kept (``written_logs``) so that with fsync "always" the request is answered once a
group commit (kwire.broker.durability) has them on disk; "interval" and "never" leave it to the
log manager's periodic flush and the OS.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kwire.protocol import messages
from kwire.protocol.coordinator_records import (
    SHARE_GROUP_STATE_TOPIC,
    CoordinatorRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from kwire.protocol.errors import DecodeError
from kwire.protocol.records import RecordBatchBuilder

from ..internal_topics import log_batches
from .partition import RecordState

__all__ = ["PersistedState", "SharePersister", "coordinator_key", "combine", "SNAPSHOT_EVERY"]

logger = logging.getLogger("kwire.broker.share")

# The record versions Kafka's ShareCoordinatorRecordHelpers writes (key versions name the type).
SNAPSHOT_KEY_VERSION, UPDATE_KEY_VERSION, VALUE_VERSION = 0, 1, 0
# Kafka's share.coordinator.snapshot.update.records.per.snapshot default.
SNAPSHOT_EVERY = 500
_SNAPSHOT_EPOCH_WRAP = 65536  # SnapshotEpoch is a uint16
_DELIVERY_STATES = frozenset(int(s) for s in RecordState)

Ident = tuple[str, uuid.UUID, int]
Batch = tuple[int, int, int, int]  # (first, last, delivery state, delivery count)


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: what places a share partition's state."""
    return f"{group_id}:{topic_id}:{partition}"


@dataclass(slots=True)
class PersistedState:
    state_epoch: int
    start_offset: int
    batches: list[Batch]


def combine(old: Iterable[Batch], new: Iterable[Batch], start_offset: int) -> list[Batch]:
    """``old`` runs with ``new`` ones laid over them (a new run replaces the offsets it covers,
    the old runs it cuts keep their other offsets), nothing below ``start_offset``; sorted."""
    new = sorted((max(f, start_offset), la, s, c) for f, la, s, c in new if la >= start_offset)
    out: list[Batch] = []
    for f, la, s, c in sorted(old):
        pieces = [(max(f, start_offset), la)]
        for nf, nl, _s, _c in new:
            if nf > la:
                break
            if nl < f:
                continue
            pieces = [p for a, b in pieces for p in ((a, min(b, nf - 1)), (max(a, nl + 1), b)) if p[0] <= p[1]]
        out.extend((a, b, s, c) for a, b in pieces if a <= b)
    return sorted(out + new)


class SharePersister:
    """Reads and writes share-partition state records; ``internal_topics`` is the broker's
    InternalTopics (the topic's partitions open on first use)."""

    def __init__(self, internal_topics, *, snapshot_every: int = SNAPSHOT_EVERY,
                 now_ms=lambda: time.time_ns() // 1_000_000) -> None:
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be >= 1, got {snapshot_every}")
        self._topics = internal_topics
        self._now_ms = now_ms
        self.snapshot_every = snapshot_every
        self._snapshot_epochs: dict[Ident, int] = {}
        self._updates: dict[Ident, int] = {}  # updates written since the key's last snapshot
        self._written: dict[int, object] = {}  # id(log) -> log, appended to since written_logs()
        self.snapshots = self.updates = 0  # records written, for tests and stats

    def _partition(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return self._topics.partition_of(SHARE_GROUP_STATE_TOPIC, coordinator_key(group_id, topic_id, partition))

    def wants_snapshot(self, group_id: str, topic_id: uuid.UUID, partition: int) -> bool:
        """Whether the key's next write must be a snapshot: none known yet, or enough updates."""
        ident = (group_id, topic_id, partition)
        return ident not in self._snapshot_epochs or self._updates.get(ident, 0) >= self.snapshot_every

    def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state: PersistedState | None, *,
              snapshot: bool = True) -> None:
        """A snapshot (``state`` is the whole state) or an update (``state`` holds the changed
        runs and the new start offset) of the share partition; None: a tombstone."""
        ident = (group_id, topic_id, partition)
        if state is None:
            # Both keys: on a compacted topic the last update would otherwise outlive the
            # snapshot's tombstone and bring the state back.
            self._snapshot_epochs.pop(ident, None)
            self._updates.pop(ident, None)
            self._append(group_id, topic_id, partition, [
                (encode_key(messages.ShareUpdateKey(group_id=group_id, topic_id=topic_id, partition=partition),
                            version=UPDATE_KEY_VERSION), None),
                (encode_key(messages.ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition),
                            version=SNAPSHOT_KEY_VERSION), None)])
            return
        if snapshot or ident not in self._snapshot_epochs:
            epoch = self._snapshot_epochs[ident] = (self._snapshot_epochs.get(ident, -1) + 1) % _SNAPSHOT_EPOCH_WRAP
            self._updates[ident] = 0
            K, V = messages.ShareSnapshotKey, messages.ShareSnapshotValue
            key = encode_key(K(group_id=group_id, topic_id=topic_id, partition=partition),
                             version=SNAPSHOT_KEY_VERSION)
            value = encode_value(V(snapshot_epoch=epoch, state_epoch=state.state_epoch, leader_epoch=0,
                                   start_offset=state.start_offset,
                                   state_batches=[V.StateBatch(first_offset=f, last_offset=la, delivery_state=s,
                                                               delivery_count=c) for f, la, s, c in state.batches]),
                                 version=VALUE_VERSION)
            self.snapshots += 1
        else:
            self._updates[ident] = self._updates.get(ident, 0) + 1
            K, V = messages.ShareUpdateKey, messages.ShareUpdateValue
            key = encode_key(K(group_id=group_id, topic_id=topic_id, partition=partition),
                             version=UPDATE_KEY_VERSION)
            value = encode_value(V(snapshot_epoch=self._snapshot_epochs[ident], leader_epoch=0,
                                   start_offset=state.start_offset,
                                   state_batches=[V.StateBatch(first_offset=f, last_offset=la, delivery_state=s,
                                                               delivery_count=c) for f, la, s, c in state.batches]),
                                 version=VALUE_VERSION)
            self.updates += 1
        self._append(group_id, topic_id, partition, [(key, value)])

    def _append(self, group_id: str, topic_id: uuid.UUID, partition: int,
                records: list[tuple[bytes, bytes | None]]) -> None:
        self._topics.ensure_share_state_topic()
        log = self._topics.partition_log(SHARE_GROUP_STATE_TOPIC, self._partition(group_id, topic_id, partition))
        now = self._now_ms()
        builder = RecordBatchBuilder()
        for key, value in records:
            builder.append(key, value, now)
        log.append(builder.build(), now_ms=now)
        self._written[id(log)] = log

    def written_logs(self) -> list:
        """The state topic's logs written since the last call (to fsync before answering)."""
        logs, self._written = list(self._written.values()), {}
        return logs

    def load_all(self) -> dict[Ident, PersistedState]:
        """Every share partition's state found in the topic's partitions on disk."""
        out: dict[Ident, PersistedState] = {}
        for p in self._topics.existing_partitions(SHARE_GROUP_STATE_TOPIC):
            log = self._topics.existing_log(SHARE_GROUP_STATE_TOPIC, p)
            if log is None:
                continue
            for batch in log_batches(log):
                if batch.is_control:
                    continue
                try:
                    records = batch.records()
                except DecodeError as exc:
                    logger.warning("%s-%d offset %d: unreadable batch (%s); skipped", SHARE_GROUP_STATE_TOPIC, p,
                                   batch.base_offset, exc)
                    continue
                for rec in records:
                    try:
                        self.apply(out, rec.key, rec.value)
                    except (CoordinatorRecordError, ValueError) as exc:
                        logger.warning("%s-%d offset %d: %s; skipped", SHARE_GROUP_STATE_TOPIC, p, rec.offset, exc)
        return out

    def apply(self, out: dict[Ident, PersistedState], key: bytes | None, value: bytes | None) -> None:
        """Replay one record into ``out`` (Kafka's ShareCoordinatorShard.replay)."""
        if key is None:
            raise ValueError("record without a key")
        k = decode_key(key, SHARE_GROUP_STATE_TOPIC)
        if not isinstance(k, (messages.ShareSnapshotKey, messages.ShareUpdateKey)):
            raise ValueError(f"a {type(k).__name__} record does not belong in {SHARE_GROUP_STATE_TOPIC}")
        ident = (k.group_id, k.topic_id, k.partition)
        v = decode_value(k, value)
        if v is None:
            out.pop(ident, None)
            self._snapshot_epochs.pop(ident, None)
            self._updates.pop(ident, None)
            return
        batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v.state_batches]
        for first, last, state, count in batches:
            if state not in _DELIVERY_STATES or last < first or first < 0 or count < 0:
                raise ValueError(f"state batch {first}-{last} (delivery state {state}, count {count}) of "
                                 f"{coordinator_key(*ident)} is not one Kafka writes")
        if isinstance(k, messages.ShareSnapshotKey):
            self._snapshot_epochs[ident] = v.snapshot_epoch
            self._updates[ident] = 0
            out[ident] = PersistedState(v.state_epoch, v.start_offset, combine((), batches, v.start_offset))
            return
        # ShareUpdate: a newer start offset (-1: unchanged) and runs laid over the ones they overlap.
        self._updates[ident] = self._updates.get(ident, 0) + 1
        old = out.get(ident)
        if old is None:  # an update without its snapshot (Kafka takes it as the state)
            out[ident] = PersistedState(0, v.start_offset, combine((), batches, max(v.start_offset, 0)))
            return
        start = v.start_offset if v.start_offset >= 0 else old.start_offset
        out[ident] = PersistedState(old.state_epoch, start, combine(old.batches, batches, start))
