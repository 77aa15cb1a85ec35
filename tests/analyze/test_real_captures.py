"""Real clients on the wire, captured by tcpdump and dumpcap, read back by the analyzer.

Each scenario (tests/analyze/realcap.py) starts its own peer - kwire's broker or librdkafka's
mock cluster - and real clients (confluent-kafka, kafka-python, kcat) that report what they did:
records delivered, consumed, offsets committed, partitions handed to their assignment callbacks.
The analyzer must find exactly that in the capture, and every message it cannot pair or decode
must have a reason written down here.  The seed's failure (a consumer committing the old offset
of a partition it lost) is played on purpose and must come out as findings naming that consumer,
at frames tshark confirms are OffsetCommit requests.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter, defaultdict
from functools import cache

import confluent_kafka
import pytest

from kwire.analyze.analyzer import AnalyzeOptions, decode_captures
from kwire.analyze.exchange import ANSWERED, UNANSWERED
from kwire.analyze.session import analyze_captures
from kwire.analyze.tables import commit_rows
from kwire.protocol import error_name

from .realcap import ON_MOCK, RUN_IDS, RUNS, capture, run_scenario, tshark_pdus

CONSUMING = {"confluent", "kafka-python", "kcat", "seed", "kafka-python-2.0"}

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


@cache
def decoded(name: str, tool: str):
    """The scenario's run, and its capture decoded with protocol detection (no ports named)."""
    run = run_scenario(name, tool)
    exchanges, decoder = decode_captures([run.path], AnalyzeOptions())
    return run, exchanges, decoder


def explain(ex, run, exchanges) -> str | None:
    """Why an exchange that is not a clean request/response pair is still right, or None."""
    if ex.status == UNANSWERED and ex.details.get("unanswered_by") in ("client_close", "connection_end") and \
            ex.api in ("Fetch", "Metadata", "Heartbeat") and not any(
                o.conn == ex.conn and o.status == ANSWERED and (o.request_frame or 0) > ex.request_frame
                for o in exchanges):
        return ("the client closed the connection while a request it sends on its own (a long-poll Fetch, a "
                "Metadata refresh, a Heartbeat) was still waiting: nothing after it on the connection was answered")
    if run.name in ON_MOCK and ex.api == "ApiVersions" and ex.error == "UNSUPPORTED_VERSION" and \
            "neither its layout nor v0's" in (ex.warning or ""):
        return ("librdkafka's mock cluster answers an ApiVersions version it does not serve in a layout that is "
                "neither that version's nor v0's (KIP-511); the client reads the error code and retries with v0")
    return None


@pytest.mark.parametrize(("name", "tool"), RUNS, ids=RUN_IDS)
def test_the_capture_is_complete_and_in_the_tools_format(name, tool):
    run, exchanges, decoder = decoded(name, tool)
    with open(run.path, "rb") as f:
        head = f.read(4)
    assert (head == PCAPNG_MAGIC) if tool == "dumpcap" else (head in PCAP_MAGICS), head
    assert run.capture.dropped == 0, run.capture.output  # a dropped packet would be a gap, not a bug
    assert decoder.stats["packets"] > 0 and exchanges
    assert decoder.connections and all(c["protocol"] == "kafka" for c in decoder.connections), decoder.connections
    assert all(c["gaps"] == 0 for c in decoder.connections), decoder.connections
    # The peers' ports, and nothing but them (the capture's marker datagrams are UDP).
    assert {int(c["server"].rsplit(":", 1)[1]) for c in decoder.connections} <= set(run.ports)


@pytest.mark.parametrize(("name", "tool"), RUNS, ids=RUN_IDS)
def test_every_request_is_paired_with_its_response(name, tool):
    run, exchanges, decoder = decoded(name, tool)
    unexplained = [ex for ex in exchanges
                   if (ex.status != ANSWERED or ex.warning) and explain(ex, run, exchanges) is None]
    assert unexplained == []
    # Warnings: only those of the explained exchanges, at their frames.
    explained_frames = {ex.response_frame for ex in exchanges if ex.warning and explain(ex, run, exchanges)}
    assert decoder.warnings.dropped == 0
    assert all(w.kind == "undecodable" and w.frame in explained_frames for w in decoder.warnings.kept), \
        decoder.warnings.kept
    # Every request of the capture is there: as many requests as tshark sees.
    requests = sum(1 for p in tshark_pdus(run.path, run.ports) if p.is_request)
    assert requests == sum(1 for ex in exchanges if ex.request_frame is not None)


