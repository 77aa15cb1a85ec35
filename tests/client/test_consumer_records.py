"""The consumer reads what real producers wrote, exactly: librdkafka (confluent-kafka) produces
with every codec, keys, null keys and values, and headers, into kwire's broker and into
librdkafka's mock cluster (3 brokers, leaders spread over them); kwire hands back every record
once, in per-partition offset order, with the producer's content.  Also: both Fetch topic
addressings (v13+ by id, v12 by name), transaction markers never reach the application, and the
fetch buffer stays bounded."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.consumer import AsyncConsumer
from kwire.client.fetcher import Fetcher
from kwire.client.subscription import SubscriptionState
from kwire.client.types import TopicPartition
from kwire.protocol import messages
from kwire.protocol.errors import CorruptRecordError
from kwire.protocol.records import ControlRecordType, RecordBatchBuilder, build_control_batch

QUIET = {"log_level": 0}
MOCK_PARTITIONS = 4  # what the mock gives an auto-created topic
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


# -- peers and helpers (used by the other consumer and group test files too) -----------------------
def mock_cluster():
    """librdkafka's mock cluster with 3 brokers: yields its bootstrap string while it lives."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 3, **QUIET})
    md = owner.list_topics(timeout=10)
    yield ",".join(f"{b.host}:{b.port}" for b in sorted(md.brokers.values(), key=lambda b: b.id))
    owner.flush(1)


@pytest.fixture(scope="module")
def mock_bootstrap():
    yield from mock_cluster()


@pytest.fixture
def broker(tmp_path):
    """kwire's broker, auto-creating topics with as many partitions as the mock does."""
    with EmbeddedBroker(tmp_path / "kwire-data", default_partitions=MOCK_PARTITIONS) as b:
        yield b


