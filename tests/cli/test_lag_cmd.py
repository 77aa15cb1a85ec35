"""``kwire lag`` as users run it: 30 records produced with confluent-kafka, 10 consumed and
committed by a confluent-kafka consumer group, so the lag is 20."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker
from tests.broker.clients import confluent_consumer, consume_exactly, wait_for_assignment

KWIRE = [sys.executable, "-m", "kwire.cli.main"]


def kwire(*args: str) -> subprocess.CompletedProcess:
    # A narrow terminal width on purpose: output into a pipe is never cut to fit (member ids are
    # long, and the tests read them whole).
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "40"})


@pytest.fixture(scope="module")
def lagging():
    """A broker whose group "billing" committed 10 of the 30 records of partition 0 of
    "invoices"; partition 1 is empty, assigned and never committed."""
    with EmbeddedBroker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})  # kept alive for the result
        admin.create_topics([NewTopic("invoices", 2, 1)])["invoices"].result(10)
        consumer = confluent_consumer(b.bootstrap, "billing", ["invoices"], **{"client.id": "biller",
                                                                               "log_level": 0})
        try:
            wait_for_assignment([consumer], 2)
            producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "log_level": 0})
            for i in range(30):
                producer.produce("invoices", value=b"invoice %d" % i, partition=0)
            assert producer.flush(10) == 0
            consume_exactly([consumer], 10)
            consumer.commit(asynchronous=False)
            yield b, consumer
        finally:
            consumer.close()


def test_help():
    result = kwire("lag", "--help")
    assert result.returncode == 0 and "--topic" in result.stdout and "--json" in result.stdout


def test_lag_is_produced_minus_committed(lagging):
    broker, consumer = lagging
    result = kwire("lag", "billing", "-b", broker.bootstrap, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["group_id"], doc["state"], doc["total_lag"]) == ("billing", "Stable", 20)
    member = consumer.memberid()
    assert doc["partitions"] == [
        {"topic": "invoices", "partition": 0, "committed_offset": 10, "log_end_offset": 30, "lag": 20,
         "member_id": member, "client_id": "biller", "host": "/127.0.0.1"},
        {"topic": "invoices", "partition": 1, "committed_offset": None, "log_end_offset": 0, "lag": None,
         "member_id": member, "client_id": "biller", "host": "/127.0.0.1"},
    ]


def test_table(lagging):
    broker, _ = lagging
    result = kwire("lag", "billing", "-b", broker.bootstrap)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Group 'billing' (Stable)"
    assert lines[2].split() == ["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "CLIENT-ID", "HOST", "MEMBER-ID"]
    rows = [line.split() for line in lines if line.startswith("invoices")]
    member = lagging[1].memberid()
    assert rows == [["invoices", "0", "10", "30", "20", "biller", "/127.0.0.1", member],
                    ["invoices", "1", "-", "0", "-", "biller", "/127.0.0.1", member]]
    assert lines[-1] == "Total lag: 20"


def test_by_topic_and_errors(lagging):
    broker, _ = lagging
    result = kwire("lag", "billing", "--topic", "invoices", "-b", broker.bootstrap, "--json")
    assert result.returncode == 0, result.stderr
    assert [(p["partition"], p["lag"]) for p in json.loads(result.stdout)["partitions"]] == [(0, 20), (1, None)]
    result = kwire("lag", "nobody", "-b", broker.bootstrap)
    assert result.returncode == 1 and "GROUP_ID_NOT_FOUND" in result.stderr and len(result.stderr.splitlines()) == 1
    result = kwire("lag", "billing", "--topic", "ghost", "-b", broker.bootstrap)
    assert result.returncode == 1 and "'ghost'" in result.stderr
