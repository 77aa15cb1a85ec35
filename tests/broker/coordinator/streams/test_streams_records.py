"""Streams groups as StreamsGroup* records of __consumer_offsets: written as changes, rebuilt alike."""

from __future__ import annotations

import dataclasses

from kwire.broker.coordinator.store import StoredGroup
from kwire.broker.coordinator.streams.member import ACTIVE, STANDBY
from kwire.broker.coordinator.streams.records import StreamsGroupRecords
from kwire.protocol import messages
from kwire.protocol.coordinator_records import OFFSETS_TOPIC, decode_key, decode_value, encode_key, encode_value

from .test_streams_coordinator import Env


class FakeStore:
    """The offsets store's surface the records use: appended batches, replayed newest-per-key."""

    def __init__(self):
        self.batches: list[list[tuple[bytes, bytes | None]]] = []
        self.groups: dict[str, StoredGroup] = {}

    def append_records(self, group_id, records):
        self.batches.append(records)

    def replay(self):
        latest = {}
        for batch in self.batches:
            for key, value in batch:
                latest[key] = value
        self.groups = {}
        for key, value in latest.items():
            k = decode_key(key, OFFSETS_TOPIC)
            if value is not None:
                self.groups.setdefault(k.group_id, StoredGroup()).streams[key] = (k, decode_value(k, value))


def test_a_group_written_and_replayed_is_the_same_group():
    env = Env(standbys=1)
    store = FakeStore()
    records = StreamsGroupRecords(store)
    env.coord._records = records
    a, b = env.join("a", process="p1"), env.join("b", process="p2")
    env.settle({"a": a, "b": b})
    batches = len(store.batches)
    env.beat("a", env.coord.group("app").members["a"].member_epoch)  # nothing changed: nothing written
    assert len(store.batches) == batches
    store.replay()
    assert records.stored_ids() == ["app"]
    [loaded] = StreamsGroupRecords(store).load("app")
    live = env.coord.group("app")
    assert (loaded.group_epoch, loaded.assignment_epoch, loaded.num_standby_replicas) == \
        (live.group_epoch, live.assignment_epoch, 1)
    assert loaded.topology == live.topology
    # Active tasks come back with the epochs they were given at (KIP-1251's tagged AssignmentEpochs);
    # standby tasks are written without (Kafka's TasksTupleWithEpochs), so they read as the member's epoch.
    for member_id, member in live.members.items():
        again = loaded.members[member_id]
        assert dataclasses.replace(member, assignment_epochs={}) == dataclasses.replace(again, assignment_epochs={})
        assert {k: e for k, e in member.assignment_epochs.items() if k[0][0] == ACTIVE} == again.assignment_epochs
    assert loaded.target == live.target
    current = [v for k, v in store.groups["app"].streams.values()
               if isinstance(k, messages.StreamsGroupCurrentMemberAssignmentKey)]
    assert len(current) == 2 and all(v.standby_tasks for v in current)
    assert all(t.assignment_epochs is None for v in current for t in v.standby_tasks)
    assert all(len(t.assignment_epochs) == len(t.partitions) for v in current for t in v.active_tasks)
    # A member leaving tombstones its records; deleting the group tombstones the rest.
    env.beat("b", -1)
    store.replay()
    [after] = StreamsGroupRecords(store).load("app")
    assert sorted(after.members) == ["a"]
    env.beat("a", -1)
    assert env.coord.delete_group("app") == 0
    store.replay()
    assert store.groups == {}


def test_a_record_without_assignment_epochs_reads_its_active_tasks_at_the_member_epoch():
    """A StreamsGroupCurrentMemberAssignment written before KIP-1251 (or with epochs not one per
    partition) dates every active task at the record's member epoch, as Kafka's
    TasksTupleWithEpochs.fromCurrentAssignmentRecord; one with them keeps each task's own."""
    env = Env()
    store = FakeStore()
    env.coord._records = StreamsGroupRecords(store)
    env.join("a")
    store.replay()
    C = messages.StreamsGroupCurrentMemberAssignmentValue
    key = encode_key(messages.StreamsGroupCurrentMemberAssignmentKey(group_id="app", member_id="a"))
    [value] = [v for batch in store.batches for k, v in batch if k == key][-1:]
    written = decode_value(decode_key(key, OFFSETS_TOPIC), value)
    assert [(t.subtopology_id, t.partitions, t.assignment_epochs) for t in written.active_tasks] == \
        [("0", list(range(6)), [2] * 6)]
    assert all(t.assignment_epochs is None for t in written.standby_tasks)

    def reload(rows):
        v = C(member_epoch=7, previous_member_epoch=6, state=0, active_tasks=rows, standby_tasks=[],
              warmup_tasks=[], active_tasks_pending_revocation=[], standby_tasks_pending_revocation=[],
              warmup_tasks_pending_revocation=[])
        store.batches.append([(key, encode_value(v, 0))])
        store.replay()
        [group] = StreamsGroupRecords(store).load("app")
        m = group.members["a"]
        return [m.assignment_epoch((ACTIVE, "0"), p) for p in (0, 1)], m.assignment_epoch((STANDBY, "0"), 0)

    assert reload([C.TaskIds(subtopology_id="0", partitions=[0, 1], assignment_epochs=[3, 5])]) == ([3, 5], None)
    assert reload([C.TaskIds(subtopology_id="0", partitions=[0, 1], assignment_epochs=None)]) == ([7, 7], None)
    assert reload([C.TaskIds(subtopology_id="0", partitions=[0, 1], assignment_epochs=[3])]) == ([7, 7], None)


def test_record_layouts_are_kafka_4_3s():
    """Bytes of Kafka 4.3's StreamsGroup* values where their tagged fields matter: the metadata's
    LastAssignmentConfigs is tag 1 (nullable, null by default), after ValidatedTopologyEpoch's
    tag 0 (default -1); the target assignment metadata's AssignmentTimestamp is tag 0 (default 0,
    KAFKA-20266); an active task's AssignmentEpochs is TaskIds' tag 0 (KIP-1251)."""
    V = messages.StreamsGroupMetadataValue
    plain = V(epoch=7, metadata_hash=0x0102030405060708, validated_topology_epoch=-1, last_assignment_configs=None)
    assert plain.encode(0).hex() == "00000007" "0102030405060708" "00"
    name = b"num.standby.replicas".hex()
    configs = V(epoch=7, metadata_hash=0x0102030405060708, validated_topology_epoch=3,
                last_assignment_configs=[V.LastAssignmentConfig(key="num.standby.replicas", value="1")])
    assert configs.encode(0).hex() == \
        "00000007" "0102030405060708" "02" "000400000003" "0119" "0215" + name + "023100"
    assert V.decode(plain.encode(0), 0).last_assignment_configs is None
    T = messages.StreamsGroupTargetAssignmentMetadataValue
    assert T(assignment_epoch=12).encode(0).hex() == "0000000c00"
    assert T(assignment_epoch=12, assignment_timestamp=5).encode(0).hex() == "0000000c" "010008" "0000000000000005"
    C = messages.StreamsGroupCurrentMemberAssignmentValue
    row = C.TaskIds(subtopology_id="0", partitions=[1], assignment_epochs=[4])
    value = C(member_epoch=4, previous_member_epoch=3, state=0, active_tasks=[row], standby_tasks=[],
              warmup_tasks=[], active_tasks_pending_revocation=[], standby_tasks_pending_revocation=[],
              warmup_tasks_pending_revocation=[])
    assert value.encode(0).hex() == "00000004" "00000003" "00" \
        "02" "0230" "0200000001" "01" "0005" "0200000004" "0101010101" "00"
