"""The Spark benchmark: kwire's PySpark data source against the ceiling of any Python source, and
its sink against kafka-python in a plain ``foreachPartition``, side by side in one run.

Setup (not timed): kwire's ``EmbeddedBroker`` in this process; for each value size, a topic of 8
partitions holding ``--records`` records (12-byte keys, random values, explicit CreateTime
timestamps of the last minutes, retention.ms=-1), written once with kwire's ``Producer``.  The same rows (key, value, topic,
partition, offset, timestamp, timestampType: Spark's Kafka schema) are written beside it as one
Arrow IPC file per partition, in batches of 8,192 rows (the kwire reader's batch size).

Read cases, each run against both sources, alternated, after one untimed warm-up of each:

- kwire: ``spark.read.format("kwire")`` / ``spark.readStream.format("kwire")`` with
  ``kafka.bootstrap.servers`` and ``subscribe`` (and ``startingOffsets=earliest`` for streams),
  nothing else: one task per topic-partition;
- ceiling: a Python data source written here (``pyspark.sql.datasource``) with the same
  partition count whose ``read()`` yields the pre-generated Arrow batches of its partition,
  memory-mapped (zero-copy): what Spark costs for a Python source that does no work at all (it
  also freezes the worker's loaded objects for the garbage collector, as kwire's reader does);
- batch: ``df.write.format("noop")`` and ``df.write.parquet(...)``; streaming:
  ``trigger(availableNow=True)`` into the ``noop`` sink and into Parquet, each with a fresh
  checkpoint (one micro-batch: no maxOffsetsPerTrigger).  The clock covers the whole action
  (``save()``, or ``start()`` to the end of ``awaitTermination()``), planning included.

With ``--floor``, batch reads also run a third source, the floor: kwire's consumer receives each
partition's records from the broker (the reader's own consumer settings, CRC checks off) and the
ceiling's batches are yielded as the records arrive, so the rows cost nothing to build.  It is
what a Python source reading Kafka over TCP pays at least; kwire/floor is what building the rows
costs on top, and floor/ceiling what receiving them costs.

Write case: the same DataFrame (``spark.range`` with 8 partitions: 12-byte key, value of the
size, both binary) written by ``df.write.format("kwire")`` and by ``df.foreachPartition`` with a
kafka-python ``KafkaProducer`` per task, each into a fresh 8-partition topic; both with acks=1,
no idempotence, no compression, linger 5 ms, 256 KiB batches, every record acknowledged
(``flush``) before the task ends.

CPU: around each timed action the benchmark reads /proc for this process and its descendants
and reports CPU microseconds per row, split into ``broker`` (this process: the embedded
broker's thread, while the driver's thread waits on Spark), ``jvm`` and ``python`` (Spark's
Python workers), for the run of each side that used the least.  On a shared machine this is
steadier than rows/s.  (With a --master whose executors are not children of this process, the
CPU figures miss them; the ceiling's Arrow files are local, so executors must run on this
machine.)

Checks, outside the clock: the Parquet output of the warm-up runs, read back, has the same
count and the same sums of offsets, timestamps and crc32 of keys and values from both sources,
matching what was produced; every streaming run's progress reports N input rows; every write
run adds N records to its topic.  A run that fails (a check, or Spark) is reported and left out
of the figures, and the benchmark exits with status 1.

    python benchmarks/bench_spark.py [--records 1000000] [--value-size 100,1024] [--repeat 3]
                                     [--master local[2]] [--cases ...] [--timeout 600] [--floor] [--json]

Ratios: kwire/ceiling (goal >= 0.70) and kwire/kafka-python (>1: kwire faster); best of
``--repeat`` runs each, the range of all runs beside it.  Progress goes to stderr.  Figures and
the command go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

PARTITIONS = 8
BATCH_ROWS = 8192               # kwire.spark.fetch.BATCH_ROWS: the ceiling yields batches of the same size
KEY_BYTES = 12
GOAL = 0.70
CASES = ("batch-noop", "batch-parquet", "stream-noop", "stream-parquet", "write")
# Spark's Kafka schema (kwire.spark.schema.source_schema without headers), spelled out here.
SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                     StructField("topic", StringType()), StructField("partition", IntegerType()),
                     StructField("offset", LongType()), StructField("timestamp", TimestampType()),
                     StructField("timestampType", IntegerType())])
# Both sinks' producers: the same settings (bench_clients.py's), spelled for each library.
SINK_SETTINGS = {"acks": "1", "enable.idempotence": "false", "compression.type": "none", "linger.ms": "5",
                 "batch.size": str(256 * 1024)}
KAFKA_PYTHON_SETTINGS = {"acks": 1, "enable_idempotence": False, "compression_type": None, "linger_ms": 5,
                         "batch_size": 256 * 1024}


def log(msg: str) -> None:
    print(f"[bench_spark {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def size_name(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


# -- the ceiling: a Python data source that does no work ------------------------------------------
# Defined in the script, so cloudpickle ships the classes by value to Spark's Python workers.
@dataclass(frozen=True)
class MemoryPartition(InputPartition):
    path: str        # the partition's Arrow IPC file
    start: int       # rows [start, end) of it
    end: int


def _freeze_like_kwire() -> None:
    """What kwire.spark.worker_clients.task_done does when a reused worker's first task ends
    (gc.freeze of what is loaded, so that Spark's gc.collect() after each task walks only what
    later tasks make): any Python source can, so the ceiling does it too.  (Once per worker:
    this function reaches the worker by value with each task, so the frozen count is the marker,
    not a global of its own.)"""
    import gc
    if os.environ.get("SPARK_REUSE_WORKER") and not gc.get_freeze_count():
        gc.collect()
        gc.freeze()


def _memory_batches(part: MemoryPartition):
    """The pre-generated batches of rows [start, end) of a partition, memory-mapped (zero-copy)."""
    reader = pa.ipc.open_file(pa.memory_map(part.path))
    at = 0
    for i in range(reader.num_record_batches):
        batch = reader.get_batch(i)
        lo, hi = max(part.start - at, 0), min(part.end - at, batch.num_rows)
        at += batch.num_rows
        if hi > lo:
            yield batch if (lo, hi) == (0, batch.num_rows) else batch.slice(lo, hi - lo)
        if at >= part.end:
            break
    _freeze_like_kwire()


class _MemoryLayout:
    def __init__(self, options):
        self.dir = options["dir"]
        self.rows = json.loads(options["rows"])   # rows per partition, in partition order

    def path(self, p: int) -> str:
        return os.path.join(self.dir, f"p{p}.arrow")


class MemoryBatchReader(DataSourceReader):
    def __init__(self, layout: _MemoryLayout):
        self.layout = layout

    def partitions(self):
        return [MemoryPartition(self.layout.path(p), 0, n) for p, n in enumerate(self.layout.rows)]

    def read(self, partition):
        return _memory_batches(partition)


class MemoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are rows per partition, {"0": n, ...}: the whole data set is there from the start."""

    def __init__(self, layout: _MemoryLayout):
        self.layout = layout

    def initialOffset(self):  # noqa: N802 - Spark's names
        return {str(p): 0 for p in range(len(self.layout.rows))}

    def latestOffset(self, start, limit):  # noqa: N802
        return {str(p): n for p, n in enumerate(self.layout.rows)}

    def prepareForTriggerAvailableNow(self):  # noqa: N802
        pass

    def partitions(self, start, end):
        return [MemoryPartition(self.layout.path(int(p)), int(start[p]), int(end[p]))
                for p in sorted(end, key=int) if int(end[p]) > int(start[p])]

    def read(self, partition):
        return _memory_batches(partition)

    def commit(self, end):
        pass


