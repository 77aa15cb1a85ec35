"""Record batch v2 throughput: kwire vs kafka-python, side by side in one process.

Cases: encode (build a batch by appending records one by one, then compress and CRC) and
decode (parse a batch, decompress, and read offset, key and value of every record), for the
codecs none, lz4 and zstd by default.  Every case is timed for about ``--seconds`` per library,
alternating the two, and the best run is reported as records/s.

    python benchmarks/bench_records.py [--records 10000] [--value-size 100] [--seconds 1.5]
                                       [--codecs none,lz4,zstd] [--payload hex|json|random] [--json]

kafka-python needs its optional codec packages for lz4/zstd (``lz4``, ``zstandard``; and
``python-snappy`` for snappy); cases whose codec kafka-python cannot use are reported as such.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import statistics
import sys
import time

from kwire.protocol.records import Compression, RecordBatchBuilder, iter_batches

try:
    import kafka
    import kafka.codec as kafka_codec
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
except ImportError:  # pragma: no cover - the dev extra installs it
    kafka = None

CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
BASE_TS = 1_700_000_000_000


PAYLOADS = ("hex", "json", "random")


def make_records(n: int, value_size: int, payload: str = "hex") -> list[tuple[bytes, bytes, int]]:
    """Keys of 9 bytes and ``value_size``-byte values, timestamps 1 ms apart.

    Values: "hex" is random hex text (compresses about 2:1 and is the slowest input for the
    compressors, so their shared cost weighs most: the conservative default); "json" is
    JSON-like event text (compresses well); "random" is incompressible bytes.
    """
    rnd = random.Random(42)
    out = []
    for i in range(n):
        if payload == "hex":
            value = rnd.getrandbits(value_size * 4).to_bytes(value_size // 2 + 1, "big").hex()[:value_size].encode()
        elif payload == "json":
            text = (f'{{"user":{rnd.randrange(10**6)},"event":"{rnd.choice(("click", "view", "buy"))}",'
                    f'"page":"/p/{rnd.randrange(1000)}","ok":true,"pad":"')
            value = (text + "x" * value_size)[:value_size - 2].encode() + b'"}'
        else:
            value = rnd.randbytes(value_size)
        out.append((b"key-%05d" % i, value, BASE_TS + i))
    return out


def kafka_has_codec(codec: int) -> bool:
    if codec == 0:
        return True
    return {1: kafka_codec.has_gzip, 2: kafka_codec.has_snappy, 3: kafka_codec.has_lz4,
            4: kafka_codec.has_zstd}[codec]()


# -- the measured operations ---------------------------------------------------------------

def kwire_encode(records, codec):
    builder = RecordBatchBuilder(compression=codec)
    append = builder.append
    for key, value, ts in records:
        append(key, value, ts)
    return builder.build()


def kwire_encode_extend(items, codec):
    """``items`` are prebuilt (key, value, timestamp, headers) tuples, the shape extend() takes."""
    builder = RecordBatchBuilder(compression=codec)
    builder.extend(items)
    return builder.build()


def kafka_encode(records, codec):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    append = builder.append
    for offset, (key, value, ts) in enumerate(records):
        append(offset, timestamp=ts, key=key, value=value, headers=[])
    return builder.build()


def kwire_decode(data):
    n = 0
    for batch in iter_batches(data):
        for record in batch:
            record.offset  # noqa: B018
            record.key  # noqa: B018
            record.value  # noqa: B018
            n += 1
    return n


def kafka_decode(data):
    n = 0
    for record in DefaultRecordBatch(data):
        record.offset  # noqa: B018
        record.key  # noqa: B018
        record.value  # noqa: B018
        n += 1
    return n


# -- timing --------------------------------------------------------------------------------

def minor_faults() -> int:
    """Minor page faults of this process so far (pages the kernel mapped in on first touch)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def race(funcs: dict[str, callable], seconds: float, faults: dict[str, float] | None = None,
         clock: callable = time.perf_counter) -> dict[str, float]:
    """Best time of each function by ``clock`` (wall time by default), running them alternately for
    about ``seconds`` each.  ``time.process_time`` leaves out the time other processes held the CPU:
    the steadier figure on a loaded machine.

    ``faults``, if given, receives each function's median minor page faults per call: a call that
    gets its large buffers from fresh mappings (malloc's choice, which depends on what ran before
    in the process) pays a fault per 4 KiB page, a cost of the heap's history, not of the code.
    """
    best = {name: float("inf") for name in funcs}
    spent = {name: 0.0 for name in funcs}
    paged: dict[str, list[int]] = {name: [] for name in funcs}
    runs = 0
    while runs < 3 or min(spent.values()) < seconds:
        for name, fn in funcs.items():
            f0 = minor_faults()
            t0 = clock()
            fn()
            elapsed = clock() - t0
            paged[name].append(minor_faults() - f0)
            spent[name] += elapsed
            best[name] = min(best[name], elapsed)
        runs += 1
    if faults is not None:
        faults.update((name, statistics.median(counts)) for name, counts in paged.items())
    return best


