"""Streams groups as StreamsGroup* records of __consumer_offsets: written as changes, rebuilt alike."""

from __future__ import annotations

import dataclasses

from kwire.broker.coordinator.store import StoredGroup
from kwire.broker.coordinator.streams.records import StreamsGroupRecords
from kwire.protocol.coordinator_records import OFFSETS_TOPIC, decode_key, decode_value

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
    # The per-task assignment epochs are bookkeeping of the live coordinator, not records.
    assert {k: dataclasses.replace(v, assignment_epochs={}) for k, v in live.members.items()} == loaded.members
    assert loaded.target == live.target
    # A member leaving tombstones its records; deleting the group tombstones the rest.
    env.beat("b", -1)
    store.replay()
    [after] = StreamsGroupRecords(store).load("app")
    assert sorted(after.members) == ["a"]
    env.beat("a", -1)
    assert env.coord.delete_group("app") == 0
    store.replay()
    assert store.groups == {}
