"""How long the event loop pauses when a request loads its group's partition at once (issue 21).

    python benchmarks/bench_coordinator_inline_load.py              # 8 runs at the threshold
    python benchmarks/bench_coordinator_inline_load.py --runs 12 --bytes 65536
    python benchmarks/bench_coordinator_inline_load.py --rev HEAD   # a commit's src, not the working tree

After a restart, the group coordinator loads a small ``__consumer_offsets`` partition a request
asks for inside that request (``kwire.broker.coordinator.loader``, up to ``INLINE_BYTES`` of
log); meanwhile the event loop serves nothing else.  This measures that pause at its worst: a
partition filled with offset commits up to the threshold (``--bytes``, default ``INLINE_BYTES``),
loaded by the first request that names one of its groups (``GroupCoordinator.loading``), in a
fresh process each run (so the first use of the coordinator-record codecs is included: the
"cold" figure; a ``--bytes`` above the threshold raises it to that), and then a second partition of the same size in the same process ("warm").
Beside it, in the same process and run, the worker thread's read of a third such partition
plus its install: what the background load costs for the same bytes.

Each run is a ``python`` subprocess with this repository's ``src`` on ``PYTHONPATH`` (or a
commit's, ``--rev``, extracted as bench_broker_start.py does); the data dir is written once
beforehand.  Printed: median and max per figure, in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from pathlib import Path

from kwire.broker.config import load_config
from kwire.broker.coordinator import loader
from kwire.broker.coordinator.model import OffsetCommitEntry
from kwire.broker.dispatch import dispatch
from kwire.broker.state import BrokerState
from kwire.protocol import encode_request, messages
from kwire.protocol.coordinator_records import OFFSETS_TOPIC

mode, data_dir = sys.argv[1], Path(sys.argv[2])


def partition_bytes(p):
    d = data_dir / f"{OFFSETS_TOPIC}-{p}"
    return sum(f.stat().st_size for f in d.iterdir() if f.name.endswith(".log")) if d.is_dir() else 0


if mode == "threshold":
    print(json.dumps({"bytes": loader.INLINE_BYTES}))
elif mode == "prepare":
    limit = int(sys.argv[3])
    state = BrokerState(load_config(None, data_dir=data_dir))
    R = messages.CreateTopicsRequest
    dispatch(state, encode_request(R(topics=[R.CreatableTopic(name="t", num_partitions=8, replication_factor=1,
                                                              assignments=[], configs=[])], timeout_ms=1000),
                                   5, 1, client_id="bench")[4:], client_host="127.0.0.1:1", connection_id=1)
    store = state.coordinator.store
    # Groups of three partitions (the measured ones) and one in a lower partition (the worker's first).
    by_partition = {}
    for i in range(100_000):
        by_partition.setdefault(store.partition_of(f"g{i}"), []).append(f"g{i}")
    ordered = sorted(p for p, gs in by_partition.items() if len(gs) >= 20)
    decoy, targets = ordered[0], ordered[-3:]
    state.coordinator.commit_offsets(by_partition[decoy][0], -1, "", None, [OffsetCommitEntry("t", 0, 1)])
    commits = 0
    for p in targets:
        groups = by_partition[p][:20]
        n = 0
        while True:  # one commit (one batch) at a time, as clients commit, until the threshold
            group = groups[n % len(groups)]
            state.coordinator.commit_offsets(group, -1, "", None,
                                             [OffsetCommitEntry("t", n % 8, n, metadata="")])
            n += 1
            if partition_bytes(p) >= limit - 200:
                break
        commits += n
    state.close()
    print(json.dumps({"targets": [by_partition[p][0] for p in targets], "commits_per_partition": commits // 3,
                      "bytes": [partition_bytes(p) for p in targets]}))
else:
    cold_group, warm_group, worker_group = sys.argv[3:6]
    # (a size above the tree's threshold is measured with the threshold raised to it)
    loader.INLINE_BYTES = max(loader.INLINE_BYTES, int(sys.argv[6]))
    state = BrokerState(load_config(None, data_dir=data_dir), load_coordinators=False)

    class Held:  # the worker's jobs, run when this child says
        def __init__(self):
            self.jobs = []
        def submit(self, fn, *args):
            import concurrent.futures
            f = concurrent.futures.Future()
            self.jobs.append((f, fn, args))
            return f
        def shutdown(self, wait=True, *, cancel_futures=False):
            self.jobs.clear()

    held, later = Held(), []
    state.start_loading(post=lambda fn: fn(), executor=held, schedule=later.append)
    out = {}
    for name, group in (("cold", cold_group), ("warm", warm_group)):
        c0, t0 = time.thread_time(), time.perf_counter()
        loading = state.coordinator.loading(group)
        out[name + "_ms"], out[name + "_cpu_ms"] = (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3
        assert not loading, f"{group} was not loaded at once"
    assert state.loader.inline_loads == 2
    # The worker's path for the third: its read (as in the worker thread, here) and its install.
    f, fn, args = held.jobs.pop(0)  # (the decoy partition, asked for by nobody)
    f.set_result(fn(*args))
    partition = state.coordinator.store.partition_of(worker_group)
    c0, t0 = time.thread_time(), time.perf_counter()
    result = state.coordinator.store.read_partition(partition)
    c1, t1 = time.thread_time(), time.perf_counter()
    state.coordinator.load_partition(*result)
    t2 = time.perf_counter()
    out.update(worker_read_ms=(t1 - t0) * 1e3, worker_read_cpu_ms=(c1 - c0) * 1e3, worker_install_ms=(t2 - t1) * 1e3)
    state.close()
    print(json.dumps(out))
"""