def check_same(kwire_data: bytes, kafka_data: bytes) -> None:
    """Both libraries must read both batches to the same records, or the race means nothing."""
    ours = [(r.offset, r.timestamp, r.key, r.value) for b in iter_batches(kafka_data) for r in b]
    theirs = [(r.offset, r.timestamp, r.key, r.value) for r in DefaultRecordBatch(kwire_data)]
    if ours != theirs:
        raise SystemExit("kwire and kafka-python disagree on the benchmark batches")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=1.5, help="time budget per library per case")
    parser.add_argument("--codecs", default="none,lz4,zstd")
    parser.add_argument("--payload", choices=PAYLOADS, default="hex", help="kind of values (see make_records)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args(argv)
    if kafka is None:
        raise SystemExit("kafka-python is not installed (pip install -e '.[dev]')")

    records = make_records(args.records, args.value_size, args.payload)
    n = len(records)
    results = []
    for name in args.codecs.split(","):
        codec = CODECS[name.strip()]
        if not kafka_has_codec(codec):
            results.append({"case": f"encode {name}", "skipped": f"kafka-python has no {name} library"})
            results.append({"case": f"decode {name}", "skipped": f"kafka-python has no {name} library"})
            continue
        kafka_data = bytes(kafka_encode(records, codec))
        kwire_data = kwire_encode(records, codec)
        check_same(kwire_data, kafka_data)

        t = race({"kwire": lambda c=codec: kwire_encode(records, c),
                  "kafka": lambda c=codec: kafka_encode(records, c)}, args.seconds)
        results.append({"case": f"encode {name}", "kwire": n / t["kwire"], "kafka_python": n / t["kafka"]})
        items = [(key, value, ts, None) for key, value, ts in records]
        t = race({"kwire": lambda c=codec, items=items: kwire_encode_extend(items, c),
                  "kafka": lambda c=codec: kafka_encode(records, c)}, args.seconds)
        results.append({"case": f"encode {name} (kwire extend)", "kwire": n / t["kwire"],
                        "kafka_python": n / t["kafka"]})
        # Both decode the same bytes (kafka-python's), so neither benefits from its own layout.
        t = race({"kwire": lambda d=kafka_data: kwire_decode(d), "kafka": lambda d=kafka_data: kafka_decode(d)},
                 args.seconds)
        results.append({"case": f"decode {name}", "kwire": n / t["kwire"], "kafka_python": n / t["kafka"]})
    for r in results:
        if "kwire" in r:
            r["ratio"] = r["kwire"] / r["kafka_python"]

    meta = {"records": n, "value_size": args.value_size, "payload": args.payload, "python": platform.python_version(),
            "kafka_python": kafka.__version__, "platform": platform.platform()}
    if args.json:
        json.dump({"meta": meta, "results": results}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{n} records x {args.value_size}-byte {args.payload} values, Python {meta['python']}, "
          f"kafka-python {meta['kafka_python']}")
    print(f"{'case':<28} {'kwire rec/s':>14} {'kafka-python rec/s':>19} {'ratio':>7}")
    for r in results:
        if "skipped" in r:
            print(f"{r['case']:<28} skipped: {r['skipped']}")
        else:
            print(f"{r['case']:<28} {r['kwire']:>14,.0f} {r['kafka_python']:>19,.0f} {r['ratio']:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
