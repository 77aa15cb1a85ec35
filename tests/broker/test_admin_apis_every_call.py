"""Every public admin call of confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and
aiokafka's AIOKafkaAdminClient that no other test names, against one kwire broker for the module,
with the answer Kafka's single node gives.  (The others: tests/broker/test_admin_apis_clients.py,
test_configs_clients.py, test_group_configs_clients.py, test_security_acls.py,
test_transactions_clients.py, test_internal_topics.py; client quotas, KIP-848 consumer-group and
KIP-932 share-group calls have their own tests.)

Each test names the calls it makes in its name, so that ``-k`` finds the call."""

from __future__ import annotations

import asyncio

import confluent_kafka
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, RecordsToDelete
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaConsumer, OffsetAndMetadata
from kafka import TopicPartition as KpTP
from kafka.admin import (
    ACL,
    AbortTransactionSpec,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    KafkaAdminClient,
    MemberToRemove,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import OffsetSpec as KpOffsetSpec
from kafka.errors import NoError, SecurityDisabledError

from kwire.broker import EmbeddedBroker

TOPIC = "every-call"
RECORDS = 10


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("every-call") / "data"
    with EmbeddedBroker(data, listeners=["PLAINTEXT://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"]) as b:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
        admin.close()
        p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap})
        for i in range(RECORDS):
            p.produce(TOPIC, value=b"v%d" % i, partition=0)
        assert p.flush(30) == 0
        yield b


@pytest.fixture
def kp(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield admin
    admin.close()


@pytest.fixture
def ck(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})


def done(futures: dict) -> dict:
    return {k: f.result(30) for k, f in futures.items()}


# -- confluent-kafka -----------------------------------------------------------------------------------
def test_confluent_describe_topics_create_partitions_list_offsets_delete_records_delete_topics(broker, ck):
    done(ck.create_topics([confluent_kafka.admin.NewTopic("ck-topic", 1, 1)]))
    done(ck.create_partitions([confluent_kafka.admin.NewPartitions("ck-topic", 3)]))
    [desc] = done(ck.describe_topics(TopicCollection(["ck-topic"]))).values()
    assert desc.name == "ck-topic" and len(desc.partitions) == 3 and not desc.is_internal
    assert [p.leader.id for p in desc.partitions] == [1, 1, 1]
    latest = done(ck.list_offsets({TopicPartition(TOPIC, 0): OffsetSpec.latest(),
                                   TopicPartition(TOPIC, 1): OffsetSpec.earliest()}))
    assert {tp.partition: r.offset for tp, r in latest.items()} == {0: RECORDS, 1: 0}
    [deleted] = done(ck.delete_records([TopicPartition("ck-topic", 0, 0)])).values()
    assert deleted.low_watermark == 0
    done(ck.delete_topics(["ck-topic"]))
    assert "ck-topic" not in ck.list_topics(timeout=10).topics


def test_confluent_consumer_group_offsets_list_describe_delete_list_groups(broker, ck):
    group = "ck-group"
    # Committing to a group that has no members creates it, Empty (Kafka's OffsetCommit from an admin).
    [altered] = done(ck.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(TOPIC, 0, 4)])])).values()
    assert [(tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions] == [(0, 4, None)]
    [fetched] = done(ck.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])).values()
    assert [(tp.topic, tp.partition, tp.offset) for tp in fetched.topic_partitions] == [(TOPIC, 0, 4)]
    listed = ck.list_consumer_groups().result(30)
    assert group in {g.group_id for g in listed.valid} and not listed.errors
    [described] = done(ck.describe_consumer_groups([group])).values()
    assert (described.group_id, described.state.name, described.members) == (group, "EMPTY", [])
    old_style = {g.id: g for g in ck.list_groups(timeout=10)}
    assert old_style[group].state == "Empty"
    done(ck.delete_consumer_groups([group]))
    assert group not in {g.group_id for g in ck.list_consumer_groups().result(30).valid}


def test_confluent_cluster_id_poll_describe_cluster(broker, ck):
    assert ck.cluster_id(timeout=10) == broker.state.cluster_id
    assert ck.poll(0) == 0
    cluster = ck.describe_cluster().result(30)
    assert cluster.cluster_id == broker.state.cluster_id and [n.id for n in cluster.nodes] == [1]


