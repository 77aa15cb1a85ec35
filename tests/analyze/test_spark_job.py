"""``kwire analyze --spark`` gives the single-machine analyzer's results, on a real Spark.

One local[2] session for the module.  The same captures go through ``analyzer.decode_captures`` /
``session.analyze_captures`` and through ``spark_job.run_spark_analysis``, and every table row and
every finding must agree: DeepFlow's real captures, and synthetic captures written here with the
codec - the seed's failure (a member re-committing a partition it lost), plus the cases per-flow
decoding has to work for (a connection whose protocol only another connection shows, a closed
connection's addresses reused after the reassembler forgot it).
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
from contextlib import redirect_stdout

import pytest

from kwire.analyze.analyzer import AnalyzeOptions, decode_captures
from kwire.analyze.engines import local_findings, spark_findings
from kwire.analyze.findings import Thresholds
from kwire.analyze.packets import ACK, FIN, PSH, RST
from kwire.analyze.pcapwrite import PcapWriter, TcpConversation
from kwire.analyze.session import analyze_captures
from kwire.analyze.spark_job import expand_captures, make_session, run_spark_analysis, spark_schema
from kwire.analyze.tables import SCHEMAS, exchange_row
from kwire.cli.analyze_cmd import run_spark
from kwire.client.types import TopicPartition
from kwire.protocol import encode_request, encode_response
from kwire.protocol import messages as m
from kwire.protocol.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription

from .helpers import DEEPFLOW

TWIN = "18-api-versions-v3.pcap"  # a one-exchange DeepFlow capture, analysed twice under one name
T0 = 1_700_000_000_000_000_000
S = 1_000_000_000
MS = 1_000_000
BROKER = "10.0.0.1"


@pytest.fixture(scope="module")
def spark():
    session = make_session("local[2]", app_name="kwire test_spark_job", shuffle_partitions=4)
    yield session
    session.stop()


# -- comparing the two paths ---------------------------------------------------------------------------

def _tuples(rows, table: str) -> list[tuple]:
    columns = SCHEMAS[table]
    return sorted((tuple(tuple(v) if isinstance(v, list) else v for v in (r[c] for c in columns)) for r in rows),
                  key=repr)


def _spark_rows(analysis, table: str) -> list[dict]:
    return [r.asDict(recursive=True) for r in analysis.tables[table].collect()]


class Both:
    """One set of captures analysed both ways."""

    def __init__(self, spark, paths, options=None, out_dir=None):
        options = options or AnalyzeOptions()
        exchanges, self.decoder = decode_captures(paths, options)
        self.exchanges = [exchange_row(e) for e in exchanges]
        self.single = analyze_captures(paths, options)
        self.spark = run_spark_analysis(spark, paths, options, out_dir=out_dir)

    def assert_same(self) -> None:
        single, spark = self.single, self.spark
        assert _tuples(_spark_rows(spark, "exchanges"), "exchanges") == _tuples(self.exchanges, "exchanges")
        assert _tuples(_spark_rows(spark, "offset_commits"), "offset_commits") == _tuples(single.commits,
                                                                                            "offset_commits")
        assert _tuples(_spark_rows(spark, "group_events"), "group_events") == _tuples(single.group_events,
                                                                                      "group_events")
        assert _tuples(_spark_rows(spark, "connections"), "connections") == _tuples(single.connections,
                                                                                    "connections")
        assert [f.key() for f in spark.findings] == [f.key() for f in single.findings]
        assert [f.to_row() for f in spark.findings] == [f.to_row() for f in single.findings]
        assert {k: v for k, v in spark.stats.items() if v} == {k: v for k, v in single.stats.items() if v}
        assert spark.warnings.counts == single.warnings.counts
        assert sorted(spark.captures) == sorted(single.captures)


# -- synthetic captures -----------------------------------------------------------------------------------

class CaptureBuilder:
    """Packets of several TCP conversations on one timeline, written to a pcap in time order."""

    def __init__(self):
        self.packets: list[tuple[int, int, bytes]] = []

    def _add(self, ts: int, data: bytes) -> None:
        self.packets.append((ts, len(self.packets), data))

    def conversation(self, client: str, client_port: int, server_port: int = 9092) -> TcpConversation:
        return TcpConversation(self._add, client, client_port, BROKER, server_port)

    def write(self, path) -> str:
        with open(path, "wb") as f:
            w = PcapWriter(f, nanosecond=True)
            for ts, _, data in sorted(self.packets):
                w.write(ts, data)
        return str(path)


def kafka(conv: TcpConversation, ts: int, request, response, *, version: int, cid: int, client_id: str,
          latency: int = 5 * MS) -> None:
    """One request, and its response ``latency`` later (none if response is None)."""
    conv.send(0, encode_request(request, version, cid, client_id), ts)
    if response is not None:
        conv.send(1, encode_response(response, version, cid), ts + latency)


def join(group, member, generation, leader, *, rebalance_ms=30_000):
    request = m.JoinGroupRequest(group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=rebalance_ms,
                                 member_id="", protocol_type="consumer", protocols=[
                                     m.JoinGroupRequest.JoinGroupRequestProtocol(
                                         name="range", metadata=encode_subscription(Subscription(["t"])))])
    response = m.JoinGroupResponse(generation_id=generation, protocol_name="range", leader=leader, member_id=member)
    return request, response


def sync(group, member, generation, partitions):
    request = m.SyncGroupRequest(group_id=group, generation_id=generation, member_id=member)
    response = m.SyncGroupResponse(assignment=encode_assignment(
        Assignment([TopicPartition("t", p) for p in partitions])))
    return request, response


def commit(member, generation, offsets: dict[int, int], error: int = 0):
    P = m.OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    RP = m.OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition
    request = m.OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=generation, member_id=member, topics=[
        m.OffsetCommitRequest.OffsetCommitRequestTopic(
            name="t", partitions=[P(partition_index=p, committed_offset=o) for p, o in offsets.items()])])
    response = m.OffsetCommitResponse(topics=[m.OffsetCommitResponse.OffsetCommitResponseTopic(
        name="t", partitions=[RP(partition_index=p, error_code=error) for p in offsets])])
    return request, response


def seed_capture(path) -> str:
    """The seed's failure: members A and B of group g; generation 1 gives A t-0 and t-1, generation
    2 gives A t-0 and B t-1; B commits t-1 at 60, 70, 80 while A keeps committing t-1 at 50.
    Around it: an error, a throttled heartbeat, a request cut by a reset, a slow JoinGroup, a group
    rebalancing over and over, a host reconnecting over and over."""
    cap = CaptureBuilder()
    a = cap.conversation("10.0.0.2", 50001)
    b = cap.conversation("10.0.0.3", 50002)
    a.handshake(T0)
    kafka(a, T0 + 1 * S, *join("g", "A", 1, "A"), version=5, cid=1, client_id="consumer-A")
    kafka(a, T0 + 2 * S, *sync("g", "A", 1, [0, 1]), version=3, cid=2, client_id="consumer-A")
    kafka(a, T0 + 3 * S, *commit("A", 1, {0: 10, 1: 50}), version=7, cid=3, client_id="consumer-A")
    b.handshake(T0 + 10 * S)
    kafka(b, T0 + 11 * S, *join("g", "B", 2, "A"), version=5, cid=1, client_id="consumer-B")
    # A's JoinGroup of generation 2 is answered 5 s late for a 1 s rebalance timeout: slow
    kafka(a, T0 + 11 * S, *join("g", "A", 2, "A", rebalance_ms=1000), version=5, cid=4, client_id="consumer-A",
          latency=5 * S)
    kafka(a, T0 + 17 * S, *sync("g", "A", 2, [0]), version=3, cid=5, client_id="consumer-A")
    kafka(b, T0 + 17 * S, *sync("g", "B", 2, [1]), version=3, cid=2, client_id="consumer-B")
    for i, (offset_b, cid) in enumerate(((60, 3), (70, 4), (80, 5))):
        kafka(b, T0 + (20 + 2 * i) * S, *commit("B", 2, {1: offset_b}), version=7, cid=cid, client_id="consumer-B")
        kafka(a, T0 + (21 + 2 * i) * S, *commit("A", 2, {0: 20 + i, 1: 50}), version=7, cid=6 + i,
              client_id="consumer-A")
    # B commits with an old generation: ILLEGAL_GENERATION (22)
    kafka(b, T0 + 30 * S, *commit("B", 1, {1: 90}, error=22), version=7, cid=6, client_id="consumer-B")
    kafka(b, T0 + 31 * S, m.HeartbeatRequest(group_id="g", generation_id=2, member_id="B"),
          m.HeartbeatResponse(throttle_time_ms=250), version=3, cid=7, client_id="consumer-B")
    # A's last heartbeat is never answered: the broker resets the connection
    kafka(a, T0 + 32 * S, m.HeartbeatRequest(group_id="g", generation_id=2, member_id="A"), None, version=3, cid=9,
          client_id="consumer-A")
    a.emit(T0 + 33 * S, 1, RST | ACK)
    b.close(T0 + 34 * S)
    # group h: twelve JoinGroups in a minute, each handing out a new generation
    c = cap.conversation("10.0.0.4", 50003)
    c.handshake(T0 + 40 * S)
    for i in range(12):
        kafka(c, T0 + (41 + 3 * i) * S, *join("h", "C", 10 + i, "C"), version=5, cid=1 + i, client_id="consumer-C")
    c.close(T0 + 90 * S)
    # one host opening eleven connections to the broker within 30 s (no data: Kafka, as the broker
    # is known to speak it)
    for i in range(11):
        storm = cap.conversation("10.0.0.9", 41000 + i)
        storm.handshake(T0 + (100 + 3 * i) * S)
        storm.close(T0 + (100 + 3 * i) * S + 10 * MS)
    return cap.write(path)


def flows_capture(path) -> str:
    """Two cases per-flow decoding has to get right.

    Port 7777 is no usual port: a connection from its start shows Kafka; a later connection to it,
    captured mid-conversation (its first bytes the tail of a request), takes Kafka from it.  Then a
    connection closes, and 90 s later (another connection's packet in between moved the capture's
    clock past the reassembler's linger time) its addresses carry data again: a new connection."""
    cap = CaptureBuilder()
    first = cap.conversation("10.0.0.5", 40001, 7777)
    first.handshake(T0)
    kafka(first, T0 + 1 * S, m.ApiVersionsRequest(), m.ApiVersionsResponse(), version=2, cid=1, client_id="early")
    first.close(T0 + 2 * S)
    late = cap.conversation("10.0.0.6", 40002, 7777)
    tail = encode_request(m.MetadataRequest(topics=[]), 1, 99, "late")[-20:] + b"\x00" * 10
    late.emit(T0 + 5 * S, 0, ACK | PSH, tail)
    for i in range(3):
        kafka(late, T0 + (6 + i) * S, m.MetadataRequest(topics=[]), m.MetadataResponse(), version=1, cid=100 + i,
              client_id="late")
    late.close(T0 + 10 * S)

    reused = cap.conversation("10.0.0.7", 45000)
    reused.handshake(T0 + 20 * S)
    kafka(reused, T0 + 21 * S, m.ApiVersionsRequest(), m.ApiVersionsResponse(), version=2, cid=1, client_id="reuser")
    reused.close(T0 + 22 * S)
    other = cap.conversation("10.0.0.8", 46000)
    other.handshake(T0 + 100 * S)
    kafka(other, T0 + 101 * S, m.ApiVersionsRequest(), m.ApiVersionsResponse(), version=2, cid=1, client_id="other")
    other.close(T0 + 102 * S)
    kafka(reused, T0 + 110 * S, m.ApiVersionsRequest(), m.ApiVersionsResponse(), version=2, cid=2, client_id="reuser")
    reused.emit(T0 + 111 * S, 0, FIN | ACK)
    reused.emit(T0 + 111 * S + MS, 1, FIN | ACK)
    return cap.write(path)


@pytest.fixture(scope="module")
def analysed(spark, tmp_path_factory):
    """DeepFlow's captures, the synthetic ones and a file that is not a capture, in one run."""
    deepflow = sorted(str(p) for p in DEEPFLOW.glob("*/*.pcap"))
    assert len(deepflow) >= 10, f"captures not found under {DEEPFLOW}"
    tmp = tmp_path_factory.mktemp("spark_captures")
    junk = tmp / "notes.pcap"
    junk.write_text("not a capture\n")
    (tmp / "again").mkdir()
    twin = shutil.copy(DEEPFLOW / "kafka" / TWIN, tmp / "again" / TWIN)  # same name, another file
    paths = [*deepflow, seed_capture(tmp / "seed.pcap"), flows_capture(tmp / "flows.pcap"), str(junk), str(twin)]
    out = tmp / "tables"
    both = Both(spark, paths, out_dir=str(out))
    both.out = out
    both.deepflow = {os.path.basename(p) for p in deepflow}
    return both


def test_deepflow_captures_give_the_same_rows_and_findings(analysed):
    deepflow = [r for r in analysed.exchanges if r["capture"] in analysed.deepflow]
    assert len(deepflow) > 10
    assert {r["protocol"] for r in deepflow} == {"kafka", "mongodb"}
    analysed.assert_same()


def test_connections_are_numbered_per_capture_in_order_of_first_packet(analysed):
    by_capture: dict[str, list] = {}
    for r in _spark_rows(analysed.spark, "connections"):
        by_capture.setdefault(r["capture"], []).append((r["first_frame"], r["conn"]))
    assert len(by_capture) == len(analysed.deepflow) + 2
    for capture, pairs in by_capture.items():
        pairs.sort()
        numbers = [conn for _, conn in pairs]
        if capture == TWIN:  # two files of that name, numbered each on its own
            assert numbers == [n for n in range(1, len(pairs) // 2 + 1) for _ in (1, 2)]
        else:
            assert numbers == list(range(1, len(pairs) + 1))


def test_two_files_of_the_same_name_are_decoded_apart(analysed):
    twins = [r for r in _spark_rows(analysed.spark, "exchanges") if r["capture"] == TWIN]
    assert len(twins) == 2 and twins[0] == twins[1]  # one exchange in each file, not a mix of both
    assert twins[0]["status"] == "answered"


def _findings(analysis, kind):
    return [f for f in analysis.findings if f.kind == kind]


def test_the_seeds_failure_is_found_on_spark(analysed):
    spark = analysed.spark
    a_commits_p1 = sorted(r["request_frame"] for r in analysed.single.commits
                          if r["member_id"] == "A" and r["partition"] == 1 and r["generation"] == 2)
    assert len(a_commits_p1) == 3

    stale, = [f for f in _findings(spark, "stale_offset_recommit") if f.partition == 1]
    assert (stale.group, stale.topic, stale.member, stale.client, stale.count) == ("g", "t", "A", "consumer-A", 4)
    assert "offset 80 had already been committed" in stale.message

    backwards, = _findings(spark, "offset_backwards")
    assert (backwards.group, backwards.topic, backwards.partition, backwards.count) == ("g", "t", 1, 3)
    assert [frame for _, frame in backwards.frames] == a_commits_p1
    assert "from 80 (member 'B') to 50 (member 'A')" in backwards.message

    lost, = _findings(spark, "commit_after_partition_lost")
    assert (lost.group, lost.topic, lost.partition, lost.member, lost.count) == ("g", "t", 1, "A", 3)
    assert [frame for _, frame in lost.frames] == a_commits_p1
    assert "generation 2" in lost.message and "accepted 3 of 3" in lost.message

    two, = _findings(spark, "partition_committed_by_two_members")
    assert (two.group, two.partition, two.count) == ("g", 1, 6)


def test_the_other_rules_fire_on_spark_as_on_one_machine(analysed):
    kinds = {f.kind for f in analysed.spark.findings}
    assert {"error_response", "throttled", "unanswered", "slow_request", "rebalance_storm",
            "reconnect_storm"} <= kinds
    storm, = _findings(analysed.spark, "rebalance_storm")
    assert (storm.group, storm.count) == ("h", 12)
    reconnect, = _findings(analysed.spark, "reconnect_storm")
    assert (reconnect.client, reconnect.count, reconnect.protocol) == ("10.0.0.9", 11, "kafka")


def test_a_connection_takes_the_protocol_another_flow_sniffed(analysed):
    late = [r for r in analysed.exchanges if r["client_id"] == "late"]
    assert len(late) == 3  # the single-machine path decodes it as Kafka...
    assert analysed.spark.redecoded_flows == 1  # ...and so does Spark, by decoding its flow again
    spark_late = [r for r in _spark_rows(analysed.spark, "exchanges") if r["client_id"] == "late"]
    assert sorted(r["correlation_id"] for r in spark_late) == [100, 101, 102]


def test_addresses_reused_after_the_linger_time_open_a_new_connection(analysed):
    reused = sorted((r["conn"], r["first_frame"]) for r in _spark_rows(analysed.spark, "connections")
                    if r["client"] == "10.0.0.7:45000")
    assert len(reused) == 2 and reused[0][0] < reused[1][0]
    # the request that reopened the addresses starts the new connection: decoded and answered
    for rows in (analysed.exchanges, _spark_rows(analysed.spark, "exchanges")):
        assert sorted((r["correlation_id"], r["status"]) for r in rows if r["client_id"] == "reuser") == [
            (1, "answered"), (2, "answered")]


def test_a_file_that_is_not_a_capture_is_named_and_skipped(analysed):
    assert [os.path.basename(path) for path, _ in analysed.spark.unreadable] == ["notes.pcap"]
    assert sorted(set(analysed.spark.captures)) == sorted({*analysed.deepflow, "flows.pcap", "seed.pcap"})
    assert any("notes.pcap" in w.message for w in analysed.spark.warnings.kept)


def test_the_tables_are_written_as_parquet(spark, analysed):
    for table in ("exchanges", "offset_commits", "group_events", "connections", "findings"):
        back = spark.read.parquet(str(analysed.out / table))
        assert back.count() == analysed.spark.tables[table].count() > 0
    findings = [r.asDict(recursive=True) for r in spark.read.parquet(str(analysed.out / "findings")).collect()]
    assert sorted(findings, key=repr) == sorted((f.to_row() for f in analysed.single.findings), key=repr)


def test_the_command_runs_in_the_active_session(spark, analysed, tmp_path):
    seed = str(analysed.out.parent / "seed.pcap")
    args = argparse.Namespace(captures=[str(analysed.out.parent / "s*.pcap")], master=None, parquet=None, json=None,
                              html=None, kafka_ports=[], mongo_ports=[], max_frame_size=None, trust_acks=True,
                              slow_ms=None, quiet=False, records=False)
    out = io.StringIO()
    with redirect_stdout(out):
        assert run_spark(args) == 0
    text = out.getvalue()
    assert "stale_offset_recommit" in text and "OffsetCommit" in text
    assert expand_captures([seed, str(tmp_path / "none*.pcap")]) == ([seed], [str(tmp_path / "none*.pcap")])
    assert spark.range(3).count() == 3  # the module's session is still up
    missing = argparse.Namespace(**{**vars(args), "captures": [os.path.join(str(tmp_path), "absent.pcap")]})
    assert run_spark(missing) == 2


# -- the rules alone, on rows with every awkward value --------------------------------------------------

def random_tables(rng: random.Random, n: int = 200) -> dict[str, list[dict]]:
    """Rows of the four tables drawn from small domains, so keys collide, times tie, windows fill up
    and nulls turn up everywhere a column allows them.  Frames are unique per table (as in a capture)."""
    def pick(*values):
        return rng.choice(values)

    def ts():
        return pick(None, *(T0 + k * S for k in range(12)))

    frames = iter(rng.sample(range(1, 100_000), 16 * n))
    commits = [{
        "capture": pick("c1", "c2", None), "conn": 1, "client": "10.0.0.2:1", "client_id": pick("ca", "cb", None),
        "api": "OffsetCommit", "api_version": 7, "request_frame": pick(next(frames), None),
        "response_frame": next(frames), "ts_ns": ts(), "group": pick("g", "g", None),
        "member_id": pick("A", "B", "", None), "generation": pick(-1, 1, 2, None), "topic": pick("t", "t", "u", None),
        "partition": pick(0, 1, None), "offset": pick(1, 2, 5, None),
        "error_code": pick(0, 0, 0, 22, None), "error": None, "status": pick("answered", "answered", "unanswered"),
    } for _ in range(2 * n)]
    group_events = [{
        "capture": pick("c1", "c2", None), "conn": 1, "client": "10.0.0.2:1", "client_id": pick("ca", None),
        "api": pick("JoinGroup", "JoinGroup", "SyncGroup", "SyncGroup", "Heartbeat"), "api_version": 3,
        "request_frame": pick(next(frames), None), "response_frame": pick(next(frames), None), "ts_ns": ts(),
        "group": pick("g", "h", None), "member_id": pick("A", "B", None), "generation": pick(0, 1, 2, 3, 4, None),
        "error_code": pick(0, 0, 27, 79, None), "error": None, "status": pick("answered", "answered", "unanswered"),
        "protocol_name": None, "leader": None,
        "assignment": pick(None, [], ["t:0"], ["t:0", "t:1"], ["t:1", "u:0"], ["u:0", "u:1"]),
    } for _ in range(n)]
    connections = [{
        "capture": pick("c1", "c2", None), "conn": i + 1,
        "client": pick("10.0.0.2:5000", "10.0.0.2:5001", "[fe80::1]:6000", "[fe80::1", "host", "", None),
        "server": pick("10.0.0.1:9092", None), "protocol": pick("kafka", "mongodb", "other", None), "roles": "syn",
        "first_frame": pick(next(frames), None), "first_ts_ns": ts(), "last_frame": 1, "last_ts_ns": T0,
        "bytes_to_server": 0, "bytes_to_client": pick(0, 0, None, 500), "gaps": 0, "gap_bytes": 0, "exchanges": 0, "end": None,
    } for i in range(n)]
    exchanges = []
    for _ in range(4 * n):
        row = dict.fromkeys(SCHEMAS["exchanges"])
        row.update(
            capture=pick("c1", "c2", None), conn=pick(1, 2, 3, None),  # reconnect_storm reads the client ids
            protocol=pick("kafka", "kafka", "mongodb", None),
            api=pick("Fetch", "ApiVersions"), api_version=pick(0, 3, None),
            status=pick("answered", "answered", "answered", "unanswered", "orphan_response", "undecodable",
                        "no_response"),
            client_id=pick("ca", "cb", None),
            request_frame=pick(next(frames), None), response_frame=pick(next(frames), None),
            request_ts_ns=ts(), response_ts_ns=ts(),
            error=pick(None, None, "UNSUPPORTED_VERSION", "UNKNOWN_SERVER_ERROR", "MEMBER_ID_REQUIRED",
                       "REBALANCE_IN_PROGRESS"),
            throttle_ms=pick(0, 0, -1, 100, 250, None), latency_ms=pick(None, 50.0, 100.0, 1000.0, 1500.5, 3000.0),
            expected_wait_ms=pick(None, -5, 0, 500, 2000), unanswered_by=pick(None, "connection_end", "skipped",
                                                                              "capture_end", "client_close"))
        exchanges.append(row)
    return {"exchanges": exchanges, "offset_commits": commits, "group_events": group_events,
            "connections": connections}


def test_the_rules_on_spark_equal_the_rules_on_duckdb(spark):
    """One SQL text per rule, two engines: the same findings, messages included, from the same rows."""
    tables = random_tables(random.Random(1))
    thresholds = Thresholds(storm_window_s=3, storm_joins=4, storm_generations=3, storm_rebalance_errors=3,
                            reconnect_window_s=2.5, reconnect_connections=3, stale_repeats=2, slow_kafka_ms=1000,
                            slow_mongodb_ms=100)
    expected = local_findings(tables["exchanges"], tables["offset_commits"], tables["group_events"],
                              tables["connections"], thresholds)
    frames = {name: spark.createDataFrame(rows, spark_schema(SCHEMAS[name])) for name, rows in tables.items()}
    spark.conf.set("spark.sql.shuffle.partitions", "1")  # as run_spark_analysis runs the rules (small tables)
    try:
        got = spark_findings(spark, frames, thresholds)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "4")
    assert len({f.kind for f in expected}) == 14  # the draw makes every rule fire
    assert max(f.count for f in expected) > 20  # and some finding lists only the smallest frames
    assert [f.to_row() for f in got] == [f.to_row() for f in expected]


@pytest.mark.parametrize("capture", sorted(p.name for p in DEEPFLOW.glob("*/*.pcap")))
def test_both_engines_give_the_same_findings_on_each_real_capture(spark, capture):
    """Every real capture, alone: its tables as ``kwire analyze`` makes them, the rules run by DuckDB
    (what ``kwire analyze`` reports) and by Spark SQL (``--spark``) on those same rows."""
    (path,) = DEEPFLOW.glob(f"*/{capture}")
    single = analyze_captures([path])
    exchanges, _ = decode_captures([path], AnalyzeOptions())
    tables = {"exchanges": [exchange_row(e) for e in exchanges], "offset_commits": single.commits,
              "group_events": single.group_events, "connections": single.connections}
    assert tables["exchanges"] and tables["connections"]
    frames = {name: spark.createDataFrame(rows, spark_schema(SCHEMAS[name])) for name, rows in tables.items()}
    assert [f.to_row() for f in spark_findings(spark, frames)] == [f.to_row() for f in single.findings]