@pytest.mark.parametrize(("name", "tool"), RUNS, ids=RUN_IDS)
def test_produce_records_are_those_the_producers_delivered(name, tool):
    run, exchanges, _ = decoded(name, tool)
    stored: Counter = Counter()
    refused: Counter = Counter()
    for ex in exchanges:
        if ex.api == "Produce" and ex.status == ANSWERED:
            for p in ex.partitions:
                if p.error_code:
                    refused[(p.topic, p.partition, error_name(p.error_code))] += p.records
                else:
                    stored[(p.topic, p.partition)] += p.records
    assert stored == run.produced()
    assert refused == sum((c.refused for c in run.clients.values()), Counter())
    assert sum(stored.values()) + sum(refused.values()) > 0


@pytest.mark.parametrize(("name", "tool"), [r for r in RUNS if r[0] in CONSUMING],
                         ids=[i for r, i in zip(RUNS, RUN_IDS, strict=True) if r[0] in CONSUMING])
def test_fetched_records_cover_what_the_consumers_consumed(name, tool):
    run, exchanges, _ = decoded(name, tool)
    fetched: Counter = Counter()
    for ex in exchanges:
        if ex.api == "Fetch" and ex.status == ANSWERED:
            for p in ex.partitions:
                fetched[(p.topic, p.partition)] += p.records
    consumed = run.consumed()
    assert consumed and all(fetched[tp] >= n for tp, n in consumed.items()), (fetched, consumed)
    # Nothing fetched that was never produced.
    assert set(fetched) - set(run.produced()) == set()


@pytest.mark.parametrize(("name", "tool"), [r for r in RUNS if r[0] in CONSUMING],
                         ids=[i for r, i in zip(RUNS, RUN_IDS, strict=True) if r[0] in CONSUMING])
def test_offset_commits_are_those_the_clients_made(name, tool):
    run, exchanges, _ = decoded(name, tool)
    accepted: dict[str, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(list))
    for ex in sorted(exchanges, key=lambda e: e.request_frame or 0):
        for row in commit_rows(ex):
            if row["status"] == ANSWERED and not row["error_code"]:
                accepted[row["client_id"]][(row["group"], row["topic"], row["partition"])].append(row["offset"])
    checked = 0
    for client_id, facts in run.clients.items():
        mine = accepted.get(client_id, {})
        if facts.commits:  # every commit, in the order the client made them (per partition)
            told: dict[tuple, list[int]] = defaultdict(list)
            for group, topic, partition, offset in facts.commits:
                told[(group, topic, partition)].append(offset)
            assert dict(mine) == dict(told), client_id
            checked += 1
        if facts.final_commits:  # the client does not say: the cluster's committed offsets are the last ones
            assert {key: offsets[-1] for key, offsets in mine.items()} == facts.final_commits, client_id
            checked += 1
        if not facts.commits and not facts.final_commits:
            assert not mine, f"{client_id} committed nothing, the capture shows {dict(mine)}"
    assert checked


@pytest.mark.parametrize(("name", "tool"), [r for r in RUNS if r[0] in CONSUMING],
                         ids=[i for r, i in zip(RUNS, RUN_IDS, strict=True) if r[0] in CONSUMING])
def test_group_generations_and_assignments_agree_with_the_consumers(name, tool):
    run, exchanges, _ = decoded(name, tool)
    ordered = sorted(exchanges, key=lambda e: e.ts_ns)
    joins = [e for e in ordered if e.api == "JoinGroup" and e.status == ANSWERED and not e.error_code]
    assert joins
    for member in {e.member_id for e in joins}:
        mine = [e for e in ordered if e.member_id == member and e.status == ANSWERED and not e.error_code]
        generations = [e.generation for e in mine if e.api == "JoinGroup"]
        assert generations == sorted(set(generations)), (member, generations)  # each join a new generation
        joined = synced = None
        assignments = []
        for e in mine:
            if e.api == "JoinGroup":
                joined = e.generation
            elif e.api == "SyncGroup":
                assert e.generation == joined, (member, e)  # the generation its last JoinGroup handed out
                synced = e.generation
                assignments.append(set(e.details["assignment"]))
            elif e.api in ("OffsetCommit", "Heartbeat"):
                assert e.generation == synced, (member, e)
        reported = [f for f in run.clients.values() if f.member_id == member]
        if reported:  # the assignments the consumer's callback got, in order
            assert assignments == reported[0].assignments, member
    for f in run.clients.values():
        assert f.member_id is None or f.member_id in {e.member_id for e in joins}, f
    for group, generation in run.groups.items():
        # The members left at the end: the coordinator closed their last generation and moved
        # the empty group to the next one.
        assert generation == max(e.generation for e in joins if e.group == group) + 1, group


