"""Consumer groups in ``__consumer_offsets`` as Kafka's ConsumerGroup* records, and back.

What Kafka's GroupCoordinatorRecordHelpers write, per group (in the group's partition, one batch
per request so a crash never leaves half a change):

* ``ConsumerGroupMetadata`` -> the group epoch;
* ``ConsumerGroupPartitionMetadata`` -> the subscribed topics (id, name, partition count);
* ``ConsumerGroupMemberMetadata`` (per member) -> its subscription, client, rebalance timeout;
* ``ConsumerGroupTargetAssignmentMember`` (per member) and ``ConsumerGroupTargetAssignmentMetadata``
  -> the target assignment and its epoch;
* ``ConsumerGroupCurrentMemberAssignment`` (per member) -> its epochs, state and partitions.

A member leaving writes tombstones for its three records; a deleted group tombstones its own.
Loading takes the newest value of each key (the offsets store's replay keeps them per group in
``StoredGroup.consumer``) and rebuilds the groups; a group without its ConsumerGroupMetadata
record (deleted) is not one.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kwire.protocol import messages
from kwire.protocol.coordinator_records import encode_key, encode_value

from .group import ConsumerGroup
from .member import ClassicMetadata, ConsumerMember, MemberState

if TYPE_CHECKING:
    from ..offsets_topic import OffsetsTopicStore
    from .coordinator import _Changes

__all__ = ["ConsumerGroupRecords", "rebuild"]

logger = logging.getLogger("kwire.broker.coordinator.consumer")

m = messages

Record = tuple[bytes, bytes | None]


def _tps(cls, parts) -> list:
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(parts.items(), key=lambda x: str(x[0])) if ps]


def _parts(rows) -> dict[uuid.UUID, frozenset[int]]:
    return {r.topic_id: frozenset(r.partitions) for r in rows or () if r.partitions}


def _held(cls, parts, member: ConsumerMember) -> list:
    """A member's partitions with Kafka 4.3's tagged AssignmentEpochs (KIP-1251), aligned with them."""
    rows = _tps(cls, parts)
    for row in rows:
        row.assignment_epochs = [member.assignment_epoch(row.topic_id, p) for p in row.partitions]
    return rows


def _epochs(*row_lists) -> dict[tuple[uuid.UUID, int], int]:
    """The assignment epochs a record carries; none for one a coordinator before KIP-1251 wrote
    (its partitions then count as assigned at the member's epoch, the strict answer)."""
    out: dict[tuple[uuid.UUID, int], int] = {}
    for rows in row_lists:
        for r in rows or ():
            epochs = r.assignment_epochs or ()
            if len(epochs) == len(r.partitions or ()):
                out.update(((r.topic_id, p), e) for p, e in zip(r.partitions, epochs, strict=True))
    return out


def group_epoch_record(group: ConsumerGroup) -> Record:
    return (encode_key(m.ConsumerGroupMetadataKey(group_id=group.group_id)),
            encode_value(m.ConsumerGroupMetadataValue(epoch=group.group_epoch), 0))


def partition_metadata_record(group: ConsumerGroup) -> Record:
    T = m.ConsumerGroupPartitionMetadataValue.TopicMetadata
    topics = [T(topic_id=tid, topic_name=name, num_partitions=n, partition_metadata=[])
              for name, (tid, n) in sorted(group.topic_snapshot.items())]
    return (encode_key(m.ConsumerGroupPartitionMetadataKey(group_id=group.group_id)),
            encode_value(m.ConsumerGroupPartitionMetadataValue(topics=topics), 0))


def member_metadata_record(group_id: str, member: ConsumerMember | None, member_id: str) -> Record:
    key = encode_key(m.ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id))
    if member is None:
        return key, None
    value = m.ConsumerGroupMemberMetadataValue(
        instance_id=member.instance_id, rack_id=member.rack_id, client_id=member.client_id,
        client_host=member.client_host, subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex, rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor)
    if member.classic is not None:
        C = m.ConsumerGroupMemberMetadataValue.ClassicMemberMetadata
        value.classic_member_metadata = C(session_timeout_ms=member.classic.session_timeout_ms, supported_protocols=[
            C.ClassicProtocol(name=n, metadata=md) for n, md in member.classic.protocols])
    else:
        value.classic_member_metadata = None
    return key, encode_value(value, 0)


def target_member_record(group_id: str, member_id: str, target) -> Record:
    key = encode_key(m.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id))
    if target is None:
        return key, None
    V = m.ConsumerGroupTargetAssignmentMemberValue
    return key, encode_value(V(topic_partitions=_tps(V.TopicPartition, target)), 0)


def target_epoch_record(group: ConsumerGroup) -> Record:
    return (encode_key(m.ConsumerGroupTargetAssignmentMetadataKey(group_id=group.group_id)),
            encode_value(m.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=group.assignment_epoch), 0))


def current_assignment_record(group_id: str, member: ConsumerMember | None, member_id: str) -> Record:
    key = encode_key(m.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id))
    if member is None:
        return key, None
    V = m.ConsumerGroupCurrentMemberAssignmentValue
    value = V(member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
              state=int(member.state), assigned_partitions=_held(V.TopicPartitions, member.assigned, member),
              partitions_pending_revocation=_held(V.TopicPartitions, member.pending_revocation, member))
    return key, encode_value(value, 0)


