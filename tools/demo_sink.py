"""``make demo``: kwire's main job end to end on this machine, a topic into Parquet through Spark.

1. kwire's embedded broker, and an 8-partition topic ``events``.
2. A sample event stream produced into it with kwire's Producer (JSON values keyed by user:
   ``{"user": "user-42", "type": "click", "cents": 1999}``), with a progress bar.
3. ``kwire sink``'s job (``kwire.spark.sink_job``, the code behind the command) reading the
   topic with Spark: an aggregation per micro-batch (``--per-batch``: events and cents by type)
   into Parquet, Trigger.AvailableNow in micro-batches of at most 250,000 records, committing
   its offsets to consumer group ``demo-sink``, with live progress.
4. The Parquet read back through Spark, and a summary: events in = events counted in the
   Parquet, cents in = cents out, lag 0 on every partition (and in the group), throughput.

The aggregation is per micro-batch because Spark's file sinks take only appended rows: a
streaming GROUP BY would need an event-time window and a watermark, and the last windows would
wait for later events.  Each batch's totals are written to ``totals/batch_id=N`` (rewritten
whole if the batch is replayed after a crash); the summary adds them up.
"""

from __future__ import annotations

import argparse
import random
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kwire.broker import EmbeddedBroker
from kwire.cli.output import print_table
from kwire.client import Admin, NewTopic, Producer

TOPIC = "events"
GROUP = "demo-sink"
TYPES = ("view", "click", "cart", "purchase")
SQL = ("SELECT e.type AS type, count(*) AS events, sum(e.cents) AS cents, "
       "min(timestamp) AS first_ts, max(timestamp) AS last_ts "
       "FROM (SELECT from_json(CAST(value AS STRING), 'user STRING, type STRING, cents BIGINT') AS e, timestamp "
       "FROM events) GROUP BY e.type")


