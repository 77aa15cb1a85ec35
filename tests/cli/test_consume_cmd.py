"""``kwire consume`` as users run it: real processes against kwire's broker, the records written
by confluent-kafka (keys, headers, several partitions), the group's commits read back with
confluent-kafka's ``committed()``."""

from __future__ import annotations

import base64
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker

KWIRE = [sys.executable, "-m", "kwire.cli.main"]
BASE_TS = 1_700_000_000_000

# "events": 12 records over 3 partitions; record i is in partition i % 3 at offset i // 3.
EVENTS = [(i % 3, i // 3, f"k{i}", f"v{i}") for i in range(12)]
# "odd": one partition of awkward records: (key, value, headers).
ODD = [
    (None, b"plain", []),
    (b"\xff\xfe", b"\x00\x9f\x92\x96 bin", [("bin", b"\xc3"), ("none", None), ("txt", "é".encode())]),
    (b"k", None, []),
    (b"", "café".encode(), []),
]


def kwire(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run kwire; stdout as bytes (what consume writes is checked byte for byte), stderr as text."""
    result = subprocess.run([*KWIRE, *args], capture_output=True, timeout=timeout)
    result.stderr = result.stderr.decode()
    return result


def ok(*args: str) -> bytes:
    result = kwire(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def lines(*args: str) -> list[str]:
    return ok(*args).decode().splitlines()


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == b""
    stderr = result.stderr.splitlines()
    assert len(stderr) == 1 and stderr[0].startswith("kwire: error: "), result.stderr
    return stderr[0]


def in_partition(output: list[str], partition: int) -> list[str]:
    return [line for line in output if line.split(" ", 1)[0] == str(partition)]


def produce(bootstrap: str, topic: str, records) -> None:
    """records: (partition, key, value, headers, timestamp or None for now) tuples, written in order."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0})
    for partition, key, value, headers, timestamp in records:
        producer.produce(topic, value, key=key, partition=partition, headers=headers, timestamp=timestamp or 0)
    assert producer.flush(15) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets by partition (-1001 where it committed none)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return [tp.offset for tp in sorted(found, key=lambda tp: tp.partition)]
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=3, auto_create_topics=False) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        created = admin.create_topics([NewTopic("events", 3), NewTopic("odd", 1), NewTopic("big", 1),
                                       NewTopic("stamped", 1, config={"message.timestamp.type": "LogAppendTime"})])
        for future in created.values():
            future.result(15)
        produce(b.bootstrap, "events", [(p, k.encode(), v.encode(), [("n", str(i).encode())], BASE_TS + i)
                                        for i, (p, _, k, v) in enumerate(EVENTS)])
        produce(b.bootstrap, "odd", [(0, k, v, h, BASE_TS + i) for i, (k, v, h) in enumerate(ODD)])
        produce(b.bootstrap, "big", [(0, None, f"record number {i:06d}".encode(), None, None) for i in range(30_000)])
        produce(b.bootstrap, "stamped", [(0, b"k", b"v", None, BASE_TS)])
        yield b


def test_help():
    out = ok("consume", "--help").decode()
    assert out.startswith("usage: kwire consume")
    for flag in ("--group", "--from-beginning", "--offset", "--partition", "--count", "--exit-at-end", "--format",
                 "--json", "--bootstrap", "--timeout"):
        assert flag in out


def test_from_beginning_to_the_end_of_every_partition(broker):
    result = kwire("consume", "events", "--from-beginning", "-e", "-f", "%p %o %k %s\\n", "-b", broker.bootstrap)
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode().splitlines()
    assert len(out) == len(EVENTS)
    for partition in range(3):
        assert in_partition(out, partition) == [f"{p} {o} {k} {v}" for p, o, k, v in EVENTS if p == partition]
    assert result.stderr == "12 records read from events\n"


def test_starts_at_the_end_by_default(broker):
    result = kwire("consume", "events", "-e", "-b", broker.bootstrap)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", "0 records read from events\n")


def test_default_output_is_the_values_bytes(broker):
    # kcat's way: the bytes as stored (the binary value passes through whole), a null as nothing.
    out = ok("consume", "odd", "--from-beginning", "--exit-at-end", "-b", broker.bootstrap)
    assert out == b"".join((v or b"") + b"\n" for _, v, _ in ODD)
    assert ODD[1][1] in out
    nulls = ok("consume", "odd", "-o", "beginning", "-e", "-Z", "-b", broker.bootstrap)
    assert nulls.split(b"\n")[2] == b"NULL"


def test_offset_positive_negative_and_clamped(broker):
    b = broker.bootstrap
    fmt = ["-f", "%p %o %k %s\\n", "-b", b]
    assert lines("consume", "events", "--offset", "2", "-p", "1", "-e", *fmt) == ["1 2 k7 v7", "1 3 k10 v10"]
    last = lines("consume", "events", "-o", "-1", "-p", "0", "2", "-e", *fmt)
    assert sorted(last) == ["0 3 k9 v9", "2 3 k11 v11"]
    # Comma lists too; -2 from the end of each partition.
    assert sorted(lines("consume", "events", "-o", "-2", "-p", "0,1", "-e", *fmt)) == \
        ["0 2 k6 v6", "0 3 k9 v9", "1 2 k7 v7", "1 3 k10 v10"]
    # More than there is: from the start of the log.
    assert lines("consume", "events", "-o", "-100", "-p", "2", "-e", *fmt) == \
        [f"2 {o} k{2 + 3 * o} v{2 + 3 * o}" for o in range(4)]
    # Past the end: auto.offset.reset (latest), so nothing before the end.
    assert lines("consume", "events", "-o", "99", "-p", "0", "-e", *fmt) == []


def test_count_stops_after_n_records(broker):
    result = kwire("consume", "events", "--from-beginning", "-p", "0", "--count", "3", "-b", broker.bootstrap)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"v0\nv3\nv6\n"
    assert result.stderr == "3 records read from events\n"
    # --count and -e together: whichever comes first.
    assert lines("consume", "events", "--from-beginning", "-p", "1", "-c", "10", "-e", "-b", broker.bootstrap) == \
        ["v1", "v4", "v7", "v10"]


def test_format_directives_and_escapes(broker):
    fmt = "%t|%p|%o|%k|%s|%T|%h|%K|%S\\t100%%\\\\\\r\\n"
    out = ok("consume", "odd", "--from-beginning", "-e", "-f", fmt, "-b", broker.bootstrap)

    def raw(data):
        return b"" if data is None else data

    expected = b"".join(
        b"odd|0|%d|%s|%s|%d|%s|%d|%d\t100%%\\\r\n" % (
            o, raw(k), raw(v), BASE_TS + o, b",".join(hk.encode() + b"=" + raw(hv) for hk, hv in h),
            -1 if k is None else len(k), -1 if v is None else len(v))
        for o, (k, v, h) in enumerate(ODD))
    assert out == expected
    # A format without a newline runs the records together, as kcat's does.
    assert ok("consume", "events", "--from-beginning", "-p", "2", "-e", "-f", "[%o]", "-b", broker.bootstrap) == \
        b"[0][1][2][3]"


def test_json_lines(broker):
    out = ok("consume", "odd", "--from-beginning", "-e", "--json", "-b", broker.bootstrap)
    docs = [json.loads(line) for line in out.decode().splitlines()]
    assert docs[0] == {"topic": "odd", "partition": 0, "offset": 0, "timestamp": BASE_TS, "timestamp_type": "CreateTime",
                       "key": None, "value": "plain", "headers": []}
    binary = docs[1]
    assert "key" not in binary and "value" not in binary
    assert base64.b64decode(binary["key_base64"]) == ODD[1][0]
    assert base64.b64decode(binary["value_base64"]) == ODD[1][1]
    assert binary["headers"] == [["bin", {"base64": base64.b64encode(b"\xc3").decode()}], ["none", None],
                                 ["txt", "é"]]
    assert list(binary) == ["topic", "partition", "offset", "timestamp", "timestamp_type", "key_base64",
                            "value_base64", "headers"]
    assert (docs[2]["key"], docs[2]["value"]) == ("k", None)
    assert (docs[3]["key"], docs[3]["value"]) == ("", "café")
    assert [d["offset"] for d in docs] == [0, 1, 2, 3]

    stamped = json.loads(ok("consume", "stamped", "--from-beginning", "-e", "--json", "-b", broker.bootstrap))
    assert stamped["timestamp_type"] == "LogAppendTime" and stamped["timestamp"] != BASE_TS


def test_group_commits_and_a_second_run_resumes(broker):
    b, group = broker.bootstrap, f"resume-{uuid.uuid4().hex[:8]}"
    first = lines("consume", "events", "-g", group, "--from-beginning", "-c", "5", "-f", "%p %o\\n", "-b", b)
    assert len(first) == 5
    # Exactly what was printed is committed: not the rest of a fetched batch.
    read = [len(in_partition(first, p)) for p in range(3)]
    assert [max(c, 0) for c in committed(b, group, "events", 3)] == read
    second = lines("consume", "events", "--group", group, "--from-beginning", "-e", "-f", "%p %o\\n", "-b", b)
    assert sorted(first + second) == sorted(f"{p} {o}" for p, o, _, _ in EVENTS)
    assert committed(b, group, "events", 3) == [4, 4, 4]
    # Nothing left for the group.
    assert lines("consume", "events", "-g", group, "-e", "-b", b) == []
    lag = json.loads(ok("lag", group, "-b", b, "--json"))
    assert lag["total_lag"] == 0


def test_flag_errors(broker):
    b = broker.bootstrap
    with_offset = kwire("consume", "events", "-g", "g", "--offset", "3", "-b", b)
    assert with_offset.returncode == 2 and "--offset cannot be used with a group" in with_offset.stderr
    assert "where the group committed" in with_offset.stderr
    # A group.id from -X is a group too.
    assert kwire("consume", "events", "-X", "group.id=g", "-o", "1", "-b", b).returncode == 2
    with_partition = kwire("consume", "events", "-g", "g", "-p", "1", "-b", b)
    assert with_partition.returncode == 2 and "--partition cannot be used with a group" in with_partition.stderr
    both = kwire("consume", "events", "--from-beginning", "--offset", "1", "-b", b)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    assert "unknown directive %z" in kwire("consume", "events", "-f", "%z", "-b", b).stderr
    assert "unknown escape \\q" in kwire("consume", "events", "-f", "\\q", "-b", b).stderr
    assert "lone '%'" in kwire("consume", "events", "-f", "50%", "-b", b).stderr
    assert kwire("consume", "events", "--count", "0", "-b", b).returncode == 2
    assert kwire("consume", "events", "--json", "-f", "%s", "-b", b).returncode == 2


def test_unknown_topic_partition_and_cluster(broker):
    b = broker.bootstrap
    missing = one_line_error(kwire("consume", "ghost", "--timeout", "1", "-b", b))
    assert "topic 'ghost' does not exist" in missing and "UNKNOWN_TOPIC_OR_PARTITION" in missing
    assert "topic 'events' has no partition 7" in one_line_error(kwire("consume", "events", "-p", "1", "7", "-b", b))
    refused = one_line_error(kwire("consume", "events", "-b", "127.0.0.1:1", "--timeout", "1"))
    assert "cannot reach the cluster at 127.0.0.1:1" in refused
    # The consumer never created the topic it asked for.
    assert "ghost" not in AdminClient({"bootstrap.servers": b, "log_level": 0}).list_topics(timeout=10).topics


class Running:
    """A ``kwire consume`` process whose output lines are read as they come."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([*KWIRE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.decode().rstrip("\n"))

    def take(self, n: int, within: float = 30) -> list[str]:
        deadline = time.monotonic() + within
        got = []
        while len(got) < n:
            try:
                got.append(self.lines.get(timeout=max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(f"only {len(got)} of {n} lines came: {self.proc.stderr.read().decode()}") from None
        return got

    def stop(self, sig: int) -> tuple[int, str]:
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=30)
        finally:
            self.proc.kill()
        self.reader.join(10)
        return code, self.proc.stderr.read().decode()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_cleanly_and_commits_the_group(broker, sig):
    b, group = broker.bootstrap, f"signal-{uuid.uuid4().hex[:8]}"
    # No auto commit for ten minutes: whatever is committed, the exit committed.
    running = Running("consume", "events", "-g", group, "--from-beginning", "-f", "%p %o\\n", "-b", b,
                      "-X", "auto.commit.interval.ms=600000")
    seen = running.take(len(EVENTS))
    code, stderr = running.stop(sig)
    assert code == 0, stderr
    assert stderr == "12 records read from events\n"  # no traceback, no warning
    assert sorted(seen) == sorted(f"{p} {o}" for p, o, _, _ in EVENTS)
    assert committed(b, group, "events", 3) == [4, 4, 4]
    assert running.lines.empty()


def test_a_signal_stops_a_reader_without_group(broker):
    running = Running("consume", "events", "-p", "2", "--from-beginning", "-b", broker.bootstrap)
    assert running.take(4) == ["v2", "v5", "v8", "v11"]
    code, stderr = running.stop(signal.SIGINT)
    assert (code, stderr) == (0, "4 records read from events\n")


def test_a_pipe_closed_early_ends_quietly_and_commits_only_what_was_written(broker):
    b, group = broker.bootstrap, f"pipe-{uuid.uuid4().hex[:8]}"
    command = " ".join([*KWIRE, "consume", "big", "-g", group, "--from-beginning", "-e", "-b", b])
    # 30,000 lines are more than a pipe holds, so kwire is still writing when head exits.
    result = subprocess.run(["bash", "-o", "pipefail", "-c", f"{command} | head -n 2"], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PYTHONWARNINGS": "default"})
    assert (result.returncode, result.stdout, result.stderr) == (0, "record number 000000\nrecord number 000001\n", "")
    [offset] = committed(b, group, "big", 1)
    assert 2 <= offset < 30_000