def test_confluent_set_sasl_credentials(broker):
    broker.call(lambda: broker.state.security.credentials.set_password("ck-sasl", "pw-1"))
    sasl = broker.listener_address("SASL_PLAINTEXT") if hasattr(broker, "listener_address") else None
    if sasl is None:
        sasl = next(f"{li.advertised[0]}:{li.advertised[1]}" for li in broker.state.listeners
                    if li.protocol == "SASL_PLAINTEXT")
    admin = AdminClient({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "ck-sasl", "sasl.password": "pw-1",
                         "log_level": 0})
    assert admin.describe_cluster().result(30).cluster_id == broker.state.cluster_id
    # New credentials apply to the next logins; the client stays usable.
    admin.set_sasl_credentials("ck-sasl", "pw-1")
    assert TOPIC in admin.list_topics(timeout=10).topics


# -- kafka-python ---------------------------------------------------------------------------------------
def test_kafka_python_api_versions_get_broker_version_data(kp):
    versions = kp.api_versions()
    assert versions and all(low <= high for low, high in versions.values())
    assert kp.get_broker_version_data(1) is not None


def test_kafka_python_list_topics_describe_topics_wait_for_topics_list_partition_offsets(kp):
    assert TOPIC in kp.list_topics()
    [described] = kp.describe_topics([TOPIC])
    assert described["name"] == TOPIC and len(described["partitions"]) == 2
    assert kp.wait_for_topics([TOPIC]) is None
    offsets = kp.list_partition_offsets({KpTP(TOPIC, 0): KpOffsetSpec.LATEST, KpTP(TOPIC, 1): KpOffsetSpec.EARLIEST})
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: RECORDS, 1: 0}


def test_kafka_python_list_groups_describe_groups_remove_group_members_group_offsets_delete_groups(broker, kp):
    group = "kp-group"
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id=group, group_instance_id="kp-1",
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        for _ in range(20):
            if consumer.poll(500):
                break
        consumer.commit({KpTP(TOPIC, 0): OffsetAndMetadata(5, "", -1)})
    finally:
        consumer.close()
    assert {g["group_id"]: g["group_state"] for g in kp.list_groups()}[group] == "Stable"
    described = kp.describe_groups([group])[group]
    assert [m["group_instance_id"] for m in described["members"]] == ["kp-1"]
    assert kp.list_group_offsets({group: None})[group][KpTP(TOPIC, 0)].offset == 5
    # A static member stays after close (KIP-345) until removed by the admin.
    assert kp.delete_groups([group]) == {group: "NonEmptyGroupError"}
    removed = kp.remove_group_members(group, [MemberToRemove(group_instance_id="kp-1")])
    assert list(removed.values()) == [NoError]
    assert kp.describe_groups([group])[group]["group_state"] == "Empty"
    assert kp.alter_group_offsets(group, {KpTP(TOPIC, 0): OffsetAndMetadata(7, "", -1),
                                          KpTP(TOPIC, 1): OffsetAndMetadata(0, "", -1)}) == \
        {KpTP(TOPIC, 0): NoError, KpTP(TOPIC, 1): NoError}
    reset = kp.reset_group_offsets(group, {KpTP(TOPIC, 0): KpOffsetSpec.EARLIEST})
    assert list(reset.values())[0] is not None
    assert kp.list_group_offsets({group: None})[group][KpTP(TOPIC, 0)].offset == 0
    assert kp.delete_group_offsets(group, [KpTP(TOPIC, 1)]) == {KpTP(TOPIC, 1): NoError}
    assert list(kp.list_group_offsets({group: None})[group]) == [KpTP(TOPIC, 0)]
    assert kp.delete_groups([group]) == {group: "OK"}
    assert group not in {g["group_id"] for g in kp.list_groups()}


def test_kafka_python_describe_transactions_list_transactions_find_hanging_transactions(broker, kp):
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "kp-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"in a transaction", partition=1)
    assert producer.flush(30) == 0
    try:
        tx = kp.describe_transactions(["kp-tx"])["kp-tx"]
        assert (tx.state.value, {(tp.topic, tp.partition) for tp in tx.topic_partitions}) == \
            ("Ongoing", {(TOPIC, 1)})
        listed = kp.list_transactions()
        assert [t.transactional_id for t in listed[1]] == ["kp-tx"]
        assert kp.find_hanging_transactions() == []  # open, but within its timeout and known to the coordinator
    finally:
        producer.commit_transaction(30)
    assert kp.describe_transactions(["kp-tx"])["kp-tx"].state.value == "CompleteCommit"