class MemorySource(DataSource):
    @classmethod
    def name(cls):
        return "kwire_bench_ceiling"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        return MemoryBatchReader(_MemoryLayout(self.options))

    def streamReader(self, schema):  # noqa: N802
        return MemoryStreamReader(_MemoryLayout(self.options))


# -- the floor: kwire's receiving, without its rows (--floor) ------------------------------------------
@dataclass(frozen=True)
class FloorPartition(InputPartition):
    path: str        # the ceiling's Arrow IPC file of the partition, yielded as the rows
    rows: int
    bootstrap: str
    topic: str
    partition: int


def _received_batches(part: FloorPartition):
    """The ceiling's batches of a partition, each yielded once the partition's records up to its
    last row have been received from the broker through kwire's consumer, as the kwire reader
    receives them (its consumer settings, CRC checks off) and then dropped: the cost of getting
    the records to the worker, with building the rows free."""
    from kwire.client import TopicPartition
    from kwire.spark import worker_clients
    from kwire.spark.options import parse_source_options

    options = parse_source_options({"kafka.bootstrap.servers": part.bootstrap, "subscribe": part.topic,
                                    "kafka.check.crcs": "false"})
    consumer = worker_clients.consumer(options.consumer_settings())
    tp = TopicPartition(part.topic, part.partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    position = 0
    deadline = time.monotonic() + 120
    for batch in _memory_batches(MemoryPartition(part.path, 0, part.rows)):
        want = min(position + batch.num_rows, part.rows)
        while consumer.position(tp) < want:
            consumer.poll_batches(timeout=1.0, max_records=BATCH_ROWS)
            if time.monotonic() > deadline:
                raise TimeoutError(f"floor: {tp} stuck at offset {consumer.position(tp)}")
        position = want
        yield batch
    consumer.assign([])


class FloorBatchReader(DataSourceReader):
    def __init__(self, options):
        self.layout = _MemoryLayout(options)
        self.bootstrap, self.topic = options["bootstrap"], options["topic"]

    def partitions(self):
        return [FloorPartition(self.layout.path(p), n, self.bootstrap, self.topic, p)
                for p, n in enumerate(self.layout.rows)]

    def read(self, partition):
        return _received_batches(partition)


class FloorSource(DataSource):
    @classmethod
    def name(cls):
        return "kwire_bench_floor"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        return FloorBatchReader(self.options)


# -- the data set ----------------------------------------------------------------------------------
def partition_rows(records: int) -> list[int]:
    base, extra = divmod(records, PARTITIONS)
    return [base + (1 if p < extra else 0) for p in range(PARTITIONS)]


def partition_data(p: int, first: int, n: int, size: int, base_ms: int) -> tuple[list[bytes], list[bytes], list[int]]:
    """Keys, values and timestamps (ms) of partition ``p``'s records, ``first`` their global index.

    Timestamps are ``base_ms`` + the global index: recent, so that retention leaves them alone
    (the topics also have retention.ms=-1)."""
    blob = random.Random(size * 1000 + p).randbytes(n * size)
    values = [blob[i * size:(i + 1) * size] for i in range(n)]
    keys = [b"%012d" % (first + i) for i in range(n)]
    stamps = [base_ms + first + i for i in range(n)]
    return keys, values, stamps


def write_arrow_file(path: Path, arrow_schema: pa.Schema, topic: str, p: int, keys: list, values: list,
                     stamps: list) -> None:
    n = len(values)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, arrow_schema) as writer:
        for lo in range(0, n, BATCH_ROWS):
            hi = min(lo + BATCH_ROWS, n)
            k = hi - lo
            arrays = [
                pa.array(keys[lo:hi], pa.binary()),
                pa.array(values[lo:hi], pa.binary()),
                pa.repeat(pa.scalar(topic, pa.string()), k),
                pa.repeat(pa.scalar(p, pa.int32()), k),
                pa.array(range(lo, hi), pa.int64()),
                pa.array([ms * 1000 for ms in stamps[lo:hi]], pa.int64()).cast(arrow_schema.field("timestamp").type),
                pa.repeat(pa.scalar(0, pa.int32()), k),
            ]
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=arrow_schema))


