"""The worker-process cleaner as users turn it on: ``log_cleaner_worker_process = true`` in a
``kwire broker`` TOML file or ``EmbeddedBroker(log_cleaner_worker_process=True)``, shown by
DescribeConfigs as ``kwire.log.cleaner.worker.process`` and changed there like the log.cleaner.*
settings.  Each test starts its own broker and a real client; the worker is a real process,
looked for among the broker's children, and none is left once the broker has gone (stopped, or
killed with SIGKILL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kwire.broker import EmbeddedBroker
from kwire.broker.storage.cleaner_checkpoint import read_cleaner_checkpoint

NAME = "kwire.log.cleaner.worker.process"
KEYS, ROUNDS = 10, 30


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent's wait() is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (any of its threads)."""
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def _wait(predicate, seconds: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _describe(bootstrap: str) -> confluent_kafka.admin.ConfigEntry:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "1")
    return admin.describe_configs([resource])[resource].result(30)[NAME]


def _produce_updates(bootstrap: str, topic: str) -> dict[bytes, bytes]:
    """KEYS keys rewritten ROUNDS times to a new compacted topic; each key's last value."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact",
                                                       "min.cleanable.dirty.ratio": "0.01"})])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    last = {}
    for r in range(ROUNDS):
        for k in range(KEYS):
            key, value = b"key-%d" % k, (b"value-%d-%d" % (r, k)).ljust(60, b".")
            producer.produce(topic, key=key, value=value)
            last[key] = value
        producer.flush(30)
    return last


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """Every record of partition 0, from its start to its end offset."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + topic,
                                         "enable.auto.commit": False})
    _, end = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=30)
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 30
    while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    assert got and got[-1][0] == end - 1
    return got


def _check_compacted(got, last) -> None:
    assert {key: value for _, key, value in got} == last
    assert len(got) == KEYS  # one record per key: the older ones were cleaned away
    assert all(offset >= (ROUNDS - 1) * KEYS for offset, _, _ in got)  # the last round's, at their offsets


def test_the_embedded_broker_cleans_in_a_worker_and_stops_it(tmp_path):
    topic = "compacted-worker"
    with EmbeddedBroker(tmp_path / "data", log_cleaner_worker_process=True, log_cleaner_backoff_ms=20) as broker:
        entry = _describe(broker.bootstrap)
        # On by default on Linux, so the value set is the default's (kwire reports a broker value
        # equal to its default as DEFAULT_CONFIG)
        assert (entry.value, entry.source, entry.is_read_only) == ("true", ConfigSource.DEFAULT_CONFIG.value, False)
        assert broker.state.logs.cleaner.config.worker_process
        last = _produce_updates(broker.bootstrap, topic)
        log = broker.call(lambda: broker.state.logs.get(topic, 0))
        broker.call(lambda: broker.state.logs.set_topic_config(topic, log.config.with_(segment_bytes=2048)))
        broker.call(lambda: log.roll())  # all of it cleanable
        _wait(lambda: read_cleaner_checkpoint(log.dir) == KEYS * ROUNDS, what="the clean")
        workers = broker.state.logs.cleaner.worker_pids()
        assert len(workers) == 1 and workers[0] in _children(os.getpid()) and _alive(workers[0])
        _check_compacted(_read_all(broker.bootstrap, topic), last)

        # Turned off at runtime, as the log.cleaner.* settings are: the cleaner restarts in its
        # thread and its worker goes.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        change = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(NAME, "false", incremental_operation=AlterConfigOpType.SET)])
        assert admin.incremental_alter_configs([change])[change].result(30) is None
        _wait(lambda: not _alive(workers[0]), what="the worker to stop after the change")
        _wait(lambda: broker.state.logs.cleaner is not None and not broker.state.logs.cleaner.config.worker_process,
              what="the restarted cleaner")
        entry = _describe(broker.bootstrap)
        assert (entry.value, entry.source) == ("false", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

        change = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(NAME, "maybe", incremental_operation=AlterConfigOpType.SET)])
        try:
            admin.incremental_alter_configs([change])[change].result(30)
            raise AssertionError("a bad value was accepted")
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            # Kafka's answer to a bad broker config value (as for log.segment.bytes=ten, test_configs.py)
            assert error.code() == confluent_kafka.KafkaError.INVALID_REQUEST and NAME in error.str()

        # Back on: the next clean starts a worker again; stopping the broker stops it.
        change = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(NAME, "true", incremental_operation=AlterConfigOpType.SET)])
        assert admin.incremental_alter_configs([change])[change].result(30) is None
        _produce_more = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for k in range(KEYS):
            _produce_more.produce(topic, key=b"key-%d" % k, value=b"again-%d" % k)
        _produce_more.flush(30)
        broker.call(lambda: log.roll())
        _wait(lambda: read_cleaner_checkpoint(log.dir) == KEYS * (ROUNDS + 1), what="the clean in a new worker")
        workers = broker.state.logs.cleaner.worker_pids()
        assert len(workers) == 1 and _alive(workers[0])
    assert not _alive(workers[0])


