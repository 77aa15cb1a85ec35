"""A data dir that fails under the broker (here: a full disk, a small tmpfs filled up) reaches
clients as KAFKA_STORAGE_ERROR naming what failed, the path and the OS error, and the broker log
says the same; nothing already stored is lost, and the broker serves again once there is room.

The tmpfs needs root (CI and the developers' machines run as root): without it the test fails
with a message saying so rather than skipping."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker


@contextlib.contextmanager
def small_disk(path: Path, size: str = "8m"):
    path.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.fail(f"this test mounts a tmpfs and needs root: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            for _ in range(10_000):  # 640 MiB at most: far past any test tmpfs
                f.write(b"\0" * 65536)
                f.flush()
    return filler


def test_a_full_disk_is_kafka_storage_error_and_nothing_stored_is_lost(tmp_path, caplog):
    with small_disk(tmp_path / "disk") as disk, EmbeddedBroker(disk / "data") as broker:
        conf = {"bootstrap.servers": broker.bootstrap, "log_level": 0}
        producer = confluent_kafka.Producer({**conf, "message.timeout.ms": 5000, "retries": 0})
        producer.produce("kept", b"before", partition=0)
        assert producer.flush(30) == 0
        filler = fill(disk)

        with caplog.at_level(logging.INFO):
            failures: list = []
            producer.produce("kept", b"x" * 200_000, partition=0, on_delivery=lambda e, m: failures.append(e))
            producer.flush(30)
            admin = AdminClient(conf)
            with pytest.raises(confluent_kafka.KafkaException) as created:
                admin.create_topics([NewTopic("new-topic", 1)])["new-topic"].result(30)
        assert [f.code() for f in failures] == [confluent_kafka.KafkaError.KAFKA_STORAGE_ERROR]
        error = created.value.args[0]
        assert error.code() == confluent_kafka.KafkaError.KAFKA_STORAGE_ERROR
        assert "creating topic 'new-topic' failed" in error.str() and "No space left on device" in error.str()
        assert str(disk / "data") in error.str()
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "kept-0" in logged and "append failed" in logged and "No space left on device" in logged
        # The refused topic was not half made: not listed, no directory.
        assert "new-topic" not in admin.list_topics(timeout=10).topics
        assert not any(p.name.startswith("new-topic") for p in (disk / "data").iterdir())

        os.remove(filler)
        delivered: list = []
        producer.produce("kept", b"after", partition=0, on_delivery=lambda e, m: delivered.append((e, m.offset())))
        assert producer.flush(30) == 0
        assert delivered == [(None, 1)]  # the failed append left nothing behind
        admin.create_topics([NewTopic("new-topic", 1)])["new-topic"].result(30)
        consumer = confluent_kafka.Consumer({**conf, "group.id": "check", "auto.offset.reset": "earliest"})
        try:
            consumer.assign([confluent_kafka.TopicPartition("kept", 0, 0)])
            values = []
            for _ in range(60):
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    values.append(m.value())
                if len(values) == 2:
                    break
        finally:
            consumer.close()
        assert values == [b"before", b"after"]
