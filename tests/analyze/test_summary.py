"""The summary of an analysis: counters, exact latency percentiles, bounded time series, the
terminal report; and the whole run (session.analyze_captures) over the DeepFlow captures."""

from __future__ import annotations

import io
import random
import re
from collections import Counter

from kwire.analyze.analyzer import AnalyzeOptions
from kwire.analyze.exchange import ANSWERED, UNANSWERED, Exchange, PartitionInfo, WarningLog
from kwire.analyze.findings import Finding
from kwire.analyze.session import Analysis, analyze_captures
from kwire.analyze.summary import (
    OTHER,
    SAMPLE_SIZE,
    CappedCounter,
    LatencySeries,
    Summary,
    format_duration,
    format_frames,
    percentile,
    render_text,
)

from .helpers import DEEPFLOW, TS0

MS = 1_000_000


def exchange(api: str = "Produce", *, latency_ms: float | None = 1.0, ts_ns: int = TS0, protocol: str = "kafka",
             conn: int = 1, **fields) -> Exchange:
    """An answered exchange started at ts_ns and answered latency_ms later (None: unanswered)."""
    ex = Exchange(protocol=protocol, capture=fields.pop("capture", "t.pcap"), conn=conn,
                  client=fields.pop("client", f"10.0.0.1:{40000 + conn}"), server=fields.pop("server", "10.0.0.2:9092"),
                  api=api, api_key=fields.pop("api_key", 0), api_version=fields.pop("api_version", 9),
                  correlation_id=fields.pop("correlation_id", 1), request_frame=fields.pop("request_frame", 1),
                  request_ts_ns=ts_ns, **fields)
    if latency_ms is None:
        ex.status = UNANSWERED
    else:
        ex.response_ts_ns = ts_ns + round(latency_ms * MS)
        ex.response_frame = ex.request_frame + 1
    return ex


def empty_analysis(summary: Summary | None = None, **fields) -> Analysis:
    values = dict(captures=["t.pcap"], stats={"packets": 10, "tcp_segments": 9}, warnings=WarningLog(),
                  summary=summary or Summary(), commits=[], group_events=[], connections=[], findings=[])
    values.update(fields)
    return Analysis(**values)


# -- percentiles and counters -------------------------------------------------------------------------

def test_percentiles_are_exact_nearest_rank_values():
    latencies = list(range(1, 101))
    random.Random(7).shuffle(latencies)
    s = Summary()
    for i, ms in enumerate(latencies):
        s.add(exchange("Fetch", latency_ms=ms, ts_ns=TS0 + i * MS))
    (row,) = s.api_rows()
    assert (row["p50"], row["p90"], row["p99"], row["max"]) == (50, 90, 99, 100)
    assert row["count"] == 100 and row["answered"] == 100


def test_percentile_rank_rounds_up():
    values = sorted([5.0, 1.0, 3.0, 2.0, 4.0, 7.0, 6.0])
    assert percentile(values, 50) == 4.0  # rank ceil(3.5) = 4
    assert percentile(values, 90) == 7.0  # rank ceil(6.3) = 7
    assert percentile(values, 1) == 1.0
    assert percentile([], 50) is None


def test_unanswered_exchanges_count_but_have_no_latency():
    s = Summary()
    s.add(exchange("Produce", latency_ms=None))
    s.add(exchange("Produce", latency_ms=3.0))
    (row,) = s.api_rows()
    assert row["count"] == 2 and row["unanswered"] == 1
    assert row["p50"] == row["max"] == 3.0