def _start_cli(tmp_path: Path, settings: str) -> tuple[subprocess.Popen, str, Path]:
    toml = tmp_path / "broker.toml"
    toml.write_text(settings)
    stderr = tmp_path / "broker.stderr"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "kwire.cli.main", "broker", "--config", str(toml), "--port", "0",
                                 "--data-dir", str(tmp_path / "data"), "--json", "--log-level", "info"],
                                stdout=subprocess.PIPE, stderr=err, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(f"broker did not start: {stderr.read_text()}")
    return proc, json.loads(line)["bootstrap"], stderr


def test_kwire_broker_from_the_cli_cleans_in_a_worker_and_leaves_no_orphan(tmp_path):
    """Stopped with SIGTERM, then (same data) killed with SIGKILL: neither leaves its worker."""
    topic = "compacted-cli"
    # Not set: the worker process is the default where descriptors pass over Unix sockets
    settings = "log_cleaner_backoff_ms = 20\n[log]\nsegment_bytes = 2048\n"
    proc, bootstrap, stderr = _start_cli(tmp_path, settings)
    try:
        entry = _describe(bootstrap)
        assert (entry.value, entry.source) == ("true", ConfigSource.DEFAULT_CONFIG.value)
        last = _produce_updates(bootstrap, topic)
        _wait(lambda: [p for p in _children(proc.pid) if _alive(p)], what="the worker process")
        _wait(lambda: b"cleaned " + topic.encode() + b"-0" in stderr.read_bytes(), what="a clean")
        worker = [p for p in _children(proc.pid) if _alive(p)]
        assert len(worker) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
    _wait(lambda: not _alive(worker[0]), 10, "the worker to end with the broker")
    assert "Traceback" not in stderr.read_text()

    proc, bootstrap, stderr = _start_cli(tmp_path, settings)
    try:
        # What the first broker's cleaner left (maybe more, now): a compacted topic read by a client.
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for _ in range(5):  # dirty again, past a segment, so that the new broker's cleaner starts its worker
            for k in range(KEYS):
                producer.produce(topic, key=b"key-%d" % k, value=last[b"key-%d" % k])
            producer.flush(30)
        _wait(lambda: [p for p in _children(proc.pid) if _alive(p)], what="the worker process")
        worker = [p for p in _children(proc.pid) if _alive(p)]
        proc.kill()  # SIGKILL: the broker cannot stop it; the kernel does (PR_SET_PDEATHSIG)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
    _wait(lambda: not _alive(worker[0]), 10, "the worker to die with the killed broker")

    # Recovery after the kill: nothing lost, no clean's files left.  This broker does not clean: its
    # cleaner would find the partition dirty and could be mid-clean (its own .cleaned files) when
    # the directory is looked at (a two-worker CI run saw that).
    proc, bootstrap, _ = _start_cli(tmp_path, "log_cleaner_enable = false\n" + settings)
    try:
        got = _read_all(bootstrap, topic)
        latest: dict[bytes, tuple[int, bytes]] = {}
        for offset, key, value in sorted(got):
            latest[key] = (offset, value)
        assert {k: v for k, (_, v) in latest.items()} == last
        assert len({offset for offset, _, _ in got}) == len(got)
        part = tmp_path / "data" / f"{topic}-0"
        assert not list(part.glob("*.cleaned")) + list(part.glob("*.swap"))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        proc.stdout.close()