def run(coro, timeout: float = 60):
    """Run a test coroutine with a hard bound on its time."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def produce(bootstrap: str, topic: str, recs, **conf) -> list[tuple[int, int, bytes | None, bytes | None, tuple]]:
    """Produce ``(key, value, headers[, partition[, timestamp]])`` records with librdkafka;
    (partition, offset, key, value, headers) of each acknowledged record."""
    acked, errors = [], []

    def done(key, value, headers, err, msg):
        # Content from what was sent (delivery reports carry no headers), place from the report.
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), key, value, tuple(headers)))

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET, **conf})
    for rec in recs:
        key, value, headers = rec[:3]
        extra = {"partition": rec[3]} if len(rec) > 3 else {}
        if len(rec) > 4:
            extra["timestamp"] = rec[4]
        producer.produce(topic, value=value, key=key, headers=headers,
                         on_delivery=lambda err, msg, k=key, v=value, h=headers: done(k, v, h, err, msg), **extra)
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors
    return acked


def sample_records(n: int, tag: str = "") -> list[tuple]:
    """Keys, null keys, null values, empty values, values of varied sizes, 0-2 headers (one null)."""
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"k%d%s" % (i, tag.encode())
        value = None if i % 11 == 5 else (b"v%d-" % i) * (i % 37)
        headers = [] if i % 3 == 0 else [("n", b"%d" % i)] if i % 3 == 1 else [("n", b"%d" % i), ("empty", None)]
        out.append((key, value, headers))
    return out


def as_tuple(record) -> tuple:
    headers = tuple((k, None if v is None else bytes(v)) for k, v in record.headers)
    return record.partition, record.offset, record.key, record.value, headers


async def consume_until(consumer: AsyncConsumer, n: int, timeout: float = 20, max_records: int | None = None) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += await consumer.getmany(timeout_ms=200, max_records=max_records)
    return got


def check_exact(acked, got) -> None:
    """Every acknowledged record exactly once, with its content, and offsets rising per partition."""
    assert sorted(as_tuple(r) for r in got) == sorted(acked)
    by_partition: dict[int, list[int]] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r.offset)
    for offsets in by_partition.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def quick(bootstrap: str, **settings) -> dict:
    """Settings that keep tests fast: short backoffs and waits."""
    return {"bootstrap_servers": bootstrap.split(","), "retry_backoff_ms": 20, "fetch_max_wait_ms": 100,
            "request_timeout_ms": 10000, **settings}


# -- exact consumption ----------------------------------------------------------------------------
@pytest.mark.parametrize("peer", ["kwire", "mock"])
def test_every_codec_with_keys_and_headers_is_consumed_exactly(peer, broker, mock_bootstrap):
    bootstrap = broker.bootstrap if peer == "kwire" else mock_bootstrap
    topic = f"codecs-{peer}"
    acked = []
    for codec in CODECS:
        # Spread each codec over every partition (explicit partitions: the mock has 4, kwire 1 by default).
        recs = [(*rec, i % MOCK_PARTITIONS) for i, rec in enumerate(sample_records(120, codec))]
        acked += produce(bootstrap, topic, recs, **{"compression.type": codec, "batch.num.messages": 40})
    assert len(acked) == 600

    async def main():
        async with AsyncConsumer(quick(bootstrap, auto_offset_reset="earliest")) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(MOCK_PARTITIONS)])
            got = await consume_until(consumer, len(acked), max_records=77)
            more = await consumer.getmany(timeout_ms=300)  # nothing beyond what was produced
            return got, more

    got, more = run(main())
    check_exact(acked, got)
    assert more == []


@pytest.mark.parametrize("fetch_version", [12, None], ids=["v12-by-name", "newest-by-id"])
def test_fetch_by_topic_name_and_by_topic_id(fetch_version, mock_bootstrap):
    topic = f"addressing-{fetch_version}"
    acked = produce(mock_bootstrap, topic, [(*rec, i % MOCK_PARTITIONS) for i, rec in enumerate(sample_records(80))])

    async def main():
        async with AsyncConsumer(quick(mock_bootstrap, auto_offset_reset="earliest")) as consumer:
            consumer._fetcher.max_version = fetch_version
            consumer.assign([TopicPartition(topic, p) for p in range(MOCK_PARTITIONS)])
            got = await consume_until(consumer, len(acked))
            conn = await consumer._cluster.any_connection()
            return got, conn.version_for(1, high=fetch_version)

    got, version = run(main())
    check_exact(acked, got)
    assert (version >= 13) == (fetch_version is None)  # the mock speaks Fetch v16: ids unless capped


def test_transaction_markers_never_reach_the_application(mock_bootstrap):
    """librdkafka's transactional producer against the mock: commit and abort markers take
    offsets in the log; the consumer steps over them (in both isolation levels)."""
    topic = "txn-markers"
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_bootstrap, "transactional.id": "kwire-t1", **QUIET})
    producer.init_transactions(10)
    values = []
    for txn in range(3):
        producer.begin_transaction()
        for i in range(4):
            value = b"t%d-%d" % (txn, i)
            values.append(value)
            producer.produce(topic, value=value, partition=0)
        producer.commit_transaction(10)

    async def main(isolation):
        # check_crcs off: the mock writes its markers with a zero CRC (librdkafka does not check).
        async with AsyncConsumer(quick(mock_bootstrap, auto_offset_reset="earliest", isolation_level=isolation,
                                       check_crcs=False)) as c:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            got = await consume_until(c, len(values))
            got += await c.getmany(timeout_ms=300)
            return got, await c.position(tp), await c.end_offsets([tp])

    for isolation in ("read_committed", "read_uncommitted"):
        got, position, ends = run(main(isolation))
        assert [r.value for r in got] == values
        # 12 records and 3 commit markers: the offsets have gaps where the markers are ...
        assert [r.offset for r in got] == [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13]
        # ... and the position moved past the last marker, so no fetch repeats it.
        assert position == 15 == ends[TopicPartition(topic, 0)]


def transaction_log():
    """A log of a committed and an aborted transaction, a plain record and a later committed
    transaction of the aborting producer, with its markers, built with kwire's codec as a
    transaction coordinator writes them; and the Fetch answer's aborted_transactions for it."""
    p_commit, p_abort = 7, 8
    log = b"".join([
        _batch(0, [b"c0", b"c1"], producer_id=p_commit, transactional=True),
        _batch(2, [b"a0", b"a1"], producer_id=p_abort, transactional=True),
        build_control_batch(ControlRecordType.COMMIT, producer_id=p_commit, producer_epoch=0, base_offset=4),
        _batch(5, [b"plain"]),
        build_control_batch(ControlRecordType.ABORT, producer_id=p_abort, producer_epoch=0, base_offset=6),
        _batch(7, [b"a2"], producer_id=p_abort, transactional=True),  # a later transaction of the same producer
        build_control_batch(ControlRecordType.COMMIT, producer_id=p_abort, producer_epoch=0, base_offset=8),
    ])
    aborted = [messages.FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction(
        producer_id=p_abort, first_offset=2)]
    return log, aborted


def test_read_committed_skips_aborted_transactions_as_the_fetch_response_lists_them():
    """Sans-IO: librdkafka's mock leaves Fetch's aborted_transactions empty (it does not track
    them; librdkafka itself reads aborted data from it), so the exact answer is built here and
    goes through the fetcher's response path (kwire's broker, which lists them, is the peer of
    tests/broker/test_transactions_clients.py)."""
    log, aborted = transaction_log()
    for isolation, expected in (("read_committed", [b"c0", b"c1", b"plain", b"a2"]),
                                ("read_uncommitted", [b"c0", b"c1", b"a0", b"a1", b"plain", b"a2"])):
        got, position = asyncio.run(_fetch_from_bytes(log, aborted, isolation))
        assert [r.value for r in got] == expected
        assert position == 9


