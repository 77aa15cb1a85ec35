"""The producer against kwire's broker, read back by confluent-kafka and kafka-python: every
codec and acks mode, keys where Java puts them, headers, timestamps, order, and the sync facade."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time

import confluent_kafka
import kafka
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kwire.broker import EmbeddedBroker
from kwire.client.errors import IllegalStateError
from kwire.client.producer import AsyncProducer, Producer
from kwire.client.producer_errors import InvalidPartitionError, RecordTooLargeError
from kwire.client.types import RecordMetadata
from kwire.protocol.errors import MessageTooLargeError

QUIET = {"log_level": 0}
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# acks / idempotence combinations: idempotence needs acks=all.
MODES = {
    "idempotent": {"acks": "all"},
    "acks-all": {"acks": "all", "enable.idempotence": False},
    "acks-1": {"acks": 1},
    "acks-0": {"acks": 0},
}


@dataclasses.dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=PARTITIONS) as b:
        yield b


def java_partition(key: bytes, partitions: int) -> int:
    """Where Java's default partitioner puts a key (kafka-python's murmur2, an independent copy)."""
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


def sample_records(topic: str, n: int) -> list[dict]:
    """n records: keyed and keyless, some with headers (list or dict form), some with timestamps."""
    base_ts = 1_700_000_000_000
    out = []
    for i in range(n):
        rec = {"value": b"%s-%06d" % (topic.encode(), i)}
        if i % 3:
            rec["key"] = b"key-%d" % (i % 17)
        if i % 5 == 0:
            rec["headers"] = [("n", b"%d" % i), ("empty", None)] if i % 2 else {"n": b"%d" % i, "s": "text"}
        if i % 4 == 0:
            rec["timestamp_ms"] = base_ts + i
        out.append(rec)
    return out


def expected_headers(rec: dict) -> tuple:
    headers = rec.get("headers")
    if headers is None:
        return ()
    items = headers.items() if isinstance(headers, dict) else headers
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in items)


def read_back(bootstrap: str, topic: str, count: int, timeout: float = 20) -> list[Got]:
    """Every record of ``topic`` (all partitions, from the beginning), read by confluent-kafka;
    fails if the log holds more records than ``count``."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})
    try:
        md = consumer.list_topics(topic, timeout=10)
        partitions = sorted(md.topics[topic].partitions)
        deadline = time.monotonic() + timeout
        while True:
            in_log = 0
            for p in partitions:
                low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)
                in_log += high - low
            # With acks=0 nothing is answered: the producer is done once the requests are on the
            # socket, and the broker may still be appending the last of them.
            if in_log >= count or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        assert in_log == count, f"{topic}: the log holds {in_log} records, {count} were produced"
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in partitions])
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.2):
                assert m.error() is None, m.error()
                got.append(Got(m.partition(), m.offset(), m.key(), m.value(),
                               tuple((k, v) for k, v in (m.headers() or ())), m.timestamp()[1]))
        return got
    finally:
        consumer.close()


def check_delivery(sent: list[dict], metadatas: list[RecordMetadata], got: list[Got], *, acks: int = -1,
                   partitions: int = PARTITIONS, log_append_time: int | None = None) -> None:
    """Exactly the records sent, each where its metadata says, in order within each partition,
    keyed ones in Java's partition for their key.  ``log_append_time``: what the broker answers
    as the append time (then the metadata's timestamp), None when it answers -1 (CreateTime)."""
    assert len(got) == len(sent)
    by_value = {g.value: g for g in got}
    assert len(by_value) == len(got), "a record arrived twice"
    last_index: dict[int, int] = {}
    for rec, md in zip(sent, metadatas, strict=True):
        g = by_value[rec["value"]]
        assert g.key == rec.get("key")
        assert g.headers == expected_headers(rec)
        if "timestamp_ms" in rec:
            assert g.timestamp == rec["timestamp_ms"]
            assert md.timestamp == (rec["timestamp_ms"] if log_append_time is None else log_append_time)
        assert md.partition == g.partition
        assert md.offset == (g.offset if acks != 0 else -1)
        if rec.get("key") is not None:
            assert g.partition == java_partition(rec["key"], partitions)
        # Per-partition order: records sent later sit at higher offsets.
        assert g.offset > last_index.get(g.partition, -1)
        last_index[g.partition] = g.offset


