"""The admin client's ACL calls against kwire's broker with an authorizer: a super user creates,
describes and deletes a prefix ACL that lets a user produce to matching topics only; a user
without rights is refused (CLUSTER_AUTHORIZATION_FAILED), a bad binding fails alone
(INVALID_REQUEST), and a broker without an authorizer says SECURITY_DISABLED."""

from __future__ import annotations

import asyncio

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client import Admin, Producer
from kwire.client.admin import AsyncAdmin, NewTopic
from kwire.client.admin_acls import create_request, describe_request, min_binding_version, min_filter_version
from kwire.client.types import RecordMetadata
from kwire.protocol import encode_request
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    SecurityDisabledError,
    TopicAuthorizationFailedError,
)
from kwire.security.acl import AclBinding, AclFilter, AclOperation, PatternType, PermissionType, ResourceType

PASSWORD = "acl-Secret-3-"  # + the user's name
USERS = ("admin", "alice", "bob")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """SASL logins, ACLs enforced, admin a super user; alice and bob have no ACLs to begin with."""
    b = EmbeddedBroker(tmp_path_factory.mktemp("admin-acls") / "data", listeners=["SASL_PLAINTEXT://127.0.0.1:0"],
                       authorizer=True, super_users=["User:admin"], failed_authentication_delay_ms=0)
    for user in USERS:
        b.add_user(user, PASSWORD + user, mechanisms=["SCRAM-SHA-256"])
    with b:
        yield b


def settings(broker: EmbeddedBroker, user: str) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": PASSWORD + user,
            "request.timeout.ms": 10000, "retry.backoff.ms": 20}


def acl(principal: str, operation: AclOperation, name: str, pattern: PatternType = PatternType.LITERAL,
        resource_type: ResourceType = ResourceType.TOPIC) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, PermissionType.ALLOW)


def produce(broker: EmbeddedBroker, user: str, topic: str) -> RecordMetadata:
    with Producer({**settings(broker, user), "acks": "all"}) as producer:
        future = producer.produce(topic, b"v")
        producer.flush(30)
        return future.result(0)


def test_super_user_creates_describes_and_deletes_a_prefix_acl(broker):
    allow = acl("User:alice", AclOperation.WRITE, "app-", PatternType.PREFIXED)
    alices = AclFilter(principal="User:alice")
    with Admin(settings(broker, "admin")) as admin:
        admin.create_topics([NewTopic("app-orders", 1, 1), NewTopic("other-orders", 1, 1)])
        admin.create_acls([allow])
        admin.create_acls([allow])  # already there: no error, no duplicate
        assert admin.describe_acls(alices) == [allow]
        # MATCH: the ACLs that apply to a topic of that name (the prefix covers one, not the other)
        assert admin.describe_acls(AclFilter(ResourceType.TOPIC, "app-orders", PatternType.MATCH)) == [allow]
        assert admin.describe_acls(AclFilter(ResourceType.TOPIC, "other-orders", PatternType.MATCH)) == []
        assert admin.describe_acls(AclFilter(ResourceType.TOPIC, "app-", PatternType.LITERAL)) == []

        assert produce(broker, "alice", "app-orders").offset == 0
        with pytest.raises(TopicAuthorizationFailedError):
            produce(broker, "alice", "other-orders")

        assert admin.delete_acls([alices]) == {alices: [allow]}
        assert admin.describe_acls(alices) == []
        assert admin.delete_acls([alices]) == {alices: []}  # nothing left to match: no error
    with pytest.raises(TopicAuthorizationFailedError):
        produce(broker, "alice", "app-orders")