def _batch(base_offset: int, values: list[bytes], **options) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset, producer_epoch=0 if "producer_id" in options else -1,
                                 **options)
    for value in values:
        builder.append(None, value, 1_700_000_000_000)
    return builder.build()


def fetcher_holding(records: bytes, aborted, isolation: str, end: int = 9):
    """A fetcher of partition t-0 (from offset 0) that received ``records`` in a Fetch answer,
    through its response path; (fetcher, the partition's state)."""
    config = AsyncConsumer(quick("127.0.0.1:1", isolation_level=isolation)).config
    sub = SubscriptionState()
    tp = TopicPartition("t", 0)
    sub.assign([tp])
    sub.state(tp).seek(0)
    fetcher = Fetcher(None, config, sub, lambda: None)
    response = messages.FetchResponse(responses=[messages.FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[messages.FetchResponse.FetchableTopicResponse.PartitionData(
            partition_index=0, high_watermark=end, last_stable_offset=end, aborted_transactions=aborted,
            records=records)])])
    fetcher._handle_response(1, response, 12, {tp: (sub.state(tp).seek_epoch, 0)}, {})
    return fetcher, sub.state(tp)


async def _fetch_from_bytes(records: bytes, aborted, isolation: str):
    fetcher, state = fetcher_holding(records, aborted, isolation)
    return fetcher.drain(100), state.position


# -- memory and batch bounds ----------------------------------------------------------------------
def test_polls_return_at_most_max_records_and_the_buffer_stays_bounded(broker):
    topic = "bounded"
    value = b"x" * 1000
    # Small batches: a broker returns a whole batch even when it is larger than the fetch sizes.
    acked = produce(broker.bootstrap, topic, [(None, value, [], i % 2) for i in range(3000)],
                    **{"batch.size": 8192})
    fetch_max = 64 * 1024

    async def main():
        settings = quick(broker.bootstrap, auto_offset_reset="earliest", max_poll_records=50,
                         fetch_max_bytes=fetch_max, max_partition_fetch_bytes=16 * 1024)
        async with AsyncConsumer(settings) as c:
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            got, peaks = [], []
            deadline = time.monotonic() + 30
            while len(got) < len(acked) and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=200)
                assert len(batch) <= 50
                got += batch
                await asyncio.sleep(0.002)  # let prefetches land while "processing"
                peaks.append(c._fetcher._buffered_bytes)
            return got, max(peaks)

    got, peak = run(main())
    assert len(got) == len(acked)
    # Prefetching happened, but never beyond fetch.max.bytes plus the answer in flight.
    assert 0 < peak <= 2 * fetch_max


@pytest.mark.parametrize("check_crcs", [True, False])
def test_a_corrupt_batch_is_refused_when_crcs_are_checked(check_crcs):
    """Sans-IO: a flipped byte in a record value (no real broker serves a corrupt batch)."""
    good = _batch(0, [b"intact"])
    bad = bytearray(_batch(1, [b"flipped"]))
    bad[-3] ^= 0xFF
    records = good + bytes(bad)

    async def main():
        config = AsyncConsumer(quick("127.0.0.1:1", check_crcs=check_crcs)).config
        sub = SubscriptionState()
        tp = TopicPartition("t", 0)
        sub.assign([tp])
        sub.state(tp).seek(0)
        fetcher = Fetcher(None, config, sub, lambda: None)
        response = messages.FetchResponse(responses=[messages.FetchResponse.FetchableTopicResponse(
            topic="t", partitions=[messages.FetchResponse.FetchableTopicResponse.PartitionData(
                partition_index=0, high_watermark=2, records=records)])])
        fetcher._handle_response(1, response, 12, {tp: (sub.state(tp).seek_epoch, 0)}, {})
        first = fetcher.drain(100)
        try:
            return first, fetcher.drain(100), None
        except CorruptRecordError as exc:
            again = pytest.raises(CorruptRecordError, fetcher.drain, 100)  # until the application seeks past it
            return first, again.value, exc

    first, second, error = asyncio.run(main())
    if check_crcs:
        # The intact batch is handed out; the corrupt one raises, and again at the next poll.
        assert [r.value for r in first] == [b"intact"]
        assert "CRC" in str(error) and isinstance(second, CorruptRecordError)
    else:
        assert [r.value for r in first][0] == b"intact" and len(first) == 2 and first[1].value != b"flipped"
        assert second == [] and error is None
