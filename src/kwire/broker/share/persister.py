"""Share-partition state in ``__share_group_state``, as Kafka's share coordinator keeps it.

Each share partition's state is a ``ShareSnapshotKey`` (group id, topic id, partition) ->
``ShareSnapshotValue`` record: the start offset and the (first, last, delivery state, delivery
count) runs of the in-flight records.  The key's partition of the topic is Kafka's
``abs("groupId:topicId:partition".hashCode()) % partitions`` (SharePartitionKey.asCoordinatorKey
with ShareCoordinatorService's partitionFor).  Kafka also writes ShareUpdate records (deltas)
between snapshots; this broker writes a snapshot every time (one small record per changed share
partition), and on loading reads both kinds: the newest snapshot of a key, then the updates after
it applied in order.  A null value (tombstone) deletes the key's state.
"""

from __future__ import annotations

import logging
import time
import uuid
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
from kwire.protocol.records import RecordBatchBuilder

from ..internal_topics import log_batches

__all__ = ["PersistedState", "SharePersister", "coordinator_key"]

logger = logging.getLogger("kwire.broker.share")

# The record versions Kafka's ShareCoordinatorRecordHelpers writes (key versions name the type).
SNAPSHOT_KEY_VERSION, UPDATE_KEY_VERSION, VALUE_VERSION = 0, 1, 0


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: what places a share partition's state."""
    return f"{group_id}:{topic_id}:{partition}"


@dataclass(slots=True)
class PersistedState:
    state_epoch: int
    start_offset: int
    batches: list[tuple[int, int, int, int]]  # (first, last, delivery state, delivery count)


class SharePersister:
    """Reads and writes share-partition state records; ``internal_topics`` is the broker's
    InternalTopics (the topic's partitions open on first use)."""

    def __init__(self, internal_topics, *, now_ms=lambda: time.time_ns() // 1_000_000) -> None:
        self._topics = internal_topics
        self._now_ms = now_ms
        self._snapshot_epochs: dict[tuple[str, uuid.UUID, int], int] = {}

    def _partition(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return self._topics.partition_of(SHARE_GROUP_STATE_TOPIC, coordinator_key(group_id, topic_id, partition))

    def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state: PersistedState | None) -> None:
        """One snapshot of the share partition's state (None: a tombstone, the state is deleted)."""
        key = encode_key(messages.ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition),
                         version=SNAPSHOT_KEY_VERSION)
        value = None
        if state is not None:
            k = (group_id, topic_id, partition)
            epoch = self._snapshot_epochs[k] = (self._snapshot_epochs.get(k, -1) + 1) % 65536
            V = messages.ShareSnapshotValue
            value = encode_value(V(snapshot_epoch=epoch, state_epoch=state.state_epoch, leader_epoch=0,
                                   start_offset=state.start_offset,
                                   state_batches=[V.StateBatch(first_offset=f, last_offset=last, delivery_state=s,
                                                               delivery_count=c)
                                                  for f, last, s, c in state.batches]), version=VALUE_VERSION)
        self._topics.ensure_share_state_topic()
        log = self._topics.partition_log(SHARE_GROUP_STATE_TOPIC, self._partition(group_id, topic_id, partition))
        now = self._now_ms()
        builder = RecordBatchBuilder()
        builder.append(key, value, now)
        log.append(builder.build(), now_ms=now)

    def load_all(self) -> dict[tuple[str, uuid.UUID, int], PersistedState]:
        """Every share partition's state found in the topic's partitions on disk."""
        out: dict[tuple[str, uuid.UUID, int], PersistedState] = {}
        for p in self._topics.existing_partitions(SHARE_GROUP_STATE_TOPIC):
            log = self._topics.existing_log(SHARE_GROUP_STATE_TOPIC, p)
            if log is None:
                continue
            for batch in log_batches(log):
                if batch.is_control:
                    continue
                for rec in batch:
                    try:
                        self._apply(out, rec.key, rec.value)
                    except (CoordinatorRecordError, ValueError) as exc:
                        logger.warning("%s-%d offset %d: %s; skipped", SHARE_GROUP_STATE_TOPIC, p, rec.offset, exc)
        return out

    def _apply(self, out: dict, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            raise ValueError("record without a key")
        k = decode_key(key, SHARE_GROUP_STATE_TOPIC)
        ident = (k.group_id, k.topic_id, k.partition)
        v = decode_value(k, value)
        if v is None:
            out.pop(ident, None)
            return
        batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v.state_batches]
        if isinstance(k, messages.ShareSnapshotKey):
            self._snapshot_epochs[ident] = v.snapshot_epoch
            out[ident] = PersistedState(v.state_epoch, v.start_offset, batches)
            return
        # ShareUpdate: a newer start offset (-1: unchanged) and runs replacing those they overlap.
        old = out.get(ident)
        if old is None:
            return
        start = v.start_offset if v.start_offset >= 0 else old.start_offset
        merged = [b for b in old.batches if b[1] < start or not any(n[0] <= b[1] and b[0] <= n[1] for n in batches)]
        out[ident] = PersistedState(old.state_epoch, start, sorted(merged + batches))

