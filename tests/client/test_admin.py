"""The admin client against kwire's broker, checked with confluent-kafka (librdkafka) as the other
side: topics it creates are seen by confluent's AdminClient, and groups formed and committed by
confluent consumers are listed, described and measured as confluent reports them."""

from __future__ import annotations

import asyncio
import threading
import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from kwire.broker import EmbeddedBroker
from kwire.client.admin import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    Admin,
    AsyncAdmin,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kwire.client.config import AdminConfig
from kwire.client.types import TopicPartition
from kwire.protocol.errors import (
    GroupIdNotFoundError,
    InvalidPartitionsError,
    NonEmptyGroupError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tests.broker.clients import confluent_consumer, consume_exactly, wait_for_assignment

QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=3) as b:
        yield b


def settings(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "request.timeout.ms": 10000, "retry.backoff.ms": 20}


def admin_run(bootstrap: str, operation, timeout: float = 60):
    """Run ``operation(admin)`` with a fresh AsyncAdmin in a new event loop."""
    async def main():
        async with AsyncAdmin(settings(bootstrap)) as admin:
            return await operation(admin)

    return asyncio.run(asyncio.wait_for(main(), timeout))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def confluent_topics(bootstrap: str) -> dict:
    return AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(timeout=10).topics


# -- topics -----------------------------------------------------------------------------------------
def test_created_topics_are_seen_by_confluent(broker):
    orders, logs, checked = unique("orders"), unique("logs"), unique("checked")

    async def create(admin: AsyncAdmin):
        created = await admin.create_topics([NewTopic(orders, 4, 1, {"retention.ms": "3600000"}), logs])
        validated = await admin.create_topics([NewTopic(checked, 2, 1)], validate_only=True)
        return created, validated

    created, validated = admin_run(broker.bootstrap, create)
    assert set(created) == {orders, logs}
    assert (created[orders].num_partitions, created[orders].replication_factor) == (4, 1)
    assert created[orders].configs["retention.ms"] == "3600000"
    assert created[logs].num_partitions == 3  # the broker's default
    seen = confluent_topics(broker.bootstrap)
    assert len(seen[orders].partitions) == 4
    assert len(seen[logs].partitions) == 3
    assert validated[checked].num_partitions == 2
    assert checked not in seen  # validate_only created nothing

    async def describe(admin: AsyncAdmin):
        return await admin.describe_topics([orders]), await admin.describe_configs([ConfigResource.topic(orders)])

    topics, configs = admin_run(broker.bootstrap, describe)
    info = topics[orders]
    assert info.topic_id == created[orders].topic_id and not info.is_internal
    for p in info.partitions.values():
        assert p.leader == 1 and p.replicas == (1,) and p.isr == (1,)
        assert seen[orders].partitions[p.partition].leader == p.leader
    entries = configs[ConfigResource.topic(orders)]
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG and not entries["retention.ms"].is_default
    assert entries["segment.bytes"].is_default and entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG


def test_per_topic_errors_name_the_topic_and_the_rest_of_the_batch_is_done(broker):
    taken, fresh = unique("taken"), unique("fresh")
    admin_run(broker.bootstrap, lambda a: a.create_topics([taken]))
    with pytest.raises(TopicAlreadyExistsError, match=taken):
        admin_run(broker.bootstrap, lambda a: a.create_topics([taken, fresh]))
    assert fresh in confluent_topics(broker.bootstrap)
    # Several failures: the first is raised and names the others.
    with pytest.raises(TopicAlreadyExistsError) as caught:
        admin_run(broker.bootstrap, lambda a: a.create_topics([taken, fresh]))
    assert taken in str(caught.value) and f"also failed: topic {fresh!r} (TOPIC_ALREADY_EXISTS)" in str(caught.value)
    # Not found is final at once, not retried until the timeout (which would raise ClientTimeoutError).
    with pytest.raises(UnknownTopicOrPartitionError, match="no-such-topic"):
        admin_run(broker.bootstrap, lambda a: a.describe_topics(["no-such-topic"]))


def test_create_partitions_then_delete_topics(broker):
    name = unique("grow")

    async def grow(admin: AsyncAdmin):
        await admin.create_topics([NewTopic(name, 2, 1)])
        await admin.create_partitions({name: 5})
        return await admin.describe_topics([name])

    assert sorted(admin_run(broker.bootstrap, grow)[name].partitions) == [0, 1, 2, 3, 4]
    assert len(confluent_topics(broker.bootstrap)[name].partitions) == 5
    with pytest.raises(InvalidPartitionsError, match=name):
        admin_run(broker.bootstrap, lambda a: a.create_partitions({name: 3}))

    admin_run(broker.bootstrap, lambda a: a.delete_topics([name]))
    assert name not in confluent_topics(broker.bootstrap)
    assert name not in admin_run(broker.bootstrap, lambda a: a.list_topics())
    with pytest.raises(UnknownTopicOrPartitionError, match=name):
        admin_run(broker.bootstrap, lambda a: a.delete_topics([name]))


def test_describe_cluster_matches_confluent(broker):
    async def describe(admin: AsyncAdmin):
        return (await admin.describe_cluster(),
                await admin.describe_configs([ConfigResource.broker(1)]))

    cluster, configs = admin_run(broker.bootstrap, describe)
    md = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET}).list_topics(timeout=10)
    assert cluster.cluster_id == md.cluster_id
    assert cluster.controller_id == md.controller_id
    assert [(b.node_id, b.host, b.port) for b in cluster.brokers] == \
        [(b.id, b.host, b.port) for b in md.brokers.values()]
    entries = configs[ConfigResource.broker(1)]
    assert entries["broker.id"].value == "1" and entries["broker.id"].read_only


