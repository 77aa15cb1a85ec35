"""FindCoordinator, DescribeGroups, ListGroups, DeleteGroups and OffsetDelete."""

from __future__ import annotations

import asyncio

from kwire.protocol import errors, messages

from . import (
    Broker,
    call,
    commit,
    consumer_metadata,
    describe,
    fetch,
    join,
    join_new,
    run,
    stable_group,
    sync,
)

NONE = 0


def test_find_coordinator_answers_this_broker_for_groups_and_transactions(tmp_path):
    broker = Broker(tmp_path, node_id=7, advertised_host="kafka.local", advertised_port=19092)
    R = messages.FindCoordinatorRequest

    async def scenario():
        for version in range(0, 4):
            resp = await call(broker, R(key="g", key_type=0), version)
            assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 7, "kafka.local", 19092)
        for version in range(1, 4):
            txn = await call(broker, R(key="tx", key_type=1), version)
            assert (txn.error_code, txn.node_id, txn.host, txn.port) == (0, 7, "kafka.local", 19092)
        for version in range(4, 7):
            resp = await call(broker, R(key_type=0, coordinator_keys=["a", "b"]), version)
            assert [(c.key, c.node_id, c.host, c.port, c.error_code, c.error_message) for c in resp.coordinators] == [
                ("a", 7, "kafka.local", 19092, 0, None), ("b", 7, "kafka.local", 19092, 0, None)]
            resp = await call(broker, R(key_type=1, coordinator_keys=["tx", "ty"]), version)
            assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in resp.coordinators] == [
                ("tx", 7, "kafka.local", 19092, 0), ("ty", 7, "kafka.local", 19092, 0)]
        share = await call(broker, R(key_type=2, coordinator_keys=["g:topic:0"]), 6)
        assert share.coordinators[0].error_code == errors.InvalidRequestError.code

    run(scenario())


def test_describe_groups(tmp_path):
    broker = Broker(tmp_path)
    R = messages.DescribeGroupsRequest

    async def scenario():
        # A group the broker doesn't know: Dead without an error before v6, GROUP_ID_NOT_FOUND in v6.
        for version in range(0, 6):
            g = await describe(broker, "nope", version=version)
            assert (g.error_code, g.group_id, g.group_state, g.members) == (NONE, "nope", "Dead", [])
        g = await describe(broker, "nope", version=6)
        assert (g.error_code, g.group_id) == (errors.GroupIdNotFoundError.code, "nope")
        assert "nope" in g.error_message

        a = await join(broker, "g", version=5, instance_id="i-a", topics=["t1"])
        await sync(broker, "g", a.generation_id, a.member_id, {a.member_id: b"assigned"})
        resp = await call(broker, R(groups=["g"], include_authorized_operations=True), 5)
        (g,) = resp.groups
        assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
        assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE
        (m,) = g.members
        assert (m.member_id, m.group_instance_id, m.client_id, m.client_host) == (a.member_id, "i-a", "c", "/127.0.0.1")
        assert (m.member_metadata, m.member_assignment) == (consumer_metadata(["t1"]), b"assigned")
        assert (await call(broker, R(groups=["g"]), 3)).groups[0].authorized_operations == -(2**31)
        assert (await describe(broker, "g", version=3)).members[0].group_instance_id is None  # v4+ only

        # Outside Stable, members are listed without metadata or assignment, and no protocol.
        rejoin = asyncio.ensure_future(join_new(broker, "g", client_id="b"))
        await asyncio.sleep(0)
        g = await describe(broker, "g")
        assert (g.group_state, g.protocol_data) == ("PreparingRebalance", "")
        assert [(m.member_metadata, m.member_assignment) for m in g.members] == [(b"", b""), (b"", b"")]
        rejoin.cancel()

    run(scenario())


def test_list_groups_with_state_and_type_filters(tmp_path):
    broker = Broker(tmp_path)
    broker.topics.add("t", 1)
    R = messages.ListGroupsRequest

    async def scenario():
        await stable_group(broker, "stable", 1)
        await join_new(broker, "completing")
        await commit(broker, "offsets-only", {("t", 0): 1})

        def listed(resp):
            return [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in resp.groups]

        assert listed(await call(broker, R(), 0)) == [
            ("completing", "consumer", "", ""), ("offsets-only", "", "", ""), ("stable", "consumer", "", "")]
        assert listed(await call(broker, R(), 4)) == [
            ("completing", "consumer", "CompletingRebalance", ""), ("offsets-only", "", "Empty", ""),
            ("stable", "consumer", "Stable", "")]
        assert listed(await call(broker, R(states_filter=["stable", "Empty"]), 4)) == [
            ("offsets-only", "", "Empty", ""), ("stable", "consumer", "Stable", "")]
        assert [g[3] for g in listed(await call(broker, R(types_filter=["Classic"]), 5))] == ["classic"] * 3
        assert listed(await call(broker, R(types_filter=["consumer"]), 5)) == []

    run(scenario())


