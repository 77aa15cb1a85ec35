"""The data source's planning arithmetic and option checks, without Spark: offset ranges,
maxOffsetsPerTrigger shared by backlog, minPartitions / maxRecordsPerPartition splits, lost-data
detection between micro-batches, and the messages bad options get."""

from __future__ import annotations

import pytest

from kwire.client.types import TopicPartition as TP
from kwire.settings import ConfigError
from kwire.spark.options import check_batch, check_stream, parse_sink_options, parse_source_options
from kwire.spark.planning import OffsetRange, from_json, ranges_between, rate_limit, split_ranges, to_json

BOOT = {"kafka.bootstrap.servers": "localhost:9092"}


# -- maxOffsetsPerTrigger ---------------------------------------------------------------------------
def test_rate_limit_shares_the_limit_by_backlog():
    start = {TP("t", 0): 0, TP("t", 1): 100, TP("t", 2): 50}
    latest = {TP("t", 0): 600, TP("t", 1): 400, TP("t", 2): 150}  # backlogs 600, 300, 100
    end = rate_limit(start, latest, 100)
    taken = {tp: end[tp] - start[tp] for tp in start}
    assert sum(taken.values()) == 100
    assert taken[TP("t", 0)] > taken[TP("t", 1)] > taken[TP("t", 2)] >= 1
    assert abs(taken[TP("t", 0)] - 60) <= 1 and abs(taken[TP("t", 1)] - 30) <= 1


def test_rate_limit_never_exceeds_the_limit_and_starves_no_partition():
    # One huge partition and five nearly empty ones: Spark's rounding would give 6 + 9 offsets.
    start = {TP("t", p): 0 for p in range(6)}
    latest = {TP("t", 0): 100_000, **{TP("t", p): 1 for p in range(1, 6)}}
    end = rate_limit(start, latest, 10)
    assert sum(end[tp] - start[tp] for tp in start) == 10
    assert all(end[TP("t", p)] == 1 for p in range(1, 6))  # each small one is served
    assert end[TP("t", 0)] == 5


def test_rate_limit_below_one_offset_per_partition_serves_the_largest_backlogs():
    start = {TP("t", p): 0 for p in range(4)}
    latest = {TP("t", 0): 5, TP("t", 1): 50, TP("t", 2): 7, TP("t", 3): 40}
    end = rate_limit(start, latest, 2)
    assert {tp: end[tp] for tp in start} == {TP("t", 0): 0, TP("t", 1): 1, TP("t", 2): 0, TP("t", 3): 1}


def test_rate_limit_takes_everything_when_the_backlog_fits_and_leaves_new_partitions_alone():
    start = {TP("t", 0): 10}
    latest = {TP("t", 0): 15, TP("u", 0): 99}
    assert rate_limit(start, latest, 100) == latest
    # A partition the start does not know (the caller gives new ones their earliest offset) is not read.
    assert rate_limit(start, {TP("t", 0): 1000, TP("u", 0): 99}, 10) == {TP("t", 0): 20, TP("u", 0): 99}


# -- ranges ------------------------------------------------------------------------------------------
def covered(ranges):
    return sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))


def test_min_partitions_cuts_large_ranges_into_at_least_that_many_exact_pieces():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 5, 15), OffsetRange("t", 2, 7, 7)]
    pieces = split_ranges(ranges, min_partitions=8)
    assert len(pieces) >= 8
    assert covered(pieces) == covered(ranges)  # every offset once, no overlap, empty range dropped
    assert all(p.size > 0 for p in pieces)
    assert max(p.size for p in pieces if p.partition == 0) <= 1000 / 7 + 1
    # Enough ranges already: one per partition.
    assert split_ranges(ranges, min_partitions=2) == ranges[:2]


def test_max_records_per_partition_bounds_every_task():
    ranges = [OffsetRange("t", 0, 3, 1003), OffsetRange("t", 1, 0, 99)]
    pieces = split_ranges(ranges, max_records=100)
    assert max(p.size for p in pieces) <= 100
    assert len(pieces) == 10 + 1
    assert covered(pieces) == covered(ranges)


def test_ranges_between_micro_batches_and_the_signs_of_lost_data():
    start = {TP("t", 0): 10, TP("t", 1): 50, TP("gone", 0): 3}
    end = {TP("t", 0): 20, TP("t", 1): 40, TP("t", 2): 8, TP("new", 0): 5}
    ranges, problems = ranges_between(start, end, {TP("t", 2): 0, TP("new", 0): 2})
    assert ranges == [OffsetRange("new", 0, 2, 5), OffsetRange("t", 0, 10, 20), OffsetRange("t", 2, 0, 8)]
    assert len(problems) == 3
    assert any("new partition new-0 starts at offset 2" in p and "0 to 1" in p for p in problems)
    assert any("t-1" in p and "end offset 40 is before the start offset 50" in p for p in problems)
    assert any("gone-0 is gone" in p for p in problems)