def test_list_offsets_earliest_latest_and_by_time(broker):
    name = unique("times")
    admin_run(broker.bootstrap, lambda a: a.create_topics([NewTopic(name, 2, 1)]))
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    for i in range(10):
        producer.produce(name, value=b"v%d" % i, partition=0, timestamp=1_000_000 + i * 1000)
    for i in range(4):
        producer.produce(name, value=b"w%d" % i, partition=1, timestamp=5_000_000 + i)
    assert producer.flush(10) == 0
    p0, p1, p9 = TopicPartition(name, 0), TopicPartition(name, 1), TopicPartition(name, 9)

    async def ask(admin: AsyncAdmin):
        return await admin.list_offsets({p0: "earliest", p1: LATEST}), await admin.list_offsets(
            {p0: 1_004_500, p1: MAX_TIMESTAMP}), await admin.list_offsets({p0: 9_000_000, p1: EARLIEST})

    first, second, third = admin_run(broker.bootstrap, ask)
    assert first[p0].offset == 0 and first[p1].offset == 4
    assert second[p0].offset == 5 and second[p0].timestamp == 1_005_000  # first record at or after the time
    assert second[p1].offset == 3 and second[p1].timestamp == 5_000_003
    assert third[p0].offset == -1 and third[p1].offset == 0
    with pytest.raises(UnknownTopicOrPartitionError, match=f"{name}-9"):
        admin_run(broker.bootstrap, lambda a: a.list_offsets({p9: LATEST}))


# -- groups -----------------------------------------------------------------------------------------
def test_confluent_group_is_listed_described_measured_and_deleted(broker):
    topic, group = unique("events"), unique("group")
    admin_run(broker.bootstrap, lambda a: a.create_topics([NewTopic(topic, 3, 1)]))
    consumers = [confluent_consumer(broker.bootstrap, group, [topic], **{"client.id": f"member-{i}", **QUIET})
                 for i in range(2)]
    try:
        wait_for_assignment(consumers, 3)
        # Produced once the group is formed, so that no poll before consume_exactly delivers any.
        # All 30 go to partition 0: partitions 1 and 2 stay empty and are never committed.
        _produce_to(broker.bootstrap, topic, 0, 30)
        got = consume_exactly(consumers, 10)
        holder = max(got, key=got.get)  # the member holding partition 0 got all ten
        holder.commit(asynchronous=False)

        async def inspect(admin: AsyncAdmin):
            return (await admin.list_groups(), await admin.describe_groups([group]),
                    await admin.list_consumer_group_offsets(group),
                    await admin.list_consumer_group_offsets(group, [TopicPartition(topic, 1)]),
                    await admin.consumer_group_lag(group))

        listed, described, committed, one, lag = admin_run(broker.bootstrap, inspect)
        listing = next(g for g in listed if g.group_id == group)
        assert listing.protocol_type == "consumer" and listing.state == "Stable"

        desc = described[group]
        assert (desc.state, desc.protocol_type, desc.protocol) == ("Stable", "consumer", "range")
        assert sorted(m.client_id for m in desc.members) == ["member-0", "member-1"]
        by_client = {m.client_id: m for m in desc.members}
        for i, c in enumerate(consumers):
            member = by_client[f"member-{i}"]
            assert member.member_id == c.memberid()
            assert set(member.assignment) == {TopicPartition(tp.topic, tp.partition) for tp in c.assignment()}
            assert member.subscription == (topic,)
            assert member.host.endswith("127.0.0.1")

        assert committed == {TopicPartition(topic, 0): committed[TopicPartition(topic, 0)]}
        assert committed[TopicPartition(topic, 0)].offset == 10
        assert one == {TopicPartition(topic, 1): None}  # asked for, never committed

        assert lag.total == 20
        rows = {p.partition: p for p in lag.partitions}
        assert sorted(rows) == [0, 1, 2]  # the committed one and the assigned ones
        assert (rows[0].committed, rows[0].log_end_offset, rows[0].lag) == (10, 30, 20)
        assert (rows[1].committed, rows[1].log_end_offset, rows[1].lag) == (None, 0, None)
        assert rows[0].client_id == next(m.client_id for m in desc.members
                                         if TopicPartition(topic, 0) in m.assignment)

        with pytest.raises(NonEmptyGroupError, match=group):
            admin_run(broker.bootstrap, lambda a: a.delete_groups([group]))
    finally:
        for c in consumers:
            c.close()

    admin_run(broker.bootstrap, lambda a: a.delete_groups([group]))
    assert group not in {g.group_id for g in admin_run(broker.bootstrap, lambda a: a.list_groups())}
    with pytest.raises(GroupIdNotFoundError, match=group):
        admin_run(broker.bootstrap, lambda a: a.describe_groups([group]))
    with pytest.raises(GroupIdNotFoundError, match="never-was"):
        admin_run(broker.bootstrap, lambda a: a.delete_groups(["never-was"]))


def _produce_to(bootstrap: str, topic: str, partition: int, n: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(n):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
    assert producer.flush(10) == 0


# -- the synchronous twin ---------------------------------------------------------------------------
def test_sync_admin_from_several_threads(broker):
    names = [unique("sync") for _ in range(3)]
    errors: list[BaseException] = []
    with Admin(AdminConfig.from_settings(settings(broker.bootstrap))) as admin:
        def create(name: str) -> None:
            try:
                admin.create_topics([NewTopic(name, 2, 1)])
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=create, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        assert set(names) <= set(admin.list_topics())
        assert admin.describe_cluster().cluster_id
        assert {n: len(i.partitions) for n, i in admin.describe_topics(names).items()} == dict.fromkeys(names, 2)
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([names[0]])
