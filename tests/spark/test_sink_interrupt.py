"""Ctrl-C in a terminal, as a user meets ``kwire sink``: its stderr a pseudo-terminal, SIGINT to
its whole process group (what the terminal does).

Mid-stream: the query stops between two micro-batches, no Java stack trace, exit 0 and the
summary: rows read (the offsets the query reached), rows written (those the ``WHERE`` kept, as
in the Parquet the sink committed) and rows filtered.  While Spark is still starting: a status
line counting the seconds from the first one, then Spark stopped once up and the summary of no
rows.  Spark's JVM runs in a session of its own, out of reach of the terminal's signals.  And
``--console-rows N``."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq

from .conftest import SPARK_SMALL, create_topic, produce, sink_command, sink_env

WAIT = 300  # seconds: the bound of every wait (Spark starts slowly on a busy 2-core machine)
JAVA_TRACE = re.compile(r"^\s*at (?:org\.apache|java\.|scala\.)|Exception in thread|^\S+Exception[:\s]", re.M)


class Terminal:
    """``kwire sink`` with its stderr on a pseudo-terminal (stdout a pipe, for --json), in a
    process group of its own as a shell's foreground job."""

    def __init__(self, *args: str):
        master, slave = pty.openpty()
        self.master = master
        self.process = subprocess.Popen(sink_command(*args, *SPARK_SMALL), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=slave, env=sink_env(),
                                        start_new_session=True)
        os.close(slave)
        self.err = b""

    def read(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if not ready:
                if self.process.poll() is not None:
                    return
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the other side closed: the process and its children are gone
                return
            if not chunk:
                return
            self.err += chunk

    def wait_for(self, condition, what: str) -> None:
        deadline = time.monotonic() + WAIT
        while not condition():
            assert self.process.poll() is None, f"kwire sink exited before {what}:\n{self.text}"
            assert time.monotonic() < deadline, f"no {what} within {WAIT} s:\n{self.text}"
            self.read(0.2)

    def ctrl_c(self) -> tuple[int, str]:
        """SIGINT to the process group, as the terminal sends it; (exit status, stdout)."""
        os.killpg(self.process.pid, signal.SIGINT)
        out = self.process.stdout.read()  # to its end: the process exits
        self.process.wait(WAIT)
        self.read(5)  # what is left on the terminal
        return self.process.returncode, out.decode()

    @property
    def text(self) -> str:
        return self.err.decode(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(60)
        os.close(self.master)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def committed_parquet_rows(out: Path) -> int:
    """Rows of the Parquet files the sink's _spark_metadata log lists (its committed batches)."""
    files = set()
    for log in (out / "_spark_metadata").iterdir():
        if log.name.split(".")[0].isdigit():
            files.update(json.loads(line)["path"] for line in log.read_text().splitlines()[1:] if line.strip())
    return sum(pq.read_metadata(unquote(urlparse(f).path)).num_rows for f in files)


def commits(checkpoint: Path) -> int:
    folder = checkpoint / "commits"
    return sum(1 for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else 0


def test_ctrl_c_mid_stream_stops_cleanly_with_rows_read_written_and_filtered(broker, tmp_path):
    create_topic(broker.bootstrap, "ctrl-c")
    produce(broker.bootstrap, "ctrl-c", [(None, b"v%d" % i, None) for i in range(3000)])
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    term = Terminal("--topic", "ctrl-c", "--bootstrap", broker.bootstrap, "--to", f"parquet:{out}",
                    "--checkpoint", str(checkpoint), "--trigger", "processingTime=200ms",
                    "--max-offsets-per-trigger", "100", "--json",
                    "--sql", "SELECT offset, CAST(value AS STRING) AS v FROM events WHERE offset % 3 = 0")
    try:
        # A live status from the first second: the start-up's seconds counted on the terminal.
        term.wait_for(lambda: re.search(r"starting Spark \(local\[2\]\)\.\.\. [1-9]\d* s", term.text),
                      "a status line counting the seconds while Spark starts")
        term.wait_for(lambda: commits(checkpoint) >= 2, "two micro-batches done")
        # Spark's JVM (the driver's child) is in a session of its own: the terminal's signals miss it.
        jvms = [c for c in children(term.process.pid) if "java" in Path(f"/proc/{c}/cmdline").read_text()]
        assert jvms and all(os.getsid(c) == c for c in jvms)
        code, stdout = term.ctrl_c()
    finally:
        term.close()
    text = term.text
    assert code == 0, text
    assert "SIGINT: stopping the query" in text
    assert not JAVA_TRACE.search(text), text
    assert "Traceback" not in text, text
    summary = json.loads(stdout)
    assert summary["stopped"] is True and summary["error"] is None
    ends = {p["partition"]: p["end_offset"] or 0 for p in summary["partitions"]}
    # Read: every offset below the query's end offsets (earliest on); written: those WHERE kept.
    assert summary["rows_read"] == sum(ends.values()) > 0
    assert summary["rows_written"] == sum(len(range(0, end, 3)) for end in ends.values())
    assert summary["rows_filtered"] == summary["rows_read"] - summary["rows_written"] > 0
    assert summary["rows_written_by"].startswith("counted on the way to the sink")
    assert committed_parquet_rows(out) == summary["rows_written"]  # what the stopped run committed


def test_ctrl_c_while_spark_starts_stops_it_with_a_summary_of_no_rows(broker, tmp_path):
    create_topic(broker.bootstrap, "early")
    produce(broker.bootstrap, "early", [(None, b"x", None) for _ in range(30)])
    term = Terminal("--topic", "early", "--bootstrap", broker.bootstrap, "--to", "console", "--json")
    try:
        term.wait_for(lambda: "starting Spark (local[2])..." in term.text, "the start-up status")
        code, stdout = term.ctrl_c()
    finally:
        term.close()
    text = term.text
    assert code == 0, text
    assert "SIGINT: stopping Spark once it is up" in text
    assert not JAVA_TRACE.search(text) and "Traceback" not in text, text
    summary = json.loads(stdout)
    assert (summary["stopped"], summary["batches"], summary["rows_read"], summary["rows_written"]) == (True, 0, 0, 0)
    assert summary["total_lag"] == 30  # nothing read: the whole topic still ahead


def test_console_rows_sets_how_many_rows_of_each_batch_are_shown(broker):
    create_topic(broker.bootstrap, "shown", partitions=1)
    produce(broker.bootstrap, "shown", [(None, b"row-%d" % i, None) for i in range(10)])
    result = subprocess.run(sink_command("--topic", "shown", "--bootstrap", broker.bootstrap, "--to", "console",
                                         "--trigger", "availableNow", "--console-rows", "3",
                                         "--sql", "SELECT CAST(value AS STRING) AS v FROM events", *SPARK_SMALL),
                            capture_output=True, text=True, env=sink_env(), timeout=WAIT)
    assert result.returncode == 0, result.stderr
    shown = re.findall(r"^\|(row-\d+)\s*\|$", result.stdout, re.M)
    assert shown == ["row-0", "row-1", "row-2"], result.stdout
    assert "only showing top 3 rows" in result.stdout
    # All 10 went to the sink (the summary says how they were counted), of which it showed 3.
    assert re.search(r"10 rows read, 10 written \(counted (by|on the way to) the sink: \w+(\.\w+)?\), 0 filtered",
                     result.stdout), result.stdout
