"""The producer when things go wrong, against kwire's broker: a broker that goes away (delivery
timeout, buffer back-pressure, flush and close), a broker restart in the middle of a run (exactly
once, in order), and a producer id used behind the producer's back (fenced, or a sequence gap that
a new epoch closes)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.connection import BrokerConnection
from kwire.client.errors import ClientTimeoutError, IllegalStateError
from kwire.client.producer import AsyncProducer, Producer
from kwire.client.producer_errors import DeliveryTimeoutError, ProducerFencedError
from kwire.protocol import messages
from kwire.protocol.records import RecordBatchBuilder

from .test_producer import read_back

# Quick failure detection for tests whose broker goes away.
FAST = {"request.timeout.ms": 1000, "retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
        "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100, "socket.connection.setup.timeout.ms": 500}


async def stopped(broker: EmbeddedBroker) -> None:
    await asyncio.to_thread(broker.stop)


def test_records_expire_after_delivery_timeout_when_the_broker_is_gone():
    broker = EmbeddedBroker(default_partitions=1).start()

    async def main():
        conf = {"bootstrap.servers": broker.bootstrap, **FAST, "linger.ms": 0, "delivery.timeout.ms": 1500}
        async with AsyncProducer(conf) as producer:
            assert (await (await producer.send("gone", b"first"))).offset == 0
            await stopped(broker)
            futures = [await producer.send("gone", b"x%d" % i) for i in range(10)]
            return await asyncio.gather(*futures, return_exceptions=True)

    results = asyncio.run(asyncio.wait_for(main(), 30))
    assert all(isinstance(r, DeliveryTimeoutError) for r in results), results
    assert "gone-0" in str(results[0]) and "delivery.timeout.ms (1500 ms)" in str(results[0])
    assert results[0].topic_partition == ("gone", 0)


def test_send_waits_for_buffer_memory_then_fails_clearly():
    """buffer.memory bounds what waits for delivery: with the broker gone nothing drains, so the
    send that would go beyond it waits max.block.ms and raises; nothing grows past the bound."""
    broker = EmbeddedBroker(default_partitions=1).start()
    limit = 20_000

    async def main():
        conf = {"bootstrap.servers": broker.bootstrap, **FAST, "buffer.memory": limit, "max.block.ms": 300,
                "batch.size": 4096, "delivery.timeout.ms": 60_000}
        producer = AsyncProducer(conf)
        await producer.start()
        await (await producer.send("full", b"warm"))
        await stopped(broker)
        futures = []
        with pytest.raises(ClientTimeoutError, match=r"buffer.memory \(20000 bytes\) stayed full for max.block.ms"):
            for _ in range(1000):
                futures.append(await producer.send("full", b"x" * 500))
                assert producer._accumulator.buffered <= limit
        accepted = len(futures)
        await producer.close(0)
        return accepted, futures

    accepted, futures = asyncio.run(asyncio.wait_for(main(), 30))
    # ~521 bytes a record, plus a batch header per 4 KiB batch: 35-38 fit in 20000 bytes.
    assert 30 <= accepted <= 38
    # close(0) gave up on them, by name.
    assert all(isinstance(f.exception(), IllegalStateError) for f in futures)
    assert "closed before the record was delivered" in str(futures[0].exception())


def test_back_pressure_lets_sends_through_as_batches_complete():
    with EmbeddedBroker(default_partitions=2) as broker:
        async def main():
            conf = {"bootstrap.servers": broker.bootstrap, "buffer.memory": 16_384, "batch.size": 4096,
                    "linger.ms": 1}
            async with AsyncProducer(conf) as producer:
                futures, peak = [], 0
                for i in range(3000):  # ~700 KB through a 16 KB buffer
                    futures.append(await producer.send("pressure", b"%06d" % i + b"x" * 200))
                    peak = max(peak, producer._accumulator.buffered)
                return await asyncio.gather(*futures), peak

        metadatas, peak = asyncio.run(asyncio.wait_for(main(), 60))
        assert peak <= 16_384
        assert len(metadatas) == 3000 and all(md.offset >= 0 for md in metadatas)
        assert len(read_back(broker.bootstrap, "pressure", 3000)) == 3000


def test_sync_produce_blocks_on_a_full_buffer_then_raises():
    broker = EmbeddedBroker(default_partitions=1).start()
    conf = {"bootstrap.servers": broker.bootstrap, **FAST, "buffer.memory": 10_000, "max.block.ms": 300,
            "delivery.timeout.ms": 60_000}
    producer = Producer(conf)
    try:
        producer.produce("sync-full", b"warm").result(10)
        broker.stop()
        futures = []
        with pytest.raises(ClientTimeoutError, match="buffer.memory"):
            for _ in range(1000):
                futures.append(producer.produce("sync-full", b"x" * 500))
        assert 10 <= len(futures) <= 19
        # flush gives up after its timeout and says how many records are left.
        assert producer.flush(0.2) == len(futures)
    finally:
        producer.close(0)
    assert all(isinstance(f.exception(0), IllegalStateError) for f in futures)


def test_flush_timeout_and_close_without_waiting():
    broker = EmbeddedBroker(default_partitions=1).start()
    calls = []

    async def main():
        conf = {"bootstrap.servers": broker.bootstrap, **FAST, "delivery.timeout.ms": 60_000}
        producer = AsyncProducer(conf, on_delivery=lambda err, md: calls.append(err))
        await producer.start()
        await (await producer.send("flush-timeout", b"warm"))
        await stopped(broker)
        pending = [await producer.send("flush-timeout", b"%d" % i) for i in range(5)]
        with pytest.raises(ClientTimeoutError, match=r"flush: 5 record\(s\) still not delivered"):
            await producer.flush(0.3)
        await producer.close(0)
        return pending

    pending = asyncio.run(asyncio.wait_for(main(), 30))
    assert all(isinstance(f.exception(), IllegalStateError) for f in pending)
    assert calls[0] is None and all(isinstance(err, IllegalStateError) for err in calls[1:]) and len(calls) == 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_idempotent_producer_delivers_exactly_once_in_order_across_a_broker_restart(tmp_path, caplog):
    """Records keep coming while the broker stops (uncleanly, with requests in flight) and a new
    one starts on the same port and data: every record is written once, in order per partition."""
    port = free_port()
    settings = {"port": port, "default_partitions": 2, "fsync": "always"}
    first = EmbeddedBroker(tmp_path, **settings).start()
    n = 6000
    caplog.set_level(logging.DEBUG, logger="kwire.client.producer")

    async def restart():
        await asyncio.to_thread(first.stop, clean=False)
        await asyncio.sleep(0.3)
        return await asyncio.to_thread(lambda: EmbeddedBroker(tmp_path, **settings).start())

    async def main():
        conf = {"bootstrap.servers": f"127.0.0.1:{port}", **FAST, "request.timeout.ms": 3000,
                "linger.ms": 1, "batch.size": 2048, "delivery.timeout.ms": 60_000}
        async with AsyncProducer(conf) as producer:
            futures, second = [], None
            for i in range(n):
                futures.append(await producer.send("restart", b"%06d" % i, key=b"k%d" % (i % 8)))
                if i % 100 == 99:
                    await asyncio.sleep(0.002)  # let requests go out while records keep coming
                if i == n // 3:
                    second = asyncio.ensure_future(restart())
            results = await asyncio.gather(*futures)
            return results, await second

    results, second = asyncio.run(asyncio.wait_for(main(), 90))
    try:
        got = read_back(second.bootstrap, "restart", n)
    finally:
        second.stop()
    assert sorted(g.value for g in got) == [b"%06d" % i for i in range(n)]
    for partition in (0, 1):
        values = [g.value for g in sorted(got, key=lambda g: g.offset) if g.partition == partition]
        assert values == sorted(values), f"partition {partition} is out of order"
    assert {(md.partition, md.offset) for md in results} == {(g.partition, g.offset) for g in got}
    # The restart did interrupt the run: batches had to be sent again.
    assert any("resending" in r.getMessage() for r in caplog.records)


# -- a producer id used by someone else -----------------------------------------------------------
async def raw_produce(bootstrap: str, topic: str, partition: int, *, producer_id: int, epoch: int,
                      sequence: int, values: list[bytes]) -> int:
    """Write one idempotent batch with the given producer state straight through the protocol;
    the partition's error code."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection.open(host, int(port))
    try:
        builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
        for value in values:
            builder.append(None, value)
        data = messages.ProduceRequest.TopicProduceData
        request = messages.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[data(
            name=topic, partition_data=[data.PartitionProduceData(index=partition, records=builder.build())])])
        response = await conn.send(request, high=12)
        return response.responses[0].partition_responses[0].error_code
    finally:
        conn.close()


