"""The findings rules (``rules``, run here by DuckDB as ``kwire analyze`` runs them), on table rows
built from synthetic exchanges (tables.* are the contract).  test_spark_job checks that Spark SQL
gives the same findings from the same rows."""

from __future__ import annotations

import random
import socket

from kwire.analyze.engines import local_findings
from kwire.analyze.exchange import ANSWERED, ORPHAN_RESPONSE, UNANSWERED, UNDECODABLE, Exchange, PartitionInfo
from kwire.analyze.findings import FINDINGS_SCHEMA, MAX_FRAMES, Finding, Thresholds
from kwire.analyze.tables import commit_rows, connection_row, exchange_row, group_event_row
from kwire.analyze.tcp import Connection

CAP = "seed.pcap"
S = 1_000_000_000
MS = 1_000_000
T0 = 1_700_000_000 * S
GROUP, TOPIC = "billing", "payments"
A, B = "member-A", "member-B"

_API_KEYS = {"Produce": 0, "Fetch": 1, "OffsetCommit": 8, "JoinGroup": 11, "Heartbeat": 12, "SyncGroup": 14,
             "ApiVersions": 18}


def exchange(api: str, frame: int, at_ns: int, *, latency_ms: float | None = 2.0, status: str = ANSWERED,
             protocol: str = "kafka", capture: str = CAP, **fields) -> Exchange:
    """An exchange whose request is frame ``frame`` at T0 + at_ns (and response, when answered,
    frame + 1 after ``latency_ms``)."""
    answered = status == ANSWERED
    orphan = status == ORPHAN_RESPONSE
    fields.setdefault("api_version", -1 if protocol == "mongodb" else 4)
    fields.setdefault("client", "10.0.0.1:40000")
    fields.setdefault("server", "10.0.0.9:9092")
    return Exchange(
        protocol=protocol, capture=capture, conn=1, api=api,
        api_key=_API_KEYS.get(api, 2013 if protocol == "mongodb" else 0), correlation_id=frame, status=status,
        request_frame=None if orphan else frame, request_ts_ns=None if orphan else T0 + at_ns,
        response_frame=frame + 1 if answered else frame if orphan else None,
        response_ts_ns=T0 + at_ns + round(latency_ms * MS) if answered else T0 + at_ns if orphan else None,
        **fields)


def xrow(api: str, frame: int, at_ns: int = 0, *, details: dict | None = None, **kw) -> dict:
    ex = exchange(api, frame, at_ns, **kw)
    ex.details.update(details or {})
    return exchange_row(ex)


def commit(frame: int, at_s: float, member: str, generation: int, partition: int, offset: int, *,
           error_code: int = 0, status: str = ANSWERED, group: str = GROUP) -> list[dict]:
    ex = exchange("OffsetCommit", frame, round(at_s * S), status=status, group=group, member_id=member,
                  generation=generation, client_id=f"client-{member}",
                  partitions=[PartitionInfo(TOPIC, partition, error_code, offset)])
    return commit_rows(ex)


def sync(frame: int, at_s: float, member: str, generation: int, partitions: list[int] | None, *,
         error_code: int = 0) -> dict:
    ex = exchange("SyncGroup", frame, round(at_s * S), group=GROUP, member_id=member, generation=generation,
                  client_id=f"client-{member}", error_code=error_code)
    if partitions is not None:
        ex.details["assignment"] = [(TOPIC, p) for p in partitions]
    return group_event_row(ex)


def group_event(api: str, frame: int, at_ns: int, *, generation: int | None = None, error_code: int = 0,
                group: str = GROUP, member: str = A) -> dict:
    return group_event_row(exchange(api, frame, at_ns, group=group, member_id=member, generation=generation,
                                    error_code=error_code, error="REBALANCE_IN_PROGRESS" if error_code == 27 else None))


