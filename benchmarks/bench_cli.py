"""kwire's command line against kcat, side by side on the same brokers, with ratios per row.

What a user of kcat compares: the wall time of one command from exec to exit.

- start-up: ``kwire --version`` against ``kcat -V``, and ``python -c pass`` as the floor of any
  Python command;
- one record: produce one, consume one (``-o beginning -c 1``);
- 100,000 records of 100 B and of 1 KiB: produce from a file, consume to the end (``-e``).

Beside the wall times, each command's CPU time (user + system, from the kernel's accounting of
the child process) is shown: on a machine shared with other work the wall time of a short
command is mostly waiting for a core, while its CPU time is what it costs.

Each case runs against kwire's broker (``kwire broker`` in a subprocess, its data in a temp dir)
and against librdkafka's mock cluster (one broker, started in this process), the kwire and kcat
commands alternating, ``--runs`` times each (the median is shown, the best beside it).  Topics are
fresh for every produce run, and every consume run reads the same topic the produce runs filled.

    python benchmarks/bench_cli.py                   # everything, 3 runs
    python benchmarks/bench_cli.py --records 20000 --runs 5 --only startup,one
    python benchmarks/bench_cli.py --only one,bulk --directions produce   # the produce rows only

The interpreter runs with bytecode caching on (PYTHONDONTWRITEBYTECODE removed from the
environment): a user's kwire has its .pyc files and its compiled codecs' cache; without them
every command recompiles the generated protocol schema and the codecs it uses.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

KWIRE = [sys.executable, "-m", "kwire.cli.main"]
CASES = ("startup", "one", "bulk")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], *, stdin: bytes | None = None, timeout: float = 600) -> tuple[float, float]:
    """Wall seconds from exec to exit and the CPU seconds the command used; an error if it failed."""
    cpu = _children_cpu()
    start = time.perf_counter()
    result = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout, env=_env())
    took = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... exited {result.returncode}: {result.stderr[-400:]!r}")
    return took, _children_cpu() - cpu


class KwireBrokerProcess:
    """``kwire broker`` on a free port with a temp data dir."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kwire-bench-cli-"))
        self.proc = subprocess.Popen([*KWIRE, "broker", "--port", "0", "--json", "--data-dir", str(self.dir / "d"),
                                      "--log-level", "warning"], stdout=subprocess.PIPE, text=True, env=_env())
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("kwire broker did not start")
        self.bootstrap = json.loads(line)["bootstrap"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


class MockCluster:
    """librdkafka's mock cluster with one broker, kept alive by a producer handle of this process."""

    def __init__(self) -> None:
        import confluent_kafka

        self._handle = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
        metadata = self._handle.list_topics(timeout=10)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())

    def stop(self) -> None:
        self._handle = None


def _records_file(directory: Path, count: int, size: int) -> Path:
    path = directory / f"records-{count}x{size}.txt"
    line = (b"r" * (size - 1)) + b"\n"
    path.write_bytes(line * count)
    return path


def _pair(name: str, runs: int, kwire_cmd: Callable[[], list[str]], kcat_cmd: Callable[[], list[str]],
          *, stdin: bytes | None = None) -> dict:
    """Run the two commands alternately; medians, bests and the ratio kwire/kcat (wall and CPU)."""
    times: dict[str, list[float]] = {"kwire": [], "kcat": []}
    cpus: dict[str, list[float]] = {"kwire": [], "kcat": []}
    for i in range(runs):
        order = [("kwire", kwire_cmd), ("kcat", kcat_cmd)]
        if i % 2:
            order.reverse()
        for who, make in order:
            wall, cpu = timed(make(), stdin=stdin)
            times[who].append(wall)
            cpus[who].append(cpu)
    row = {"case": name}
    for who, values in times.items():
        row[f"{who}_median_s"] = statistics.median(values)
        row[f"{who}_best_s"] = min(values)
        row[f"{who}_cpu_s"] = statistics.median(cpus[who])
    row["ratio"] = row["kwire_median_s"] / row["kcat_median_s"]
    return row


