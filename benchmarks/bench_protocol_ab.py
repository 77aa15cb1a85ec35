"""bench_protocol.py for two kwire trees, alternated in one run: is a change slower?

Each round runs ``bench_protocol.py --json`` once with the "before" tree's ``src`` first on
``PYTHONPATH`` and once with this tree's, alternating so load on the machine falls on both; the
table gives, per case, the median of kwire's rate over the rounds and after/before.

    git archive HEAD~1 | tar -x -C /tmp/kwire-before      # the tree to compare with
    cp src/kwire/protocol/records/_layout*.so /tmp/kwire-before/src/kwire/protocol/records/
    python benchmarks/bench_protocol_ab.py --before /tmp/kwire-before [--rounds 3] [--seconds 0.3]
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


def run(src: Path, seconds: float) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # else every run recompiles the schema module
    out = subprocess.run([sys.executable, str(HERE / "bench_protocol.py"), "--json", "--seconds", str(seconds)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return {r["case"]: r["kwire"] for r in json.loads(out)["results"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="a kwire checkout (its src/ is used)")
    ap.add_argument("--after", type=Path, default=ROOT, help="the kwire checkout to compare (default: this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.3, help="time budget per library per case")
    args = ap.parse_args(argv)
    trees = {"before": args.before / "src", "after": args.after / "src"}
    rates: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for i in range(args.rounds):
        for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
            for case, rate in run(trees[name], args.seconds).items():
                rates[name].setdefault(case, []).append(rate)
    print(f"{'case':40} {'before/s':>12} {'after/s':>12} {'after/before':>13}")
    for case, before in rates["before"].items():
        b, a = statistics.median(before), statistics.median(rates["after"][case])
        print(f"{case:40} {b:12.0f} {a:12.0f} {a / b:12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
