"""``kwire broker`` as users run it: a real process, kcat as the client, signals to stop it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import confluent_kafka.admin
import pytest

from kwire.broker.storage import CLEAN_SHUTDOWN_FILE

KWIRE = [sys.executable, "-m", "kwire.cli.main"]


def start(*args: str, cwd=None) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([*KWIRE, "broker", "--port", "0", "--json", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd)
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(f"broker did not start: {proc.stderr.read()}")
    return proc, json.loads(line)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err


def kcat(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], input=input, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_broker_serves_kcat_and_stops_cleanly(tmp_path, sig):
    data = tmp_path / "data"
    proc, info = start("--data-dir", str(data), "--default-partitions", "3")
    try:
        listing = kcat("-b", info["bootstrap"], "-L", "-J")
        assert listing.returncode == 0, listing.stderr
        meta = json.loads(listing.stdout)
        assert [b["id"] for b in meta["brokers"]] == [1]
        produced = kcat("-b", info["bootstrap"], "-P", "-t", "cli-topic", "-K", ":", input="a:1\nb:2\n")
        assert produced.returncode == 0, produced.stderr
        consumed = kcat("-b", info["bootstrap"], "-C", "-t", "cli-topic", "-e", "-f", "%k=%s\n")
        assert sorted(consumed.stdout.split()) == ["a=1", "b=2"]
    finally:
        code, err = stop(proc, sig)
    assert code == 0, err
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
    assert "shutting down cleanly" in err
    # Restart on the same data: the records are still there.
    proc, info = start("--data-dir", str(data))
    try:
        consumed = kcat("-b", info["bootstrap"], "-C", "-t", "cli-topic", "-e", "-f", "%k=%s\n")
        assert sorted(consumed.stdout.split()) == ["a=1", "b=2"]
    finally:
        assert stop(proc)[0] == 0


def test_config_file_and_flags(tmp_path):
    cfg = tmp_path / "broker.toml"
    cfg.write_text('default_partitions = 4\nauto_create_topics = true\npage_cache_bytes = 8388608\n'
                   '[log]\nsegment_bytes = 65536\n')
    proc, info = start("--config", str(cfg), "--data-dir", str(tmp_path / "d"), "--page-cache-bytes", "4194304")
    try:
        kcat("-b", info["bootstrap"], "-P", "-t", "four", input="x\n")
        meta = json.loads(kcat("-b", info["bootstrap"], "-L", "-J", "-t", "four").stdout)
        assert len(meta["topics"][0]["partitions"]) == 4
        # The flag overrides the file; DescribeConfigs shows what the broker runs with.
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": info["bootstrap"]})
        broker = confluent_kafka.admin.ConfigResource(confluent_kafka.admin.ResourceType.BROKER, "1")
        entries = admin.describe_configs([broker])[broker].result(timeout=30)
        assert entries["kwire.page.cache.bytes"].value == "4194304"
        assert entries["log.segment.bytes"].value == "65536"
    finally:
        assert stop(proc)[0] == 0


def _broker_configs(bootstrap: str) -> dict:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    broker = confluent_kafka.admin.ConfigResource(confluent_kafka.admin.ResourceType.BROKER, "1")
    return {name: entry.value for name, entry in admin.describe_configs([broker])[broker].result(timeout=30).items()}


def test_group_settings_start_at_kafkas_defaults(tmp_path):
    # kwire broker waits Kafka's 3 s before a new group's first rebalance (the embedded broker: 0).
    proc, info = start("--data-dir", str(tmp_path / "a"))
    try:
        configs = _broker_configs(info["bootstrap"])
        assert configs["group.initial.rebalance.delay.ms"] == "3000"
        assert (configs["group.min.session.timeout.ms"], configs["group.max.session.timeout.ms"]) == \
            ("6000", "1800000")
        # A streams group's first assignment waits Kafka's group.streams.initial.rebalance.delay.ms too.
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": info["bootstrap"]})
        group = confluent_kafka.admin.ConfigResource(confluent_kafka.admin.ResourceType.GROUP, "g")
        group_configs = admin.describe_configs([group])[group].result(timeout=30)
        assert group_configs["streams.initial.rebalance.delay.ms"].value == "3000"
    finally:
        assert stop(proc)[0] == 0
    # A config file changes the default, a flag the file.
    cfg = tmp_path / "broker.toml"
    cfg.write_text("group_initial_rebalance_delay_ms = 500\ngroup_min_session_timeout_ms = 2000\n")
    proc, info = start("--config", str(cfg), "--data-dir", str(tmp_path / "b"), "--group-min-session-timeout-ms",
                       "1000", "--group-max-session-timeout-ms", "60000")
    try:
        configs = _broker_configs(info["bootstrap"])
        assert (configs["group.initial.rebalance.delay.ms"], configs["group.min.session.timeout.ms"],
                configs["group.max.session.timeout.ms"]) == ("500", "1000", "60000")
    finally:
        assert stop(proc)[0] == 0
    bad = subprocess.run([*KWIRE, "broker", "--data-dir", str(tmp_path / "c"), "--group-min-session-timeout-ms",
                          "9000", "--group-max-session-timeout-ms", "8000"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "group_min_session_timeout_ms must be > 0 and at most" in bad.stderr


@pytest.mark.parametrize("content,message", [
    ("prot = 1\n", "unknown setting 'prot'"),
    ("port = 'x'\n", "port must be an integer"),
    ("fsync = 'sometimes'\n", "fsync must be one of"),
    ("page_cache_bytes = 4096\n", "page_cache_bytes must be -1 (no limit) or >= 1048576"),
    ("[log]\nsegment_bytes = 1\n", "segment_bytes"),
    ("port = \n", "broker.toml"),
])
def test_bad_config_is_named(tmp_path, content, message):
    cfg = tmp_path / "broker.toml"
    cfg.write_text(content)
    result = subprocess.run([*KWIRE, "broker", "--config", str(cfg), "--data-dir", str(tmp_path / "d")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def test_data_dir_in_use_is_refused(tmp_path):
    proc, _ = start("--data-dir", str(tmp_path / "d"))
    try:
        second = subprocess.run([*KWIRE, "broker", "--port", "0", "--data-dir", str(tmp_path / "d")],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "in use by another process" in second.stderr
    finally:
        assert stop(proc)[0] == 0


def test_help_lists_the_flags():
    out = subprocess.run([*KWIRE, "broker", "--help"], capture_output=True, text=True, timeout=60).stdout
    for flag in ("--data-dir", "--host", "--port", "--advertised-host", "--config", "--fsync",
                 "--auto-create-topics", "--default-partitions", "--segment-bytes", "--retention-ms",
                 "--page-cache-bytes", "--group-initial-rebalance-delay-ms", "--group-min-session-timeout-ms",
                 "--group-max-session-timeout-ms"):
        assert flag in out