def build_data_set(bootstrap: str, topic: str, records: int, size: int, out_dir: Path, arrow_schema: pa.Schema,
                   timeout: float) -> dict:
    """Produce the topic with kwire's Producer and write the ceiling's Arrow files; expected sums."""
    import zlib

    from kwire.client import Admin, NewTopic, Producer

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, configs={"retention.ms": "-1"})])
    out_dir.mkdir(parents=True)
    base_ms = int(time.time() * 1000) - records
    failed: list = []
    expected = {"count": 0, "offsets": 0, "key_crc": 0, "value_crc": 0, "micros": 0}
    first = 0
    t0 = time.perf_counter()
    with Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False, "linger.ms": 5,
                   "batch.size": 1 << 20}) as producer:
        for p, n in enumerate(partition_rows(records)):
            keys, values, stamps = partition_data(p, first, n, size, base_ms)
            for key, value, ms in zip(keys, values, stamps, strict=True):
                producer.produce(topic, value, key, partition=p, timestamp=ms,
                                 on_delivery=lambda err, _md: err is not None and failed.append(err))
            write_arrow_file(out_dir / f"p{p}.arrow", arrow_schema, topic, p, keys, values, stamps)
            expected["count"] += n
            expected["offsets"] += n * (n - 1) // 2
            expected["key_crc"] += sum(map(zlib.crc32, keys))
            expected["value_crc"] += sum(map(zlib.crc32, values))
            expected["micros"] += sum(stamps) * 1000
            first += n
            del keys, values, stamps
        left = producer.flush(timeout)
    if left or failed:
        raise SystemExit(f"producing {topic}: {left} records unacknowledged, {len(failed)} failed ({failed[:3]})")
    log(f"{topic}: {records:,} records of {size_name(size)} produced in {time.perf_counter() - t0:.1f} s")
    return expected


