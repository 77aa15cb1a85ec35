"""GROUP config resources judged by real admin clients (confluent-kafka's AdminClient, kafka-python's
list_config_resources), kwire's own admin client and ``kwire configs --group``: a group config is
set for a group that does not exist yet, DescribeConfigs shows it as the group's (GROUP_CONFIG)
and every other group config at the broker's default (DEFAULT_CONFIG) with Kafka's synonyms, bad
values are refused with Kafka's INVALID_CONFIG messages, ListConfigResources lists the group, and
the config survives a restart, where the coordinators read it through ``state.group_configs``."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin import ResourceType as CkResourceType
from kafka.admin import KafkaAdminClient

from kwire.broker import EmbeddedBroker
from kwire.client.admin import Admin, ConfigChange
from kwire.client.admin import ConfigResource as KwResource
from kwire.protocol.errors import InvalidConfigError

from ..cli.test_topics_cmd import kwire, ok


def ck_set(admin: AdminClient, group: str, **ops: tuple[AlterConfigOpType, str | None]) -> None:
    entries = [ConfigEntry(name.replace("_", "."), value, incremental_operation=op) for name, (op, value) in ops.items()]
    resource = ConfigResource(CkResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


def ck_describe(admin: AdminClient, group: str) -> dict:
    resource = ConfigResource(CkResourceType.GROUP, group)
    return admin.describe_configs([resource])[resource].result(30)


def test_confluent_kafka_sets_describes_and_deletes_group_configs_of_a_group_to_come(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        SET = AlterConfigOpType.SET
        ck_set(admin, "not-yet", consumer_session_timeout_ms=(SET, "50000"),
               share_record_lock_duration_ms=(SET, "20000"))
        described = ck_describe(admin, "not-yet")
        own = described["consumer.session.timeout.ms"]
        assert (own.value, own.source) == ("50000", ConfigSource.GROUP_CONFIG.value)
        assert [(s.name, s.value, s.source) for s in own.synonyms.values()] == [
            ("consumer.session.timeout.ms", "50000", ConfigSource.GROUP_CONFIG.value),
            ("group.consumer.session.timeout.ms", "45000", ConfigSource.DEFAULT_CONFIG.value)]
        default = described["share.heartbeat.interval.ms"]
        assert (default.value, default.source) == ("5000", ConfigSource.DEFAULT_CONFIG.value)
        assert described["share.isolation.level"].value == "read_uncommitted"
        assert "share.auto.offset.reset" in described and "group.initial.rebalance.delay.ms" not in described
        # What a coordinator reads: typed, over the defaults.
        cfg = broker.state.group_configs.get("not-yet")
        assert (cfg.consumer_session_timeout_ms, cfg.share_record_lock_duration_ms) == (50000, 20000)

        # Kafka's refusals: outside the broker's bounds, unknown names, a non-list APPEND.
        for ops, message in [
            ({"consumer_session_timeout_ms": (SET, "5000")},
             "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
            ({"share_record_lock_duration_ms": (SET, "100")}, "share.record.lock.duration.ms"),
            ({"share_auto_offset_reset": (SET, "newest")}, "share.auto.offset.reset"),
        ]:
            with pytest.raises(KafkaException) as caught:
                ck_set(admin, "not-yet", **ops)
            assert caught.value.args[0].code() == InvalidConfigError.code
            assert message in caught.value.args[0].str()
        resource = ConfigResource(CkResourceType.GROUP, "not-yet", incremental_configs=[
            ConfigEntry("group.initial.rebalance.delay.ms", "0", incremental_operation=SET)])
        with pytest.raises(KafkaException, match="Unknown group config name: group.initial.rebalance.delay.ms"):
            admin.incremental_alter_configs([resource])[resource].result(30)
        assert ck_describe(admin, "not-yet")["consumer.session.timeout.ms"].value == "50000"  # nothing changed

        # The legacy AlterConfigs replaces the group's whole set.
        legacy = ConfigResource(CkResourceType.GROUP, "not-yet", set_config={"share.isolation.level": "read_committed"})
        with pytest.warns(DeprecationWarning):
            admin.alter_configs([legacy])[legacy].result(30)
        described = ck_describe(admin, "not-yet")
        assert described["share.isolation.level"].source == ConfigSource.GROUP_CONFIG.value
        assert described["consumer.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
        assert broker.state.group_configs.get("not-yet").share_read_committed

    with EmbeddedBroker(data) as broker:  # persisted
        assert broker.state.group_configs.get("not-yet").share_isolation_level == "read_committed"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        ck_set(admin, "not-yet", share_isolation_level=(AlterConfigOpType.DELETE, None))
        assert ck_describe(admin, "not-yet")["share.isolation.level"].source == ConfigSource.DEFAULT_CONFIG.value
        assert broker.state.group_configs.groups() == []


def test_kwire_admin_and_kafka_python_list_the_groups_with_configs(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as broker, Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        group = KwResource.group("orders-app")
        admin.incremental_alter_configs({group: [ConfigChange.set("share.auto.offset.reset", "by_duration:PT1H"),
                                                 ConfigChange.set("share.delivery.count.limit", "3")]})
        entries = admin.describe_configs([group], include_synonyms=True)[group]
        assert entries["share.auto.offset.reset"].value == "by_duration:PT1H"
        assert entries["share.delivery.count.limit"].source.name == "GROUP_CONFIG"
        assert broker.state.group_configs.get("orders-app").share_auto_offset_reset_duration_ms == 3600 * 1000
        with pytest.raises(InvalidConfigError, match="share.delivery.count.limit must be in the range 2 to 10"):
            admin.incremental_alter_configs({group: [ConfigChange.set("share.delivery.count.limit", "11")]})
        with pytest.raises(InvalidConfigError, match="because its type is not LIST"):
            admin.incremental_alter_configs({group: [ConfigChange.append("share.isolation.level", "x")]})
        admin.incremental_alter_configs({group: [ConfigChange.set("consumer.heartbeat.interval.ms", "6000")]},
                                        validate_only=True)
        assert "consumer.heartbeat.interval.ms" not in broker.state.group_configs.overrides("orders-app")

        kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        try:
            assert kp.list_config_resources(["GROUP"]) == {"group": ["orders-app"]}
            assert kp.list_config_resources()["group"] == ["orders-app"]
        finally:
            kp.close()


def test_kwire_configs_cli_describes_and_alters_a_group():
    with EmbeddedBroker() as broker:
        b = broker.bootstrap
        out = ok("configs", "alter", "--group", "cli-group", "--set", "consumer.session.timeout.ms=60000", "-b", b)
        assert "group 'cli-group'" in out and "consumer.session.timeout.ms=60000" in out
        doc = json.loads(ok("configs", "describe", "--group", "cli-group", "--json", "-b", b))
        assert doc["resource"] == {"type": "group", "name": "cli-group"}
        rows = {r["name"]: r for r in doc["configs"]}
        assert (rows["consumer.session.timeout.ms"]["value"], rows["consumer.session.timeout.ms"]["source"]) \
            == ("60000", "GROUP_CONFIG")
        assert rows["share.record.lock.duration.ms"]["source"] == "DEFAULT_CONFIG"
        own = json.loads(ok("configs", "describe", "--group", "cli-group", "--overrides", "--json", "-b", b))
        assert [r["name"] for r in own["configs"]] == ["consumer.session.timeout.ms"]
        # kafka-configs.sh's spelling.
        ok("configs", "alter", "--entity-type", "groups", "--entity-name", "cli-group", "--add-config",
           "share.isolation.level=read_committed", "-b", b)
        own = json.loads(ok("configs", "describe", "--entity-type", "groups", "--entity-name", "cli-group",
                            "--overrides", "--json", "-b", b))
        assert [r["name"] for r in own["configs"]] == ["consumer.session.timeout.ms", "share.isolation.level"]
        bad = kwire("configs", "alter", "--group", "cli-group", "--set", "share.session.timeout.ms=1", "-b", b)
        assert bad.returncode == 1 and "share.session.timeout.ms must be in the range 45000 to 60000" in bad.stderr
