"""The codec benchmark: kwire against kafka-python 3.0.12, side by side in one process.

One command, one table:
- record batch v2 encode and decode-and-iterate of 10,000 records x 100 B, codecs none, lz4, zstd
  (records/s; the cases of bench_records.py, which has more options);
- MetadataResponse of 100 topics x 10 partitions, decode and encode, v1 and v12 (messages/s).

    python benchmarks/bench_protocol.py [--seconds 1.5] [--json]

Goals (issue: the codec): kwire >= 2x kafka-python on batch encode and decode, faster on the
MetadataResponse.  Figures and the command go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_metadata  # noqa: E402
import bench_records  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="time budget per library per case")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time each call by the wall clock, or by this process's CPU time (steadier under load)")
    args = parser.parse_args(argv)
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    rows = []
    records = bench_records.make_records(10_000, 100, "hex")
    n = len(records)
    for name in ("none", "lz4", "zstd"):
        codec = bench_records.CODECS[name]
        if not bench_records.kafka_has_codec(codec):
            raise SystemExit(f"kafka-python lacks its {name} library: pip install -e '.[dev]'")
        kafka_data = bytes(bench_records.kafka_encode(records, codec))
        bench_records.check_same(bench_records.kwire_encode(records, codec), kafka_data)
        faults: dict[str, float] = {}
        t = bench_records.race({"kwire": lambda c=codec: bench_records.kwire_encode(records, c),
                                "kafka": lambda c=codec: bench_records.kafka_encode(records, c)}, args.seconds, faults, clock)
        rows.append({"case": f"batch v2 encode {name}", "unit": "records", "kwire": n / t["kwire"],
                     "kafka_python": n / t["kafka"], "kwire_faults": faults["kwire"]})
        t = bench_records.race({"kwire": lambda d=kafka_data: bench_records.kwire_decode(d),
                                "kafka": lambda d=kafka_data: bench_records.kafka_decode(d)}, args.seconds, faults, clock)
        rows.append({"case": f"batch v2 decode+iterate {name}", "unit": "records", "kwire": n / t["kwire"],
                     "kafka_python": n / t["kafka"], "kwire_faults": faults["kwire"]})
    for case, ours, theirs in bench_metadata.cases():
        faults = {}
        t = bench_records.race({"kwire": ours, "kafka": theirs}, args.seconds, faults, clock)
        rows.append({"case": case, "unit": "messages", "kwire": 1 / t["kwire"], "kafka_python": 1 / t["kafka"],
                     "kwire_faults": faults["kwire"]})
    for r in rows:
        r["ratio"] = r["kwire"] / r["kafka_python"]

    import kafka

    meta = {"python": platform.python_version(), "kafka_python": kafka.__version__, "platform": platform.platform(),
            "seconds_per_case": args.seconds, "clock": args.clock}
    if args.json:
        json.dump({"meta": meta, "results": rows}, sys.stdout, indent=2)
        print()
        return 0
    print(f"kwire vs kafka-python {meta['kafka_python']}, Python {meta['python']}, best of ~{args.seconds}s each ({args.clock} clock)")
    print(f"{'case':<42} {'unit':<9} {'kwire /s':>12} {'kafka-python /s':>16} {'ratio':>7}")
    for r in rows:
        print(f"{r['case']:<42} {r['unit']:<9} {r['kwire']:>12,.0f} {r['kafka_python']:>16,.0f} {r['ratio']:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
