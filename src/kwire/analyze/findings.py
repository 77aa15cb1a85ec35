"""The findings of ``kwire analyze``: what in the traffic deserves a look, defined over the tables.

Every rule reads rows of the analyzer's tables (``tables.SCHEMAS``: ``exchanges``,
``offset_commits``, ``group_events``, ``connections``), never ``Exchange`` objects.  Each rule is
written once, as SQL in ``rules``, and run by two engines (``engines``): DuckDB for ``kwire
analyze`` on one machine, Spark SQL for ``kwire analyze --spark``; a test requires identical
findings from both.  This module holds what the engines share: the definitions below in words,
``Finding``, ``Thresholds``, the severities and the message texts.  Each rule is deterministic and
independent of the order of its input rows.

Conventions shared by all rules
-------------------------------
* A finding groups its *evidence rows* under a key.  ``count`` counts every evidence row;
  ``frames`` lists the smallest ``MAX_FRAMES`` (20) distinct ``(capture, frame)`` pairs of the
  evidence, sorted (a row whose frame is null is counted but not listed; a null capture is "").
  ``first_ts_ns`` / ``last_ts_ns`` are the smallest and largest non-null times of the evidence.
* A row's frame and time: ``offset_commits``: ``request_frame`` / ``ts_ns``; ``group_events``:
  ``request_frame`` (``response_frame`` when null) / ``ts_ns``; ``exchanges``: ``request_frame``
  (``response_frame`` when null) / ``request_ts_ns`` (``response_ts_ns`` when null);
  ``connections``: ``first_frame`` / ``first_ts_ns``.
* Commit order: accepted commits are ordered by ``(ts_ns, capture, request_frame, offset)``,
  nulls read as 0 / "" (the offset only breaks ties between partitions listed twice in one request).
* An *accepted* commit is an ``offset_commits`` row with ``status == 'answered'`` and
  ``error_code == 0``: the broker stored it.  A null ``error_code`` reads as 0 in every table.  Commit rows with a null topic, partition or offset
  are ignored by every rule.
* ``Finding.client`` is a client id (Kafka ``client.id``, MongoDB appName), never an address,
  except for ``reconnect_storm`` (the client host).  Where the rule does not group by client, it is
  the client id shared by every evidence row, or None when they differ (null counts as a value).
* Windows: a sliding window of W seconds starting at an event of time t holds the events of time
  in ``[t, t + W * 1e9)`` (ns, W rounded to whole ns, at least 1 ns).  Windows start at each event;
  the busiest window (largest measure) wins, the earliest start among equals.  The finding's
  evidence is the events inside that window.
* Messages are built from the aggregates named in each rule by the ``message_*`` functions below,
  so another engine computing the aggregates gets the same text.

The rules (kind, severity: definition)
--------------------------------------
Over ``offset_commits`` (and ``group_events`` for rule 4):

1. ``offset_backwards`` (error): per (group, topic, partition), walking the accepted commits in
   commit order, a commit whose offset is lower than the previous accepted commit's offset is
   evidence.  Message: the count, the largest drop (previous offset minus offset; the earliest in
   commit order among equal drops) with the members on both sides, and the sorted distinct members
   of the backward commits.
2. ``stale_offset_recommit`` (error): per (group, topic, partition, member_id, offset) with at
   least ``stale_repeats`` accepted commits (the *repeats*), let L be the last repeat in commit
   order and H the highest offset among accepted commits of the same (group, topic, partition)
   with ``ts_ns <= L.ts_ns``.  If H > offset: one finding, evidence = all the repeats, ``member`` =
   that member_id.  Message names H.  (The member keeps committing a position the partition has
   moved past: the seed's failure.)
3. ``partition_committed_by_two_members`` (warning): per (group, generation, topic, partition)
   with ``generation >= 0``, over accepted commits with a non-null member_id: at least two
   distinct member_ids.  Evidence = all those commits; message lists the sorted members.
4. ``commit_after_partition_lost`` (error): for each commit row (any status) with a non-empty
   member_id and ``generation >= 0``: the member's assignment is that of the last ``group_events``
   row (order ``(ts_ns, capture, frame)``) with api 'SyncGroup', the same group and member_id,
   ``error_code == 0``, a non-null ``assignment`` and ``ts_ns`` strictly before the commit's
   ``ts_ns``.  If there is one and ``"topic:partition"`` is not in it, the commit is evidence,
   grouped per (group, topic, partition, member_id).  Message: the sorted distinct generations of
   those SyncGroup rows (null shown as "?") and how many of the commits were accepted.

Over ``group_events``:

5. ``rebalance_storm`` (warning): per group, three conditions, tried in this order, the first
   that fires wins:
   (a) JoinGroup requests: rows with api 'JoinGroup' and a non-null ``request_frame``, except
   those answered MEMBER_ID_REQUIRED (``error_code == 79``: KIP-394's first step of every join,
   a member without an id is given one and joins again at once, so each join is two requests);
   measure = rows in the window; fires at ``>= storm_joins``.
   (b) generations handed out: rows with api 'JoinGroup', status 'answered', ``error_code == 0`` and
   a non-null generation; measure = distinct generations in the window; fires at
   ``>= storm_generations``.
   (c) REBALANCE_IN_PROGRESS answers: rows of any api with status 'answered' and ``error_code ==
   27``; measure = rows in the window; fires at ``>= storm_rebalance_errors``.
   Window ``storm_window_s`` over the rows' ``ts_ns`` (rows with a null ``ts_ns`` are left out).
   ``count`` = the busiest window's measure; evidence = that condition's rows inside that window
   (so ``frames`` lists them; ``first/last_ts_ns`` span them).  Message names the condition.

Over ``connections`` (and ``exchanges`` for the client id):

10. ``reconnect_storm`` (warning): one client reconnecting over and over because its connections
    fail, not many clients each opening connections and doing their work (short CLI runs from
    one host, each with its own connections).  It counts *failed connections*: rows with a
    non-null ``first_ts_ns`` on which the server sent no byte (``bytes_to_client`` 0 or null:
    refused, reset or dropped before the first answer), per (capture, client host, client id,
    server).  The client host is ``client`` without its ":port" (IPv6 stays in brackets; the port
    changes with every connection of one client, so it cannot tell clients apart); the client id
    is the smallest non-null ``client_id`` of the connection's ``exchanges`` rows (same capture
    and ``conn``): a client that reached the server sent one with its first request.  A refused
    connection carries no request, so those of one host share the null client id.  Window
    ``reconnect_window_s``; fires when the busiest window holds ``>= reconnect_connections`` of
    them.  ``count`` = that number, evidence = those connections, ``client`` = the host (the
    message names the client id), ``protocol`` = their protocol if they share one, else None.
    Every protocol counts (a refused connection never carried a byte, so it is 'other').  A
    connection that was answered and then failed shows in the exchange rules (its error
    responses, its requests unanswered at ``connection_end``).

Over ``exchanges``:

6. ``error_response`` (by error, see below): rows with status 'answered' and a non-null ``error``
   (the response's first error; the per-partition ``errors`` list is not used), per (protocol,
   api, error); ``error`` = that name.  Kafka UNSUPPORTED_VERSION is left to rule 9 (never counted
   twice).  Severity: 'error' for the names in ``FATAL_ERRORS`` (data refused or lost, or a client
   that cannot work until configuration or ACLs change), 'info' for ``ROUTINE_ERRORS`` (part of a
   normal step of the group protocol: MEMBER_ID_REQUIRED, KIP-394's first join; REBALANCE_IN_PROGRESS,
   the coordinator telling a member to rejoin, as it does at every rebalance - too many of them is
   rule 5's), 'warning' otherwise.
7. ``throttled`` (info): answered rows with ``throttle_ms > 0``, per (protocol, api, client_id).
   Message gives the largest ``throttle_ms``.
8. ``unanswered`` (warning): rows with status 'unanswered' and ``unanswered_by ==
   'connection_end'`` (the server, or the network, ended the connection first), per (protocol,
   api, client_id).  ``skipped_request`` (warning): the same with ``unanswered_by == 'skipped'``
   (a later request on the connection was answered first).  Rows with ``unanswered_by ==
   'capture_end'`` (or null) are not findings: the capture stopped while they waited, and the
   rows do not tell how long before the capture's end they were sent.  Nor are rows with
   'client_close': the client closed the connection first, giving its requests up (a consumer
   closing during its long-poll Fetch, as every consumer does when it stops).  (A client that
   closes because its request timed out looks the same in these rows: not told apart yet.)
9. ``unsupported_version``: Kafka rows with status 'answered' and ``error == 'UNSUPPORTED_VERSION'``,
   per (api, api_version, client_id); 'info' for ApiVersions (the KIP-511 negotiation: the client
   retries with a lower version), 'warning' for any other api.
11. ``slow_request`` (warning): answered rows with a non-null ``latency_ms`` where
    ``latency_ms > max(expected_wait_ms or 0, 0) + slow`` (``slow`` = ``slow_kafka_ms`` for
    protocol 'kafka', ``slow_mongodb_ms`` for 'mongodb'; other protocols never), per (protocol, api,
    client_id).  Message gives the largest ``latency_ms``.  Failed MongoDB commands are rule 6.
12. ``orphan_response`` / ``undecodable`` (info): rows with that status, per protocol.

The findings come ordered by ``finding_order``: severity (error, warning,
info), kind, group, topic, partition, api, client (nulls first), then frames, count and message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ERROR",
    "FATAL_ERRORS",
    "FINDINGS_SCHEMA",
    "INFO",
    "KINDS",
    "MAX_FRAMES",
    "ROUTINE_ERRORS",
    "WARNING",
    "Finding",
    "Thresholds",
    "finding_order",
]

ERROR, WARNING, INFO = "error", "warning", "info"
_SEVERITY_RANK = {ERROR: 0, WARNING: 1, INFO: 2}
MAX_FRAMES = 20  #: frames listed per finding (the smallest ones); ``count`` still counts them all

KINDS: dict[str, str] = {
    "offset_backwards": "a group's committed offset for a partition went down",
    "stale_offset_recommit": "a member re-commits an offset the partition has already moved past",
    "partition_committed_by_two_members": "two members committed one partition in one generation",
    "commit_after_partition_lost": "a member committed a partition its latest assignment did not include",
    "rebalance_storm": "a group rebalanced over and over in a short time",
    "error_response": "responses carrying an error",
    "throttled": "responses throttled by a quota",
    "unanswered": "requests whose connection ended before the response",
    "skipped_request": "requests the server skipped (a later one was answered first)",
    "unsupported_version": "requests refused with UNSUPPORTED_VERSION",
    "reconnect_storm": "a client host's connections to one server failed over and over in a short time",
    "slow_request": "requests answered later than they could legitimately wait, plus a margin",
    "orphan_response": "responses whose request was not captured",
    "undecodable": "messages that framed but did not decode",
}

# Kafka error names (and MongoDB codeNames) worth severity 'error': the data was refused or lost,
# or the client cannot work until someone changes configuration, ACLs or credentials.
FATAL_ERRORS = frozenset((
    "UNKNOWN_SERVER_ERROR", "OFFSET_OUT_OF_RANGE", "CORRUPT_MESSAGE", "MESSAGE_TOO_LARGE",
    "OFFSET_METADATA_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_REQUIRED_ACKS",
    "INCONSISTENT_GROUP_PROTOCOL", "INVALID_SESSION_TIMEOUT", "INVALID_COMMIT_OFFSET_SIZE",
    "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
    "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE", "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "SASL_AUTHENTICATION_FAILED",
    "UNSUPPORTED_COMPRESSION_TYPE", "GROUP_MAX_SIZE_REACHED", "FENCED_INSTANCE_ID", "INVALID_RECORD",
    "PRODUCER_FENCED",
    # MongoDB codeNames
    "AuthenticationFailed", "Unauthorized",
))
# Errors that are a normal step of the group protocol, not a problem: severity 'info'.  A
# member's first JoinGroup is answered MEMBER_ID_REQUIRED (KIP-394); at every rebalance the
# coordinator answers members' Heartbeats (and commits, syncs) REBALANCE_IN_PROGRESS to make them
# rejoin.  Too many of either is rule 5's.
ROUTINE_ERRORS = frozenset(("MEMBER_ID_REQUIRED", "REBALANCE_IN_PROGRESS"))

_MONGODB = "mongodb"

FINDINGS_SCHEMA: dict[str, str] = {
    "kind": "string", "severity": "string", "protocol": "string", "message": "string",
    "group": "string", "topic": "string", "partition": "int32", "api": "string", "client": "string",
    "member": "string", "error": "string", "count": "int64", "first_ts_ns": "int64", "last_ts_ns": "int64",
    "frame_captures": "list<string>", "frames": "list<int64>",
}


@dataclass
class Finding:
    """One finding: what was seen, how often, and the frames that show it."""

    kind: str  #: a key of ``KINDS``
    severity: str  #: 'error' | 'warning' | 'info'
    protocol: str | None
    message: str  #: one readable sentence, with the numbers
    group: str | None = None
    topic: str | None = None
    partition: int | None = None
    api: str | None = None
    client: str | None = None
    count: int = 0  #: evidence rows (all of them, not only the listed frames)
    first_ts_ns: int | None = None
    last_ts_ns: int | None = None
    frames: list[tuple[str, int]] = field(default_factory=list)  #: smallest MAX_FRAMES (capture, frame)
    member: str | None = None  #: the member id the finding is about (rules 2 and 4)
    error: str | None = None  #: the error name (rules 6 and 9)

    def key(self) -> tuple:
        """What two engines must agree on for the same input."""
        return (self.kind, self.group, self.topic, self.partition, self.api, self.client, self.count,
                tuple(self.frames))

    def to_row(self) -> dict[str, Any]:
        """The ``findings`` table row (columns of ``FINDINGS_SCHEMA``)."""
        return {
            "kind": self.kind, "severity": self.severity, "protocol": self.protocol, "message": self.message,
            "group": self.group, "topic": self.topic, "partition": self.partition, "api": self.api,
            "client": self.client, "member": self.member, "error": self.error, "count": self.count,
            "first_ts_ns": self.first_ts_ns, "last_ts_ns": self.last_ts_ns,
            "frame_captures": [c for c, _ in self.frames], "frames": [f for _, f in self.frames],
        }


@dataclass
class Thresholds:
    """The numbers the rules compare against (the CLI can change them)."""

    slow_kafka_ms: float = 1000  #: beyond the request's expected wait
    slow_mongodb_ms: float = 100  #: MongoDB's own slowms default
    storm_window_s: float = 60
    storm_joins: int = 10  #: JoinGroup requests of one group in one window
    storm_generations: int = 5  #: distinct generations handed out in one window
    storm_rebalance_errors: int = 5  #: REBALANCE_IN_PROGRESS answers in one window
    reconnect_window_s: float = 60
    reconnect_connections: int = 10  #: connections from one client host to one server in one window
    stale_repeats: int = 3  #: accepted commits of one offset by one member


def finding_order(f: Finding) -> tuple:
    """The order of the findings (``rules.run_rules``): severity, kind, group, topic, partition, api, client (nulls first),
    then frames, count, message so that the order is total."""
    return (_SEVERITY_RANK.get(f.severity, 3), f.kind, _nullable(f.group), _nullable(f.topic),
            _nullable(f.partition), _nullable(f.api), _nullable(f.client), f.frames, f.count, f.message)


def _nullable(value) -> tuple:
    return (0, "") if value is None else (1, value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _who(client: str | None) -> str:
    return "(no client id)" if client is None else repr(client)


def _member(member: str | None) -> str:
    return "(no member id)" if member is None else repr(member)


def _members(members: Iterable[str | None]) -> str:
    return ", ".join(_member(m) for m in sorted(set(members), key=_nullable))


def _ms(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


# -- messages (shared with any other engine computing the same aggregates) ------------------------

def message_offset_backwards(group, topic, partition, count, drop_from, drop_from_member, drop_to,
                             drop_to_member, members) -> str:
    return (f"Committed offset of {topic}-{partition} in group {group!r} went backwards "
            f"{'once' if count == 1 else f'{count} times'}; the largest drop was from {drop_from} "
            f"(member {_member(drop_from_member)}) to {drop_to} (member {_member(drop_to_member)}); "
            f"backward commits by {_members(members)}.")


def message_stale_offset_recommit(group, topic, partition, member, offset, count, higher) -> str:
    return (f"Member {_member(member)} of group {group!r} committed offset {offset} of {topic}-{partition} "
            f"{count} times although offset {higher} had already been committed for that partition.")


def message_partition_committed_by_two_members(group, generation, topic, partition, count, members) -> str:
    return (f"{len(set(members))} members committed {topic}-{partition} in generation {generation} of group "
            f"{group!r} ({_plural(count, 'commit')}): {_members(members)}.")


def message_commit_after_partition_lost(group, topic, partition, member, count, generations, accepted) -> str:
    gens = ", ".join("?" if g is None else str(g) for g in sorted(set(generations), key=_nullable))
    which = f"generation {gens}" if len(set(generations)) == 1 else f"generations {gens}"
    return (f"Member {_member(member)} of group {group!r} committed {topic}-{partition} "
            f"{'once' if count == 1 else f'{count} times'} after its assignment of {which} "
            f"(SyncGroup) no longer included it; the broker accepted {accepted} of {count}.")


_STORM_CONDITIONS = {
    "joins": "JoinGroup requests",
    "generations": "generations handed out",
    "rebalance_errors": "REBALANCE_IN_PROGRESS answers",
}


def message_rebalance_storm(group, condition, count, window_s) -> str:
    return (f"Group {group!r} rebalanced over and over: {count} {_STORM_CONDITIONS[condition]} "
            f"within {window_s:g} s.")


def message_reconnect_storm(capture, host, client_id, server, count, window_s) -> str:
    who = f"{host} (client {_who(client_id)})" if client_id is not None else f"{host} (no request sent)"
    return (f"{who} opened {count} connections to {server} that got no byte back within {window_s:g} s "
            f"(capture {capture!r}).")


def message_error_response(protocol, api, error, count) -> str:
    return f"{_plural(count, f'{api} response')} ({protocol}) answered with error {error}."


def message_throttled(api, client, count, max_throttle_ms) -> str:
    return (f"{_plural(count, f'{api} response')} to client {_who(client)} were throttled, "
            f"up to {_ms(max_throttle_ms)} ms.")


def message_unanswered(protocol, api, client, count) -> str:
    return (f"{_plural(count, f'{api} request')} ({protocol}) from client {_who(client)} got no response "
            f"before the connection ended.")


def message_skipped_request(protocol, api, client, count) -> str:
    return (f"{_plural(count, f'{api} request')} ({protocol}) from client {_who(client)} were skipped by the "
            f"server: a later request on the connection was answered first.")


def message_unsupported_version(api, api_version, client, count) -> str:
    if api == "ApiVersions":
        return (f"{_plural(count, f'ApiVersions v{api_version} request')} from client {_who(client)} "
                f"answered UNSUPPORTED_VERSION: the client retries with a lower version (KIP-511).")
    return (f"{_plural(count, f'{api} v{api_version} request')} from client {_who(client)} refused with "
            f"UNSUPPORTED_VERSION: the broker does not serve that version.")


def message_slow_request(protocol, api, client, count, slow_ms, max_latency_ms) -> str:
    what = "operation" if protocol == _MONGODB else "request"
    return (f"{_plural(count, f'{api} {what}')} ({protocol}) from client {_who(client)} took more than "
            f"{_ms(slow_ms)} ms beyond their expected wait; the slowest took {_ms(max_latency_ms)} ms.")


def message_orphan_response(protocol, count) -> str:
    return f"{_plural(count, f'{protocol} response')} whose request was not captured."


def message_undecodable(protocol, count) -> str:
    return f"{_plural(count, f'{protocol} message')} framed but did not decode (see the warnings)."