class ConsumerGroupRecords:
    """Writes a group's changes to the offsets store and rebuilds the groups it loaded."""

    def __init__(self, store: OffsetsTopicStore):
        self._store = store

    def write(self, group: ConsumerGroup, changes: _Changes) -> None:
        gid = group.group_id
        records: list[Record] = []
        # Kafka's order: a leaving member's records first, then what the group's epoch says.
        for member_id in sorted(changes.removed - set(group.members)):
            records += [current_assignment_record(gid, None, member_id), target_member_record(gid, member_id, None),
                        member_metadata_record(gid, None, member_id)]
        for member_id in sorted(changes.member_metadata):
            if member_id in group.members:
                records.append(member_metadata_record(gid, group.members[member_id], member_id))
        if changes.partition_metadata:
            records.append(partition_metadata_record(group))
        if changes.group_epoch or changes.created:
            records.append(group_epoch_record(group))
        for member_id in sorted(changes.target_members):
            if member_id in group.members:
                records.append(target_member_record(gid, member_id, group.target.get(member_id, {})))
        if changes.target_epoch:
            records.append(target_epoch_record(group))
        for member_id in sorted(changes.current_assignment):
            if member_id in group.members:
                records.append(current_assignment_record(gid, group.members[member_id], member_id))
        if records:
            self._store.append_records(gid, records)

    def delete_group(self, group: ConsumerGroup, members: list[str] = ()) -> None:
        """Tombstones for what a deleted group left: its ``members``' records (a group that
        converts to classic still has some), its metadata, topics and target epoch."""
        gid = group.group_id
        entry = self._store.groups.get(gid)
        if entry is not None and getattr(entry, "consumer", None):
            entry.consumer.clear()
        records: list[Record] = []
        for member_id in members:
            records += [current_assignment_record(gid, None, member_id), target_member_record(gid, member_id, None),
                        member_metadata_record(gid, None, member_id)]
        self._store.append_records(gid, records + [
            (encode_key(m.ConsumerGroupTargetAssignmentMetadataKey(group_id=gid)), None),
            (encode_key(m.ConsumerGroupPartitionMetadataKey(group_id=gid)), None),
            (encode_key(m.ConsumerGroupMetadataKey(group_id=gid)), None)])

    def stored_ids(self) -> list[str]:
        """The group ids the store holds consumer-group records of."""
        return sorted(g for g, e in self._store.groups.items() if getattr(e, "consumer", None))

    def load(self, group_id: str | None = None) -> Iterator[ConsumerGroup]:
        """The groups the store replayed (one, with ``group_id``)."""
        stored = self._store.groups
        ids = [group_id] if group_id is not None else sorted(stored)
        for gid in ids:
            entry = stored.get(gid)
            values = getattr(entry, "consumer", None) if entry is not None else None
            if values:
                group = rebuild(gid, values.values())
                if group is not None:
                    yield group


def rebuild(group_id: str, records: Any) -> ConsumerGroup | None:
    """A group from its newest (key, value) records; None without a group epoch record."""
    group = ConsumerGroup(group_id)
    metadata: dict[str, Any] = {}
    current: dict[str, Any] = {}
    found = False
    for key, value in records:
        if value is None:
            continue
        if isinstance(key, m.ConsumerGroupMetadataKey):
            group.group_epoch = value.epoch
            found = True
        elif isinstance(key, m.ConsumerGroupPartitionMetadataKey):
            group.topic_snapshot = {t.topic_name: (t.topic_id, t.num_partitions) for t in value.topics}
        elif isinstance(key, m.ConsumerGroupTargetAssignmentMetadataKey):
            group.assignment_epoch = value.assignment_epoch
        elif isinstance(key, m.ConsumerGroupTargetAssignmentMemberKey):
            group.target[key.member_id] = _parts(value.topic_partitions)
        elif isinstance(key, m.ConsumerGroupMemberMetadataKey):
            metadata[key.member_id] = value
        elif isinstance(key, m.ConsumerGroupCurrentMemberAssignmentKey):
            current[key.member_id] = value
    if not found:
        return None
    for member_id, md in metadata.items():
        cur = current.get(member_id)
        classic = getattr(md, "classic_member_metadata", None)
        classic_meta = None
        if classic is not None and classic.supported_protocols:
            classic_meta = ClassicMetadata(classic.session_timeout_ms, tuple(
                (p.name, bytes(p.metadata)) for p in classic.supported_protocols))
        try:
            state = MemberState(cur.state) if cur is not None else MemberState.STABLE
        except ValueError:
            state = MemberState.UNKNOWN
        group.put_member(ConsumerMember(
            member_id=member_id, instance_id=md.instance_id, rack_id=md.rack_id, client_id=md.client_id,
            client_host=md.client_host, subscribed_topic_names=tuple(md.subscribed_topic_names or ()),
            subscribed_topic_regex=md.subscribed_topic_regex, server_assignor=md.server_assignor,
            rebalance_timeout_ms=md.rebalance_timeout_ms,
            member_epoch=cur.member_epoch if cur is not None else 0,
            previous_member_epoch=cur.previous_member_epoch if cur is not None else 0, state=state,
            assigned=_parts(cur.assigned_partitions) if cur is not None else {},
            pending_revocation=_parts(cur.partitions_pending_revocation) if cur is not None else {},
            assignment_epochs=_epochs(cur.assigned_partitions, cur.partitions_pending_revocation)
            if cur is not None else {},
            classic=classic_meta))
    for member_id in list(group.target):
        if member_id not in group.members:
            del group.target[member_id]
    return group
