"""``kwire groups list``, ``kwire groups describe`` and ``kwire lag`` run at once after a restart of
a broker holding many groups, while its coordinators still load.

Kafka answers COORDINATOR_LOAD_IN_PROGRESS for a group whose ``__consumer_offsets`` partition is
still loading (ListGroups: while any is), and its Admin client retries that error (and
COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR, after a new FindCoordinator) within the call's
timeout.  kwire's admin client does the same, in its one retry policy (``kwire.client.retry``
through ``AsyncAdmin._run``).  Here the restarted broker refuses first for sure: its load is
held until the command has been refused once (``loading`` of the group coordinator wrapped to let
it go then), and every partition counts as too large to load inside a request; the command must
then ask again and print what the loaded broker holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.coordinator import loader
from tests.broker.test_coordinator_loading_clients import GatedExecutor

KWIRE = [sys.executable, "-m", "kwire.cli.main"]
GROUPS = 50
QUIET = {"log_level": 0}


def kwire(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "COLUMNS": "200"})


def committed(g: int, partition: int) -> int:
    return 1 + (g + partition) % 10


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A data dir with GROUPS groups' committed offsets of "orders" (2 partitions of 10 records),
    spread over many ``__consumer_offsets`` partitions; the broker stopped cleanly."""
    data = tmp_path_factory.mktemp("groups-restart") / "data"
    with EmbeddedBroker(data, default_partitions=2) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
        for i in range(20):
            producer.produce("orders", b"order %d" % i, partition=i % 2)
        assert producer.flush(15) == 0
        for g in range(GROUPS):
            c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"team-{g}",
                                          "enable.auto.commit": False, **QUIET})
            c.commit(offsets=[confluent_kafka.TopicPartition("orders", p, committed(g, p)) for p in (0, 1)],
                     asynchronous=False)
            c.close()
        partitions = {broker.state.coordinator.store.partition_of(f"team-{g}") for g in range(GROUPS)}
        assert len(partitions) > 20  # (many partitions to load)
    return data


@pytest.fixture
def restarted(template, tmp_path, monkeypatch):
    """The broker restarted on a copy of the template, its coordinators' load held until the
    first COORDINATOR_LOAD_IN_PROGRESS answer; yields it once stopped refusing is possible."""
    monkeypatch.setattr(loader, "INLINE_BYTES", -1)  # no group served inside its first request
    data = tmp_path / "data"
    shutil.copytree(template, data)
    broker = EmbeddedBroker(data)
    gate = GatedExecutor()
    broker.broker.coordinator_load_executor = gate
    broker.broker.coordinator_load_schedule = gate.schedule
    broker.start()
    coordinator = broker.state.coordinator
    refuses = coordinator.loading

    def loading(group_id: str | None = None) -> bool:
        refused = refuses(group_id)
        if refused:
            gate.release()  # this answer is COORDINATOR_LOAD_IN_PROGRESS still; the next may not be
        return refused

    monkeypatch.setattr(coordinator, "loading", loading)
    try:
        yield broker
    finally:
        broker.stop()


def test_groups_list_right_after_a_restart(restarted):
    result = kwire("groups", "list", "-b", restarted.bootstrap, "--json", "--timeout", "30")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)["groups"]
    assert sorted(g["group_id"] for g in listed) == sorted(f"team-{g}" for g in range(GROUPS))
    assert {g["state"] for g in listed} == {"Empty"}
    assert restarted.state.coordinator.load_refusals >= 1  # it was refused, and asked again


def test_groups_describe_right_after_a_restart(restarted):
    asked = [f"team-{g}" for g in (3, 17, 41)]
    result = kwire("groups", "describe", *asked, "-b", restarted.bootstrap, "--json", "--timeout", "30")
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)["groups"]
    assert [(d["group_id"], d["state"], d["members"]) for d in described] == [(g, "Empty", []) for g in asked]
    assert restarted.state.coordinator.load_refusals >= 1


def test_lag_right_after_a_restart(restarted):
    result = kwire("lag", "team-7", "-b", restarted.bootstrap, "--json", "--timeout", "30")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [(p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"]) for p in doc["partitions"]] == [
        (p, committed(7, p), 10, 10 - committed(7, p)) for p in (0, 1)]
    assert restarted.state.coordinator.load_refusals >= 1