async def produce_all(bootstrap: str, topic: str, records: list[dict], **conf) -> list[RecordMetadata]:
    async with AsyncProducer({"bootstrap.servers": bootstrap, **conf}) as producer:
        futures = [await producer.send(topic, **rec) for rec in records]
        return list(await asyncio.gather(*futures))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_and_acks_mode_delivers_exactly_the_records(broker, codec, mode):
    topic = f"matrix-{codec}-{mode}"
    sent = sample_records(topic, 400)
    conf = {"compression.type": codec, "linger.ms": 2, "batch.size": 4096, **MODES[mode]}
    metadatas = asyncio.run(produce_all(broker.bootstrap, topic, sent, **conf))
    acks = 0 if mode == "acks-0" else -1
    check_delivery(sent, metadatas, read_back(broker.bootstrap, topic, len(sent)), acks=acks)
    if mode != "acks-0":
        assert all(md.topic == topic and md.offset >= 0 for md in metadatas)


def test_kafka_python_reads_what_kwire_wrote(broker):
    topic = "kafka-python-reads"
    sent = sample_records(topic, 300)
    metadatas = asyncio.run(produce_all(broker.bootstrap, topic, sent, compression_type="gzip"))
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                   enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < len(sent) and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=200).items():
            got.extend(Got(tp.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp) for m in msgs)
    consumer.close()
    check_delivery(sent, metadatas, got)


def test_keyless_records_stick_to_a_partition_until_its_batch_closes(broker):
    """Sticky partitioning: consecutive keyless records share batches, so a run of them lands in
    a few long runs per partition instead of alternating record by record."""
    topic = "sticky"
    sent = [{"value": b"%06d" % i} for i in range(600)]
    metadatas = asyncio.run(produce_all(broker.bootstrap, topic, sent, batch_size=2048, linger_ms=50))
    switches = sum(1 for a, b in itertools.pairwise(metadatas) if a.partition != b.partition)
    # 600 records of ~27 bytes fill about 8 batches of 2 KiB: a switch per batch at most.
    assert 1 <= switches <= 20
    assert len({md.partition for md in metadatas}) >= 2


def test_partitions_for_and_auto_created_topics(broker):
    async def main():
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap}) as producer:
            return await producer.partitions_for("auto-created")

    assert asyncio.run(main()) == list(range(PARTITIONS))


def test_a_partition_the_topic_lacks_is_refused_by_name(broker):
    async def main():
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap}) as producer:
            with pytest.raises(InvalidPartitionError, match=r"'bad-partition'.*partition 7 does not exist"):
                await producer.send("bad-partition", b"v", partition=7)
            with pytest.raises(InvalidPartitionError, match="partition -1"):
                await producer.send("bad-partition", b"v", partition=-1)
            # The producer is fine afterwards.
            return await (await producer.send("bad-partition", b"v", partition=2))

    md = asyncio.run(main())
    assert (md.partition, md.offset) == (2, 0)


def test_keys_values_and_headers_of_other_types_are_refused_by_name(broker):
    async def main():
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap}) as producer:
            for kwargs, word in [({"value": 5}, "value"), ({"value": b"v", "key": 1.5}, "key"),
                                 ({"value": b"v", "headers": [("h", 3)]}, "header 'h'"),
                                 ({"value": b"v", "headers": [(1, b"x")]}, "header names"),
                                 ({"value": b"v", "headers": 12}, "headers"),
                                 ({"value": b"v", "timestamp_ms": "now"}, "timestamp")]:
                with pytest.raises(TypeError, match=word):
                    await producer.send("types", **kwargs)
            # str keys and values are UTF-8
            return await (await producer.send("types", value="välue", key="kéy", partition=0))

    asyncio.run(main())
    got = read_back(broker.bootstrap, "types", 1)
    assert (got[0].key, got[0].value) == ("kéy".encode(), "välue".encode())


def test_a_record_above_max_request_size_fails_its_future_only(broker):
    async def main():
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap, "max.request.size": 10_000}) as producer:
            big = await producer.send("too-large", b"x" * 20_000)
            small = await producer.send("too-large", b"y" * 100)
            with pytest.raises(RecordTooLargeError, match=r"max.request.size \(10000\)") as info:
                await big
            assert isinstance(info.value, MessageTooLargeError)
            return await small

    assert asyncio.run(main()).offset == 0


