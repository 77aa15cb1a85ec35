"""bench_protocol.py for two kwire trees, alternated in one run: is a change slower?

Each round runs ``bench_protocol.py --json`` once with the "before" tree's ``src`` first on
``PYTHONPATH`` and once with the "after" tree's, alternating which goes first so load on the
machine falls on both (ab_trees.py); the table gives, per case, the median of kwire's rate over
the rounds, after/before, the before tree's own spread, and kwire's page faults per call in
each tree (median of rounds: a case whose faults differ between the trees measures the heap's
history, see ab_trees.py; with the default fixed malloc policy they are 0).

    git worktree add /tmp/kwire-before HEAD~1      # the tree to compare with (build its _layout)
    python benchmarks/bench_protocol_ab.py --before /tmp/kwire-before [--rounds 3] [--seconds 0.3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import ab_trees

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ab_trees.add_arguments(ap, rounds=3)
    ap.add_argument("--seconds", type=float, default=0.3, help="time budget per library per case")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu",
                    help="bench_protocol.py's clock: CPU time (default; leaves out other processes' turns) or wall")
    args = ap.parse_args(argv)
    srcs = ab_trees.trees(args)
    faults: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}

    def measure(tree: str) -> dict[str, float]:
        out = subprocess.run([sys.executable, str(HERE / "bench_protocol.py"), "--json", "--seconds", str(args.seconds),
                              "--clock", args.clock],
                             env=ab_trees.tree_env(srcs[tree], args.malloc), check=True, capture_output=True,
                             text=True).stdout
        rows = json.loads(out)["results"]
        for r in rows:
            faults[tree].setdefault(r["case"], []).append(r.get("kwire_faults", float("nan")))
        return {r["case"]: r["kwire"] for r in rows}

    rates = ab_trees.alternate(measure, args.rounds)
    notes = {case: f"faults/call {statistics.median(faults['before'][case]):.0f} | "
                   f"{statistics.median(faults['after'].get(case, [float('nan')])):.0f}"
             for case in faults["before"]}
    print(f"malloc: {args.malloc}, clock: {args.clock}")
    ab_trees.print_table(rates, pick=statistics.median, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