def test_offsets_travel_in_the_kafka_connectors_json_layout():
    offsets = {TP("b", 1): 7, TP("a", 0): 42, TP("b", 0): 3}
    data = to_json(offsets)
    assert data == {"a": {"0": 42}, "b": {"0": 3, "1": 7}}
    assert from_json(data) == offsets


# -- options -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("options", "named"), [
    ({"subscribe": "t"}, "kafka.bootstrap.servers"),
    ({**BOOT}, "assign, subscribe, subscribePattern"),
    ({**BOOT, "subscribe": "t", "assign": '{"t":[0]}'}, "got assign, subscribe"),
    ({**BOOT, "subscribe": "t", "subscribePattern": "t.*"}, "got subscribe, subscribePattern"),
    ({**BOOT, "subscribe": " , "}, "option subscribe"),
    ({**BOOT, "subscribePattern": "t(("}, "option subscribePattern"),
    ({**BOOT, "assign": "[0, 1]"}, "option assign"),
    ({**BOOT, "subscribe": "t", "startingOffsets": "beginning"}, "option startingOffsets: 'beginning'"),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "option startingOffsets"),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, "option startingOffsets"),
    ({**BOOT, "subscribe": "t", "endingOffsets": "{oops"}, "option endingOffsets"),
    ({**BOOT, "subscribe": "t", "startingTimestamp": "yesterday"}, "option startingTimestamp"),
    ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "option maxOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "t", "minPartitions": "many"}, "option minPartitions"),
    ({**BOOT, "subscribe": "t", "failOnDataLoss": "maybe"}, "option failOnDataLoss"),
    ({**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "10"}, "option minOffsetsPerTrigger"),
    ({**BOOT, "subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ({**BOOT, "subscribe": "t", "kafka.fetch.max.byte": "10"}, "fetch.max.byte"),
    ({**BOOT, "subscribe": "t", "kafka.isolation.level": "dirty"}, "isolation.level"),
])
def test_bad_source_options_are_refused_with_a_message_naming_the_option(options, named):
    with pytest.raises(ConfigError, match=None) as info:
        parse_source_options(options)
    assert named in str(info.value)


def test_batch_and_stream_rules():
    latest = parse_source_options({**BOOT, "subscribe": "t", "startingOffsets": "latest"})
    with pytest.raises(ConfigError, match="startingOffsets=latest is not allowed in a batch"):
        check_batch(latest)
    check_stream(latest)
    minus_one = parse_source_options({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'})
    with pytest.raises(ConfigError, match="startingOffsets: t-0 is -1"):
        check_batch(minus_one)
    ending = parse_source_options({**BOOT, "subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'})
    with pytest.raises(ConfigError, match="endingOffsets: t-0 is -2"):
        check_batch(ending)
    with pytest.raises(ConfigError, match="option endingOffsets is not allowed in a streaming query"):
        check_stream(ending)
    group = parse_source_options({**BOOT, "subscribe": "t", "kwire.commitGroup": "g"})
    with pytest.raises(ConfigError, match="kwire.commitGroup applies to streaming"):
        check_batch(group)


def test_options_are_case_insensitive_and_kafka_settings_reach_the_client():
    options = parse_source_options({"KAFKA.bootstrap.servers": "h:1", "SubScribe": "Orders, Refunds",
                                    "STARTINGOFFSETS": '{"Orders":{"0":-2,"1":7}}', "kafka.isolation.level":
                                    "read_committed", "kafka.group.id": "ignored", "includeheaders": "TRUE"})
    assert options.subscription.topics == ("Orders", "Refunds")  # values keep their case
    assert options.starting.values == {TP("Orders", 0): -2, TP("Orders", 1): 7}
    assert options.include_headers is True
    consumer = options.consumer_settings()
    assert consumer["bootstrap.servers"] == "h:1" and consumer["isolation.level"] == "read_committed"
    assert consumer["auto.offset.reset"] == "none" and "group.id" not in consumer
    assert options.admin_settings() == {"bootstrap.servers": "h:1", "client.id": "kwire-spark"}
    # Kafka's setting names are case-sensitive: the part after kafka. reaches the client as written.
    with pytest.raises(ConfigError, match="'Fetch.Max.Bytes'"):
        parse_source_options({**BOOT, "subscribe": "t", "kafka.Fetch.Max.Bytes": "1000"})
    # Precedence as in Spark: by-timestamp JSON, then one timestamp, then offsets.
    timed = parse_source_options({**BOOT, "subscribe": "t", "startingOffsets": "earliest",
                                  "startingTimestamp": "1700000000000"})
    assert (timed.starting.kind, timed.starting.timestamp) == ("timestamp", 1700000000000)


def test_sink_options():
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        parse_sink_options({"topic": "t"})
    with pytest.raises(ConfigError, match="kafka.value.serializer"):
        parse_sink_options({**BOOT, "kafka.value.serializer": "x"})
    with pytest.raises(ConfigError, match="linger"):
        parse_sink_options({**BOOT, "kafka.linger.ms": "soon"})
    sink = parse_sink_options({**BOOT, "topic": "Out", "kafka.compression.type": "zstd"})
    assert sink.topic == "Out" and sink.producer_settings()["compression.type"] == "zstd"
