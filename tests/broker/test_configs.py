"""Dynamic configs beyond the three clients' basics (test_configs_clients.py): compression.type
recompresses stored batches, bad input gets Kafka's error codes and changes nothing, every topic
config of the catalogue is accepted with its default and described, the cluster-wide default
and per-broker scopes layer as in Kafka and persist, validate_only, documentation, sensitive
values.  Real clients (confluent-kafka, aiokafka, kwire's admin) against an EmbeddedBroker.
"""

from __future__ import annotations

import asyncio
import json
import time

import confluent_kafka
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioResource
from aiokafka.admin.config_resource import ConfigResourceType as AioResourceType
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from confluent_kafka.admin import ResourceType as CkResourceType

from kwire.broker import EmbeddedBroker
from kwire.broker.handlers import supported_versions
from kwire.broker.topic_configs import TOPIC_CONFIGS
from kwire.client.admin import Admin, ConfigChange, ConfigSource
from kwire.client.admin import ConfigResource as KwResource
from kwire.protocol import messages
from kwire.protocol.configs import AlterConfigOp, ConfigResourceType
from kwire.protocol.errors import InvalidConfigError, InvalidRequestError, UnknownTopicOrPartitionError
from kwire.protocol.records import Compression, iter_batches

from . import clients as c
from .conftest import serve

SET, APPEND = AlterConfigOpType.SET, AlterConfigOpType.APPEND


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as b:
        yield b


def ck_admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def ck_create(admin: AdminClient, topic: str, config: dict[str, str] | None = None) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])[topic].result(30)


def ck_incremental(admin: AdminClient, resource_type, name: str, *ops: tuple[str, str | None, object]) -> None:
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops])
    admin.incremental_alter_configs([resource])[resource].result(30)


def ck_topic_configs(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource(CkResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(30)


def stored_batches(broker: EmbeddedBroker, topic: str) -> list:
    """The batches in the partition's segment files, read from disk."""
    broker.call(broker.state.logs.flush_all)
    files = sorted((broker.config.data_dir / f"{topic}-0").glob("*.log"))
    return [b for f in files for b in iter_batches(f.read_bytes())]


# -- compression.type -------------------------------------------------------------------------------
def test_compression_type_zstd_stores_batches_in_zstd(broker):
    topic = "zstd-topic"
    admin = ck_admin(broker)
    ck_create(admin, topic, {"compression.type": "zstd"})
    sent = c.records(topic, 200)
    c.confluent_produce(broker.bootstrap, topic, sent, **{"compression.type": "none", "enable.idempotence": True})
    batches = stored_batches(broker, topic)
    assert batches and {b.compression for b in batches} == {Compression.ZSTD}
    for b in batches:
        b.validate()  # the rebuilt CRC holds
    # The producer's id, epoch and sequences, the offsets and the timestamps stay as sent.
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]
    assert sum(b.record_count for b in batches) == 200
    consumer = c.confluent_consumer(broker.bootstrap, "g-zstd", [topic])
    got = c.confluent_consume(consumer, 200)
    consumer.close()
    c.check_same(sent, got)
    # Altered to uncompressed: the next gzip batch is stored uncompressed.
    ck_incremental(admin, CkResourceType.TOPIC, topic, ("compression.type", "uncompressed", SET))
    c.confluent_produce(broker.bootstrap, topic, c.records(topic, 10, start=200), **{"compression.type": "gzip"})
    assert stored_batches(broker, topic)[-1].compression == Compression.NONE


# -- bad input --------------------------------------------------------------------------------------
def ck_error(admin: AdminClient, resource_type, name: str, *ops) -> int:
    with pytest.raises(confluent_kafka.KafkaException) as caught:
        ck_incremental(admin, resource_type, name, *ops)
    return caught.value.args[0].code()


def test_bad_input_gets_kafkas_error_codes_and_changes_nothing(broker):
    topic = "strict"
    admin = ck_admin(broker)
    ck_create(admin, topic, {"retention.ms": "100000"})
    topics_json = (broker.config.data_dir / "__kwire" / "topics.json").read_bytes()
    invalid_config, invalid_request = confluent_kafka.KafkaError.INVALID_CONFIG, confluent_kafka.KafkaError.INVALID_REQUEST
    T, B = CkResourceType.TOPIC, CkResourceType.BROKER
    # Each refusal carries a good change too: nothing of the resource may be applied.
    good = ("retention.bytes", "12345", SET)
    assert ck_error(admin, T, topic, good, ("no.such.config", "1", SET)) == invalid_config
    assert ck_error(admin, T, topic, good, ("retention.ms", "-5", SET)) == invalid_config
    assert ck_error(admin, T, topic, good, ("segment.bytes", "1000", SET)) == invalid_config  # under 1 MiB
    assert ck_error(admin, T, topic, good, ("compression.type", "brotli", SET)) == invalid_config
    assert ck_error(admin, T, topic, good, ("min.insync.replicas", "2", SET)) == invalid_config
    assert ck_error(admin, T, topic, good, ("retention.ms", "5", APPEND)) == invalid_config
    assert ck_error(admin, T, "no-such-topic", good) == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
    # Broker configs: Kafka answers INVALID_REQUEST for one that is not dynamic (KAFKA-13609).
    good_broker = ("log.retention.ms", "1000", SET)
    assert ck_error(admin, B, "1", good_broker, ("num.partitions", "3", SET)) == invalid_request
    assert ck_error(admin, B, "1", good_broker, ("log.dirs", "/tmp/x", SET)) == invalid_request
    assert ck_error(admin, B, "1", good_broker, ("log.retention.hours", "1", SET)) == invalid_request
    assert ck_error(admin, B, "1", good_broker, ("log.segment.bytes", "ten", SET)) == invalid_request
    configs = ck_topic_configs(admin, topic)
    assert configs["retention.ms"].value == "100000" and configs["retention.bytes"].value == "-1"
    assert (broker.config.data_dir / "__kwire" / "topics.json").read_bytes() == topics_json
    assert not (broker.config.data_dir / "__kwire" / "broker-configs.json").exists()
    assert broker.call(lambda: broker.state.logs.get(topic, 0).config.retention_ms) == 100000
    # The broker keeps serving.
    sent = c.records(topic, 5)
    assert len(c.confluent_produce(broker.bootstrap, topic, sent)) == 5


def test_another_brokers_id_is_refused(state):
    """Clients send a broker's configs to that broker: only a raw request names another one."""
    R = messages.IncrementalAlterConfigsRequest
    request = R(validate_only=False, resources=[R.AlterConfigsResource(
        resource_type=ConfigResourceType.BROKER, resource_name="7", configs=[R.AlterConfigsResource.AlterableConfig(
            name="log.retention.ms", config_operation=AlterConfigOp.SET, value="1000")])])
    result, = serve(state, request, 1).responses
    assert result.error_code == InvalidRequestError.code and "expected 1" in result.error_message
    assert state.dynamic_configs.merged() == {}


def test_kwire_admin_raises_the_typed_errors(broker):
    with Admin(bootstrap_servers=[broker.bootstrap]) as admin:
        admin.create_topics(["typed"])
        with pytest.raises(InvalidConfigError, match="cleanup.policy"):
            admin.alter_configs({KwResource.topic("typed"): {"cleanup.policy": "shred"}})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.incremental_alter_configs({KwResource.topic("absent"): [ConfigChange.set("retention.ms", "1")]})
        with pytest.raises(InvalidRequestError, match="dynamically"):
            admin.alter_configs({KwResource.broker(""): {"auto.create.topics.enable": "false"}})


# -- every config of the catalogue ------------------------------------------------------------------
@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("catalogue")) as b:
        yield b


