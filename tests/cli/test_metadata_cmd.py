"""``kwire metadata`` as users run it, against kwire's broker, compared with what confluent-kafka's
AdminClient (librdkafka) reads from the same broker."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker

KWIRE = [sys.executable, "-m", "kwire.cli.main"]


def kwire(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        for future in admin.create_topics([NewTopic("alpha", 3, 1), NewTopic("beta", 1, 1)]).values():
            future.result(10)
        yield b


def test_help():
    result = kwire("metadata", "--help")
    assert result.returncode == 0 and "--bootstrap" in result.stdout and "--json" in result.stdout


def test_json_matches_confluent(broker):
    result = kwire("metadata", "-b", broker.bootstrap, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    md = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0}).list_topics(timeout=10)
    assert sorted(doc) == ["brokers", "cluster_id", "controller_id", "topics"]
    assert doc["cluster_id"] == md.cluster_id and doc["controller_id"] == md.controller_id
    assert [(b["node_id"], b["host"], b["port"]) for b in doc["brokers"]] == \
        [(b.id, b.host, b.port) for b in md.brokers.values()]
    # Internal topics (the broker's __consumer_offsets, __transaction_state) only with --internal, as Kafka's tools.
    listed = sorted(n for n in md.topics if n not in ("__consumer_offsets", "__transaction_state"))
    assert [t["name"] for t in doc["topics"]] == listed == ["alpha", "beta"]
    for t in doc["topics"]:
        theirs = md.topics[t["name"]].partitions
        assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in t["partitions"]] == \
            [(p, theirs[p].leader, list(theirs[p].replicas), list(theirs[p].isrs)) for p in sorted(theirs)]


def test_table_and_topic_selection(broker):
    result = kwire("metadata", "beta", "-b", broker.bootstrap)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split(":")[0] == "Cluster id" and lines[1].split() == ["Controller:", "1"]
    assert ["1", "127.0.0.1", broker.bootstrap.rsplit(":", 1)[1], "-"] in [line.split() for line in lines]
    rows = [line.split() for line in lines if line.startswith("beta")]
    assert rows == [["beta", "0", "1", "1", "1"]]
    assert not any(line.startswith("alpha") for line in lines)


def test_unknown_topic_and_unreachable_cluster(broker):
    result = kwire("metadata", "ghost", "-b", broker.bootstrap)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == ["kwire: error: [Error 3] UNKNOWN_TOPIC_OR_PARTITION: topic 'ghost'"]
    result = kwire("metadata", "-b", "127.0.0.1:1", "--timeout", "1")
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1
    assert "cannot reach the cluster at 127.0.0.1:1" in result.stderr
