"""Transactions judged by real clients: librdkafka (confluent-kafka), kafka-python 3.0.12 and aiokafka
as transactional producers and read_committed consumers, consume-transform-produce with
send_offsets_to_transaction, kwire's own read_committed consumer, fencing and timeouts.
Each test starts its own broker; every wait is a poll with a deadline."""

from __future__ import annotations

import asyncio
import time

import aiokafka
import confluent_kafka
import kafka
import kafka.admin
import pytest
from kafka.structs import OffsetAndMetadata, TopicPartition

import kwire
from kwire.broker import EmbeddedBroker

from .clients import confluent_read_all, run

PARTITIONS = 3
QUIET = {"log_level": 0}  # librdkafka's connection chatter when a test's broker stops


def committed_and_aborted(n: int = 30) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """(partition, value) of a committed and an aborted transaction, spread over the partitions."""
    return ([(i % PARTITIONS, b"commit-%d" % i) for i in range(n)],
            [(i % PARTITIONS, b"abort-%d" % i) for i in range(n)])


# -- readers -------------------------------------------------------------------------------------
def kafka_python_read_all(bootstrap: str, topic: str, isolation: str, timeout: float = 15) -> list[tuple[int, bytes]]:
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    ends = c.end_offsets(tps)  # the LSO for read_committed
    got = []
    deadline = time.monotonic() + timeout
    try:
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"kafka-python {isolation} reader stuck at {len(got)} records"
            for tp, msgs in c.poll(timeout_ms=200).items():
                got.extend((tp.partition, m.value) for m in msgs)
    finally:
        c.close()
    return got


async def aiokafka_read_all(bootstrap: str, topic: str, isolation: str, timeout: float = 15):
    c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
    await c.start()
    tps = [aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    await c.seek_to_beginning(*tps)
    ends = await c.end_offsets(tps)
    got = []
    deadline = time.monotonic() + timeout
    try:
        while any([await c.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, f"aiokafka {isolation} reader stuck at {len(got)} records"
            for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                got.extend((tp.partition, m.value) for m in msgs)
    finally:
        await c.stop()
    return got


def check_isolation(got_committed, got_uncommitted, committed, aborted) -> None:
    assert sorted(got_committed) == sorted(committed)
    assert sorted(got_uncommitted) == sorted(committed + aborted)


def check_log(broker: EmbeddedBroker, topic: str) -> None:
    """Every partition: no transaction open, one abort indexed."""
    for p in range(PARTITIONS):
        log = broker.state.logs.get(topic, p)
        assert log.last_stable_offset == log.high_watermark
        assert [len(s.txn_index.entries) for s in log.segments] == [1]


# -- the three producers -------------------------------------------------------------------------
def test_confluent_kafka_transactions(tmp_path):
    committed, aborted = committed_and_aborted()
    with EmbeddedBroker(tmp_path / "data", default_partitions=PARTITIONS) as broker:
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ck-1",
                                      "linger.ms": 5, **QUIET})
        p.init_transactions(10)
        p.begin_transaction()
        for partition, value in committed:
            p.produce("ck", value=value, partition=partition)
        p.commit_transaction(10)
        p.begin_transaction()
        for partition, value in aborted:
            p.produce("ck", value=value, partition=partition)
        p.flush(10)
        p.abort_transaction(10)
        check_isolation(confluent_read_all(broker.bootstrap, "ck", "read_committed"),
                        confluent_read_all(broker.bootstrap, "ck", "read_uncommitted"), committed, aborted)
        check_log(broker, "ck")


def test_kafka_python_transactions(tmp_path):
    committed, aborted = committed_and_aborted()
    with EmbeddedBroker(tmp_path / "data", default_partitions=PARTITIONS) as broker:
        p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-1", linger_ms=5)
        p.init_transactions()
        p.begin_transaction()
        for partition, value in committed:
            p.send("kp", value=value, partition=partition)
        p.commit_transaction()
        p.begin_transaction()
        for partition, value in aborted:
            p.send("kp", value=value, partition=partition)
        p.flush()
        p.abort_transaction()
        p.close()
        check_isolation(kafka_python_read_all(broker.bootstrap, "kp", "read_committed"),
                        kafka_python_read_all(broker.bootstrap, "kp", "read_uncommitted"), committed, aborted)
        check_log(broker, "kp")


def test_aiokafka_transactions(tmp_path):
    committed, aborted = committed_and_aborted()

    async def scenario(bootstrap):
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="ak-1", linger_ms=5)
        await p.start()
        try:
            async with p.transaction():
                for partition, value in committed:
                    await p.send("ak", value=value, partition=partition)
            await p.begin_transaction()
            for partition, value in aborted:
                await p.send("ak", value=value, partition=partition)
            await p.flush()
            await p.abort_transaction()
        finally:
            await p.stop()
        return (await aiokafka_read_all(bootstrap, "ak", "read_committed"),
                await aiokafka_read_all(bootstrap, "ak", "read_uncommitted"))

    with EmbeddedBroker(tmp_path / "data", default_partitions=PARTITIONS) as broker:
        check_isolation(*run(scenario(broker.bootstrap)), committed, aborted)
        check_log(broker, "ak")


