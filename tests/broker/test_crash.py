"""kill -9 of the broker under an idempotent acks=all produce load with ``--fsync always``:
after each restart every acknowledged record is present exactly once, and the log is clean."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import confluent_kafka
import pytest

from kwire.broker.storage import LogManager
from kwire.protocol.records import iter_batches

KWIRE = [sys.executable, "-m", "kwire.cli.main"]
KILLS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(data, port: int) -> subprocess.Popen:
    # No initial rebalance delay (kwire broker's default is Kafka's 3 s): these tests kill the
    # broker every second or so, and a group whose first join waits 3 s would never finish one.
    proc = subprocess.Popen([*KWIRE, "broker", "--port", str(port), "--data-dir", str(data), "--fsync", "always",
                             "--default-partitions", "2", "--json", "--log-level", "warning",
                             "--group-initial-rebalance-delay-ms", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    assert json.loads(line)["port"] == port
    return proc


@pytest.mark.slow
def test_kill_9_under_load_loses_and_duplicates_nothing_acknowledged(tmp_path):
    data, port = tmp_path / "data", _free_port()
    acked: dict[str, tuple[int, int]] = {}
    failed: list = []

    def delivered(err, msg):
        if err is None:
            acked[msg.value().decode()] = (msg.partition(), msg.offset())
        else:
            failed.append(err)

    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "enable.idempotence": True, "linger.ms": 2,
        "message.timeout.ms": 120000, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50})
    proc = _start(data, port)
    sent = 0
    try:
        for round_ in range(KILLS + 1):
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                for _ in range(200):
                    producer.produce("crash", key=b"%d" % (sent % 7), value=b"m-%d" % sent, on_delivery=delivered)
                    sent += 1
                producer.poll(0.01)
            if round_ < KILLS:
                acked_before = len(acked)
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                assert acked_before > 0
                time.sleep(0.3)
                proc = _start(data, port)
        assert producer.flush(120) == 0
        assert failed == []
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert len(acked) == sent  # everything was eventually acknowledged (retries after each restart)

    # Read the data dir directly: every batch valid, every acknowledged record once, where it was acked.
    seen: dict[str, tuple[int, int]] = {}
    with LogManager(data) as logs:
        assert logs.load_findings == {}  # the last stop was clean: nothing to repair
        for partition in (0, 1):
            log = logs.get("crash", partition)
            raw = b"".join(s.read() for s in log.read(log.log_start_offset, 1 << 31))
            for batch in iter_batches(raw):
                batch.validate()
                for record in batch:
                    value = record.value.decode()
                    assert value not in seen, f"{value} stored twice"
                    seen[value] = (partition, record.offset)
    assert seen == acked
