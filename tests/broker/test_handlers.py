"""Every handler of the broker's core at every version it advertises, through the dispatch path:
the request encodes at that version, the response encodes and decodes at it, and the answers
are right (topics created, records stored and read back, offsets, configs)."""

from __future__ import annotations

import uuid

import pytest

from kwire.broker.handlers import HANDLERS
from kwire.broker.handlers.api_versions import UNADVERTISED
from kwire.protocol import messages
from kwire.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicException,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedForMessageFormatError,
    UnsupportedVersionError,
)
from kwire.protocol.records import RecordBatchBuilder, iter_batches

from .conftest import serve


def versions(api_key: int) -> list[int]:
    e = HANDLERS[api_key]
    return list(range(e.min_version, e.max_version + 1))


def batch(n: int, *, start: int = 0, timestamp: int = 1_700_000_000_000) -> bytes:
    b = RecordBatchBuilder()
    for i in range(start, start + n):
        b.append(b"k%d" % i, b"v%d" % i, timestamp=timestamp + i, headers=[("h", b"%d" % i)])
    return bytes(b.build())


def create(state, name: str, partitions: int = 1, version: int = 5, **topic):
    R = messages.CreateTopicsRequest
    req = R(topics=[R.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                     assignments=[], configs=[R.CreatableTopic.CreatableTopicConfig(
                                         name=k, value=v) for k, v in topic.items()])], timeout_ms=1000)
    return serve(state, req, version).topics[0]


def produce(state, topic: str, partition: int, records: bytes, version: int = 9, acks: int = -1):
    R = messages.ProduceRequest
    req = R(acks=acks, timeout_ms=1000, topic_data=[R.TopicProduceData(
        name=topic, partition_data=[R.TopicProduceData.PartitionProduceData(index=partition, records=records)])])
    if version >= 13:
        req.topic_data[0].name = None
        req.topic_data[0].topic_id = state.topics.get(topic).topic_id
    resp = serve(state, req, version)
    return None if resp is None else resp.responses[0].partition_responses[0]


def fetch(state, topic: str, partition: int, offset: int, version: int = 12, max_bytes: int = 1 << 20,
          partition_max_bytes: int = 1 << 20, max_wait_ms: int = 0, min_bytes: int = 0):
    R = messages.FetchRequest
    t = R.FetchTopic(partitions=[R.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset,
                                                               partition_max_bytes=partition_max_bytes)])
    if version >= 13:
        t.topic_id = state.topics.get(topic).topic_id
    else:
        t.topic = topic
    req = R(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, topics=[t])
    if version >= 7:
        req.session_epoch = -1
    if version >= 15:
        req.replica_id = -1
        req.replica_state = R.ReplicaState(replica_id=-1, replica_epoch=-1)
    return serve(state, req, version).responses[0].partitions[0]


def offsets_of(records: bytes) -> list[int]:
    return [r.offset for b in iter_batches(records) for r in b]


# -- ApiVersions -------------------------------------------------------------------------------
@pytest.mark.parametrize("v", versions(18))
def test_api_versions_lists_exactly_the_handlers(state, v):
    resp = serve(state, messages.ApiVersionsRequest(client_software_name="t", client_software_version="1"), v)
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    # (the telemetry apis are served but not advertised, as by Kafka without a telemetry plugin)
    assert got == {k: (e.min_version, e.max_version) for k, e in HANDLERS.items() if k not in UNADVERTISED}
    assert resp.error_code == 0


def test_api_versions_newer_than_ours_gets_v0_list_with_unsupported_version(state):
    from kwire.broker.dispatch import dispatch
    from kwire.protocol.frames import decode_response

    frame = bytearray(messages.RequestHeader(request_api_key=18, request_api_version=99, correlation_id=5,
                                             client_id="future").encode(1))
    frame += b"\x00\x00\x00"  # an unknown body: the broker must not need to read it
    reply = dispatch(state, bytes(frame), client_host="x", connection_id=1)
    assert reply.api_version == 0
    _, resp = decode_response(reply.parts[0][4:], 18, 0)
    assert resp.error_code == UnsupportedVersionError.code
    assert {k.api_key for k in resp.api_keys} == set(HANDLERS) - UNADVERTISED


