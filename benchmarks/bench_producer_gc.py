"""The sync Producer under the cyclic garbage collector: ``make demo``'s produce step, with the
collector on (as in a user's process) and off (the ceiling), for two kwire trees alternated.

The workload is tools/demo_sink.py's: an embedded broker in the same process, 8 partitions,
JSON values keyed by user, ``linger.ms`` 20, 256 KiB batches, lz4, ``produce`` in a loop with
``poll(0)`` every 10,000, its futures dropped (mode ``gc``, as the demo) or held by the caller
until the next poll (``gc-kept``: then every queued record keeps its future); ``nogc`` is the
demo with the collector disabled in the benchmark's process.  The producer outpaces the in-process broker, so up to ``buffer.memory``
of records wait in batches; what each one costs the collector (full collections walk every
tracked object) is what this measures.  Each run is a fresh worker process; the runs alternate
tree and mode so load on the machine falls on all of them.

    git worktree add /tmp/kwire-before <commit>                  # the tree to compare with
    cp src/kwire/protocol/records/_layout*.so /tmp/kwire-before/src/kwire/protocol/records/
    python benchmarks/bench_producer_gc.py --before /tmp/kwire-before [--records 300000] [--rounds 2]

Per (tree, mode): the median rate over the rounds, CPU seconds of the process, full (gen 2)
collections and their CPU seconds, the young collections' (gen 0 and 1) CPU seconds, and the most tracked objects seen at a 100,000-record mark;
then ratios: after/before per mode, and collector on/off per tree.  Without ``--before`` only
this tree runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODES = ("gc", "nogc", "gc-kept")


def worker(records: int, mode: str) -> dict:
    import gc
    import random
    import time

    kept: list = []  # gc-kept: the caller holds every future until its next poll (10,000 records)
    keep = kept.append if mode == "gc-kept" else None
    if mode == "nogc":
        gc.disable()  # the ceiling: this benchmark's own process, not something kwire does
    from kwire.broker import EmbeddedBroker
    from kwire.client import Admin, NewTopic, Producer

    spent = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    started = [0.0]

    # CPU time of the collecting thread (a collection runs in the thread that triggered it), so
    # that other processes' load does not count as collecting.
    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            entry = spent[info["generation"]]
            entry[0] += 1
            entry[1] += time.thread_time() - started[0]

    gc.callbacks.append(watch)
    peak = 0
    sampling = 0.0
    with EmbeddedBroker() as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("events", num_partitions=8)])
        rnd = random.Random(5)
        cpu0 = time.process_time()
        t0 = time.monotonic()
        with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 256 * 1024,
                       "compression.type": "lz4"}) as producer:
            for i in range(records):
                user = rnd.randrange(50_000)
                value = b'{"user": "user-%d", "type": "%s", "cents": %d, "seq": %d}' % (user, b"view", 0, i)
                if keep is None:
                    producer.produce("events", value, key=b"user-%d" % user)  # the demo drops its futures
                else:
                    keep(producer.produce("events", value, key=b"user-%d" % user))
                if i % 10_000 == 9_999:
                    producer.poll(0)
                    kept.clear()
                if i % 100_000 == 99_999:
                    s = time.monotonic()
                    peak = max(peak, len(gc.get_objects()))
                    sampling += time.monotonic() - s
            if producer.flush(120) != 0:
                raise SystemExit("records left undelivered")
        elapsed = time.monotonic() - t0 - sampling
        cpu = time.process_time() - cpu0
    gc.callbacks.remove(watch)
    return {"rate": records / elapsed, "cpu": cpu, "gen2": spent[2][0], "gen2_s": spent[2][1],
            "young_s": spent[0][1] + spent[1][1], "peak_tracked": peak}


def run(src: Path, records: int, mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # else every run recompiles the schema module
    out = subprocess.run([sys.executable, __file__, "--worker", mode, "--records", str(records)],
                         env=env, check=True, capture_output=True, text=True, timeout=600).stdout
    return json.loads(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="a kwire checkout to compare with (its src/ is used)")
    ap.add_argument("--after", type=Path, default=ROOT, help="the kwire checkout measured (default: this one)")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.records, args.worker)))
        return 0
    trees = {"after": args.after / "src"}
    if args.before is not None:
        trees = {"before": args.before / "src", **trees}
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for tree, src in trees.items():
            for mode in MODES:
                got = run(src, args.records, mode)
                results.setdefault((tree, mode), []).append(got)
                print(f"round {r + 1} {tree:6} {mode:4}: {got['rate']:9,.0f}/s cpu {got['cpu']:.1f}s "
                      f"gen2 {got['gen2']} ({got['gen2_s']:.2f}s cpu) young {got['young_s']:.2f}s tracked {got['peak_tracked']:,}",
                      file=sys.stderr, flush=True)
    table = {f"{t} {m}": {k: statistics.median(r[k] for r in runs) for k in runs[0]}
             for (t, m), runs in results.items()}
    if args.json:
        print(json.dumps({"records": args.records, "rounds": args.rounds, "results": table}))
        return 0
    print(f"{args.records:,} records, median of {args.rounds} rounds")
    print(f"{'tree mode':12} {'rate/s':>9} {'cpu s':>6} {'gen2':>5} {'gen2 s':>7} {'young s':>7} {'tracked':>10}")
    for name, row in table.items():
        print(f"{name:12} {row['rate']:9,.0f} {row['cpu']:6.1f} {row['gen2']:5.0f} {row['gen2_s']:7.2f} "
              f"{row['young_s']:7.2f} {row['peak_tracked']:10,.0f}")
    for mode in MODES:
        if "before" in trees:
            print(f"after/before ({mode}): {table[f'after {mode}']['rate'] / table[f'before {mode}']['rate']:.2f}")
    for tree in trees:
        print(f"{tree}: collector on/off {table[f'{tree} gc']['rate'] / table[f'{tree} nogc']['rate']:.2f}, "
              f"futures kept/dropped {table[f'{tree} gc-kept']['rate'] / table[f'{tree} gc']['rate']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
