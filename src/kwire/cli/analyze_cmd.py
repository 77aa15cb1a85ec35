"""``kwire analyze``: decode Kafka and MongoDB traffic from capture files and report on it.

    kwire analyze trace.pcap                          summary and findings on the terminal
    kwire analyze a.pcap b.pcapng --kafka-port 9093   only port 9093 is Kafka (no sniffing)
    kwire analyze trace.pcap --json > ex.jsonl        one JSON line per exchange on stdout
    kwire analyze trace.pcap --json=ex.jsonl --html report.html --parquet tables/

Every capture is read once, streaming; memory does not grow with the capture's size.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TextIO

from .arg_types import positive_float, positive_int, tcp_port
from .output import fail

__all__ = ["register", "run", "run_spark"]

EPILOG = """\
protocols:
  Without --kafka-port / --mongo-port, each connection's protocol is sniffed from the first bytes
  the client sends (and the usual ports 9092, 27017... break ties).  Naming ports turns sniffing
  off: only connections to those server ports are decoded.

output:
  The summary (APIs with latency percentiles, connections, errors, top topics, partitions and
  collections, findings with their frame numbers, warnings) goes to stdout.  The findings are SQL
  rules run by DuckDB (pip install 'kwire[analyze]'); with --spark the same rules run in Spark SQL.
  --json          writes one JSON object per exchange (JSON lines) to stdout instead, and the
                  summary to stderr; --json=FILE writes them to FILE (the summary stays on stdout).
                  Put --json after the captures or use --json=FILE: "--json x.pcap" would take
                  x.pcap as the output file (kwire refuses to overwrite a capture).
  --records       adds record keys and values (Kafka) and documents (MongoDB) to the JSON lines;
                  without it a message's data is summarised (batches, counts).
  --parquet DIR   writes the tables exchanges, offset_commits, group_events, connections and
                  findings as DIR/<table>/part-0.parquet (needs pyarrow: pip install 'kwire[analyze]').
  --html FILE     writes a self-contained HTML report with charts (latency over time per API,
                  committed offsets per group and topic, findings marked on them).
  --quiet         no progress line and no summary (errors are still reported).
  While reading, a progress line (bytes read, MB/s) goes to stderr when stderr is a terminal.

exit status:
  0  the captures were analysed (findings, whatever their severity, do not change it)
  2  bad arguments (a capture that does not exist, an output that cannot be written), or no
     capture could be read; a file that is not a capture is named on stderr and skipped
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="decode Kafka and MongoDB traffic in pcap/pcapng captures",
                       description="Decode the Kafka and MongoDB requests and responses of capture files\n"
                                   "(pcap, pcapng, gzipped or not) and report latencies, errors, consumer\n"
                                   "group activity and findings.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("captures", nargs="*", metavar="CAPTURE", help="pcap or pcapng files (.gz too)")
    p.add_argument("--kafka-port", dest="kafka_ports", action="append", type=tcp_port, default=[], metavar="PORT",
                   help="a server port carrying Kafka (repeatable); turns protocol sniffing off")
    p.add_argument("--mongo-port", dest="mongo_ports", action="append", type=tcp_port, default=[], metavar="PORT",
                   help="a server port carrying MongoDB (repeatable); turns protocol sniffing off")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="exchanges as JSON lines, to stdout or (--json=FILE) to FILE")
    p.add_argument("--records", action="store_true",
                   help="record keys and values (Kafka) and documents (MongoDB) in the JSON lines")
    p.add_argument("--parquet", metavar="DIR", help="write the tables as Parquet datasets under DIR")
    p.add_argument("--html", metavar="FILE", help="write an HTML report to FILE")
    p.add_argument("--slow-ms", type=positive_float, metavar="MS",
                   help="a request answered this much later than it may legitimately wait (a Fetch's max wait, "
                        "a MongoDB awaitable hello...) is a slow_request finding (default: Kafka 1000, MongoDB 100)")
    p.add_argument("--max-frame-size", type=positive_int, default=100 * 1024 * 1024, metavar="BYTES",
                   help="larger message sizes are taken for garbage and resynchronised past (default 100 MiB)")
    p.add_argument("--no-trust-acks", dest="trust_acks", action="store_false",
                   help="an ACK past a hole does not make it a gap at once (for merged captures of several "
                        "interfaces, where an ACK may be recorded before the data it acknowledges)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress and no summary")
    p.add_argument("--spark", action="store_true",
                   help="run the analysis on Spark (see --master; with --parquet, not --json or --html)")
    p.add_argument("--master", metavar="URL", help="with --spark: the Spark master (default: local[*])")
    p.set_defaults(func=run)