# -- CPU accounting ----------------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")
ROLES = ("broker", "jvm", "python")


def tree_cpu() -> dict[int, tuple[int, str, float, float]]:
    """This process and its descendants: pid -> (ppid, command name, own CPU seconds, CPU seconds
    of the children it reaped)."""
    stats: dict[int, tuple[int, str, float, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        head, _, rest = text.rpartition(")")
        fields = rest.split()  # from field 3 (state) on: utime, stime, cutime, cstime are 14-17
        stats[int(entry.name)] = (int(fields[1]), head.partition("(")[2],
                                  (int(fields[11]) + int(fields[12])) / _TICK, (int(fields[13]) + int(fields[14])) / _TICK)
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in stats.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = {}, [me]
    while todo:
        pid = todo.pop()
        if pid in stats:
            tree[pid] = stats[pid]
            todo += children.get(pid, [])
    return tree


def _role(pid: int, comm: str) -> str:
    return "broker" if pid == os.getpid() else "jvm" if comm == "java" else "python"


def cpu_since(before: dict[int, tuple[int, str, float, float]]) -> dict[str, float]:
    """CPU seconds by role since ``before``: ``broker`` is this process (the embedded broker's
    thread; the driver's own Python thread waits on Spark meanwhile), ``jvm`` Spark's JVM,
    ``python`` Spark's Python workers.  A process that ended in between counts through its
    parent's reaped time, less what it had used before; one that no tracked parent reaped is
    missing from the figures for the time it ran."""
    after = tree_cpu()
    out = dict.fromkeys(ROLES, 0.0)
    budget: dict[int, float] = {}
    for pid, (_ppid, comm, own, reaped) in after.items():
        old = before.get(pid)
        out[_role(pid, comm)] += own - (old[2] if old else 0.0)
        budget[pid] = reaped - (old[3] if old else 0.0)
        out["jvm" if pid == os.getpid() else "python"] += budget[pid]
    for pid, (ppid, comm, own, reaped) in before.items():
        if pid in after:
            continue
        taken = min(own + reaped, budget[ppid]) if ppid in after else 0.0
        if ppid in after:
            budget[ppid] -= taken
            out["jvm" if ppid == os.getpid() else "python"] -= taken
        if own + reaped - taken > 0.5:
            log(f"note: process {pid} ({comm}) ended without its parent reaping it: CPU it used during this run (if any) is not counted")
    return out


class RunFailed(Exception):
    """A run whose check failed: reported, left out of the figures."""


# -- running Spark actions, bounded ------------------------------------------------------------------
class Watchdog:
    """Cancels Spark's jobs (and stops a stream) if an action runs past its time limit."""

    def __init__(self, spark, seconds: float, what: str):
        self.spark, self.seconds, self.what = spark, seconds, what
        self.query = None
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        log(f"{self.what}: over {self.seconds:.0f} s, cancelling")
        try:
            if self.query is not None:
                self.query.stop()
            self.spark.sparkContext.cancelAllJobs()
        except Exception as exc:  # noqa: BLE001 - best effort; the caller reports the timeout
            log(f"cancelling failed: {exc}")

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        if self.fired:
            raise SystemExit(f"{self.what}: did not finish within --timeout {self.seconds:.0f} s")


class Bench:
    def __init__(self, spark, bootstrap: str, work: Path, timeout: float, layouts: dict):
        self.spark = spark
        self.bootstrap = bootstrap
        self.work = work
        self.timeout = timeout
        self.layouts = layouts  # topic -> the ceiling's {"dir", "rows"}
        self._seq = 0

    def fresh_dir(self, what: str) -> Path:
        self._seq += 1
        return self.work / "runs" / f"{self._seq:04d}-{what}"

    def reader(self, source: str, topic: str, streaming: bool):
        spark = self.spark
        if source == "kwire":
            r = (spark.readStream if streaming else spark.read).format("kwire")
            r = r.option("kafka.bootstrap.servers", self.bootstrap).option("subscribe", topic)
            if streaming:
                r = r.option("startingOffsets", "earliest")
            return r.load()
        layout = self.layouts[topic]
        if source == "floor":
            r = spark.read.format(FloorSource.name()).option("bootstrap", self.bootstrap).option("topic", topic)
            return r.option("dir", layout["dir"]).option("rows", json.dumps(layout["rows"])).load()
        r = (spark.readStream if streaming else spark.read).format(MemorySource.name())
        return r.option("dir", layout["dir"]).option("rows", json.dumps(layout["rows"])).load()

    def read_run(self, case: str, source: str, topic: str, records: int) -> tuple[dict, Path | None]:
        """One timed read; returns ({seconds, cpu}, the Parquet output or None)."""
        streaming = case.startswith("stream")
        to_parquet = case.endswith("parquet")
        out = self.fresh_dir(f"{case}-{source}")
        what = f"{case} {source} {topic}"
        with Watchdog(self.spark, self.timeout, what) as dog:
            cpu0 = tree_cpu()
            t0 = time.perf_counter()
            df = self.reader(source, topic, streaming)
            if not streaming:
                if to_parquet:
                    df.write.mode("overwrite").parquet(str(out / "data"))
                else:
                    df.write.format("noop").mode("overwrite").save()
                elapsed = time.perf_counter() - t0
                cpu = cpu_since(cpu0)
            else:
                w = df.writeStream.trigger(availableNow=True).option("checkpointLocation", str(out / "checkpoint"))
                w = w.format("parquet").option("path", str(out / "data")) if to_parquet else w.format("noop")
                query = dog.query = w.start()
                query.awaitTermination(self.timeout)
                elapsed = time.perf_counter() - t0
                cpu = cpu_since(cpu0)
                if query.isActive:
                    query.stop()
                if query.exception() is not None:
                    raise RunFailed(f"{what}: the query failed: {query.exception()}")
                progress = query.recentProgress
                rows = sum(p.numInputRows for p in progress)
                if rows != records:
                    batches = [{"batchId": p.batchId, "numInputRows": p.numInputRows,
                                "sources": [{"start": src.startOffset, "end": src.endOffset, "latest": src.latestOffset}
                                            for src in p.sources]} for p in progress]
                    offsets = sorted(x.name for x in (out / "checkpoint" / "offsets").glob("*"))
                    raise RunFailed(f"{what}: the stream read {rows:,} rows, expected {records:,}; progress: "
                                    f"{json.dumps(batches)}; checkpoint offsets files: {offsets}")
        return {"seconds": elapsed, "cpu": cpu}, (out / "data" if to_parquet else None)

    def parquet_sums(self, path: Path) -> dict:
        row = self.spark.read.parquet(str(path)).selectExpr(
            "count(*) AS count", "sum(CAST(offset AS DECIMAL(38, 0))) AS offsets",
            "sum(CAST(crc32(key) AS DECIMAL(38, 0))) AS key_crc", "sum(CAST(crc32(value) AS DECIMAL(38, 0))) AS value_crc",
            "sum(CAST(unix_micros(timestamp) AS DECIMAL(38, 0))) AS micros").first()
        return {k: int(v or 0) for k, v in row.asDict().items()}

    def write_run(self, sink: str, size: int, records: int) -> dict:
        from kwire.client import Admin, NewTopic, TopicPartition

        self._seq += 1
        topic = f"w-{sink}-{size}-{self._seq}"
        with Admin({"bootstrap.servers": self.bootstrap}) as admin:
            admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])
        df = self.spark.range(0, records, 1, PARTITIONS).selectExpr(
            f"CAST(lpad(CAST(id AS STRING), {KEY_BYTES}, '0') AS BINARY) AS key",
            f"CAST(concat(lpad(CAST(id AS STRING), {KEY_BYTES}, '0'), repeat('x', {max(size - KEY_BYTES, 0)})) "
            "AS BINARY) AS value")
        what = f"write {sink} {size_name(size)}"
        with Watchdog(self.spark, self.timeout, what):
            cpu0 = tree_cpu()
            t0 = time.perf_counter()
            if sink == "kwire":
                w = df.write.format("kwire").mode("append").option("kafka.bootstrap.servers", self.bootstrap)
                w = w.option("topic", topic)
                for k, v in SINK_SETTINGS.items():
                    w = w.option(f"kafka.{k}", v)
                w.save()
            else:
                df.foreachPartition(kafka_python_writer(self.bootstrap, topic, self.timeout))
            elapsed = time.perf_counter() - t0
            cpu = cpu_since(cpu0)
        with Admin({"bootstrap.servers": self.bootstrap}) as admin:
            ends = admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(PARTITIONS)})
            written = sum(e.offset for e in ends.values())
            admin.delete_topics([topic])
        if written != records:
            raise RunFailed(f"{what}: the topic holds {written:,} records, expected {records:,}")
        return {"seconds": elapsed, "cpu": cpu}