def test_counts_by_api_connection_error_topic_collection_and_client():
    s = Summary()
    s.add(exchange("Produce", conn=1, client_id="app-a", request_bytes=100, response_bytes=20,
                   partitions=[PartitionInfo("orders", 0, records=5, bytes=500),
                               PartitionInfo("orders", 1, records=2, bytes=200)]))
    s.add(exchange("Produce", conn=1, client_id="app-a", request_bytes=50, response_bytes=10, error_code=2,
                   error="CORRUPT_MESSAGE", errors=Counter({"CORRUPT_MESSAGE": 2}),
                   partitions=[PartitionInfo("orders", 0, error_code=2), PartitionInfo("orders", 0, error_code=2)]))
    s.add(exchange("Fetch", conn=2, client_id="app-b", partitions=[PartitionInfo("audit", 0, records=9)]))
    s.add(exchange("find", protocol="mongodb", conn=3, server="10.0.0.3:27017", database="shop",
                   collection="carts"))

    produce = s.apis[("kafka", "Produce")]
    assert (produce.count, produce.errors, produce.request_bytes, produce.response_bytes) == (2, 1, 150, 30)
    assert s.errors == {("kafka", "Produce", "CORRUPT_MESSAGE"): 2}
    # [exchanges, produced, bytes, fetched, bytes]; a topic counts once per exchange, a partition once per mention
    assert s.topics == {"orders": [2, 7, 700, 0, 0], "audit": [1, 0, 0, 9, 0]}
    assert s.partitions == {("orders", 0): [3, 5, 500, 0, 0], ("orders", 1): [1, 2, 200, 0, 0],
                            ("audit", 0): [1, 0, 0, 9, 0]}
    assert [key for key, _ in s.topics.top(2)] == ["orders", "audit"]
    assert s.collections == {"shop.carts": 1} and s.databases == {"shop": 1}
    assert s.client_ids == {"app-a": 2, "app-b": 1}
    top = s.top_connections(2)
    assert [(c.conn, c.count, c.client_id, c.errors) for c in top] == [(1, 2, "app-a", 1), (2, 1, "app-b", 0)]
    assert s.statuses == {ANSWERED: 4}


def test_records_produced_and_fetched_are_apart():
    """One record produced and read by two consumers: 1 produced, 2 fetched - never 3 records."""
    s = Summary()
    s.add(exchange("Produce", partitions=[PartitionInfo("orders", 0, records=1, bytes=80)]))
    for client in ("a", "b"):
        s.add(exchange("Fetch", client_id=client, partitions=[PartitionInfo("orders", 0, records=1, bytes=80)]))
    assert s.topics["orders"] == [3, 1, 80, 2, 160]
    analysis = empty_analysis()
    analysis.summary = s
    out = io.StringIO()
    render_text(analysis, out, width=200)
    lines = out.getvalue().splitlines()
    header = lines.index(next(line for line in lines if line.startswith("TOPIC ")))
    assert lines[header].split() == ["TOPIC", "EXCHANGES", "PRODUCED", "PRODUCED-BYTES", "FETCHED", "FETCHED-BYTES"]
    assert lines[header + 2].split() == ["orders", "3", "1", "80", "B", "2", "160", "B"]  # under a rule


def test_an_error_without_names_is_counted_under_its_code():
    s = Summary()
    s.add(exchange("insert", protocol="mongodb", error_code=11000))
    assert s.errors == {("mongodb", "insert", "11000"): 1}


def test_tallies_lump_new_keys_once_full():
    s = Summary(distinct_limit=2)
    for topic in ["a", "b", "c", "d"]:
        s.add(exchange("Produce", partitions=[PartitionInfo(topic, 0, records=1)]))
    assert s.topics == {"a": [1, 1, 0, 0, 0], "b": [1, 1, 0, 0, 0], OTHER: [2, 2, 0, 0, 0]}
    assert len(s.partitions) == 3


def test_capped_counter_lumps_new_keys_once_full():
    c = CappedCounter(limit=3)
    for key in ["a", "b", "a", "c", "d", "e", "a"]:
        c.add(key)
    assert c == {"a": 3, "b": 1, "c": 1, OTHER: 2}
    assert len(c) == 4


# -- the latency time series ---------------------------------------------------------------------------

