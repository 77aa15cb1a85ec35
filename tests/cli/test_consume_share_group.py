"""``kwire consume --share-group``: a member of a KIP-932 share group on the command line."""

from __future__ import annotations

import json

import pytest

from kwire.broker import EmbeddedBroker

from ..broker.test_share_group_clients import create_topic, produce, set_group_configs
from .test_consume_cmd import kwire, ok


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=1, auto_create_topics=False) as b:
        create_topic(b.bootstrap, "jobs")
        produce(b.bootstrap, "jobs", 10, per_batch=5)
        set_group_configs(b.bootstrap, "cli-workers", share_auto_offset_reset="earliest")
        yield b


def test_runs_of_a_share_group_member_print_each_record_once(broker):
    first = ok("consume", "jobs", "--share-group", "cli-workers", "-c", "3", "-b", broker.bootstrap)
    second = ok("consume", "jobs", "--share-group", "cli-workers", "-c", "7", "--json", "-b", broker.bootstrap)
    assert first.decode().splitlines() == ["v0", "v1", "v2"]  # the rest of the batch was released
    docs = [json.loads(line) for line in second.decode().splitlines()]
    assert [d["value"] for d in docs] == [f"v{i}" for i in range(3, 10)]
    assert {d["partition"] for d in docs} == {0}


def test_share_group_refuses_positions_and_groups(broker):
    for extra in (["--group", "g"], ["--from-beginning"], ["-p", "0"], ["-e"]):
        result = kwire("consume", "jobs", "--share-group", "cli-workers", *extra, "-b", broker.bootstrap)
        assert result.returncode == 2 and "--share-group" in result.stderr, result.stderr
