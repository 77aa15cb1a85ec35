"""``kwire produce`` (or ``consume``) in two kwire trees, alternated in one run: did a change make the command faster?

The commands of issue 24 (100,000 records of 100 bytes by default, from a file, to librdkafka's
mock cluster started in this process; with ``--consume``, those records read back from the
beginning, ``-c N -e``) run with each tree's ``src`` first on ``PYTHONPATH``,
alternating which tree goes first each round, so that load on the machine falls on both.  Most
of its ~0.2 s is Python's start-up and imports; a change of a few milliseconds is under the
machine's noise in any single run, so the table gives per tree the median wall and CPU time
(the child's user + system) over the rounds, and the median of each round's before - after.
Each tree runs the command once first (unmeasured), so both start with their bytecode and
codec caches written.

    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python benchmarks/bench_cli_ab.py --before /tmp/old --rounds 41
    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python benchmarks/bench_cli_ab.py --before /tmp/old --consume
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ab_trees
from bench_cli import MockCluster, _records_file


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ab_trees.add_arguments(ap, rounds=21)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100, help="bytes per record (with its newline)")
    ap.add_argument("--consume", action="store_true", help="time kwire consume of the records instead")
    args = ap.parse_args(argv)
    srcs = ab_trees.trees(args)
    mock = MockCluster()
    with tempfile.TemporaryDirectory(prefix="kwire-bench-cli-ab-") as work:
        data = _records_file(Path(work), args.records, args.size)
        kwire = [sys.executable, "-m", "kwire.cli.main"]
        cmd = [*kwire, "produce", "bench-ab", "-f", str(data), "-b", mock.bootstrap]
        if args.consume:
            subprocess.run(cmd, env=ab_trees.tree_env(srcs["after"], args.malloc), capture_output=True, check=True,
                           cwd=work)
            cmd = [*kwire, "consume", "bench-ab", "-o", "beginning", "-c", str(args.records), "-e",
                   "-b", mock.bootstrap]

        def run(tree: str) -> dict[str, float]:
            cpu, start = _cpu(), time.perf_counter()
            subprocess.run(cmd, env=ab_trees.tree_env(srcs[tree], args.malloc), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, check=True, cwd=work)
            return {"wall ms": (time.perf_counter() - start) * 1000, "cpu ms": (_cpu() - cpu) * 1000}

        for tree in srcs:
            run(tree)  # caches written
        rates = ab_trees.alternate(run, args.rounds)
    mock.stop()
    print(f"kwire {'consume' if args.consume else 'produce'}, {args.records:,} x {args.size} B, librdkafka's mock; "
          f"{args.rounds} rounds per tree")
    print(f"{'':8} {'before':>9} {'after':>9} {'after/before':>13} {'median of before - after':>26}")
    for case, before in rates["before"].items():
        after = rates["after"][case]
        b, a = statistics.median(before), statistics.median(after)
        paired = statistics.median(x - y for x, y in zip(before, after, strict=True))
        print(f"{case:8} {b:9.1f} {a:9.1f} {a / b:12.3f}x {paired:+25.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