def seed_story() -> tuple[list[dict], list[dict]]:
    """Generation 1: A owns p0 and p1.  Generation 2: A keeps p0, B gets p1; B commits p1 at 60, 70,
    80 while A keeps committing p1 at 50 (the broker accepts: generation and member are valid)."""
    events = [group_event("JoinGroup", 1, 1 * S, generation=1), sync(3, 2, A, 1, [0, 1]),
              group_event("JoinGroup", 20, 10 * S, generation=2),
              group_event("JoinGroup", 22, 10 * S, generation=2, member=B),
              sync(24, 11, A, 2, [0]), sync(26, 11, B, 2, [1])]
    commits = [*commit(5, 3, A, 1, 1, 50), *commit(7, 3.5, A, 1, 0, 10),
               *commit(30, 12, B, 2, 1, 60), *commit(32, 13, A, 2, 1, 50),
               *commit(34, 14, B, 2, 1, 70), *commit(36, 15, A, 2, 1, 50),
               *commit(38, 16, B, 2, 1, 80), *commit(40, 17, A, 2, 1, 50),
               *commit(42, 17.5, A, 2, 0, 12)]
    return commits, events


COMMIT_KINDS = {"offset_backwards", "stale_offset_recommit", "partition_committed_by_two_members",
                "commit_after_partition_lost"}


def commit_findings(commits: list[dict], events: list[dict] = (), thresholds: Thresholds | None = None
                    ) -> list[Finding]:
    """Rules 1-4: those of the commits (and the SyncGroups of ``events``)."""
    return [f for f in local_findings(commits=commits, group_events=events, thresholds=thresholds)
            if f.kind in COMMIT_KINDS]


def group_findings(events: list[dict], thresholds: Thresholds | None = None) -> list[Finding]:
    """Rule 5 (the only rule over group events alone)."""
    return local_findings(group_events=events, thresholds=thresholds)


def connection_findings(connections: list[dict], thresholds: Thresholds | None = None,
                        exchanges: list[dict] = ()) -> list[Finding]:
    """Rule 10 (connections, with the client ids of their exchanges)."""
    return local_findings(exchanges=exchanges, connections=connections, thresholds=thresholds)


def exchange_results(rows: list[dict], thresholds: Thresholds | None = None) -> list[Finding]:
    """Rules 6-9, 11 and 12 (exchanges alone)."""
    return local_findings(exchanges=rows, thresholds=thresholds)


def by_kind(findings: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.kind, []).append(f)
    return out


def frames(*numbers: int, capture: str = CAP) -> list[tuple[str, int]]:
    return [(capture, n) for n in numbers]


# -- the seed's failure, as a story --------------------------------------------------------------

def test_seed_story_names_partition_and_member_in_three_rules():
    commits, events = seed_story()
    found = by_kind(commit_findings(commits, events))
    assert sorted(found) == ["commit_after_partition_lost", "offset_backwards",
                             "partition_committed_by_two_members", "stale_offset_recommit"]
    for kind in ("stale_offset_recommit", "offset_backwards", "commit_after_partition_lost"):
        (f,) = found[kind]
        assert (f.severity, f.group, f.topic, f.partition) == ("error", GROUP, TOPIC, 1)
        assert repr(A) in f.message

    (stale,) = found["stale_offset_recommit"]
    assert (stale.member, stale.client, stale.count) == (A, f"client-{A}", 4)
    assert stale.frames == frames(5, 32, 36, 40)
    assert "offset 50" in stale.message and "offset 80" in stale.message
    assert (stale.first_ts_ns, stale.last_ts_ns) == (T0 + 3 * S, T0 + 17 * S)

    (back,) = found["offset_backwards"]
    assert back.count == 3 and back.frames == frames(32, 36, 40)
    assert "from 80" in back.message and "to 50" in back.message and repr(B) in back.message
    assert back.client == f"client-{A}"  # every backward commit is A's

    (lost,) = found["commit_after_partition_lost"]
    assert (lost.member, lost.count, lost.frames) == (A, 3, frames(32, 36, 40))
    assert "generation 2" in lost.message and "accepted 3 of 3" in lost.message

    (two,) = found["partition_committed_by_two_members"]
    assert (two.severity, two.partition, two.count) == ("warning", 1, 6)
    assert two.frames == frames(30, 32, 34, 36, 38, 40)
    assert repr(A) in two.message and repr(B) in two.message and "generation 2" in two.message
    assert two.client is None  # two client ids


