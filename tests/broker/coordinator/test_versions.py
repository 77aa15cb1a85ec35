"""Every group handler at every version it is registered for, answering with and without errors.

``call`` encodes each response at the request's version and checks nothing was lost, so a
field set that the version can't carry fails here.
"""

from __future__ import annotations

import pytest

from kwire.broker.handlers import HANDLERS
from kwire.protocol import errors, messages

from . import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
    Broker,
    call,
    commit,
    heartbeat,
    join,
    join_new,
    leave,
    run,
    stable_group,
    sync,
)

NONE = 0
EXPECTED_RANGES = {
    OFFSET_COMMIT: (0, 10), OFFSET_FETCH: (0, 10), FIND_COORDINATOR: (0, 6), JOIN_GROUP: (0, 9), HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5), SYNC_GROUP: (0, 5), DESCRIBE_GROUPS: (0, 6), LIST_GROUPS: (0, 5), DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
}


def test_registered_version_ranges():
    for key, expected in EXPECTED_RANGES.items():
        entry = HANDLERS[key]
        assert entry.fn.__module__ == "kwire.broker.handlers.groups"
        assert (entry.min_version, entry.max_version) == expected


def _broker(tmp_path) -> Broker:
    broker = Broker(tmp_path)
    broker.topics.add("t", 2)
    return broker


async def _join_group(broker: Broker, v: int) -> None:
    first = await join(broker, "g", version=v)
    if v >= 4:
        assert first.error_code == errors.MemberIdRequiredError.code
        first = await join(broker, "g", first.member_id, version=v)
    assert (first.error_code, first.generation_id, first.leader) == (NONE, 1, first.member_id)
    assert first.protocol_name == "range" and len(first.members) == 1
    assert first.protocol_type == ("consumer" if v >= 7 else None)
    assert (await join(broker, "g", version=v, session_ms=1)).error_code == errors.InvalidSessionTimeoutError.code
    assert (await join(broker, "g", version=v, protocol_type="other")).error_code == \
        errors.InconsistentGroupProtocolError.code
    if v >= 5:
        static = await join(broker, "s", version=v, instance_id="i")
        assert static.error_code == NONE and static.members[0].group_instance_id == "i"


async def _sync_group(broker: Broker, v: int) -> None:
    j = await join_new(broker, "g")
    ok = await sync(broker, "g", j.generation_id, j.member_id, {j.member_id: b"a"}, version=v)
    assert (ok.error_code, ok.assignment) == (NONE, b"a")
    assert (ok.protocol_type, ok.protocol_name) == (("consumer", "range") if v >= 5 else (None, None))
    bad = await sync(broker, "g", j.generation_id + 1, j.member_id, version=v)
    assert (bad.error_code, bad.assignment) == (errors.IllegalGenerationError.code, b"")


async def _heartbeat(broker: Broker, v: int) -> None:
    (j,) = await stable_group(broker, "g", 1)
    assert await heartbeat(broker, "g", j.generation_id, j.member_id, version=v) == NONE
    assert await heartbeat(broker, "g", j.generation_id, "x", version=v) == errors.UnknownMemberIdError.code


async def _leave_group(broker: Broker, v: int) -> None:
    (j,) = await stable_group(broker, "g", 1)
    assert (await leave(broker, "g", [("x", None)], version=v)).error_code == \
        (NONE if v >= 3 else errors.UnknownMemberIdError.code)
    assert (await leave(broker, "g", [(j.member_id, None)], version=v)).error_code == NONE
    assert (await leave(broker, "", [("x", None)], version=v)).error_code == errors.InvalidGroupIdError.code


async def _offset_commit(broker: Broker, v: int) -> None:
    R = messages.OffsetCommitRequest
    P = R.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    partitions = [P(partition_index=0, committed_offset=5, committed_metadata="m"),
                  P(partition_index=9, committed_offset=5, committed_metadata=None)]
    topic = R.OffsetCommitRequestTopic(topic_id=broker.topics.get("t").topic_id, partitions=partitions) if v >= 10 \
        else R.OffsetCommitRequestTopic(name="t", partitions=partitions)
    resp = await call(broker, R(group_id="g", topics=[topic]), v)
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (0, NONE), (9, errors.UnknownTopicOrPartitionError.code)]
    if v >= 1:
        (j,) = await stable_group(broker, "m", 1)
        req = R(group_id="m", generation_id_or_member_epoch=j.generation_id + 1, member_id=j.member_id, topics=[topic])
        resp = await call(broker, req, v)
        assert resp.topics[0].partitions[0].error_code == errors.IllegalGenerationError.code


