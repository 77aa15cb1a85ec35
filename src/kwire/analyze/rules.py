"""The findings' rules, each defined once in SQL, run by DuckDB on one machine and Spark SQL on a cluster.

Every rule is one ``SELECT`` over the analyzer's tables that returns the rule's *evidence rows*
(``findings``' docstring defines each rule in words; the SQL below is its one definition).  An
engine (``engines.DuckDBEngine`` for ``kwire analyze``, ``engines.SparkEngine`` for ``kwire analyze
--spark``) runs the same text; three more queries, shared by every rule, aggregate the evidence
(``EVIDENCE_AGGREGATES``), pick the smallest frames (``EVIDENCE_FRAMES``) and list the distinct
items a message names (``EVIDENCE_ITEMS``), and ``run_rules`` turns their rows into ``Finding``s
with ``findings``' message functions.

The SQL is kept to what both engines accept the same way: joins, ``GROUP BY``, ``COUNT(DISTINCT)``
as an aggregate (not over a window: Spark refuses it there), ``ROW_NUMBER``/``LAG``/``MIN``/``MAX``/
``COUNT`` over windows with ``ROWS`` or numeric ``RANGE`` frames, ``CASE``, ``COALESCE``, ``IS NOT
DISTINCT FROM``, ``||``, ``instr``/``substr``/``regexp_extract``, ``array_contains``, ``CAST(.. AS
STRING/BIGINT/INT/DOUBLE)``.  Identifiers the two dialects quote differently never appear: the
engines expose the tables as the views below, whose columns avoid keywords (``group`` is ``grp``,
``partition`` is ``part``, ``offset`` is ``commit_offset``).  Null comparisons follow SQL's three
values, so every condition where the rule means "false when unknown" is wrapped in ``COALESCE(..,
FALSE)``.

The views (``INPUT_VIEWS``: view -> table, columns as ``view column -> table column``):

* ``kw_exchanges``, ``kw_commits`` (``offset_commits``), ``kw_group_events``, ``kw_connections``.

Every rule's evidence has the columns of ``EVIDENCE_COLUMNS`` (a rule names those it uses; the
others are NULL): the finding's key (``kind`` ... ``cap``) and, per row, ``ev_capture`` (never
null), ``ev_frame``, ``ev_ts``, ``row_client`` (the client id, for rules whose finding names the
client id every row shares), ``num`` (a number whose maximum the message names), ``big`` (the same
for integers: offsets), ``acc`` (summed), ``pick``/``a_num``/``a_str``/``b_num``/``b_str`` (values
of the one row with ``pick = 1``), ``item``/``has_item`` (the distinct items a message lists).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kwire.protocol.errors import MemberIdRequiredError, RebalanceInProgressError

from . import findings as fnd
from .findings import ERROR, FATAL_ERRORS, INFO, MAX_FRAMES, ROUTINE_ERRORS, WARNING, Finding, Thresholds

__all__ = ["EVIDENCE_COLUMNS", "INPUT_VIEWS", "RULES", "Engine", "Rule", "run_rules"]


class Engine(Protocol):
    """What a rule engine does: run one SQL text over the views and return its rows."""

    def query(self, sql: str) -> list[dict[str, Any]]: ...

    def materialize(self, name: str, sql: str) -> None:
        """Make ``name`` a view (or table) of the result of ``sql``, read by the next queries."""


#: view -> (table, {view column: table column}); only the columns the rules read.
INPUT_VIEWS: dict[str, tuple[str, dict[str, str]]] = {
    "kw_exchanges": ("exchanges", {c: c for c in (
        "capture", "conn", "protocol", "api", "api_version", "status", "client_id", "request_frame",
        "response_frame", "request_ts_ns", "response_ts_ns", "latency_ms", "error", "throttle_ms",
        "expected_wait_ms", "unanswered_by")}),
    "kw_commits": ("offset_commits", {"capture": "capture", "client_id": "client_id", "request_frame": "request_frame",
                              "ts_ns": "ts_ns", "grp": "group", "member_id": "member_id", "generation": "generation",
                              "topic": "topic", "part": "partition", "commit_offset": "offset",
                              "error_code": "error_code", "status": "status"}),
    "kw_group_events": ("group_events", {"capture": "capture", "api": "api", "request_frame": "request_frame",
                            "response_frame": "response_frame", "ts_ns": "ts_ns", "grp": "group",
                            "member_id": "member_id", "generation": "generation", "error_code": "error_code",
                            "status": "status", "assignment": "assignment"}),
    "kw_connections": ("connections", {c: c for c in (
        "capture", "conn", "client", "server", "protocol", "first_frame", "first_ts_ns", "bytes_to_client")}),
}

#: The finding's key: one finding per distinct value of these (nulls equal).
KEY_COLUMNS: dict[str, str] = {
    "kind": "STRING", "protocol": "STRING", "grp": "STRING", "topic": "STRING", "part": "INT", "api": "STRING",
    "client": "STRING", "member": "STRING", "error": "STRING", "k_num": "BIGINT", "note": "STRING",
    "cap": "STRING", "client_id": "STRING",
}
#: Every column of the evidence, with its SQL type.
EVIDENCE_COLUMNS: dict[str, str] = {
    **KEY_COLUMNS,
    "ev_capture": "STRING", "ev_frame": "BIGINT", "ev_ts": "BIGINT", "row_client": "STRING", "num": "DOUBLE",
    "big": "BIGINT", "acc": "BIGINT", "pick": "INT", "a_num": "BIGINT", "a_str": "STRING", "b_num": "BIGINT",
    "b_str": "STRING", "item": "STRING", "has_item": "INT",
}

_KEYS = ", ".join(KEY_COLUMNS)

# -- shared pieces of the rules --------------------------------------------------------------------

# An exchange's frame, time and capture as the rules show them: the request's, else the response's.
_EX_EVIDENCE = """COALESCE(capture, '') AS ev_capture, COALESCE(request_frame, response_frame) AS ev_frame,
    COALESCE(request_ts_ns, response_ts_ns) AS ev_ts"""

# Commit rows as every commit rule reads them: rows without topic, partition or offset left out,
# a null time read as 0 and a null capture as ''; ``accepted``: the broker stored it.
_COMMITS = """commits AS (
    SELECT grp, topic, part, commit_offset AS off, member_id AS member, generation, client_id,
        COALESCE(ts_ns, 0) AS ts, COALESCE(capture, '') AS ev_capture, request_frame AS ev_frame,
        COALESCE(request_frame, 0) AS frame0,
        CASE WHEN COALESCE(status = 'answered' AND COALESCE(error_code, 0) = 0, FALSE) THEN 1 ELSE 0 END
            AS accepted
    FROM kw_commits
    WHERE topic IS NOT NULL AND part IS NOT NULL AND commit_offset IS NOT NULL
), accepted AS (SELECT * FROM commits WHERE accepted = 1)"""


def _window_ns(seconds: float) -> int:
    """W seconds as whole ns, at least 1 ns (findings' windows)."""
    return max(1, round(seconds * 1_000_000_000))


# -- the rules ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """One rule: its evidence SQL (``sql(thresholds)``) and how a finding is told from its aggregates."""

    kinds: tuple[str, ...]  #: the finding kinds its evidence rows carry in ``kind``
    columns: tuple[str, ...]  #: the evidence columns its SELECT gives, by name
    sql: Callable[[Thresholds], str]
    doc: str  #: what it counts (the finding's definition in a sentence)
    needs: tuple[str, ...]  #: the views that must hold rows for it to find anything


def _offset_backwards(t: Thresholds) -> str:
    return f"""WITH {_COMMITS}, ordered AS (
    SELECT *, LAG(off) OVER w AS prev_off, LAG(member) OVER w AS prev_member
    FROM accepted
    WINDOW w AS (PARTITION BY grp, topic, part ORDER BY ts, ev_capture, frame0, off)
), backwards AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY grp, topic, part
                                 ORDER BY prev_off - off DESC, ts, ev_capture, frame0, off) AS rank_of_drop
    FROM ordered WHERE off < prev_off
)
SELECT 'offset_backwards' AS kind, 'kafka' AS protocol, grp, topic, part, ev_capture, ev_frame, ts AS ev_ts,
    client_id AS row_client, CASE WHEN rank_of_drop = 1 THEN 1 ELSE 0 END AS pick, prev_off AS a_num,
    prev_member AS a_str, off AS b_num, member AS b_str, member AS item, 1 AS has_item
FROM backwards"""


def _stale_offset_recommit(t: Thresholds) -> str:
    return f"""WITH {_COMMITS}, with_high AS (
    SELECT *, MAX(off) OVER (PARTITION BY grp, topic, part ORDER BY ts
                             RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS high_upto
    FROM accepted
), repeats AS (
    SELECT *, COUNT(*) OVER (PARTITION BY grp, topic, part, member, off) AS repeats,
        MAX(high_upto) OVER (PARTITION BY grp, topic, part, member, off) AS higher
    FROM with_high
)
SELECT 'stale_offset_recommit' AS kind, 'kafka' AS protocol, grp, topic, part, member, off AS k_num, ev_capture,
    ev_frame, ts AS ev_ts, client_id AS row_client, higher AS big
FROM repeats WHERE repeats >= {max(1, t.stale_repeats)} AND higher > off"""


def _partition_committed_by_two_members(t: Thresholds) -> str:
    # MIN <> MAX over the partition's members: at least two distinct ones (COUNT(DISTINCT) is no
    # window function in Spark).
    return f"""WITH {_COMMITS}, per_generation AS (
    SELECT *, MIN(member) OVER w AS low_member, MAX(member) OVER w AS high_member
    FROM accepted WHERE member IS NOT NULL AND generation IS NOT NULL AND generation >= 0
    WINDOW w AS (PARTITION BY grp, generation, topic, part)
)
SELECT 'partition_committed_by_two_members' AS kind, 'kafka' AS protocol, grp, topic, part, generation AS k_num,
    ev_capture, ev_frame, ts AS ev_ts, client_id AS row_client, member AS item, 1 AS has_item
FROM per_generation WHERE low_member <> high_member"""


def _commit_after_partition_lost(t: Thresholds) -> str:
    # The member's assignment at a commit: the last successful SyncGroup giving one strictly before
    # it, in (ts, capture, frame) order (an as-of join: join the earlier ones, keep the latest).
    return f"""WITH {_COMMITS}, numbered AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY grp, member ORDER BY ts, ev_capture, frame0, topic, part, off,
                                 generation, accepted, client_id) AS commit_id
    FROM commits WHERE member IS NOT NULL AND member <> '' AND generation IS NOT NULL AND generation >= 0
), syncs AS (
    SELECT grp, member_id AS member, ts_ns AS ts, COALESCE(capture, '') AS capture,
        COALESCE(request_frame, response_frame, 0) AS frame, generation, assignment
    FROM kw_group_events
    WHERE api = 'SyncGroup' AND COALESCE(error_code, 0) = 0 AND assignment IS NOT NULL
        AND member_id IS NOT NULL AND ts_ns IS NOT NULL
), as_of AS (
    SELECT c.*, s.generation AS assigned_generation, s.assignment,
        ROW_NUMBER() OVER (PARTITION BY c.grp, c.member, c.commit_id
                           ORDER BY s.ts DESC, s.capture DESC, s.frame DESC, s.generation DESC NULLS LAST) AS latest
    FROM numbered c JOIN syncs s ON c.grp IS NOT DISTINCT FROM s.grp AND c.member = s.member AND s.ts < c.ts
)
SELECT 'commit_after_partition_lost' AS kind, 'kafka' AS protocol, grp, topic, part, member, ev_capture, ev_frame,
    ts AS ev_ts, client_id AS row_client, accepted AS acc, CAST(assigned_generation AS STRING) AS item, 1 AS has_item
FROM as_of
WHERE latest = 1 AND NOT COALESCE(array_contains(assignment, topic || ':' || CAST(part AS STRING)), FALSE)"""


_STORM_CONDITIONS = ("joins", "generations", "rebalance_errors")


def _rebalance_storm(t: Thresholds) -> str:
    window = _window_ns(t.storm_window_s)
    needed = [max(1, t.storm_joins), max(1, t.storm_generations), max(1, t.storm_rebalance_errors)]
    return f"""WITH events AS (
    -- (a) JoinGroup requests, except those answered MEMBER_ID_REQUIRED (KIP-394's first step)
    SELECT grp, 0 AS cond, ts_ns AS ts, COALESCE(capture, '') AS ev_capture, request_frame AS ev_frame,
        CAST(NULL AS BIGINT) AS value
    FROM kw_group_events
    WHERE ts_ns IS NOT NULL AND api = 'JoinGroup' AND request_frame IS NOT NULL
        AND NOT COALESCE(error_code = {MemberIdRequiredError.code}, FALSE)
    UNION ALL
    -- (b) generations handed out by successful JoinGroups
    SELECT grp, 1, ts_ns, COALESCE(capture, ''), COALESCE(request_frame, response_frame), CAST(generation AS BIGINT)
    FROM kw_group_events
    WHERE ts_ns IS NOT NULL AND api = 'JoinGroup' AND status = 'answered' AND COALESCE(error_code, 0) = 0
        AND generation IS NOT NULL
    UNION ALL
    -- (c) REBALANCE_IN_PROGRESS answers of any api
    SELECT grp, 2, ts_ns, COALESCE(capture, ''), COALESCE(request_frame, response_frame), CAST(NULL AS BIGINT)
    FROM kw_group_events
    WHERE ts_ns IS NOT NULL AND status = 'answered' AND error_code = {RebalanceInProgressError.code}
), counted AS (
    -- windows [t, t + W) starting at each event: how many events (a, c)
    SELECT grp, cond, ts AS start, COUNT(*) OVER (PARTITION BY grp, cond ORDER BY ts
                                                  RANGE BETWEEN CURRENT ROW AND {window - 1} FOLLOWING) AS measure
    FROM events WHERE cond <> 1
), generation_values AS (SELECT DISTINCT grp, ts, value FROM events WHERE cond = 1
), distinct_counted AS (
    -- how many distinct generations (b); a join, since no engine-neutral window counts distinct values
    SELECT s.grp, 1 AS cond, s.ts AS start, COUNT(DISTINCT e.value) AS measure
    FROM (SELECT DISTINCT grp, ts FROM generation_values) s
    JOIN generation_values e ON e.grp IS NOT DISTINCT FROM s.grp AND e.ts >= s.ts AND e.ts < s.ts + {window}
    GROUP BY s.grp, s.ts
), busiest AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY grp, cond ORDER BY measure DESC, start) AS rank_of_window
    FROM (SELECT * FROM counted UNION ALL SELECT * FROM distinct_counted) w
), firing AS (
    SELECT grp, cond, start, measure, ROW_NUMBER() OVER (PARTITION BY grp ORDER BY cond) AS first_condition
    FROM busiest
    WHERE rank_of_window = 1 AND measure >= CASE cond WHEN 0 THEN {needed[0]} WHEN 1 THEN {needed[1]}
                                                      ELSE {needed[2]} END
)
SELECT 'rebalance_storm' AS kind, 'kafka' AS protocol, e.grp,
    CASE e.cond WHEN 0 THEN '{_STORM_CONDITIONS[0]}' WHEN 1 THEN '{_STORM_CONDITIONS[1]}'
                ELSE '{_STORM_CONDITIONS[2]}' END AS note,
    e.ev_capture, e.ev_frame, e.ts AS ev_ts, f.measure AS num
FROM events e JOIN firing f ON e.grp IS NOT DISTINCT FROM f.grp AND e.cond = f.cond
WHERE f.first_condition = 1 AND e.ts >= f.start AND e.ts < f.start + {window}"""


def _reconnect_storm(t: Thresholds) -> str:
    window = _window_ns(t.reconnect_window_s)
    # The client host: 'a.b.c.d:port' -> 'a.b.c.d', '[v6]:port' -> '[v6]'.
    return f"""WITH connection_clients AS (
    -- the client id a connection's requests carried (the smallest, should there be several)
    SELECT capture, conn, MIN(client_id) AS client_id FROM kw_exchanges
    WHERE client_id IS NOT NULL GROUP BY capture, conn
), failed AS (
    SELECT COALESCE(c.capture, '') AS cap,
        CASE WHEN c.client IS NULL OR c.client = '' THEN ''
             WHEN substr(c.client, 1, 1) = '[' THEN
                 CASE WHEN instr(c.client, ']') > 0 THEN substr(c.client, 1, instr(c.client, ']')) ELSE c.client END
             WHEN instr(c.client, ':') > 0 THEN regexp_extract(c.client, '^(.*):[^:]*$', 1)
             ELSE c.client END AS host,
        k.client_id, c.server, c.protocol, c.first_ts_ns AS ts, c.first_frame
    FROM kw_connections c LEFT JOIN connection_clients k ON c.capture = k.capture AND c.conn = k.conn
    WHERE c.first_ts_ns IS NOT NULL AND COALESCE(c.bytes_to_client, 0) = 0
), counted AS (
    SELECT *, COUNT(*) OVER (PARTITION BY cap, host, client_id, server ORDER BY ts
                             RANGE BETWEEN CURRENT ROW AND {window - 1} FOLLOWING) AS measure
    FROM failed
), busiest AS (
    SELECT cap, host, client_id, server, ts AS start, measure,
        ROW_NUMBER() OVER (PARTITION BY cap, host, client_id, server ORDER BY measure DESC, ts) AS rank_of_window
    FROM counted
)
SELECT 'reconnect_storm' AS kind, f.host AS client, f.client_id, f.server AS note, f.cap, f.cap AS ev_capture,
    f.first_frame AS ev_frame, f.ts AS ev_ts, f.protocol AS row_client, b.measure AS num
FROM failed f JOIN busiest b
    ON f.cap = b.cap AND f.host = b.host AND f.client_id IS NOT DISTINCT FROM b.client_id
    AND f.server IS NOT DISTINCT FROM b.server
WHERE b.rank_of_window = 1 AND b.measure >= {max(1, t.reconnect_connections)}
    AND f.ts >= b.start AND f.ts < b.start + {window}"""


def _error_response(t: Thresholds) -> str:
    return f"""SELECT 'error_response' AS kind, protocol, api, error, {_EX_EVIDENCE}
FROM kw_exchanges
WHERE status = 'answered' AND error IS NOT NULL
    AND NOT COALESCE(protocol = 'kafka' AND error = 'UNSUPPORTED_VERSION', FALSE)"""


def _unsupported_version(t: Thresholds) -> str:
    return f"""SELECT 'unsupported_version' AS kind, protocol, api, client_id AS client, 'UNSUPPORTED_VERSION' AS error,
    api_version AS k_num, {_EX_EVIDENCE}
FROM kw_exchanges
WHERE status = 'answered' AND protocol = 'kafka' AND error = 'UNSUPPORTED_VERSION'"""


def _throttled(t: Thresholds) -> str:
    return f"""SELECT 'throttled' AS kind, protocol, api, client_id AS client, {_EX_EVIDENCE}, throttle_ms AS num
FROM kw_exchanges
WHERE status = 'answered' AND COALESCE(throttle_ms, 0) > 0"""


def _slow_request(t: Thresholds) -> str:
    return f"""SELECT 'slow_request' AS kind, protocol, api, client_id AS client, {_EX_EVIDENCE}, latency_ms AS num
FROM kw_exchanges
WHERE status = 'answered' AND latency_ms IS NOT NULL AND protocol IN ('kafka', 'mongodb')
    AND latency_ms > CASE WHEN COALESCE(expected_wait_ms, 0) > 0 THEN expected_wait_ms ELSE 0 END
                     + CASE protocol WHEN 'kafka' THEN CAST({float(t.slow_kafka_ms)!r} AS DOUBLE)
                                     ELSE CAST({float(t.slow_mongodb_ms)!r} AS DOUBLE) END"""


def _unanswered(t: Thresholds) -> str:
    return f"""SELECT CASE unanswered_by WHEN 'connection_end' THEN 'unanswered' ELSE 'skipped_request' END AS kind,
    protocol, api, client_id AS client, {_EX_EVIDENCE}
FROM kw_exchanges
WHERE status = 'unanswered' AND unanswered_by IN ('connection_end', 'skipped')"""


def _orphans_and_undecodable(t: Thresholds) -> str:
    return f"""SELECT status AS kind, protocol, {_EX_EVIDENCE}
FROM kw_exchanges
WHERE status IN ('orphan_response', 'undecodable')"""


_EX = ("ev_capture", "ev_frame", "ev_ts")

RULES: tuple[Rule, ...] = (
    Rule(("offset_backwards",),
         ("kind", "protocol", "grp", "topic", "part", "ev_capture", "ev_frame", "ev_ts", "row_client", "pick",
          "a_num", "a_str", "b_num", "b_str", "item", "has_item"),
         _offset_backwards,
         "accepted commits of a partition whose offset is below the previous accepted commit's", ("kw_commits",)),
    Rule(("stale_offset_recommit",),
         ("kind", "protocol", "grp", "topic", "part", "member", "k_num", "ev_capture", "ev_frame", "ev_ts",
          "row_client", "big"),
         _stale_offset_recommit,
         "a member's repeated accepted commits of one offset after a higher one was committed", ("kw_commits",)),
    Rule(("partition_committed_by_two_members",),
         ("kind", "protocol", "grp", "topic", "part", "k_num", "ev_capture", "ev_frame", "ev_ts", "row_client",
          "item", "has_item"),
         _partition_committed_by_two_members,
         "accepted commits of one partition in one generation by two or more members", ("kw_commits",)),
    Rule(("commit_after_partition_lost",),
         ("kind", "protocol", "grp", "topic", "part", "member", "ev_capture", "ev_frame", "ev_ts", "row_client",
          "acc", "item", "has_item"),
         _commit_after_partition_lost,
         "commits of a partition the member's latest earlier SyncGroup assignment did not include",
         ("kw_commits", "kw_group_events")),
    Rule(("rebalance_storm",),
         ("kind", "protocol", "grp", "note", "ev_capture", "ev_frame", "ev_ts", "num"),
         _rebalance_storm,
         "a group's joins, generations or REBALANCE_IN_PROGRESS answers in its busiest window",
         ("kw_group_events",)),
    Rule(("reconnect_storm",),
         ("kind", "client", "client_id", "note", "cap", "ev_capture", "ev_frame", "ev_ts", "row_client", "num"),
         _reconnect_storm,
         "one client's failed connections (no byte back) to one server in its busiest window",
         ("kw_connections",)),
    Rule(("error_response",), ("kind", "protocol", "api", "error", *_EX), _error_response,
         "answered exchanges carrying an error, per protocol, api and error", ("kw_exchanges",)),
    Rule(("unsupported_version",),
         ("kind", "protocol", "api", "client", "error", "k_num", *_EX), _unsupported_version,
         "Kafka requests answered UNSUPPORTED_VERSION, per api, version and client id", ("kw_exchanges",)),
    Rule(("throttled",), ("kind", "protocol", "api", "client", *_EX, "num"), _throttled,
         "answered exchanges with a throttle time, per protocol, api and client id", ("kw_exchanges",)),
    Rule(("slow_request",), ("kind", "protocol", "api", "client", *_EX, "num"), _slow_request,
         "answers later than the request's expected wait plus the slow margin", ("kw_exchanges",)),
    Rule(("unanswered", "skipped_request"), ("kind", "protocol", "api", "client", *_EX), _unanswered,
         "requests the connection's end or a later answer left unanswered", ("kw_exchanges",)),
    Rule(("orphan_response", "undecodable"), ("kind", "protocol", *_EX), _orphans_and_undecodable,
         "responses without their request, and messages that did not decode", ("kw_exchanges",)),
)


# -- running them -------------------------------------------------------------------------------------

def evidence_sql(thresholds: Thresholds, empty: frozenset[str] = frozenset()) -> str:
    """Every rule's evidence in one relation of ``EVIDENCE_COLUMNS`` (the columns a rule does not
    give are NULL).  Rules needing a view listed in ``empty`` are left out: they could find nothing,
    and planning the query costs more than running it on a small capture."""
    parts = []
    for rule in RULES:
        if empty.intersection(rule.needs):
            continue
        given = set(rule.columns)
        cols = ", ".join(f"r.{c}" if c in given else f"CAST(NULL AS {kind}) AS {c}"
                         for c, kind in EVIDENCE_COLUMNS.items())
        parts.append(f"SELECT {cols} FROM ({rule.sql(thresholds)}) r")
    if not parts:  # no rule can find anything: an empty relation of the same columns
        cols = ", ".join(f"CAST(NULL AS {kind}) AS {c}" for c, kind in EVIDENCE_COLUMNS.items())
        parts.append(f"SELECT {cols} WHERE 1 = 0")
    return "\nUNION ALL\n".join(parts)


EVIDENCE_AGGREGATES = f"""SELECT {_KEYS}, COUNT(*) AS n, MIN(ev_ts) AS first_ts, MAX(ev_ts) AS last_ts,
    COUNT(DISTINCT row_client) AS clients, MAX(CASE WHEN row_client IS NULL THEN 1 ELSE 0 END) AS null_clients,
    MIN(row_client) AS some_client, MAX(num) AS num, MAX(big) AS big, SUM(acc) AS acc,
    MAX(CASE WHEN pick = 1 THEN a_num END) AS a_num, MAX(CASE WHEN pick = 1 THEN a_str END) AS a_str,
    MAX(CASE WHEN pick = 1 THEN b_num END) AS b_num, MAX(CASE WHEN pick = 1 THEN b_str END) AS b_str
FROM kw_evidence GROUP BY {_KEYS}"""

EVIDENCE_FRAMES = f"""SELECT {_KEYS}, ev_capture, ev_frame FROM (
    SELECT {_KEYS}, ev_capture, ev_frame,
        ROW_NUMBER() OVER (PARTITION BY {_KEYS} ORDER BY ev_capture, ev_frame) AS rank_of_frame
    FROM (SELECT DISTINCT {_KEYS}, ev_capture, ev_frame FROM kw_evidence WHERE ev_frame IS NOT NULL) pairs
) ranked WHERE rank_of_frame <= {MAX_FRAMES}"""

EVIDENCE_ITEMS = f"SELECT DISTINCT {_KEYS}, item FROM kw_evidence WHERE has_item = 1"


def run_rules(engine: Engine, thresholds: Thresholds | None = None, *,
              empty: frozenset[str] = frozenset()) -> list[Finding]:
    """Every finding over the engine's views, in ``findings.finding_order``.  ``empty``: views the
    caller knows to hold no row (their rules are skipped)."""
    t = thresholds or Thresholds()
    engine.materialize("kw_evidence", evidence_sql(t, empty))
    keys = list(KEY_COLUMNS)

    def key_of(row: dict) -> tuple:
        return tuple(row[k] for k in keys)

    frames: dict[tuple, list[tuple[str, int]]] = {}
    for row in engine.query(EVIDENCE_FRAMES):
        frames.setdefault(key_of(row), []).append((row["ev_capture"], row["ev_frame"]))
    items: dict[tuple, list] = {}
    for row in engine.query(EVIDENCE_ITEMS):
        items.setdefault(key_of(row), []).append(row["item"])
    out = []
    for row in engine.query(EVIDENCE_AGGREGATES):
        key = key_of(row)
        out.append(_finding(row, sorted(frames.get(key, ())), items.get(key, []), t))
    out.sort(key=fnd.finding_order)
    return out


def _finding(row: dict, frames: list[tuple[str, int]], items: list, t: Thresholds) -> Finding:
    """A ``Finding`` from one key's aggregates, with findings' message functions."""
    kind, protocol, n = row["kind"], row["protocol"], row["n"]
    group, topic, partition, api, member = row["grp"], row["topic"], row["part"], row["api"], row["member"]
    client, error = row["client"], row["error"]
    shared = row["some_client"] if row["clients"] == 1 and not row["null_clients"] else None
    if kind == "offset_backwards":
        severity, client = ERROR, shared
        message = fnd.message_offset_backwards(group, topic, partition, n, row["a_num"], row["a_str"],
                                               row["b_num"], row["b_str"], items)
    elif kind == "stale_offset_recommit":
        severity, client = ERROR, shared
        message = fnd.message_stale_offset_recommit(group, topic, partition, member, row["k_num"], n, row["big"])
    elif kind == "partition_committed_by_two_members":
        severity, client = WARNING, shared
        message = fnd.message_partition_committed_by_two_members(group, row["k_num"], topic, partition, n, items)
    elif kind == "commit_after_partition_lost":
        severity, client = ERROR, shared
        generations = [None if g is None else int(g) for g in items]
        message = fnd.message_commit_after_partition_lost(group, topic, partition, member, n, generations,
                                                          row["acc"])
    elif kind == "rebalance_storm":
        severity, n, client = WARNING, int(row["num"]), None
        message = fnd.message_rebalance_storm(group, row["note"], n, t.storm_window_s)
    elif kind == "reconnect_storm":
        # ``client`` is the host; the protocol is the one every connection had, if they share one
        severity, n, protocol = WARNING, int(row["num"]), shared
        message = fnd.message_reconnect_storm(row["cap"], client, row["client_id"], row["note"], n,
                                              t.reconnect_window_s)
    elif kind == "error_response":
        severity = ERROR if error in FATAL_ERRORS else INFO if error in ROUTINE_ERRORS else WARNING
        message = fnd.message_error_response(protocol, api, error, n)
    elif kind == "unsupported_version":
        severity = INFO if api == "ApiVersions" else WARNING
        message = fnd.message_unsupported_version(api, row["k_num"], client, n)
    elif kind == "throttled":
        severity, message = INFO, fnd.message_throttled(api, client, n, _number(row["num"]))
    elif kind == "slow_request":
        slow = t.slow_kafka_ms if protocol == "kafka" else t.slow_mongodb_ms
        severity, message = WARNING, fnd.message_slow_request(protocol, api, client, n, slow, row["num"])
    elif kind == "unanswered":
        severity, message = WARNING, fnd.message_unanswered(protocol, api, client, n)
    elif kind == "skipped_request":
        severity, message = WARNING, fnd.message_skipped_request(protocol, api, client, n)
    elif kind == "orphan_response":
        severity, message = INFO, fnd.message_orphan_response(protocol, n)
    else:
        severity, message = INFO, fnd.message_undecodable(protocol, n)
    return Finding(kind=kind, severity=severity, protocol=protocol, message=message, group=group, topic=topic,
                   partition=partition, api=api, client=client, count=n, first_ts_ns=row["first_ts"],
                   last_ts_ns=row["last_ts"], frames=frames, member=member, error=error)


def _number(value):
    """A throttle peak: a whole number as an int (the column is a double)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
