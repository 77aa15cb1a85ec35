"""The topic config catalogue's own rules: Kafka's types and validators, and the order in which a
partition's LogConfig takes its values (topic override, per-broker, cluster default, static)."""

from __future__ import annotations

import pytest

from kwire.broker.storage import LogConfig
from kwire.broker.topic_configs import TOPIC_CONFIGS, check_topic_overrides, parse_value, topic_log_config
from kwire.settings import ConfigError


@pytest.mark.parametrize("name,text,value", [
    ("retention.ms", " 1000 ", 1000),
    ("retention.ms", "-1", -1),
    ("preallocate", "TRUE", True),
    ("min.cleanable.dirty.ratio", "0.25", 0.25),
    ("cleanup.policy", "compact, delete", ("compact", "delete")),
    ("compression.gzip.level", "-1", -1),          # gzip's "codec default", outside 1..9
    ("compression.zstd.level", "-7", -7),
    ("leader.replication.throttled.replicas", "0:1,1:1", ("0:1", "1:1")),
    ("follower.replication.throttled.replicas", "*", ("*",)),
    ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
])
def test_values_kafka_accepts(name, text, value):
    assert parse_value(name, text) == value


@pytest.mark.parametrize("name,text,words", [
    ("retention.ms", "1e3", "integer"),
    ("retention.ms", "-2", ">= -1"),
    ("segment.bytes", "1048575", ">= 1048576"),
    ("max.message.bytes", str(1 << 31), "int"),     # over int32
    ("preallocate", "yes", "true or false"),
    ("min.cleanable.dirty.ratio", "1.5", "<= 1"),
    ("cleanup.policy", "compact,shred", "delete"),
    ("cleanup.policy", "", "delete"),
    ("compression.gzip.level", "0", "-1"),
    ("compression.type", "brotli", "zstd"),
    ("message.timestamp.type", "createtime", "CreateTime"),
    ("leader.replication.throttled.replicas", "0-1", "partition:broker"),
])
def test_values_kafka_refuses_name_what_is_allowed(name, text, words):
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")) as caught:
        parse_value(name, text)
    assert words in str(caught.value)


def test_every_default_is_a_valid_value():
    for d in TOPIC_CONFIGS.values():
        if d.default is not None:
            parse_value(d.name, d.default)


def test_log_config_takes_the_first_of_topic_broker_default_static():
    static = LogConfig(retention_ms=1000, segment_bytes=4096)
    assert topic_log_config(static, {}, {}) is static
    assert topic_log_config(static, {"log.retention.ms": "2000"}, {}).retention_ms == 2000
    assert topic_log_config(static, {"log.retention.ms": "2000"}, {"retention.ms": "3000"}).retention_ms == 3000
    cfg = topic_log_config(static, {"log.cleanup.policy": "compact", "compression.type": "lz4"},
                           {"internal.segment.bytes": "100"})
    assert (cfg.cleanup_policy, cfg.compression_type, cfg.segment_bytes, cfg.retention_ms) == ("compact", "lz4", 100, 1000)


def test_overrides_are_checked_together():
    static = LogConfig()
    assert check_topic_overrides(static, {}, {"retention.ms": "5"}) == {"retention.ms": "5"}
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        check_topic_overrides(static, {}, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    with pytest.raises(ConfigError, match="did you mean 'retention.ms'"):
        check_topic_overrides(static, {}, {"retention.mss": "5"})
    with pytest.raises(ConfigError, match="single broker"):
        check_topic_overrides(static, {}, {"min.insync.replicas": "2"})
    with pytest.raises(ConfigError, match="null"):
        check_topic_overrides(static, {}, {"retention.ms": None})