# -- consume-transform-produce -------------------------------------------------------------------
def group_offset(broker: EmbeddedBroker, group: str, topic: str, partition: int) -> int | None:
    found = broker.call(broker.state.coordinator.fetch_offsets, group, [(topic, partition)])
    return None if found[0][2] is None else found[0][2].offset


def test_confluent_send_offsets_to_transaction(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as broker:
        seed = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
        for i in range(10):
            seed.produce("in", value=b"%d" % i)
        assert seed.flush(10) == 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ctp",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                             "isolation.level": "read_committed", **QUIET})
        consumer.subscribe(["in"])
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ctp-1",
                                             **QUIET})
        producer.init_transactions(10)
        inputs = []
        deadline = time.monotonic() + 15
        while len(inputs) < 10:
            assert time.monotonic() < deadline
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                inputs.append(m)

        def transform(batch, commit: bool, position: int) -> None:
            producer.begin_transaction()
            for m in batch:
                producer.produce("out", value=m.value() * 2)
            producer.send_offsets_to_transaction([confluent_kafka.TopicPartition("in", 0, position)],
                                                 consumer.consumer_group_metadata(), 10)
            staged = broker.call(broker.state.coordinator.pending_txn_partitions, "ctp")
            assert staged == {("in", 0)}                           # staged, not the group's
            (producer.commit_transaction if commit else producer.abort_transaction)(10)

        transform(inputs[:5], True, 5)
        assert group_offset(broker, "ctp", "in", 0) == 5
        transform(inputs[5:], False, 10)
        assert group_offset(broker, "ctp", "in", 0) == 5           # the aborted offsets vanished
        assert broker.call(broker.state.coordinator.pending_txn_partitions, "ctp") == set()
        # librdkafka's own read of the group's offset (OffsetFetch with require_stable):
        assert consumer.committed([confluent_kafka.TopicPartition("in", 0)], 10)[0].offset == 5
        consumer.close()
        out = confluent_read_all(broker.bootstrap, "out", "read_committed", partitions=1)
        assert [v for _, v in out] == [b"%d" % i * 2 for i in range(5)]


def test_kafka_python_send_offsets_to_transaction(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as broker:
        admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:  # offsets of a missing partition are retried forever, as with Kafka
            admin.create_topics([kafka.admin.NewTopic("in", 1, 1)])
        finally:
            admin.close()  # else its network thread runs on for the rest of the test session
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-ctp")
        producer.init_transactions()
        for commit, position in ((True, 3), (False, 7)):
            producer.begin_transaction()
            producer.send("out", b"x")
            producer.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(position, "", -1)}, "kpg")
            assert group_offset(broker, "kpg", "in", 0) == (None if commit else 3)
            (producer.commit_transaction if commit else producer.abort_transaction)()
            assert group_offset(broker, "kpg", "in", 0) == 3
        producer.close()


# -- kwire's consumer ----------------------------------------------------------------------------
def test_kwire_read_committed_consumer_skips_aborts_and_waits_for_open_transactions(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as broker:
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "kw-1",
                                      "linger.ms": 1, **QUIET})
        p.init_transactions(10)
        p.begin_transaction()
        for i in range(3):
            p.produce("t", value=b"committed-%d" % i)
        p.commit_transaction(10)
        p.begin_transaction()
        for i in range(3):
            p.produce("t", value=b"aborted-%d" % i)
        p.flush(10)
        p.abort_transaction(10)
        p.begin_transaction()
        for i in range(3):
            p.produce("t", value=b"open-%d" % i)
        p.flush(10)
        plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
        plain.produce("t", value=b"plain-after-the-open-one")
        assert plain.flush(10) == 0
        log = broker.state.logs.get("t", 0)
        assert (log.last_stable_offset, log.high_watermark) == (8, 12)

        with kwire.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kw", "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"}, topics=["t"]) as consumer:
            got: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 15
            while len(got) < 3:
                assert time.monotonic() < deadline
                got += [(r.offset, r.value) for r in consumer.poll(0.2)]
            assert got == [(0, b"committed-0"), (1, b"committed-1"), (2, b"committed-2")]
            assert consumer.poll(0.5) == []          # at the LSO: nothing of the open transaction, nor after it
            p.commit_transaction(10)
            deadline = time.monotonic() + 15
            while len(got) < 7:
                assert time.monotonic() < deadline
                got += [(r.offset, r.value) for r in consumer.poll(0.2)]
            assert got[3:] == [(8, b"open-0"), (9, b"open-1"), (10, b"open-2"), (11, b"plain-after-the-open-one")]