def test_commit_findings_do_not_depend_on_row_order():
    commits, events = seed_story()
    expected = [f.key() for f in commit_findings(commits, events)]
    rng = random.Random(7)
    for _ in range(5):
        rng.shuffle(commits)
        rng.shuffle(events)
        assert [f.key() for f in commit_findings(commits, events)] == expected


def test_healthy_handover_has_no_commit_findings():
    """A commits p1 in generation 1, B takes over in generation 2 and moves it on: nothing to say."""
    events = [sync(3, 2, A, 1, [0, 1]), sync(24, 11, A, 2, [0]), sync(26, 11, B, 2, [1])]
    commits = [*commit(5, 3, A, 1, 1, 50), *commit(7, 4, A, 1, 1, 55),
               *commit(30, 12, B, 2, 1, 55), *commit(32, 13, B, 2, 1, 60), *commit(34, 14, A, 2, 0, 9)]
    assert commit_findings(commits, events) == []


# -- rule 1: offset_backwards --------------------------------------------------------------------

def test_offset_backwards_ignores_rejected_commits_and_equal_offsets():
    commits = [*commit(1, 1, A, 1, 0, 100), *commit(2, 2, A, 1, 0, 100),
               *commit(3, 3, A, 1, 0, 40, error_code=22),  # ILLEGAL_GENERATION: not stored
               *commit(4, 4, A, 1, 0, 30, status=UNANSWERED), *commit(5, 5, A, 1, 0, 120)]
    assert by_kind(commit_findings(commits)).get("offset_backwards") is None


def test_offset_backwards_compares_with_the_previous_accepted_commit():
    commits = [*commit(1, 1, A, 1, 0, 100), *commit(2, 2, A, 1, 0, 90), *commit(3, 3, A, 1, 0, 95),
               *commit(4, 4, B, 1, 0, 20), *commit(5, 5, A, 1, 0, 10)]
    (f,) = by_kind(commit_findings(commits))["offset_backwards"]
    assert f.count == 3 and f.frames == frames(2, 4, 5)
    assert f"from 95 (member {A!r}) to 20 (member {B!r})" in f.message
    assert f"backward commits by {A!r}, {B!r}" in f.message


# -- rule 2: stale_offset_recommit ----------------------------------------------------------------

def test_two_repeats_are_not_stale():
    commits = [*commit(1, 1, A, 1, 0, 50), *commit(2, 2, B, 1, 0, 60), *commit(3, 3, A, 1, 0, 50)]
    assert "stale_offset_recommit" not in by_kind(commit_findings(commits))
    lowered = Thresholds(stale_repeats=2)
    (f,) = by_kind(commit_findings(commits, thresholds=lowered))["stale_offset_recommit"]
    assert (f.count, f.frames, f.member) == (2, frames(1, 3), A)


def test_repeats_before_the_partition_moved_on_are_not_stale():
    """An idle partition: the same offset committed again and again, then it moves on."""
    commits = [*commit(1, 1, A, 1, 0, 50), *commit(2, 2, A, 1, 0, 50), *commit(3, 3, A, 1, 0, 50),
               *commit(4, 4, B, 2, 0, 60)]
    assert "stale_offset_recommit" not in by_kind(commit_findings(commits))


def test_a_higher_commit_at_the_same_time_as_the_last_repeat_counts():
    commits = [*commit(1, 1, A, 1, 0, 50), *commit(2, 2, A, 1, 0, 50), *commit(3, 3, A, 1, 0, 50),
               *commit(9, 3, B, 1, 0, 70)]  # same ts as A's last repeat, later frame
    (f,) = by_kind(commit_findings(commits))["stale_offset_recommit"]
    assert f.count == 3 and "offset 70" in f.message


# -- rule 3: partition_committed_by_two_members ---------------------------------------------------

