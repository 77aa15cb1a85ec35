"""kcat's habits in kwire's produce and consume, as a kcat user types them: raw bytes in and out,
delimiters, nulls, ``-o`` positions, librdkafka's setting names, and failing fast when there is
no cluster or no topic.  Real processes against a real broker; what landed is read back with
confluent-kafka where the CLI's own reading would prove nothing."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker
from kwire.client.consumer import Consumer
from kwire.client.types import TopicPartition

from ..ports import refusing_ports

KWIRE = [sys.executable, "-m", "kwire.cli.main"]
RECORD_END, KEY_END = b"\x1e", b"\x1f"  # ASCII record and unit separators: never in the random data


def kwire(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    result = subprocess.run([*KWIRE, *args], capture_output=True, timeout=timeout, input=stdin)
    result.stderr = result.stderr.decode()
    return result


def ok(*args: str, stdin: bytes | None = None) -> bytes:
    result = kwire(*args, stdin=stdin)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=1) as b:
        yield b


@pytest.fixture
def topic(broker, request):
    name = request.node.name.replace("[", "-").replace("]", "")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})  # kept until the answer
    admin.create_topics([NewTopic(name, 1)])[name].result(15)
    return name


def landed(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of partition 0, read by confluent-kafka."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "log_level": 0,
                                         "enable.auto.commit": False})
    try:
        tp = confluent_kafka.TopicPartition(topic, 0, 0)
        end = consumer.get_watermark_offsets(tp, timeout=10)[1]
        consumer.assign([tp])
        out: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while len(out) < end and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None and m.error() is None:
                out.append((m.key(), m.value()))
        return out
    finally:
        consumer.close()


def random_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(b for b in rng.randbytes(n * 2) if b not in RECORD_END + KEY_END)[:n]


def test_random_binary_keys_and_values_round_trip_byte_for_byte(broker, topic, tmp_path):
    rng = random.Random(20261127)
    pairs = [(random_bytes(rng, rng.randint(1, 40)), random_bytes(rng, rng.randint(1, 300))) for _ in range(200)]
    data = tmp_path / "bin.dat"
    data.write_bytes(b"".join(k + KEY_END + v + RECORD_END for k, v in pairs))
    ok("produce", topic, "-f", str(data), "-D", "\\x1e", "-K", "\\x1f", "-b", broker.bootstrap)
    assert landed(broker.bootstrap, topic) == pairs
    out = ok("consume", topic, "-o", "beginning", "-e", "-K", "\\x1f", "-D", "\\x1e", "-b", broker.bootstrap)
    assert out == data.read_bytes()
    # %k and %s write the stored bytes too.
    assert ok("consume", topic, "-o", "beginning", "-e", "-f", "%k%s", "-b", broker.bootstrap) == \
        b"".join(k + v for k, v in pairs)


def test_random_binary_values_read_in_place_round_trip_byte_for_byte(broker, topic, tmp_path):
    # Without -K or -Z the records stay in each read's buffer (DelimitedValues): a file and stdin
    # of random binary values, a record cut by a read's end, and a last record without -D.
    from kwire.cli import produce_cmd

    rng = random.Random(20261128)
    values = [random_bytes(rng, rng.randint(0, 4000)) for _ in range(600)]
    data = tmp_path / "values.dat"
    data.write_bytes(RECORD_END.join(values))
    assert data.stat().st_size > produce_cmd._READ_SIZE
    ok("produce", topic, "-f", str(data), "-D", "\\x1e", "-b", broker.bootstrap)
    ok("produce", topic, "-D", "\\x1e", "-b", broker.bootstrap, stdin=data.read_bytes())
    assert landed(broker.bootstrap, topic) == [(None, v) for v in values + values]


def test_stdin_is_read_as_bytes_and_a_bad_record_names_the_file(broker, topic, tmp_path):
    ok("produce", topic, "-b", broker.bootstrap, stdin=b"caf\xe9\n\xff\xfe\n")  # not UTF-8: sent as it is
    assert landed(broker.bootstrap, topic) == [(None, b"caf\xe9"), (None, b"\xff\xfe")]
    bad = tmp_path / "keys.dat"
    bad.write_bytes(b"k1:v1\n\xffno separator\n")
    result = kwire("produce", topic, "-f", str(bad), "-K", ":", "-b", broker.bootstrap)
    assert result.returncode == 1
    assert f"{bad}: line 2 has no key separator ':'" in result.stderr and "\\xff" in result.stderr
    missing = kwire("produce", topic, "-f", str(tmp_path / "nope.dat"), "-b", broker.bootstrap)
    assert missing.returncode == 1 and f"cannot read --file {tmp_path / 'nope.dat'}" in missing.stderr


def test_empty_as_null_in_and_NULL_out(broker, topic):
    ok("produce", topic, "-K", ":", "-Z", "-b", broker.bootstrap, stdin=b"a:1\na:\n:3\n")
    assert landed(broker.bootstrap, topic) == [(b"a", b"1"), (b"a", None), (None, b"3")]
    base = ["consume", topic, "-o", "beginning", "-e", "-K", ":", "-b", broker.bootstrap]
    assert ok(*base) == b"a:1\na:\n:3\n"
    assert ok(*base, "-Z") == b"a:1\na:NULL\nNULL:3\n"


def test_start_and_stop_positions(broker, topic):
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for i in range(10):
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=1_700_000_000_000 + i * 1000)
    assert producer.flush(30) == 0
    b = broker.bootstrap

    def values(*position: str) -> list[bytes]:
        return ok("consume", topic, *position, "-e", "-b", b).split()

    assert values("-o", "beginning") == [b"v%d" % i for i in range(10)]
    assert values("-o", "end") == []
    assert values("-o", "7") == [b"v7", b"v8", b"v9"]
    assert values("-o", "-2") == [b"v8", b"v9"]
    assert values("-o", "s@1700000004000") == [b"v%d" % i for i in range(4, 10)]
    assert values("-o", "s@1700000002500", "-o", "e@1700000005000") == [b"v3", b"v4"]
    # e@ alone (from the end by default) has nothing to stop at; from the beginning it stops there.
    assert values("-o", "beginning", "-o", "e@1700000001000") == [b"v0"]
    # stored: a group's committed offsets; a group starting at -o beginning commits as it goes.
    assert ok("consume", topic, "-g", "g1", "-o", "beginning", "-c", "3", "-b", b).split() == [b"v0", b"v1", b"v2"]
    assert ok("consume", topic, "-g", "g1", "-o", "stored", "-e", "-b", b).split() == [b"v3", b"v4", b"v5", b"v6",
                                                                                         b"v7", b"v8", b"v9"]
    for wrong, says in ((["-o", "soon"], "is not a position"), (["-o", "stored"], "give the group with --group"),
                        (["-o", "1", "-o", "2"], "one start position"), (["-g", "g2", "-o", "5"], "with a group")):
        result = kwire("consume", topic, *wrong, "-e", "-b", b)
        assert result.returncode == 2 and says in result.stderr, (wrong, result.stderr)


def test_librdkafka_setting_names_and_spelling_hints(broker, topic):
    ok("produce", topic, "-X", "queue.buffering.max.ms=1", "-X", "request.required.acks=1",
       "-X", "batch.num.messages=1", "-X", "compression.codec=gzip", "-b", broker.bootstrap,
       stdin=b"a\nb\nc\nd\n")
    # batch.num.messages=1: every record its own batch, as librdkafka would send them.
    with Consumer({"bootstrap.servers": broker.bootstrap}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        batches = []
        deadline = time.monotonic() + 30
        while len(batches) < 4 and time.monotonic() < deadline:
            batches.extend(consumer.poll_batches(1.0))
    # Whole v2 batches come undecoded: each holds one record.
    assert [b.batch.record_count if b.batch is not None else len(b.records) for b in batches] == [1, 1, 1, 1]
    # auto.offset.reset=smallest is librdkafka's earliest.
    assert ok("consume", topic, "-g", "smallest", "-X", "auto.offset.reset=smallest", "-e",
              "-b", broker.bootstrap).split() == [b"a", b"b", b"c", b"d"]
    hint = kwire("produce", topic, "x", "-X", "lingerms=5", "-b", broker.bootstrap)
    assert hint.returncode == 1 and "did you mean 'linger.ms'" in hint.stderr
    wrong_role = kwire("consume", topic, "-X", "queue.buffering.max.ms=5", "-b", broker.bootstrap)
    assert wrong_role.returncode == 1 and "queue.buffering.max.ms is a producer setting" in wrong_role.stderr


@pytest.mark.parametrize("command", [["produce", "t", "x"], ["consume", "t"], ["topics", "list"], ["lag", "g"]])
def test_a_refused_bootstrap_fails_fast_and_names_the_address(command):
    with refusing_ports() as (port,):
        # The default --timeout is 30 s: a command that waited for it would outlive this bound.
        result = kwire(*command, "-b", f"127.0.0.1:{port}", timeout=20)
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert f"127.0.0.1:{port} refused the connection" in lines[0]


def test_an_unknown_topic_is_reported_at_once(broker):
    result = kwire("consume", "no-such-topic", "-b", broker.bootstrap, timeout=20)
    assert result.returncode == 1
    assert result.stderr.strip() == "kwire: error: topic 'no-such-topic' does not exist (UNKNOWN_TOPIC_OR_PARTITION)"