# -- Metadata and topic admin ------------------------------------------------------------------
@pytest.mark.parametrize("v", versions(3))
def test_metadata_every_version(state, v):
    create(state, "known", 3)
    R = messages.MetadataRequest
    names = ["known", "auto-made", "bad name!"]
    req = R(topics=[R.MetadataRequestTopic(name=n) for n in names])
    if v >= 4:
        req.allow_auto_topic_creation = True
    resp = serve(state, req, v)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(1, "127.0.0.1", 9092)]
    by_name = {t.name: t for t in resp.topics}
    assert len(by_name["known"].partitions) == 3 and by_name["known"].error_code == 0
    assert [p.leader_id for p in by_name["known"].partitions] == [1, 1, 1]
    assert by_name["auto-made"].error_code == 0 and len(by_name["auto-made"].partitions) == 1
    assert by_name["bad name!"].error_code == InvalidTopicException.code
    if v >= 2:
        assert resp.cluster_id == state.cluster_id
    if v >= 10:
        assert by_name["known"].topic_id == state.topics.get("known").topic_id
    # All topics: null (v1+) or empty (v0).
    everything = serve(state, R(topics=None if v >= 1 else []), v)
    assert sorted(t.name for t in everything.topics) == ["__consumer_offsets", "__transaction_state", "auto-made",
                                                         "known"]


def test_metadata_without_auto_create(state):
    R = messages.MetadataRequest
    resp = serve(state, R(topics=[R.MetadataRequestTopic(name="nope")], allow_auto_topic_creation=False), 12)
    assert resp.topics[0].error_code == UnknownTopicOrPartitionError.code
    assert "nope" not in state.topics


def test_metadata_by_topic_id(state):
    create(state, "t", 2)
    R = messages.MetadataRequest
    tid = state.topics.get("t").topic_id
    resp = serve(state, R(topics=[R.MetadataRequestTopic(topic_id=tid), R.MetadataRequestTopic(
        topic_id=uuid.uuid4())]), 12)
    assert resp.topics[0].name == "t" and len(resp.topics[0].partitions) == 2
    assert resp.topics[1].error_code == 100  # UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("v", [10, 11])
def test_metadata_v10_v11_refuse_topic_ids_as_kafka(state, v):
    # Both versions carry ids in the request, but their answer cannot leave a topic's name out:
    # Kafka rejects ids (or a missing name) before v12; a name alone is served as usual.
    from kwire.broker.dispatch import CloseConnection, dispatch
    from kwire.protocol import encode_request

    create(state, "t", 2)
    R = messages.MetadataRequest
    tid = state.topics.get("t").topic_id
    for topic, why in [(R.MetadataRequestTopic(name=None, topic_id=tid), "without a name"),
                       (R.MetadataRequestTopic(name=None, topic_id=uuid.uuid4()), "without a name"),
                       (R.MetadataRequestTopic(name="t", topic_id=tid), "topic ids in requests need v12")]:
        frame = encode_request(R(topics=[topic]), v, 3)[4:]
        with pytest.raises(CloseConnection, match=f"Metadata v{v}: .*{why}"):
            dispatch(state, frame, client_host="x", connection_id=1)
    resp = serve(state, R(topics=[R.MetadataRequestTopic(name="t")]), v)
    assert resp.topics[0].name == "t" and resp.topics[0].topic_id == tid and len(resp.topics[0].partitions) == 2


@pytest.mark.parametrize("v", versions(19))
def test_create_topics_every_version(state, v):
    ok = create(state, f"topic-{v}", 4, v, **{"retention.ms": "60000"})
    assert ok.error_code == 0
    assert state.topics.get(f"topic-{v}").partitions == 4
    assert sorted(n for t, n in state.logs.partitions() if t == f"topic-{v}") == [0, 1, 2, 3]
    assert state.logs.get(f"topic-{v}", 0).config.retention_ms == 60000
    if v >= 5:
        assert ok.num_partitions == 4
        assert {c.name: c.value for c in ok.configs}["retention.ms"] == "60000"
    assert create(state, f"topic-{v}", 1, v).error_code == TopicAlreadyExistsError.code


