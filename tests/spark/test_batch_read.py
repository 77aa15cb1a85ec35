"""spark.read.format("kwire"): Spark's Kafka schema, exactly the records kwire's Producer wrote
into kwire's broker (every codec, CreateTime and LogAppendTime, keys, values and headers
including nulls), offsets by JSON, timestamp and defaults, minPartitions, transaction markers
stepped over, aborted and open transactions (librdkafka's transactional producer), failOnDataLoss,
and bad options failing at planning with the option named."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kwire.protocol.records import ControlRecordType, build_control_batch

from .conftest import create_topic, kafka_rows, produce

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1_600_000_000_000


def sample(n: int, tag: bytes, t0: int = T0) -> list[tuple]:
    """Records with null keys, null and empty values, varied sizes, repeated header names and
    null header values, explicit timestamps."""
    records = []
    for i in range(n):
        key = None if i % 7 == 0 else b"key-%d" % i
        value = None if i % 11 == 0 else b"" if i % 13 == 0 else b"%s-%d-" % (tag, i) * (i % 17)
        headers = [] if i % 3 == 0 else [("n", b"%d" % i), ("dup", None), ("dup", b"x")]
        records.append((key, value, headers, None, t0 + 1000 * i))
    return records


def source(spark, broker, **options):
    reader = spark.read.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def expected_rows(topic: str, written: dict, timestamp_type: int = 0) -> dict:
    return {(topic, p, o): (k, v, h, ts, timestamp_type) for (p, o), (k, v, h, ts) in written.items()}


def test_the_schema_is_sparks_kafka_schema(spark, broker):
    headers = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
    base = [StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
            StructField("partition", IntegerType()), StructField("offset", LongType()),
            StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType())]
    assert source(spark, broker, subscribe="nothing-yet").schema == StructType(base)
    with_headers = source(spark, broker, subscribe="nothing-yet", includeHeaders="true").schema
    assert with_headers == StructType([*base, StructField("headers", headers)])
    assert all(f.nullable for f in with_headers.fields)


def test_a_batch_read_returns_exactly_what_was_produced_with_every_codec(spark, broker):
    expected = {}
    for codec in CODECS:
        topic = f"codec-{codec}"
        written = produce(broker.bootstrap, topic, sample(120, codec.encode()), **{"compression.type": codec})
        expected.update(expected_rows(topic, written))
    # LogAppendTime: the broker's timestamps (as the producer was told them), timestampType 1.
    create_topic(broker.bootstrap, "codec-appendtime", message_timestamp_type="LogAppendTime")
    written = produce(broker.bootstrap, "codec-appendtime", sample(40, b"lat"), **{"compression.type": "zstd"})
    assert all(ts > T0 + 10**9 for *_, ts in written.values())
    expected.update(expected_rows("codec-appendtime", written, timestamp_type=1))

    got = kafka_rows(source(spark, broker, subscribePattern="codec-.*", includeHeaders="true"))
    assert got == expected
    # Without includeHeaders the same records, no headers column.
    plain = source(spark, broker, subscribe="codec-gzip")
    assert "headers" not in plain.columns and plain.count() == 120


def test_offsets_by_json_by_timestamp_and_option_names_in_any_case(spark, broker):
    topic = "ranges"
    produce(broker.bootstrap, topic, [(b"k", b"%d-%d" % (p, i), None, p, T0 + 1000 * i)
                                      for p in range(3) for i in range(10)])

    def offsets(df) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for r in df.select("partition", "offset").collect():
            out.setdefault(r.partition, []).append(r.offset)
        return {p: sorted(o) for p, o in out.items()}

    df = (spark.read.format("kwire").option("Kafka.bootstrap.servers", broker.bootstrap)
          .option("ASSIGN", '{"ranges":[0,1,2]}')
          .option("startingoffsets", '{"ranges":{"0":-2,"1":3,"2":5}}')
          .option("EndingOffsets", '{"ranges":{"0":4,"1":-1,"2":5}}').load())
    assert offsets(df) == {0: [0, 1, 2, 3], 1: list(range(3, 10))}
    # The first record at or after the time, in every partition.
    assert offsets(source(spark, broker, subscribe=topic, startingTimestamp=str(T0 + 6500))) == {
        p: [7, 8, 9] for p in range(3)}


def test_min_partitions_splits_partitions_into_more_tasks_reading_each_record_once(spark, broker):
    topic = "split"
    produce(broker.bootstrap, topic, [(None, b"%d" % i, None, i % 3) for i in range(60)])
    rows = source(spark, broker, subscribe=topic, minPartitions="7").selectExpr(
        "partition", "offset", "spark_partition_id() AS task").collect()
    assert len({r.task for r in rows}) >= 7
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(3) for o in range(20)]



def test_an_empty_topic_or_an_empty_range_reads_no_rows(spark, broker):
    # A plan without ranges reaches the reader as PySpark's placeholder partition.
    create_topic(broker.bootstrap, "empty")
    assert source(spark, broker, subscribe="empty").count() == 0
    produce(broker.bootstrap, "empty-range", [(None, b"x", None, 0)])
    assert source(spark, broker, assign='{"empty-range": [0]}',
                  startingOffsets='{"empty-range": {"0": 1}}').count() == 0  # past the one record

def test_transaction_markers_never_become_rows(spark, broker):
    """Commit and abort markers (written into the log as a transaction coordinator writes them)
    take offsets but are no records: rows skip them, and a range ending on one still ends."""
    topic = "markers"
    create_topic(broker.bootstrap, topic, partitions=1)

    def marker(kind: int) -> None:
        log = broker.state.logs.get(topic, 0)
        broker.call(lambda: log.append(build_control_batch(kind, producer_id=4242, producer_epoch=0),
                                       allow_control=True))

    produce(broker.bootstrap, topic, [(b"a", b"%d" % i, None, 0) for i in range(3)])
    marker(ControlRecordType.COMMIT)
    produce(broker.bootstrap, topic, [(b"b", b"%d" % i, None, 0) for i in range(3, 5)])
    marker(ControlRecordType.ABORT)
    assert broker.state.logs.get(topic, 0).log_end_offset == 7
    for isolation in ("read_uncommitted", "read_committed"):
        rows = source(spark, broker, subscribe=topic, **{"kafka.isolation.level": isolation}).collect()
        assert sorted((r.offset, r.value) for r in rows) == [
            (0, b"0"), (1, b"1"), (2, b"2"), (4, b"3"), (5, b"4")]


def test_aborted_transactions_never_become_rows_and_open_ones_wait(spark, broker):
    """librdkafka's transactional producer against kwire's broker: a committed, an aborted and a
    still open transaction around plain records.  read_committed rows hold the committed and
    plain records only, and end at the open transaction (the last stable offset);
    read_uncommitted rows hold every data record; no marker is ever a row."""
    import confluent_kafka

    topic = "txn-rows"
    create_topic(broker.bootstrap, topic, partitions=2)
    txn = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-txn",
                                    "log_level": 0})
    txn.init_transactions(20)

    def transaction(tag: bytes, n: int, commit: bool | None) -> list[bytes]:
        txn.begin_transaction()
        values = [b"%s-%d" % (tag, i) for i in range(n)]
        for i, value in enumerate(values):
            txn.produce(topic, value=value, key=b"k%d" % i, partition=i % 2)
        txn.flush(20)
        if commit is True:
            txn.commit_transaction(20)
        elif commit is False:
            txn.abort_transaction(20)
        return values

    committed = transaction(b"committed", 10, True)
    aborted = transaction(b"aborted", 8, False)
    plain = [v for _, (_, v, _, _) in sorted(produce(broker.bootstrap, topic, [
        (None, b"plain-%d" % i, None, i % 2) for i in range(4)]).items())]
    committed += transaction(b"later", 6, True)
    still_open = transaction(b"open", 5, None)  # written, neither committed nor aborted
    try:
        def values(**options) -> list[bytes]:
            return sorted(r.value for r in source(spark, broker, subscribe=topic, **options).collect())

        assert values(**{"kafka.isolation.level": "read_committed"}) == sorted(committed + plain)
        assert values() == sorted(committed + aborted + plain + still_open)
        stream = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("kafka.isolation.level", "read_committed").load())
        query = stream.writeStream.format("memory").queryName("txn_rows").trigger(availableNow=True).start()
        query.awaitTermination(120)
        streamed = sorted(r.value for r in spark.sql("SELECT value FROM txn_rows").collect())
        assert streamed == sorted(committed + plain)
    finally:
        txn.abort_transaction(20)


def test_records_deleted_by_retention_fail_the_read_or_are_skipped_with_a_warning(spark, broker):
    topic = "aged"
    create_topic(broker.bootstrap, topic, partitions=1, internal_segment_bytes="2048", retention_bytes="4096")
    produce(broker.bootstrap, topic, [(None, b"v" * 100, None, 0) for _ in range(200)], **{"batch.size": "1024"})
    log = broker.state.logs.get(topic, 0)
    broker.call(lambda: log.apply_retention())
    first, end = log.log_start_offset, log.log_end_offset
    assert 0 < first < end == 200
    start_at_zero = {"subscribe": topic, "startingOffsets": '{"aged":{"0":0}}'}

    with pytest.raises(Exception) as info:
        source(spark, broker, **start_at_zero).collect()
    message = str(info.value)
    assert f"topic aged partition 0: offsets 0 to {first - 1} were deleted before they were read" in message
    assert "failOnDataLoss" in message

    rows = source(spark, broker, failOnDataLoss="false", **start_at_zero).select("offset").collect()
    assert sorted(r.offset for r in rows) == list(range(first, end))
    logs = spark.tvf.python_worker_logs().where("logger = 'kwire.spark' AND level = 'WARNING'").collect()
    assert any(f"offsets 0 to {first - 1} were deleted" in r.msg and "failOnDataLoss=false" in r.msg for r in logs)


@pytest.mark.parametrize(("options", "named"), [
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of the options assign, subscribe, subscribePattern"),
    ({"subscribe": "t", "startingOffsets": "beginning"}, "option startingOffsets: 'beginning' is not earliest"),
    ({"subscribe": "t", "kafka.bootstrap.servers": ""}, "option kafka.bootstrap.servers must be given"),
    ({"subscribe": "t", "kafka.fetch.max.byte": "1"}, "fetch.max.byte"),
])
def test_bad_options_fail_when_the_dataframe_is_defined(spark, broker, options, named):
    with pytest.raises(AnalysisException) as info:
        source(spark, broker, **options)
    assert named in str(info.value)


def test_batch_only_rules_fail_at_planning_before_any_task(spark, broker):
    df = source(spark, broker, subscribe="t", startingOffsets="latest")
    with pytest.raises(AnalysisException, match="startingOffsets=latest is not allowed in a batch query"):
        df.collect()