def test_two_members_in_different_generations_or_rejected_are_fine():
    commits = [*commit(1, 1, A, 1, 0, 50), *commit(2, 2, B, 2, 0, 60),
               *commit(3, 3, A, 2, 0, 61, error_code=22), *commit(4, 4, A, -1, 0, 62), *commit(5, 5, B, -1, 0, 63)]
    assert "partition_committed_by_two_members" not in by_kind(commit_findings(commits))


# -- rule 4: commit_after_partition_lost -----------------------------------------------------------

def test_commit_after_partition_lost_reports_rejected_commits_too():
    events = [sync(1, 1, A, 3, [0])]
    commits = [*commit(2, 2, A, 3, 1, 10, error_code=22), *commit(3, 3, A, 3, 1, 10, status=UNANSWERED)]
    (f,) = by_kind(commit_findings(commits, events))["commit_after_partition_lost"]
    assert (f.count, f.frames, f.partition) == (2, frames(2, 3), 1)
    assert "generation 3" in f.message and "accepted 0 of 2" in f.message


def test_commit_after_partition_lost_near_misses():
    events = [sync(1, 1, A, 1, [1]),  # includes p1
              sync(2, 5, A, 2, [0]),  # excludes p1, but at the very time of the commit below
              sync(3, 6, A, 3, [0, 1]),  # includes p1 again
              sync(4, 7, A, 3, [0], error_code=27),  # failed SyncGroup: its assignment does not count
              sync(5, 8, A, 3, None)]  # assignment not decodable: does not count
    commits = [*commit(10, 0.5, A, 1, 1, 1),  # before any SyncGroup
               *commit(11, 3, A, 1, 1, 2), *commit(12, 5, A, 2, 1, 3),
               *commit(13, 9, A, 3, 1, 4), *commit(14, 9, B, 4, 1, 5),  # B never synced
               *commit(15, 10, A, -1, 1, 6)]  # no generation: a standalone commit
    assert commit_findings(commits, events) == []
    # one more commit while generation 2's assignment holds: exactly that one is evidence
    (f,) = by_kind(commit_findings([*commits, *commit(16, 5.5, A, 2, 1, 3)], events))["commit_after_partition_lost"]
    assert (f.count, f.frames) == (1, frames(16))
    assert "generation 2" in f.message and "accepted 1 of 1" in f.message


# -- rule 5: rebalance_storm ----------------------------------------------------------------------

def test_join_storm_window_is_half_open():
    nine = [group_event("JoinGroup", 10 + i, i * S, generation=1) for i in range(9)]
    at_window_end = group_event("JoinGroup", 50, 60 * S, generation=1)
    assert group_findings([*nine, at_window_end]) == []  # [t, t + 60 s) never holds 10
    inside = group_event("JoinGroup", 50, 60 * S - 1, generation=1)
    later = group_event("JoinGroup", 90, 500 * S, generation=1)
    (f,) = group_findings([*nine, inside, later])
    assert (f.kind, f.severity, f.group, f.count) == ("rebalance_storm", "warning", GROUP, 10)
    assert f.frames == frames(*range(10, 19), 50)  # the window's rows, not the later one
    assert (f.first_ts_ns, f.last_ts_ns) == (T0, T0 + 60 * S - 1)
    assert "10 JoinGroup requests within 60 s" in f.message


def test_member_id_required_joins_are_not_counted():
    """KIP-394: a member's first JoinGroup (no member id) is answered MEMBER_ID_REQUIRED and it joins
    again at once.  Six members each joining that way, one after the other, is 12 JoinGroups but
    six joins: no storm.  The second requests alone count."""
    rows = []
    for i in range(6):
        member = f"m{i}"
        rows.append(group_event("JoinGroup", 10 * i + 1, i * S, error_code=79, member=member))
        rows.append(group_event("JoinGroup", 10 * i + 3, i * S + 1000, generation=1, member=member))
    assert group_findings(rows) == []
    more = [group_event("JoinGroup", 100 + 2 * i, (10 + i) * S, generation=1) for i in range(4)]
    (f,) = group_findings([*rows, *more])
    assert f.count == 10 and f.frames == frames(*(10 * i + 3 for i in range(6)), 100, 102, 104, 106)


