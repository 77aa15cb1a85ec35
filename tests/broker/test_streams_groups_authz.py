"""Streams groups under an authorizer, as Kafka's KafkaApis checks them: READ on the group to
heartbeat, DESCRIBE on every topic the topology names, CREATE (cluster, else each topic) for the
internal topics the broker creates, DESCRIBE on the group to describe it."""

from __future__ import annotations

import pytest

from kwire.broker.auth import AclOperation, AclStore, ResourceType
from kwire.broker.config import load_config
from kwire.broker.state import BrokerState
from kwire.protocol import messages
from kwire.protocol.errors import ErrorCode, GroupAuthorizationFailedError, TopicAuthorizationFailedError
from tests.security.test_handler_authz import _acl, call

from .test_streams_group_clients import topology

HB = messages.StreamsGroupHeartbeatRequest
MISSING_INTERNAL_TOPICS = 3


@pytest.fixture
def state(tmp_path):
    store = AclStore(tmp_path / "data")
    for user in ("User:app", "User:creator"):
        store.add([_acl(user, AclOperation.READ, ResourceType.GROUP, "app"),
                   _acl(user, AclOperation.DESCRIBE, ResourceType.TOPIC, "input"),
                   _acl(user, AclOperation.DESCRIBE, ResourceType.TOPIC, "app-store-changelog")])
    store.add([_acl("User:creator", AclOperation.CREATE, ResourceType.TOPIC, "app-store-changelog"),
               _acl("User:blind", AclOperation.READ, ResourceType.GROUP, "app")])
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    s.topics.add("input", 2)
    yield s
    s.close()


def join(member: str):
    return HB(group_id="app", member_id=member, member_epoch=0, endpoint_information_epoch=-1, rebalance_timeout_ms=1000,
              topology=topology(), active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id=f"p-{member}")


def test_heartbeats_need_read_on_the_group_and_describe_on_the_topics(state):
    assert call(state, "User:nobody", join("a"), 0).error_code == GroupAuthorizationFailedError.code
    blind = call(state, "User:blind", join("a"), 0)
    assert blind.error_code == TopicAuthorizationFailedError.code
    assert blind.error_message == "Unauthorized to DESCRIBE on topics app-store-changelog, input."
    assert state.streams_groups.group("app") is None


def test_internal_topics_are_created_only_with_create_rights(state):
    refused = call(state, "User:app", join("a"), 0)
    assert refused.error_code == ErrorCode.NONE
    [status] = refused.status
    assert status.status_code == MISSING_INTERNAL_TOPICS
    assert status.status_detail.endswith("Unauthorized to CREATE on topics app-store-changelog.")
    assert state.topics.get("app-store-changelog") is None
    created = call(state, "User:creator", join("b"), 0)
    assert [s.status_code for s in created.status] == [MISSING_INTERNAL_TOPICS]
    assert state.topics.get("app-store-changelog").partitions == 2


def test_describe_needs_describe_on_the_group(state):
    D = messages.StreamsGroupDescribeRequest
    [denied] = call(state, "User:nobody", D(group_ids=["app"], include_authorized_operations=False), 0).groups
    assert denied.error_code == GroupAuthorizationFailedError.code
    call(state, "User:creator", join("a"), 0)
    [group] = call(state, "User:admin", D(group_ids=["app"], include_authorized_operations=True), 0).groups
    assert group.error_code == ErrorCode.NONE and group.authorized_operations > 0
