"""Share groups in ``__consumer_offsets`` as Kafka's ShareGroup* records, and back.

What Kafka's GroupCoordinatorRecordHelpers write for a share group (in the group's partition):

* ``ShareGroupMetadata`` -> the group epoch;
* ``ShareGroupMemberMetadata`` (per member) -> its rack, client id, client host, subscription;
* ``ShareGroupTargetAssignmentMember`` (per member) and ``ShareGroupTargetAssignmentMetadata``
  -> the target assignment (topic ids) and its epoch;
* ``ShareGroupCurrentMemberAssignment`` (per member) -> its epoch, previous epoch, state and
  partitions (a share member has no revocation step: its target is its assignment);
* ``ShareGroupStatePartitionMetadata`` -> the topic partitions whose share state was initialized.

Each change goes in one batch: what differs from the records last written (``sync``), a leaving
member's records as tombstones first, as Kafka orders them.  Loading takes the newest value of
each key (the offsets store's replay hands them over in ``OffsetsTopicStore.share_groups``) and
rebuilds the group: members come back with their epochs and assignments, as after a Kafka
coordinator failover, and heartbeat on with those epochs.  A group without its
ShareGroupMetadata record (deleted) is not one; ShareGroupPartitionMetadata (Kafka 4.0) is read
and ignored, and tombstoned with a deleted group.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kwire.protocol import messages as m
from kwire.protocol.coordinator_records import encode_key, encode_value

from ..coordinator.consumer.member import MemberState
from .groups import ShareGroup, ShareMember

__all__ = ["ShareGroupRecords", "group_records", "rebuild"]

logger = logging.getLogger("kwire.broker.share")

Record = tuple[bytes, bytes | None]
VALUE_VERSION = 0
STABLE = int(MemberState.STABLE)  # Kafka's MemberState id: a share member has no revocation step


def _tps(cls, assignment: dict[str, tuple[int, ...]], topic_id: Callable[[str], uuid.UUID | None]) -> list:
    out = []
    for topic, parts in sorted(assignment.items()):
        tid = topic_id(topic)
        if tid is not None and parts:
            out.append(cls(topic_id=tid, partitions=sorted(parts)))
    return out


def _member_records(gid: str, member: ShareMember, topic_id) -> list[Record]:
    meta = m.ShareGroupMemberMetadataValue(rack_id=member.rack_id, client_id=member.client_id,
                                           client_host=member.client_host,
                                           subscribed_topic_names=list(member.subscribed))
    T = m.ShareGroupTargetAssignmentMemberValue
    C = m.ShareGroupCurrentMemberAssignmentValue
    current = C(member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
                state=STABLE, assigned_partitions=_tps(C.TopicPartitions, member.assignment, topic_id))
    mid = member.member_id
    return [
        (encode_key(m.ShareGroupMemberMetadataKey(group_id=gid, member_id=mid)), encode_value(meta, VALUE_VERSION)),
        (encode_key(m.ShareGroupTargetAssignmentMemberKey(group_id=gid, member_id=mid)),
         encode_value(T(topic_partitions=_tps(T.TopicPartition, member.assignment, topic_id)), VALUE_VERSION)),
        (encode_key(m.ShareGroupCurrentMemberAssignmentKey(group_id=gid, member_id=mid)),
         encode_value(current, VALUE_VERSION)),
    ]


def group_records(group: ShareGroup, initialized: dict[str, tuple[uuid.UUID, list[int]]],
                  topic_id: Callable[[str], uuid.UUID | None]) -> list[Record]:
    """Every record of the group as it is now, in Kafka's order: members' metadata, the state
    partitions, the group epoch, the target assignment, the members' current assignments.
    ``initialized``: topic name -> (topic id, partitions) with share state."""
    gid = group.group_id
    members = [_member_records(gid, mem, topic_id) for _, mem in sorted(group.members.items())]
    S = m.ShareGroupStatePartitionMetadataValue
    state = S(initialized_topics=[S.TopicPartitionsInfo(topic_id=tid, topic_name=name, partitions=sorted(parts))
                                  for name, (tid, parts) in sorted(initialized.items())], deleting_topics=[])
    return ([r[0] for r in members]
            + [(encode_key(m.ShareGroupStatePartitionMetadataKey(group_id=gid)), encode_value(state, VALUE_VERSION)),
               (encode_key(m.ShareGroupMetadataKey(group_id=gid)),
                encode_value(m.ShareGroupMetadataValue(epoch=group.group_epoch), VALUE_VERSION))]
            + [r[1] for r in members]
            + [(encode_key(m.ShareGroupTargetAssignmentMetadataKey(group_id=gid)),
                encode_value(m.ShareGroupTargetAssignmentMetadataValue(assignment_epoch=group.assignment_epoch),
                             VALUE_VERSION))]
            + [r[2] for r in members])


def _member_tombstones(gid: str, member_id: str) -> list[Record]:
    return [(encode_key(m.ShareGroupCurrentMemberAssignmentKey(group_id=gid, member_id=member_id)), None),
            (encode_key(m.ShareGroupTargetAssignmentMemberKey(group_id=gid, member_id=member_id)), None),
            (encode_key(m.ShareGroupMemberMetadataKey(group_id=gid, member_id=member_id)), None)]


class ShareGroupRecords:
    """Writes share groups' changes to the offsets store (``OffsetsTopicStore``) and rebuilds the
    groups its replay found.  ``topic_id(name)`` and ``topic_name(id)`` read the topic registry."""

    def __init__(self, store, topic_id: Callable[[str], uuid.UUID | None],
                 topic_name: Callable[[uuid.UUID], str | None]) -> None:
        self._store = store
        self._topic_id = topic_id
        self._topic_name = topic_name
        # group id -> key bytes -> value bytes last written (or loaded): what a change is compared with.
        self._written: dict[str, dict[bytes, bytes]] = {}
        self._members: dict[str, set[str]] = {}

    def _stored(self) -> dict[str, dict[bytes, tuple]]:
        return getattr(self._store, "share_groups", {})

    def sync(self, group: ShareGroup, initialized: dict[str, tuple[uuid.UUID, list[int]]]) -> int:
        """Write what changed in ``group`` since the last write, in one batch; how many records."""
        gid = group.group_id
        written = self._written.setdefault(gid, {})
        records: list[Record] = []
        for member_id in sorted(self._members.get(gid, set()) - set(group.members)):
            for key, value in _member_tombstones(gid, member_id):
                if written.pop(key, None) is not None:
                    records.append((key, value))
        for key, value in group_records(group, initialized, self._topic_id):
            if written.get(key) != value:
                records.append((key, value))
                written[key] = value
        self._members[gid] = set(group.members)
        if records:
            self._store.append_records(gid, records)
        return len(records)

    def delete_group(self, group_id: str) -> None:
        """Tombstones for every record of a deleted group."""
        records: list[Record] = []
        for member_id in sorted(self._members.pop(group_id, set())):
            records += _member_tombstones(group_id, member_id)
        records += [(encode_key(k(group_id=group_id)), None) for k in (
            m.ShareGroupTargetAssignmentMetadataKey, m.ShareGroupStatePartitionMetadataKey,
            m.ShareGroupPartitionMetadataKey, m.ShareGroupMetadataKey)]
        self._written.pop(group_id, None)
        self._stored().pop(group_id, None)
        self._store.append_records(group_id, records)

    def stored_ids(self) -> list[str]:
        """The ids of the groups the store replayed share-group records of."""
        return sorted(self._stored())

    def load(self, group_id: str) -> tuple[ShareGroup, dict[str, list[int]]] | None:
        """The group the store replayed (taken: the store forgets it) and its initialized share
        partitions (topic name -> partitions); None if there is none."""
        values = self._stored().pop(group_id, None)
        if not values:
            return None
        rebuilt = rebuild(group_id, values.values(), self._topic_name)
        if rebuilt is None:
            return None
        group, initialized = rebuilt
        # What is on disk now is what the next change is compared with.
        self._members[group_id] = set(group.members)
        ids = {t: self._topic_id(t) for t in initialized}
        on_disk = {t: (tid, ps) for t, ps in initialized.items() if (tid := ids[t]) is not None}
        self._written[group_id] = dict(group_records(group, on_disk, self._topic_id))
        return group, initialized


def rebuild(group_id: str, records: Iterable[tuple[Any, Any]],
            topic_name: Callable[[uuid.UUID], str | None]) -> tuple[ShareGroup, dict[str, list[int]]] | None:
    """A group from its newest (key, value) records; None without a group epoch record."""
    group = ShareGroup(group_id)
    metadata: dict[str, Any] = {}
    current: dict[str, Any] = {}
    initialized: dict[str, list[int]] = {}
    found = False

    def by_name(rows) -> dict[str, tuple[int, ...]]:
        out = {}
        for row in rows or ():
            name = topic_name(row.topic_id)
            if name is not None and row.partitions:  # a topic deleted meanwhile is dropped
                out[name] = tuple(sorted(row.partitions))
        return out

    for key, value in records:
        if value is None:
            continue
        if isinstance(key, m.ShareGroupMetadataKey):
            group.group_epoch = value.epoch
            found = True
        elif isinstance(key, m.ShareGroupTargetAssignmentMetadataKey):
            group.assignment_epoch = value.assignment_epoch
        elif isinstance(key, m.ShareGroupMemberMetadataKey):
            metadata[key.member_id] = value
        elif isinstance(key, m.ShareGroupCurrentMemberAssignmentKey):
            current[key.member_id] = value
        elif isinstance(key, m.ShareGroupStatePartitionMetadataKey):
            for t in value.initialized_topics or ():
                name = topic_name(t.topic_id)
                if name is not None:
                    initialized[name] = sorted(t.partitions)
    if not found:
        return None
    for member_id, md in metadata.items():
        cur = current.get(member_id)
        group.members[member_id] = ShareMember(
            member_id=member_id, member_epoch=cur.member_epoch if cur is not None else 0,
            subscribed=tuple(sorted(set(md.subscribed_topic_names or ()))), rack_id=md.rack_id,
            client_id=md.client_id, client_host=md.client_host, deadline_ms=0,
            assignment=by_name(cur.assigned_partitions) if cur is not None else {},
            previous_member_epoch=cur.previous_member_epoch if cur is not None else 0)
    return group, initialized
