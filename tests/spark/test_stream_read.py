"""spark.readStream.format("kwire"): exactly the records produced (every codec) through
Trigger.AvailableNow in micro-batches bounded by maxOffsetsPerTrigger, a live query that finds
new topics of its pattern and commits each batch's end offsets to kwire.commitGroup (checked
with kwire's admin lag), and a streaming-only rule failing the query before it reads."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.errors import StreamingQueryException

from kwire.client import Admin

from .conftest import create_topic, kafka_rows, produce
from .test_batch_read import CODECS, expected_rows, sample


def stream(spark, broker, **options):
    reader = spark.readStream.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_available_now_reads_exactly_what_was_produced_in_bounded_micro_batches(spark, broker, tmp_path):
    expected = {}
    for codec in CODECS:
        topic = f"scodec-{codec}"
        written = produce(broker.bootstrap, topic, sample(60, codec.encode()), **{"compression.type": codec})
        expected.update(expected_rows(topic, written))
    df = stream(spark, broker, subscribePattern="scodec-.*", startingOffsets="earliest", includeHeaders="true",
                maxOffsetsPerTrigger="120")
    query = (df.writeStream.format("memory").queryName("available_now")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(180), "Trigger.AvailableNow should stop by itself"
    assert query.exception() is None
    assert kafka_rows(spark.table("available_now")) == expected
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == len(expected) == 300
    assert len(sizes) >= 3 and max(sizes) <= 120
    # The last batch ends at the log ends, in Spark's Kafka offset layout.
    last = [p for p in query.recentProgress if p["numInputRows"]][-1]["sources"][0]["endOffset"]
    ends = {}
    for topic, partition, offset in expected:
        ends.setdefault(topic, {})[str(partition)] = max(ends.get(topic, {}).get(str(partition), -1), offset + 1)
    assert (last if isinstance(last, dict) else json.loads(last)) == ends


def group_lag(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        lag = admin.consumer_group_lag(group)
    return {(p.topic, p.partition): (p.committed, p.log_end_offset) for p in lag.partitions}


def wait_for_commits(bootstrap: str, group: str, ends: dict[tuple[str, int], int]) -> dict:
    deadline = time.monotonic() + 20
    while True:
        lag = group_lag(bootstrap, group)
        if {tp: committed for tp, (committed, _end) in lag.items()} == ends or time.monotonic() > deadline:
            return lag
        time.sleep(0.3)


def test_a_live_query_finds_new_topics_and_commits_each_batch_to_the_commit_group(spark, broker, tmp_path):
    create_topic(broker.bootstrap, "live-a")
    produce(broker.bootstrap, "live-a", [(b"old", b"before the query", None, p) for p in range(3)])
    df = stream(spark, broker, subscribePattern="live-.*", **{"kwire.commitGroup": "pipeline"})
    query = (df.selectExpr("topic", "partition", "offset", "value").writeStream.format("memory")
             .queryName("live").option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        assert spark.table("live").count() == 0  # startingOffsets defaults to latest for streams
        first = produce(broker.bootstrap, "live-a", [(None, b"a%d" % i, None) for i in range(60)])
        # A topic created while the query runs: its partitions are read from their start.
        create_topic(broker.bootstrap, "live-b", partitions=2)
        second = produce(broker.bootstrap, "live-b", [(None, b"b%d" % i, None) for i in range(20)])
        query.processAllAvailable()
        got = {(r.topic, r.partition, r.offset): r.value for r in spark.table("live").collect()}
        want = {("live-a", p, o): v for (p, o), (_k, v, _h, _t) in first.items()}
        want.update({("live-b", p, o): v for (p, o), (_k, v, _h, _t) in second.items()})
        assert got == want

        ends = {("live-a", p): 1 + sum(1 for (q, _o) in first if q == p) for p in range(3)}
        ends.update({("live-b", p): sum(1 for (q, _o) in second if q == p) for p in range(2)})
        lag = wait_for_commits(broker.bootstrap, "pipeline", ends)
        assert lag == {tp: (end, end) for tp, end in ends.items()}  # committed = log end: no lag

        more = produce(broker.bootstrap, "live-b", [(None, b"c%d" % i, None) for i in range(15)])
        query.processAllAvailable()
        for p, _o in more:
            ends[("live-b", p)] += 1
        assert spark.table("live").count() == 60 + 20 + 15
        lag = wait_for_commits(broker.bootstrap, "pipeline", ends)
        assert lag == {tp: (end, end) for tp, end in ends.items()}
    finally:
        query.stop()


def test_a_streaming_only_rule_fails_the_query_before_it_reads(spark, broker, tmp_path):
    df = stream(spark, broker, subscribe="live-a", endingOffsets="latest")
    query = (df.writeStream.format("memory").queryName("never")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    with pytest.raises(StreamingQueryException, match="option endingOffsets is not allowed in a streaming query"):
        query.awaitTermination(120)


def test_the_initial_offset_is_decided_once_per_query(broker):
    """Spark asks a stream reader for its initial offset more than once as a query starts: with
    startingOffsets=latest, records arriving in between must not move it (the driver-side reader,
    called as PySpark's streaming runner calls it)."""
    from kwire.spark.options import parse_source_options
    from kwire.spark.reader import KwireStreamReader

    topic = "initial-once"
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [(None, b"before", None, p) for p in (0, 1)])
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "startingOffsets": "latest"}
    reader = KwireStreamReader(parse_source_options(options))
    try:
        first = reader.initialOffset()
        produce(broker.bootstrap, topic, [(None, b"after", None, p) for p in (0, 1)])
        assert reader.initialOffset() == first == {topic: {"0": 1, "1": 1}}
    finally:
        reader.stop()
    later = KwireStreamReader(parse_source_options(options))
    try:
        assert later.initialOffset() == {topic: {"0": 2, "1": 2}}  # a new query starts anew
    finally:
        later.stop()
