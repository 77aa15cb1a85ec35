"""``kwire produce`` as users run it: real processes against kwire's broker, and what landed read
back with confluent-kafka (keys, headers, partitions) and from the broker's log files (codecs)."""

from __future__ import annotations

import json
import subprocess
import sys

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker
from kwire.client.partitioner import java_partition
from kwire.protocol.records import Compression, iter_batches

KWIRE = [sys.executable, "-m", "kwire.cli.main"]
PARTITIONS = 3


def kwire(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=60, input=stdin)


def ok(*args: str, stdin: str | None = None) -> str:
    result = kwire(*args, stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kwire: error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=PARTITIONS) as b:
        yield b


@pytest.fixture
def topic(broker, request):
    """A fresh topic of three partitions, named after the test."""
    name = request.node.name.replace("[", "-").replace("]", "")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(name, PARTITIONS)])[name].result(15)
    return name


def landed(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """Every record of the topic, read with confluent-kafka: (partition, offset, key, value, headers)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "log_level": 0,
                                         "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        records = []
        for _ in range(200):  # bounded: each poll waits at most 0.1 s
            if len(records) >= sum(ends.values()):
                break
            for m in consumer.consume(100, timeout=0.1):
                assert m.error() is None, m.error()
                records.append((m.partition(), m.offset(), m.key(), m.value(), m.headers() or []))
        assert len(records) == sum(ends.values())
        return sorted(records, key=lambda r: (r[0], r[1]))
    finally:
        consumer.close()


def stored_codecs(broker: EmbeddedBroker, topic: str) -> set[Compression]:
    """The compression of every batch in the topic's log files, as the broker stored them."""
    codecs = set()
    for log in broker.data_dir.glob(f"{topic}-*/*.log"):
        codecs.update(batch.compression for batch in iter_batches(log.read_bytes()))
    return codecs


def test_help():
    out = ok("produce", "--help")
    assert out.startswith("usage: kwire produce")
    for flag in ("--file", "--partition", "--key", "--key-separator", "--header", "--compression", "--acks",
                 "--verbose", "--json", "--bootstrap"):
        assert flag in out


def test_values_from_arguments(broker, topic):
    out = ok("produce", topic, "a", "b", "c", "-b", broker.bootstrap)
    assert out.splitlines()[-1] == f"3 of 3 records written to {topic}"
    records = landed(broker.bootstrap, topic)
    assert [(k, v) for _, _, k, v, _ in records] == [(None, b"a"), (None, b"b"), (None, b"c")]
    # Keyless records of one run stick to one partition, in order.
    assert len({p for p, *_ in records}) == 1
    assert [o for _, o, *_ in records] == [0, 1, 2]


def test_values_from_stdin_lines_and_a_file(broker, topic, tmp_path):
    ok("produce", topic, "-p", "0", "-b", broker.bootstrap, stdin="first\nsecond line\n\nlast without newline")
    path = tmp_path / "records.txt"
    path.write_text("from file 1\nfrom file 2\n", encoding="utf-8")
    ok("produce", topic, "-p", "0", "--file", str(path), "-b", broker.bootstrap)
    assert [v for *_, v, _ in landed(broker.bootstrap, topic)] == \
        [b"first", b"second line", b"", b"last without newline", b"from file 1", b"from file 2"]


def test_key_goes_where_murmur2_puts_it(broker, topic):
    ok("produce", topic, "--key", "user-7", "x", "y", "-b", broker.bootstrap)
    expected = java_partition(b"user-7", PARTITIONS)
    assert landed(broker.bootstrap, topic) == [(expected, 0, b"user-7", b"x", []), (expected, 1, b"user-7", b"y", [])]


def test_key_separator(broker, topic):
    lines = ["alpha:1", "beta:2", "gamma:x:y", "delta:", ":empty-key"]
    ok("produce", topic, "-K", ":", "-b", broker.bootstrap, stdin="\n".join(lines) + "\n")
    got = landed(broker.bootstrap, topic)
    assert sorted((k, v) for _, _, k, v, _ in got) == \
        sorted([(b"alpha", b"1"), (b"beta", b"2"), (b"gamma", b"x:y"), (b"delta", b""), (b"", b"empty-key")])
    for partition, _, key, _, _ in got:
        assert partition == java_partition(key, PARTITIONS), key


def test_partition_headers_and_verbose(broker, topic):
    out = ok("produce", topic, "-p", "2", "-H", "source=cli", "-H", "expr=a=b", "-v", "one", "two",
             "-b", broker.bootstrap)
    lines = out.splitlines()
    assert lines[:2] == [f"{topic} partition 2 offset 0", f"{topic} partition 2 offset 1"]
    assert lines[2].split() == ["partition", "records", "first", "offset", "last", "offset"]
    assert lines[4].split() == ["2", "2", "0", "1"]
    assert lines[-1] == f"2 of 2 records written to {topic}"
    headers = [("source", b"cli"), ("expr", b"a=b")]
    assert landed(broker.bootstrap, topic) == [(2, 0, None, b"one", headers), (2, 1, None, b"two", headers)]


def test_json_output(broker, topic):
    doc = json.loads(ok("produce", topic, "-p", "1", "--json", "-v", "a", "b", "c", "-b", broker.bootstrap))
    assert doc == {"topic": topic, "records": 3, "delivered": 3, "failed": 0,
                   "partitions": [{"partition": 1, "records": 3, "first_offset": 0, "last_offset": 2}],
                   "offsets": [{"partition": 1, "offset": o} for o in range(3)]}
    brief = json.loads(ok("produce", topic, "-p", "0", "--json", "d", "-b", broker.bootstrap))
    assert "offsets" not in brief and brief["partitions"] == [{"partition": 0, "records": 1, "first_offset": 0,
                                                               "last_offset": 0}]


def test_acks_zero_knows_no_offsets(broker, topic):
    doc = json.loads(ok("produce", topic, "--acks", "0", "-p", "1", "--json", "-v", "x", "y", "-b", broker.bootstrap))
    assert doc["delivered"] == 2 and doc["failed"] == 0
    assert doc["partitions"] == [{"partition": 1, "records": 2, "first_offset": -1, "last_offset": -1}]
    assert doc["offsets"] == [{"partition": 1, "offset": -1}] * 2
    assert [(p, v) for p, _, _, v, _ in landed(broker.bootstrap, topic)] == [(1, b"x"), (1, b"y")]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression(broker, topic, codec):
    values = [f"compressible value {i} " * 5 for i in range(20)]
    ok("produce", topic, "-z", codec, "-p", "0", "-H", "h=1", *values, "-b", broker.bootstrap)
    assert [v for *_, v, _ in landed(broker.bootstrap, topic)] == [v.encode() for v in values]
    assert stored_codecs(broker, topic) == {Compression[codec.upper()]}


def test_a_line_without_the_separator(broker, topic):
    result = kwire("produce", topic, "-K", "=", "-p", "0", "-b", broker.bootstrap, stdin="a=1\nb=2\nno separator\nc=3\n")
    error = one_line_error(result)
    assert "line 3 has no key separator '=': 'no separator'" in error
    assert "the 2 records before it were sent" in error
    # Those before it landed; nothing after it was sent.
    assert [(k, v) for _, _, k, v, _ in landed(broker.bootstrap, topic)] == [(b"a", b"1"), (b"b", b"2")]


def test_a_partition_out_of_range(broker, topic):
    error = one_line_error(kwire("produce", topic, "-p", "3", "x", "-b", broker.bootstrap, "--timeout", "5"))
    assert f"topic '{topic}'" in error and "partition 3" in error
    assert landed(broker.bootstrap, topic) == []


def test_an_unreachable_bootstrap_is_named():
    # Bounded by --timeout (max.block.ms would wait 60 s), so well inside the subprocess timeout.
    error = one_line_error(kwire("produce", "anywhere", "x", "-b", "127.0.0.1:1", "--timeout", "1"))
    assert "cannot reach the cluster at 127.0.0.1:1" in error


def test_bad_flags_are_argparse_errors():
    for args in (["--acks", "2"], ["--compression", "brotli"], ["--key", "k", "-K", ":"], ["-p", "one"]):
        result = kwire("produce", "t", *args, "x")
        assert result.returncode == 2 and "usage: kwire produce" in result.stderr, args
