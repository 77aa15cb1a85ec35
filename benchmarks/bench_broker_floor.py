"""How far a Python broker can get: librdkafka's mock, kwire's broker and kwire's broker with
storage made free (the floor), side by side in one run, on the produce cases of bench_broker.py.

- mock: librdkafka's mock cluster (``test.mock.num.brokers``), in this process, as in bench_broker.py;
- kwire: ``kwire broker --fsync never``, as in bench_broker.py;
- floor: ``benchmarks/floor_broker.py``, kwire's broker whose Produce requests are received by
  its network layer and decoded by its codec, then answered with a success answer encoded once
  and reused (no checks, no log, no disk): what any broker built on kwire's network layer and
  codec would cost, however cheap its storage.

Cases: produce latency (1 KiB at --rate msgs/s, linger.ms 0, acks=1 and acks=all; p50 of
librdkafka's produce()-to-delivery-report time) in alternated slices, and produce throughput to
one partition (1 KiB and 100 B, acks=1; linger.ms 10, batch.size 1 MB), alternated runs, best
kept.  The clients, topics and settings are bench_broker.py's own (imported from it).

    python benchmarks/bench_broker_floor.py [--rate 1000] [--latency-seconds 6] [--repeat 3] [--uvloop] [--json]

``--uvloop`` adds the floor once more on uvloop's event loop (libuv, in C): how much of what is
left is asyncio's own event loop.

Ratios against the mock as in bench_broker.py: latency mock/x and throughput x/mock, so above
1.0 means faster than the mock.  Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
from pathlib import Path

import confluent_kafka
from bench_broker import (
    KwireBroker,
    LatencyProducer,
    MockCluster,
    best,
    create_topic,
    latency_summary,
    log,
    produce_run,
)

FLOOR = [str(Path(__file__).with_name("floor_broker.py"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="messages/s of the latency runs (default 1000)")
    parser.add_argument("--latency-seconds", type=float, default=6.0,
                        help="length of each peer's latency run, in 6 alternated slices (default 6)")
    parser.add_argument("--messages", type=int, default=200_000, help="messages per produce run (default 200,000)")
    parser.add_argument("--seconds", type=float, default=20.0, help="time limit of each produce run (default 20)")
    parser.add_argument("--repeat", type=int, default=3, help="produce runs per case and peer; best kept (default 3)")
    parser.add_argument("--uvloop", action="store_true",
                        help="also run the floor on uvloop's event loop (libuv, in C; pip install uvloop)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args(argv)
    peers = ("mock", "kwire", "floor") + (("floor-uvloop",) if args.uvloop else ())
    if args.uvloop:
        try:
            import uvloop  # noqa: F401 - only checked here; the floor's process imports it
        except ImportError:
            parser.error("--uvloop needs uvloop installed (pip install uvloop)")

    problems: list[str] = []
    started: dict = {}
    results: dict = {"latency": [], "produce": []}
    try:
        log("starting the mock, the kwire broker and the floor")
        started["mock"] = MockCluster()
        started["kwire"] = KwireBroker("never")
        started["floor"] = KwireBroker("never", entry=FLOOR)
        if args.uvloop:
            started["floor-uvloop"] = KwireBroker("never", entry=[*FLOOR, "--uvloop"])
        brokers = {name: started[name].bootstrap for name in peers}

        for acks in ("1", "all"):
            topic = f"l-{acks}"
            for name in peers:
                create_topic(brokers[name], topic, problems)
            senders = {name: LatencyProducer(brokers[name], topic, acks, 1024, args.rate) for name in peers}
            slices = 6
            for i in range(slices):
                order = peers[i % len(peers):] + peers[:i % len(peers)]
                for name in order:
                    senders[name].run(args.latency_seconds / slices)
            row = {"case": f"1 KiB at {args.rate:,.0f} msgs/s acks={acks}"}
            for name, sender in senders.items():
                if sender.errors:
                    problems.append(f"latency acks={acks} {name}: {len(sender.errors)} delivery errors, "
                                    f"e.g. {sender.errors[:3]}")
                row[name] = latency_summary(sender.lat)
                row[name]["slice_p50_ms"] = sender.slice_p50_ms
                log(f"latency acks={acks} {name}: p50 {row[name]['p50_ms']:.3f} ms, slices "
                    + " ".join(f"{x:.3f}" for x in sender.slice_p50_ms))
            del senders
            results["latency"].append(row)

        for size in (1024, 100):
            case = f"{'1 KiB' if size == 1024 else f'{size} B'} acks=1 partitions=1"
            runs: dict[str, list[dict]] = {name: [] for name in peers}
            for rep in range(args.repeat):
                for name in peers[rep % len(peers):] + peers[:rep % len(peers)]:
                    topic = f"p-{size}-r{rep}"
                    create_topic(brokers[name], topic, problems)
                    label = f"produce {case} {name} #{rep + 1}"
                    r = produce_run(brokers[name], topic, size, "1", 1, args.messages, args.seconds, problems, label)
                    runs[name].append(r)
                    log(f"{label}: {r['mb_per_s']:,.1f} MB/s")
            results["produce"].append({"case": case, **{name: best(runs[name], "mb_per_s") for name in peers},
                                       "runs_mb_per_s": {name: [r["mb_per_s"] for r in runs[name]] for name in peers}})
    finally:
        gc.collect()  # the clients' Producers go first: no reconnect attempts to stopped brokers
        for name in ("kwire", "floor", "floor-uvloop"):
            broker = started.get(name)
            if broker is not None:
                broker.stop()
                broker.cleanup()
        started.pop("mock", None)

    meta = {"python": platform.python_version(), "librdkafka": confluent_kafka.libversion()[0],
            "cpus": os.cpu_count(), "rate": args.rate, "repeat": args.repeat}
    results["problems"] = problems
    if args.json:
        print(json.dumps({"meta": meta, **results}, indent=2))
        return 1 if problems else 0
    print(f"the mock, kwire's broker and kwire's broker with storage made free (floor); librdkafka "
          f"{meta['librdkafka']}, Python {meta['python']}, {meta['cpus']} CPUs; ratios against the mock, "
          "above 1.0: faster than the mock")
    others = peers[1:]
    head = "".join(f"{name:>13}" for name in peers) + "".join(f"{name + ' ratio':>19}" for name in others)
    print(f"{'produce latency p50, ms':<36}{head}")
    for row in results["latency"]:
        p50 = {name: row[name]["p50_ms"] for name in peers}
        print(f"{row['case']:<36}" + "".join(f"{p50[name]:>13.3f}" for name in peers)
              + "".join(f"{p50['mock'] / p50[name]:>18.2f}x" for name in others))
    print(f"{'produce throughput, MB/s (best)':<36}{head}")
    for row in results["produce"]:
        rate = {name: row[name]["mb_per_s"] for name in peers}
        print(f"{row['case']:<36}" + "".join(f"{rate[name]:>13,.1f}" for name in peers)
              + "".join(f"{rate[name] / rate['mock']:>18.2f}x" for name in others))
    for problem in problems:
        print(f"PROBLEM: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