def test_generation_storm_counts_distinct_generations():
    same = [group_event("JoinGroup", i, i * S, generation=7) for i in range(1, 6)]
    assert group_findings(same) == []
    rising = [group_event("JoinGroup", i, i * S, generation=i) for i in range(1, 6)]
    failed = group_event("JoinGroup", 9, 9 * S, generation=9, error_code=27)  # no generation handed out
    (f,) = group_findings([*rising, failed])
    assert f.count == 5 and f.frames == frames(1, 2, 3, 4, 5)
    assert "5 generations handed out" in f.message


def test_rebalance_in_progress_storm():
    four = [group_event("Heartbeat", i, i * S, error_code=27) for i in range(1, 5)]
    other_group = group_event("Heartbeat", 5, 5 * S, error_code=27, group="other")
    assert group_findings([*four, other_group]) == []
    (f,) = group_findings([*four, other_group, group_event("SyncGroup", 6, 6 * S, error_code=27)])
    assert (f.group, f.count, f.frames) == (GROUP, 5, frames(1, 2, 3, 4, 6))
    assert "5 REBALANCE_IN_PROGRESS answers" in f.message


# -- rule 10: reconnect_storm ---------------------------------------------------------------------

def connection(cid: int, client: str, port: int, at_s: float, *, server: str = "10.0.0.9", capture: str = CAP,
               protocol: str = "kafka") -> dict:
    family = socket.AF_INET6 if ":" in client else socket.AF_INET
    conn = Connection(cid, socket.inet_pton(family, client), port, socket.inet_pton(family, server), 9092, "syn",
                      cid * 10, T0 + round(at_s * S))
    return connection_row(capture, conn, protocol, 0)


def test_reconnect_storm_per_client_host():
    rows = [connection(i, "10.0.0.5", 40000 + i, i * 5) for i in range(1, 11)]  # 10 within 50 s
    rows.append(connection(11, "10.0.0.5", 41000, 200))
    (f,) = connection_findings(rows)
    assert (f.kind, f.client, f.protocol, f.count) == ("reconnect_storm", "10.0.0.5", "kafka", 10)
    assert f.frames == frames(*range(10, 101, 10))
    assert "10 connections to 10.0.0.9:9092 that got no byte back within 60 s" in f.message
    rng = random.Random(3)
    rng.shuffle(rows)
    assert [x.key() for x in connection_findings(rows)] == [f.key()]


def test_reconnect_storm_near_misses_and_ipv6():
    nine = [connection(i, "10.0.0.5", 40000 + i, i) for i in range(1, 10)]
    other_hosts = [connection(20 + i, f"10.0.1.{i}", 40000, i) for i in range(1, 10)]
    other_capture = [connection(40, "10.0.0.5", 40000, 5, capture="other.pcap")]
    assert connection_findings([*nine, *other_hosts, *other_capture]) == []
    six = [connection(i, "fd00::5", 40000 + i, i, server="fd00::9", protocol="other") for i in range(1, 7)]
    (f,) = connection_findings(six, Thresholds(reconnect_connections=6))
    assert (f.client, f.protocol, f.count) == ("[fd00::5]", "other", 6)


def test_answered_connections_are_no_reconnect_storm():
    """Short CLI runs from one host, each a new process with new connections, all answered: normal
    traffic.  Only connections the server never answered (refused, dropped) count."""
    runs = [connection(i, "10.0.0.5", 40000 + i, i) for i in range(1, 31)]
    for row in runs:
        row["bytes_to_client"] = 700
    assert connection_findings(runs) == []
    refused = [connection(100 + i, "10.0.0.5", 41000 + i, 40 + i, protocol="other") for i in range(10)]
    (f,) = connection_findings([*runs, *refused])
    assert (f.count, f.protocol, f.frames) == (10, "other", frames(*range(1000, 1091, 10)))


