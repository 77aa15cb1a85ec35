"""Real Kafka clients are the judges: confluent-kafka (librdkafka), kafka-python 3.0.12, aiokafka
and kcat produce to kwire's broker and consume back with consumer groups.

Each test starts its own broker (EmbeddedBroker) and uses its own topic and group.
"""

from __future__ import annotations

import json
import time

import pytest

from kwire.broker import EmbeddedBroker

from . import clients as c

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 300


def _matrix(client: int, idempotence: tuple[str, str] | tuple[bool, bool]) -> list:
    """codec x idempotence for the client'th of the four clients, as parameters named
    ``<codec>-<idempotence>``.  The day-to-day tier (``make test-fast``) keeps two of the ten: the
    client's uncompressed idempotent run and one compressed plain run, the codec rotating from one
    client to the next so the four clients still cover every codec; the others are marked slow
    (``make test`` runs the whole matrix, 40 runs of 2-3 s)."""
    ids = {True: "idempotent", False: "plain"}
    kept = {("none", idempotence[0]), (CODECS[1 + client], idempotence[1])}
    return [pytest.param(codec, on, id=f"{codec}-{ids.get(on, on)}",
                         marks=() if (codec, on) in kept else pytest.mark.slow)
            for codec in CODECS for on in idempotence]



@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=3) as b:
        yield b


# -- confluent-kafka -----------------------------------------------------------------------------
@pytest.mark.parametrize(("codec", "idempotence"), _matrix(0, (True, False)))
def test_confluent_kafka(broker, codec, idempotence):
    topic, group = f"ck-{codec}-{idempotence}", f"g-ck-{codec}-{idempotence}"
    sent = c.records(topic, N)
    acked = c.confluent_produce(broker.bootstrap, topic, sent, **{"compression.type": codec,
                                                                  "enable.idempotence": idempotence})
    assert len(acked) == N and len(set(acked)) == N
    consumer = c.confluent_consumer(broker.bootstrap, group, [topic])
    got = c.confluent_consume(consumer, N)
    consumer.commit(asynchronous=False)
    consumer.close()
    c.check_same(sent, got)
    # A restarted consumer of the group resumes at the committed offsets: only new records.
    more = c.records(topic, 50, start=N)
    c.confluent_produce(broker.bootstrap, topic, more, **{"compression.type": codec})
    consumer = c.confluent_consumer(broker.bootstrap, group, [topic])
    again = c.confluent_consume(consumer, 50)
    extra = c.confluent_consume(consumer, 1, timeout=1)
    consumer.close()
    c.check_same(more, again)
    assert extra == []


# -- kafka-python ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("codec", "idempotence"), _matrix(1, (True, False)))
def test_kafka_python(broker, codec, idempotence):
    topic, group = f"kp-{codec}-{idempotence}", f"g-kp-{codec}-{idempotence}"
    sent = c.records(topic, N)
    conf = {"enable_idempotence": idempotence}
    if codec != "none":
        conf["compression_type"] = codec
    acked = c.kafka_python_produce(broker.bootstrap, topic, sent, **conf)
    assert len(set(acked)) == N
    consumer = c.kafka_python_consumer(broker.bootstrap, group, [topic])
    got = c.kafka_python_consume(consumer, N)
    consumer.commit()
    consumer.close()
    c.check_same(sent, got)
    more = c.records(topic, 50, start=N)
    c.kafka_python_produce(broker.bootstrap, topic, more, **conf)
    consumer = c.kafka_python_consumer(broker.bootstrap, group, [topic])
    again = c.kafka_python_consume(consumer, 50)
    extra = c.kafka_python_consume(consumer, 1, timeout=1)
    consumer.close()
    c.check_same(more, again)
    assert extra == []


# -- aiokafka ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("codec", "idempotence"), _matrix(2, (True, False)))
def test_aiokafka(broker, codec, idempotence):
    topic, group = f"ak-{codec}-{idempotence}", f"g-ak-{codec}-{idempotence}"
    sent = c.records(topic, N)
    conf = {"enable_idempotence": idempotence}
    if codec != "none":
        conf["compression_type"] = codec
    acked = c.run(c.aiokafka_produce(broker.bootstrap, topic, sent, **conf))
    assert len(set(acked)) == N
    got = c.run(c.aiokafka_consume(broker.bootstrap, group, [topic], N))
    c.check_same(sent, got)
    more = c.records(topic, 50, start=N)
    c.run(c.aiokafka_produce(broker.bootstrap, topic, more, **conf))
    again = c.run(c.aiokafka_consume(broker.bootstrap, group, [topic], 51, timeout=2))
    c.check_same(more, again)