@pytest.mark.parametrize("bad,code", [
    ({"partitions": 0}, InvalidPartitionsError.code),
    ({"configs": {"retention.ms": "soon"}}, 40),           # INVALID_CONFIG
    ({"configs": {"no.such.config": "1"}}, 40),
    ({"configs": {"cleanup.policy": "compact,bogus"}}, 40),
    ({"name": "a/b"}, InvalidTopicException.code),
    ({"replication": 3}, InvalidReplicationFactorError.code),
])
def test_create_topics_refusals_change_nothing(state, bad, code):
    R = messages.CreateTopicsRequest
    t = R.CreatableTopic(name=bad.get("name", "t"), num_partitions=bad.get("partitions", 1),
                         replication_factor=bad.get("replication", 1), assignments=[],
                         configs=[R.CreatableTopic.CreatableTopicConfig(name=k, value=val)
                                  for k, val in bad.get("configs", {}).items()])
    resp = serve(state, R(topics=[t], timeout_ms=100), 7)
    assert resp.topics[0].error_code == code
    assert resp.topics[0].error_message
    assert len(state.topics) == 0 and state.logs.partitions() == []


def test_create_topics_validate_only(state):
    R = messages.CreateTopicsRequest
    t = R.CreatableTopic(name="dry", num_partitions=2, replication_factor=-1, assignments=[], configs=[])
    resp = serve(state, R(topics=[t], timeout_ms=100, validate_only=True), 4)
    assert resp.topics[0].error_code == 0 and "dry" not in state.topics


@pytest.mark.parametrize("v", versions(20))
def test_delete_topics_every_version(state, v):
    create(state, "doomed", 2)
    R = messages.DeleteTopicsRequest
    if v >= 6:
        req = R(topics=[R.DeleteTopicState(name="doomed"), R.DeleteTopicState(name="never")], timeout_ms=100)
    else:
        req = R(topic_names=["doomed", "never"], timeout_ms=100)
    resp = serve(state, req, v)
    assert [(r.name, r.error_code) for r in resp.responses] == [
        ("doomed", 0), ("never", UnknownTopicOrPartitionError.code)]
    assert "doomed" not in state.topics and state.logs.partitions() == []
    assert not list(state.data_dir.glob("doomed-*"))


def test_deleted_topic_takes_its_committed_offsets_along(state):
    create(state, "again", 1)
    R = messages.OffsetCommitRequest
    T = R.OffsetCommitRequestTopic
    commit = R(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name="again", partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=42)])])
    assert serve(state, commit, 8).topics[0].partitions[0].error_code == 0
    serve(state, messages.DeleteTopicsRequest(topic_names=["again"], timeout_ms=100), 4)
    create(state, "again", 1)
    F = messages.OffsetFetchRequest
    fetched = serve(state, F(group_id="g", topics=[F.OffsetFetchRequestTopic(name="again", partition_indexes=[0])]), 5)
    assert fetched.topics[0].partitions[0].committed_offset == -1


@pytest.mark.parametrize("v", versions(37))
def test_create_partitions_every_version(state, v):
    create(state, "grow", 2)
    R = messages.CreatePartitionsRequest
    resp = serve(state, R(topics=[R.CreatePartitionsTopic(name="grow", count=5, assignments=None),
                                  R.CreatePartitionsTopic(name="grow2", count=5, assignments=None)],
                          timeout_ms=100, validate_only=False), v)
    assert [r.error_code for r in resp.results] == [0, UnknownTopicOrPartitionError.code]
    assert state.topics.get("grow").partitions == 5
    assert (("grow", 4)) in state.logs.partitions()
    shrink = serve(state, R(topics=[R.CreatePartitionsTopic(name="grow", count=3, assignments=None)],
                            timeout_ms=100, validate_only=False), v)
    assert shrink.results[0].error_code == InvalidPartitionsError.code