class ProgressLine:
    """'reading x.pcap: 120.5 / 800.0 MB (95.2 MB/s)' rewritten in place on a terminal."""

    INTERVAL = 0.25  # seconds between redraws: more would cost time and flicker

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.started = time.monotonic()
        self.last = 0.0
        self.shown = 0  # characters on the line now

    def __call__(self, name: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < self.INTERVAL:
            return
        self.last = now
        rate = done / max(now - self.started, 1e-3) / 1e6
        # A gzipped capture is read in uncompressed bytes but sized compressed: no fraction then.
        of = f" / {total / 1e6:.1f}" if total >= done else ""
        text = f"reading {name}: {done / 1e6:.1f}{of} MB ({rate:.1f} MB/s)"
        columns = max(20, _columns() - 1)
        text = text[:columns]
        self.stream.write("\r" + text.ljust(self.shown))
        self.stream.flush()
        self.shown = len(text)

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()
            self.shown = 0


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((80, 24)).columns


def _is_capture(path: str) -> bool:
    """Whether path holds a capture (so an output must not overwrite it)."""
    from kwire.analyze.pcap import NotACaptureError, PcapReader

    try:
        PcapReader(path).close()
    except (NotACaptureError, OSError):
        return False
    return True


def _check_output(path: str, captures: list[str], what: str) -> str | None:
    """Why ``path`` must not be written (None if it may)."""
    real = os.path.realpath(path)
    if any(os.path.realpath(c) == real for c in captures) or (os.path.isfile(path) and _is_capture(path)):
        return f"{what} {path} is a capture; refusing to overwrite it"
    if os.path.isdir(path):
        return f"{what} {path} is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"{what} {path}: directory {parent} does not exist"
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{what} {path}: permission denied"
    return None


def run(args: argparse.Namespace) -> int:
    if args.spark:
        return run_spark(args)
    if args.master:
        return fail("--master goes with --spark")
    if not args.captures:
        if args.json not in (None, "-") and os.path.isfile(args.json):
            return fail(f"no capture given (--json took {args.json!r} as its output file: "
                        f"write --json={args.json!r} for that, or put --json after the captures)")
        return fail("no capture given")
    missing = [c for c in args.captures if not os.path.exists(c)]
    for path in missing:
        print(f"kwire: error: {path}: no such file", file=sys.stderr)
    directories = [c for c in args.captures if os.path.isdir(c)]
    for path in directories:
        print(f"kwire: error: {path}: is a directory, not a capture", file=sys.stderr)
    if missing or directories:
        return 2
    for flag, path in (("--json", args.json), ("--html", args.html)):
        if path not in (None, "-"):
            problem = _check_output(path, args.captures, flag)
            if problem:
                return fail(problem)
    if args.parquet:
        from kwire.analyze.export import ParquetUnavailable, require_pyarrow

        try:
            require_pyarrow()
        except ParquetUnavailable as e:
            return fail(f"--parquet: {e}")
        try:
            os.makedirs(args.parquet, exist_ok=True)
        except OSError as e:
            return fail(f"--parquet {args.parquet}: {e.strerror or e}")

    from kwire.analyze.analyzer import AnalyzeOptions
    from kwire.analyze.engines import EngineUnavailable
    from kwire.analyze.findings import Thresholds
    from kwire.analyze.session import analyze_captures
    from kwire.analyze.summary import render_text

    options = AnalyzeOptions(kafka_ports=frozenset(args.kafka_ports), mongo_ports=frozenset(args.mongo_ports),
                             max_frame_size=args.max_frame_size, keep_messages=args.json is not None,
                             record_values=args.records, trust_acks=args.trust_acks)
    thresholds = Thresholds()
    if args.slow_ms is not None:
        thresholds.slow_kafka_ms = thresholds.slow_mongodb_ms = args.slow_ms
    json_to_stdout = args.json == "-"
    summary_out = sys.stderr if json_to_stdout else sys.stdout
    progress = ProgressLine(sys.stderr) if not args.quiet and sys.stderr.isatty() else None

    json_file = None
    try:
        if args.json is not None and not json_to_stdout:
            json_file = open(args.json, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        analysis = analyze_captures(args.captures, options, thresholds=thresholds,
                                    json_out=sys.stdout if json_to_stdout else json_file,
                                    parquet_dir=args.parquet, progress=progress)
    except BrokenPipeError:
        raise  # stdout closed by the reader (| head): main() ends quietly
    except EngineUnavailable as e:  # DuckDB or pyarrow missing: one line saying what to install
        return fail(str(e))
    except OSError as e:  # writing an output failed (reading a capture is reported per capture)
        where = e.filename or args.json or args.parquet or "output"
        return fail(f"writing {where}: {e.strerror or e}")
    finally:
        if progress is not None:
            progress.clear()
        if json_file is not None:
            json_file.close()
    if json_to_stdout:
        sys.stdout.flush()

    for _path, why in analysis.unreadable:
        print(f"kwire: error: {why}", file=sys.stderr)
    if not analysis.captures:
        return fail("no capture could be read")

    if args.html:
        from kwire.analyze.report_html import write_html

        try:
            write_html(analysis, args.html)
        except OSError as e:
            return fail(f"--html {args.html}: {e.strerror or e}")
    if not args.quiet:
        render_text(analysis, file=summary_out)
    return 0


def run_spark(args: argparse.Namespace) -> int:
    """``kwire analyze --spark``: the Spark job (``analyze.spark_job``) on the parsed arguments."""
    from kwire.analyze.analyzer import AnalyzeOptions
    from kwire.analyze.findings import Thresholds
    from kwire.analyze.spark_job import expand_captures, make_session, render_summary, run_spark_analysis

    if getattr(args, "json", None) is not None or getattr(args, "html", None):
        return fail("--json and --html are not available with --spark (use --parquet DIR for the tables)")
    if not args.captures:
        return fail("no capture given")
    paths, missing = expand_captures(args.captures)
    for pattern in missing:
        why = "is a directory, not a capture" if os.path.isdir(pattern) else "no such file"
        print(f"kwire: error: {pattern}: {why}", file=sys.stderr)
    if missing:
        return 2
    options = AnalyzeOptions(kafka_ports=frozenset(getattr(args, "kafka_ports", ()) or ()),
                             mongo_ports=frozenset(getattr(args, "mongo_ports", ()) or ()),
                             max_frame_size=getattr(args, "max_frame_size", None) or 100 * 1024 * 1024,
                             trust_acks=getattr(args, "trust_acks", True))
    thresholds = Thresholds()
    if getattr(args, "slow_ms", None) is not None:
        thresholds.slow_kafka_ms = thresholds.slow_mongodb_ms = args.slow_ms
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return fail("--spark needs PySpark, which is not installed (pip install 'kwire[spark]'; and Java 17)")
    active = SparkSession.getActiveSession()  # embedded in a running application: use its session
    try:
        spark = active or make_session(getattr(args, "master", None))
    except Exception as e:  # the JVM would not start (no Java, bad master URL): say so, no traceback
        return fail(f"--spark: could not start Spark: {e}")
    analysis = None
    try:
        analysis = run_spark_analysis(spark, paths, options, thresholds, getattr(args, "parquet", None))
        for _path, why in analysis.unreadable:
            print(f"kwire: error: {why}", file=sys.stderr)
        if not analysis.captures:
            return fail("no capture could be read")
        if not getattr(args, "quiet", False):
            render_summary(analysis, sys.stdout, parquet=getattr(args, "parquet", None))
    finally:
        if analysis is not None:
            analysis.close()
        if active is None:
            spark.stop()
    return 0
