"""A/B produce throughput and CPU: this tree's kwire broker, another checkout's, and librdkafka's mock.

Each side gets ``--rounds`` runs of the benchmark's produce case (``bench_broker.produce_run``:
200,000 values, round-robin over 4 partitions), interleaved, one broker per side for the whole
run, so later rounds write into a log that has grown (as in the full benchmark).  Besides MB/s it
reports CPU per MB: the broker process's (from /proc), and this process's, which holds
librdkafka's producer threads and the Python loop feeding them, plus the mock itself when the
mock is measured.  On 2 CPUs the two shares add up to what a run can use::

    git worktree add /tmp/kwire-old HEAD~1
    python tools/produce_ab.py --old-src /tmp/kwire-old/src --rounds 6
"""

from __future__ import annotations

import json
import os
import resource
import sys

# consume_ab, beside this file, also puts benchmarks/ on the path for bench_broker.
from consume_ab import ab_parser, bench, brokers_ab, parse_ab


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _broker_cpu(broker) -> float:
    if broker is None:
        return 0.0
    with open(f"/proc/{broker.pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = ab_parser(__doc__.splitlines()[0], 6, "runs per side, interleaved")
    parser.add_argument("--acks", default="1", choices=["0", "1", "all"], help="acks (default 1)")
    parser.add_argument("--messages", type=int, default=200_000, help="values per run (default 200,000)")
    args = parse_ab(parser, argv)

    problems: list[str] = []
    rounds: dict[str, list[dict]] = {"old": [], "new": [], "mock": []}
    with brokers_ab(args.old_src) as (old, new, mock):
        sides = {"old": old, "new": new, "mock": mock}
        for broker in (old, new):
            bench.create_topic(broker.bootstrap, "ab", problems)
        for i in range(args.rounds):
            for name, broker in sides.items():
                own = broker if name != "mock" else None
                client0, broker0 = _process_cpu(), _broker_cpu(own)
                run = bench.produce_run(broker.bootstrap, "ab", args.size, args.acks, bench.PARTITIONS,
                                        args.messages, 60, problems, name)
                mb = run["bytes"] / 1e6
                row = {"mb_per_s": run["mb_per_s"], "client_ms_per_mb": 1e3 * (_process_cpu() - client0) / mb,
                       "broker_ms_per_mb": 1e3 * (_broker_cpu(own) - broker0) / mb}
                rounds[name].append(row)
                bench.log(f"round {i + 1}/{args.rounds} {name}: {row['mb_per_s']:,.1f} MB/s, CPU ms/MB "
                          f"client {row['client_ms_per_mb']:.2f} broker {row['broker_ms_per_mb']:.2f}")
    if problems:
        print("problems:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"size": args.size, "acks": args.acks, "rounds": rounds}, indent=2))
        return 0
    print(f"produce {args.size} B values, acks={args.acks}, {args.messages:,} per run, {args.rounds} interleaved "
          "rounds; CPU in ms per MB (client: this process, with the mock inside it when measuring the mock)")
    print(f"{'broker':8} {'median MB/s':>12} {'best MB/s':>10} {'client CPU':>11} {'broker CPU':>11}  MB/s per round")
    for name, runs in rounds.items():
        rates = sorted(r["mb_per_s"] for r in runs)
        client = sorted(r["client_ms_per_mb"] for r in runs)[len(runs) // 2]
        broker = sorted(r["broker_ms_per_mb"] for r in runs)[len(runs) // 2]
        print(f"{name:8} {rates[len(rates) // 2]:>12,.1f} {rates[-1]:>10,.1f} {client:>11.2f} {broker:>11.2f}  "
              + " ".join(f"{r['mb_per_s']:,.0f}" for r in runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