def test_kafka_python_abort_transaction_of_a_hanging_producer(broker, kp):
    """Kafka's admin abort (kafka-transactions.sh abort): an ABORT marker written by the partition's
    leader for the producer's open transaction there, whatever its coordinator thinks."""
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "kp-hanging"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"left open", partition=1)
    assert producer.flush(30) == 0
    tp = KpTP(TOPIC, 1)
    [open_one] = [p for p in kp.describe_producers([tp])[tp].active_producers if p.current_transaction_start_offset >= 0]
    kp.abort_transaction(AbortTransactionSpec(tp, open_one.producer_id, open_one.producer_epoch))
    after = {p.producer_id: p for p in kp.describe_producers([tp])[tp].active_producers}
    assert after[open_one.producer_id].current_transaction_start_offset == -1
    producer.abort_transaction(30)


def test_kafka_python_create_partitions_delete_records_reset_configs(kp):
    kp.create_topics([NewTopic("kp-records", 1, 1)])
    kp.create_partitions({"kp-records": KpNewPartitions(2)})
    assert len(kp.describe_topics(["kp-records"])[0]["partitions"]) == 2
    p = confluent_kafka.Producer({"bootstrap.servers": kp.config["bootstrap_servers"]})
    for _ in range(5):
        p.produce("kp-records", value=b"x", partition=0)
    assert p.flush(30) == 0
    result = kp.delete_records({KpTP("kp-records", 0): 3})
    assert result[KpTP("kp-records", 0)]["low_watermark"] == 3
    kp.alter_configs([ConfigResource("TOPIC", "kp-records", {"retention.ms": "60000"})])
    assert kp.reset_configs([ConfigResource("TOPIC", "kp-records", {"retention.ms": None})]) == \
        {"topic": {"kp-records": "OK"}}
    [described] = kp.describe_configs([ConfigResource("TOPIC", "kp-records", ["retention.ms"])])
    kp.delete_topics(["kp-records"])
    assert described is not None


def test_kafka_python_create_acls_describe_acls_delete_acls_without_an_authorizer(kp):
    """Kafka without an authorizer answers the ACL apis with SECURITY_DISABLED (the calls with an
    authorizer: tests/broker/test_security_acls.py)."""
    acl_filter = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                           permission_type=ACLPermissionType.ANY,
                           resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
    with pytest.raises(SecurityDisabledError):
        kp.describe_acls(acl_filter)
    [(_, matched, error)] = kp.delete_acls([acl_filter])  # errors per filter
    assert matched == [] and error is SecurityDisabledError
    acl = ACL(principal="User:alice", host="*", operation=ACLOperation.READ, permission_type=ACLPermissionType.ALLOW,
              resource_pattern=ResourcePattern(ResourceType.TOPIC, TOPIC, ACLResourcePatternType.LITERAL))
    created = kp.create_acls([acl])
    assert created == {"succeeded": [], "failed": [SecurityDisabledError]}


# -- aiokafka ----------------------------------------------------------------------------------------------
def test_aiokafka_every_admin_call(broker):
    async def main():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic("aio-topic", 1, 1)])
            assert "aio-topic" in await admin.list_topics()
            await admin.create_partitions({"aio-topic": NewPartitions(2)})
            [described] = await admin.describe_topics(["aio-topic"])
            assert described["topic"] == "aio-topic" and len(described["partitions"]) == 2
            cluster = await admin.describe_cluster()
            assert cluster["cluster_id"] == broker.state.cluster_id
            assert await admin.find_coordinator("aio-group") == 1
            lows = await admin.delete_records({AioTP(TOPIC, 0): RecordsToDelete(before_offset=1)})
            assert lows == {AioTP(TOPIC, 0): 1}
            # A group with committed offsets and no members (committed by kafka-python's admin).
            kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
            try:
                kp.alter_group_offsets("aio-group", {KpTP(TOPIC, 0): OffsetAndMetadata(6, "", -1)})
            finally:
                kp.close()
            # Created by an offset commit: a classic group without a protocol type, as in Kafka.
            assert ("aio-group", "") in [tuple(g[:2]) for g in await admin.list_consumer_groups()]
            [group] = await admin.describe_consumer_groups(["aio-group"])
            assert group.groups[0][:3] == (0, "aio-group", "Empty")
            offsets = await admin.list_consumer_group_offsets("aio-group")
            assert offsets[AioTP(TOPIC, 0)].offset == 6
            await admin.delete_topics(["aio-topic"])
            assert "aio-topic" not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(main())
