"""The client commands against a broker nobody here wrote: librdkafka's mock cluster (3 brokers).

(The mock has no CreateTopics, ListGroups or DescribeGroups, so `topics create` and `groups`
are tested against kwire's broker only, in their own files.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import confluent_kafka
import pytest

from kwire.client.partitioner import java_partition
from tests.broker.clients import confluent_consumer, consume_exactly

KWIRE = [sys.executable, "-m", "kwire.cli.main"]
TOPIC = "cli-mock"
RECORDS = 40


def kwire(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=90, input=input)


@pytest.fixture(scope="module")
def mock():
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 3, "log_level": 0})
    md = owner.list_topics(timeout=10)
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())
    # Auto-create the topic (the mock gives it 4 partitions), then write with kwire produce.
    owner.list_topics(TOPIC, timeout=10)
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(RECORDS))
    produced = kwire("produce", TOPIC, "-K", ":", "-b", bootstrap, "--json", "-v", input=lines)
    assert produced.returncode == 0, produced.stderr
    yield bootstrap, owner, json.loads(produced.stdout)


def test_produce_writes_where_java_would(mock):
    bootstrap, owner, doc = mock
    partitions = len(owner.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions)
    assert doc["delivered"] == RECORDS and doc["failed"] == 0
    assert [o["partition"] for o in doc["offsets"]] == \
        [java_partition(b"key-%d" % i, partitions) for i in range(RECORDS)]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-mock-check",
                                         "auto.offset.reset": "earliest", "log_level": 0})
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    got = {}
    for _ in range(50):
        for m in consumer.consume(100, 0.2):
            assert m.error() is None
            got[(m.partition(), m.offset())] = (m.key(), m.value())
        if len(got) >= RECORDS:
            break
    consumer.close()
    assert got == {(o["partition"], o["offset"]): (b"key-%d" % i, b"value-%d" % i)
                   for i, o in enumerate(doc["offsets"])}


def test_metadata_names_the_three_brokers_and_the_leaders(mock):
    bootstrap, owner, _ = mock
    result = kwire("metadata", "-b", bootstrap, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    md = owner.list_topics(timeout=10)
    assert sorted(b["node_id"] for b in doc["brokers"]) == sorted(md.brokers) and len(md.brokers) == 3
    mine = next(t for t in doc["topics"] if t["name"] == TOPIC)
    theirs = md.topics[TOPIC].partitions
    assert {p["partition"]: p["leader"] for p in mine["partitions"]} == {p: theirs[p].leader for p in theirs}


def test_consume_to_the_end(mock):
    bootstrap, _, doc = mock
    result = kwire("consume", TOPIC, "--from-beginning", "-e", "-b", bootstrap, "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows) == \
        sorted((o["partition"], o["offset"], f"key-{i}", f"value-{i}") for i, o in enumerate(doc["offsets"]))


def test_lag_of_a_librdkafka_group(mock):
    bootstrap, _, produced = mock
    consumer = confluent_consumer(bootstrap, "cli-mock-lag", [TOPIC], log_level=0)
    try:
        consume_exactly([consumer], 15)
        consumer.commit(asynchronous=False)
        # The mock answers a whole-group OffsetFetch with a null array (not nullable in v6): read
        # leniently, as the consumer reads it, it is no commits rather than an error.
        whole_group = kwire("lag", "cli-mock-lag", "-b", bootstrap, "--json")
        result = kwire("lag", "cli-mock-lag", "--topic", TOPIC, "-b", bootstrap, "--json")
    finally:
        consumer.close()
    assert whole_group.returncode == 0, whole_group.stderr
    assert json.loads(whole_group.stdout)["partitions"] == []
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    ends: dict[int, int] = {}
    for o in produced["offsets"]:
        ends[o["partition"]] = max(ends.get(o["partition"], 0), o["offset"] + 1)
    assert {p["partition"]: p["log_end_offset"] for p in doc["partitions"]} == ends
    assert sum(p["committed_offset"] or 0 for p in doc["partitions"]) == 15
    # Partitions without a commit have no lag (as kafka-consumer-groups shows "-"), and add none.
    for p in doc["partitions"]:
        assert p["lag"] == (None if p["committed_offset"] is None else p["log_end_offset"] - p["committed_offset"])
    assert doc["total_lag"] == sum(p["lag"] for p in doc["partitions"] if p["lag"] is not None)