def child(args: list[str], cwd: Path, src: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"child {args[0]} exited {out.returncode}: {out.stderr[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--runs", type=int, default=8, help="fresh processes (default 8)")
    parser.add_argument("--bytes", type=int, help="log bytes of each measured partition (default: the tree's "
                                                  "INLINE_BYTES, the threshold)")
    parser.add_argument("--rev", help="measure this commit's src (extracted) instead of the working tree's")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kwire-bench-inline-"))
    try:
        src = REPO / "src"
        if args.rev:
            from bench_broker_start import extract  # (this directory is on sys.path when run as a script)
            src = extract(args.rev, work / "tree")
        if args.bytes is None:
            args.bytes = child(["threshold", str(work)], work, src)["bytes"]
        template = work / "data"
        prepared = child(["prepare", str(template), str(args.bytes)], work, src)
        runs = []
        for i in range(args.runs + 1):  # the first writes the .pyc files: not counted
            scratch = work / "scratch"
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.copytree(template, scratch)
            result = child(["load", str(scratch), *prepared["targets"], str(args.bytes)], work, src)
            if i:
                runs.append(result)
            print(f"[bench_coordinator_inline_load] run {i}{' (warm-up)' if not i else ''}: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in result.items()), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"a request loading its group's partition at once: {args.runs} fresh processes; partitions of "
          f"{', '.join(str(b) for b in prepared['bytes'])} bytes of log ({prepared['commits_per_partition']} commits "
          f"each, one batch per commit); load average {os.getloadavg()[0]:.1f}")
    labels = {"cold_ms": "loop pause, first load in the process (wall)",
              "cold_cpu_ms": "  the same, CPU time of the thread",
              "warm_ms": "loop pause, a second partition (wall)",
              "warm_cpu_ms": "  the same, CPU time of the thread",
              "worker_read_ms": "the worker's read of a third (wall, on this thread)",
              "worker_read_cpu_ms": "  the same, CPU time of the thread",
              "worker_install_ms": "its install on the loop (wall)"}
    print(f"{'ms':<52}{'median':>10}{'max':>10}")
    for key, label in labels.items():
        values = [r[key] for r in runs]
        print(f"  {label:<50}{statistics.median(values):>10.2f}{max(values):>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