def test_a_newer_epoch_of_our_producer_id_fences_the_producer():
    """Someone else bumped our producer id's epoch on the partition: the broker refuses ours
    (INVALID_PRODUCER_EPOCH) and the records fail with a clear error instead of looping."""
    with EmbeddedBroker(default_partitions=1) as broker:
        async def main():
            async with AsyncProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0}) as producer:
                await (await producer.send("fenced", b"mine-1"))
                idem = producer._sender._idem
                assert await raw_produce(broker.bootstrap, "fenced", 0, producer_id=idem.producer_id,
                                         epoch=idem.epoch + 1, sequence=0, values=[b"theirs"]) == 0
                future = await producer.send("fenced", b"mine-2")
                with pytest.raises(ProducerFencedError, match=r"fenced-0: the broker refused producer id \d+ epoch 0"):
                    await future
                # Other partitions, and later records, are not stuck behind it.
                return await (await producer.send("fenced-other", b"fine"))

        assert asyncio.run(asyncio.wait_for(main(), 30)).offset == 0


def test_a_sequence_gap_is_closed_by_a_new_epoch_without_losing_records(caplog):
    """Someone else wrote the sequences our next batch was to have: the broker calls ours out of
    order, and since it is the next batch the producer expects, retrying cannot help: the producer
    bumps its epoch, numbers the partition from 0 again, and the record is delivered."""
    caplog.set_level(logging.INFO, logger="kwire.client.producer")
    with EmbeddedBroker(default_partitions=1) as broker:
        async def main():
            async with AsyncProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0}) as producer:
                await (await producer.send("gap", b"mine-1"))
                idem = producer._sender._idem
                assert await raw_produce(broker.bootstrap, "gap", 0, producer_id=idem.producer_id, epoch=0,
                                         sequence=1, values=[b"theirs-1", b"theirs-2"]) == 0
                md = await (await producer.send("gap", b"mine-2"))
                after = await (await producer.send("gap", b"mine-3"))
                return md, after, idem.epoch

        md, after, epoch = asyncio.run(asyncio.wait_for(main(), 30))
        assert (md.offset, after.offset, epoch) == (3, 4, 1)
        got = sorted(read_back(broker.bootstrap, "gap", 5), key=lambda g: g.offset)
        assert [g.value for g in got] == [b"mine-1", b"theirs-1", b"theirs-2", b"mine-2", b"mine-3"]
    assert any("restart under a new epoch" in r.getMessage() for r in caplog.records)


def test_an_unreachable_bootstrap_fails_start_within_max_block_ms():
    port = free_port()

    async def main():
        producer = AsyncProducer({"bootstrap.servers": f"127.0.0.1:{port}", **FAST, "max.block.ms": 500})
        started = time.monotonic()
        with pytest.raises(ClientTimeoutError, match="connecting to the bootstrap servers"):
            await producer.start()
        return time.monotonic() - started

    assert asyncio.run(main()) < 10


def test_a_topic_the_broker_will_not_create_times_out_after_max_block_ms():
    with EmbeddedBroker(auto_create_topics=False) as broker:
        async def main():
            conf = {"bootstrap.servers": broker.bootstrap, **FAST, "max.block.ms": 400}
            async with AsyncProducer(conf) as producer:
                with pytest.raises(ClientTimeoutError, match=r"topic 'nowhere' not present in metadata after "
                                                             r"max.block.ms \(400 ms\)"):
                    await producer.send("nowhere", b"v")

        asyncio.run(asyncio.wait_for(main(), 30))
        with Producer({"bootstrap.servers": broker.bootstrap, **FAST, "max.block.ms": 400}) as producer:
            with pytest.raises(ClientTimeoutError, match="'nowhere' not present"):
                producer.produce("nowhere", b"v")