async def _offset_fetch(broker: Broker, v: int) -> None:
    await commit(broker, "g", {("t", 0): 5}, metadata="m")
    R = messages.OffsetFetchRequest
    t_id = broker.topics.get("t").topic_id
    if v < 8:
        resp = await call(broker, R(group_id="g", topics=[R.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]),
                          v)
        got = [(p.partition_index, p.committed_offset, p.metadata) for p in resp.topics[0].partitions]
        if v >= 2:
            everything = await call(broker, R(group_id="g", topics=None), v)
            assert [t.name for t in everything.topics] == ["t"]
    else:
        G = R.OffsetFetchRequestGroup
        topic = G.OffsetFetchRequestTopics(topic_id=t_id, partition_indexes=[0, 1]) if v >= 10 \
            else G.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])
        resp = await call(broker, R(groups=[G(group_id="g", topics=[topic]), G(group_id="h", topics=None)]), v)
        got = [(p.partition_index, p.committed_offset, p.metadata) for p in resp.groups[0].topics[0].partitions]
        assert resp.groups[1].topics == []
    assert got == [(0, 5, "m"), (1, -1, "")]


async def _find_coordinator(broker: Broker, v: int) -> None:
    R = messages.FindCoordinatorRequest
    if v >= 4:
        resp = await call(broker, R(key_type=0, coordinator_keys=["g"]), v)
        assert resp.coordinators[0].node_id == broker.config.node_id
    else:
        resp = await call(broker, R(key="g"), v)
        assert (resp.error_code, resp.node_id) == (NONE, broker.config.node_id)
    if v >= 1:
        req = R(key_type=1, coordinator_keys=["tx"]) if v >= 4 else R(key="tx", key_type=1)
        resp = await call(broker, req, v)
        code, node = (resp.coordinators[0].error_code, resp.coordinators[0].node_id) if v >= 4 \
            else (resp.error_code, resp.node_id)
        assert (code, node) == (NONE, broker.config.node_id)


async def _describe_groups(broker: Broker, v: int) -> None:
    await stable_group(broker, "g", 1, version=5, instance_id="i")
    R = messages.DescribeGroupsRequest
    resp = await call(broker, R(groups=["g", "unknown"], include_authorized_operations=v >= 3), v)
    g, unknown = resp.groups
    assert (g.group_state, len(g.members)) == ("Stable", 1)
    assert g.members[0].group_instance_id == ("i" if v >= 4 else None)
    assert unknown.error_code == (errors.GroupIdNotFoundError.code if v >= 6 else NONE)
    assert g.authorized_operations == (328 if v >= 3 else -(2**31))


async def _list_groups(broker: Broker, v: int) -> None:
    await stable_group(broker, "g", 1)
    resp = await call(broker, messages.ListGroupsRequest(), v)
    assert [(g.group_id, g.protocol_type) for g in resp.groups] == [("g", "consumer")]


async def _delete_groups(broker: Broker, v: int) -> None:
    await commit(broker, "g", {("t", 0): 1})
    resp = await call(broker, messages.DeleteGroupsRequest(groups_names=["g", "g"]), v)
    assert [(r.group_id, r.error_code) for r in resp.results] == [("g", NONE)]


async def _offset_delete(broker: Broker, v: int) -> None:
    await commit(broker, "g", {("t", 0): 1})
    R = messages.OffsetDeleteRequest
    T = R.OffsetDeleteRequestTopic
    resp = await call(broker, R(group_id="g", topics=[T(name="t", partitions=[
        T.OffsetDeleteRequestPartition(partition_index=0), T.OffsetDeleteRequestPartition(partition_index=7)])]), v)
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (0, NONE), (7, errors.UnknownTopicOrPartitionError.code)]
    assert (await call(broker, R(group_id="none", topics=[]), v)).error_code == errors.GroupIdNotFoundError.code


SCENARIOS = {
    JOIN_GROUP: _join_group, SYNC_GROUP: _sync_group, HEARTBEAT: _heartbeat, LEAVE_GROUP: _leave_group,
    OFFSET_COMMIT: _offset_commit, OFFSET_FETCH: _offset_fetch, FIND_COORDINATOR: _find_coordinator,
    DESCRIBE_GROUPS: _describe_groups, LIST_GROUPS: _list_groups, DELETE_GROUPS: _delete_groups,
    OFFSET_DELETE: _offset_delete,
}
CASES = [(key, v) for key, (lo, hi) in EXPECTED_RANGES.items() for v in range(lo, hi + 1)]


@pytest.mark.parametrize(("api_key", "version"), CASES,
                         ids=[f"{SCENARIOS[k].__name__.strip('_')}-v{v}" for k, v in CASES])
def test_every_version_answers(tmp_path, api_key, version):
    run(SCENARIOS[api_key](_broker(tmp_path), version))