# -- Produce / Fetch ---------------------------------------------------------------------------
@pytest.mark.parametrize("v", versions(0))
def test_produce_every_version(state, v):
    create(state, "p", 1)
    first = produce(state, "p", 0, batch(3), version=v)
    second = produce(state, "p", 0, batch(2, start=3), version=v)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 3)
    if v >= 5:
        assert second.log_start_offset == 0
    stored = state.logs.get("p", 0).read(0, 1 << 20)
    data = b"".join(s.read() for s in stored)
    assert offsets_of(data) == [0, 1, 2, 3, 4]


def test_produce_acks_zero_has_no_response_but_stores(state):
    create(state, "p", 1)
    assert produce(state, "p", 0, batch(2), acks=0) is None
    assert state.logs.get("p", 0).log_end_offset == 2


def test_produce_errors_per_partition(state):
    create(state, "p", 1)
    assert produce(state, "p", 5, batch(1)).error_code == UnknownTopicOrPartitionError.code
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF
    bad = produce(state, "p", 0, bytes(corrupt))
    assert bad.error_code == 2 and "crc" in bad.error_message.lower()  # CORRUPT_MESSAGE
    assert produce(state, "p", 0, batch(1), acks=2).error_code == 21  # INVALID_REQUIRED_ACKS
    assert state.logs.get("p", 0).log_end_offset == 0


def test_produce_legacy_format_refused(state):
    from kwire.protocol.records import LegacyMessageSetBuilder

    create(state, "p", 1)
    legacy = LegacyMessageSetBuilder(magic=1)
    legacy.append(b"k", b"v", timestamp=1)
    assert produce(state, "p", 0, bytes(legacy.build())).error_code == UnsupportedForMessageFormatError.code


def test_log_append_time_is_reported(state):
    create(state, "lat", 1, **{"message.timestamp.type": "LogAppendTime"})
    resp = produce(state, "lat", 0, batch(1))
    assert resp.log_append_time_ms > 1_700_000_000_000


@pytest.mark.parametrize("v", versions(1))
def test_fetch_every_version(state, v):
    create(state, "f", 1)
    produce(state, "f", 0, batch(3))
    produce(state, "f", 0, batch(4, start=3))
    part = fetch(state, "f", 0, 0, version=v)
    assert part.error_code == 0 and part.high_watermark == 7
    assert offsets_of(part.records) == list(range(7))
    records = [r for b in iter_batches(part.records) for r in b]
    assert (records[5].key, records[5].value, records[5].headers) == (b"k5", b"v5", [("h", b"5")])
    # From the middle of the second batch: that whole batch comes back (the client skips).
    assert offsets_of(fetch(state, "f", 0, 4, version=v).records) == [3, 4, 5, 6]
    # At the end: nothing, no error.
    end = fetch(state, "f", 0, 7, version=v)
    assert (end.error_code, len(end.records or b"")) == (0, 0)
    assert fetch(state, "f", 0, 8, version=v).error_code == OffsetOutOfRangeError.code


def test_fetch_max_bytes_keeps_whole_batches(state):
    create(state, "f", 2)
    for i in range(5):
        produce(state, "f", 0, batch(10, start=10 * i))
        produce(state, "f", 1, batch(10, start=10 * i))
    first_two = len(batch(10)) + len(batch(10, start=10))
    # Partition limit smaller than a batch: still the first batch (progress is guaranteed).
    assert len(offsets_of(fetch(state, "f", 0, 0, partition_max_bytes=10).records)) == 10
    two = fetch(state, "f", 0, 0, partition_max_bytes=first_two + 5)
    assert offsets_of(two.records) == list(range(20))
    # The response limit: the first partition fills it, the second gets nothing this time.
    R = messages.FetchRequest
    parts = [R.FetchTopic.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in (0, 1)]
    resp = serve(state, R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=first_two + 5, session_epoch=-1,
                          topics=[R.FetchTopic(topic="f", partitions=parts)]), 12)
    got = [offsets_of(p.records or b"") for p in resp.responses[0].partitions]
    assert got == [list(range(20)), []]


