"""Streams groups in ``__consumer_offsets`` as Kafka's StreamsGroup* records, and back.

What Kafka's StreamsCoordinatorRecordHelpers write, per group (in the group's partition, one batch
per change so a crash never leaves half of one):

* ``StreamsGroupMetadata`` -> the group epoch, a hash of the topics' partition counts, the
  assignment configs the target was computed with (``num.standby.replicas``);
* ``StreamsGroupTopology`` -> the topology and its epoch;
* ``StreamsGroupMemberMetadata`` (per member) -> process, client, endpoint, tags, topology epoch;
* ``StreamsGroupTargetAssignmentMember`` (per member) and ``...TargetAssignmentMetadata`` -> the
  target assignment and its epoch;
* ``StreamsGroupCurrentMemberAssignment`` (per member) -> its epochs, state, tasks and the tasks
  it has still to revoke, each active task with the epoch it was given at (KIP-1251's tagged
  AssignmentEpochs, Kafka 4.3).

``write`` compares the group's records with those it wrote last and appends only the changed
ones, with tombstones for what went away (a member that left, a deleted group).  Loading takes
the newest value of each key (the offsets store's replay keeps them in ``StoredGroup.streams``);
a group without its StreamsGroupMetadata record is not one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kwire.protocol import messages
from kwire.protocol.coordinator_records import encode_key, encode_value

from .group import StreamsGroup
from .member import ACTIVE, KINDS, MemberState, StreamsMember, TaskAssignment, by_kind
from .topology import StreamsTopology, Subtopology, TopicSpec

if TYPE_CHECKING:
    from ..offsets_topic import OffsetsTopicStore

__all__ = ["StreamsGroupRecords", "rebuild"]

m = messages

Record = tuple[bytes, bytes | None]
# Kafka's assignment config name for the standby replicas the target was computed with.
NUM_STANDBY_REPLICAS = "num.standby.replicas"


def _task_ids(cls, tasks: Mapping[str, frozenset[int]]) -> list:
    return [cls(subtopology_id=sid, partitions=sorted(ps)) for sid, ps in sorted(tasks.items()) if ps]


def _active_ids(cls, tasks: Mapping[str, frozenset[int]], member: StreamsMember) -> list:
    """A member's active tasks with Kafka 4.3's tagged AssignmentEpochs (KIP-1251), aligned with
    the partitions (Kafka's TasksTupleWithEpochs: only active tasks carry epochs)."""
    rows = _task_ids(cls, tasks)
    for row in rows:
        row.assignment_epochs = [member.assignment_epoch((ACTIVE, row.subtopology_id), p) for p in row.partitions]
    return rows


def _epochs(*row_lists) -> dict[tuple[tuple[str, str], int], int]:
    """The active tasks' assignment epochs a record carries.  A record a coordinator before
    KIP-1251 wrote has none (or, damaged, not one per partition): its tasks then count as
    assigned at the member's epoch, as Kafka's TasksTupleWithEpochs.fromCurrentAssignmentRecord."""
    out: dict[tuple[tuple[str, str], int], int] = {}
    for rows in row_lists:
        for r in rows or ():
            epochs = r.assignment_epochs or ()
            if len(epochs) == len(r.partitions or ()):
                out.update((((ACTIVE, r.subtopology_id), p), e) for p, e in zip(r.partitions, epochs, strict=True))
    return out


def _tasks(kind: str, rows) -> dict[tuple[str, str], frozenset[int]]:
    return {(kind, r.subtopology_id): frozenset(r.partitions) for r in rows or () if r.partitions}


def _metadata_hash(group: StreamsGroup) -> int:
    """A signed 64-bit hash of the partition counts the topology was resolved with (Kafka keeps
    one to see the topics change across a restart; kwire recomputes and compares the counts)."""
    counts = sorted(group.configured.partition_counts.items()) if group.configured is not None else []
    digest = hashlib.blake2b(repr(counts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def group_records(group: StreamsGroup) -> dict[bytes, bytes]:
    """Every record of the group's present state, key bytes -> value bytes."""
    gid = group.group_id
    out: dict[bytes, bytes] = {}
    C = m.StreamsGroupMetadataValue.LastAssignmentConfig
    configs = [C(key=NUM_STANDBY_REPLICAS, value=str(group.num_standby_replicas))
               ] if group.num_standby_replicas is not None else []
    out[encode_key(m.StreamsGroupMetadataKey(group_id=gid))] = encode_value(m.StreamsGroupMetadataValue(
        epoch=group.group_epoch, metadata_hash=_metadata_hash(group),
        validated_topology_epoch=group.topology.epoch if group.configured is not None and group.configured.ready
        and group.topology is not None else -1, last_assignment_configs=configs), 0)
    if group.topology is not None:
        out[encode_key(m.StreamsGroupTopologyKey(group_id=gid))] = encode_value(_topology_value(group.topology), 0)
    out[encode_key(m.StreamsGroupTargetAssignmentMetadataKey(group_id=gid))] = encode_value(
        m.StreamsGroupTargetAssignmentMetadataValue(assignment_epoch=group.assignment_epoch), 0)
    for member in group:
        out[encode_key(m.StreamsGroupMemberMetadataKey(group_id=gid, member_id=member.member_id))] = \
            encode_value(_member_value(member), 0)
        target = group.target.get(member.member_id, {})
        T = m.StreamsGroupTargetAssignmentMemberValue
        out[encode_key(m.StreamsGroupTargetAssignmentMemberKey(group_id=gid, member_id=member.member_id))] = \
            encode_value(T(**{f"{k}_tasks": _task_ids(T.TaskIds, by_kind(target, k)) for k in KINDS}), 0)
        C = m.StreamsGroupCurrentMemberAssignmentValue
        current = {f"{k}_tasks": _task_ids(C.TaskIds, by_kind(member.assigned, k)) for k in KINDS}
        current.update({f"{k}_tasks_pending_revocation": _task_ids(C.TaskIds, by_kind(member.pending_revocation, k))
                        for k in KINDS})
        current["active_tasks"] = _active_ids(C.TaskIds, by_kind(member.assigned, ACTIVE), member)
        current["active_tasks_pending_revocation"] = _active_ids(
            C.TaskIds, by_kind(member.pending_revocation, ACTIVE), member)
        out[encode_key(m.StreamsGroupCurrentMemberAssignmentKey(group_id=gid, member_id=member.member_id))] = \
            encode_value(C(member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
                           state=int(member.state), **current), 0)
    return out


def _topology_value(topology: StreamsTopology) -> Any:
    V = m.StreamsGroupTopologyValue
    S = V.Subtopology

    def info(t: TopicSpec) -> Any:
        return S.TopicInfo(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                           topic_configs=[S.TopicInfo.TopicConfig(key=k, value=v) for k, v in t.configs])

    return V(epoch=topology.epoch, subtopologies=[S(
        subtopology_id=s.subtopology_id, source_topics=list(s.source_topics), source_topic_regex=[],
        state_changelog_topics=[info(t) for t in s.state_changelog_topics],
        repartition_sink_topics=list(s.repartition_sink_topics),
        repartition_source_topics=[info(t) for t in s.repartition_source_topics],
        copartition_groups=[S.CopartitionGroup(source_topics=list(a), source_topic_regex=list(b),
                                               repartition_source_topics=list(c))
                            for a, b, c in s.copartition_groups]) for s in topology.subtopologies])


def _member_value(member: StreamsMember) -> Any:
    V = m.StreamsGroupMemberMetadataValue
    return V(instance_id=member.instance_id, rack_id=member.rack_id, client_id=member.client_id,
             client_host=member.client_host, rebalance_timeout_ms=member.rebalance_timeout_ms,
             topology_epoch=member.topology_epoch, process_id=member.process_id,
             user_endpoint=V.Endpoint(host=member.user_endpoint[0], port=member.user_endpoint[1])
             if member.user_endpoint is not None else None,
             client_tags=[V.KeyValue(key=k, value=v) for k, v in member.client_tags])


class StreamsGroupRecords:
    """Writes the streams groups' changes to the offsets store and rebuilds those it loaded."""

    def __init__(self, store: OffsetsTopicStore):
        self._store = store
        self._written: dict[str, dict[bytes, bytes]] = {}  # group id -> what its records say now

    def write(self, group: StreamsGroup) -> None:
        now = group_records(group)
        before = self._written.get(group.group_id, {})
        # Kafka's order: a leaving member's tombstones first, then the group's new state.
        records: list[Record] = [(k, None) for k in before if k not in now]
        records += [(k, v) for k, v in now.items() if before.get(k) != v]
        if records:
            self._store.append_records(group.group_id, records)
        self._written[group.group_id] = now

    def delete_group(self, group: StreamsGroup) -> None:
        """Tombstones for every record the group has."""
        entry = self._store.groups.get(group.group_id)
        if entry is not None:
            entry.streams.clear()
        before = self._written.pop(group.group_id, {})
        keys = set(before) | set(group_records(group))
        if keys:
            self._store.append_records(group.group_id, [(k, None) for k in sorted(keys)])

    def stored_ids(self) -> list[str]:
        """The group ids the store holds streams-group records of."""
        return sorted(g for g, e in self._store.groups.items() if getattr(e, "streams", None))

    def load(self, group_id: str) -> Iterator[StreamsGroup]:
        """The group of that id the store replayed, if any."""
        entry = self._store.groups.get(group_id)
        values = getattr(entry, "streams", None) if entry is not None else None
        if values:
            group = rebuild(group_id, values.values())
            if group is not None:
                # What the store holds is what was written: the next write sends only changes.
                self._written[group_id] = {k: encode_value(v, 0) for k, (_, v) in values.items()}
                yield group


def rebuild(group_id: str, records: Any) -> StreamsGroup | None:
    """A group from its newest (key, value) records; None without a StreamsGroupMetadata record."""
    group = StreamsGroup(group_id)
    metadata: dict[str, Any] = {}
    current: dict[str, Any] = {}
    found = False
    for key, value in records:
        if value is None:
            continue
        if isinstance(key, m.StreamsGroupMetadataKey):
            group.group_epoch = value.epoch
            group.num_standby_replicas = next((int(c.value) for c in value.last_assignment_configs or ()
                                               if c.key == NUM_STANDBY_REPLICAS and c.value.isdigit()), None)
            found = True
        elif isinstance(key, m.StreamsGroupTopologyKey):
            group.topology = StreamsTopology(value.epoch, tuple(Subtopology(
                s.subtopology_id, tuple(s.source_topics), (), tuple(_spec(t) for t in s.state_changelog_topics),
                tuple(s.repartition_sink_topics), tuple(_spec(t) for t in s.repartition_source_topics),
                tuple((tuple(g.source_topics), tuple(g.source_topic_regex), tuple(g.repartition_source_topics))
                      for g in s.copartition_groups)) for s in value.subtopologies))
        elif isinstance(key, m.StreamsGroupTargetAssignmentMetadataKey):
            group.assignment_epoch = value.assignment_epoch
        elif isinstance(key, m.StreamsGroupTargetAssignmentMemberKey):
            group.target[key.member_id] = _assignment(value.active_tasks, value.standby_tasks, value.warmup_tasks)
        elif isinstance(key, m.StreamsGroupMemberMetadataKey):
            metadata[key.member_id] = value
        elif isinstance(key, m.StreamsGroupCurrentMemberAssignmentKey):
            current[key.member_id] = value
    if not found:
        return None
    for member_id, md in metadata.items():
        cur = current.get(member_id)
        try:
            state = MemberState(cur.state) if cur is not None else MemberState.STABLE
        except ValueError:
            state = MemberState.UNKNOWN
        endpoint = md.user_endpoint
        group.members[member_id] = StreamsMember(
            member_id=member_id, process_id=md.process_id, instance_id=md.instance_id, rack_id=md.rack_id,
            client_id=md.client_id, client_host=md.client_host, rebalance_timeout_ms=md.rebalance_timeout_ms,
            topology_epoch=md.topology_epoch, user_endpoint=(endpoint.host, endpoint.port) if endpoint else None,
            client_tags=tuple((kv.key, kv.value) for kv in md.client_tags),
            member_epoch=cur.member_epoch if cur is not None else 0,
            previous_member_epoch=cur.previous_member_epoch if cur is not None else 0, state=state,
            assigned=_assignment(cur.active_tasks, cur.standby_tasks, cur.warmup_tasks) if cur is not None else {},
            pending_revocation=_assignment(cur.active_tasks_pending_revocation, cur.standby_tasks_pending_revocation,
                                           cur.warmup_tasks_pending_revocation) if cur is not None else {},
            assignment_epochs=_epochs(cur.active_tasks, cur.active_tasks_pending_revocation) if cur is not None else {})
    for member_id in list(group.target):
        if member_id not in group.members:
            del group.target[member_id]
    return group


def _assignment(active, standby, warmup) -> TaskAssignment:
    out: dict[tuple[str, str], frozenset[int]] = {}
    for kind, rows in zip(KINDS, (active, standby, warmup), strict=True):
        out.update(_tasks(kind, rows))
    return out


def _spec(t) -> TopicSpec:
    return TopicSpec(t.name, t.partitions, t.replication_factor, tuple((c.key, c.value) for c in t.topic_configs))