class Bar:
    """A progress bar on stderr: redrawn in place on a terminal, a line per 10% otherwise."""

    def __init__(self, total: int, what: str):
        self.total, self.what = total, what
        self.live = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.next_draw = 0.0
        self.next_tenth = 1

    def update(self, done: int) -> None:
        now = time.monotonic()
        rate = done / max(now - self.t0, 1e-9)
        if self.live and (now >= self.next_draw or done == self.total):
            self.next_draw = now + 0.2
            filled = int(30 * done / self.total)
            print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done / self.total:4.0%} {done:,}/{self.total:,} "
                  f"{self.what} ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)
        elif not self.live and done * 10 >= self.next_tenth * self.total:
            self.next_tenth += 1
            print(f"{done / self.total:4.0%} {done:,}/{self.total:,} {self.what} ({rate:,.0f}/s)",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.live:
            print(file=sys.stderr, flush=True)


def produce(bootstrap: str, events: int, partitions: int) -> tuple[dict[str, tuple[int, int]], float, int]:
    """The sample stream; per type (events, cents), the seconds it took and the value bytes."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions)])
    rnd = random.Random(5)
    totals = {t: [0, 0] for t in TYPES}
    size = 0
    bar = Bar(events, "events")
    t0 = time.monotonic()
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 256 * 1024,
                   "compression.type": "lz4"}) as producer:
        for i in range(events):
            user = rnd.randrange(50_000)
            kind = TYPES[rnd.randrange(4)]
            cents = rnd.randrange(1, 100_000) if kind == "purchase" else 0
            value = b'{"user": "user-%d", "type": "%s", "cents": %d, "seq": %d}' % (user, kind.encode(), cents, i)
            producer.produce(TOPIC, value, key=b"user-%d" % user)
            totals[kind][0] += 1
            totals[kind][1] += cents
            size += len(value)
            if i % 10_000 == 9_999:
                producer.poll(0)
                bar.update(i + 1)
        if producer.flush(120) != 0:
            raise SystemExit("the broker did not acknowledge every event within 120 s")
    bar.update(events)
    bar.close()
    return {t: (n, c) for t, (n, c) in totals.items()}, time.monotonic() - t0, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events to produce (default 1,000,000)")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--batch", type=int, default=250_000, help="max offsets per micro-batch (default 250,000)")
    ap.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    ap.add_argument("--out", type=Path, help="keep the Parquet and the checkpoint here (default: a temporary "
                                             "directory, removed at the end)")
    args = ap.parse_args()

    from kwire.spark.sink_job import SinkJob, java_missing, plural, run, spark_session

    if java_missing():
        print(f"make demo: {java_missing()}", file=sys.stderr)
        return 1
    out = args.out or Path(tempfile.mkdtemp(prefix="kwire-demo-"))
    if args.out and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with EmbeddedBroker() as broker:
            print(f"1. kwire's embedded broker at {broker.bootstrap}; topic {TOPIC!r}, {args.partitions} partitions",
                  file=sys.stderr)
            print(f"2. producing {args.events:,} JSON events keyed by user with kwire's Producer", file=sys.stderr)
            produced, produce_s, value_bytes = produce(broker.bootstrap, args.events, args.partitions)

            job = SinkJob(topic=TOPIC, bootstrap=broker.bootstrap, to=f"parquet:{out / 'totals'}",
                          checkpoint=str(out / "checkpoint"), sql=SQL, per_batch=True, trigger="availableNow",
                          max_offsets_per_trigger=args.batch, group=GROUP)
            command = ["kwire", "sink", "--topic", TOPIC, "--bootstrap", broker.bootstrap, "--to", str(job.to),
                       "--checkpoint", str(job.checkpoint), "--per-batch", "--sql", SQL, "--trigger", "availableNow",
                       "--max-offsets-per-trigger", str(args.batch), "--group", GROUP]
            print(f"3. the sink, as this command would run it:\n   {shlex.join(command)}", file=sys.stderr)
            t0 = time.monotonic()
            spark = spark_session(args.master, {"spark.ui.enabled": "false"}, app_name="kwire demo")
            spark_s = time.monotonic() - t0
            print(f"   Spark {spark.version} up in {spark_s:.1f} s ({args.master})", file=sys.stderr, flush=True)
            try:
                result = run(spark, job)
                if result.error:
                    print(f"the query failed: {result.error}", file=sys.stderr)
                    return 1
                print("4. reading the Parquet back through Spark", file=sys.stderr, flush=True)
                back = spark.read.parquet(str(out / "totals"))
                rows = back.groupBy("type").agg({"events": "sum", "cents": "sum", "batch_id": "count"}).collect()
                files = len(list((out / "totals").rglob("*.parquet")))
            finally:
                spark.stop()
            with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
                group_lag = admin.consumer_group_lag(GROUP)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)

    got = {r["type"]: (int(r["sum(events)"]), int(r["sum(cents)"]), int(r["count(batch_id)"])) for r in rows}
    print()
    print_table(["type", "events in", "events in Parquet", "cents in", "cents in Parquet"],
                [[t, f"{n:,}", f"{got.get(t, (0, 0, 0))[0]:,}", f"{c:,}", f"{got.get(t, (0, 0, 0))[1]:,}"]
                 for t, (n, c) in produced.items()], align_right=[1, 2, 3, 4])
    print()
    lag = result.lag
    committed = {(p.topic, p.partition): p.committed for p in group_lag.partitions}
    print_table(["partition", "query end offset", "log end", "lag", f"group {GROUP} committed"],
                [[p, f"{result.end_offsets.get((t, p), 0):,}", f"{end:,}", lag[(t, p)],
                  f"{committed.get((t, p)) or 0:,}"]
                 for (t, p), end in sorted(result.log_end_offsets.items())], align_right=[0, 1, 2, 3, 4])
    events_out = sum(n for n, _c, _b in got.values())
    ok = (events_out == args.events == result.rows
          and all(got.get(t, (0, 0))[:2] == produced[t] for t in produced)
          and sum(lag.values()) == 0 and len(lag) == args.partitions and group_lag.total == 0)
    print()
    print(f"events in {args.events:,} = read by Spark {result.rows:,} = counted in Parquet {events_out:,} "
          f"({plural(result.batches, 'micro-batch')}, {plural(files, 'Parquet file')}); lag 0 on all {len(lag)} partitions: "
          f"{'yes' if sum(lag.values()) == 0 else 'NO'}")
    print(f"produce: {args.events / produce_s:,.0f} events/s ({value_bytes / produce_s / 1e6:.1f} MB/s of JSON); "
          f"sink: {result.rows_per_second:,.0f} events/s over {result.seconds:.1f} s "
          f"(Spark start {spark_s:.1f} s not counted)")
    print("OK: every event is in the Parquet exactly once" if ok else "MISMATCH: see the tables above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