def failed_attempt(cid: int, client_id: str | None, port: int, at_s: float) -> tuple[dict, dict | None]:
    """A connection from 10.0.0.5 the server never answered: with a client id, the client sent its
    first request (ApiVersions) and got nothing back before the connection ended."""
    row = connection(cid, "10.0.0.5", port, at_s)
    if client_id is None:
        return row, None
    request = xrow("ApiVersions", cid * 10, round(at_s * S), status=UNANSWERED, client_id=client_id,
                   details={"unanswered_by": "connection_end"})
    request["conn"] = cid
    return row, request


def test_reconnect_storm_is_one_client_not_one_host():
    """Two clients on one host, 6 failed connections each within a minute: two clients retrying, not a
    storm of one (10 needed).  One of them failing 10 times is its storm, named by its client id."""
    attempts = [failed_attempt(i, f"cli-{i % 2}", 40000 + i, i) for i in range(1, 13)]
    conns, requests = [c for c, _ in attempts], [r for _, r in attempts]
    assert [f for f in connection_findings(conns, exchanges=requests) if f.kind == "reconnect_storm"] == []
    looping = [failed_attempt(20 + i, "cli-0", 41000 + i, 100 + i) for i in range(10)]  # a minute later
    conns += [c for c, _ in looping]
    requests += [r for _, r in looping]
    (f,) = [f for f in connection_findings(conns, exchanges=requests) if f.kind == "reconnect_storm"]
    assert (f.client, f.count) == ("10.0.0.5", 10)
    assert f.message.startswith("10.0.0.5 (client 'cli-0') opened 10 connections")
    assert f.frames == frames(*range(200, 291, 10))  # the loop's ten, not cli-0's earlier six


def test_refused_connections_of_one_host_are_one_client():
    """A refused connection carries no request: those of one host are counted together, apart from
    the connections whose client id is known."""
    refused = [failed_attempt(i, None, 40000 + i, i)[0] for i in range(1, 11)]
    (f,) = connection_findings(refused)
    assert f.count == 10 and "(no request sent)" in f.message


# -- exchange rules --------------------------------------------------------------------------------

def test_error_responses_by_severity():
    rows = [xrow("Fetch", 1, error="NOT_LEADER_OR_FOLLOWER", error_code=6),
            xrow("Fetch", 3, error="NOT_LEADER_OR_FOLLOWER", error_code=6, client_id="other"),
            xrow("Fetch", 5, error="OFFSET_OUT_OF_RANGE", error_code=1),
            xrow("JoinGroup", 7, error="MEMBER_ID_REQUIRED", error_code=79),
            xrow("Heartbeat", 8, error="REBALANCE_IN_PROGRESS", error_code=27),
            xrow("find", 9, protocol="mongodb", error="Unauthorized", error_code=13),
            xrow("Fetch", 11), xrow("Fetch", 13, status=UNANSWERED, details={"unanswered_by": "capture_end"})]
    found = {(f.api, f.error): f for f in exchange_results(rows) if f.kind == "error_response"}
    assert sorted(found) == [("Fetch", "NOT_LEADER_OR_FOLLOWER"), ("Fetch", "OFFSET_OUT_OF_RANGE"),
                             ("Heartbeat", "REBALANCE_IN_PROGRESS"), ("JoinGroup", "MEMBER_ID_REQUIRED"),
                             ("find", "Unauthorized")]
    leader = found[("Fetch", "NOT_LEADER_OR_FOLLOWER")]
    assert (leader.severity, leader.count, leader.frames, leader.client) == ("warning", 2, frames(1, 3), None)
    assert "2 Fetch responses" in leader.message and "NOT_LEADER_OR_FOLLOWER" in leader.message
    assert found[("Fetch", "OFFSET_OUT_OF_RANGE")].severity == "error"
    assert found[("JoinGroup", "MEMBER_ID_REQUIRED")].severity == "info"  # KIP-394's first join
    assert found[("Heartbeat", "REBALANCE_IN_PROGRESS")].severity == "info"  # "rejoin", at every rebalance
    assert (found[("find", "Unauthorized")].severity, found[("find", "Unauthorized")].protocol) == ("error", "mongodb")


