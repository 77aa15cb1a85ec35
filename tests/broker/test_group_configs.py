"""The group config store (kwire.broker.group_configs): Kafka's GroupConfig names, validation and
defaults, persisted per data directory."""

from __future__ import annotations

import pytest

from kwire.broker.group_configs import (
    GROUP_CONFIGS,
    GroupBrokerConfig,
    GroupConfigStore,
    check_group_configs,
    parse_iso8601_duration_ms,
)
from kwire.protocol.configs import ConfigSource
from kwire.settings import ConfigError


def test_a_group_without_configs_gets_kafkas_broker_defaults(tmp_path):
    cfg = GroupConfigStore(tmp_path).get("never-seen")
    assert (cfg.consumer_session_timeout_ms, cfg.consumer_heartbeat_interval_ms) == (45000, 5000)
    assert (cfg.share_session_timeout_ms, cfg.share_heartbeat_interval_ms) == (45000, 5000)
    assert cfg.share_record_lock_duration_ms == 30000
    assert cfg.share_delivery_count_limit == 5
    assert cfg.share_auto_offset_reset == "latest" and cfg.share_auto_offset_reset_duration_ms is None
    assert cfg.share_isolation_level == "read_uncommitted" and not cfg.share_read_committed
    assert cfg.overrides == {}


def test_overrides_persist_and_apply_over_the_defaults(tmp_path):
    store = GroupConfigStore(tmp_path)
    seen = []
    store.add_listener(lambda group, cfg: seen.append((group, cfg.consumer_session_timeout_ms)))
    store.replace("g", store.check({"consumer.session.timeout.ms": "50000",
                                    "share.auto.offset.reset": "by_duration:PT1H30M",
                                    "share.isolation.level": "read_committed"}))
    assert seen == [("g", 50000)]
    reopened = GroupConfigStore(tmp_path)
    cfg = reopened.get("g")
    assert cfg.consumer_session_timeout_ms == 50000
    assert cfg.share_auto_offset_reset_duration_ms == 90 * 60 * 1000
    assert cfg.share_read_committed
    assert reopened.groups() == ["g"]
    sources = {name: (value, source) for name, value, source, _ in reopened.describe("g")}
    assert sources["consumer.session.timeout.ms"] == ("50000", ConfigSource.GROUP_CONFIG)
    assert sources["consumer.heartbeat.interval.ms"] == ("5000", ConfigSource.DEFAULT_CONFIG)
    assert list(sources) == sorted(GROUP_CONFIGS)
    reopened.delete("g")
    assert GroupConfigStore(tmp_path).groups() == []
    assert GroupConfigStore(tmp_path).get("g").consumer_session_timeout_ms == 45000


@pytest.mark.parametrize("configs, message", [
    ({"not.a.config": "1"}, "Unknown group config name: not.a.config"),
    ({"consumer.session.timeout.ms": "1000"}, "consumer.session.timeout.ms must be in the range 45000 to 60000"),
    ({"consumer.heartbeat.interval.ms": "20000"}, "consumer.heartbeat.interval.ms must be in the range 5000 to 15000"),
    ({"share.record.lock.duration.ms": "70000"}, "share.record.lock.duration.ms must be in the range 15000 to 60000"),
    ({"share.delivery.count.limit": "1"}, "share.delivery.count.limit"),
    ({"consumer.heartbeat.interval.ms": "abc"}, "consumer.heartbeat.interval.ms"),
    ({"share.auto.offset.reset": "newest"}, "share.auto.offset.reset"),
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, "non-negative"),
    ({"share.isolation.level": "serializable"}, "share.isolation.level"),
    ({"streams.num.standby.replicas": "3"}, "streams.num.standby.replicas must be less than or equal to 2"),
])
def test_bad_group_configs_are_refused_naming_the_config(configs, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        check_group_configs(configs)


def test_the_session_must_outlast_the_heartbeat_with_the_brokers_value_for_the_other():
    bounds = GroupBrokerConfig(share_heartbeat_interval_ms_bounds=(5000, 50000))
    with pytest.raises(ConfigError, match="share.session.timeout.ms must be greater than share.heartbeat"):
        check_group_configs({"share.heartbeat.interval.ms": "45000"}, bounds)
    assert check_group_configs({"share.heartbeat.interval.ms": "44999"}, bounds)


def test_a_stored_value_outside_lowered_bounds_is_clamped_when_read(tmp_path):
    GroupConfigStore(tmp_path).replace("g", {"share.record.lock.duration.ms": "60000"})
    lowered = GroupConfigStore(tmp_path, GroupBrokerConfig(share_record_lock_duration_ms_bounds=(15000, 40000)))
    assert lowered.get("g").share_record_lock_duration_ms == 40000


def test_an_unreadable_file_names_itself_and_what_to_do(tmp_path):
    store = GroupConfigStore(tmp_path)
    store.replace("g", {"share.isolation.level": "read_committed"})
    store.path.write_text("{not json")
    with pytest.raises(ValueError, match="group-configs.json.*move it away"):
        GroupConfigStore(tmp_path)


def test_iso8601_durations_follow_javas_grammar():
    assert parse_iso8601_duration_ms("P1DT2H3M4.5S") == ((26 * 60 + 3) * 60 + 4) * 1000 + 500
    assert parse_iso8601_duration_ms("PT15M") == 15 * 60 * 1000
    for bad in ("1H", "P", "PT", "PT1X"):
        with pytest.raises(ValueError):
            parse_iso8601_duration_ms(bad)


def test_the_brokers_own_settings_default_and_bound_group_configs(tmp_path):
    from kwire.broker.config import load_config

    config = load_config(None, data_dir=tmp_path, group_consumer_session_timeout_ms=50000)
    broker = GroupBrokerConfig.from_broker(config)
    assert broker.consumer_session_timeout_ms == 50000
    assert broker.consumer_session_timeout_ms_bounds == (45000, 60000)  # Kafka's, not set on this broker
    store = GroupConfigStore(tmp_path, broker)
    assert store.get("g").consumer_session_timeout_ms == 50000
    sources = {name: (value, source) for name, value, source, _ in store.describe("g")}
    assert sources["consumer.session.timeout.ms"] == ("50000", ConfigSource.STATIC_BROKER_CONFIG)
    assert sources["share.session.timeout.ms"] == ("45000", ConfigSource.DEFAULT_CONFIG)


class _Settings:
    group_share_min_record_lock_duration_ms = 5000
    group_share_max_record_lock_duration_ms = 90000
    group_streams_max_standby_replicas = 4


def test_bounds_come_from_the_brokers_min_and_max_settings():
    broker = GroupBrokerConfig.from_broker(_Settings())
    assert broker.bounds("share.record.lock.duration.ms") == (5000, 90000)
    assert check_group_configs({"share.record.lock.duration.ms": "80000", "streams.num.standby.replicas": "4"},
                               broker)