def test_series_buckets_stay_bounded_and_keep_totals_and_maxima():
    series = LatencySeries(max_buckets=50)
    rng = random.Random(1)
    latencies = [rng.uniform(0.1, 50.0) for _ in range(10_000)]
    for second, ms in enumerate(latencies):
        series.add(TS0 + second * 1_000_000_000, ms)
    points = series.points()
    assert len(points) <= 50
    assert sum(b.count for _, b in points) == 10_000
    assert max(b.max_ms for _, b in points) == max(latencies)
    assert all(len(b.sample) <= SAMPLE_SIZE for _, b in points)
    # Widths only double, so every bucket boundary is a multiple of the width.
    assert series.width_ns % 1_000_000_000 == 0 and (series.width_ns // 1_000_000_000).bit_count() == 1
    assert all(start % series.width_ns == 0 for start, _ in points)
    # 10,000 s in at most 50 buckets: each at least 200 s wide.
    assert series.width_ns >= 200 * 1_000_000_000


def test_sparse_series_are_merged_until_bounded():
    series = LatencySeries(max_buckets=10)
    for i in range(100):  # one burst every 1000 s: a single doubling merges nothing
        series.add(TS0 + i * 1000 * 1_000_000_000, float(i))
    assert len(series.buckets) <= 10
    assert sum(b.count for b in series.buckets.values()) == 100


def test_bucket_median_is_exact_while_the_sample_holds_everything():
    series = LatencySeries()
    for ms in [9.0, 1.0, 5.0, 3.0, 7.0]:
        series.add(TS0, ms)
    ((_, bucket),) = series.points()
    assert bucket.median_ms == 5.0 and bucket.max_ms == 9.0 and bucket.count == 5


def test_summary_series_counts_every_exchange_of_an_api():
    s = Summary(max_buckets=20)
    for i in range(500):
        s.add(exchange("Fetch", latency_ms=float(i % 7), ts_ns=TS0 + i * 3 * 1_000_000_000))
    series = s.series[("kafka", "Fetch")]
    assert len(series.buckets) <= 20
    assert sum(b.count for b in series.buckets.values()) == 500


# -- the terminal report -------------------------------------------------------------------------------

def test_format_frames_lists_three_and_counts_the_rest():
    frames = [("a.pcap", n) for n in (12, 57, 90, 91, 95, 99)]
    assert format_frames(frames) == "frames 12, 57, 90 (+3 more)"
    assert format_frames(frames[:1]) == "frame 12"
    assert format_frames([("a.pcap", 3), ("b.pcap", 4)], with_capture=True) == "frames a.pcap:3, b.pcap:4"
    assert format_frames([]) == ""


def test_durations_read_naturally():
    assert format_duration(0.1234) == "0.123 s"
    assert format_duration(42.51) == "42.5 s"
    assert format_duration(725) == "12 min 5 s"
    assert format_duration(3 * 3600 + 20 * 60 + 7) == "3 h 20 min"
    assert format_duration(12 * 86400 + 4 * 3600 + 59) == "12 d 4 h"


def test_render_text_shows_apis_findings_and_warnings():
    s = Summary()
    for i in range(20):
        s.add(exchange("Produce", latency_ms=float(i + 1), client_id="billing", ts_ns=TS0 + i * MS,
                       partitions=[PartitionInfo("orders", i % 3, records=1)]))
    s.add(exchange("OffsetCommit", group="g1", error_code=22, error="ILLEGAL_GENERATION",
                   errors=Counter({"ILLEGAL_GENERATION": 1})))
    finding = Finding(kind="offset_backwards", severity="error", protocol="kafka",
                      message="group g1 committed orders-1 backwards", group="g1", topic="orders", partition=1,
                      count=6, frames=[("t.pcap", n) for n in (12, 57, 90, 91, 95, 99)])
    warnings = WarningLog()
    warnings("t.pcap", 40, 2, "gap", "1460 bytes missing")
    warnings("t.pcap", 41, 2, "gap", "10 bytes missing")
    out = io.StringIO()
    render_text(empty_analysis(s, findings=[finding], warnings=warnings, exchanges=21), file=out, width=100)
    text = out.getvalue()
    assert "Produce" in text and "OffsetCommit" in text
    assert "ILLEGAL_GENERATION" in text and "billing" in text and "orders" in text
    assert "[error] offset_backwards: group g1 committed orders-1 backwards" in text
    assert "frames 12, 57, 90 (+3 more)" in text
    assert "WARNINGS (2: gap 2)" in text and "frame 40, conn 2: [gap] 1460 bytes missing" in text
    # The Produce row: 20 exchanges, latencies 1..20 ms -> p50 10, p90 18, p99 20.
    produce = next(line for line in text.splitlines() if line.split()[:2] == ["kafka", "Produce"])
    assert produce.split()[2:9] == ["20", "0", "0", "10.0", "18.0", "20.0", "20.0"]
    assert max(len(line) for line in text.splitlines()) <= 120


def test_render_text_of_nothing_says_so():
    out = io.StringIO()
    render_text(empty_analysis(captures=[]), file=out, width=80)
    assert "(none readable)" in out.getvalue() and "FINDINGS (0)" in out.getvalue()


# -- the whole run over real captures --------------------------------------------------------------------

def test_analyze_captures_summarises_the_deepflow_captures():
    paths = sorted((DEEPFLOW / "kafka").glob("*.pcap")) + sorted((DEEPFLOW / "mongo").glob("*.pcap"))
    analysis = analyze_captures(paths, AnalyzeOptions())
    assert analysis.captures == [p.name for p in paths] and not analysis.unreadable
    s = analysis.summary
    assert analysis.exchanges == s.exchanges == sum(a.count for a in s.apis.values()) > 0
    apis = {api for _, api in s.apis}
    assert {"Produce", "Fetch", "LeaveGroup", "ApiVersions", "OffsetCommit", "Heartbeat", "find"} <= apis
    assert {protocol for protocol, _ in s.apis} == {"kafka", "mongodb"}
    assert analysis.bytes_read == sum(p.stat().st_size for p in paths)
    assert len(analysis.connections) == analysis.stats["connections"]
    assert s.collections == {"sky-test.query": 1}


# Captures whose every exchange DeepFlow answered cleanly, with its response time ('rrt', in µs).
RRT_CAPTURES = ["00-produce-v2", "00-produce-v7-sw8", "00-produce-v9", "13-leave-group-v4", "18-api-versions-v3"]


def test_latencies_agree_with_deepflow_response_times():
    expected: Counter = Counter()
    for name in RRT_CAPTURES:
        for line in (DEEPFLOW / "kafka" / f"{name}.result").read_text().splitlines():
            if "msg_type: Response" in line:
                api = re.search(r"api_key: (\w+)", line).group(1)
                expected[(api, int(re.search(r"rrt: (\d+)", line).group(1)))] += 1
    analysis = analyze_captures([DEEPFLOW / "kafka" / f"{name}.pcap" for name in RRT_CAPTURES])
    got = Counter((api, round(ms * 1000)) for (_, api), stats in analysis.summary.apis.items()
                  for ms in stats.latencies_ms)
    assert got == expected and len(expected) == len(RRT_CAPTURES)


def test_a_file_that_is_not_a_capture_is_named_and_the_others_still_read(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("this is not a capture\n")
    missing = tmp_path / "gone.pcap"
    good = DEEPFLOW / "kafka" / "00-produce-v2.pcap"
    analysis = analyze_captures([junk, missing, good])
    assert analysis.captures == ["00-produce-v2.pcap"]
    assert [path for path, _ in analysis.unreadable] == [str(junk), str(missing)]
    assert all(path in why for path, why in analysis.unreadable)
    assert analysis.warnings.counts["capture"] == 2
    assert analysis.summary.apis[("kafka", "Produce")].count == 1
