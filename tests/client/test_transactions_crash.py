"""Exactly once across a kill -9: a consume-transform-produce child process (kwire's Consumer and
transactional Producer, offsets sent with each transaction) is killed with SIGKILL in the middle
of a transaction whose records are already in the log; a new process with the same
transactional.id fences it (its open transaction is aborted) and carries on from the group's
committed offsets.  read_committed readers (kwire's and confluent-kafka's) then see every input
record exactly once, and the group's committed offsets are the input's end offsets.

The child is this module run as a script: ``python -m tests.client.test_transactions_crash``."""

from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kwire.broker import EmbeddedBroker
from kwire.client import Consumer, Producer, TopicPartition

PARTITIONS = 3
INPUT, OUTPUT, GROUP, TXN_ID = "ctp-in", "ctp-out", "ctp-group", "ctp-worker"
RECORDS = 300
ROOT = Path(__file__).resolve().parents[2]


# -- the child: consume, transform, produce ------------------------------------------------------
def work(bootstrap: str, victim: bool) -> None:
    """Copy INPUT to OUTPUT in transactions of a few records, committing the consumed offsets with
    each, until every input record is committed.  A ``victim`` flushes each transaction's records
    and says so ("sent N") before committing, pausing, so that it can be killed right there."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed", "max.poll.records": 7})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 2})
    producer.init_transactions(10)  # fences the previous worker and aborts its transaction
    tps = [TopicPartition(INPUT, p) for p in range(PARTITIONS)]
    consumer.assign(tps)  # positions start at the group's committed offsets
    ends = consumer.end_offsets(tps)
    transactions = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = consumer.poll(0.2)
        if not records:
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
            continue
        producer.begin_transaction()
        offsets = {}
        for r in records:
            producer.produce(OUTPUT, r.value, partition=r.partition)
            offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
        if victim:
            assert producer.flush(10) == 0
            transactions += 1
            print(f"sent {transactions}", flush=True)
            time.sleep(0.1)
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 10)
        producer.commit_transaction(10)
    producer.close()
    consumer.close()
    print("done", flush=True)


# -- the test ------------------------------------------------------------------------------------
def spawn(bootstrap: str, role: str) -> tuple[subprocess.Popen, queue.Queue]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.client.test_transactions_crash", bootstrap, role],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in proc.stdout], daemon=True).start()
    return proc, lines


def wait_for_line(lines: queue.Queue, wanted: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"the worker never printed {wanted!r}"
        try:
            if lines.get(timeout=left) == wanted:
                return
        except queue.Empty:
            pass


def read_output(bootstrap: str, isolation: str = "read_committed") -> list[bytes]:
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                   "isolation.level": isolation}) as c:
        tps = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
        c.assign(tps)
        ends = c.end_offsets(tps)
        got = []
        deadline = time.monotonic() + 10
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"reader stuck at {len(got)} records"
            got += [r.value for r in c.poll(0.2)]
    return got


def confluent_read_committed(bootstrap: str) -> list[bytes]:
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-reader", "log_level": 0,
                                  "isolation.level": "read_committed", "enable.partition.eof": True,
                                  "enable.auto.commit": False})
    c.assign([confluent_kafka.TopicPartition(OUTPUT, p, confluent_kafka.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, at_end = [], set()
    deadline = time.monotonic() + 10
    try:
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"confluent reader stuck at {len(got)} records"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                at_end.add(m.partition())
                continue
            got.append(m.value())
    finally:
        c.close()
    return got


def test_consume_transform_produce_is_exactly_once_across_kill_9(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=PARTITIONS) as broker:
        bootstrap = broker.bootstrap
        inputs = [b"in-%d" % i for i in range(RECORDS)]
        seed = Producer({"bootstrap.servers": bootstrap})
        for i, value in enumerate(inputs):
            seed.produce(INPUT, value, partition=i % PARTITIONS)
        seed.close()

        victim, lines = spawn(bootstrap, "victim")
        try:
            wait_for_line(lines, "sent 4", timeout=30)  # three committed, the fourth's records in the log
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(10) == -signal.SIGKILL
        finally:
            if victim.poll() is None:
                victim.kill()
                victim.wait(10)
        survivor, lines = spawn(bootstrap, "survivor")
        try:
            assert survivor.wait(60) == 0
        finally:
            if survivor.poll() is None:
                survivor.kill()
                survivor.wait(10)

        expected = collections.Counter(inputs)
        assert collections.Counter(read_output(bootstrap)) == expected
        assert collections.Counter(confluent_read_committed(bootstrap)) == expected
        # The victim's last transaction did reach the log (and was aborted): duplicates that only
        # read_uncommitted readers see.
        assert len(read_output(bootstrap, "read_uncommitted")) > RECORDS
        with Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}) as c:
            tps = [TopicPartition(INPUT, p) for p in range(PARTITIONS)]
            committed = c.committed(tps)
            assert {tp: committed[tp].offset for tp in tps} == c.end_offsets(tps)


if __name__ == "__main__":
    work(sys.argv[1], sys.argv[2] == "victim")
