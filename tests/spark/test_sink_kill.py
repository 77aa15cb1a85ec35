"""Kill -9 in the middle of a run, restart from the checkpoint: every record exactly once.

``kwire sink`` runs as a subprocess (processingTime trigger, micro-batches of at most 100
records) while records arrive in waves; once it has finished two micro-batches and has the next
one under way, the driver and its JVM (the driver's process group, and the JVM's own session with
its Python workers) get SIGKILL.  Started again
with the same checkpoint, more records arrive, and once its commit group shows it caught up,
SIGTERM stops it cleanly.  The Parquet read through Spark holds each (partition, offset) exactly
once, with its value.  Two pipelines side by side (their JVMs start together, which halves the
waiting): Spark's file sink (its _spark_metadata log) and --per-batch (foreachBatch, batch N
rewriting its own directory)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kwire.client import Admin

from .conftest import SPARK_SMALL, create_topic, parquet_rows, produce, sink_command, sink_env

LIMIT = 100  # --max-offsets-per-trigger
WAIT = 240   # seconds: the bound of every wait (a failure then shows the sink's output)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def batch_ids(checkpoint: Path, log: str) -> set[int]:
    folder = checkpoint / log
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


class Pipeline:
    def __init__(self, broker, tmp_path: Path, mode: str):
        self.mode, self.broker = mode, broker
        self.topic, self.group = f"waves-{mode}", f"killed-{mode}"
        self.dir = tmp_path / mode
        self.out, self.checkpoint = self.dir / "out", self.dir / "checkpoint"
        self.logs: list[Path] = []
        self.process: subprocess.Popen | None = None
        self.written: dict[tuple[int, int], str] = {}
        create_topic(broker.bootstrap, self.topic)

    def start(self) -> None:
        command = sink_command("--topic", self.topic, "--bootstrap", self.broker.bootstrap, "--to",
                               f"parquet:{self.out}", "--checkpoint", str(self.checkpoint),
                               "--trigger", "processingTime=200ms", "--max-offsets-per-trigger", str(LIMIT),
                               "--group", self.group,
                               "--sql", "SELECT partition, offset, CAST(value AS STRING) AS v FROM events",
                               *(["--per-batch"] if self.mode == "per-batch" else []), *SPARK_SMALL)
        self.dir.mkdir(exist_ok=True)
        log = self.dir / f"run{len(self.logs) + 1}.log"
        self.logs.append(log)
        with open(log, "w") as f:  # the child keeps its own descriptor
            self.process = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=sink_env(),
                                            start_new_session=True)

    def wave(self, tag: str, n: int) -> None:
        records = produce(self.broker.bootstrap, self.topic, [(None, f"{tag}-{i}".encode(), None) for i in range(n)])
        self.written.update({po: v.decode() for po, (_k, v, _h, _t) in records.items()})

    def mid_batch(self) -> bool:
        """Two micro-batches finished and the next one planned, not finished."""
        done = batch_ids(self.checkpoint, "commits")
        return len(done) >= 2 and max(batch_ids(self.checkpoint, "offsets"), default=-1) > max(done)

    def caught_up(self) -> bool:
        """The commit group (committed after each finished batch) at every partition's log end."""
        ends = {p: sum(1 for q, _o in self.written if q == p) for p in range(3)}
        with Admin({"bootstrap.servers": self.broker.bootstrap}) as admin:
            lag = admin.consumer_group_lag(self.group, topics=[self.topic])
        return {p.partition: p.committed for p in lag.partitions} == ends

    def kill(self) -> None:
        """SIGKILL to the driver (its process group) and to Spark's JVM with its Python workers: the
        driver's child, which kwire sink starts in a session of its own (see spark_session)."""
        jvms = children(self.process.pid)
        os.killpg(self.process.pid, signal.SIGKILL)
        for pid in jvms:
            with contextlib.suppress(ProcessLookupError):  # a child in the driver's group: killed already
                os.killpg(pid, signal.SIGKILL)
        self.process.wait(60)

    def check_alive(self, what: str) -> None:
        if self.process.poll() is not None:
            pytest.fail(f"{self.mode}: kwire sink exited ({self.process.returncode}) before {what}:\n{self.tails()}")

    def tails(self) -> str:
        return "\n".join(f"--- {p} ---\n{p.read_text(errors='replace')[-3000:]}" for p in self.logs if p.exists())


def wait_for(pipelines: list[Pipeline], condition, what: str, then=None, every: float = 0.05) -> None:
    """Poll each pipeline (bounded) until ``condition`` holds for it, calling ``then`` on it at once."""
    deadline = time.monotonic() + WAIT
    todo = list(pipelines)
    while todo:
        for p in list(todo):
            p.check_alive(what)
            if condition(p):
                todo.remove(p)
                if then is not None:
                    then(p)
        if todo and time.monotonic() > deadline:
            pytest.fail(f"no {what} within {WAIT} s:\n" + "\n".join(p.tails() for p in todo))
        time.sleep(every)


def test_a_killed_query_restarted_from_its_checkpoint_writes_every_record_exactly_once(spark, broker, tmp_path):
    pipelines = [Pipeline(broker, tmp_path, mode) for mode in ("stream", "per-batch")]
    try:
        for p in pipelines:
            p.start()
        for p in pipelines:
            p.wave("a", 500)  # 5+ micro-batches of at most 100
            p.wave("b", 200)
        wait_for(pipelines, Pipeline.mid_batch, "micro-batch under way after two finished", then=Pipeline.kill)
    finally:
        for p in pipelines:
            if p.process.poll() is None:
                p.kill()
    for p in pipelines:
        assert p.process.returncode == -signal.SIGKILL
        # Killed mid-run: the finished micro-batches (LIMIT records at most each) had not taken everything.
        assert len(batch_ids(p.checkpoint, "commits")) * LIMIT < len(p.written)

    try:
        for p in pipelines:
            p.start()  # the same command, the same checkpoint
        for p in pipelines:
            p.wave("c", 200)
        wait_for(pipelines, Pipeline.caught_up, "catching up (commit group at the log ends)", every=0.5)
    finally:
        for p in pipelines:
            p.process.send_signal(signal.SIGTERM)  # a clean stop
        for p in pipelines:
            p.process.wait(120)
    for p in pipelines:
        assert p.process.returncode == 0, p.tails()
        assert "(stopped)" in p.logs[-1].read_text()
        rows = parquet_rows(spark, p.out)
        keys = [(r.partition, r.offset) for r in rows]
        assert len(keys) == len(set(keys)), f"{p.mode}: a record was written twice"
        assert {(r.partition, r.offset): r.v for r in rows} == p.written, p.mode
        assert len(p.written) == 900
