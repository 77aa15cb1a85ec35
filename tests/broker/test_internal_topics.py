"""__consumer_offsets and __transaction_state as Kafka's internal topics, judged by real clients:
listed internal in Metadata, readable, never writable by clients, never created, deleted or grown
by them, and never auto-created as plain topics; their logs appear only when first used."""

from __future__ import annotations

import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kwire.broker import EmbeddedBroker
from kwire.broker.internal_topics import java_string_hash, partition_for
from kwire.protocol import messages
from kwire.protocol.errors import (
    InvalidRequestError,
    InvalidTopicException,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from .conftest import serve

INTERNAL = ("__consumer_offsets", "__transaction_state")


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as b:
        yield b


def _partition_dirs(broker: EmbeddedBroker, topic: str) -> list[str]:
    return sorted(p.name for p in broker.data_dir.iterdir() if p.is_dir() and p.name.startswith(topic + "-"))


def test_metadata_lists_both_internal_topics_with_50_partitions(broker):
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        described = {t["name"]: t for t in admin.describe_topics(list(INTERNAL))}
    finally:
        admin.close()
    for name in INTERNAL:
        assert described[name]["error_code"] == 0
        assert described[name]["is_internal"] is True
        assert len(described[name]["partitions"]) == 50
    # Registered, yet not one partition directory was created at start.
    assert _partition_dirs(broker, "__consumer_offsets") == [] and _partition_dirs(broker, "__transaction_state") == []


def test_partition_counts_follow_the_settings(tmp_path):
    with EmbeddedBroker(tmp_path / "d", offsets_topic_num_partitions=3, transaction_state_log_num_partitions=2) as b:
        md = confluent_kafka.admin.AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
        assert len(md.topics["__consumer_offsets"].partitions) == 3
        assert len(md.topics["__transaction_state"].partitions) == 2


def test_producing_to_internal_topics_fails_with_kafkas_error(broker):
    # (kafka-python hides internal topics from its producer's metadata: it never sends one.)
    errors = []
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    for name in INTERNAL:
        p.produce(name, b"forged", partition=1, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(15) == 0
    assert [e.code() for e in errors] == [confluent_kafka.KafkaError.TOPIC_EXCEPTION] * 2
    assert _partition_dirs(broker, "__consumer_offsets") == [] and _partition_dirs(broker, "__transaction_state") == []


def test_produce_to_an_internal_topic_is_answered_cannot_append(state):
    P = messages.ProduceRequest
    req = P(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[P.TopicProduceData(
        name="__consumer_offsets", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=b"")])])
    part = serve(state, req, 9).responses[0].partition_responses[0]
    assert part.error_code == InvalidTopicException.code
    assert part.error_message.endswith("Cannot append to internal topic __consumer_offsets")


def test_a_never_written_internal_partition_reads_as_empty(broker):
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lag-reader",
                                  "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(confluent_kafka.TopicPartition("__consumer_offsets", 7), timeout=10)
        assert (low, high) == (0, 0)
    finally:
        c.close()


def test_create_topics_of_reserved_names_is_refused(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(n, 1) for n in (*INTERNAL, "__share_group_state")])
    codes = {}
    for name, fut in futures.items():
        with pytest.raises(confluent_kafka.KafkaException) as info:
            fut.result(timeout=15)
        codes[name] = info.value.args[0].code()
    assert codes == {"__consumer_offsets": confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS,
                     "__transaction_state": confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS,
                     "__share_group_state": confluent_kafka.KafkaError.INVALID_REQUEST}