def test_flush_waits_for_delivery_and_close_flushes(broker):
    async def main():
        producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 60_000})
        await producer.start()
        first = [await producer.send("flush-close", b"a%d" % i, partition=0) for i in range(50)]
        assert not any(f.done() for f in first)  # linger holds them
        await producer.flush(10)
        assert all(f.done() and f.result().offset >= 0 for f in first)
        second = [await producer.send("flush-close", b"b%d" % i, partition=0) for i in range(50)]
        await producer.close()
        assert all(f.done() and f.result().offset >= 0 for f in second)
        with pytest.raises(IllegalStateError, match="closed"):
            await producer.send("flush-close", b"late")
        await producer.close()  # twice is fine

    asyncio.run(main())
    assert len(read_back(broker.bootstrap, "flush-close", 100)) == 100


def test_on_delivery_reports_every_record_in_the_event_loop(broker):
    reports = []

    async def main():
        loop_thread = threading.current_thread()

        def report(err, md):
            reports.append((err, md, threading.current_thread() is loop_thread))

        async with AsyncProducer({"bootstrap.servers": broker.bootstrap, "on_delivery": report}) as producer:
            futures = [await producer.send("async-callbacks", b"%d" % i) for i in range(20)]
            futures.append(await producer.send("async-callbacks", b"x" * 2_000_000))  # too large
            await asyncio.gather(*futures, return_exceptions=True)

    asyncio.run(main())
    assert len(reports) == 21
    assert all(in_loop for *_, in_loop in reports)
    # The too-large record is reported at once, the others as their batch completes.
    assert isinstance(reports[0][0], RecordTooLargeError)
    assert [err for err, *_ in reports[1:]] == [None] * 20
    assert [md.offset for _, md, _ in reports[1:]] == list(range(20))
    errors = [(err, md) for err, md, _ in reports if err is not None]
    assert len(errors) == 1 and isinstance(errors[0][0], RecordTooLargeError)
    assert errors[0][1].serialized_value_size == 2_000_000


def test_sync_producer_runs_callbacks_in_the_callers_thread(broker):
    calls = []
    default_calls = []

    def report(err, md):
        calls.append((err, md, threading.current_thread()))

    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1},
                  on_delivery=lambda err, md: default_calls.append((err, md))) as producer:
        futures = [producer.produce("sync-callbacks", b"v%d" % i, key=b"k%d" % i, on_delivery=report)
                   for i in range(100)]
        others = [producer.produce("sync-callbacks", "text", headers={"h": b"1"}, timestamp=1234) for _ in range(10)]
        # The futures complete without poll(); the callbacks wait for it.
        metadatas = [f.result(10) for f in futures + others]
        assert calls == [] and default_calls == []
        ran = producer.poll(0)
        assert ran == 110
        assert producer.flush(10) == 0
        assert len(producer) == 0
        late = producer.produce("sync-callbacks", b"late", on_delivery=report)
    # close() (the with block) flushed it and ran its callback here.
    assert late.result(0).offset >= 0
    assert len(calls) == 101 and len(default_calls) == 10
    assert {thread for *_, thread in calls} == {threading.current_thread()}
    assert all(err is None for err, *_ in calls + default_calls)
    # Callbacks come in delivery order: per partition in order, partitions interleaved.
    assert sorted(md for _, md, _ in calls[:100]) == sorted(metadatas[:100])
    assert all(md.timestamp == 1234 for md in metadatas[100:])
    for md, i in zip(metadatas[:100], range(100), strict=True):
        assert md.partition == java_partition(b"k%d" % i, PARTITIONS)
    assert len(read_back(broker.bootstrap, "sync-callbacks", 111)) == 111


def test_sync_producer_from_many_threads(broker):
    """Threads producing at once: every record delivered once, each thread's records in order."""
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        def work(t: int):
            return [producer.produce("threads", b"%d-%05d" % (t, i), key=b"%d" % t) for i in range(500)]

        threads_futures: list = [None] * 4

        def run(t):
            threads_futures[t] = work(t)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert producer.flush(20) == 0
    for futures in threads_futures:
        offsets = [f.result(0).offset for f in futures]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert len(read_back(broker.bootstrap, "threads", 2000)) == 2000


def test_the_sync_producer_refuses_wrong_types_at_once(broker):
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        with pytest.raises(TypeError, match="value"):
            producer.produce("sync-types", value=object())
        with pytest.raises(TypeError, match="key"):
            producer.produce("sync-types", value=b"v", key=7)
        with pytest.raises(InvalidPartitionError, match="partition 9"):
            producer.produce("sync-types", value=b"v", partition=9)
        too_big = producer.produce("sync-types", value=b"x" * 2_000_000)
        with pytest.raises(RecordTooLargeError):
            too_big.result(5)
    with pytest.raises(IllegalStateError):
        producer.produce("sync-types", b"after close")