def test_fetch_long_poll_wakes_on_append(state):
    import asyncio
    import time

    from kwire.broker.dispatch import dispatch
    from kwire.protocol import encode_request

    create(state, "lp", 1)
    R = messages.FetchRequest
    req = R(replica_id=-1, max_wait_ms=5000, min_bytes=1, max_bytes=1 << 20, session_epoch=-1, topics=[
        R.FetchTopic(topic="lp", partitions=[R.FetchTopic.FetchPartition(partition=0, fetch_offset=0,
                                                                           partition_max_bytes=1 << 20)])])
    frame = encode_request(req, 12, 1)[4:]

    async def scenario():
        pending = dispatch(state, frame, client_host="x", connection_id=1)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0.05)
        assert not task.done()
        t0 = time.monotonic()
        produce_frame = encode_request(messages.ProduceRequest(acks=1, timeout_ms=100, topic_data=[
            messages.ProduceRequest.TopicProduceData(name="lp", partition_data=[
                messages.ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch(2))])]),
            9, 2)[4:]
        dispatch(state, produce_frame, client_host="x", connection_id=2)
        reply = await asyncio.wait_for(task, 2)
        return reply, time.monotonic() - t0

    reply, waited = asyncio.run(scenario())
    assert waited < 2  # woken by the append, not by max_wait_ms (5 s)
    assert reply is not None and len(reply.parts) > 1  # the records are spliced, not copied


def test_fetch_max_wait_expires_with_empty_answer(state):
    create(state, "idle", 1)
    part = fetch(state, "idle", 0, 0, max_wait_ms=50, min_bytes=1)
    assert part.error_code == 0 and not part.records


# -- ListOffsets, DeleteRecords, OffsetForLeaderEpoch ------------------------------------------
@pytest.mark.parametrize("v", versions(2))
def test_list_offsets_every_version(state, v):
    create(state, "lo", 1)
    produce(state, "lo", 0, batch(5, timestamp=1000))   # timestamps 1000..1004
    produce(state, "lo", 0, batch(5, start=5, timestamp=2000))  # 2005..2009
    R = messages.ListOffsetsRequest
    wanted = [-2, -1, 2005, 99999]
    parts = [R.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=t, max_num_offsets=1)
             for t in wanted]
    resp = serve(state, R(replica_id=-1, topics=[R.ListOffsetsTopic(name="lo", partitions=parts)]), v)
    got = resp.topics[0].partitions
    if v == 0:
        assert [p.old_style_offsets for p in got] == [[0], [10], [5], []]
    else:
        assert [p.offset for p in got] == [0, 10, 5, -1]
        assert got[2].timestamp == 2005


def test_list_offsets_max_timestamp_and_unknown(state):
    create(state, "lo", 1)
    produce(state, "lo", 0, batch(3, timestamp=5000))
    produce(state, "lo", 0, batch(3, start=3, timestamp=100))
    R = messages.ListOffsetsRequest
    resp = serve(state, R(replica_id=-1, topics=[
        R.ListOffsetsTopic(name="lo", partitions=[R.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, timestamp=-3), R.ListOffsetsTopic.ListOffsetsPartition(partition_index=0,
                                                                                       timestamp=-4)]),
        R.ListOffsetsTopic(name="zz", partitions=[R.ListOffsetsTopic.ListOffsetsPartition(partition_index=0,
                                                                                           timestamp=-1)])]), 8)
    assert (resp.topics[0].partitions[0].offset, resp.topics[0].partitions[0].timestamp) == (2, 5002)
    assert resp.topics[0].partitions[1].offset == 0
    assert resp.topics[1].partitions[0].error_code == UnknownTopicOrPartitionError.code


@pytest.mark.parametrize("v", versions(21))
def test_delete_records_every_version(state, v):
    create(state, "dr", 1)
    produce(state, "dr", 0, batch(10))
    R = messages.DeleteRecordsRequest
    resp = serve(state, R(topics=[R.DeleteRecordsTopic(name="dr", partitions=[
        R.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=4)])], timeout_ms=100), v)
    assert resp.topics[0].partitions[0].low_watermark == 4
    assert fetch(state, "dr", 0, 2).error_code == OffsetOutOfRangeError.code
    beyond = serve(state, R(topics=[R.DeleteRecordsTopic(name="dr", partitions=[
        R.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=11)])], timeout_ms=100), v)
    assert beyond.topics[0].partitions[0].error_code == OffsetOutOfRangeError.code
    to_end = serve(state, R(topics=[R.DeleteRecordsTopic(name="dr", partitions=[
        R.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=-1)])], timeout_ms=100), v)
    assert to_end.topics[0].partitions[0].low_watermark == 10