def test_the_seed_failure_is_found_at_the_frames_tshark_shows():
    run = run_scenario("seed", "tcpdump")
    seed = run.seed
    analysis = analyze_captures([run.path])
    by_kind = {f.kind: f for f in analysis.findings if f.group == seed["group"] and f.topic == seed["topic"]
               and f.partition == seed["partition"]}
    assert {"stale_offset_recommit", "offset_backwards", "commit_after_partition_lost"} <= set(by_kind), \
        [(f.kind, f.group, f.topic, f.partition) for f in analysis.findings]
    a = run.clients["consumer-A"]
    b = run.clients["consumer-B"]
    stale = by_kind["stale_offset_recommit"]
    lost = by_kind["commit_after_partition_lost"]
    backwards = by_kind["offset_backwards"]
    for finding in (stale, lost):
        assert finding.member == a.member_id and finding.client == "consumer-A"
        assert a.member_id in finding.message
    assert f"offset {seed['stale_offset']}" in stale.message
    # A committed the stale offset once before the rebalance and three times after it.
    assert stale.count == sum(1 for c in a.commits if c[1:] == (seed["topic"], seed["partition"],
                                                                seed["stale_offset"])) == 4
    assert lost.count == backwards.count + 2 == 3  # the first stale commit went backwards, the next two stood still
    assert a.member_id in backwards.message and b.member_id in backwards.message
    highest = max(c[3] for c in b.commits)
    assert f"from {highest}" in backwards.message
    # tshark, reading the same file on its own, shows an OffsetCommit request by A at each frame.
    pdus = {(p.frame, p.correlation_id): p for p in tshark_pdus(run.path, run.ports) if p.is_request}
    frames = {frame for f in (stale, lost, backwards) for _capture, frame in f.frames}
    assert frames
    for frame in frames:
        (pdu,) = [p for (fr, _), p in pdus.items() if fr == frame]
        assert pdu.api_key == 8 and pdu.get("kafka.client_id") == "consumer-A", frame
        assert pdu.get("kafka.consumer_group") == seed["group"] and pdu.get("kafka.member_id") == a.member_id
        entries = [(q.topic, q.partition, int(q.first("kafka.offset"))) for q in pdu.partitions]
        assert (seed["topic"], seed["partition"], seed["stale_offset"]) in entries, (frame, entries)


def test_normal_traffic_gives_no_warning_finding():
    """Every real client doing ordinary work (realcap's 'normal' scenario): short kcat runs one after
    another from one host, a group of two consumers joining (KIP-394's MEMBER_ID_REQUIRED step each,
    and a rebalance when the second arrives), consumers closing during their long-poll Fetch.  The
    capture must hold all of that - or the test proves nothing - and no finding may be a warning
    or an error."""
    run = run_scenario("normal", "tcpdump")
    analysis = analyze_captures([run.path], AnalyzeOptions())
    hosts = Counter(row["client"].rpartition(":")[0] for row in analysis.connections)
    assert max(hosts.values()) >= 20  # one host, many short connections: the old rule's storm
    joins = [r for r in analysis.group_events if r["api"] == "JoinGroup"]
    assert sum(r["error"] == "MEMBER_ID_REQUIRED" for r in joins) >= 3
    assert len({r["generation"] for r in joins if r["group"] == "normal-billing" and r["generation"]}) >= 2
    serious = [f"[{f.severity}] {f.kind}: {f.message}" for f in analysis.findings if f.severity != "info"]
    assert serious == []


def test_a_client_reconnecting_in_a_loop_is_a_reconnect_storm(tmp_path):
    """The other side of the normal-traffic test: one real client (confluent-kafka) whose server
    accepts each connection, reads the first request and closes without a byte back.  librdkafka
    reconnects over and over (reconnect.backoff.ms 50 ms, at most 200 ms): one host, one client id,
    many failed connections - reconnect_storm, naming that client id."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    stop = threading.Event()
    accepted = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:  # the accept timeout: look at stop again
                continue
            accepted.append(conn)
            conn.settimeout(2)
            try:
                conn.recv(4096)  # the client's first request (ApiVersions), never answered
            except OSError:
                pass
            conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    path = tmp_path / "loop.pcap"
    try:
        with capture([port], path, "tcpdump"):
            producer = confluent_kafka.Producer({
                "bootstrap.servers": f"127.0.0.1:{port}", "client.id": "looping-producer",
                "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200, "log_level": 0})
            deadline = time.monotonic() + 30
            while len(accepted) < 15 and time.monotonic() < deadline:
                producer.poll(0.1)
            del producer
    finally:
        stop.set()
        server.join(timeout=5)
        listener.close()
    assert len(accepted) >= 15, len(accepted)
    analysis = analyze_captures([path], AnalyzeOptions(kafka_ports=frozenset({port})))
    (storm,) = [f for f in analysis.findings if f.kind == "reconnect_storm"]
    assert storm.severity == "warning" and storm.count >= 10
    assert storm.client == "127.0.0.1" and "(client 'looping-producer')" in storm.message