# -- kcat ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("codec", "idempotence"), _matrix(3, ("true", "false")))
def test_kcat(broker, codec, idempotence):
    topic, group = f"kc-{codec}-{idempotence}", f"g-kc-{codec}-{idempotence}"
    lines = b"".join(b"key-%d\tvalue-%d\n" % (i, i) for i in range(N))
    out = c.kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K", "\t", "-z", codec, "-H", "src=kcat",
                 "-X", "acks=all", "-X", f"enable.idempotence={idempotence}", input=lines)
    assert out.returncode == 0, out.stderr.decode()
    # Balanced consumer: kcat -G joins the group and commits; -e exits at the end of every partition.
    out = c.kcat("-b", broker.bootstrap, "-G", group, "-e", "-J", "-X", "auto.offset.reset=earliest", topic)
    assert out.returncode == 0, out.stderr.decode()
    msgs = [json.loads(line) for line in out.stdout.decode().splitlines() if line.startswith("{")]
    assert sorted((m["key"], m["payload"]) for m in msgs) == sorted((f"key-{i}", f"value-{i}") for i in range(N))
    assert all(m["headers"] == ["src", "kcat"] for m in msgs)
    for p in {m["partition"] for m in msgs}:
        offsets = [m["offset"] for m in msgs if m["partition"] == p]
        assert offsets == sorted(offsets)
    # The group committed: a second run of the same group gets nothing new.
    out = c.kcat("-b", broker.bootstrap, "-G", group, "-e", "-J", topic)
    assert [line for line in out.stdout.decode().splitlines() if line.startswith("{")] == []


def test_kcat_lists_metadata(broker):
    c.confluent_produce(broker.bootstrap, "listed", c.records("listed", 3))
    out = c.kcat("-b", broker.bootstrap, "-L")
    text = out.stdout.decode()
    assert out.returncode == 0
    assert f"broker 1 at {broker.bootstrap} (controller)" in text
    assert 'topic "listed" with 3 partitions' in text


# -- groups across clients ---------------------------------------------------------------------------
def _assigned(consumer, rounds: int = 40) -> set[int]:
    """Poll until the consumer has an assignment that stays the same for a few polls."""
    last, stable = None, 0
    for _ in range(rounds):
        consumer.poll(0.25)
        now = {tp.partition for tp in consumer.assignment()}
        stable = stable + 1 if now == last and now else 0
        last = now
        if stable >= 4:
            break
    return last or set()


def test_second_consumer_joining_and_leaving_rebalances(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=4) as broker:
        c.confluent_produce(broker.bootstrap, "rb", c.records("rb", 40))
        first = c.confluent_consumer(broker.bootstrap, "rb-group", ["rb"])
        assert _assigned(first) == {0, 1, 2, 3}
        second = c.confluent_consumer(broker.bootstrap, "rb-group", ["rb"])
        deadline = time.monotonic() + 30
        a = b = set()
        while time.monotonic() < deadline:
            first.poll(0.2)
            second.poll(0.2)
            a = {tp.partition for tp in first.assignment()}
            b = {tp.partition for tp in second.assignment()}
            if len(a) == 2 and len(b) == 2:
                break
        assert a | b == {0, 1, 2, 3} and not a & b and len(a) == len(b) == 2
        second.close()  # LeaveGroup: the first consumer gets everything back without a session timeout
        t0 = time.monotonic()
        deadline = t0 + 8
        while time.monotonic() < deadline and {tp.partition for tp in first.assignment()} != {0, 1, 2, 3}:
            first.poll(0.2)
        assert {tp.partition for tp in first.assignment()} == {0, 1, 2, 3}
        first.close()


def test_group_mixing_librdkafka_and_kafka_python(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=4) as broker:
        sent = c.records("mix", 200)
        c.confluent_produce(broker.bootstrap, "mix", sent)
        rd = c.confluent_consumer(broker.bootstrap, "mix-group", ["mix"], **{"partition.assignment.strategy": "range"})
        kp = c.kafka_python_consumer(broker.bootstrap, "mix-group", ["mix"])
        got: list[c.Rec] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            got += c.confluent_consume(rd, 1, timeout=0.3)
            got += c.kafka_python_consume(kp, 1, timeout=0.3)
            a = {tp.partition for tp in rd.assignment()}
            b = {tp.partition for tp in kp.assignment()}
            if len(a) == 2 and len(b) == 2 and len({(r.partition, r.offset) for r in got}) >= 200:
                break
        assert a | b == {0, 1, 2, 3} and not a & b, (a, b)
        unique = {(r.partition, r.offset): r for r in got}
        c.check_same(sent, list(unique.values()))
        rd.close()
        kp.close()