@pytest.mark.parametrize("name", [n for n, d in TOPIC_CONFIGS.items() if not d.internal])
def test_every_topic_config_is_created_with_its_default_and_described(shared_broker, name):
    d = TOPIC_CONFIGS[name]
    topic = "cat-" + name.replace(".", "-")
    admin = ck_admin(shared_broker)
    ck_create(admin, topic, {name: d.default})
    entry = ck_topic_configs(admin, topic)[name]
    assert (entry.value, entry.source) == (d.default, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


# -- broker scopes, persistence ---------------------------------------------------------------------
def kw_entry(admin: Admin, resource: KwResource, name: str):
    return admin.describe_configs([resource], include_synonyms=True)[resource][name]


def test_cluster_default_and_per_broker_configs_layer_and_persist(tmp_path):
    data = tmp_path / "data"
    topic, t, cluster, node = "layered", KwResource.topic("layered"), KwResource.broker(""), KwResource.broker(1)
    with EmbeddedBroker(data) as broker, Admin(bootstrap_servers=[broker.bootstrap]) as admin:
        admin.create_topics([topic])
        admin.incremental_alter_configs({cluster: [ConfigChange.set("log.retention.ms", "5000"),
                                                   ConfigChange.set("log.cleanup.policy", "delete")]})
        assert (kw_entry(admin, t, "retention.ms").value, kw_entry(admin, t, "retention.ms").source) == \
            ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        admin.alter_configs({node: {"log.retention.ms": "7000"}})
        entry = kw_entry(admin, t, "retention.ms")
        assert (entry.value, entry.source) == ("7000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        # Kafka's order: per-broker, cluster default, static, default values of the broker synonyms.
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
            ("log.retention.ms", "7000", ConfigSource.DYNAMIC_BROKER_CONFIG),
            ("log.retention.ms", "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]
        assert broker.call(lambda: broker.state.logs.get(topic, 0).config.retention_ms) == 7000
        # A list config of the broker takes APPEND; the topic inherits it.
        admin.incremental_alter_configs({cluster: [ConfigChange.append("log.cleanup.policy", "compact")]})
        assert kw_entry(admin, cluster, "log.cleanup.policy").value == "delete,compact"
        assert kw_entry(admin, t, "cleanup.policy").value == "delete,compact"
        # The resource "" describes only what was set on it.
        described = admin.describe_configs([cluster])[cluster]
        assert sorted(described) == ["log.cleanup.policy", "log.retention.ms"]
    with EmbeddedBroker(data) as broker, Admin(bootstrap_servers=[broker.bootstrap]) as admin:
        assert kw_entry(admin, t, "retention.ms").value == "7000"
        admin.incremental_alter_configs({node: [ConfigChange.delete("log.retention.ms")]})
        assert kw_entry(admin, t, "retention.ms").value == "5000"
        assert broker.call(lambda: broker.state.logs.get(topic, 0).config.retention_ms) == 5000
        assert broker.call(lambda: broker.state.logs.get(topic, 0).config.cleanup_policy) == "compact,delete"


def test_damaged_broker_configs_file_stops_the_start_naming_it(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data) as broker, Admin(bootstrap_servers=[broker.bootstrap]) as admin:
        admin.alter_configs({KwResource.broker(1): {"log.retention.ms": "7000"}})
    path = data / "__kwire" / "broker-configs.json"
    assert json.loads(path.read_text())["scopes"] == {"1": {"log.retention.ms": "7000"}}
    for damage in ("{not json", '{"version": 1, "scopes": {"": {"log.cleaner.threads": "none"}}}',
                   '{"version": 1, "scopes": {"": {"num.partitions": "3"}}}'):
        path.write_text(damage)
        with pytest.raises(ValueError, match="broker-configs.json"):
            EmbeddedBroker(data).start()
        assert path.read_text() == damage  # left for the operator to restore


def test_validate_only_changes_nothing(broker):
    with Admin(bootstrap_servers=[broker.bootstrap]) as admin:
        admin.create_topics(["checked"])
        admin.alter_configs({KwResource.topic("checked"): {"retention.ms": "1000"},
                             KwResource.broker(1): {"log.segment.bytes": "2000000"}}, validate_only=True)
        admin.incremental_alter_configs({KwResource.topic("checked"): [ConfigChange.set("retention.ms", "1000")]},
                                        validate_only=True)
        with pytest.raises(InvalidConfigError):
            admin.alter_configs({KwResource.topic("checked"): {"retention.ms": "x"}}, validate_only=True)
        assert kw_entry(admin, KwResource.topic("checked"), "retention.ms").source == ConfigSource.DEFAULT_CONFIG
        assert kw_entry(admin, KwResource.broker(1), "log.segment.bytes").source == ConfigSource.DEFAULT_CONFIG


# -- DescribeConfigs details ------------------------------------------------------------------------
def test_describe_documentation_types_sensitive_and_key_filter(broker):
    with Admin(bootstrap_servers=[broker.bootstrap]) as admin:
        admin.create_topics(["documented"])
        found = admin.describe_configs([KwResource.topic("documented"), KwResource.broker(1)],
                                       include_documentation=True)
        retention = found[KwResource.topic("documented")]["retention.ms"]
        assert retention.documentation and retention.config_type == 5  # LONG
        assert found[KwResource.topic("documented")]["cleanup.policy"].config_type == 7  # LIST
        password = found[KwResource.broker(1)]["ssl.key.password"]
        assert password.sensitive and password.value is None and password.read_only
        hours = found[KwResource.broker(1)]["log.retention.hours"]  # only log.retention.ms is dynamic
        assert (hours.value, hours.read_only) == ("168", True)
        assert not found[KwResource.broker(1)]["log.retention.ms"].read_only

    async def filtered():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return await admin.describe_configs([AioResource(AioResourceType.TOPIC, "documented",
                                                             configs={"retention.ms": None, "segment.ms": None})])
        finally:
            await admin.close()

    response, = asyncio.run(filtered())
    assert sorted(e[0] for e in response.resources[0][4]) == ["retention.ms", "segment.ms"]


def test_api_versions_advertise_the_alter_requests():
    versions = supported_versions()
    assert versions[messages.AlterConfigsRequest.API_KEY] == (0, 2)
    assert versions[messages.IncrementalAlterConfigsRequest.API_KEY] == (0, 1)


def test_retention_after_a_lowered_broker_default(broker):
    """log.retention.ms on the cluster default reaches topics without an override at the next pass."""
    topic = "expiring"
    admin = ck_admin(broker)
    ck_create(admin, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"old", timestamp=int(time.time() * 1000) - 3_600_000)
    assert producer.flush(30) == 0
    assert broker.call(broker.state.logs.apply_retention_all) == {}
    with Admin(bootstrap_servers=[broker.bootstrap]) as kw:
        kw.incremental_alter_configs({KwResource.broker(""): [ConfigChange.set("log.retention.ms", "60000")]})
    assert broker.call(broker.state.logs.apply_retention_all) == {(topic, 0): [0]}