@pytest.mark.parametrize("v", versions(23))
def test_offset_for_leader_epoch_every_version(state, v):
    create(state, "e", 1)
    produce(state, "e", 0, batch(6))
    R = messages.OffsetForLeaderEpochRequest
    parts = [R.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=0, leader_epoch=e) for e in (0, 3)]
    resp = serve(state, R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic="e", partitions=parts)]), v)
    got = resp.topics[0].partitions
    assert got[0].end_offset == 6 and got[1].end_offset == -1
    if v >= 1:
        assert (got[0].leader_epoch, got[1].leader_epoch) == (0, -1)


# -- Configs and cluster -----------------------------------------------------------------------
@pytest.mark.parametrize("v", versions(32))
def test_describe_configs_every_version(state, v):
    create(state, "c", 1, **{"retention.ms": "1234"})
    R = messages.DescribeConfigsRequest
    req = R(resources=[R.DescribeConfigsResource(resource_type=2, resource_name="c", configuration_keys=None),
                       R.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                 configuration_keys=["num.partitions"]),
                       R.DescribeConfigsResource(resource_type=2, resource_name="missing", configuration_keys=None)])
    if v >= 1:
        req.include_synonyms = True
    resp = serve(state, req, v)
    topic = {c.name: c for c in resp.results[0].configs}
    assert topic["retention.ms"].value == "1234"
    assert topic["segment.bytes"].value == str(1 << 30)
    if v >= 1:
        assert topic["retention.ms"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
    assert [c.name for c in resp.results[1].configs] == ["num.partitions"]
    assert resp.results[2].error_code == UnknownTopicOrPartitionError.code


@pytest.mark.parametrize("v", versions(60))
def test_describe_cluster_every_version(state, v):
    req = messages.DescribeClusterRequest(include_cluster_authorized_operations=False)
    if v >= 1:
        req.endpoint_type = 1
    resp = serve(state, req, v)
    assert resp.cluster_id == state.cluster_id and resp.controller_id == 1
    assert [(b.broker_id, b.port) for b in resp.brokers] == [(1, 9092)]


# -- refusals ----------------------------------------------------------------------------------
def test_unserved_api_answers_unsupported_version(state):
    # BrokerHeartbeat has a top-level error code and is controller-only: a broker never serves it.
    # (was ElectLeaders, then CreateDelegationToken, then UnregisterBroker, all answered since)
    resp = serve(state, messages.BrokerHeartbeatRequest(broker_id=1, broker_epoch=1), 0)
    assert resp.error_code == UnsupportedVersionError.code


def test_unserved_api_without_error_field_closes(state):
    from kwire.broker.dispatch import CloseConnection, dispatch
    from kwire.protocol import encode_request

    # (was CreateAcls, then AlterConfigs, served since the broker has ACLs and dynamic configs, then
    # AlterReplicaLogDirs, served with the admin apis of a one-node cluster)
    frame = encode_request(messages.InitializeShareGroupStateRequest(group_id="g", topics=[]), 0, 3)[4:]
    with pytest.raises(CloseConnection, match="InitializeShareGroupState"):
        dispatch(state, frame, client_host="x", connection_id=1)


def test_cluster_id_and_topic_ids_survive_restart(tmp_path):
    from kwire.broker.config import load_config
    from kwire.broker.state import BrokerState

    cfg = load_config(None, data_dir=tmp_path / "d")
    s = BrokerState(cfg)
    create(s, "keep", 2)
    produce(s, "keep", 1, batch(3))
    cid, tid = s.cluster_id, s.topics.get("keep").topic_id
    s.close()
    s2 = BrokerState(cfg)
    try:
        assert s2.cluster_id == cid and s2.topics.get("keep").topic_id == tid
        assert s2.logs.get("keep", 1).log_end_offset == 3
    finally:
        s2.close()
