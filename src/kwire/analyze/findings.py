"""The findings of ``kwire analyze``: what in the traffic deserves a look, computed from the tables.

Every rule reads rows of the analyzer's tables (``tables.SCHEMAS``: ``exchanges``,
``offset_commits``, ``group_events``, ``connections``), never ``Exchange`` objects, because the
PySpark job computes the same findings with window functions over the same tables and a test
requires identical results.  So each rule is deterministic, independent of the order of its input
rows (it sorts inside), and defined exactly below.

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
Over ``offset_commits`` (and ``group_events`` for rule 4), ``commit_findings``:

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

Over ``group_events``, ``group_findings``:

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

Over ``connections``, ``connection_findings``:

10. ``reconnect_storm`` (warning): a client reconnecting over and over because its connections
    fail, not many clients each opening connections and doing their work (short CLI runs from
    one host).  It counts *failed connections*: rows with a non-null ``first_ts_ns`` on which the
    server sent no byte (``bytes_to_client`` 0 or null: refused, reset or dropped before the
    first answer), per (capture, client host, server), where the client host is ``client``
    without its ":port" (IPv6 stays in brackets): window ``reconnect_window_s``; fires when the
    busiest window holds ``>= reconnect_connections`` of them.  ``count`` = that number,
    evidence = those connections, ``client`` = the host, ``protocol`` = their protocol if they
    share one, else None.  Every protocol counts (a refused connection never carried a byte, so
    it is 'other').  A connection that was answered and then failed shows in the exchange rules
    (its error responses, its requests unanswered at ``connection_end``).

Over ``exchanges``, streamed through ``ExchangeFindings``:

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

``all_findings`` gathers everything, ordered by ``finding_order``: severity (error, warning,
info), kind, group, topic, partition, api, client (nulls first), then frames, count and message.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kwire.protocol.errors import MemberIdRequiredError, RebalanceInProgressError

from .exchange import ANSWERED, ORPHAN_RESPONSE, UNANSWERED, UNDECODABLE

__all__ = [
    "ERROR",
    "FATAL_ERRORS",
    "FINDINGS_SCHEMA",
    "INFO",
    "KINDS",
    "MAX_FRAMES",
    "ROUTINE_ERRORS",
    "WARNING",
    "ExchangeFindings",
    "Finding",
    "Thresholds",
    "all_findings",
    "commit_findings",
    "connection_findings",
    "finding_order",
    "group_findings",
]

Row = Mapping[str, Any]

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

_KAFKA, _MONGODB = "kafka", "mongodb"
_REBALANCE_IN_PROGRESS = RebalanceInProgressError.code
_MEMBER_ID_REQUIRED = MemberIdRequiredError.code
_NS_PER_S = 1_000_000_000

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
    """The order of ``all_findings``: severity, kind, group, topic, partition, api, client (nulls first),
    then frames, count, message so that the order is total."""
    return (_SEVERITY_RANK.get(f.severity, 3), f.kind, _nullable(f.group), _nullable(f.topic),
            _nullable(f.partition), _nullable(f.api), _nullable(f.client), f.frames, f.count, f.message)


def _nullable(value) -> tuple:
    return (0, "") if value is None else (1, value)


# -- evidence --------------------------------------------------------------------------------

_UNSET = object()
_MIXED = object()


class _Evidence:
    """Count, time span, shared client id, smallest frames and a peak value of evidence rows.

    Bounded: the frame list is cut back to the smallest ``MAX_FRAMES`` distinct pairs whenever it
    grows past four times that, which keeps exactly the pairs the final answer can contain.
    """

    __slots__ = ("count", "first_ts", "last_ts", "_frames", "_client", "peak")

    def __init__(self):
        self.count = 0
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self._frames: list[tuple[str, int]] = []
        self._client: Any = _UNSET
        self.peak: float | None = None

    def add(self, ts: int | None, capture: str | None, frame: int | None, client: Any = _UNSET) -> None:
        self.count += 1
        if ts is not None:
            if self.first_ts is None or ts < self.first_ts:
                self.first_ts = ts
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts
        if frame is not None:
            frames = self._frames
            frames.append((capture or "", frame))
            if len(frames) > 4 * MAX_FRAMES:
                self._frames = sorted(set(frames))[:MAX_FRAMES]
        if client is not _UNSET and self._client is not _MIXED:
            if self._client is _UNSET:
                self._client = client
            elif self._client != client:
                self._client = _MIXED

    def raise_peak(self, value: float) -> None:
        if self.peak is None or value > self.peak:
            self.peak = value

    @property
    def frames(self) -> list[tuple[str, int]]:
        return sorted(set(self._frames))[:MAX_FRAMES]

    @property
    def client(self) -> str | None:
        """The client id every row shared, else None."""
        return None if self._client is _UNSET or self._client is _MIXED else self._client

    def finding(self, kind: str, severity: str, protocol: str | None, message: str, **keys) -> Finding:
        keys.setdefault("client", self.client)
        return Finding(kind=kind, severity=severity, protocol=protocol, message=message, count=self.count,
                       first_ts_ns=self.first_ts, last_ts_ns=self.last_ts, frames=self.frames, **keys)


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


def _window_ns(seconds: float) -> int:
    return max(1, round(seconds * _NS_PER_S))


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


def message_reconnect_storm(capture, host, server, count, window_s) -> str:
    return (f"{host} opened {count} connections to {server} that got no byte back within {window_s:g} s "
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


# -- offset commits ----------------------------------------------------------------------------

class _Commit(NamedTuple):
    ts: int
    capture: str
    frame: int | None
    offset: int
    group: str | None
    topic: str
    partition: int
    member: str | None
    generation: int | None
    client: str | None
    accepted: bool


def _commit_order(c: _Commit) -> tuple:
    return (c.ts, c.capture, c.frame or 0, c.offset)


def _commits(rows: Iterable[Row]) -> list[_Commit]:
    """Commit rows made uniform, in commit order (rows without topic, partition or offset left out)."""
    out = []
    for r in rows:
        topic, partition, offset = r.get("topic"), r.get("partition"), r.get("offset")
        if topic is None or partition is None or offset is None:
            continue
        out.append(_Commit(
            ts=r.get("ts_ns") or 0, capture=r.get("capture") or "", frame=r.get("request_frame"), offset=offset,
            group=r.get("group"), topic=topic, partition=partition, member=r.get("member_id"),
            generation=r.get("generation"), client=r.get("client_id"),
            accepted=r.get("status") == ANSWERED and not r.get("error_code")))
    out.sort(key=_commit_order)
    return out


def _add_commit(ev: _Evidence, c: _Commit) -> None:
    ev.add(c.ts, c.capture, c.frame, c.client)


def commit_findings(commits: Iterable[Row], group_events: Iterable[Row] = (),
                    thresholds: Thresholds | None = None) -> list[Finding]:
    """Rules 1-4 over ``offset_commits`` rows (and the SyncGroup rows of ``group_events``)."""
    t = thresholds or Thresholds()
    rows = _commits(commits)
    by_partition: dict[tuple, list[_Commit]] = defaultdict(list)  # accepted only, in commit order
    for c in rows:
        if c.accepted:
            by_partition[(c.group, c.topic, c.partition)].append(c)
    out: list[Finding] = []
    for (group, topic, partition), accepted in by_partition.items():
        out.extend(_offset_backwards(group, topic, partition, accepted))
        out.extend(_stale_recommits(group, topic, partition, accepted, t.stale_repeats))
    out.extend(_two_members(rows))
    out.extend(_after_partition_lost(rows, group_events))
    out.sort(key=finding_order)
    return out


def _offset_backwards(group, topic, partition, accepted: list[_Commit]) -> list[Finding]:
    ev = _Evidence()
    biggest: tuple[int, _Commit, _Commit] | None = None
    members = []
    for prev, c in zip(accepted, accepted[1:], strict=False):
        if c.offset < prev.offset:
            _add_commit(ev, c)
            members.append(c.member)
            drop = prev.offset - c.offset
            if biggest is None or drop > biggest[0]:
                biggest = (drop, prev, c)
    if biggest is None:
        return []
    _, high, low = biggest
    message = message_offset_backwards(group, topic, partition, ev.count, high.offset, high.member, low.offset,
                                       low.member, members)
    return [ev.finding("offset_backwards", ERROR, _KAFKA, message, group=group, topic=topic, partition=partition)]


def _stale_recommits(group, topic, partition, accepted: list[_Commit], repeats_needed: int) -> list[Finding]:
    times = [c.ts for c in accepted]  # sorted: commit order starts with ts
    highest_so_far = []
    high = None
    for c in accepted:
        high = c.offset if high is None else max(high, c.offset)
        highest_so_far.append(high)
    repeats: dict[tuple, list[_Commit]] = defaultdict(list)
    for c in accepted:
        repeats[(c.member, c.offset)].append(c)
    out = []
    for (member, offset), same in repeats.items():
        if len(same) < max(1, repeats_needed):
            continue
        # the highest offset committed at or before the last repeat (same ts included)
        higher = highest_so_far[bisect_right(times, same[-1].ts) - 1]
        if higher <= offset:
            continue
        ev = _Evidence()
        for c in same:
            _add_commit(ev, c)
        message = message_stale_offset_recommit(group, topic, partition, member, offset, ev.count, higher)
        out.append(ev.finding("stale_offset_recommit", ERROR, _KAFKA, message, group=group, topic=topic,
                              partition=partition, member=member))
    return out


def _two_members(rows: list[_Commit]) -> list[Finding]:
    by_generation: dict[tuple, list[_Commit]] = defaultdict(list)
    for c in rows:
        if c.accepted and c.member is not None and c.generation is not None and c.generation >= 0:
            by_generation[(c.group, c.generation, c.topic, c.partition)].append(c)
    out = []
    for (group, generation, topic, partition), commits in by_generation.items():
        members = {c.member for c in commits}
        if len(members) < 2:
            continue
        ev = _Evidence()
        for c in commits:
            _add_commit(ev, c)
        message = message_partition_committed_by_two_members(group, generation, topic, partition, ev.count,
                                                               members)
        out.append(ev.finding("partition_committed_by_two_members", WARNING, _KAFKA, message, group=group,
                              topic=topic, partition=partition))
    return out


class _Assignment(NamedTuple):
    ts: int
    capture: str
    frame: int
    generation: int | None
    partitions: frozenset


def _assignments(group_events: Iterable[Row]) -> dict[tuple, tuple[list[int], list[_Assignment]]]:
    """(group, member_id) -> (times, assignments) of the successful SyncGroups that gave one, in order."""
    found: dict[tuple, list[_Assignment]] = defaultdict(list)
    for r in group_events:
        if r.get("api") != "SyncGroup" or r.get("error_code") or r.get("assignment") is None:
            continue
        member, ts = r.get("member_id"), r.get("ts_ns")
        if member is None or ts is None:
            continue
        frame = r.get("request_frame")
        if frame is None:
            frame = r.get("response_frame")
        found[(r.get("group"), member)].append(_Assignment(
            ts, r.get("capture") or "", frame or 0, r.get("generation"), frozenset(r["assignment"])))
    out = {}
    for key, items in found.items():
        # (ts, capture, frame) as documented; generation and assignment only make the order total
        items.sort(key=lambda a: (a.ts, a.capture, a.frame, _nullable(a.generation), sorted(a.partitions)))
        out[key] = ([a.ts for a in items], items)
    return out


@dataclass
class _LostPartition:
    """Evidence of rule 4 for one (group, topic, partition, member)."""

    evidence: _Evidence = field(default_factory=_Evidence)
    generations: set = field(default_factory=set)  # of the assignments that did not include it
    accepted: int = 0


def _after_partition_lost(rows: list[_Commit], group_events: Iterable[Row]) -> list[Finding]:
    assignments = _assignments(group_events)
    evidence: dict[tuple, _LostPartition] = {}
    for c in rows:
        if not c.member or c.generation is None or c.generation < 0:
            continue
        known = assignments.get((c.group, c.member))
        if known is None:
            continue
        times, items = known
        i = bisect_left(times, c.ts) - 1  # the last SyncGroup strictly before the commit
        if i < 0 or f"{c.topic}:{c.partition}" in items[i].partitions:
            continue
        lost = evidence.get((c.group, c.topic, c.partition, c.member))
        if lost is None:
            lost = evidence[(c.group, c.topic, c.partition, c.member)] = _LostPartition()
        _add_commit(lost.evidence, c)
        lost.generations.add(items[i].generation)
        lost.accepted += c.accepted
    out = []
    for (group, topic, partition, member), lost in evidence.items():
        ev = lost.evidence
        message = message_commit_after_partition_lost(group, topic, partition, member, ev.count, lost.generations,
                                                      lost.accepted)
        out.append(ev.finding("commit_after_partition_lost", ERROR, _KAFKA, message, group=group, topic=topic,
                              partition=partition, member=member))
    return out


# -- windows ---------------------------------------------------------------------------------

class _Event(NamedTuple):
    ts: int
    capture: str
    frame: int | None
    value: Any  # what a 'distinct' measure counts
    client: Any = None


def _busiest_window(events: list[_Event], window_ns: int, *, distinct: bool = False) -> tuple[int, int, int]:
    """(measure, i, j): the busiest window, starting at ``events[i]`` and holding ``events[i:j]``.

    ``events`` are sorted by time.  The measure is the number of events, or with ``distinct`` the
    number of distinct values.  A window starting at a later event of the same time holds a subset,
    so starting at each event's index is the same as starting at each distinct time.
    """
    best = (0, 0, 0)
    values: Counter = Counter()
    j = 0
    for i, e in enumerate(events):
        end = e.ts + window_ns
        while j < len(events) and events[j].ts < end:
            values[events[j].value] += 1
            j += 1
        measure = len(values) if distinct else j - i
        if measure > best[0]:
            best = (measure, i, j)
        values[e.value] -= 1
        if not values[e.value]:
            del values[e.value]
    return best


def _window_evidence(events: list[_Event]) -> _Evidence:
    ev = _Evidence()
    for e in events:
        ev.add(e.ts, e.capture, e.frame, e.client)
    return ev


def group_findings(group_events: Iterable[Row], thresholds: Thresholds | None = None) -> list[Finding]:
    """Rule 5 (``rebalance_storm``) over ``group_events`` rows."""
    t = thresholds or Thresholds()
    window_ns = _window_ns(t.storm_window_s)
    joins: dict[Any, list[_Event]] = defaultdict(list)
    generations: dict[Any, list[_Event]] = defaultdict(list)
    rebalancing: dict[Any, list[_Event]] = defaultdict(list)
    for r in group_events:
        ts = r.get("ts_ns")
        if ts is None:
            continue
        group, api, frame = r.get("group"), r.get("api"), r.get("request_frame")
        shown = frame if frame is not None else r.get("response_frame")
        answered_ok = r.get("status") == ANSWERED and not r.get("error_code")
        capture = r.get("capture") or ""
        if api == "JoinGroup":
            if frame is not None and r.get("error_code") != _MEMBER_ID_REQUIRED:
                joins[group].append(_Event(ts, capture, frame, None))
            if answered_ok and r.get("generation") is not None:
                generations[group].append(_Event(ts, capture, shown, r["generation"]))
        if r.get("status") == ANSWERED and r.get("error_code") == _REBALANCE_IN_PROGRESS:
            rebalancing[group].append(_Event(ts, capture, shown, None))
    conditions = (("joins", joins, t.storm_joins, False),
                  ("generations", generations, t.storm_generations, True),
                  ("rebalance_errors", rebalancing, t.storm_rebalance_errors, False))
    out = []
    for group in {*joins, *generations, *rebalancing}:
        for name, events_of, needed, distinct in conditions:
            events = sorted(events_of.get(group, ()), key=_event_order)
            if not events:
                continue
            measure, i, j = _busiest_window(events, window_ns, distinct=distinct)
            if measure >= max(1, needed):
                ev = _window_evidence(events[i:j])
                ev.count = measure
                message = message_rebalance_storm(group, name, measure, t.storm_window_s)
                out.append(ev.finding("rebalance_storm", WARNING, _KAFKA, message, group=group, client=None))
                break
    out.sort(key=finding_order)
    return out


def _event_order(e: _Event) -> tuple:
    return (e.ts, e.capture, _nullable(e.frame), _nullable(e.value))


def _client_host(client: str | None) -> str:
    """'10.0.0.1:5000' -> '10.0.0.1'; '[fe80::1]:5000' -> '[fe80::1]'."""
    if not client:
        return ""
    if client.startswith("["):
        end = client.find("]")
        return client[:end + 1] if end >= 0 else client
    host, sep, _ = client.rpartition(":")
    return host if sep else client


def connection_findings(connections: Iterable[Row], thresholds: Thresholds | None = None) -> list[Finding]:
    """Rule 10 (``reconnect_storm``) over ``connections`` rows."""
    t = thresholds or Thresholds()
    window_ns = _window_ns(t.reconnect_window_s)
    by_pair: dict[tuple, list[_Event]] = defaultdict(list)
    for r in connections:
        ts = r.get("first_ts_ns")
        if ts is None or r.get("bytes_to_client"):  # answered: not a failed connection
            continue
        capture = r.get("capture") or ""
        key = (capture, _client_host(r.get("client")), r.get("server"))
        # the event's 'client' slot carries the protocol: the finding's protocol if all share one
        by_pair[key].append(_Event(ts, capture, r.get("first_frame"), None, r.get("protocol")))
    out = []
    for (capture, host, server), events in by_pair.items():
        events.sort(key=_event_order)
        measure, i, j = _busiest_window(events, window_ns)
        if measure < max(1, t.reconnect_connections):
            continue
        ev = _window_evidence(events[i:j])
        message = message_reconnect_storm(capture, host, server, measure, t.reconnect_window_s)
        out.append(ev.finding("reconnect_storm", WARNING, ev.client, message, client=host))
    out.sort(key=finding_order)
    return out


# -- exchanges (streamed) ------------------------------------------------------------------------

class ExchangeFindings:
    """Rules 6-9, 11 and 12, fed one ``exchanges`` row at a time.

    Keeps one small tally per finding key (count, time span, the smallest frames, a peak value), so
    memory does not grow with the capture.  Keys come from the traffic (client ids, error texts), so
    garbage could make many: beyond ``max_keys`` new keys are not tracked and their rows are counted
    in ``untracked_rows`` (the caller should warn when it is not 0).
    """

    def __init__(self, thresholds: Thresholds | None = None, *, max_keys: int = 10_000):
        self.thresholds = t = thresholds or Thresholds()
        self.max_keys = max_keys
        self.untracked_rows = 0
        self._slow_ms = {_KAFKA: t.slow_kafka_ms, _MONGODB: t.slow_mongodb_ms}
        # key: (kind, protocol, api, client, extra) where extra is the error / api version / None
        self._tallies: dict[tuple, _Evidence] = {}

    def add(self, row: Row) -> None:
        """Take one ``exchanges`` row (``tables.exchange_row``)."""
        status = row.get("status")
        if status == ANSWERED:
            error = row.get("error")
            throttle = row.get("throttle_ms") or 0
            latency = row.get("latency_ms")
            protocol = row.get("protocol")
            # The common case, kept cheap: a clean, unthrottled answer faster than the slow margin
            # alone (the expected wait only ever adds to the margin).
            if error is None and throttle <= 0 and (
                    latency is None or latency <= self._slow_ms.get(protocol, latency)):
                return
            self._answered(row, protocol, error, throttle, latency)
        elif status == UNANSWERED:
            by = row.get("unanswered_by")
            if by == "connection_end":
                self._tally(("unanswered", row.get("protocol"), row.get("api"), row.get("client_id"), None), row)
            elif by == "skipped":
                self._tally(("skipped_request", row.get("protocol"), row.get("api"), row.get("client_id"), None),
                            row)
        elif status == ORPHAN_RESPONSE or status == UNDECODABLE:
            self._tally((status, row.get("protocol"), None, None, None), row)

    def add_all(self, rows: Iterable[Row]) -> ExchangeFindings:
        for row in rows:
            self.add(row)
        return self

    def _answered(self, row: Row, protocol, error, throttle, latency) -> None:
        api, client = row.get("api"), row.get("client_id")
        if error is not None:
            if protocol == _KAFKA and error == "UNSUPPORTED_VERSION":
                self._tally(("unsupported_version", protocol, api, client, row.get("api_version")), row)
            else:
                self._tally(("error_response", protocol, api, None, error), row)
        if throttle > 0:
            ev = self._tally(("throttled", protocol, api, client, None), row)
            if ev is not None:
                ev.raise_peak(throttle)
        slow = self._slow_ms.get(protocol)
        if latency is not None and slow is not None:
            wait = row.get("expected_wait_ms") or 0
            if latency > max(wait, 0) + slow:
                ev = self._tally(("slow_request", protocol, api, client, None), row)
                if ev is not None:
                    ev.raise_peak(latency)

    def _tally(self, key: tuple, row: Row) -> _Evidence | None:
        ev = self._tallies.get(key)
        if ev is None:
            if len(self._tallies) >= self.max_keys:
                self.untracked_rows += 1
                return None
            ev = self._tallies[key] = _Evidence()
        frame = row.get("request_frame")
        if frame is None:
            frame = row.get("response_frame")
        ts = row.get("request_ts_ns")
        if ts is None:
            ts = row.get("response_ts_ns")
        ev.add(ts, row.get("capture"), frame)
        return ev

    def results(self) -> list[Finding]:
        """The findings so far, in ``finding_order``."""
        out = [self._finding(key, ev) for key, ev in self._tallies.items()]
        out.sort(key=finding_order)
        return out

    def _finding(self, key: tuple, ev: _Evidence) -> Finding:
        kind, protocol, api, client, extra = key
        n = ev.count
        if kind == "error_response":
            severity = ERROR if extra in FATAL_ERRORS else INFO if extra in ROUTINE_ERRORS else WARNING
            return ev.finding(kind, severity, protocol, message_error_response(protocol, api, extra, n),
                              api=api, client=None, error=extra)
        if kind == "unsupported_version":
            severity = INFO if api == "ApiVersions" else WARNING
            return ev.finding(kind, severity, protocol, message_unsupported_version(api, extra, client, n),
                              api=api, client=client, error="UNSUPPORTED_VERSION")
        if kind == "throttled":
            return ev.finding(kind, INFO, protocol, message_throttled(api, client, n, ev.peak), api=api,
                              client=client)
        if kind == "slow_request":
            message = message_slow_request(protocol, api, client, n, self._slow_ms[protocol], ev.peak)
            return ev.finding(kind, WARNING, protocol, message, api=api, client=client)
        if kind == "unanswered":
            return ev.finding(kind, WARNING, protocol, message_unanswered(protocol, api, client, n), api=api,
                              client=client)
        if kind == "skipped_request":
            return ev.finding(kind, WARNING, protocol, message_skipped_request(protocol, api, client, n), api=api,
                              client=client)
        if kind == ORPHAN_RESPONSE:
            return ev.finding(kind, INFO, protocol, message_orphan_response(protocol, n), client=None)
        return ev.finding(kind, INFO, protocol, message_undecodable(protocol, n), client=None)


def all_findings(exchange_findings: ExchangeFindings | Iterable[Finding] | None, commits: Iterable[Row] = (),
                 group_events: Iterable[Row] = (), connections: Iterable[Row] = (),
                 thresholds: Thresholds | None = None) -> list[Finding]:
    """Every finding: the exchange rules' (an ``ExchangeFindings`` fed already, or its results) and
    those of the commit, group and connection tables, in ``finding_order``."""
    if isinstance(exchange_findings, ExchangeFindings):
        out = exchange_findings.results()
    else:
        out = list(exchange_findings or ())
    group_events = list(group_events)  # read twice: by the commit rules and the group rules
    out.extend(commit_findings(commits, group_events, thresholds))
    out.extend(group_findings(group_events, thresholds))
    out.extend(connection_findings(connections, thresholds))
    out.sort(key=finding_order)
    return out
