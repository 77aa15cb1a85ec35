"""``kwire sink``: a topic into Parquet, JSON or the console through a Spark streaming query.

    kwire sink --topic events --to parquet:out/events --checkpoint out/ckpt
    kwire sink --topic events --to json:out/clicks --checkpoint out/ckpt2 \\
        --sql "SELECT key, CAST(value AS STRING) AS json FROM events WHERE value LIKE '%click%'"
    kwire sink --topic events --to parquet:out/totals --checkpoint out/ckpt3 --per-batch \\
        --sql "SELECT CAST(key AS STRING) AS user, count(*) AS n FROM events GROUP BY 1" --trigger availableNow
    kwire sink --topic events --to console --transform mymodule:clean
    kwire sink --topic events --to parquet:out --checkpoint ck --master spark://host:7077 -c spark.executor.memory=2g

The query reads the topic with kwire's Spark data source; ``events`` is a view of its rows (key
and value binary, topic, partition, offset, timestamp, timestampType).  ``--sql`` or
``--transform module:function`` (a function of a DataFrame returning one) shape them.  Files are
written exactly-once through the checkpoint: a run stopped or killed in the middle and started
again with the same ``--checkpoint`` carries on where the last finished micro-batch ended.
Aggregations need ``--per-batch`` (the SQL runs on each micro-batch; see kwire.spark.sink_job).

Progress goes to stderr from the first second: while Spark starts and the query starts, a
status line counting the seconds on a terminal (else a line per step), then a status line (else
one line per micro-batch: rows, rows/s, lag per partition).  At the end (``availableNow`` or
``once`` done, Ctrl-C or SIGTERM), a summary on stdout: rows read, rows written and rows
filtered (read minus written: what the SQL or function left out), batches, throughput, and for
each partition the query's end offset, the log end and the lag; ``--json`` makes it one JSON
document.  Rows written are Spark's count where its sink keeps one (numOutputRows: console),
else counted on the way to the sink (``Dataset.observe``); the summary says which.

Ctrl-C or SIGTERM stops the query between two micro-batches (the one under way finishes first,
for 30 s at most), prints the summary and exits 0, as an ``availableNow`` run that ended; while
Spark is still starting it stops Spark once it is up and prints the summary of no rows.  A
second Ctrl-C stops the query at once (the summary still, exit 0), or quits at once while Spark
starts (exit 130).  Spark's JVM runs in a session of its own, so the
terminal's Ctrl-C reaches only kwire, not Spark's Python workers.

With no ``--bootstrap`` (and no ``$KWIRE_BOOTSTRAP``) the command starts kwire's embedded broker
on 127.0.0.1:9092 with its data in ./kwire-data (``--broker-port``, ``--broker-data-dir``) and
says so: other kwire commands reach it by their defaults (``kwire produce events ...``).

Exit status: 0 when the query ended as it should (or was stopped), 1 when it failed (the reason on stderr), 2
for arguments that cannot work (named in the message), before Spark starts where possible.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from typing import Any

from .arg_types import key_value, positive_int
from .client_options import BOOTSTRAP_ENV
from .output import fail, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sink", help="a topic into Parquet/JSON/console through a Spark streaming query",
        description="Run a Spark streaming query from a topic, through your SQL or DataFrame function, into "
                    "Parquet or JSON files (exactly-once through the checkpoint) or the console, with live "
                    "progress. Needs PySpark and Java 17.",
        epilog="The SQL sees the topic as the view 'events' (key, value binary; topic, partition, offset, "
               "timestamp, timestampType). Aggregations (GROUP BY) into files need --per-batch.")
    p.add_argument("--topic", "-t", required=True, metavar="TOPIC[,TOPIC...]", help="the topic(s) to read")
    p.add_argument("--to", required=True, metavar="parquet:PATH|json:PATH|console", help="where rows go")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--sql", metavar="QUERY", help="SELECT ... FROM events")
    shape.add_argument("--transform", metavar="MODULE:FUNCTION",
                       help="a Python function taking the events DataFrame and returning the one to write")
    p.add_argument("--per-batch", action="store_true",
                   help="run the SQL/function on each micro-batch as a batch query (aggregations): batch N goes "
                        "to PATH/batch_id=N, rewritten whole if replayed, so still exactly-once")
    p.add_argument("--checkpoint", metavar="DIR", help="the query's checkpoint (required for files)")
    p.add_argument("--trigger", default="processingTime=1s", metavar="availableNow|once|processingTime=5s",
                   help="availableNow: what is there now, then stop; once: one batch; processingTime=INTERVAL: a "
                        "batch every INTERVAL until Ctrl-C/SIGTERM (default processingTime=1s)")
    p.add_argument("--starting-offsets", default="earliest", metavar="earliest|latest|JSON",
                   help="where a new checkpoint starts (default earliest); a used checkpoint carries on")
    p.add_argument("--max-offsets-per-trigger", type=positive_int, metavar="N",
                   help="at most N records per micro-batch, shared by the partitions' backlogs")
    p.add_argument("--group", metavar="GROUP",
                   help="commit each finished batch's end offsets to this consumer group (kwire lag GROUP)")
    p.add_argument("-X", dest="options", metavar="OPTION=VALUE", type=key_value, action="append", default=[],
                   help="a kwire source option: kafka.* for its client (-X kafka.isolation.level=read_committed) "
                        "or the source's own (-X failOnDataLoss=false, -X minPartitions=8); repeatable")
    spark = p.add_argument_group("Spark")
    spark.add_argument("--master", default="local[*]",
                       help="Spark master (default local[*]; spark://HOST:7077 for a standalone cluster, kwire "
                            "shipped to its executors)")
    spark.add_argument("-c", "--conf", dest="conf", metavar="KEY=VALUE", type=key_value, action="append",
                       default=[], help="a Spark setting, as spark-submit --conf (repeatable)")
    cluster = p.add_argument_group("cluster connection")
    cluster.add_argument("-b", "--bootstrap", metavar="HOST:PORT[,...]",
                         help=f"Kafka bootstrap servers (default ${BOOTSTRAP_ENV}; without either, kwire's "
                              "embedded broker is started)")
    cluster.add_argument("--broker-port", type=int, default=9092, metavar="PORT",
                         help="the embedded broker's port (default 9092; 0 picks a free one)")
    cluster.add_argument("--broker-data-dir", default="kwire-data", metavar="DIR",
                         help="the embedded broker's data (default ./kwire-data)")
    p.add_argument("--console-rows", type=positive_int, default=20, metavar="N",
                   help="--to console: show N rows of each micro-batch (default 20)")
    p.add_argument("--json", action="store_true", help="the closing summary as one JSON document on stdout")
    p.set_defaults(func=run)


def _job(args: argparse.Namespace, bootstrap: str):
    from kwire.spark.sink_job import SinkJob

    return SinkJob(topic=args.topic, bootstrap=bootstrap, to=args.to, checkpoint=args.checkpoint, sql=args.sql,
                   transform=args.transform, per_batch=args.per_batch, trigger=args.trigger,
                   starting_offsets=args.starting_offsets, max_offsets_per_trigger=args.max_offsets_per_trigger,
                   group=args.group, options=dict(args.options), console_rows=args.console_rows)


def _bad(exc: Exception) -> int:
    flag = getattr(exc, "flag", None)
    return fail(f"{flag}: {exc}" if flag else str(exc), 2)


def run(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return fail("kwire sink needs PySpark (pip install 'kwire[spark]') and Java 17", 1)
    from kwire.spark.sink_job import SinkError, java_missing

    bootstrap = args.bootstrap or os.environ.get(BOOTSTRAP_ENV)
    # Everything that can be checked without Spark or a broker, before either starts.
    try:
        _job(args, bootstrap or "127.0.0.1:9092")
    except SinkError as exc:
        return _bad(exc)
    if java_missing():  # the driver runs here, in any mode
        return fail(java_missing(), 1)

    with contextlib.ExitStack() as stack:
        if not bootstrap:
            from kwire.broker import EmbeddedBroker

            try:
                broker = stack.enter_context(EmbeddedBroker(args.broker_data_dir, port=args.broker_port))
            except OSError as exc:
                return fail(f"cannot start the embedded broker on port {args.broker_port}: {exc} (is a broker "
                            "already there? then give --bootstrap localhost:9092)", 1)
            bootstrap = broker.bootstrap
            print(f"kwire sink: no --bootstrap: started kwire's embedded broker at {bootstrap} (data in "
                  f"{broker.data_dir}); write to it with kwire produce {args.topic.split(',')[0]} --bootstrap "
                  f"{bootstrap} ...", file=sys.stderr, flush=True)
        job = _job(args, bootstrap)
        return _run_job(args, job)
    return 0


def _run_job(args: argparse.Namespace, job) -> int:
    import time

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from kwire.spark.sink_job import ProgressPrinter, SinkError, SinkResult, run, spark_session

    owned = SparkSession.getActiveSession() is None
    progress = ProgressPrinter()
    progress.note(f"{job.describe()} on Spark {args.master}")
    # Ctrl-C and SIGTERM ask for a clean stop (the query stopped between two micro-batches, the
    # summary printed); a second Ctrl-C interrupts at once.  Installed before Spark starts, which
    # takes a while: a Ctrl-C then stops Spark once it is up.
    stop: list[int] = []
    starting = [True]

    def on_signal(signum: int, frame: Any) -> None:
        if stop and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.append(signum)
        name = signal.Signals(signum).name
        progress.note(f"{name}: stopping Spark once it is up (Ctrl-C again to quit now)" if starting[0] else
                      f"{name}: stopping the query once its micro-batch under way is done (Ctrl-C again to "
                      "stop it now)")

    def install() -> dict[int, Any]:
        previous = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread (run from Python): no handler
                previous[signum] = signal.signal(signum, on_signal)
        return previous

    previous = install()
    t0 = time.monotonic()
    spark = None
    try:
        progress.step(f"starting Spark ({args.master})")
        try:
            spark = spark_session(args.master, dict(args.conf))
        except KeyboardInterrupt:
            if stop:  # a second Ctrl-C: quit now (the JVM ends with this process: its stdin closes)
                owned = False
                raise
            # Spark's own SIGINT handler (SparkContext puts it in while it starts) took the Ctrl-C.
            stop.append(signal.SIGINT)
            spark = SparkSession.getActiveSession()
        install()  # again: in place of Spark's, which would cancel the jobs and raise in the middle
        starting[0] = False
        if stop:
            progress.close()
            result = SinkResult.not_started(job, time.monotonic() - t0)
        else:
            try:
                result = run(spark, job, progress=progress, should_stop=lambda: bool(stop))
            except SinkError as exc:
                return _bad(exc)
    finally:
        progress.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if owned:
            if spark is not None:
                spark.stop()
            elif SparkContext._active_spark_context is not None:  # interrupted half-way through starting
                SparkContext._active_spark_context.stop()
    _summary(args, job, result)
    if result.error:
        return fail(f"the query failed: {result.error}", 1)
    return 0


def _summary(args: argparse.Namespace, job, result) -> None:
    from kwire.spark.sink_job import WRITTEN_BY, plural

    if args.json:
        print_json({**result.to_json(), "to": str(job.to), "bootstrap": job.bootstrap})
        return
    how = "stopped" if result.stopped else "failed" if result.error else "done"
    if result.rows_written is None:
        written = "rows written not counted (--per-batch to the console)"
    else:
        by = f" ({WRITTEN_BY[result.written_by]})" if result.written_by else ""
        written = f"{result.rows_written:,} written{by}, {result.rows_filtered:,} filtered"
    print(f"{result.query_name} ({how}): {result.rows_read:,} rows read, {written}; "
          f"{plural(result.batches, 'batch')}, {result.seconds:.1f} s, {result.rows_per_second:,.0f} rows/s read "
          f"-> {job.to}")
    lag = result.lag
    if result.log_end_offsets:
        print_table(["TOPIC", "PARTITION", "END OFFSET", "LOG END", "LAG"],
                    [[t, p, result.end_offsets.get((t, p), "-"), end, lag[(t, p)]]
                     for (t, p), end in sorted(result.log_end_offsets.items())], align_right=[1, 2, 3, 4])
        print(f"Total lag: {sum(lag.values()):,}")
