"""The record layer's own costs, two kwire trees side by side in one run (issue 25, one record layer).

Cases, each timed as the best of ``--repeat`` runs of about ``--seconds``:
- columns: ``kwire.spark.columns.batches_to_arrow`` over 8 batches x 1,000 records (12-byte
  keys, 100-byte values): the record walk with its compiled accelerator, and with the Python
  fallback (the compiled helper hidden, as on a machine without a C compiler);
- headers: ``iter_batches`` over a fetch answer of 2,000 one-record batches, reading each
  batch's header fields and checking its CRC (what the consumer's fetcher and the broker's
  validation do per batch);
- records: ``RecordBatch.records()`` over the same 8 batches (the per-record decoder), with the
  compiled walk and with the Python one (a tree without the switch decodes in Python anyway);
- consumer slices: what the client's fetcher does with a fetched batch, ``RecordBatch.reader``
  into ``kwire.client.ConsumerRecord`` and ``take`` 500 records (max.poll.records) at a time;
- cleaner map: the log cleaner's two compiled walks over one of those batches
  (``OffsetMap.put_records`` then ``keep_records``, keys hashed and looked up: MD5 included);
- columns with headers: ``batches_to_arrow`` with the headers column, over 2 batches x 1,000
  records of three headers each (one null value), in a bytearray as a fetch answer is.

    python benchmarks/bench_record_walk.py --trees OLD/src NEW/src [--rounds 4] [--seconds 0.5]

Each tree runs in its own process (``PYTHONPATH``), alternated round by round (ABBA); the table gives
ns per record or batch and new/old (< 1: the new tree is faster).  Without ``--trees`` it times
the kwire it imports and prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CASES = ("columns, compiled walk", "columns, Python walk", "headers + CRC per batch", "records() per record",
         "records(), Python walk", "consumer slices per record", "cleaner map put+keep per record",
         "columns with 3 headers a record")


def _best(fn, seconds: float, repeat: int) -> float:
    fn()  # warm-up, untimed: the first Arrow calls load pyarrow's compute functions (seconds)
    best = float("inf")
    for _ in range(repeat):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        best = min(best, elapsed / n)
    return best


def measure(seconds: float, repeat: int) -> dict[str, float]:
    """ns per record (columns) or per batch (headers) of each case, for the kwire imported."""
    from kwire.protocol.records import RecordBatchBuilder, iter_batches
    from kwire.protocol.records.batch import RecordBatch
    from kwire.spark import columns

    rng = __import__("random").Random(25)
    batches, blobs = [], []
    for b in range(8):
        builder = RecordBatchBuilder(base_offset=b * 1000)
        for i in range(1000):
            builder.append(b"key-%08d" % i, rng.randbytes(100), 1_700_000_000_000 + i)
        blobs.append(builder.build())
    answer = b"".join(blobs)
    pos = 0
    for blob in blobs:
        batches.append(RecordBatch(answer, pos))
        pos += len(blob)
    small = []
    for i in range(2000):
        builder = RecordBatchBuilder(base_offset=i)
        builder.append(b"k", rng.randbytes(50), 1_700_000_000_000 + i)
        small.append(builder.build())
    fetch = b"".join(small)

    def to_arrow():
        columns.batches_to_arrow(batches, "t", 0, False)

    def headers():
        for batch in iter_batches(fetch):
            batch.validate()
            _ = (batch.base_offset, batch.last_offset, batch.producer_id, batch.is_control, batch.max_timestamp)

    out = {CASES[0]: _best(to_arrow, seconds, repeat) / 8000 * 1e9}
    # The Python fallback: the compiled helper hidden from both the walk and the columns, as
    # each tree knows it (the old tree has no walk module).
    hidden = [(columns, "_layout")]
    try:
        from kwire.protocol.records import walk
        hidden.append((walk, "_layout"))
        walk._warned = True
    except ImportError:
        pass
    saved = [(mod, name, getattr(mod, name)) for mod, name in hidden]
    for mod, name in hidden:
        setattr(mod, name, None)
    try:
        out[CASES[1]] = _best(to_arrow, seconds, repeat) / 8000 * 1e9
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)
    out[CASES[2]] = _best(headers, seconds, repeat) / 2000 * 1e9

    from kwire.client import ConsumerRecord
    from kwire.protocol.records import batch as batch_module

    def records():
        for batch in batches:
            batch.records()

    def consume():
        for batch in batches:
            reader = batch.reader((ConsumerRecord, "t", 0))
            while not reader.done:
                reader.take(500)

    out[CASES[3]] = _best(records, seconds, repeat) / 8000 * 1e9
    saved_walk = getattr(batch_module, "_COMPILED_WALK", None)
    batch_module._COMPILED_WALK = False  # new trees: the walk's Python fallback; old trees decode in Python
    try:
        out[CASES[4]] = _best(records, seconds, repeat) / 8000 * 1e9
    finally:
        batch_module._COMPILED_WALK = saved_walk
    out[CASES[5]] = _best(consume, seconds, repeat) / 8000 * 1e9

    from kwire.broker.storage.offset_map import OffsetMap

    buf, start, stop, _ = batches[0].records_section()

    def cleaner_map():
        with OffsetMap(1 << 20) as offsets:
            offsets.put_records(buf, start, stop, 1000, 0, 0)
            offsets.keep_records(buf, start, stop, 1000, 0, True)

    out[CASES[6]] = _best(cleaner_map, seconds, repeat) / 2000 * 1e9

    blobs = []
    for b in range(2):
        builder = RecordBatchBuilder(base_offset=b * 1000)
        for i in range(1000):
            builder.append(b"key-%08d" % i, rng.randbytes(100), 1_700_000_000_000 + i,
                           [("trace", b"%016x" % i), ("dup", None), ("dup", b"x")])
        blobs.append(builder.build())
    with_headers = bytearray(b"".join(blobs))
    headed = [RecordBatch(with_headers, 0), RecordBatch(with_headers, len(blobs[0]))]
    out[CASES[7]] = _best(lambda: columns.batches_to_arrow(headed, "t", 0, True), seconds, repeat) / 2000 * 1e9
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, metavar=("OLD_SRC", "NEW_SRC"), help="two kwire src directories")
    parser.add_argument("--rounds", type=int, default=4, help="alternated rounds (default 4)")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per timed run (default 0.5)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case and round; best kept")
    args = parser.parse_args(argv)
    if not args.trees:
        print(json.dumps(measure(args.seconds, args.repeat)))
        return 0
    results: dict[str, list[dict[str, float]]] = {tree: [] for tree in args.trees}
    for round_ in range(args.rounds):
        # ABBA: the tree that runs second in a round measured slower on a loaded machine,
        # whichever it was, so each goes first every other round.
        for tree in args.trees if round_ % 2 == 0 else args.trees[::-1]:
            env = dict(os.environ, PYTHONPATH=tree)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            done = subprocess.run([sys.executable, __file__, "--seconds", str(args.seconds), "--repeat",
                                   str(args.repeat)], env=env, capture_output=True, text=True, timeout=600, check=True)
            results[tree].append(json.loads(done.stdout))
            print(f"round {round_ + 1} {tree}: {done.stdout.strip()}", file=sys.stderr)
    old, new = args.trees
    print(f"{'case':28} {'old ns':>10} {'new ns':>10} {'new/old':>8}   (best of {args.rounds} alternated rounds)")
    for case in CASES:
        o = min(r[case] for r in results[old])
        n = min(r[case] for r in results[new])
        print(f"{case:28} {o:10.0f} {n:10.0f} {n / o:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