def test_unsupported_version_is_not_counted_twice():
    rows = [xrow("ApiVersions", 1, api_version=3, error="UNSUPPORTED_VERSION", error_code=35, client_id="c"),
            xrow("ApiVersions", 3, api_version=3, error="UNSUPPORTED_VERSION", error_code=35, client_id="c"),
            xrow("ApiVersions", 5, api_version=0, client_id="c"),
            xrow("Produce", 7, api_version=99, error="UNSUPPORTED_VERSION", error_code=35, client_id="c")]
    found = exchange_results(rows)
    assert [f.kind for f in found] == ["unsupported_version", "unsupported_version"]
    produce, versions = found  # warning sorts before info
    assert (versions.api, versions.severity, versions.count, versions.frames) == ("ApiVersions", "info", 2,
                                                                                  frames(1, 3))
    assert "v3" in versions.message and "lower version" in versions.message
    assert (produce.api, produce.severity, produce.count) == ("Produce", "warning", 1)
    assert "Produce v99" in produce.message


def test_throttled_responses():
    rows = [xrow("Produce", 1, throttle_ms=100, client_id="p"), xrow("Produce", 3, throttle_ms=250, client_id="p"),
            xrow("Produce", 5, throttle_ms=0, client_id="p"), xrow("Produce", 7, throttle_ms=40, client_id="q")]
    found = {f.client: f for f in exchange_results(rows)}
    assert sorted(found) == ["p", "q"]
    assert (found["p"].kind, found["p"].severity, found["p"].count) == ("throttled", "info", 2)
    assert "up to 250 ms" in found["p"].message


def test_unanswered_and_skipped_requests():
    rows = [xrow("Metadata", 1, status=UNANSWERED, client_id="c", details={"unanswered_by": "connection_end"}),
            xrow("Metadata", 3, status=UNANSWERED, client_id="c", details={"unanswered_by": "connection_end"}),
            xrow("Metadata", 5, status=UNANSWERED, client_id="c", details={"unanswered_by": "capture_end"}),
            xrow("Fetch", 7, status=UNANSWERED, client_id="c", details={"unanswered_by": "skipped"}),
            # the client closed with its long-poll Fetch in flight: its own choice, not a finding
            xrow("Fetch", 9, status=UNANSWERED, client_id="c", details={"unanswered_by": "client_close"})]
    found = by_kind(exchange_results(rows))
    assert sorted(found) == ["skipped_request", "unanswered"]
    (gone,) = found["unanswered"]
    assert (gone.api, gone.client, gone.count, gone.frames) == ("Metadata", "c", 2, frames(1, 3))
    assert "connection ended" in gone.message
    (skipped,) = found["skipped_request"]
    assert (skipped.api, skipped.count, skipped.frames) == ("Fetch", 1, frames(7))


def test_slow_requests_allow_the_expected_wait():
    rows = [xrow("Fetch", 1, latency_ms=1500.0, details={"expected_wait_ms": 500}),  # exactly the limit
            xrow("Fetch", 3, latency_ms=1400.0, details={"expected_wait_ms": 500}),
            xrow("Fetch", 5, latency_ms=1500.5, details={"expected_wait_ms": 500}),
            xrow("Produce", 7, latency_ms=1200.0),
            xrow("Produce", 9, latency_ms=1000.0),
            xrow("getMore", 11, protocol="mongodb", latency_ms=1050.0, details={"expected_wait_ms": 1000}),
            xrow("find", 13, protocol="mongodb", latency_ms=150.0, client_id="app")]
    found = {f.api: f for f in exchange_results(rows)}
    assert sorted(found) == ["Fetch", "Produce", "find"]
    assert (found["Fetch"].kind, found["Fetch"].count, found["Fetch"].frames) == ("slow_request", 1, frames(5))
    assert "slowest took 1500.5 ms" in found["Fetch"].message
    assert found["Produce"].frames == frames(7)
    mongo = found["find"]
    assert (mongo.protocol, mongo.client, mongo.count) == ("mongodb", "app", 1)
    assert "operation" in mongo.message and "100 ms" in mongo.message
    stricter = {f.api for f in exchange_results(rows, Thresholds(slow_kafka_ms=100, slow_mongodb_ms=10))}
    assert stricter == {"Fetch", "Produce", "getMore", "find"}


