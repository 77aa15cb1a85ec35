"""``kwire produce`` on its blocking driver (kwire.client.producer_blocking): no asyncio module is
imported for a plain produce, acks=0 records reach a broker that answers them (librdkafka's
mock), a topic the broker will not create fails as before, and settings the blocking driver does
not cover go to the asyncio producer."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker

from .test_produce_cmd import kwire, ok, one_line_error

# What a command that imported the asyncio client would have loaded.
ASYNC_MODULES = ("asyncio", "concurrent", "kwire.client.producer", "kwire.client.cluster", "kwire.client.connection",
                 "kwire.client.loop_thread")


def loaded_by(*argv: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> set[str]:
    """The modules a ``kwire`` command line loaded (it runs in a fresh interpreter and must succeed)."""
    code = ("import sys\n"
            "from kwire.cli.main import main\n"
            f"code = main({list(argv)!r})\n"
            "print('\\n'.join(sys.modules), file=sys.stderr)\n"
            "sys.exit(code)\n")
    result = subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(result.stderr.decode().split())


def asyncio_side(modules: set[str]) -> set[str]:
    return {m for m in modules if m in ASYNC_MODULES or m.startswith(tuple(a + "." for a in ASYNC_MODULES))}


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=2) as b:
        yield b


def test_a_plain_produce_imports_no_asyncio(broker):
    for extra in ([], ["--acks", "0"], ["--acks", "1", "-X", "enable.idempotence=false"], ["-z", "gzip", "-k", "k"]):
        modules = loaded_by("produce", "blocking-imports", "a", "b", "-b", broker.bootstrap, *extra)
        assert "kwire.client.producer_blocking" in modules, extra
        assert asyncio_side(modules) == set(), extra
    # From stdin, with keys, as a file of lines is produced.
    modules = loaded_by("produce", "blocking-imports", "-K", ":", "-b", broker.bootstrap, stdin=b"k1:v1\nk2:v2\n")
    assert asyncio_side(modules) == set()


# Modules a plain produce into a pipe has no use for: pathlib with urllib.parse and ipaddress (a
# .properties path or a bracketed IPv6 address imports them when there is one), shutil with bz2
# and lzma (argparse's help formatter and a table measure the terminal only when they write help,
# or to a terminal), the transactions of a producer that has none.  Each was a few ms of every
# command line's start-up.
START_UP_UNUSED = {"pathlib", "urllib.parse", "ipaddress", "shutil", "bz2", "lzma", "kwire.client.transactions"}


def test_a_plain_produce_imports_no_path_or_terminal_modules(broker, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"one\ntwo\n")
    for argv in (["a", "b"], ["-f", str(lines)]):
        modules = loaded_by("produce", "blocking-imports", "-b", broker.bootstrap, *argv)
        assert "kwire.client.producer_blocking" in modules, argv
        assert START_UP_UNUSED & modules == set(), argv


def test_a_produce_whose_codecs_are_kept_loads_no_codec_writer(broker):
    # A user's kwire writes its .pyc files and its compiled codecs (kwire.protocol.codec) on the
    # first command; from the second on, each codec's code is read back by the message's name
    # and version, and the writer (kwire.protocol.compiler, ~3-5 ms with the source it writes)
    # is not imported.  (Without bytecode writing, PYTHONDONTWRITEBYTECODE, nothing is kept.)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for argv in (["a", "b"], ["--acks", "0", "c"]):
        loaded_by("produce", "kept-codecs", "-b", broker.bootstrap, *argv, env=env)
        modules = loaded_by("produce", "kept-codecs", "-b", broker.bootstrap, *argv, env=env)
        assert "kwire.protocol.codec" in modules, argv
        assert "kwire.protocol.compiler" not in modules, argv


def test_the_collector_is_back_on_once_the_producer_is_made(broker):
    # kwire produce's start-up (kwire.cli.start_up) lasts until its producer's imports are done:
    # records read from a pipe for hours are produced with the garbage collector on.
    code = ("import gc, io, contextlib, sys\n"
            "sys.argv = ['/usr/bin/kwire']\n"
            "from kwire.cli.main import main\n"
            "from kwire.client import producer_blocking\n"
            "made = producer_blocking.BlockingProducer.__init__\n"
            "def check(self, *a, **k):\n"
            "    made(self, *a, **k)\n"
            "    print('while making:', gc.isenabled(), file=sys.stderr)\n"
            "producer_blocking.BlockingProducer.__init__ = check\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    code = main(['produce', 'gc-back-on', 'x', '-b', {broker.bootstrap!r}])\n"
            "print('after:', gc.isenabled(), file=sys.stderr)\n"
            "sys.exit(code)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.split("\n")[:2] == ["while making: False", "after: True"]


def test_transactions_take_the_asyncio_producer(broker):
    # A transactional producer must init_transactions first: the asyncio Producer says so, as before.
    modules_error = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom kwire.cli.main import main\n"
         f"code = main(['produce', 'blocking-txn', 'x', '-b', {broker.bootstrap!r}, '-X', 'transactional.id=t1', "
         "'--timeout', '5'])\nprint('asyncio' in sys.modules)\n"],
        capture_output=True, text=True, timeout=60)
    assert modules_error.stdout.strip() == "True"


def test_acks_zero_against_a_broker_that_answers_it():
    # librdkafka's mock answers Produce with acks=0 (Kafka never does): the answers are read and
    # dropped, and the records sent before the command closes its connection all arrive.
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in owner.list_topics(timeout=10).brokers.values())
    lines = "".join(f"value-{i}\n" for i in range(5000))
    out = ok("produce", "acks0", "--acks", "0", "-p", "0", "-b", bootstrap, stdin=lines)
    assert out.splitlines()[-1] == "5000 of 5000 records written to acks0"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "acks0", "log_level": 0})
    try:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition("acks0", 0), timeout=10)
    finally:
        consumer.close()
    assert high - low == 5000


def test_a_topic_the_broker_will_not_create():
    with EmbeddedBroker(auto_create_topics=False) as broker:
        line = one_line_error(kwire("produce", "ghost", "x", "-b", broker.bootstrap, "--timeout", "1"))
    assert "topic 'ghost' not present in metadata after max.block.ms (1000 ms)" in line
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line


def test_records_from_a_pipe_go_out_while_it_waits_for_more(broker):
    # As the asyncio producer's background sender did: a line typed (or piped by tail -f) is
    # delivered after linger.ms, not when the next line or the end of input comes.
    process = subprocess.Popen([sys.executable, "-m", "kwire.cli.main", "produce", "blocking-pipe", "-p", "0",
                                "-b", broker.bootstrap], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        assert process.stdin is not None
        process.stdin.write(b"first\n")
        process.stdin.flush()
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "pipe",
                                             "log_level": 0})
        try:
            high = 0
            for _ in range(100):  # bounded: 100 x 0.1 s, the input still open
                try:
                    high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition("blocking-pipe", 0),
                                                          timeout=5)[1]
                except confluent_kafka.KafkaException:
                    high = 0  # the topic is not there yet
                if high:
                    break
                time.sleep(0.1)
        finally:
            consumer.close()
        assert high == 1 and process.poll() is None
        out, err = process.communicate(b"second\n", timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.decode().splitlines()[-1] == "2 of 2 records written to blocking-pipe"
