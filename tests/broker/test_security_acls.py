"""ACLs enforced by kwire's broker (authorizer = true), judged by real clients and raw requests.

A principal allowed on a topic prefix produces and consumes with its group; one without ACLs cannot
produce, fetch, join the group or even see the topic (Metadata hides it); a deny wins over an allow;
super users bypass ACLs; ACLs made online (CreateAcls from confluent-kafka's admin client) or offline
(``kwire acls`` while the broker runs) take effect at once and survive a restart.
"""

from __future__ import annotations

import subprocess
import sys
import time

import confluent_kafka
import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kwire.broker import EmbeddedBroker
from kwire.broker.auth import AclStore
from kwire.broker.auth.acls import AclBinding as KAcl
from kwire.broker.auth.acls import AclOperation as Op
from kwire.broker.auth.acls import PatternType, PermissionType
from kwire.broker.auth.acls import ResourceType as Res
from kwire.protocol import messages
from kwire.protocol.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from tests.security.helpers import PASSWORD, RawConnection

from . import clients as c

USERS = ("admin", "alice", "bob", "carol", "mallory")


def _acl(principal, op, rtype, name, pattern=PatternType.LITERAL, permission=PermissionType.ALLOW) -> KAcl:
    return KAcl(rtype, name, pattern, principal, "*", op, permission)


POLICY = [
    _acl("User:alice", Op.ALL, Res.TOPIC, "app-", PatternType.PREFIXED),
    _acl("User:alice", Op.READ, Res.GROUP, "app-", PatternType.PREFIXED),
    _acl("User:carol", Op.WRITE, Res.TOPIC, "app-orders"),
    _acl("User:carol", Op.READ, Res.TOPIC, "app-orders"),
    _acl("User:*", Op.READ, Res.TOPIC, "pub-", PatternType.PREFIXED),
    _acl("User:*", Op.WRITE, Res.TOPIC, "pub-", PatternType.PREFIXED),
    _acl("User:*", Op.READ, Res.GROUP, "pub-", PatternType.PREFIXED),
    _acl("User:mallory", Op.WRITE, Res.TOPIC, "pub-", PatternType.PREFIXED, PermissionType.DENY),
]


def _start(data_dir) -> EmbeddedBroker:
    b = EmbeddedBroker(data_dir, listeners=["SASL_PLAINTEXT://127.0.0.1:0"], authorizer=True,
                       super_users=["User:admin"], failed_authentication_delay_ms=0)
    return b.start()


@pytest.fixture
def broker(tmp_path):
    data = tmp_path / "data"
    AclStore(data).add(POLICY)  # offline, before the broker's first start
    b = EmbeddedBroker(data, listeners=["SASL_PLAINTEXT://127.0.0.1:0"])  # just to reach add_user
    for user in USERS:
        b.add_user(user, PASSWORD + user, mechanisms=["SCRAM-SHA-256"])
    b = _start(data)
    yield b
    b.stop()


def _conf(broker, user: str) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": PASSWORD + user}


def _raw(broker, user: str) -> RawConnection:
    conn = RawConnection(broker.bootstrap)
    conn.login("SCRAM-SHA-256", user, PASSWORD + user)
    return conn


def _produce_errors(conf: dict, topic: str, n: int = 3, **extra) -> list:
    """Delivery results of n records: None for delivered, else the KafkaError."""
    results: list = []
    p = confluent_kafka.Producer({**conf, "message.timeout.ms": 10000, "acks": "all", **extra})
    for i in range(n):
        p.produce(topic, b"v%d" % i, on_delivery=lambda err, msg: results.append(err))
    assert p.flush(30) == 0
    return results


def _consumer_error(conf: dict, group: str, topic: str, timeout: float = 20) -> KafkaError:
    consumer = confluent_kafka.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.3)
            if m is not None and m.error():
                return m.error()
            assert m is None, f"consumed {m.value()!r}"
    finally:
        consumer.close()
    raise AssertionError("the consumer reported no error")


def _create(broker, *topics: str) -> None:
    """Topics made by the super user (nobody else here has CREATE outside app-*)."""
    from confluent_kafka.admin import NewTopic

    admin = AdminClient(_conf(broker, "admin"))  # kept alive until its futures are done
    for future in admin.create_topics([NewTopic(t, 1) for t in topics]).values():
        assert future.result(15) is None


def _seed(broker) -> None:
    """alice creates app-orders (auto-creation needs CREATE, which ALL on the prefix gives) with records."""
    assert _produce_errors(_conf(broker, "alice"), "app-orders") == [None] * 3


def test_allowed_on_prefix_produces_and_consumes(broker):
    conf = _conf(broker, "alice")
    sent = c.records("app-orders", 30)
    # idempotent: InitProducerId needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (alice has it)
    c.confluent_produce(broker.bootstrap, "app-orders", sent, **conf, **{"enable.idempotence": True})
    consumer = c.confluent_consumer(broker.bootstrap, "app-readers", ["app-orders"], **conf)
    got = c.confluent_consume(consumer, 30)
    consumer.commit(asynchronous=False)
    consumer.close()
    c.check_same(sent, got)


