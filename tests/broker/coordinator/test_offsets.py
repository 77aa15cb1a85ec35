"""OffsetCommit and OffsetFetch: generation checks, partition checks, retention, topic ids, batching."""

from __future__ import annotations

import asyncio
import uuid

from kwire.protocol import errors, messages

from . import (
    Broker,
    FakeClock,
    call,
    commit,
    consumer_metadata,
    describe,
    fetch,
    join,
    join_new,
    pause,
    run,
    stable_group,
    sync,
)

NONE = 0
DAY_MS = 24 * 3600 * 1000


def _broker(tmp_path, **settings) -> Broker:
    broker = Broker(tmp_path, **settings)
    broker.topics.add("t", 3)
    broker.topics.add("u", 1)
    return broker


def test_standalone_commit_creates_an_offsets_only_group(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        assert await commit(broker, "solo", {("t", 0): 10, ("t", 2): 12}, metadata="m") == \
            {("t", 0): NONE, ("t", 2): NONE}
        assert await fetch(broker, "solo", {"t": [0, 1, 2]}) == {
            ("t", 0): (10, -1, "m", NONE), ("t", 1): (-1, -1, "", NONE), ("t", 2): (12, -1, "m", NONE)}
        group = await describe(broker, "solo")
        assert (group.group_state, group.protocol_type, group.members) == ("Empty", "", [])
        # The empty group id is a valid group for offsets (Kafka keeps that for old clients).
        assert await commit(broker, "", {("u", 0): 1}) == {("u", 0): NONE}
        assert (await fetch(broker, "", {"u": [0]}))[("u", 0)][0] == 1

    run(scenario())


def test_commit_generation_checks(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        # A generation for a group that doesn't exist.
        assert await commit(broker, "g", {("t", 0): 1}, generation=3, member_id="m", version=8) == \
            {("t", 0): errors.IllegalGenerationError.code}
        assert await commit(broker, "g", {("t", 0): 1}, generation=3, member_id="m", version=9) == \
            {("t", 0): errors.GroupIdNotFoundError.code}
        assert broker.coordinator.group("g") is None
        (a,) = await stable_group(broker, "g", 1)
        gen, mid = a.generation_id, a.member_id
        ok = await commit(broker, "g", {("t", 0): 5}, generation=gen, member_id=mid)
        assert ok == {("t", 0): NONE}
        assert await commit(broker, "g", {("t", 0): 6}, generation=gen + 1, member_id=mid) == \
            {("t", 0): errors.IllegalGenerationError.code}
        assert await commit(broker, "g", {("t", 0): 6}, generation=gen, member_id="c-stranger") == \
            {("t", 0): errors.UnknownMemberIdError.code}
        # Without generation and member id, only an empty group takes commits.
        assert await commit(broker, "g", {("t", 0): 6}) == {("t", 0): errors.UnknownMemberIdError.code}
        assert await commit(broker, "g", {("t", 0): 6}, version=0) == {("t", 0): errors.UnknownMemberIdError.code}
        # PreparingRebalance: members of the current generation may still commit (they learn from heartbeats).
        b_join = asyncio.ensure_future(join_new(broker, "g", client_id="b"))
        await asyncio.sleep(0)
        assert await commit(broker, "g", {("t", 1): 7}, generation=gen, member_id=mid) == {("t", 1): NONE}
        a2 = await join(broker, "g", mid)
        await b_join
        # CompletingRebalance: the member knows the generation but has no assignment yet.
        assert await commit(broker, "g", {("t", 1): 8}, generation=a2.generation_id, member_id=mid) == \
            {("t", 1): errors.RebalanceInProgressError.code}
        assert (await fetch(broker, "g", {"t": [0, 1]}))[("t", 0)][0] == 5
        assert (await fetch(broker, "g", {"t": [0, 1]}))[("t", 1)][0] == 7

    run(scenario())


def test_static_member_commit_with_a_stale_member_id_is_fenced(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        a = await join(broker, "g", version=5, instance_id="i-a")
        await sync(broker, "g", a.generation_id, a.member_id, {a.member_id: b""}, instance_id="i-a")
        assert await commit(broker, "g", {("t", 0): 1}, generation=a.generation_id, member_id="i-a-old",
                            instance_id="i-a", version=7) == {("t", 0): errors.FencedInstanceIdError.code}
        assert await commit(broker, "g", {("t", 0): 1}, generation=a.generation_id, member_id=a.member_id,
                            instance_id="i-a", version=7) == {("t", 0): NONE}

    run(scenario())


def test_unknown_partitions_and_oversized_metadata_fail_alone(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        result = await commit(broker, "g", {("t", 0): 1, ("t", 3): 1, ("nope", 0): 1, ("u", 0): 2})
        assert result == {("t", 0): NONE, ("t", 3): errors.UnknownTopicOrPartitionError.code,
                          ("nope", 0): errors.UnknownTopicOrPartitionError.code, ("u", 0): NONE}
        assert await commit(broker, "g", {("t", 1): 1}, metadata="x" * 4096) == {("t", 1): NONE}
        assert await commit(broker, "g", {("t", 2): 1}, metadata="x" * 4097) == \
            {("t", 2): errors.OffsetMetadataTooLargeError.code}
        assert (await fetch(broker, "g", {"t": [2]}))[("t", 2)][0] == -1
        # A group-level refusal applies to the known partitions; unknown ones still say so.
        assert await commit(broker, "other", {("t", 0): 1, ("nope", 0): 1}, generation=1, member_id="m",
                            version=8) == {("t", 0): errors.IllegalGenerationError.code,
                                           ("nope", 0): errors.UnknownTopicOrPartitionError.code}

    run(scenario())


def test_fetch_all_missing_and_leader_epochs(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        await commit(broker, "g", {("u", 0): 3, ("t", 2): 2, ("t", 0): 1}, leader_epoch=4, version=6)
        everything = await fetch(broker, "g", None, version=5)
        assert list(everything) == [("t", 0), ("t", 2), ("u", 0)]
        assert everything[("t", 2)] == (2, 4, "", NONE)
        assert await fetch(broker, "g", {"t": [1], "nope": [0]}, version=5) == {
            ("t", 1): (-1, -1, "", NONE), ("nope", 0): (-1, -1, "", NONE)}
        # v1-4 have no leader epoch; v0-1 no null topic list (an empty list is just that).
        assert await fetch(broker, "g", {"t": [0]}, version=1) == {("t", 0): (1, -1, "", NONE)}
        assert await fetch(broker, "g", {}, version=1) == {}
        assert await fetch(broker, "unknown-group", None) == {}
        resp = await call(broker, messages.OffsetFetchRequest(group_id="g", topics=None), 2)
        assert resp.error_code == NONE
        # Null metadata comes back as "" (Kafka stores it so).
        await commit(broker, "g", {("t", 1): 9}, metadata=None)
        assert (await fetch(broker, "g", {"t": [1]}))[("t", 1)] == (9, -1, "", NONE)

    run(scenario())


def test_batched_fetch_of_several_groups(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        await commit(broker, "g1", {("t", 0): 10})
        await commit(broker, "g2", {("u", 0): 20, ("t", 1): 21})
        R = messages.OffsetFetchRequest
        req = R(groups=[R.OffsetFetchRequestGroup(group_id="g1", topics=[
                    R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])]),
                R.OffsetFetchRequestGroup(group_id="g2", topics=None),
                R.OffsetFetchRequestGroup(group_id="g3", topics=None)], require_stable=True)
        for version in (8, 9):
            resp = await call(broker, req, version)
            got = {g.group_id: (g.error_code, {(t.name, p.partition_index): p.committed_offset
                                               for t in g.topics for p in t.partitions}) for g in resp.groups}
            assert got == {"g1": (NONE, {("t", 0): 10, ("t", 1): -1}),
                           "g2": (NONE, {("t", 1): 21, ("u", 0): 20}),
                           "g3": (NONE, {})}

    run(scenario())


def test_topic_ids_in_commit_and_fetch_v10(tmp_path):
    broker = _broker(tmp_path)
    t_id = broker.topics.get("t").topic_id
    u_id = broker.topics.get("u").topic_id
    missing = uuid.uuid4()

    async def scenario():
        C = messages.OffsetCommitRequest
        P = C.OffsetCommitRequestTopic.OffsetCommitRequestPartition
        req = C(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
            C.OffsetCommitRequestTopic(topic_id=t_id, partitions=[P(partition_index=1, committed_offset=11,
                                                                     committed_leader_epoch=2)]),
            C.OffsetCommitRequestTopic(topic_id=missing, partitions=[P(partition_index=0, committed_offset=1)]),
            C.OffsetCommitRequestTopic(topic_id=u_id, partitions=[P(partition_index=5, committed_offset=1)])])
        resp = await call(broker, req, 10)
        assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics] == [
            (t_id, [(1, NONE)]), (missing, [(0, errors.UnknownTopicIdError.code)]),
            (u_id, [(5, errors.UnknownTopicOrPartitionError.code)])]
        assert (await fetch(broker, "g", {"t": [1]}))[("t", 1)] == (11, 2, "", NONE)

        F = messages.OffsetFetchRequest
        FT = F.OffsetFetchRequestGroup.OffsetFetchRequestTopics
        req = F(groups=[F.OffsetFetchRequestGroup(group_id="g", member_id=None, member_epoch=-1, topics=[
            FT(topic_id=t_id, partition_indexes=[0, 1]), FT(topic_id=missing, partition_indexes=[0])])])
        (group,) = (await call(broker, req, 10)).groups
        assert [(t.topic_id, [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.error_code)
                              for p in t.partitions]) for t in group.topics] == [
            (t_id, [(0, -1, -1, NONE), (1, 11, 2, NONE)]), (missing, [(0, -1, -1, errors.UnknownTopicIdError.code)])]
        # All of a group's offsets, named by id; a deleted topic's offsets have no id and are left out.
        await commit(broker, "g", {("u", 0): 4})
        broker.topics.remove("u")
        (group,) = (await call(broker, F(groups=[F.OffsetFetchRequestGroup(group_id="g", topics=None)]), 10)).groups
        assert [(t.topic_id, [p.committed_offset for p in t.partitions]) for t in group.topics] == [(t_id, [11])]

    run(scenario())


# The periodic expiry check, out of the way of tests that run expire_offsets themselves.
NO_RETENTION_TICK = {"retention_check_interval_ms": 1000 * DAY_MS}


def test_retention_time_of_v2_to_v4_and_v1_commit_timestamps(tmp_path):
    clock = FakeClock()
    broker = Broker(tmp_path, clock=clock, offsets_retention_ms=7 * DAY_MS, coordinator_options=NO_RETENTION_TICK)
    broker.topics.add("t", 3)

    async def scenario():
        await commit(broker, "g", {("t", 0): 1}, version=2, retention_ms=DAY_MS)
        await commit(broker, "g", {("t", 1): 2}, version=4)  # -1: the broker's retention
        R = messages.OffsetCommitRequest
        P = R.OffsetCommitRequestTopic.OffsetCommitRequestPartition
        await call(broker, R(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
            R.OffsetCommitRequestTopic(name="t", partitions=[
                P(partition_index=2, committed_offset=3, commit_timestamp=clock.now_ms - 6 * DAY_MS)])]), 1)
        offsets = broker.coordinator.group("g").offsets
        assert offsets[("t", 0)].expire_timestamp_ms == clock.now_ms + DAY_MS
        assert offsets[("t", 1)].expire_timestamp_ms is None
        assert offsets[("t", 2)].commit_timestamp_ms == clock.now_ms - 6 * DAY_MS
        clock.advance(DAY_MS)
        assert broker.coordinator.expire_offsets() == 2  # the 1-day one, and the one committed 7 days ago
        assert await fetch(broker, "g", None) == {("t", 1): (2, -1, "", NONE)}
        clock.advance(6 * DAY_MS)
        assert broker.coordinator.expire_offsets() == 1
        assert broker.coordinator.group("g") is None  # nothing left: the group is gone too

    run(scenario())