def test_async_admin_a_bad_binding_fails_alone(broker):
    good = acl("User:bob", AclOperation.READ, "bob-events")
    bad = acl("User:bob", AclOperation.READ, "bob-", PatternType.MATCH)  # MATCH is for filters only
    cluster = acl("User:bob", AclOperation.ALTER, "not-the-cluster", resource_type=ResourceType.CLUSTER)
    bobs = AclFilter(principal="User:bob")

    async def main() -> tuple[BaseException, BaseException, list[AclBinding], dict]:
        async with AsyncAdmin(settings(broker, "admin")) as admin:
            with pytest.raises(InvalidRequestError) as refused:
                await admin.create_acls([bad, good, cluster])
            with pytest.raises(InvalidRequestError) as unknown:
                await admin.describe_acls(AclFilter(operation=AclOperation.UNKNOWN))
            return refused.value, unknown.value, await admin.describe_acls(bobs), await admin.delete_acls([bobs])

    refused, unknown, described, deleted = asyncio.run(asyncio.wait_for(main(), 60))
    assert refused.name == "INVALID_REQUEST"
    # the first failure in the order given, naming the binding and the broker's reason, then the others
    assert "ACL (ALLOW User:bob READ on TOPIC 'bob-' (match) from host *)" in str(refused)
    assert "pattern type MATCH is not allowed" in str(refused)
    assert "also failed: ACL (ALLOW User:bob ALTER on CLUSTER 'not-the-cluster' from host *) (INVALID_REQUEST)" \
        in str(refused)
    assert unknown.name == "INVALID_REQUEST" and "UNKNOWN" in str(unknown)
    assert described == [good]  # the valid one was created all the same
    assert deleted == {bobs: [good]}


def test_a_user_without_rights_may_not_manage_acls(broker):
    mine = [acl("User:bob", AclOperation.WRITE, "bob-"), acl("User:bob", AclOperation.READ, "bob-")]
    with Admin(settings(broker, "bob")) as admin:
        with pytest.raises(ClusterAuthorizationFailedError) as create:
            admin.create_acls(mine)
        with pytest.raises(ClusterAuthorizationFailedError) as describe:
            admin.describe_acls()
        with pytest.raises(ClusterAuthorizationFailedError) as delete:
            admin.delete_acls([AclFilter(principal="User:bob")])
    assert create.value.name == describe.value.name == delete.value.name == "CLUSTER_AUTHORIZATION_FAILED"
    assert "User:bob may not ALTER the cluster's ACLs" in str(create.value)
    assert "also failed: ACL (ALLOW User:bob READ on TOPIC 'bob-' from host *)" in str(create.value)
    assert "User:bob may not DESCRIBE" in str(describe.value)
    with Admin(settings(broker, "admin")) as admin:
        assert admin.describe_acls(AclFilter(principal="User:bob")) == []  # nothing was created


def test_without_an_authorizer_the_acl_calls_say_security_disabled(tmp_path):
    anything = AclFilter()
    with EmbeddedBroker(tmp_path / "data") as plain, \
            Admin({"bootstrap.servers": plain.bootstrap, "request.timeout.ms": 10000}) as admin:
        with pytest.raises(SecurityDisabledError) as create:
            admin.create_acls([acl("User:bob", AclOperation.READ, "t")])
        with pytest.raises(SecurityDisabledError) as describe:
            admin.describe_acls(anything)
        with pytest.raises(SecurityDisabledError) as delete:
            admin.delete_acls([anything])
    for refused in (create, describe, delete):
        assert refused.value.name == "SECURITY_DISABLED" and "No Authorizer" in str(refused.value)
    assert "ACL filter (everything)" in str(delete.value)


def test_version_0_carries_literal_patterns_only():
    literal = acl("User:bob", AclOperation.READ, "t")
    prefixed = acl("User:bob", AclOperation.READ, "t-", PatternType.PREFIXED)
    assert (min_binding_version([literal]), min_binding_version([literal, prefixed])) == (0, 1)
    any_pattern = AclFilter(ResourceType.TOPIC, "t")
    assert min_filter_version([any_pattern, AclFilter(pattern=PatternType.LITERAL)]) == 0
    assert min_filter_version([AclFilter(ResourceType.TOPIC, "t", PatternType.MATCH)]) == 1
    # At v0 an ANY filter goes out as LITERAL (the v0 encoder refuses any other pattern value).
    assert describe_request(any_pattern, 0).pattern_type_filter == PatternType.LITERAL
    assert describe_request(any_pattern, 1).pattern_type_filter == PatternType.ANY
    assert encode_request(describe_request(any_pattern, 0), 0, 1, client_id="t")
    assert encode_request(create_request([literal], 0), 0, 1, client_id="t")
