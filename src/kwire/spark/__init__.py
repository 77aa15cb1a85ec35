"""Kafka for PySpark without the JVM connector: kwire as a Python data source named ``kwire``.

Spark's Kafka connector is a jar that a pip-installed PySpark does not carry (and Spark reserves
the name ``kafka``).  ``kwire.spark`` gives the same thing through PySpark's Python Data Source
API (PySpark >= 4.3, Java 17), with the connector's option names, schema and semantics, reading
and writing through kwire's own client::

    import kwire.spark
    kwire.spark.register(spark)

    df = (spark.readStream.format("kwire")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", 100_000)
          .load())
    query = (df.selectExpr("CAST(key AS STRING)", "value")
             .writeStream.format("parquet").option("path", "out").option("checkpointLocation", "ckpt")
             .start())

    spark.read.format("kwire").option("kafka.bootstrap.servers", "...").option("subscribe", "events").load()
    df.write.format("kwire").mode("append").option("kafka.bootstrap.servers", "...").option("topic", "out").save()
    df.writeStream.format("kwire").option("kafka.bootstrap.servers", "...").option("checkpointLocation", "c").start()

Rows read (as Spark's connector; every column nullable)::

    key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
    timestampType int, headers array<struct<key: string, value: binary>>  (with includeHeaders=true;
    null for a record without headers)

They reach Spark as Arrow record batches, one task per topic-partition offset range, read by a
kwire consumer that each Python worker keeps across tasks.  The consumer hands over whole
fetched batches and kwire.spark.columns turns them into Arrow columns without a Python object
per record (with kwire's optional compiled helper where it is built, else in Python and
numpy).  Control batches (transaction markers) never become rows; with
``kafka.isolation.level=read_committed`` neither do records of aborted transactions.  A reused
Python worker (Spark's default) moves the objects it has loaded by the end of its first kwire
task to the garbage collector's permanent generation (``gc.freeze()``): Spark runs a full
collection after every task, which then skips them.

Source options (names case-insensitive, as in Spark):

* ``kafka.bootstrap.servers`` (required); every ``kafka.*`` option goes to kwire's consumer
  (``kafka.isolation.level``, ``kafka.max.partition.fetch.bytes``...), checked at planning.
  Two defaults differ from a plain consumer's, for reading ranges that already exist:
  ``kafka.max.partition.fetch.bytes`` 4 MiB (1 MiB) and ``kafka.fetch.max.wait.ms`` 10 (500).
  PySpark hands a Python source its option names lowercased; Kafka's setting names are all
  lowercase, so that changes nothing for them.
  Refused, as by Spark: ``kafka.auto.offset.reset``, ``kafka.enable.auto.commit``,
  ``kafka.key.deserializer``, ``kafka.value.deserializer``, ``kafka.interceptor.classes``.
  ``kafka.group.id`` is accepted and unused (readers assign partitions; see kwire.commitGroup).
* exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regular
  expression matching whole topic names), ``assign`` (JSON: ``{"topicA":[0,1]}``).
* ``startingOffsets``: ``earliest``, ``latest`` or JSON ``{"topicA":{"0":23,"1":-2}}`` (-2
  earliest, -1 latest) naming every partition read.  Default: latest for streams, earliest
  for batches (where latest and -1 are refused).
* ``startingTimestamp`` (ms, every partition) and ``startingOffsetsByTimestamp`` (JSON), which
  take precedence over startingOffsets; ``startingOffsetsByTimestampStrategy``: ``error``
  (default: fail when no record is that recent) or ``latest``.
* ``endingOffsets`` (batch only): ``latest`` (default) or JSON with -1 for latest;
  ``endingTimestamp``, ``endingOffsetsByTimestamp`` likewise.
* ``maxOffsetsPerTrigger`` (streams): at most that many offsets per micro-batch, shared across
  partitions by backlog (through ``latestOffset(start, limit)``, so Trigger.AvailableNow runs
  as several bounded batches).  Unlike Spark's connector, never exceeded by rounding.
* ``minPartitions``: cut large partitions' ranges so that there are at least that many tasks;
  ``maxRecordsPerPartition``: no task longer than that.
* ``failOnDataLoss`` (default true): records deleted before the query read them (retention, a
  deleted topic) fail the query with an error naming the topic, partition and offsets; false
  skips them with a warning (logger ``kwire.spark``; with
  ``spark.sql.pyspark.worker.logging.enabled=true`` it shows in
  ``spark.tvf.python_worker_logs()``).
* ``includeHeaders`` (default false), ``kafkaConsumer.pollTimeoutMs`` (default 120000: a task
  fails when its partition gives nothing for that long).  ``fetchOffset.numRetries``,
  ``fetchOffset.retryIntervalMs`` and ``groupIdPrefix`` are accepted and unused (kwire's client
  retries on its own).  ``minOffsetsPerTrigger`` and ``maxTriggerDelay`` are refused: PySpark's
  data source API has no composite read limits.
* ``kwire.commitGroup`` (streams; beyond Spark's connector): commit each finished micro-batch's
  end offsets to this consumer group, so ``kwire lag GROUP`` (or any lag tool) shows how far
  behind the query is.  The checkpoint stays the truth the query restarts from.

Sink options: ``kafka.bootstrap.servers`` (required), ``kafka.*`` for kwire's producer
(``kafka.compression.type``, ``kafka.linger.ms``, ``kafka.acks``...), ``topic`` (overrides the
topic column).  Columns: ``value`` (string or binary, required), ``key`` (string or binary),
``topic`` (string; needed without the topic option), ``partition`` (int; null lets the
partitioner choose), ``headers`` (array<struct<key: string, value: binary>>); others are
ignored.  Batch writes take ``mode("append")`` (PySpark's default mode, ErrorIfExists, is not
available to Python data sources; a topic cannot be overwritten).

Delivery: **Kafka writes are at-least-once**, as with Spark's own connector.  A task flushes
its records before it succeeds, but a task retried after a failure, or a micro-batch replayed
from the checkpoint after a crash, writes its rows again; deduplicate downstream (on a key) if
duplicates matter.  Reads into a file sink through the checkpoint are exactly-once, as in Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FORMAT", "register"]

FORMAT = "kwire"


def register(spark: SparkSession) -> None:
    """Make ``format("kwire")`` available in ``spark`` (reads, writes, streams)."""
    from .datasource import KwireDataSource

    spark.dataSource.register(KwireDataSource)