# -- fencing and timeouts ------------------------------------------------------------------------
def test_a_second_producer_with_the_same_transactional_id_fences_the_first(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as broker:
        conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": "fence", **QUIET}
        first = confluent_kafka.Producer(conf)
        first.init_transactions(10)
        first.begin_transaction()
        first.produce("t", value=b"zombie")
        assert first.flush(10) == 0
        second = confluent_kafka.Producer(conf)
        second.init_transactions(10)       # aborts the first one's transaction, bumps the epoch
        with pytest.raises(confluent_kafka.KafkaException) as info:
            first.commit_transaction(10)
        error = info.value.args[0]
        assert error.code() == confluent_kafka.KafkaError._FENCED and error.fatal()
        second.begin_transaction()
        second.produce("t", value=b"successor")
        second.commit_transaction(10)
        assert confluent_read_all(broker.bootstrap, "t", "read_committed", partitions=1) == [(0, b"successor")]

        async def aio_zombie():
            """aiokafka: fenced by a later init too (its own error type)."""
            a = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="fence-ak")
            b = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="fence-ak")
            await a.start()
            try:
                await a.begin_transaction()
                await (await a.send("t", b"z"))
                await b.start()
                await b.stop()
                with pytest.raises(aiokafka.errors.ProducerFenced):
                    await a.commit_transaction()
            finally:
                await a.stop()

        run(aio_zombie())


def test_a_transaction_left_open_past_its_timeout_is_aborted(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as broker:
        committed = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ok", **QUIET})
        committed.init_transactions(10)
        slow = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "slow",
                                         "transaction.timeout.ms": 1000, **QUIET})
        slow.init_transactions(10)
        started = time.monotonic()                               # before its transaction begins
        slow.begin_transaction()
        slow.produce("t", value=b"never")
        assert slow.flush(10) == 0
        committed.begin_transaction()
        committed.produce("t", value=b"after")
        committed.commit_transaction(10)
        log = broker.state.logs.get("t", 0)
        assert log.last_stable_offset == 0                       # held by the slow one
        reader = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "r",
                                           "isolation.level": "read_committed", **QUIET})
        reader.assign([confluent_kafka.TopicPartition("t", 0, confluent_kafka.OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 10
        while not got:
            assert time.monotonic() < deadline
            m = reader.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        reader.close()
        assert got == [b"after"]                                   # the read moved past the aborted one
        assert 1.0 <= time.monotonic() - started < 6             # not before its timeout, soon after it
        assert log.last_stable_offset == log.high_watermark
        with pytest.raises(confluent_kafka.KafkaException) as info:
            slow.commit_transaction(10)
        assert info.value.args[0].code() == confluent_kafka.KafkaError._FENCED


def test_an_open_transaction_survives_a_clean_restart(tmp_path):
    data = tmp_path / "data"
    broker = EmbeddedBroker(data, default_partitions=1).start()
    port = broker.port
    try:
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "r-1",
                                      "linger.ms": 1, **QUIET})
        p.init_transactions(10)
        p.begin_transaction()
        p.produce("t", value=b"committed")
        p.commit_transaction(10)
        p.begin_transaction()
        p.produce("t", value=b"open")
        assert p.flush(10) == 0
        broker.stop()
        broker = EmbeddedBroker(data, port=port, default_partitions=1).start()
        log = broker.state.logs.get("t", 0)
        assert (log.last_stable_offset, log.high_watermark) == (2, 3)   # still held
        assert confluent_read_all(broker.bootstrap, "t", "read_committed", partitions=1) == [(0, b"committed")]
        p.commit_transaction(30)                                  # the producer carries on after the restart
        assert log.last_stable_offset == log.high_watermark == 4
        assert confluent_read_all(broker.bootstrap, "t", "read_committed", partitions=1) == [
            (0, b"committed"), (0, b"open")]
    finally:
        broker.stop()


def test_concurrent_transactional_producers_with_fsync_always(tmp_path):
    """Group commit of the markers' fsync; several producers' transactions interleaved in a partition."""

    async def scenario(bootstrap):
        async def one(n: int):
            p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"many-{n}")
            await p.start()
            try:
                for round_ in range(3):
                    await p.begin_transaction()
                    await p.send("many", b"%d-%d" % (n, round_), partition=0)
                    await (p.commit_transaction() if round_ != 1 else p.abort_transaction())
            finally:
                await p.stop()

        await asyncio.gather(*(one(n) for n in range(4)))

    with EmbeddedBroker(tmp_path / "data", default_partitions=1, fsync="always") as broker:
        run(scenario(broker.bootstrap))
        got = confluent_read_all(broker.bootstrap, "many", "read_committed", partitions=1)
        assert sorted(v for _, v in got) == sorted(b"%d-%d" % (n, r) for n in range(4) for r in (0, 2))
        log = broker.state.logs.get("many", 0)
        assert log.last_stable_offset == log.high_watermark == 4 * 3 * 2
        assert broker.state.durability.flushes >= 1