def test_denied_principal_cannot_produce_consume_join_or_see(broker):
    _seed(broker)
    bob = _conf(broker, "bob")
    topics = AdminClient(bob).list_topics(timeout=10).topics
    assert "app-orders" not in topics
    errors = _produce_errors(bob, "app-orders")
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    error = _consumer_error(bob, "app-readers", "app-orders")
    assert error.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED), error
    # the same, request by request
    with _raw(broker, "bob") as conn:
        everything = conn.call(messages.MetadataRequest(topics=None), 12)
        assert [t.name for t in everything.topics] == []
        M = messages.MetadataRequest
        named = conn.call(M(topics=[M.MetadataRequestTopic(name="app-orders")], allow_auto_topic_creation=True), 12)
        assert named.topics[0].error_code == TopicAuthorizationFailedError.code and not named.topics[0].partitions
        F = messages.FetchRequest
        fetch = conn.call(F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                            topics=[F.FetchTopic(topic="app-orders", partitions=[F.FetchTopic.FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 11)
        assert fetch.responses[0].partitions[0].error_code == TopicAuthorizationFailedError.code
        assert not fetch.responses[0].partitions[0].records
        J = messages.JoinGroupRequest
        join = conn.call(J(group_id="app-readers", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                           member_id="", protocol_type="consumer",
                           protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")]), 5)
        assert join.error_code == GroupAuthorizationFailedError.code
        C = messages.OffsetCommitRequest
        commit = conn.call(C(group_id="app-readers", generation_id_or_member_epoch=-1, member_id="", topics=[
            C.OffsetCommitRequestTopic(name="app-orders", partitions=[
                C.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=3)])]), 8)
        assert commit.topics[0].partitions[0].error_code == GroupAuthorizationFailedError.code
        # idempotence needs WRITE on some topic, which bob has as User:* on pub-* (as in Kafka 3+)
        init = conn.call(messages.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1), 1)
        assert init.error_code == 0
    assert broker.state.logs.get("app-orders", 0).log_end_offset == 3  # bob wrote nothing


def test_deny_wins_over_allow(broker):
    _create(broker, "pub-news")
    assert _produce_errors(_conf(broker, "alice"), "pub-news") == [None] * 3  # User:* may write pub-*
    errors = _produce_errors(_conf(broker, "mallory"), "pub-news")
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    consumer = c.confluent_consumer(broker.bootstrap, "pub-mallory", ["pub-news"], **_conf(broker, "mallory"))
    assert len(c.confluent_consume(consumer, 3)) == 3  # the deny is on WRITE only: mallory still reads
    consumer.close()


def test_topic_allowed_but_group_denied(broker):
    _seed(broker)
    carol = _conf(broker, "carol")
    assert _produce_errors(carol, "app-orders") == [None] * 3
    error = _consumer_error(carol, "app-readers", "app-orders")
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error


def _binding(principal: str, topic: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", AclOperation.WRITE,
                      AclPermissionType.ALLOW)


def test_super_user_and_online_acls_survive_restart(broker, tmp_path):
    admin_conf = _conf(broker, "admin")
    assert _produce_errors(admin_conf, "anything") == [None] * 3  # super user: no ACL needed
    _create(broker, "bob-topic")
    bob = _conf(broker, "bob")
    errors = _produce_errors(bob, "bob-topic")
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    # bob may not change ACLs
    bob_admin = AdminClient(bob)
    futures = bob_admin.create_acls([_binding("User:bob", "bob-topic")], request_timeout=10)
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        next(iter(futures.values())).result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # the admin may (CreateAcls over the wire), and bob then produces
    admin = AdminClient(admin_conf)
    for future in admin.create_acls([_binding("User:bob", "bob-topic"), _binding("User:bob", "anything")]).values():
        assert future.result(15) is None
    assert _produce_errors(bob, "anything") == [None] * 3
    wanted = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
                              AclPermissionType.ANY)
    assert sorted(b.name for b in admin.describe_acls(wanted).result(15)) == ["anything", "bob-topic"]
    data_dir = broker.data_dir
    broker.stop()
    again = _start(data_dir)
    try:
        admin = AdminClient(_conf(again, "admin"))
        assert sorted(b.name for b in admin.describe_acls(wanted).result(15)) == ["anything", "bob-topic"]
        assert _produce_errors(_conf(again, "bob"), "anything") == [None] * 3
        gone = next(iter(admin.delete_acls([wanted]).values())).result(15)
        assert len(gone) == 2
        errors = _produce_errors(_conf(again, "bob"), "anything")
        assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    finally:
        again.stop()


def test_offline_kwire_acls_apply_to_a_running_broker(broker):
    topic = "pub-orders"
    _create(broker, topic)
    errors = _produce_errors(_conf(broker, "mallory"), topic)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    out = subprocess.run([sys.executable, "-m", "kwire.cli.main", "acls", "remove", "--principal", "User:mallory",
                          "--deny", "--data-dir", str(broker.data_dir)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "removed: DENY User:mallory WRITE" in out.stdout, out.stderr
    assert _produce_errors(_conf(broker, "mallory"), topic) == [None] * 3


def test_without_authorizer_acl_apis_say_security_disabled(tmp_path):
    from kwire.protocol.errors import SecurityDisabledError

    with EmbeddedBroker(tmp_path / "data") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        future = next(iter(admin.create_acls([_binding("User:bob", "t")]).values()))
        with pytest.raises(confluent_kafka.KafkaException) as disabled:
            future.result(15)
        assert disabled.value.args[0].code() == KafkaError.SECURITY_DISABLED
        with RawConnection(b.bootstrap) as conn:
            D = messages.DescribeAclsRequest
            resp = conn.call(D(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                               principal_filter=None, host_filter=None, operation=1, permission_type=1), 2)
            assert resp.error_code == SecurityDisabledError.code
        # and everything else is served as before: no ACLs, no login
        assert _produce_errors({"bootstrap.servers": b.bootstrap}, "open") == [None] * 3