def run_cases(bootstrap: str, where: str, cases: set[str], records: int, runs: int, work: Path,
              directions: set[str]) -> list[dict]:
    rows = []
    b = ["-b", bootstrap]

    def fresh() -> str:
        return f"bench-{uuid.uuid4().hex[:10]}"

    # As --version writes the .pyc files, one produce writes the compiled codecs' cache
    # (kwire.protocol.compiler) for the versions this broker speaks: what a user's kwire has
    # after its first command.
    timed([*KWIRE, "produce", fresh(), "warm-up", *b])
    if "one" in cases:
        one_topic = fresh()
        if "produce" in directions:
            rows.append(_pair(f"{where}: produce 1 record", runs,
                              lambda: [*KWIRE, "produce", one_topic, "x", *b],
                              lambda: ["kcat", *b, "-P", "-t", one_topic],
                              stdin=b"x\n"))
        else:
            timed([*KWIRE, "produce", one_topic, "x", *b])
        if "consume" in directions:
            rows.append(_pair(f"{where}: consume 1 record", runs,
                              lambda: [*KWIRE, "consume", one_topic, "-o", "beginning", "-c", "1", *b],
                              lambda: ["kcat", *b, "-C", "-t", one_topic, "-o", "beginning", "-c", "1", "-q"]))
    if "bulk" in cases:
        for size in (100, 1024):
            data = _records_file(work, records, size)
            filled = fresh()
            if "produce" in directions:
                rows.append(_pair(f"{where}: produce {records:,} x {size} B", runs,
                                  lambda data=data: [*KWIRE, "produce", fresh(), "-f", str(data), *b],
                                  lambda data=data: ["kcat", *b, "-P", "-t", fresh(), "-l", str(data)]))
            if "consume" not in directions:
                continue
            timed([*KWIRE, "produce", filled, "-f", str(data), *b])
            rows.append(_pair(f"{where}: consume {records:,} x {size} B", runs,
                              lambda filled=filled: [*KWIRE, "consume", filled, "-o", "beginning", "-e", *b],
                              lambda filled=filled: ["kcat", *b, "-C", "-t", filled, "-o", "beginning", "-e", "-q"]))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=",".join(CASES), help=f"comma-separated cases of {', '.join(CASES)}")
    parser.add_argument("--brokers", default="kwire,mock", help="comma-separated: kwire, mock")
    parser.add_argument("--directions", default="produce,consume", help="comma-separated: produce, consume")
    args = parser.parse_args()
    cases = set(args.only.split(","))
    if shutil.which("kcat") is None:
        print("kcat is not installed (Debian package kcat; bash tools/ensure_test_tools.sh)", file=sys.stderr)
        return 1
    timed([*KWIRE, "--version"])  # writes the .pyc files a user's install has
    rows: list[dict] = []
    if "startup" in cases:
        floor = _pair("start-up: python -c pass / kcat -V", args.runs, lambda: [sys.executable, "-c", "pass"],
                      lambda: ["kcat", "-V"])
        rows.append(floor)
        rows.append(_pair("start-up: kwire --version / kcat -V", args.runs, lambda: [*KWIRE, "--version"],
                          lambda: ["kcat", "-V"]))
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        for name in args.brokers.split(","):
            broker = KwireBrokerProcess() if name == "kwire" else MockCluster()
            try:
                rows.extend(run_cases(broker.bootstrap, f"{name} broker", cases - {"startup"}, args.records,
                                      args.runs, Path(tmp), set(args.directions.split(","))))
            finally:
                broker.stop()
    load = os.getloadavg()[0]
    print(f"kwire CLI against kcat; {args.runs} runs each, alternated; Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {load:.1f} at the end")
    width = max(len(r["case"]) for r in rows)
    print(f"{'case':<{width}}  {'kwire med s':>11}  {'kwire best':>10}  {'kcat med s':>10}  {'kcat best':>9}  "
          f"{'kwire/kcat':>10}  {'kwire cpu':>9}  {'kcat cpu':>8}")
    for r in rows:
        print(f"{r['case']:<{width}}  {r['kwire_median_s']:>11.3f}  {r['kwire_best_s']:>10.3f}  "
              f"{r['kcat_median_s']:>10.3f}  {r['kcat_best_s']:>9.3f}  {r['ratio']:>9.2f}x  "
              f"{r['kwire_cpu_s']:>9.3f}  {r['kcat_cpu_s']:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
