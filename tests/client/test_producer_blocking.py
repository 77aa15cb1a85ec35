"""``BlockingProducer`` (kwire produce's driver over plain sockets) against kwire's broker: the
same partitions, batches, idempotent sequences and errors as the asyncio producer, across a
broker restart, a broker gone and a topic the broker will not create; and no asyncio imported."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.config import ProducerConfig
from kwire.client.errors import ClientTimeoutError
from kwire.client.partitioner import java_partition
from kwire.client.producer import AsyncProducer
from kwire.client.producer_blocking import BlockingProducer, NotBlockingCapable, blocking_capable
from kwire.client.producer_errors import DeliveryTimeoutError, InvalidPartitionError, RecordTooLargeError
from kwire.protocol.records import iter_batches

from .test_producer import read_back
from .test_producer_faults import FAST, free_port

PARTITIONS = 3


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=PARTITIONS) as b:
        yield b


def blocking(bootstrap: str, **settings) -> BlockingProducer:
    return BlockingProducer(ProducerConfig.from_settings({"bootstrap.servers": bootstrap, **settings}))


def stored_batches(broker: EmbeddedBroker, topic: str, partition: int) -> list:
    directory = broker.data_dir / f"{topic}-{partition}"
    return list(iter_batches(b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))))


def test_keyed_records_land_where_java_puts_them_in_idempotent_batches(broker):
    keys = [b"user-%d" % (i % 17) for i in range(3000)]
    values = [b"v%05d" % i for i in range(3000)]
    with blocking(broker.bootstrap, **{"batch.size": 4096}) as producer:
        delivery = producer.produce_many("blocking-keyed", values, keys)
        assert producer.flush(20) == 0
    assert (delivery.delivered, delivery.failed, delivery.error) == (3000, 0, None)
    got = read_back(broker.bootstrap, "blocking-keyed", 3000)
    assert sorted((g.key, g.value) for g in got) == sorted(zip(keys, values, strict=True))
    assert all(g.partition == java_partition(g.key, PARTITIONS) for g in got)
    # Each record's offset as the delivery reports it is where it landed.
    where = {(g.partition, g.offset): g.value for g in got}
    assert [where[o] for o in delivery.offsets()] == values
    for partition in range(PARTITIONS):
        batches = stored_batches(broker, "blocking-keyed", partition)
        assert len(batches) > 1 and all(b.size_in_bytes <= 4096 for b in batches)
        # Idempotent by default, as the asyncio producer: one producer id, sequences back to back.
        assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
        assert [b.base_sequence for b in batches] == [sum(x.record_count for x in batches[:i])
                                                      for i in range(len(batches))]


def test_the_same_batches_as_the_asyncio_producer(broker):
    """One bulk call each way: batches cut at the same records (the accumulator is shared)."""
    values = [b"%07d" % i + b"." * (i % 40) for i in range(5000)]
    settings = {"batch.size": 8192, "batch.num.messages": 150}
    with blocking(broker.bootstrap, **settings) as producer:
        producer.produce_many("blocking-cut", values, partition=1)
        producer.flush(20)

    async def asyncio_run():
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap, **settings}) as producer:
            await (await producer.send_many("asyncio-cut", values, partition=1))

    import asyncio

    asyncio.run(asyncio.wait_for(asyncio_run(), 30))
    ours = [[r.value for r in b] for b in stored_batches(broker, "blocking-cut", 1)]
    theirs = [[r.value for r in b] for b in stored_batches(broker, "asyncio-cut", 1)]
    assert len(ours) > 10 and ours == theirs


def test_acks_zero_one_and_headers(broker):
    for acks in (0, 1):
        topic = f"blocking-acks-{acks}"
        with blocking(broker.bootstrap, acks=acks) as producer:
            delivery = producer.produce_many(topic, [b"a", b"b"], key=b"k", headers={"h": b"1"})
            producer.flush(10)
        assert delivery.delivered == 2
        expected = -1 if acks == 0 else 0
        assert [s.first_offset for s in delivery.partitions()] == [expected]
        got = read_back(broker.bootstrap, topic, 2)
        assert [(g.key, g.value, g.headers) for g in got] == [(b"k", b"a", (("h", b"1"),)), (b"k", b"b", (("h", b"1"),))]


def test_records_too_large_fail_in_the_delivery_and_a_bad_partition_is_refused(broker):
    with blocking(broker.bootstrap, **{"max.request.size": 2000}) as producer:
        delivery = producer.produce_many("blocking-large", [b"small", b"x" * 5000, b"again"], partition=0)
        producer.flush(10)
        assert (delivery.delivered, delivery.failed) == (2, 1)
        assert isinstance(delivery.error, RecordTooLargeError) and "max.request.size (2000)" in str(delivery.error)
        with pytest.raises(InvalidPartitionError, match="partition 7 does not exist"):
            producer.produce_many("blocking-large", [b"v"], partition=7)


def test_exactly_once_in_order_across_a_broker_restart(tmp_path, caplog):
    """The broker stops uncleanly with requests in flight and comes back on the same port and
    data: every record is written once, in order per partition (resent with the same sequences)."""
    port = free_port()
    settings = {"port": port, "default_partitions": 2, "fsync": "always"}
    first = EmbeddedBroker(tmp_path, **settings).start()
    brokers = [first]

    def restart():
        first.stop(clean=False)
        time.sleep(0.3)
        brokers.append(EmbeddedBroker(tmp_path, **settings).start())

    caplog.set_level(logging.DEBUG, logger="kwire.client.producer")
    n, chunk = 6000, 200
    restarter = threading.Thread(target=restart)
    producer = blocking(f"127.0.0.1:{port}", **{**FAST, "request.timeout.ms": 3000, "linger.ms": 1,
                                                "batch.size": 2048, "delivery.timeout.ms": 60_000})
    deliveries = []
    try:
        for start in range(0, n, chunk):
            values = [b"%06d" % i for i in range(start, start + chunk)]
            deliveries.append(producer.produce_many("restart", values, [b"k%d" % (i % 8) for i in
                                                                         range(start, start + chunk)]))
            if start == n // 3:
                restarter.start()
            time.sleep(0.005)
        assert producer.flush(60) == 0
    finally:
        producer.close(0)
        restarter.join(30)
    second = brokers[-1]
    try:
        assert len(brokers) == 2
        got = read_back(second.bootstrap, "restart", n)
    finally:
        second.stop()
    assert sum(d.delivered for d in deliveries) == n
    assert sorted(g.value for g in got) == [b"%06d" % i for i in range(n)]
    for partition in (0, 1):
        values = [g.value for g in sorted(got, key=lambda g: g.offset) if g.partition == partition]
        assert values == sorted(values), f"partition {partition} is out of order"
    # The restart did interrupt the run: batches had to be sent again.
    assert any("resending" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(60)
def test_records_expire_after_delivery_timeout_when_the_broker_is_gone():
    broker = EmbeddedBroker(default_partitions=1).start()
    producer = blocking(broker.bootstrap, **FAST, **{"linger.ms": 0, "delivery.timeout.ms": 1500})
    try:
        assert producer.produce_many("gone", [b"first"]).delivered == 0  # queued; sent by flush
        assert producer.flush(10) == 0
        broker.stop()
        delivery = producer.produce_many("gone", [b"x%d" % i for i in range(10)])
        # No timeout: flush returns once the records have failed.  (It used to sleep on for the
        # whole timeout after the round that expired them: an hour here, so the test's own
        # timeout fails it.)
        assert producer.flush() == 0
    finally:
        producer.close(0)
    assert delivery.failed == 10 and isinstance(delivery.error, DeliveryTimeoutError)
    assert "gone-0" in str(delivery.error) and "delivery.timeout.ms (1500 ms)" in str(delivery.error)


def test_unreachable_bootstrap_and_a_topic_the_broker_will_not_create():
    port = free_port()
    with pytest.raises(ClientTimeoutError, match="connecting to the bootstrap servers"):
        blocking(f"127.0.0.1:{port}", **FAST, **{"max.block.ms": 500})
    with EmbeddedBroker(auto_create_topics=False) as broker, \
            blocking(broker.bootstrap, **FAST, **{"max.block.ms": 400}) as producer:
        with pytest.raises(ClientTimeoutError, match=r"topic 'nowhere' not present in metadata after "
                                                     r"max.block.ms \(400 ms\).*UNKNOWN_TOPIC_OR_PARTITION"):
            producer.produce_many("nowhere", [b"v"])


def test_what_needs_the_asyncio_producer():
    def config(**settings):
        return ProducerConfig.from_settings({"bootstrap.servers": "localhost:9092", **settings})

    assert blocking_capable(config()) is None
    assert blocking_capable(config(acks=0, **{"enable.idempotence": False})) is None
    assert blocking_capable(config(**{"transactional.id": "t"})) == "transactions"
    assert blocking_capable(config(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                      "sasl.username": "u", "sasl.password": "p"})) == \
        "security.protocol SASL_PLAINTEXT"
    with pytest.raises(NotBlockingCapable, match="transactions"):
        BlockingProducer(config(**{"transactional.id": "t"}))


def test_no_asyncio_is_imported(broker):
    code = ("import sys\n"
            "from kwire.client.config import ProducerConfig\n"
            "from kwire.client.producer_blocking import BlockingProducer\n"
            f"p = BlockingProducer(ProducerConfig.from_settings({{'bootstrap.servers': {broker.bootstrap!r}}}))\n"
            "d = p.produce_many('blocking-imports', [b'a', b'b'])\n"
            "p.close(10)\n"
            "assert d.delivered == 2, d\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('asyncio', 'concurrent')\n"
            "                      or m in ('kwire.client.producer', 'kwire.client.cluster', 'kwire.client.connection'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []


def test_a_frame_in_pieces_is_written_whole_across_partial_writes():
    # _write_all gather-writes a Produce frame's pieces (the batches by reference); a socket
    # that takes them a part at a time gets the rest from where each write stopped.
    import socket

    from kwire.client.producer_blocking import _write_all
    from kwire.protocol.records.bulk import SealedBatch
    from kwire.protocol.splice import SplicedBytes

    class Spliced(SplicedBytes):  # spliced bytes that are not in pieces: sent as read()
        def __len__(self) -> int:
            return 5

        def read(self) -> bytes:
            return b"spl" + b"ic"

    sealed = SealedBatch([b"batch-", bytes(range(256)) * 512, b"", b"-end"])
    pieces = [b"head", bytes(range(256)) * 4096, sealed, b"mid", bytearray(b"x" * 3_000_001), Spliced(),
              memoryview(b"tail")]
    expected = b"".join(p.read() if isinstance(p, SplicedBytes) else bytes(p) for p in pieces)
    writer, reader = socket.socketpair()
    writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    # With a timeout the socket is non-blocking underneath: each sendmsg takes what fits (a few
    # KB here) and returns, so the writes stop mid-piece hundreds of times.
    writer.settimeout(30)
    got = bytearray()

    def read() -> None:
        while len(got) < len(expected):
            chunk = reader.recv(7919)
            if not chunk:
                break
            got.extend(chunk)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        _write_all(writer, pieces)
        thread.join(30)
    finally:
        writer.close()
        reader.close()
    assert not thread.is_alive() and bytes(got) == expected