def test_offsets_of_an_empty_group_expire_from_when_it_emptied(tmp_path):
    clock = FakeClock()
    broker = Broker(tmp_path, clock=clock, offsets_retention_ms=7 * DAY_MS, coordinator_options=NO_RETENTION_TICK)
    broker.topics.add("t", 1)
    broker.topics.add("old", 1)

    async def scenario():
        await commit(broker, "g", {("old", 0): 1})
        clock.advance(10 * DAY_MS)
        (a,) = await stable_group(broker, "g", 1, protocols=[("range", consumer_metadata(["t"]))])
        await commit(broker, "g", {("t", 0): 5}, generation=a.generation_id, member_id=a.member_id)
        # Stable consumer group: offsets of topics nobody reads age; "t" is read, "old" is not.
        assert broker.coordinator.expire_offsets() == 1
        assert list(broker.coordinator.group("g").offsets) == [("t", 0)]
        # A step of the wall clock without running the timers due meanwhile (the member's session
        # would end): the member is still there, reading "t".
        clock.now_ms += 30 * DAY_MS
        assert broker.coordinator.expire_offsets() == 0  # still read: kept however old
        await call(broker, messages.LeaveGroupRequest(group_id="g", member_id=a.member_id), 0)
        assert (await describe(broker, "g")).group_state == "Empty"
        clock.advance(7 * DAY_MS - 1)
        assert broker.coordinator.expire_offsets() == 0  # counts from when the group emptied
        clock.advance(1)
        assert broker.coordinator.expire_offsets() == 1
        assert broker.coordinator.group("g") is None

    run(scenario())


def test_retention_runs_by_itself_on_the_coordinators_clock(tmp_path):
    clock = FakeClock()
    broker = Broker(tmp_path, clock=clock, offsets_retention_ms=DAY_MS,
                    coordinator_options={"retention_check_interval_ms": 60_000})
    broker.topics.add("t", 1)

    async def scenario():
        await commit(broker, "g", {("t", 0): 1})
        await pause(broker, DAY_MS / 1000 - 120)
        assert broker.coordinator.group("g") is not None  # not a day old yet
        await pause(broker, 120)
        assert broker.coordinator.group("g") is None

    run(scenario())
