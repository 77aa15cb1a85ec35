"""KIP-848 groups through the request handlers: ConsumerGroupHeartbeat, OffsetCommit/OffsetFetch
with member epochs, ListGroups/DescribeGroups by type, OffsetDelete, DeleteGroups, and the
group's ConsumerGroup* records in __consumer_offsets replayed after a restart."""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.coordinator_records import OFFSETS_TOPIC, decode_key
from kwire.protocol.errors import (
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from kwire.protocol.records import iter_batches

from . import Broker, call, commit, describe, join, run
from . import heartbeat as heartbeat_classic

NONE = 0
HB = messages.ConsumerGroupHeartbeatRequest


async def heartbeat(broker, member_id, epoch, *, owned=None, topics=None, group="g", **fields):
    tps = None if owned is None else [HB.TopicPartitions(topic_id=t, partitions=ps) for t, ps in owned.items()]
    req = HB(group_id=group, member_id=member_id, member_epoch=epoch, topic_partitions=tps,
             subscribed_topic_names=topics, **fields)
    return await call(broker, req, 1)


async def join_consumer(broker, member_id, topics=("t",), group="g"):
    return await heartbeat(broker, member_id, 0, owned={}, topics=list(topics), group=group,
                           rebalance_timeout_ms=30000)


def assigned(resp):
    return {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}


def test_commits_need_the_current_member_epoch(tmp_path):
    broker = Broker(tmp_path)
    broker.topics.add("t", 2)
    R = messages.OffsetFetchRequest

    async def scenario():
        a = await join_consumer(broker, "a")
        assert (a.error_code, a.member_epoch) == (NONE, 1)
        assert await commit(broker, "g", {("t", 0): 5}, generation=1, member_id="a") == {("t", 0): NONE}
        assert await commit(broker, "g", {("t", 0): 6}, generation=0, member_id="a") == \
            {("t", 0): StaleMemberEpochError.code}
        assert await commit(broker, "g", {("t", 0): 6}, generation=1, member_id="b") == \
            {("t", 0): UnknownMemberIdError.code}
        assert await commit(broker, "g", {("t", 0): 6}) == {("t", 0): UnknownMemberIdError.code}  # not from outside
        G = R.OffsetFetchRequestGroup
        fetch = R(groups=[G(group_id="g", member_id="a", member_epoch=1, topics=None)], require_stable=False)
        resp = await call(broker, fetch, 9)
        [g] = resp.groups
        assert g.error_code == NONE and g.topics[0].partitions[0].committed_offset == 5
        fetch.groups[0].member_epoch = 3
        assert (await call(broker, fetch, 9)).groups[0].error_code == StaleMemberEpochError.code
        fetch.groups[0].member_epoch = -1  # the admin client
        assert (await call(broker, fetch, 9)).groups[0].error_code == NONE
        # The subscribed topic's offsets may not be deleted while the group reads it.
        D = messages.OffsetDeleteRequest
        resp = await call(broker, D(group_id="g", topics=[D.OffsetDeleteRequestTopic(
            name="t", partitions=[D.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])]), 0)
        assert resp.topics[0].partitions[0].error_code == GroupSubscribedToTopicError.code

    run(scenario())
    broker.close()


def test_list_and_describe_groups_show_both_types(tmp_path):
    broker = Broker(tmp_path)
    broker.topics.add("t", 2)
    L = messages.ListGroupsRequest

    async def scenario():
        await join_consumer(broker, "a", group="new")
        classic = await join(broker, "old")
        classic = await join(broker, "old", classic.member_id)
        assert classic.error_code == NONE
        resp = await call(broker, L(states_filter=[], types_filter=[]), 5)
        assert {(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in resp.groups} == {
            ("new", "consumer", "consumer", "Stable"), ("old", "classic", "consumer", "CompletingRebalance")}
        resp = await call(broker, L(states_filter=[], types_filter=["Consumer"]), 5)
        assert [g.group_id for g in resp.groups] == ["new"]
        resp = await call(broker, L(states_filter=["stable"], types_filter=["classic"]), 5)
        assert resp.groups == []
        desc = await describe(broker, "new")
        assert (desc.error_code, desc.group_state, desc.protocol_type, desc.protocol_data) == \
            (NONE, "Stable", "consumer", "uniform")
        [m] = desc.members
        body = messages.ConsumerProtocolAssignment.decode(memoryview(m.member_assignment)[2:], 0)
        assert [(tp.topic, sorted(tp.partitions)) for tp in body.assigned_partitions] == [("t", [0, 1])]
        # A group id is one type: a classic member joins the consumer group as one of its members
        # (Kafka 4's upgrade path), answered at once with its member epoch, no leader.
        first = await join(broker, "new")
        assert first.error_code == MemberIdRequiredError.code
        joined = await join(broker, "new", first.member_id)
        assert (joined.error_code, joined.generation_id, joined.leader) == (NONE, 2, "")
        assert (await join(broker, "new", protocol_type="connect")).error_code == InconsistentGroupProtocolError.code
        # It must wait for "a" to give partitions up: its heartbeat sends it to join again.
        assert await heartbeat_classic(broker, "new", 2, joined.member_id) == \
            RebalanceInProgressError.code
        assert await heartbeat_classic(broker, "new", 1, joined.member_id) == IllegalGenerationError.code
        assert len((await describe(broker, "new")).members) == 2
        left = await call(broker, messages.LeaveGroupRequest(group_id="new", members=[
            messages.LeaveGroupRequest.MemberIdentity(member_id=joined.member_id, group_instance_id=None)]), 3)
        assert (left.error_code, left.members[0].error_code) == (NONE, NONE)
        resp = await call(broker, messages.DeleteGroupsRequest(groups_names=["new"]), 2)
        assert resp.results[0].error_code == NonEmptyGroupError.code
        assert (await heartbeat(broker, "a", -1, group="new")).error_code == NONE
        resp = await call(broker, messages.DeleteGroupsRequest(groups_names=["new"]), 2)
        assert resp.results[0].error_code == NONE
        assert broker.consumer_groups.group("new") is None

    run(scenario())
    broker.close()


def test_members_and_assignments_survive_a_restart(tmp_path):
    broker = Broker(tmp_path)
    broker.topics.add("t", 4)
    t = broker.topics.get("t").topic_id

    async def first():
        await join_consumer(broker, "a")
        b = await join_consumer(broker, "b")
        assert assigned(b) == {} and b.member_epoch == 2
        a = await heartbeat(broker, "a", 1, owned={t: [0, 1, 2, 3]})
        kept = assigned(a)[t]
        a = await heartbeat(broker, "a", 1, owned={t: kept})
        assert a.member_epoch == 2
        return kept

    kept = run(first())
    group = broker.consumer_groups.group("g")
    before = (group.group_epoch, group.assignment_epoch, {m.member_id: (m.member_epoch, dict(m.assigned))
                                                            for m in group})
    broker = broker.reopen()
    group = broker.consumer_groups.group("g")
    after = (group.group_epoch, group.assignment_epoch, {m.member_id: (m.member_epoch, dict(m.assigned))
                                                           for m in group})
    assert after == before

    async def second():
        # Members go on at their epochs: no rebalance for the restart.
        a = await heartbeat(broker, "a", 2)
        assert (a.error_code, a.member_epoch) == (NONE, 2)
        b = await heartbeat(broker, "b", 2, owned={})
        assert b.error_code == NONE and sorted(assigned(b)[t]) == sorted({0, 1, 2, 3} - set(kept))
        assert broker.consumer_groups.group("g").group_epoch == before[0]

    run(second())
    broker.close()


def test_an_older_epochs_commit_of_kept_partitions_holds_across_a_restart(tmp_path):
    """KIP-1251: the epoch each partition was assigned at is written with the member's assignment
    (Kafka 4.3's tagged AssignmentEpochs), so after a restart a member still sending the epoch
    before its last bump commits the partitions it kept, and only those."""
    broker = Broker(tmp_path)
    broker.topics.add("t", 4)
    t = broker.topics.get("t").topic_id

    async def first():
        await join_consumer(broker, "a")
        await join_consumer(broker, "b")
        a = await heartbeat(broker, "a", 1, owned={t: [0, 1, 2, 3]})
        kept = assigned(a)[t]
        assert (await heartbeat(broker, "a", 1, owned={t: kept})).member_epoch == 2
        return kept

    kept = run(first())
    gone = sorted({0, 1, 2, 3} - set(kept))
    broker = broker.reopen()
    member = broker.consumer_groups.group("g").members["a"]
    assert {p: member.assignment_epoch(t, p) for p in kept} == {p: 1 for p in kept}

    async def second():
        assert await commit(broker, "g", {("t", kept[0]): 7}, generation=1, member_id="a") == {("t", kept[0]): NONE}
        assert await commit(broker, "g", {("t", gone[0]): 7}, generation=1, member_id="a") == \
            {("t", gone[0]): StaleMemberEpochError.code}

    run(second())
    broker.close()


def test_record_types_are_kafkas(tmp_path):
    broker = Broker(tmp_path)
    broker.topics.add("t", 1)
    run(join_consumer(broker, "a"))
    log = broker.logs.get(OFFSETS_TOPIC, broker.coordinator.store.partition_of("g"))
    kinds = set()
    for s in log.read(0, 1 << 20):
        for batch in iter_batches(s.read()):
            for r in batch.records():
                kinds.add(type(decode_key(r.key, OFFSETS_TOPIC)).__name__)
    assert kinds == {"ConsumerGroupMetadataKey", "ConsumerGroupPartitionMetadataKey", "ConsumerGroupMemberMetadataKey",
                     "ConsumerGroupTargetAssignmentMemberKey", "ConsumerGroupTargetAssignmentMetadataKey",
                     "ConsumerGroupCurrentMemberAssignmentKey"}
    broker.close()


def test_empty_groups_without_offsets_go_at_the_expiry_check(tmp_path):
    broker = Broker(tmp_path)
    broker.topics.add("t", 1)

    async def scenario():
        await join_consumer(broker, "a", group="kept")
        await join_consumer(broker, "b", group="gone")
        assert await commit(broker, "kept", {("t", 0): 3}, generation=1, member_id="a") == {("t", 0): NONE}
        for member, group in (("a", "kept"), ("b", "gone")):
            assert (await heartbeat(broker, member, -1, group=group)).error_code == NONE
        broker.coordinator.expire_offsets()
        assert broker.consumer_groups.group("gone") is None
        assert broker.consumer_groups.group("kept") is not None  # its offsets keep it

    run(scenario())
    broker = broker.reopen()
    assert broker.consumer_groups.group("gone") is None and broker.consumer_groups.group("kept") is not None
    broker.close()


def test_upgrade_keeps_the_classic_members_partitions_and_survives_a_restart(tmp_path):
    from . import consumer_assignment, join_new, sync

    broker = Broker(tmp_path)
    broker.topics.add("t", 2)
    t = broker.topics.get("t").topic_id

    async def upgrade():
        joined = await join_new(broker, "up")
        assert joined.error_code == NONE and joined.leader == joined.member_id
        synced = await sync(broker, "up", joined.generation_id, joined.member_id,
                            {joined.member_id: consumer_assignment({"t": [0, 1]})})
        assert synced.error_code == NONE
        new = await join_consumer(broker, "n", group="up")
        assert (new.error_code, new.error_message, new.member_epoch) == (NONE, None, joined.generation_id + 1)
        assert assigned(new) == {}
        group = broker.consumer_groups.group("up")
        classic = group.members[joined.member_id]
        assert classic.classic is not None and dict(classic.assigned) == {t: frozenset({0, 1})}
        return joined.member_id

    classic_id = run(upgrade())
    broker = broker.reopen()
    member = broker.consumer_groups.group("up").members[classic_id]
    assert member.classic is not None and member.classic.protocols[0][0] == "range"

    async def after_restart():
        # The classic member is told to join again; it gives up a partition and the new one gets it.
        rejoined = await join(broker, "up", classic_id)
        assert rejoined.error_code == NONE and rejoined.leader == ""
        synced = await sync(broker, "up", rejoined.generation_id, classic_id)
        body = messages.ConsumerProtocolAssignment.decode(memoryview(synced.assignment)[2:], 0)
        kept = [p for tp in body.assigned_partitions for p in tp.partitions]
        assert len(kept) == 1
        new = await heartbeat(broker, "n", 2, owned={}, group="up")
        assert (new.error_code, new.error_message, new.member_epoch) == (NONE, None, 2)
        assert assigned(new) == {t: [1 - kept[0]]}

    run(after_restart())
    broker.close()


def test_a_classic_group_in_the_middle_of_a_rebalance_is_upgraded(tmp_path):
    """Kafka's convertToConsumerGroup takes a classic group in any state: a JoinGroup parked in
    the rebalance under way is answered REBALANCE_IN_PROGRESS, and its member, now in the
    consumer group, joins again and is answered at once."""
    import asyncio

    from . import consumer_assignment, join_new, sync

    broker = Broker(tmp_path)
    broker.topics.add("t", 2)

    async def scenario():
        a = await join_new(broker, "mid", client_id="a")
        assert (await sync(broker, "mid", a.generation_id, a.member_id,
                           {a.member_id: consumer_assignment({"t": [0, 1]})})).error_code == NONE
        # b's join starts a rebalance and waits for a to join again, which it never does.
        parked = asyncio.ensure_future(join_new(broker, "mid", client_id="b"))
        for _ in range(50):
            await asyncio.sleep(0)
        assert broker.coordinator.group("mid").state.value == "PreparingRebalance"
        new = await join_consumer(broker, "n", group="mid")
        assert (new.error_code, new.member_epoch) == (NONE, a.generation_id + 1)
        b = await asyncio.wait_for(parked, 5)
        assert b.error_code == RebalanceInProgressError.code
        group = broker.consumer_groups.group("mid")
        assert sorted(m.classic is not None for m in group) == [False, True, True]
        assert broker.coordinator.group("mid").state.value == "Empty"
        rejoined = await join(broker, "mid", b.member_id, client_id="b")
        assert rejoined.error_code == NONE and rejoined.leader == ""

    run(scenario())
    broker.close()


def test_offsets_of_subscribed_topics_do_not_expire_while_members_read_them(tmp_path):
    broker = Broker(tmp_path, offsets_retention_ms=60_000)
    broker.topics.add("t", 1)
    broker.topics.add("u", 1)

    async def scenario():
        await join_consumer(broker, "a")  # subscribes to t only
        assert await commit(broker, "g", {("t", 0): 5, ("u", 0): 9}, generation=1, member_id="a") == \
            {("t", 0): NONE, ("u", 0): NONE}
        broker.clock.advance(120_000)
        broker.coordinator.expire_offsets()
        assert set(broker.coordinator.group("g").offsets) == {("t", 0)}  # u is nobody's: it expired
        assert (await heartbeat(broker, "a", -1)).error_code == NONE
        broker.clock.advance(120_000)
        broker.coordinator.expire_offsets()
        assert broker.consumer_groups.group("g") is None  # empty, no offsets left: removed too

    run(scenario())
    broker.close()


def test_a_v0_join_without_a_member_id_gets_one():
    import tempfile

    from kwire.broker.coordinator.consumer import ConsumerGroupCoordinator, HeartbeatRequest, Timeouts
    from kwire.broker.topics import TopicRegistry

    registry = TopicRegistry(tempfile.mkdtemp())
    registry.add("t", 1)
    cg = ConsumerGroupCoordinator(registry, timeouts=lambda _g: Timeouts(45_000, 5_000), now_ms=lambda: 0)
    r = cg.heartbeat(HeartbeatRequest("g", "", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], owned={},
                                      api_version=0))
    assert r.member_id and r.member_epoch == 1