def test_delete_topics_and_create_partitions_of_internal_topics_are_refused(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for fut in admin.delete_topics(list(INTERNAL), operation_timeout=5).values():
        with pytest.raises(confluent_kafka.KafkaException) as info:
            fut.result(timeout=15)
        assert info.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION
    for fut in admin.create_partitions([NewPartitions(n, 60) for n in INTERNAL]).values():
        with pytest.raises(confluent_kafka.KafkaException) as info:
            fut.result(timeout=15)
        assert info.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION
    md = admin.list_topics(timeout=10)
    assert all(len(md.topics[n].partitions) == 50 for n in INTERNAL)


def test_auto_create_never_makes_a_plain_internal_topic(state):
    version = 12
    req = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name=n)
                                           for n in (*INTERNAL, "__share_group_state")],
                                   allow_auto_topic_creation=True)
    resp = serve(state, req, version)
    by_name = {t.name: t for t in resp.topics}
    assert by_name["__share_group_state"].error_code == UnknownTopicOrPartitionError.code
    assert "__share_group_state" not in state.topics
    for name in INTERNAL:
        assert by_name[name].error_code == 0 and by_name[name].is_internal
        assert by_name[name].topic_id == state.topics.get(name).topic_id
    # Refused in the handlers too, whoever asks (the error classes clients map).
    create = messages.CreateTopicsRequest(topics=[messages.CreateTopicsRequest.CreatableTopic(
        name="__share_group_state", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=1000, validate_only=False)
    assert serve(state, create, 7).topics[0].error_code == InvalidRequestError.code
    create.topics[0].name = "__consumer_offsets"
    assert serve(state, create, 7).topics[0].error_code == TopicAlreadyExistsError.code
    delete = messages.DeleteTopicsRequest(topic_names=["__consumer_offsets"], timeout_ms=1000)
    assert serve(state, delete, 4).responses[0].error_code == InvalidTopicException.code


def test_internal_topics_are_compacted(state):
    for name in INTERNAL:
        assert state.topics.get(name).configs["cleanup.policy"] == "compact"
        assert state.internal_topics.log_config(name).cleanup_policy == "compact"


def test_the_topic_ids_stay_once_the_topics_are_used(tmp_path):
    with EmbeddedBroker(tmp_path / "d") as b:
        ids = {n: b.state.topics.get(n).topic_id for n in INTERNAL}
        b.state.internal_topics.partition_log("__consumer_offsets", 3)  # first use
    with EmbeddedBroker(tmp_path / "d") as b:
        assert {n: b.state.topics.get(n).topic_id for n in INTERNAL} == ids
        assert _partition_dirs(b, "__consumer_offsets") == ["__consumer_offsets-3"]


def _java_hash_by_definition(s: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1] in int32 (two's complement) arithmetic, written out."""
    n = len(s)
    total = sum(ord(c) * 31 ** (n - 1 - i) for i, c in enumerate(s))
    total &= 0xFFFFFFFF
    return total - (1 << 32) if total & 0x80000000 else total


@pytest.mark.parametrize("group", ["", "a", "my-group", "console-consumer-12345", "Burrow", "zz" * 40,
                                   "polygenelubricants"])
def test_group_partition_is_kafkas(group):
    h = _java_hash_by_definition(group)
    assert java_string_hash(group) == h
    expected = (0 if h == -(2**31) else abs(h)) % 50  # Kafka's Utils.abs: MIN_VALUE -> 0
    assert partition_for(group, 50) == expected


def test_known_java_hashes():
    # Values Java prints for "abc".hashCode() and the classic MIN_VALUE string.
    assert java_string_hash("abc") == 96354
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("\U0001F600") == _java_hash_by_definition("\ud83d\ude00")  # a surrogate pair


def test_delete_records_of_an_internal_topic_is_refused(state):
    R = messages.DeleteRecordsRequest
    req = R(topics=[R.DeleteRecordsTopic(name="__consumer_offsets", partitions=[
        R.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=-1)])], timeout_ms=1000)
    part = serve(state, req, 2).topics[0].partitions[0]
    assert part.error_code == InvalidTopicException.code
    assert not (state.data_dir / "__consumer_offsets-0").exists()


def test_a_plain_topic_an_earlier_kwire_auto_created_under_the_name_becomes_the_internal_one(tmp_path, caplog):
    from kwire.broker.config import load_config
    from kwire.broker.state import BrokerState
    from kwire.broker.storage import LogManager
    from kwire.broker.topics import TopicRegistry
    from kwire.protocol.records import RecordBatchBuilder

    data = tmp_path / "data"
    # What an earlier kwire left after a lag tool's Metadata request and a stray produce.
    TopicRegistry(data).add("__consumer_offsets", 1)
    with LogManager(data) as logs:
        builder = RecordBatchBuilder()
        builder.append(b"not a coordinator key", b"x", 1)
        logs.create_partition("__consumer_offsets", 0).append(builder.build())
    state = BrokerState(load_config(None, data_dir=data))
    try:
        info = state.topics.get("__consumer_offsets")
        assert info.internal and info.partitions == 1 and info.configs["cleanup.policy"] == "compact"
        assert "unknown record type" in caplog.text  # the stray record is skipped, and kept
        assert state.logs.get("__consumer_offsets", 0).config.cleanup_policy == "compact"
        assert state.coordinator.store.partition_of("any-group") == 0  # its partition count stays
    finally:
        state.close()
