"""The admin client against librdkafka's mock cluster: three brokers nobody here wrote, with the
partition leaders spread over them, and without the admin apis a real Kafka has (no
CreateTopics, ListGroups, DescribeGroups, DescribeCluster): what it has must work, what it
lacks must be refused by name."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import pytest

from kwire.client.admin import LATEST, AsyncAdmin
from kwire.client.errors import UnsupportedApiError
from kwire.client.types import TopicPartition

QUIET = {"log_level": 0}
PARTITIONS = 4  # what the mock gives an auto-created topic


@pytest.fixture(scope="module")
def mock_cluster():
    """librdkafka's mock cluster with 3 brokers; its metadata (for the brokers' addresses) while it lives."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 3, **QUIET})
    md = owner.list_topics(timeout=10)
    yield md
    owner.flush(1)


def bootstrap_of(md) -> str:
    return ",".join(f"{b.host}:{b.port}" for b in sorted(md.brokers.values(), key=lambda b: b.id))


def admin_run(bootstrap: str, operation, timeout: float = 60):
    async def main():
        async with AsyncAdmin({"bootstrap.servers": bootstrap, "request.timeout.ms": 10000,
                               "retry.backoff.ms": 20}) as admin:
            return await operation(admin)

    return asyncio.run(asyncio.wait_for(main(), timeout))


@pytest.fixture(scope="module")
def committed_group(mock_cluster):
    """A topic with 30 records (auto-created by producing) and a group that consumed them all and
    committed 3 per partition: (topic, group, committed offsets by partition, latest by partition)."""
    bootstrap = bootstrap_of(mock_cluster)
    topic, group = "mock-events", "mock-group"
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(30):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(10) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 30 and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(100, 0.5) if m.error() is None)
    assert got == 30
    commits = [confluent_kafka.TopicPartition(topic, p, 3) for p in range(PARTITIONS)]
    consumer.commit(offsets=commits, asynchronous=False)
    committed = {tp.partition: tp.offset for tp in consumer.committed(commits, timeout=10)}
    latest = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
              for p in range(PARTITIONS)}
    yield topic, group, committed, latest
    consumer.close()


def test_describe_cluster_falls_back_to_metadata(mock_cluster):
    cluster = admin_run(bootstrap_of(mock_cluster), lambda a: a.describe_cluster())
    assert cluster.cluster_id == mock_cluster.cluster_id
    assert [(b.node_id, b.host, b.port) for b in cluster.brokers] == \
        sorted((b.id, b.host, b.port) for b in mock_cluster.brokers.values())


def test_topics_and_offsets_from_each_partitions_leader(mock_cluster, committed_group):
    bootstrap = bootstrap_of(mock_cluster)
    topic = committed_group[0]
    # More topics: the mock picks leaders at random, and all twelve on one broker is unlikely (3**-11).
    extra = ["mock-extra-1", "mock-extra-2"]
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(20):
        producer.produce(extra[i % 2], key=b"%d" % i, value=b"x")
    assert producer.flush(10) == 0
    topics = [topic, *extra]
    seen = {t: producer.list_topics(t, timeout=10).topics[t] for t in topics}
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", **QUIET})
    watermarks = {TopicPartition(t, p): consumer.get_watermark_offsets(confluent_kafka.TopicPartition(t, p),
                                                                       timeout=10)
                  for t in topics for p in range(PARTITIONS)}
    consumer.close()

    async def ask(admin: AsyncAdmin):
        return (await admin.list_topics(), await admin.describe_topics(topics),
                await admin.list_offsets(dict.fromkeys(watermarks, LATEST)),
                await admin.list_offsets(dict.fromkeys(watermarks, "earliest")))

    listed, described, ends, starts = admin_run(bootstrap, ask)
    assert set(topics) <= set(listed)
    leaders = {TopicPartition(t, p.partition): p.leader for t in topics for p in described[t].partitions.values()}
    assert leaders == {TopicPartition(t, p): m.leader for t in topics for p, m in seen[t].partitions.items()}
    assert len(set(leaders.values())) > 1  # the requests below went to more than one broker
    for t in topics:
        for p in described[t].partitions.values():
            assert sorted(p.replicas) == sorted(seen[t].partitions[p.partition].replicas)
    assert {tp: o.offset for tp, o in ends.items()} == {tp: high for tp, (_, high) in watermarks.items()}
    assert {tp: o.offset for tp, o in starts.items()} == {tp: low for tp, (low, _) in watermarks.items()}
    assert sum(o.offset for tp, o in ends.items() if tp.topic == topic) == 30


def test_committed_offsets_and_lag(mock_cluster, committed_group):
    topic, group, committed, latest = committed_group

    async def ask(admin: AsyncAdmin):
        return (await admin.list_consumer_group_offsets(group, [TopicPartition(topic, p) for p in range(PARTITIONS)]),
                await admin.consumer_group_lag(group, topics=[topic]))

    offsets, lag = admin_run(bootstrap_of(mock_cluster), ask)
    assert {tp.partition: o.offset for tp, o in offsets.items()} == committed == dict.fromkeys(range(PARTITIONS), 3)
    assert lag.state is None  # the mock cannot describe groups: lag from the commits alone
    assert [(p.partition, p.committed, p.log_end_offset, p.lag) for p in lag.partitions] == \
        [(p, 3, latest[p], latest[p] - 3) for p in range(PARTITIONS)]
    assert lag.total == 30 - 3 * PARTITIONS


@pytest.mark.parametrize("api,call", [
    ("CreateTopics", lambda a: a.create_topics(["anything"])),
    ("DeleteTopics", lambda a: a.delete_topics(["mock-events"])),
    ("ListGroups", lambda a: a.list_groups()),
    ("DescribeGroups", lambda a: a.describe_groups(["mock-group"])),
])
def test_apis_the_mock_lacks_are_refused_by_name(mock_cluster, api, call):
    with pytest.raises(UnsupportedApiError, match=api):
        admin_run(bootstrap_of(mock_cluster), call)


def test_a_moved_leader_is_asked_again_after_a_metadata_refresh(mock_cluster, committed_group):
    """Metadata that names the wrong leader (as after a leader change) gets NOT_LEADER_OR_FOLLOWER
    from the broker asked; the partition is sent again to the leader a refresh names."""
    topic, _, _, latest = committed_group
    tp = TopicPartition(topic, 0)

    async def ask(admin: AsyncAdmin):
        fresh = await admin.cluster.refresh_metadata([topic])
        info = fresh.topics[topic]
        leader = info.partitions[0].leader
        wrong = next(n for n in sorted(fresh.brokers) if n != leader)
        stale = info._replace(partitions={
            **info.partitions, 0: info.partitions[0]._replace(leader=wrong)})
        admin.cluster.metadata = fresh._replace(topics={**fresh.topics, topic: stale})
        return await admin.list_offsets({tp: LATEST}), admin.cluster.metadata.leader(topic, 0), leader

    found, leader_now, leader = admin_run(bootstrap_of(mock_cluster), ask)
    assert found[tp].offset == latest[0]
    assert leader_now == leader
