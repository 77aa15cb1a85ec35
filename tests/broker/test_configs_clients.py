"""Dynamic configs judged by real admin clients: confluent-kafka, kafka-python and aiokafka
alter a topic config and a broker config (AlterConfigs, IncrementalAlterConfigs), DescribeConfigs
shows the new value and where it comes from, the change takes effect at once (retention deletes
old segments, a lowered max.message.bytes refuses a big batch), and it survives a restart.

Every test starts its own broker on its own data dir.  None of the three clients can name the
cluster-wide default broker resource ("") — they turn the name into a node id — so that scope is
tested with kwire's own admin client (tests/broker/test_configs.py).
"""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioResource
from aiokafka.admin.config_resource import ConfigResourceType as AioResourceType
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from confluent_kafka.admin import ResourceType as CkResourceType
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType as KpResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

from kwire.broker import EmbeddedBroker

OLD = 3600 * 1000  # records an hour old: past a retention.ms of one minute
N = 20


def produce_old_records(bootstrap: str, topic: str, n: int = N) -> None:
    """n records stamped an hour ago (CreateTime), acknowledged by the broker."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors = []
    stamp = int(time.time() * 1000) - OLD
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i, timestamp=stamp,
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0
    assert errors == []


def produce_error(bootstrap: str, topic: str, value: bytes) -> confluent_kafka.KafkaError | None:
    """The broker's answer to one record (None: stored)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0,
                                         "message.max.bytes": 10_000_000})
    outcome: list = []
    producer.produce(topic, value=value, on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome[0]


def retention_pass(broker: EmbeddedBroker) -> dict:
    """The broker's periodic retention check, run now on its loop."""
    return broker.call(broker.state.logs.apply_retention_all)


def log_start(broker: EmbeddedBroker, topic: str) -> int:
    return broker.call(lambda: broker.state.logs.get(topic, 0).log_start_offset)


def check_effects(broker: EmbeddedBroker, topic: str) -> None:
    """retention.ms lowered to a minute deletes the hour-old records at the next pass; a
    max.message.bytes of 2000 refuses a 5000-byte record."""
    assert log_start(broker, topic) == 0
    assert retention_pass(broker) == {(topic, 0): [0]}
    assert log_start(broker, topic) == N
    err = produce_error(broker.bootstrap, topic, b"x" * 5000)
    assert err is not None and err.code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE
    assert produce_error(broker.bootstrap, topic, b"small") is None


def cleaner_backoff(broker: EmbeddedBroker, want: int = 20000) -> int:
    """The running log cleaner's backoff, once it is ``want`` (a reconfigured cleaner restarts
    on a thread of its own) or after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        cleaner = broker.state.logs.cleaner
        backoff = cleaner.config.backoff_ms if cleaner is not None else None
        if backoff == want or time.monotonic() > deadline:
            return backoff
        time.sleep(0.02)


# -- confluent-kafka ------------------------------------------------------------------------------
def ck_describe(admin: AdminClient, resource_type, name: str) -> dict:
    resource = ConfigResource(resource_type, name)
    return admin.describe_configs([resource])[resource].result(30)


def ck_check(admin: AdminClient, topic: str) -> None:
    topic_configs = ck_describe(admin, CkResourceType.TOPIC, topic)
    assert (topic_configs["retention.ms"].value, topic_configs["retention.ms"].source) == \
        ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (topic_configs["max.message.bytes"].value, topic_configs["max.message.bytes"].source) == \
        ("2000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    # The broker's log.roll.ms is the default of every topic's segment.ms.
    assert (topic_configs["segment.ms"].value, topic_configs["segment.ms"].source) == \
        ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    broker_configs = ck_describe(admin, CkResourceType.BROKER, "1")
    roll = broker_configs["log.roll.ms"]
    assert (roll.value, roll.source, roll.is_read_only) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert broker_configs["log.cleaner.backoff.ms"].value == "20000"


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_kafka_alters_topic_and_broker_configs(tmp_path):
    data, topic = tmp_path / "data", "ck-configs"
    with EmbeddedBroker(data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        produce_old_records(broker.bootstrap, topic)
        t = ConfigResource(CkResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
        assert admin.incremental_alter_configs([t])[t].result(30) is None
        b = ConfigResource(CkResourceType.BROKER, "1", set_config={"log.roll.ms": "3600000",
                                                                 "log.cleaner.backoff.ms": "20000"})
        assert admin.alter_configs([b])[b].result(30) is None  # the legacy request
        ck_check(admin, topic)
        assert broker.call(lambda: broker.state.config.log_cleaner_backoff_ms) == 20000
        assert broker.call(lambda: broker.state.config.advertised_port) == broker.port  # kept what start set
        assert cleaner_backoff(broker) == 20000  # the running cleaner restarted with it
        check_effects(broker, topic)
    with EmbeddedBroker(data) as broker:
        ck_check(AdminClient({"bootstrap.servers": broker.bootstrap}), topic)
        assert broker.call(lambda: broker.state.logs.get(topic, 0).config.segment_ms) == 3600000
        assert cleaner_backoff(broker) == 20000


# -- kafka-python -----------------------------------------------------------------------------------
def kp_check(admin: KafkaAdminClient, topic: str) -> None:
    found = admin.describe_configs([KpResource(KpResourceType.TOPIC, topic), KpResource(KpResourceType.BROKER, "1")],
                                   include_synonyms=True)
    retention = found["topic"][topic]["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("60000", "DYNAMIC_TOPIC_CONFIG")
    assert retention["synonyms"][0] == {"name": "retention.ms", "value": "60000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert retention["synonyms"][-1] == {"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"}
    assert found["topic"][topic]["retention.bytes"]["value"] == "1000000000"
    assert found["topic"][topic]["retention.bytes"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
    assert found["broker"]["1"]["log.retention.bytes"]["config_source"] == "DYNAMIC_BROKER_CONFIG"


def test_kafka_python_alters_topic_and_broker_configs(tmp_path):
    data, topic = tmp_path / "data", "kp-configs"
    with EmbeddedBroker(data) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            admin.create_topics([KpNewTopic(topic, 1, 1)])
            produce_old_records(broker.bootstrap, topic)
            outcome = admin.alter_configs([KpResource(KpResourceType.TOPIC, topic, configs={
                "retention.ms": "60000", "max.message.bytes": "2000"})], incremental=False)
            assert outcome == {"topic": {topic: "OK"}}
            outcome = admin.alter_configs([KpResource(KpResourceType.BROKER, "1", configs={
                "log.retention.bytes": "1000000000"})], incremental=False)
            assert outcome == {"broker": {"1": "OK"}}
            kp_check(admin, topic)
            check_effects(broker, topic)
        finally:
            admin.close()
    with EmbeddedBroker(data) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            kp_check(admin, topic)
        finally:
            admin.close()


# -- aiokafka -----------------------------------------------------------------------------------------
def aio_entries(response) -> dict[str, tuple]:
    """name -> (value, source) from a DescribeConfigs response of one resource."""
    (error_code, _message, _type, _name, entries), = response.resources
    assert error_code == 0
    return {e[0]: (e[1], e[3]) for e in entries}


async def aio_check(admin: AIOKafkaAdminClient, topic: str) -> None:
    topic_resp, = await admin.describe_configs([AioResource(AioResourceType.TOPIC, topic)])
    entries = aio_entries(topic_resp)
    assert entries["retention.ms"] == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert entries["message.timestamp.type"] == ("LogAppendTime", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    broker_resp, = await admin.describe_configs([AioResource(AioResourceType.BROKER, "1")])
    assert aio_entries(broker_resp)["log.message.timestamp.type"] == \
        ("LogAppendTime", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


async def aio_session(bootstrap: str, body):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await body(admin)
    finally:
        await admin.close()


def test_aiokafka_alters_topic_and_broker_configs(tmp_path):
    data, topic = tmp_path / "data", "aio-configs"

    async def alter(admin: AIOKafkaAdminClient) -> None:
        await admin.create_topics([AioNewTopic(topic, 1, 1)])
        produce_old_records(broker.bootstrap, topic)
        responses = await admin.alter_configs([
            AioResource(AioResourceType.TOPIC, topic, configs={"retention.ms": "60000", "max.message.bytes": "2000"}),
            AioResource(AioResourceType.BROKER, "1", configs={"log.message.timestamp.type": "LogAppendTime"})])
        assert [r.resources[0][0] for r in responses] == [0, 0]
        await aio_check(admin, topic)

    with EmbeddedBroker(data) as broker:
        asyncio.run(aio_session(broker.bootstrap, alter))
        check_effects(broker, topic)
        # message.timestamp.type from the broker's dynamic config: the next append is stamped.
        assert broker.call(lambda: broker.state.logs.get(topic, 0).config.log_append_time)
    with EmbeddedBroker(data) as broker:
        asyncio.run(aio_session(broker.bootstrap, lambda admin: aio_check(admin, topic)))

