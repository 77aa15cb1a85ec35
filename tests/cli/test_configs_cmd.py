"""``kwire configs`` as users run it: a real process against kwire's broker; what it changed is
checked with confluent-kafka's AdminClient, and its --json output parsed."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from kwire.broker import EmbeddedBroker

from .test_topics_cmd import kwire, ok, one_line_error


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


def topic_configs(bootstrap: str, topic: str) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return admin.describe_configs([resource])[resource].result(30)


@pytest.mark.parametrize("command", [["configs"], ["configs", "describe"], ["configs", "alter"]])
def test_help(command):
    out = ok(*command, "--help")
    assert out.startswith("usage: kwire " + " ".join(command))
    if len(command) > 1:
        assert "--topic" in out and "--broker" in out and "--json" in out


def test_topics_create_takes_the_new_configs(broker):
    b = broker.bootstrap
    ok("topics", "create", "compacted", "--config", "cleanup.policy=compact", "--config", "compression.type=zstd",
       "-b", b)
    configs = topic_configs(b, "compacted")
    assert configs["cleanup.policy"].value == "compact" and configs["compression.type"].value == "zstd"
    assert "INVALID_CONFIG" in one_line_error(kwire("topics", "create", "bad", "--config", "preallocate=maybe",
                                                    "-b", b))


def test_alter_then_describe_a_topic(broker):
    b = broker.bootstrap
    ok("topics", "create", "cli-configs", "--config", "retention.ms=3600000", "-b", b)
    out = ok("configs", "alter", "--topic", "cli-configs", "--set", "max.message.bytes=5000", "--delete",
             "retention.ms", "--append", "cleanup.policy=compact", "-b", b)
    assert out == ("altered topic 'cli-configs': max.message.bytes=5000, retention.ms back to its default, "
                   "compact appended to cleanup.policy\n")
    configs = topic_configs(b, "cli-configs")
    assert configs["max.message.bytes"].value == "5000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"
    # kafka-configs.sh's spellings.
    ok("configs", "alter", "--topic", "cli-configs", "--add-config", "segment.ms=600000,cleanup.policy=[compact]",
       "--delete-config", "max.message.bytes", "-b", b)
    doc = json.loads(ok("configs", "describe", "--topic", "cli-configs", "--overrides", "--json", "-b", b))
    assert doc["resource"] == {"type": "topic", "name": "cli-configs"}
    assert {c["name"]: (c["value"], c["source"]) for c in doc["configs"]} == {
        "cleanup.policy": ("compact", "DYNAMIC_TOPIC_CONFIG"), "segment.ms": ("600000", "DYNAMIC_TOPIC_CONFIG")}
    everything = json.loads(ok("configs", "describe", "--topic", "cli-configs", "--json", "--docs", "-b", b))
    retention = next(c for c in everything["configs"] if c["name"] == "retention.ms")
    assert retention["type"] == "long" and retention["documentation"]
    assert retention["synonyms"][-1] == {"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"}
    table = ok("configs", "describe", "--topic", "cli-configs", "--synonyms", "-b", b).splitlines()
    assert table[0].split() == ["CONFIG", "VALUE", "SOURCE", "READ-ONLY", "SYNONYMS"]
    assert any(line.split()[:3] == ["segment.ms", "600000", "dynamic-topic"] for line in table)


def test_alter_then_describe_the_broker(broker):
    b = broker.bootstrap
    doc = json.loads(ok("configs", "alter", "--broker", "--set", "log.retention.ms=7200000", "--json", "-b", b))
    assert doc == {"resource": {"type": "broker", "name": "1"}, "validate_only": False,
                   "changes": [{"op": "set", "name": "log.retention.ms", "value": "7200000"}]}
    ok("configs", "alter", "--broker-defaults", "--set", "log.roll.ms=7200000", "-b", b)
    broker_doc = json.loads(ok("configs", "describe", "--broker", "1", "--json", "-b", b))
    by_name = {c["name"]: c for c in broker_doc["configs"]}
    assert (by_name["log.retention.ms"]["value"], by_name["log.retention.ms"]["source"]) == \
        ("7200000", "DYNAMIC_BROKER_CONFIG")
    assert (by_name["log.roll.ms"]["value"], by_name["log.roll.ms"]["source"]) == \
        ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert by_name["log.dirs"]["read_only"] and not by_name["log.retention.ms"]["read_only"]
    defaults = json.loads(ok("configs", "describe", "--broker-defaults", "--json", "-b", b))
    assert [c["name"] for c in defaults["configs"]] == ["log.roll.ms"]
    ok("configs", "alter", "--broker", "--delete", "log.retention.ms", "-b", b)
    ok("configs", "alter", "--broker-defaults", "--delete", "log.roll.ms", "-b", b)
    assert "no configs for the cluster-wide broker defaults" in ok("configs", "describe", "--broker-defaults",
                                                                    "-b", b)


def test_refusals_are_one_line_errors(broker):
    b = broker.bootstrap
    ok("topics", "create", "cli-refused", "-b", b)
    line = one_line_error(kwire("configs", "alter", "--topic", "cli-refused", "--set", "retention.ms=soon", "-b", b))
    assert "INVALID_CONFIG" in line and "retention.ms" in line
    line = one_line_error(kwire("configs", "alter", "--broker", "--set", "num.partitions=3", "-b", b))
    assert "INVALID_REQUEST" in line and "num.partitions" in line
    line = one_line_error(kwire("configs", "describe", "--topic", "cli-absent", "-b", b))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line
    line = one_line_error(kwire("configs", "alter", "--topic", "cli-refused", "-b", b))
    assert "nothing to change" in line
    assert topic_configs(b, "cli-refused")["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
