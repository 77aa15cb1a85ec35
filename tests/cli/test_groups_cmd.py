"""``kwire groups`` as users run it, against kwire's broker with a group of confluent-kafka
consumers whose members and assignments librdkafka reports itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker
from tests.broker.clients import confluent_consumer, wait_for_assignment

KWIRE = [sys.executable, "-m", "kwire.cli.main"]


def kwire(*args: str) -> subprocess.CompletedProcess:
    # A narrow terminal width on purpose: output into a pipe is never cut to fit (member ids are
    # long, and the tests read them whole).
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "40"})


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("clicks", 3, 1)])["clicks"].result(10)
        yield b


@pytest.fixture
def group(broker):
    consumers = [confluent_consumer(broker.bootstrap, "dashboard", ["clicks"], **{"client.id": f"panel-{i}",
                                                                                  "log_level": 0})
                 for i in range(2)]
    wait_for_assignment(consumers, 3)
    yield consumers
    for c in consumers:
        c.close()


@pytest.mark.parametrize("command", [["groups"], ["groups", "list"], ["groups", "describe"], ["groups", "delete"]])
def test_help(command):
    result = kwire(*command, "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: kwire " + " ".join(command))


def test_list_describe_delete(broker, group):
    b = broker.bootstrap
    result = kwire("groups", "list", "-b", b, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"groups": [{"group_id": "dashboard", "protocol_type": "consumer",
                                                     "state": "Stable", "type": "classic", "coordinator": 1}]}
    table = kwire("groups", "list", "-b", b, "--state", "stable").stdout.splitlines()
    assert table[2].split() == ["dashboard", "consumer", "Stable", "classic", "1"]
    assert kwire("groups", "list", "-b", b, "--state", "Empty", "--json").stdout.count("dashboard") == 0

    result = kwire("groups", "describe", "dashboard", "-b", b, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)["groups"][0]
    assert (doc["state"], doc["protocol_type"], doc["assignor"], doc["coordinator"]) == \
        ("Stable", "consumer", "range", 1)
    assert [m["client_id"] for m in doc["members"]] == ["panel-0", "panel-1"]
    for member, consumer in zip(doc["members"], group, strict=True):
        assert member["member_id"] == consumer.memberid()
        assert member["subscription"] == ["clicks"]
        assert [(tp["topic"], tp["partition"]) for tp in member["assignment"]] == \
            sorted((tp.topic, tp.partition) for tp in consumer.assignment())
    text = kwire("groups", "describe", "dashboard", "-b", b).stdout
    assert "State:         Stable" in text and "Assignor:      range" in text
    rows = [line.split() for line in text.splitlines() if "panel-" in line]
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        (m["client_id"], "/127.0.0.1", "-", "clicks:" + ",".join(str(tp["partition"]) for tp in m["assignment"]),
         m["member_id"]) for m in doc["members"]]

    result = kwire("groups", "delete", "dashboard", "-b", b)
    assert result.returncode == 1 and "NON_EMPTY_GROUP" in result.stderr and "'dashboard'" in result.stderr
    for c in group:
        c.close()
    group.clear()
    result = kwire("groups", "delete", "dashboard", "-b", b)
    assert (result.returncode, result.stdout) == (0, "deleted group 'dashboard'\n"), result.stderr
    assert json.loads(kwire("groups", "list", "-b", b, "--json").stdout) == {"groups": []}


def test_unknown_group(broker):
    for command in (["describe"], ["delete"]):
        result = kwire("groups", *command, "nobody", "-b", broker.bootstrap)
        assert result.returncode == 1 and result.stdout == ""
        assert len(result.stderr.splitlines()) == 1 and "GROUP_ID_NOT_FOUND" in result.stderr
        assert "'nobody'" in result.stderr
