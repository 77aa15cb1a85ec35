"""The producer against librdkafka's mock cluster: three brokers nobody here wrote, partition
leaders spread over them, read back by confluent-kafka.  Every codec and acks mode, and a leader
that moved (NOT_LEADER_OR_FOLLOWER: refresh the metadata, resend to the new leader)."""

from __future__ import annotations

import asyncio
import logging

import confluent_kafka
import pytest

from kwire.client.producer import AsyncProducer, Producer
from kwire.protocol.errors import UnsupportedVersionError

from .test_producer import CODECS, MODES, check_delivery, read_back, sample_records

QUIET = {"log_level": 0}
PARTITIONS = 4  # what the mock gives an auto-created topic
# The mock answers every Produce with LogAppendTimeMs 1234; a producer reports it as the record's
# timestamp (Java and librdkafka do the same), while the stored record keeps its CreateTime.
MOCK_APPEND_TIME = 1234


@pytest.fixture(scope="module")
def mock_bootstrap():
    """librdkafka's mock cluster with 3 brokers; their addresses while it lives."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 3, **QUIET})
    md = owner.list_topics(timeout=10)
    yield ",".join(f"{b.host}:{b.port}" for b in sorted(md.brokers.values(), key=lambda b: b.id))
    owner.flush(1)


async def produce_all(bootstrap: str, topic: str, records: list[dict], **conf):
    async with AsyncProducer({"bootstrap.servers": bootstrap, "retry.backoff.ms": 20, **conf}) as producer:
        futures = [await producer.send(topic, **rec) for rec in records]
        metadatas = list(await asyncio.gather(*futures))
        leaders = {producer._cluster.metadata.leader(topic, p) for p in range(PARTITIONS)}
        return metadatas, leaders


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_and_acks_mode_against_the_mock_cluster(mock_bootstrap, codec, mode, caplog):
    topic = f"mock-{codec}-{mode}"
    sent = sample_records(topic, 300)
    conf = {"compression.type": codec, "linger.ms": 2, "batch.size": 2048, **MODES[mode]}
    caplog.set_level(logging.INFO, logger="kwire.client.connection")
    metadatas, _ = asyncio.run(asyncio.wait_for(produce_all(mock_bootstrap, topic, sent, **conf), 60))
    # The mock answers acks=0 requests too; the producer reads and drops those answers.
    assert not [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    acks = 0 if mode == "acks-0" else -1
    check_delivery(sent, metadatas, read_back(mock_bootstrap, topic, len(sent)), acks=acks, partitions=PARTITIONS,
                   log_append_time=None if acks == 0 else MOCK_APPEND_TIME)


def test_records_go_to_each_partitions_leader(mock_bootstrap):
    """Several topics, so that the leaders land on more than one of the three brokers."""
    sent_all, leaders = 0, set()
    for t in range(4):
        topic = f"mock-leaders-{t}"
        sent = [{"value": b"%d-%d" % (t, i), "key": b"k%d" % i} for i in range(80)]
        metadatas, topic_leaders = asyncio.run(produce_all(mock_bootstrap, topic, sent))
        leaders |= topic_leaders
        check_delivery(sent, metadatas, read_back(mock_bootstrap, topic, len(sent)), partitions=PARTITIONS,
                       log_append_time=MOCK_APPEND_TIME)
        sent_all += len(sent)
    # 16 partitions with random leaders among 3 brokers: all on one broker is a 3**-15 chance.
    assert len(leaders) >= 2


def test_a_moved_leader_gets_the_batch_after_a_metadata_refresh(mock_bootstrap):
    """Metadata that names the wrong leader (as after a leader change) gets NOT_LEADER_OR_FOLLOWER;
    the producer refreshes its metadata and sends the batch again to the real leader."""
    topic = "mock-moved-leader"

    async def main():
        async with AsyncProducer({"bootstrap.servers": mock_bootstrap, "retry.backoff.ms": 20}) as producer:
            first = await (await producer.send(topic, b"first", partition=0))
            cluster = producer._cluster
            fresh = await cluster.refresh_metadata([topic])
            info = fresh.topics[topic]
            leader = info.partitions[0].leader
            wrong = next(n for n in sorted(fresh.brokers) if n != leader)
            stale = info._replace(partitions={
                **info.partitions, 0: info.partitions[0]._replace(leader=wrong)})
            cluster.metadata = fresh._replace(topics={**fresh.topics, topic: stale})
            moved = await (await producer.send(topic, b"second", partition=0))
            return first, moved, cluster.metadata.leader(topic, 0), leader

    first, moved, leader_now, leader = asyncio.run(asyncio.wait_for(main(), 30))
    assert (first.offset, moved.offset) == (0, 1)
    assert leader_now == leader
    got = sorted(read_back(mock_bootstrap, topic, 2), key=lambda g: g.offset)
    assert [g.value for g in got] == [b"first", b"second"]


def test_sync_producer_against_the_mock_cluster(mock_bootstrap):
    topic = "mock-sync"
    sent = sample_records(topic, 200)
    reports = []
    with Producer({"bootstrap.servers": mock_bootstrap, "compression.type": "lz4"}) as producer:
        futures = []
        for rec in sent:
            kwargs = dict(rec)
            if "timestamp_ms" in kwargs:
                kwargs["timestamp"] = kwargs.pop("timestamp_ms")
            futures.append(producer.produce(topic, on_delivery=lambda err, md: reports.append(err), **kwargs))
        assert producer.flush(30) == 0
    assert reports == [None] * len(sent)
    metadatas = [f.result(0) for f in futures]
    check_delivery(sent, metadatas, read_back(mock_bootstrap, topic, len(sent)), partitions=PARTITIONS,
                       log_append_time=MOCK_APPEND_TIME)



@pytest.mark.parametrize("produce_version,magic", [(2, 1), (1, 0), (0, 0)])
def test_message_sets_for_produce_v0_to_v2(mock_bootstrap, produce_version, magic):
    """The producer capped at an old Produce version (as a 0.10 broker would have it) writes
    message sets (magic 1 for v2, 0 below), and confluent-kafka reads them back."""
    topic = f"mock-legacy-v{produce_version}"
    sent = [{"value": b"%s-%03d" % (topic.encode(), i), "key": b"k%d" % i if i % 2 else None,
             "timestamp_ms": 1_600_000_000_000 + i} for i in range(100)]

    async def main():
        conf = {"bootstrap.servers": mock_bootstrap, "linger.ms": 2, "batch.size": 1024}
        async with AsyncProducer(conf, _max_produce_version=produce_version) as producer:
            futures = [await producer.send(topic, **rec) for rec in sent]
            return await asyncio.gather(*futures)

    metadatas = asyncio.run(asyncio.wait_for(main(), 30))
    got = read_back(mock_bootstrap, topic, len(sent))
    if magic == 0:  # magic 0 has no timestamps: leave them out of the comparison
        sent = [{k: v for k, v in rec.items() if k != "timestamp_ms"} for rec in sent]
    # Produce v2 answers carry the mock's LogAppendTimeMs; v0/v1 answers have none.
    check_delivery(sent, metadatas, got, partitions=PARTITIONS,
                   log_append_time=MOCK_APPEND_TIME if produce_version == 2 else None)
    if magic == 0:
        assert {g.timestamp for g in got} == {0}  # confluent-kafka: no timestamp


def test_the_mock_refuses_compressed_message_sets_and_the_records_say_so(mock_bootstrap):
    """librdkafka's mock takes compressed records in batches only: a compressed message set is
    refused with UNSUPPORTED_VERSION, which fails the records by name instead of being retried
    (test_producer_legacy checks compressed message sets against an 0.10-style broker)."""
    async def main():
        conf = {"bootstrap.servers": mock_bootstrap, "compression.type": "gzip"}
        async with AsyncProducer(conf, _max_produce_version=2) as producer:
            futures = [await producer.send("mock-legacy-gzip", b"v%d" % i) for i in range(3)]
            return await asyncio.gather(*futures, return_exceptions=True)

    results = asyncio.run(asyncio.wait_for(main(), 30))
    assert all(isinstance(r, UnsupportedVersionError) for r in results), results
    assert "mock-legacy-gzip-" in str(results[0])