def test_delete_groups(tmp_path):
    broker = Broker(tmp_path)
    broker.topics.add("t", 1)
    R = messages.DeleteGroupsRequest

    async def scenario():
        await stable_group(broker, "busy", 1)
        await commit(broker, "idle", {("t", 0): 5})
        for version in range(0, 3):
            resp = await call(broker, R(groups_names=["busy", "missing", "busy"]), version)
            assert [(r.group_id, r.error_code) for r in resp.results] == [
                ("busy", errors.NonEmptyGroupError.code), ("missing", errors.GroupIdNotFoundError.code)]
        resp = await call(broker, R(groups_names=["idle"]), 2)
        assert [(r.group_id, r.error_code) for r in resp.results] == [("idle", NONE)]
        assert (await describe(broker, "idle")).group_state == "Dead"
        assert await fetch(broker, "idle", {"t": [0]}) == {("t", 0): (-1, -1, "", NONE)}
        resp = await call(broker, R(groups_names=["idle"]), 2)
        assert resp.results[0].error_code == errors.GroupIdNotFoundError.code

    run(scenario())


def _offset_delete(group_id: str, partitions: dict[str, list[int]]):
    R = messages.OffsetDeleteRequest
    T = R.OffsetDeleteRequestTopic
    return R(group_id=group_id, topics=[T(name=t, partitions=[T.OffsetDeleteRequestPartition(partition_index=p)
                                                              for p in ps]) for t, ps in partitions.items()])


def _partition_errors(resp) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def test_offset_delete(tmp_path):
    broker = Broker(tmp_path)
    for name in ("read", "unread"):
        broker.topics.add(name, 2)

    async def scenario():
        assert (await call(broker, _offset_delete("", {"read": [0]}), 0)).error_code == \
            errors.InvalidGroupIdError.code
        resp = await call(broker, _offset_delete("nope", {"read": [0]}), 0)
        assert (resp.error_code, resp.topics) == (errors.GroupIdNotFoundError.code, [])

        # An empty group: anything goes.
        await commit(broker, "empty", {("read", 0): 1, ("read", 1): 2})
        resp = await call(broker, _offset_delete("empty", {"read": [0], "nope": [0]}), 0)
        assert resp.error_code == NONE
        assert _partition_errors(resp) == {("read", 0): NONE, ("nope", 0): errors.UnknownTopicOrPartitionError.code}
        assert await fetch(broker, "empty", None) == {("read", 1): (2, -1, "", NONE)}

        # A consumer group with members: topics they subscribe to are protected.
        (a,) = await stable_group(broker, "active", 1, topics=["read"])
        await commit(broker, "active", {("read", 0): 1, ("unread", 0): 2}, generation=a.generation_id,
                     member_id=a.member_id)
        resp = await call(broker, _offset_delete("active", {"read": [0], "unread": [0, 5]}), 0)
        assert resp.error_code == NONE
        assert _partition_errors(resp) == {("read", 0): errors.GroupSubscribedToTopicError.code,
                                           ("unread", 0): NONE,
                                           ("unread", 5): errors.UnknownTopicOrPartitionError.code}
        assert await fetch(broker, "active", None) == {("read", 0): (1, -1, "", NONE)}

        # Members whose protocol isn't the consumer's: the broker can't tell what they read.
        md = b"\x00\x01"
        await stable_group(broker, "connect", 1, protocol_type="connect", protocols=[("default", md)])
        resp = await call(broker, _offset_delete("connect", {"read": [0]}), 0)
        assert (resp.error_code, resp.topics) == (errors.NonEmptyGroupError.code, [])

        # Deleting the last offsets of an empty group deletes the group.
        await call(broker, _offset_delete("empty", {"read": [1]}), 0)
        assert broker.coordinator.group("empty") is None

    run(scenario())
