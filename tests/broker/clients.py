"""Driving real Kafka clients (confluent-kafka, kafka-python, aiokafka, kcat) against a broker:
produce records and consume them back with a consumer group, bounded in time."""

from __future__ import annotations

import asyncio
import subprocess
import time
from dataclasses import dataclass

import aiokafka
import confluent_kafka
import kafka


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple

    @property
    def content(self) -> tuple:
        return self.key, self.value, self.headers


def records(topic: str, n: int, start: int = 0) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    """n keyed records with a header each; values sized 0..~300 bytes to exercise batching."""
    return [(b"key-%d" % i, (b"value-%d-" % i) * (i % 23), [("n", b"%d" % i), ("topic", topic.encode())])
            for i in range(start, start + n)]


def _headers(h) -> tuple:
    return tuple((k, bytes(v) if v is not None else None) for k, v in (h or []))


# -- confluent-kafka (librdkafka) ------------------------------------------------------------
def confluent_produce(bootstrap: str, topic: str, recs, **conf) -> list[tuple[int, int]]:
    acked: list[tuple[int, int]] = []
    errors = []

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset()))

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **conf})
    for key, value, headers in recs:
        p.produce(topic, value=value, key=key, headers=headers, on_delivery=done)
        p.poll(0)
    left = p.flush(30)
    assert left == 0 and not errors, (left, errors)
    return acked


def confluent_consumer(bootstrap: str, group: str, topics: list[str], **conf) -> confluent_kafka.Consumer:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, "session.timeout.ms": 10000,
                                  "heartbeat.interval.ms": 500, **conf})
    c.subscribe(topics)
    return c


def confluent_consume(c: confluent_kafka.Consumer, n: int, timeout: float = 30) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            if m.error():
                raise AssertionError(f"consumer error: {m.error()}")
            got.append(Rec(m.partition(), m.offset(), m.key(), m.value(), _headers(m.headers())))
    return got


# -- kafka-python -------------------------------------------------------------------------------
def kafka_python_produce(bootstrap: str, topic: str, recs, **conf) -> list[tuple[int, int]]:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **conf)
    futures = [p.send(topic, key=k, value=v, headers=h) for k, v, h in recs]
    p.flush(30)
    acked = [(md.partition, md.offset) for md in (f.get(timeout=30) for f in futures)]
    p.close(10)
    return acked


def kafka_python_consumer(bootstrap: str, group: str, topics: list[str], **conf) -> kafka.KafkaConsumer:
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=500, **conf)
    c.subscribe(topics)
    return c


def kafka_python_consume(c: kafka.KafkaConsumer, n: int, timeout: float = 30) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for tp, msgs in c.poll(timeout_ms=500).items():
            got.extend(Rec(tp.partition, m.offset, m.key, m.value, _headers(m.headers)) for m in msgs)
    return got


# -- aiokafka -----------------------------------------------------------------------------------
async def aiokafka_produce(bootstrap: str, topic: str, recs, **conf) -> list[tuple[int, int]]:
    p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **conf)
    await p.start()
    try:
        futures = [await p.send(topic, key=k, value=v, headers=h) for k, v, h in recs]
        mds = [await f for f in futures]
    finally:
        await p.stop()
    return [(md.partition, md.offset) for md in mds]


async def aiokafka_consume(bootstrap: str, group: str, topics: list[str], n: int, *, commit: bool = True,
                           timeout: float = 30) -> list[Rec]:
    c = aiokafka.AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group,
                                  auto_offset_reset="earliest", enable_auto_commit=False,
                                  session_timeout_ms=10000, heartbeat_interval_ms=500)
    await c.start()
    got: list[Rec] = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=500)
            for tp, msgs in batch.items():
                got.extend(Rec(tp.partition, m.offset, m.key, m.value, _headers(m.headers)) for m in msgs)
        if commit:
            await c.commit()
    finally:
        await c.stop()
    return got


def run(coro):
    return asyncio.run(coro)


# -- kcat ---------------------------------------------------------------------------------------
def kcat(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], input=input, capture_output=True, timeout=timeout)


def check_same(produced, got: list[Rec]) -> None:
    """Same records (content), none twice, and offsets increasing within each partition."""
    want = sorted((k, v, tuple(h)) for k, v, h in produced)
    have = sorted(r.content for r in got)
    assert len(have) == len(want), (len(have), len(want))
    assert have == want
    by_partition: dict[int, list[Rec]] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r)
    for recs in by_partition.values():
        recs.sort(key=lambda r: r.offset)
        assert len({r.offset for r in recs}) == len(recs)
        # One producer wrote them in order: per partition, production order is offset order.
        sequence = [int(dict(r.headers)["n"]) for r in recs]
        assert sequence == sorted(sequence)


# -- groups of confluent-kafka consumers -----------------------------------------------------
def consume_exactly(consumers: list[confluent_kafka.Consumer], n: int,
                    timeout: float = 30) -> dict[confluent_kafka.Consumer, int]:
    """Exactly n messages from the group (never more: the commit that follows must cover just
    these), polling every member so none holds up a rebalance; how many each one got."""
    got = dict.fromkeys(consumers, 0)
    deadline = time.monotonic() + timeout
    while sum(got.values()) < n and time.monotonic() < deadline:
        for c in consumers:
            for m in c.consume(n - sum(got.values()), 0.2) if sum(got.values()) < n else []:
                assert m.error() is None, m.error()
                got[c] += 1
    assert sum(got.values()) == n, f"consumed {sum(got.values())} of {n}"
    return got


def wait_for_assignment(consumers: list[confluent_kafka.Consumer], partitions: int, timeout: float = 30) -> None:
    """Poll the consumers until each has a share of the group's partitions and all are assigned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            assert c.poll(0.2) is None  # nothing produced yet: polling only drives the rebalance
        shares = [len(c.assignment()) for c in consumers]
        if all(shares) and sum(shares) == partitions:
            return
    raise AssertionError(f"the group never assigned its {partitions} partitions to its members")


def confluent_read_all(bootstrap: str, topic: str, isolation: str, partitions: int = 3,
                       timeout: float = 15) -> list[tuple[int, bytes]]:
    """Every record a consumer with ``isolation`` sees, read to the end of each partition (the LSO
    for read_committed), without a group rebalance (assigned partitions)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}",
                                  "isolation.level": isolation, "enable.partition.eof": True,
                                  "enable.auto.commit": False, "log_level": 0})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)])
    got, at_end = [], set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{isolation} reader stuck: {len(got)} records, ends {at_end}"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            got.append((m.partition(), m.value()))
    finally:
        c.close()
    return got
