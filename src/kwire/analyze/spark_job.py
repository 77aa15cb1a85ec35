"""``kwire analyze --spark``: the analyzer as a PySpark job, with the single-machine path's results.

    kwire analyze --spark 'captures/*.pcap' --master 'local[4]' --parquet tables/

The stages (the worker side is ``spark_segments``, the findings ``rules``):

1. Segments: the capture paths (globs expanded on the driver) become one task per file, which
   reads it with ``PcapReader`` + ``PacketDecoder`` and emits Arrow batches of TCP segments
   (``mapInArrow``).  The files must be readable by the executors (a local or shared filesystem).
   A big file is one task: files are not split into byte ranges.
2. Flows: segments are hash-partitioned on (file, endpoint pair) and sorted by frame within each
   partition (a secondary sort, so a flow streams through its reassembler without being held
   whole), then each flow is reassembled and decoded by the single-machine code (``TcpReassembler``,
   ``CaptureDecoder.decode_events`` with ``KafkaFlow`` / ``MongoFlow``) into the rows of the tables.
   Connections are then renumbered in the order of their first packet, as the single-machine path
   numbers them, and the flows whose protocol decision another flow's knowledge changes are decoded
   again (see ``spark_segments``).
3. Findings: ``engines.spark_findings`` runs the rules (``rules``: the SQL ``kwire analyze`` runs
   in DuckDB) in Spark SQL over the tables.
4. Output: with an output directory, the tables ``exchanges``, ``offset_commits``,
   ``group_events``, ``connections`` and ``findings`` as Parquet datasets ``DIR/<table>`` (readable by
   ``spark.read.parquet``, DuckDB, pandas), and a short summary on the driver.

The tables and findings are those of ``session.analyze_captures`` on the same files.  What differs:
which warnings are kept when there are more than ``warning_limit`` (here the first by capture and
frame; every warning is counted either way); a file that fails part way through is a warning here,
not an unreadable file; and ``--json`` / ``--html`` are not offered (they need every exchange, or the summary, on one
machine).

``run_spark_analysis(spark, paths, ...)`` runs it in a session the caller owns (tests, notebooks);
``kwire analyze --spark`` (``cli.analyze_cmd``) calls it and ``render_summary``; ``time_spark_analysis`` times a run on ``local[N]`` (the
benchmark's 1 core against 2 cores), also as ``python -m kwire.analyze.spark_job CAPTURE...``.
"""

from __future__ import annotations

import glob
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from .analyzer import AnalyzeOptions
from .exchange import AnalyzeWarning, WarningLog
from .findings import FINDINGS_SCHEMA, Finding, Thresholds
from .spark_segments import DECODED_KINDS, SEGMENT_COLUMNS
from .tables import SCHEMAS

__all__ = [
    "TABLES",
    "SparkAnalysis",
    "decoded_schema",
    "expand_captures",
    "make_session",
    "run_spark_analysis",
    "spark_schema",
    "spark_type",
    "time_spark_analysis",
]

#: The decoded tables, and the kind of their rows in the decoded stream.
TABLES = {"exchanges": "exchange", "offset_commits": "commit", "group_events": "group_event",
          "connections": "connection"}


# -- schemas: the type names of tables.SCHEMAS / FINDINGS_SCHEMA as Spark types, in one place --------

def spark_type(name: str):
    """The Spark type of a type name of ``tables.SCHEMAS`` (and of the segment and decoded rows)."""
    from pyspark.sql import types as T

    scalars = {"string": T.StringType(), "int32": T.IntegerType(), "int64": T.LongType(),
               "double": T.DoubleType(), "bool": T.BooleanType(), "binary": T.BinaryType()}
    if name in scalars:
        return scalars[name]
    if name.startswith("list<") and name.endswith(">"):
        return T.ArrayType(spark_type(name[5:-1]))
    raise ValueError(f"no Spark type for the schema type name {name!r}")


