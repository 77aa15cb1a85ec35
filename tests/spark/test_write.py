"""df.write / df.writeStream .format("kwire"): rows become records with their value, key,
headers, partition and topic columns (the topic option overriding the column), read back
exactly with kwire's Consumer; a source-to-sink streaming pipeline; and sink inputs Spark's
Kafka sink refuses failing at planning with the column or option named."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from kwire.client import Admin

from .conftest import kafka_rows, produce, read_back

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA = StructType([
    StructField("topic", StringType()), StructField("key", StringType()), StructField("value", BinaryType()),
    StructField("partition", IntegerType()), StructField("headers", HEADERS), StructField("ignored", StringType()),
])


def rows(topics: list[str], n: int) -> list[tuple]:
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else f"k{i}"
        value = None if i % 9 == 0 else bytearray(b"value-%d" % i)
        partition = None if i % 2 else i % 3
        headers = None if i % 4 == 0 else [("h", bytearray(b"%d" % i)), ("nil", None)]
        out.append((topics[i % len(topics)], key, value, partition, headers, "not written"))
    return out


def as_records(data: list[tuple], topic: str | None = None) -> Counter:
    """What each row should become: (topic, partition or None, key bytes, value, headers)."""
    return Counter((topic or t, p, None if k is None else k.encode(), None if v is None else bytes(v),
                    tuple((hk, None if hv is None else bytes(hv)) for hk, hv in h or ()))
                   for t, k, v, p, h, _ in data)


def written(bootstrap: str, topic: str, n: int, partitioned: Counter) -> Counter:
    """The records read back from ``topic``, with the partition kept where the row chose one."""
    chosen = {(t, k, v, h) for (t, p, k, v, h) in partitioned if p is not None}
    got = Counter()
    for r in read_back(bootstrap, topic, n):
        content = (topic, r.key, r.value, tuple(r.headers))
        got[(topic, r.partition if content in chosen else None, *content[1:])] += 1
    return got


def sink(df, broker, **options):
    writer = df.write.format("kwire").mode("append").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def test_a_batch_write_produces_every_row_with_its_columns(spark, broker):
    data = rows(["out-a", "out-b"], 90)
    sink(spark.createDataFrame(data, SCHEMA).repartition(2), broker, **{"kafka.compression.type": "zstd"})
    expected = as_records(data)
    got = written(broker.bootstrap, "out-a", 45, expected) + written(broker.bootstrap, "out-b", 45, expected)
    assert got == expected


def test_the_topic_option_overrides_the_topic_column(spark, broker):
    data = rows(["elsewhere-1", "elsewhere-2"], 30)
    sink(spark.createDataFrame(data, SCHEMA).drop("partition"), broker, topic="override")
    expected = Counter((t, None, k, v, h) for (t, _p, k, v, h) in as_records(data, topic="override").elements())
    assert written(broker.bootstrap, "override", 30, Counter()) == expected
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert not {"elsewhere-1", "elsewhere-2"} & set(admin.list_topics())


def test_a_streaming_pipeline_from_a_topic_to_a_topic(spark, broker, tmp_path):
    source = produce(broker.bootstrap, "pipeline-in", [(b"k%d" % i, b"v%d" % i, [("n", b"%d" % i)]) for i in range(50)])
    df = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", "pipeline-in").option("startingOffsets", "earliest").option("includeHeaders", "true")
          .load().selectExpr("key", "concat(value, CAST('!' AS BINARY)) AS value", "headers", "partition"))
    query = (df.writeStream.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", "pipeline-out").option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None
    got = {(r.partition, r.key): (r.value, tuple(r.headers)) for r in read_back(broker.bootstrap, "pipeline-out", 50)}
    assert got == {(p, k): (v + b"!", h) for (p, _o), (k, v, h, _t) in source.items()}
    # The records written read back through the source as well.
    assert len(kafka_rows(spark.read.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
                          .option("subscribe", "pipeline-out").load())) == 50


@pytest.mark.parametrize(("select", "options", "named"), [
    ("key", {"topic": "t"}, "needs a 'value' column"),
    ("CAST(1 AS INT) AS value", {"topic": "t"}, "the 'value' column must be string or binary, not int"),
    ("value", {}, "no topic to write to: give the topic option, or a 'topic' column"),
    ("value, CAST(1 AS BIGINT) AS partition", {"topic": "t"}, "the 'partition' column must be int, not bigint"),
    ("value, array('x') AS headers", {"topic": "t"}, "the 'headers' column must be"),
    ("value", {"topic": "t", "kafka.acks": "several"}, "acks"),
])
def test_sink_inputs_spark_refuses_fail_at_planning(spark, broker, select, options, named):
    df = spark.range(1).selectExpr("CAST('v' AS BINARY) AS value", "CAST('k' AS BINARY) AS key").selectExpr(
        *select.split(", "))
    with pytest.raises(Exception) as info:
        sink(df, broker, **options)
    assert named in str(info.value)


def test_overwriting_a_topic_is_refused(spark, broker):
    df = spark.range(1).selectExpr("CAST('v' AS BINARY) AS value")
    with pytest.raises(Exception, match=r"cannot be overwritten: write with mode\('append'\)"):
        df.write.format("kwire").mode("overwrite").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", "t").save()