def kafka_python_writer(bootstrap: str, topic: str, timeout: float):
    """The plain pattern: one KafkaProducer per task, every row sent, flushed before the task ends."""
    settings = dict(KAFKA_PYTHON_SETTINGS)

    def write(rows) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
        failed: list = []
        try:
            for row in rows:
                producer.send(topic, value=row.value, key=row.key).add_errback(failed.append)
            producer.flush(timeout)
        finally:
            producer.close(timeout=30)
        if failed:
            raise RuntimeError(f"kafka-python: {len(failed)} records failed, e.g. {failed[0]!r}")

    return write


# -- the run -----------------------------------------------------------------------------------------
def start_spark(master: str):
    from pyspark.sql import SparkSession

    import kwire.spark

    # The Python workers must be this interpreter (pyarrow, kwire, kafka-python).
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master(master).appName("kwire-bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kwire.spark.register(spark)
    spark.dataSource.register(MemorySource)
    spark.dataSource.register(FloorSource)
    return spark


def summarize(runs: list[dict], records: int) -> dict:
    """Rows/s of every run (best and worst), and CPU per row by role of the run that used least CPU."""
    if not runs:
        return {"runs": [], "best": float("nan"), "worst": float("nan"), "cpu_us_per_row": {}}
    rates = [records / r["seconds"] for r in runs]
    frugal = min(runs, key=lambda r: sum(r["cpu"].values()))
    per_row = {role: frugal["cpu"][role] / records * 1e6 for role in ROLES}
    per_row["total"] = sum(per_row.values())
    return {"runs": runs, "rows_per_s": rates, "best": max(rates), "worst": min(rates), "cpu_us_per_row": per_row}


def run(args) -> dict:
    from pyspark.sql.pandas.types import to_arrow_schema

    from kwire.broker import EmbeddedBroker

    sizes = [int(s) for s in args.value_size.split(",") if s]
    cases = [c for c in args.cases.split(",") if c]
    arrow_schema = to_arrow_schema(SCHEMA, timezone="UTC")
    results: dict = {"records": args.records, "partitions": PARTITIONS, "repeat": args.repeat, "master": args.master,
                     "rows": [], "problems": []}
    problems = results["problems"]
    work = Path(tempfile.mkdtemp(prefix="kwire-bench-spark-"))
    broker = spark = None
    try:
        broker = EmbeddedBroker(work / "broker", default_partitions=PARTITIONS).start()
        log(f"embedded broker at {broker.bootstrap}, work dir {work}")
        layouts, expected = {}, {}
        for size in sizes:
            topic = f"bench-{size}"
            expected[topic] = build_data_set(broker.bootstrap, topic, args.records, size, work / "ceiling" / topic,
                                             arrow_schema, args.timeout)
            layouts[topic] = {"dir": str(work / "ceiling" / topic), "rows": partition_rows(args.records)}
        log(f"starting Spark ({args.master})")
        spark = start_spark(args.master)
        import pyspark
        results["spark"] = pyspark.__version__
        bench = Bench(spark, broker.bootstrap, work, args.timeout, layouts)
        for size in sizes:
            topic = f"bench-{size}"
            for case in cases:
                pair = ("kwire", "kafka-python") if case == "write" else ("kwire", "ceiling")
                if args.floor and case.startswith("batch"):
                    pair += ("floor",)

                def one(name: str, warm_up: bool, case=case, size=size, topic=topic) -> dict | None:
                    label = f"{case} {name} {size_name(size)}{' (warm-up)' if warm_up else ''}"
                    try:
                        if case == "write":
                            result = bench.write_run(name, size, args.records)
                        else:
                            result, out = bench.read_run(case, name, topic, args.records)
                            if out is not None and warm_up:  # the Parquet output, checked once per side
                                got = bench.parquet_sums(out)
                                if got != expected[topic]:
                                    raise RunFailed(f"{label}: the Parquet output differs from what was "
                                                    f"produced: {got} != {expected[topic]}")
                    except RunFailed as exc:
                        log(f"FAILED: {exc}")
                        problems.append(str(exc))
                        return None
                    except Exception as exc:  # noqa: BLE001 - Spark's errors: reported, the run left out
                        first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:400]
                        log(f"FAILED: {label}: {type(exc).__name__}: {first}")
                        problems.append(f"{label}: {type(exc).__name__}: {first}")
                        return None
                    finally:
                        shutil.rmtree(work / "runs", ignore_errors=True)
                    cpu = sum(result["cpu"].values()) / args.records * 1e6
                    log(f"{label}: {args.records / result['seconds']:,.0f} rows/s, {cpu:.2f} CPU us/row")
                    return result

                for name in pair:
                    one(name, warm_up=True)
                runs: dict[str, list[dict]] = {name: [] for name in pair}
                for rep in range(args.repeat):
                    for name in pair[rep % len(pair):] + pair[:rep % len(pair)]:
                        result = one(name, warm_up=False)
                        if result is not None:
                            runs[name].append(result)
                row = {"case": case, "size": size, "kwire": summarize(runs["kwire"], args.records),
                       "peer_name": pair[1], "peer": summarize(runs[pair[1]], args.records)}
                row["ratio"] = row["kwire"]["best"] / row["peer"]["best"]
                k_cpu, p_cpu = row["kwire"]["cpu_us_per_row"], row["peer"]["cpu_us_per_row"]
                row["cpu_ratio"] = p_cpu["total"] / k_cpu["total"] if k_cpu and p_cpu else float("nan")
                if "floor" in runs:
                    row["floor"] = summarize(runs["floor"], args.records)
                    row["floor_ratio"] = row["floor"]["best"] / row["peer"]["best"]
                results["rows"].append(row)
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results