def test_orphans_and_undecodable_count_all_and_list_the_smallest_frames():
    rows = [xrow("Fetch", 1000 - 10 * i, status=ORPHAN_RESPONSE) for i in range(30)]
    rows += [xrow("Fetch", 5, status=UNDECODABLE, warning="bad body"),
             xrow("find", 6, protocol="mongodb", status=ORPHAN_RESPONSE)]
    found = {(f.kind, f.protocol): f for f in exchange_results(rows)}
    assert sorted(found) == [("orphan_response", "kafka"), ("orphan_response", "mongodb"), ("undecodable", "kafka")]
    orphans = found[("orphan_response", "kafka")]
    assert orphans.count == 30 and len(orphans.frames) == MAX_FRAMES
    assert orphans.frames == frames(*range(710, 901, 10))
    assert orphans.severity == "info" and "30 kafka responses" in orphans.message


def test_frames_are_distinct_pairs_across_captures():
    rows = [xrow("Fetch", 7, status=UNDECODABLE), xrow("Fetch", 7, status=UNDECODABLE),  # one frame, two messages
            xrow("Fetch", 3, status=UNDECODABLE, capture="b.pcap")]
    (f,) = exchange_results(rows)
    assert f.count == 3 and f.frames == [("b.pcap", 3), (CAP, 7)]


def test_exchange_findings_do_not_depend_on_row_order():
    rows = [xrow("Fetch", i, latency_ms=2000.0 + i, throttle_ms=i % 3, error="NOT_COORDINATOR" if i % 4 else None,
                 client_id=f"c{i % 2}") for i in range(1, 120)]
    rows += [xrow("Produce", 500 + i, status=ORPHAN_RESPONSE) for i in range(50)]
    expected = [(f.key(), f.message, f.first_ts_ns, f.last_ts_ns) for f in exchange_results(rows)]
    assert len(expected) == 6
    random.Random(11).shuffle(rows)
    assert [(f.key(), f.message, f.first_ts_ns, f.last_ts_ns) for f in exchange_results(rows)] == expected


def test_every_exchange_key_is_kept():
    """DuckDB keeps every key (the engine holds a few columns per exchange, not a tally per key):
    many distinct error names are each a finding, none left out."""
    rows = [xrow("Fetch", i * 2 + 1, error=f"E{i % 40}", error_code=1) for i in range(120)]
    found = exchange_results(rows)
    assert sorted((f.error, f.count) for f in found) == sorted((f"E{i}", 3) for i in range(40))


# -- all findings -----------------------------------------------------------------------------------

def test_all_findings_order_and_rows():
    commits, events = seed_story()
    rows = [xrow("Produce", 100, throttle_ms=5), xrow("Fetch", 102, status=ORPHAN_RESPONSE),
            xrow("Fetch", 104, error="NOT_COORDINATOR", error_code=16)]
    conns = [connection(i, "10.0.0.5", 40000 + i, i) for i in range(1, 11)]
    found = local_findings(rows, commits, events, conns)
    assert [(f.severity, f.kind) for f in found] == [
        ("error", "commit_after_partition_lost"), ("error", "offset_backwards"), ("error", "stale_offset_recommit"),
        ("warning", "error_response"), ("warning", "partition_committed_by_two_members"),
        ("warning", "reconnect_storm"), ("info", "orphan_response"), ("info", "throttled")]
    random.Random(5).shuffle(conns)
    assert [f.key() for f in local_findings(rows[::-1], commits[::-1], events[::-1], conns)] == [f.key() for f in found]
    for f in found:
        row = f.to_row()
        assert list(row) == list(FINDINGS_SCHEMA)
        assert list(zip(row["frame_captures"], row["frames"], strict=True)) == f.frames
        assert row["count"] == f.count >= len(f.frames) > 0
