"""A/B consume throughput: this tree's kwire broker, another checkout's, and librdkafka's mock.

The three are read in interleaved rounds by the same confluent-kafka consumer.

For checking a broker change against the commit before it: the full benchmark
(``benchmarks/bench_broker.py``) runs one consume pass per repeat after GBs of produce runs, and
its spread on this VM hides a change of 10%.  Here each side reads the benchmark's consume data
set (topics x 4 partitions x ~3.5 MB) ``--rounds`` times, alternating, and the medians and bests
are compared::

    git worktree add /tmp/kwire-old HEAD~1
    python tools/consume_ab.py --old-src /tmp/kwire-old/src --size 1024 --rounds 7

Uses ``bench_broker``'s broker runner, data set and consume loop (same settings, same checks).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_broker as bench  # noqa: E402 - from benchmarks/, put on the path above


def _start(src: str | None) -> bench.KwireBroker:
    """``kwire broker`` from ``src`` (a checkout's src/ directory) or, without it, this tree's."""
    saved = os.environ.get("PYTHONPATH")
    if src:
        os.environ["PYTHONPATH"] = src
    try:
        return bench.KwireBroker("never")
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@contextlib.contextmanager
def brokers_ab(old_src: str) -> Iterator[tuple]:
    """(the broker of ``old_src``, this tree's, librdkafka's mock); both kwire brokers are stopped
    and their data removed on the way out."""
    old = new = None
    try:
        old, new = _start(old_src), _start(None)
        yield old, new, bench.MockCluster()
    finally:
        for broker in (old, new):
            if broker is not None:
                broker.stop()
                broker.cleanup()


def ab_parser(description: str, rounds: int, rounds_help: str) -> argparse.ArgumentParser:
    """The options every A/B tool has: --old-src, --size, --rounds, --json."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--old-src", required=True, help="the other checkout's src/ directory")
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes (default 1024)")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"{rounds_help} (default {rounds})")
    parser.add_argument("--json", action="store_true", help="print every round as JSON")
    return parser


def parse_ab(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if not (Path(args.old_src) / "kwire").is_dir():
        parser.error(f"--old-src {args.old_src}: no kwire package there")
    return args


def _fill(bootstrap: str, size: int, topics: int, create: bool, problems: list[str]) -> dict:
    names = [f"ab-{size}-{i}" for i in range(topics)]
    if create:
        for topic in names:
            bench.create_topic(bootstrap, topic, problems)
    bench.fill_consume_topics(bootstrap, names, size, bench.MOCK_WINDOW // size, problems, "fill")
    return {key: ends[1] for key, ends in bench.end_offsets(bootstrap, names, problems, "ends").items()}


def main(argv: list[str] | None = None) -> int:
    parser = ab_parser(__doc__.splitlines()[0], 7, "reads per side, interleaved")
    parser.add_argument("--topics", type=int, default=16, help="topics x 4 partitions (default 16)")
    args = parse_ab(parser, argv)

    problems: list[str] = []
    with brokers_ab(args.old_src) as (old, new, mock):
        sides = {"old": (old.bootstrap, True), "new": (new.bootstrap, True), "mock": (mock.bootstrap, False)}
        data = {}
        for name, (bootstrap, create) in sides.items():
            bench.log(f"{name}: writing the data set at {bootstrap}")
            data[name] = (bootstrap, _fill(bootstrap, args.size, args.topics, create, problems))
        rounds: dict[str, list[float]] = {name: [] for name in sides}
        for i in range(args.rounds):
            for name, (bootstrap, ends) in data.items():
                run = bench.consume_run(bootstrap, ends, args.size, 60, problems, name, False)
                rounds[name].append(run["mb_per_s"])
                bench.log(f"round {i + 1}/{args.rounds} {name}: {run['mb_per_s']:,.1f} MB/s")
    if problems:
        print("problems:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"size": args.size, "rounds": rounds}, indent=2))
        return 0
    print(f"consume {args.size} B values, {args.topics} topics x 4 partitions, {args.rounds} interleaved rounds")
    print(f"{'broker':8} {'median MB/s':>12} {'best MB/s':>10}  per round")
    for name, rates in rounds.items():
        ordered = sorted(rates)
        print(f"{name:8} {ordered[len(ordered) // 2]:>12,.1f} {ordered[-1]:>10,.1f}  "
              + " ".join(f"{r:,.0f}" for r in rates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