CASE_NAMES = {"batch-noop": "batch read -> noop", "batch-parquet": "batch read -> parquet",
              "stream-noop": "stream AvailableNow -> noop", "stream-parquet": "stream AvailableNow -> parquet",
              "write": "write (sink vs foreachPartition)"}


def print_table(results: dict) -> None:
    print(f"kwire Spark source/sink, PySpark {results.get('spark')}, {results['master']}, Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs; {results['records']:,} records x {PARTITIONS} "
          f"partitions per size; rows/s, best of {results['repeat']} (range over runs)")
    print(f"{'case':<32} {'size':>6} {'kwire rows/s':>13} {'(range)':>19}  {'peer':<12} {'peer rows/s':>12} "
          f"{'(range)':>19} {'ratio':>7}")
    for r in results["rows"]:
        k, p = r["kwire"], r["peer"]
        print(f"{CASE_NAMES[r['case']]:<32} {size_name(r['size']):>6} {k['best']:>13,.0f} "
              f"{k['worst']:>9,.0f}-{k['best']:<9,.0f}  {r['peer_name']:<12} {p['best']:>12,.0f} "
              f"{p['worst']:>9,.0f}-{p['best']:<9,.0f} {r['ratio']:>6.2f}x")
    print()
    print("CPU per row, us, the run using least CPU: total = broker (this process, the embedded broker) + "
          "jvm + python (Spark's workers)")
    print(f"{'case':<32} {'size':>6} {'kwire total':>12} {'broker/jvm/python':>20}  {'peer total':>11} "
          f"{'broker/jvm/python':>20} {'peer/kwire':>11}")
    for r in results["rows"]:
        k, p = r["kwire"]["cpu_us_per_row"], r["peer"]["cpu_us_per_row"]
        if not k or not p:
            continue
        split = [f"{c['broker']:.2f}/{c['jvm']:.2f}/{c['python']:.2f}" for c in (k, p)]
        print(f"{CASE_NAMES[r['case']]:<32} {size_name(r['size']):>6} {k['total']:>12.2f} {split[0]:>20}  "
              f"{p['total']:>11.2f} {split[1]:>20} {r['cpu_ratio']:>10.2f}x")
    print()
    for r in results["rows"]:
        if r["peer_name"] == "ceiling":
            verdict = "met" if r["ratio"] >= GOAL else "NOT met"
            print(f"ratio kwire/ceiling, {CASE_NAMES[r['case']]}, {size_name(r['size'])}: {r['ratio']:.2f}x "
                  f"(goal >= {GOAL:.2f}: {verdict}); CPU per row ceiling/kwire {r['cpu_ratio']:.2f}x")
        else:
            print(f"ratio kwire sink/kafka-python foreachPartition, {size_name(r['size'])}: {r['ratio']:.2f}x; "
                  f"CPU per row kafka-python/kwire {r['cpu_ratio']:.2f}x")
    floors = [r for r in results["rows"] if "floor" in r]
    if floors:
        print()
        print("the floor: the ceiling's rows, each batch yielded once kwire's consumer has received its records "
              "from the broker (CRC checks off); rows/s, best (range), and CPU per row of its most frugal run")
        for r in floors:
            f, c = r["floor"], r["floor"]["cpu_us_per_row"]
            cpu = f"{c['total']:.2f} ({c['broker']:.2f}/{c['jvm']:.2f}/{c['python']:.2f})" if c else "-"
            print(f"{CASE_NAMES[r['case']]:<32} {size_name(r['size']):>6} floor {f['best']:>12,.0f} "
                  f"({f['worst']:,.0f}-{f['best']:,.0f})  floor/ceiling {r['floor_ratio']:.2f}x  "
                  f"kwire/floor {r['kwire']['best'] / f['best']:.2f}x  CPU us/row {cpu}")
    for problem in results["problems"]:
        print(f"FAILED CHECK: {problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per topic (default 1,000,000)")
    parser.add_argument("--value-size", default="100,1024", help="value sizes in bytes, comma-separated "
                        "(default 100,1024)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case and side; best kept (default 3)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds any one Spark action (or the data set's produce) may take (default 600)")
    parser.add_argument("--floor", action="store_true",
                        help="batch reads also run a third source: kwire's consumer receives the records and the "
                             "ceiling's rows are yielded (the cost of receiving, with the rows free)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args(argv)
    unknown = set(args.cases.split(",")) - set(CASES)
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    if args.records < PARTITIONS or args.repeat < 1:
        parser.error("--records must be >= 8 and --repeat >= 1")
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)
    return 1 if results["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