def spark_schema(columns: dict[str, str]):
    """A Spark StructType from a column -> type name mapping (every column nullable)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(name, spark_type(type_name)) for name, type_name in columns.items()])


def decoded_schema():
    """The decoded stream: (file, capture, flow, kind) and one struct column per row kind."""
    from pyspark.sql import types as T

    fields = [T.StructField("file", T.IntegerType()), T.StructField("capture", T.StringType()),
              T.StructField("flow", T.BinaryType()), T.StructField("kind", T.StringType())]
    for kind, columns in DECODED_KINDS.items():
        fields.append(T.StructField(kind, spark_schema(SCHEMAS[columns] if isinstance(columns, str) else columns)))
    return T.StructType(fields)


# -- the job ----------------------------------------------------------------------------------------

@dataclass
class SparkAnalysis:
    """What a Spark run produced.  The table DataFrames read cached rows: ``close()`` frees them."""

    captures: list[str]  #: names of the captures read
    tables: dict[str, Any]  #: table name -> DataFrame (``TABLES`` and 'findings')
    findings: list[Finding]
    stats: dict[str, int]  #: packet / segment / connection counters, summed over the captures
    warnings: WarningLog
    unreadable: list[tuple[str, str]] = field(default_factory=list)  #: (path, why) of files not read
    redecoded_flows: int = 0  #: flows decoded a second time with another flow's protocol knowledge
    seconds: float = 0.0
    _cached: list = field(default_factory=list, repr=False)

    @property
    def finding_rows(self) -> list[dict]:
        return [f.to_row() for f in self.findings]

    def close(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()


def run_spark_analysis(spark, paths: Sequence[str], options: AnalyzeOptions | None = None,
                       thresholds: Thresholds | None = None, out_dir: str | os.PathLike | None = None, *,
                       partitions: int | None = None) -> SparkAnalysis:
    """Analyse capture files (paths, no globs) in ``spark``; write the tables under ``out_dir`` if given.

    ``partitions``: how many partitions the flows are spread over (default: the session's
    ``spark.sql.shuffle.partitions``); the findings' shuffles use a quarter of them (the setting is
    lowered while they run, then restored).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from .engines import spark_findings

    started = time.monotonic()
    options = options or AnalyzeOptions()
    thresholds = thresholds or Thresholds()
    partitions = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    files = _numbered([os.fsdecode(p) for p in paths])
    segments = _segments(spark, files)
    decoded = _decode(segments, options, {}, partitions).persist(StorageLevel.MEMORY_AND_DISK)
    decoded.count()
    cached = [decoded]
    redone = 0
    if options.detect:
        overrides, affected = _protocol_overrides(decoded)
        if affected:
            redone = len(affected)
            groups = spark.createDataFrame(affected, "file int, flow binary")
            again = _decode(segments.join(F.broadcast(groups), ["file", "flow"], "left_semi"), options, overrides,
                            partitions)
            merged = (decoded.join(F.broadcast(groups), ["file", "flow"], "left_anti")
                      .unionByName(again).persist(StorageLevel.MEMORY_AND_DISK))
            merged.count()
            decoded.unpersist()
            decoded = merged
            cached = [merged]

    ids = _connection_ids(decoded).persist(StorageLevel.MEMORY_AND_DISK)  # small: read by every table
    cached.append(ids)
    tables = _tables(decoded, ids)
    stats, warnings, unreadable = _counters(decoded, ids, files, options.warning_limit)
    # The findings read the tables as the single-machine path numbers them (reconnect_storm joins
    # connections to their exchanges by ``conn``).  Their tables are small next to the segments (an
    # exchange reaches a shuffle only when it is evidence), and their plans shuffle a dozen times:
    # fewer partitions there save more in tasks than they cost.
    conf = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(max(1, partitions // 4)))
    try:
        found = spark_findings(spark, tables, thresholds)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", conf)
    tables["findings"] = spark.createDataFrame([f.to_row() for f in found], spark_schema(FINDINGS_SCHEMA))
    if out_dir is not None:
        for name, df in tables.items():
            df.write.mode("overwrite").parquet(os.path.join(os.fsdecode(out_dir), name))
    unread = {path for path, _ in unreadable}
    captures = [name for _, name, path in files if path not in unread]
    return SparkAnalysis(captures=captures, tables=tables, findings=found, stats=stats, warnings=warnings,
                         unreadable=unreadable, redecoded_flows=redone, seconds=time.monotonic() - started,
                         _cached=cached)


def _numbered(paths: list[str]) -> list[tuple[int, str, str]]:
    """(file number, capture name, path).  The name is the file's, as the single-machine path names
    captures; the number keeps apart two files of the same name (in different directories)."""
    return [(i, os.path.basename(p), p) for i, p in enumerate(paths)]


def _segments(spark, files: list[tuple[int, str, str]]):
    """The segment rows of the files: one task per file."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from .spark_segments import read_segments

    schema = spark_schema(SEGMENT_COLUMNS)
    arrow_schema = to_arrow_schema(schema)
    listing = spark.createDataFrame(spark.sparkContext.parallelize(files, max(1, len(files))),
                                    "file int, capture string, path string")

    def read(batches):
        for batch in batches:
            yield from read_segments(zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True),
                                     arrow_schema)

    return listing.mapInArrow(read, schema)


def _decode(segments, options: AnalyzeOptions, overrides: dict, partitions: int):
    """Segments grouped by flow (hash partitions, sorted by frame inside) and decoded into tagged rows."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from .spark_segments import decode_flows

    schema = decoded_schema()
    arrow_schema = to_arrow_schema(schema)

    def decode(batches):
        yield from decode_flows(batches, arrow_schema, options, overrides)

    return (segments.repartition(partitions, "file", "flow").sortWithinPartitions("file", "flow", "frame")
            .mapInArrow(decode, schema))


def _protocol_overrides(decoded) -> tuple[dict[tuple[int, int], str], list[tuple[int, bytes]]]:
    """The protocol each fall-back decision must take given every flow's sniffs, for the flows where
    that differs from what the flow decided alone: ((file, first frame) -> protocol, (file, flow)s).

    A fall-back takes the protocol last sniffed on the same server endpoint of the same file before
    it, in the order the single-machine decoder takes decisions (see spark_segments)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    d = decoded.where(F.col("kind") == "decision").select("file", "flow", "decision.*")
    before = (Window.partitionBy("file", "server").orderBy("phase", "frame", "first_frame")
              .rowsBetween(Window.unboundedPreceding, -1))
    known = F.last(F.when(F.col("sniffed"), F.col("protocol")), ignorenulls=True).over(before)
    fallbacks = d.withColumn("known", known).where(~F.col("sniffed"))
    changed = fallbacks.where(F.col("known").isNotNull() & (F.col("known") != F.col("protocol")))
    affected = [(r["file"], bytes(r["flow"])) for r in changed.select("file", "flow").distinct().collect()]
    if not affected:
        return {}, []
    groups = decoded.sparkSession.createDataFrame(affected, "file int, flow binary")
    rows = (fallbacks.join(F.broadcast(groups), ["file", "flow"], "left_semi")
            .select("file", "first_frame", F.coalesce("known", "protocol").alias("protocol")).collect())
    return {(r["file"], r["first_frame"]): r["protocol"] for r in rows}, affected


def _rows(decoded, kind: str):
    """The rows of one kind, with their file number as ``_file``."""
    from pyspark.sql import functions as F

    return decoded.where(F.col("kind") == kind).select(F.col("file").alias("_file"), f"{kind}.*")


def _connection_ids(decoded):
    """(file, first frame) -> the connection's number in its capture, in the order of first packets."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    numbering = Window.partitionBy("_file").orderBy("first_frame")
    return _rows(decoded, "connection").select(F.col("_file").alias("_id_file"), F.col("first_frame").alias("_first"),
                                               F.row_number().over(numbering).cast("int").alias("_conn"))


def _renumber(df, ids):
    """``df`` (with ``_file``) with ``conn`` (a connection's first frame, as the flows give it) replaced
    by the connection's number (``_connection_ids``); 0 stays 0 (a warning tied to no connection)."""
    from pyspark.sql import functions as F

    joined = df.join(ids, (df["_file"] == ids["_id_file"]) & (df["conn"] == ids["_first"]), "left")
    return joined.withColumn("conn", F.coalesce("_conn", "conn")).drop("_id_file", "_first", "_conn")


def _tables(decoded, ids=None) -> dict[str, Any]:
    """The four tables; with ``ids`` (``_connection_ids``), connections numbered as the single-machine
    path numbers them, else ``conn`` is the connection's first frame, as the flows give it."""
    from pyspark.sql import functions as F

    tables = {}
    for name, kind in TABLES.items():
        df = _rows(decoded, kind)
        if ids is not None:
            if name == "connections":
                df = df.join(ids, (df["_file"] == ids["_id_file"]) & (df["first_frame"] == ids["_first"]))
                df = df.withColumn("conn", F.col("_conn"))
            else:
                df = _renumber(df, ids)
        tables[name] = df.select(*SCHEMAS[name])
    return tables


def _counters(decoded, ids, files: list[tuple[int, str, str]], warning_limit: int
              ) -> tuple[dict[str, int], WarningLog, list[tuple[str, str]]]:
    """Counters summed over flows and captures, the warnings (the first ``warning_limit`` by capture
    and frame, every one counted) and the (path, why) of the files that could not be read."""
    from pyspark.sql import functions as F

    stats: dict[str, int] = {}
    log = WarningLog(warning_limit)
    read: set[int] = set()  # files whose reader counted packets: the others could not be opened
    for r in (decoded.where(F.col("kind") == "stat").groupBy("file", "stat.name")
              .agg(F.sum("stat.value").alias("value")).collect()):
        name, value = r["name"], int(r["value"])
        if name == "packets":
            read.add(r["file"])
        if name.startswith("warning:"):
            log.counts[name[len("warning:"):]] += value
        else:
            stats[name] = stats.get(name, 0) + value
    order = ("capture", "_file", "frame", "conn", "kind", "message")
    first = _rows(decoded, "warning").orderBy(*order).limit(warning_limit)
    warnings = _renumber(first, ids).orderBy(*order).collect()
    log.kept = [AnalyzeWarning(w["capture"], w["frame"], w["conn"], w["kind"], w["message"]) for w in warnings]
    # A file that could not be opened gives no counters, only a capture warning saying why.
    unread = {index: path for index, _, path in files if index not in read}
    unreadable = []
    if unread:
        unreadable = [(unread[r["file"]], r["message"]) for r in decoded.where(
            (F.col("kind") == "warning") & F.col("flow").isNull() & F.col("file").isin(list(unread))).select(
            "file", "warning.message").collect()]
    return stats, log, unreadable


# -- sessions, the CLI and the benchmark -------------------------------------------------------------

def make_session(master: str | None = None, *, app_name: str = "kwire analyze", shuffle_partitions: int | None = None):
    """A Spark session for the analyzer: UI off, quiet logs, this Python for the workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or "local[*]"
    if shuffle_partitions is None:
        cores = _local_cores(master)
        shuffle_partitions = max(4, 2 * cores) if cores else 200
    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2048")  # segments carry payloads
             # One big shuffle, partitioned on purpose (the flows), then many small plans over the
             # small tables (the findings): re-planning each stage adaptively costs more than it saves.
             .config("spark.sql.adaptive.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _local_cores(master: str) -> int | None:
    """N of local[N] (the machine's cores for local[*], 1 for local); None for a cluster."""
    if master == "local":
        return 1
    if master.startswith("local[") and master.endswith("]"):
        inner = master[6:-1].split(",")[0]
        return os.cpu_count() or 1 if inner == "*" else int(inner) if inner.isdigit() else None
    return None


def expand_captures(patterns: Iterable[str]) -> tuple[list[str], list[str]]:
    """Paths of the capture files that paths or globs name (in order, each once), and the patterns
    that named no file."""
    found: dict[str, None] = {}
    missing = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        else:
            matches = [pattern] if os.path.isfile(pattern) else []
        if not matches:
            missing.append(pattern)
        for p in matches:
            found.setdefault(p, None)
    return list(found), missing


def render_summary(analysis: SparkAnalysis, file: TextIO, *, parquet: str | None = None) -> None:
    """The driver's short summary: counters, exchanges per API, findings, warnings."""
    from pyspark.sql import functions as F

    from kwire.text_table import print_table

    s = analysis.stats
    print(f"{len(analysis.captures)} capture(s), {s.get('packets', 0)} packets, {s.get('tcp_segments', 0)} TCP "
          f"segments, {s.get('connections', 0)} connections, in {analysis.seconds:.1f} s (Spark)", file=file)
    per_api = (analysis.tables["exchanges"].groupBy("protocol", "api").agg(
        F.count(F.lit(1)).alias("n"), F.sum(F.col("error").isNotNull().cast("long")).alias("errors"),
        F.sum((F.col("status") != "answered").cast("long")).alias("unanswered"),
        F.percentile_approx("latency_ms", 0.5).alias("p50"), F.percentile_approx("latency_ms", 0.99).alias("p99"),
        F.max("latency_ms").alias("max")).orderBy("protocol", "api").collect())
    print(file=file)
    print_table(["protocol", "api", "exchanges", "errors", "not answered", "p50 ms", "p99 ms", "max ms"],
                [(r["protocol"], r["api"], r["n"], r["errors"], r["unanswered"], _ms(r["p50"]), _ms(r["p99"]),
                  _ms(r["max"])) for r in per_api], file=file, align_right=range(2, 8))
    print(file=file)
    if analysis.findings:
        print(f"findings ({len(analysis.findings)}):", file=file)
        for f in analysis.findings:
            frames = ", ".join(str(frame) for _, frame in f.frames[:5])
            more = f" (+{f.count - 5} more)" if f.count > 5 else ""
            print(f"  {f.severity:7} {f.kind}: {f.message} frames {frames}{more}", file=file)
    else:
        print("no findings", file=file)
    if analysis.warnings.total:
        counts = ", ".join(f"{kind} {n}" for kind, n in sorted(analysis.warnings.counts.items()))
        print(f"warnings: {counts}", file=file)
    if analysis.redecoded_flows:
        print(f"{analysis.redecoded_flows} flow(s) decoded again with the protocol other connections showed",
              file=file)
    if parquet:
        print(f"tables written under {parquet}/ (exchanges, offset_commits, group_events, connections, findings)",
              file=file)


def _ms(value) -> str:
    return "" if value is None else f"{value:.1f}"


def time_spark_analysis(paths: Sequence[str], cores: int, options: AnalyzeOptions | None = None, *,
                        repeat: int = 1) -> dict[str, Any]:
    """Time the Spark analysis of ``paths`` on ``local[cores]``: a fresh session, one warm-up run (the
    workers start and import kwire, the JVM compiles), then ``repeat`` timed runs.  Returns the
    'master' and 'parallelism' the session ran with and seconds: 'session' (start), 'first' (the
    warm-up run) and 'best' (the fastest timed run)."""
    t0 = time.monotonic()
    spark = make_session(f"local[{cores}]", app_name=f"kwire analyze bench local[{cores}]")
    try:
        t1 = time.monotonic()
        run_spark_analysis(spark, paths, options).close()
        t2 = time.monotonic()
        best = None
        for _ in range(max(1, repeat)):
            start = time.monotonic()
            run_spark_analysis(spark, paths, options).close()
            elapsed = time.monotonic() - start
            best = elapsed if best is None else min(best, elapsed)
        return {"master": spark.sparkContext.master, "parallelism": spark.sparkContext.defaultParallelism,
                "session": t1 - t0, "first": t2 - t1, "best": best}
    finally:
        spark.stop()


def _bench(argv: list[str] | None = None) -> int:
    """``python -m kwire.analyze.spark_job CAPTURE... [--cores 1,2] [--repeat N]``: the speed-up."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m kwire.analyze.spark_job",
                                description="Time the Spark analysis of captures on local[N] for each N.")
    p.add_argument("captures", nargs="+")
    p.add_argument("--cores", default="1,2", help="comma-separated core counts (default 1,2)")
    p.add_argument("--repeat", type=int, default=1)
    a = p.parse_args(argv)
    paths, missing = expand_captures(a.captures)
    if missing:
        p.error(f"no such capture: {', '.join(missing)}")
    size = sum(os.path.getsize(x) for x in paths)
    results = {}
    for n in (int(c) for c in a.cores.split(",")):
        timing = time_spark_analysis(paths, n, repeat=a.repeat)
        timing["mb_per_s"] = size / 1e6 / timing["best"]
        results[f"local[{n}]"] = timing
    print(json.dumps({"bytes": size, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(_bench())
