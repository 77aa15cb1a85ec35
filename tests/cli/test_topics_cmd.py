"""``kwire topics`` as users run it: a real process against kwire's broker, its answers checked
with confluent-kafka's AdminClient; and the client flags every client command shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient

from kwire.broker import EmbeddedBroker

KWIRE = [sys.executable, "-m", "kwire.cli.main"]


def kwire(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def ok(*args: str, env: dict | None = None) -> str:
    result = kwire(*args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kwire: error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=2) as b:
        yield b


def confluent_topics(bootstrap: str) -> dict:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=10).topics


@pytest.mark.parametrize("command", [["topics"], ["topics", "list"], ["topics", "create"], ["topics", "delete"],
                                     ["topics", "describe"]])
def test_help(command):
    out = ok(*command, "--help")
    assert out.startswith("usage: kwire " + " ".join(command))
    if len(command) > 1:
        assert "--bootstrap" in out and "--json" in out and "--timeout" in out


def test_create_list_describe_delete(broker):
    b = broker.bootstrap
    assert ok("topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=3600000", "-b", b) == \
        "created topic 'orders': 3 partitions, replication factor 1\n"
    created = json.loads(ok("topics", "create", "payments", "-b", b, "--json"))
    assert (created["name"], created["created"], created["partitions"]) == ("payments", True, 2)
    seen = confluent_topics(b)
    assert len(seen["orders"].partitions) == 3 and len(seen["payments"].partitions) == 2

    listed = json.loads(ok("topics", "list", "-b", b, "--json"))["topics"]
    assert [(t["name"], t["partitions"], t["replication_factor"], t["internal"]) for t in listed] == \
        [("orders", 3, 1, False), ("payments", 2, 1, False)]
    table = ok("topics", "list", "-b", b).splitlines()
    assert table[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION", "INTERNAL", "TOPIC-ID"]
    assert table[2].split()[:4] == ["orders", "3", "1", "no"] and table[2].split()[4] == listed[0]["topic_id"]

    described = json.loads(ok("topics", "describe", "orders", "-b", b, "--json", "--configs"))["topics"][0]
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in described["partitions"]] == \
        [(p, 1, [1], [1]) for p in range(3)]
    configs = {c["name"]: c for c in described["configs"]}
    assert configs["retention.ms"]["value"] == "3600000" and configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["is_default"]
    text = ok("topics", "describe", "orders", "-b", b)
    assert "Partitions:  3" in text and "PARTITION  LEADER  EPOCH  REPLICAS  ISR  OFFLINE" in text

    assert ok("topics", "delete", "orders", "payments", "-b", b) == "deleted topic 'orders'\ndeleted topic 'payments'\n"
    assert not {"orders", "payments"} & set(confluent_topics(b))


def test_errors_are_one_line_and_exit_1(broker):
    b = broker.bootstrap
    ok("topics", "create", "taken", "-b", b)
    assert "TOPIC_ALREADY_EXISTS" in one_line_error(kwire("topics", "create", "taken", "-b", b))
    assert json.loads(ok("topics", "create", "taken", "-b", b, "--if-not-exists", "--json"))["exists"] is True
    assert "UNKNOWN_TOPIC_OR_PARTITION: topic 'ghost'" in one_line_error(kwire("topics", "describe", "ghost", "-b", b))
    assert "'ghost'" in one_line_error(kwire("topics", "delete", "ghost", "-b", b))
    assert "INVALID_REPLICATION_FACTOR" in one_line_error(
        kwire("topics", "create", "wide", "--replication-factor", "3", "-b", b))
    refused = one_line_error(kwire("topics", "list", "-b", "127.0.0.1:1", "--timeout", "1"))
    assert "cannot reach the cluster at 127.0.0.1:1" in refused
    assert "request.timeout.ms" in one_line_error(kwire("topics", "list", "-b", b, "-X", "request.timeout.ms=soon"))
    assert "is not key=value" in kwire("topics", "list", "-X", "oops").stderr  # argparse: usage, exit 2


def test_bootstrap_from_environment_properties_file_and_x(broker, tmp_path):
    b = broker.bootstrap
    ok("topics", "create", "located", "-b", b)
    # $KWIRE_BOOTSTRAP when no flag says otherwise.
    assert "located" in ok("topics", "list", env={"KWIRE_BOOTSTRAP": b})
    props = tmp_path / "client.properties"
    props.write_text(f"# a Kafka client properties file\nbootstrap.servers={b}\nclient.id=from-file\n")
    assert "located" in ok("topics", "list", "--config", str(props), env={"KWIRE_BOOTSTRAP": "127.0.0.1:1"})
    # -X overrides the file, --bootstrap overrides -X.
    assert "located" in ok("topics", "list", "--config", str(props), "-X", "bootstrap.servers=127.0.0.1:1",
                           "--bootstrap", b, "--timeout", "5")
    # Either spelling of a setting name, the same precedence.
    assert "located" in ok("topics", "list", "-X", "bootstrap_servers=127.0.0.1:1", "--bootstrap", b)
    failed = one_line_error(kwire("topics", "list", "--config", str(props), "-X", "bootstrap.servers=127.0.0.1:1",
                                  "--timeout", "1"))
    assert "127.0.0.1:1" in failed
    # topics create keeps --config for topic configs; the properties file moves to --client-config.
    ok("topics", "create", "via-file", "--client-config", str(props), "--config", "retention.ms=60000")
    assert "via-file" in confluent_topics(b)
    missing = one_line_error(kwire("topics", "list", "--config", str(tmp_path / "nope.properties")))
    assert "nope.properties" in missing
