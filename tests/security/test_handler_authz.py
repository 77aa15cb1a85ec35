"""Every handler's authorization, request by request through dispatch (no sockets): with an authorizer,
the principal of the connection's Session decides, with Kafka's error codes."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from kwire.broker.auth import AclOperation, AclStore, PatternType, PermissionType, ResourceType
from kwire.broker.auth.acls import AclBinding
from kwire.broker.auth.sasl import Session
from kwire.broker.config import load_config
from kwire.broker.dispatch import Reply, dispatch
from kwire.broker.state import BrokerState
from kwire.protocol import SplicedBytes, encode_request, messages
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from kwire.protocol.frames import decode_response

Op, Res = AclOperation, ResourceType
TOPIC_DENIED, GROUP_DENIED = TopicAuthorizationFailedError.code, GroupAuthorizationFailedError.code
CLUSTER_DENIED = ClusterAuthorizationFailedError.code


def _acl(principal, op, rtype, name, pattern=PatternType.LITERAL):
    return AclBinding(rtype, name, pattern, principal, "*", op, PermissionType.ALLOW)


@pytest.fixture
def state(tmp_path):
    AclStore(tmp_path / "data").add([
        _acl("User:reader", Op.READ, Res.TOPIC, "t"), _acl("User:reader", Op.READ, Res.GROUP, "g"),
        _acl("User:describer", Op.DESCRIBE, Res.GROUP, "g"), _acl("User:describer", Op.DESCRIBE, Res.TOPIC, "t"),
    ])
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    yield s
    s.close()


def call(state, principal: str, request, version: int):
    session = Session(state.security, listener="SASL_PLAINTEXT", sasl=False, peer="127.0.0.1:5000",
                      principal=principal)
    frame = encode_request(request, version, 1, client_id="t")[4:]
    result = dispatch(state, frame, client_host="127.0.0.1:5000", connection_id=1, session=session)
    if inspect.isawaitable(result):
        result = asyncio.run(_wait(result))
    assert isinstance(result, Reply)
    data = b"".join(p.read() if isinstance(p, SplicedBytes) else p for p in result.parts)
    return decode_response(data[4:], result.api_key, result.api_version)[1]


async def _wait(awaitable):
    return await awaitable


def _create(state, name="t"):
    R = messages.CreateTopicsRequest
    resp = call(state, "User:admin", R(topics=[R.CreatableTopic(name=name, num_partitions=1, replication_factor=1,
                                                                 assignments=[], configs=[])], timeout_ms=1000), 5)
    assert resp.topics[0].error_code == 0


def test_topic_admin(state):
    R = messages.CreateTopicsRequest
    resp = call(state, "User:reader", R(topics=[R.CreatableTopic(name="x", num_partitions=1, replication_factor=1,
                                                                  assignments=[], configs=[])], timeout_ms=1000), 5)
    assert resp.topics[0].error_code == TOPIC_DENIED and "x" not in state.topics
    _create(state)
    P = messages.CreatePartitionsRequest
    resp = call(state, "User:reader", P(topics=[P.CreatePartitionsTopic(name="t", count=2, assignments=None)],
                                        timeout_ms=1000, validate_only=False), 1)
    assert resp.results[0].error_code == TOPIC_DENIED
    resp = call(state, "User:reader", messages.DeleteTopicsRequest(topic_names=["t"], timeout_ms=1000), 1)
    assert resp.responses[0].error_code == TOPIC_DENIED and "t" in state.topics
    D = messages.DescribeConfigsRequest
    resp = call(state, "User:reader", D(resources=[
        D.DescribeConfigsResource(resource_type=2, resource_name="t", configuration_keys=None),
        D.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None)],
        include_synonyms=False), 1)
    assert [r.error_code for r in resp.results] == [TOPIC_DENIED, CLUSTER_DENIED]
    resp = call(state, "User:admin", D(resources=[
        D.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None)],
        include_synonyms=False), 1)
    assert resp.results[0].error_code == 0


def test_offsets_and_records(state):
    _create(state)
    L = messages.ListOffsetsRequest
    req = L(replica_id=-1, topics=[L.ListOffsetsTopic(name="t", partitions=[
        L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    assert call(state, "User:nobody", req, 1).topics[0].partitions[0].error_code == TOPIC_DENIED
    assert call(state, "User:reader", req, 1).topics[0].partitions[0].error_code == 0  # READ implies DESCRIBE
    R = messages.DeleteRecordsRequest
    resp = call(state, "User:reader", R(topics=[R.DeleteRecordsTopic(name="t", partitions=[
        R.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=1000), 1)
    assert resp.topics[0].partitions[0].error_code == TOPIC_DENIED


def test_metadata_by_topic_id_does_not_reveal_the_name(state):
    _create(state)
    M = messages.MetadataRequest
    req = M(topics=[M.MetadataRequestTopic(topic_id=state.topics.get("t").topic_id, name=None)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    denied = call(state, "User:nobody", req, 12).topics[0]
    assert denied.error_code == TOPIC_DENIED and denied.name is None and not denied.partitions
    assert call(state, "User:reader", req, 12).topics[0].name == "t"
    # auto-creation needs CREATE: reader may describe "new" (no: only t) -> denied; admin creates it
    req = M(topics=[M.MetadataRequestTopic(name="new")], allow_auto_topic_creation=True,
            include_topic_authorized_operations=False)
    assert call(state, "User:reader", req, 12).topics[0].error_code == TOPIC_DENIED and "new" not in state.topics
    assert call(state, "User:admin", req, 12).topics[0].error_code == 0 and "new" in state.topics


def test_groups(state):
    F = messages.FindCoordinatorRequest
    assert call(state, "User:nobody", F(key="g", key_type=0), 3).error_code == GROUP_DENIED
    assert call(state, "User:describer", F(key="g", key_type=0), 3).error_code == 0
    txn = call(state, "User:nobody", F(key="tx", key_type=1), 3)
    assert txn.error_code == TransactionalIdAuthorizationFailedError.code
    for principal, code in (("User:describer", GROUP_DENIED), ("User:reader", 0)):  # READ needed to take part
        hb = call(state, principal, messages.HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 3)
        assert (hb.error_code == GROUP_DENIED) == (code != 0)
        sync = call(state, principal, messages.SyncGroupRequest(group_id="g", generation_id=1, member_id="m",
                                                                assignments=[]), 3)
        assert (sync.error_code == GROUP_DENIED) == (code != 0)
        L = messages.LeaveGroupRequest
        leave = call(state, principal, L(group_id="g", members=[L.MemberIdentity(member_id="m")]), 3)
        assert (leave.error_code == GROUP_DENIED) == (code != 0)
    OF = messages.OffsetFetchRequest
    fetch = call(state, "User:nobody", OF(group_id="g", topics=None), 5)
    assert fetch.error_code == GROUP_DENIED
    G = messages.OffsetFetchRequest.OffsetFetchRequestGroup
    fetch = call(state, "User:describer", OF(groups=[G(group_id="g", topics=None), G(group_id="other", topics=None)],
                                            require_stable=False), 8)
    assert [g.error_code for g in fetch.groups] == [0, GROUP_DENIED]
    D = messages.DescribeGroupsRequest
    described = call(state, "User:describer", D(groups=["g", "h"], include_authorized_operations=True), 5)
    assert [g.error_code for g in described.groups] == [0, GROUP_DENIED]
    deleted = call(state, "User:describer", messages.DeleteGroupsRequest(groups_names=["g"]), 2)
    assert deleted.results[0].error_code == GROUP_DENIED


def test_list_groups_shows_only_describable_groups(state):
    _create(state)
    C = messages.OffsetCommitRequest
    for group in ("g", "h"):  # two groups with offsets (as the admin)
        resp = call(state, "User:admin", C(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            C.OffsetCommitRequestTopic(name="t", partitions=[
                C.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]), 8)
        assert resp.topics[0].partitions[0].error_code == 0
    listed = lambda who: sorted(g.group_id for g in call(state, who, messages.ListGroupsRequest(), 4).groups)  # noqa: E731
    assert listed("User:admin") == ["g", "h"]
    assert listed("User:describer") == ["g"]
    assert listed("User:nobody") == []
    # committing needs READ on the group and on the topic
    resp = call(state, "User:describer", C(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        C.OffsetCommitRequestTopic(name="t", partitions=[
            C.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), 8)
    assert resp.topics[0].partitions[0].error_code == GROUP_DENIED


def test_init_producer_id(state):
    I = messages.InitProducerIdRequest  # noqa: E741
    assert call(state, "User:reader", I(transactional_id=None, transaction_timeout_ms=-1), 1).error_code == \
        CLUSTER_DENIED  # READ only: no WRITE anywhere, no IDEMPOTENT_WRITE
    assert call(state, "User:nobody", I(transactional_id="tx", transaction_timeout_ms=1000), 1).error_code == \
        TransactionalIdAuthorizationFailedError.code
    assert call(state, "User:admin", I(transactional_id=None, transaction_timeout_ms=-1), 1).error_code == 0


def test_acl_apis(state):
    C = messages.CreateAclsRequest
    good = C.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:x", host="*",
                         operation=3, permission_type=3)
    bad = C.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=2, principal="User:x", host="*",
                        operation=3, permission_type=3)  # MATCH is a filter, not a pattern
    assert call(state, "User:reader", C(creations=[good]), 2).results[0].error_code == CLUSTER_DENIED
    resp = call(state, "User:admin", C(creations=[good, bad]), 2)
    assert [r.error_code for r in resp.results] == [0, InvalidRequestError.code]
    D = messages.DescribeAclsRequest
    described = call(state, "User:admin", D(resource_type_filter=2, resource_name_filter="t", pattern_type_filter=2,
                                            principal_filter=None, host_filter=None, operation=1,
                                            permission_type=1), 2)
    assert sorted(a.principal for r in described.resources for a in r.acls) == ["User:describer", "User:reader",
                                                                                 "User:x"]
    X = messages.DeleteAclsRequest
    deleted = call(state, "User:admin", X(filters=[X.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter="User:x",
        host_filter=None, operation=1, permission_type=1)]), 2)
    assert [m.principal for m in deleted.filter_results[0].matching_acls] == ["User:x"]
    assert len(state.security.acls.bindings()) == 4
