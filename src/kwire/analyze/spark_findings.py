"""The findings of ``kwire analyze --spark``: ``findings.py``'s rules as Spark SQL over the tables.

Every rule of ``findings`` (its docstring defines them; this module follows it rule by rule) is
computed here with grouping, window functions and joins over the ``exchanges``,
``offset_commits``, ``group_events`` and ``connections`` DataFrames.  Spark computes each
finding's aggregates (count, time span, smallest frames, the numbers its message names); the
driver then builds the ``Finding`` with ``findings``' own ``message_*`` functions, so both engines
give the same findings, messages included, for the same rows.

How the rules map to Spark:

* Evidence (count, first/last time, the smallest ``MAX_FRAMES`` distinct (capture, frame) pairs,
  the client id shared by every row): ``dense_rank`` over the evidence ordered by (capture, frame)
  picks the pairs, one ``groupBy`` aggregates (``_evidence``).
* Commit order, ``offset_backwards``: ``lag`` over (group, topic, partition) ordered by (ts_ns,
  capture, request_frame, offset); ``stale_offset_recommit``: a running ``max`` of the offset over
  a RANGE frame on ts_ns (commits at the same time included, as the rule says).
* ``commit_after_partition_lost``: an as-of join written as a window: commits and SyncGroup
  assignments of one (group, member) in one stream ordered by time (a commit before an assignment
  of the same time, since the assignment must be strictly earlier), ``last(ignorenulls)``.
* Sliding windows (``rebalance_storm``, ``reconnect_storm``): a RANGE frame [t, t + W) from each
  event counts the events (or, for generations, the size of their ``collect_set``); the busiest
  window, earliest among equals, is joined back to its events.  A window starting at an event
  holds every event of the same time, which is the rule's window starting at the first of them,
  and the busiest window always starts at the first event of its time.
* The exchange rules (6-9, 11, 12): each row gives the keys it counts under (``explode``), one
  aggregation over all of them.  ``ExchangeFindings.max_keys`` has no counterpart: Spark keeps
  every key.
"""

from __future__ import annotations

import json
from typing import Any

from . import findings as fnd
from .findings import ERROR, FATAL_ERRORS, INFO, MAX_FRAMES, ROUTINE_ERRORS, WARNING, Finding, Thresholds

__all__ = ["spark_findings"]

_KAFKA, _MONGODB = "kafka", "mongodb"
_NS_PER_S = 1_000_000_000

# The columns every rule's aggregate DataFrame is brought to before they are unioned.
_KEY_COLUMNS = ("kind", "protocol", "group", "topic", "partition", "api", "client", "member", "error")


def _window_ns(seconds: float) -> int:
    """As findings' windows: W seconds rounded to whole ns, at least 1 ns."""
    return max(1, round(seconds * _NS_PER_S))


def spark_findings(exchanges, commits, group_events, connections, thresholds: Thresholds | None = None
                   ) -> list[Finding]:
    """Every finding of the four table DataFrames, in ``findings.finding_order``."""
    t = thresholds or Thresholds()
    parts = [
        *_commit_rules(commits, group_events, t),
        _rebalance_storm(group_events, t),
        _reconnect_storm(connections, t),
        _exchange_rules(exchanges, t),
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    out = [_finding(row, t) for row in union.collect()]
    out.sort(key=fnd.finding_order)
    return out


# -- shared ------------------------------------------------------------------------------------

def _F():
    from pyspark.sql import functions

    return functions


def _W():
    from pyspark.sql import Window

    return Window


def _true(cond):
    """A condition where null (unknown) counts as false, as Python's comparisons with None do."""
    return _F().coalesce(cond, _F().lit(False))


def _evidence(df, keys: list[str], *, client: str | None = None, extra=()):
    """Aggregate evidence rows (columns ``ev_capture`` non-null, ``ev_frame``, ``ev_ts``) per ``keys``.

    Gives ``count``, ``first_ts_ns``, ``last_ts_ns``, ``frames`` (the smallest MAX_FRAMES distinct
    (capture, frame) pairs with a frame, sorted), ``shared`` (the value of column ``client`` if
    every row has that same non-null value, else null) and the ``extra`` aggregates.
    """
    F, W = _F(), _W()
    order = W.partitionBy(*keys).orderBy(F.col("ev_frame").isNull(), "ev_capture", "ev_frame")
    ranked = df.withColumn("_rank", F.dense_rank().over(order))
    pair = F.when((F.col("_rank") <= MAX_FRAMES) & F.col("ev_frame").isNotNull(),
                  F.struct(F.col("ev_capture").alias("capture"), F.col("ev_frame").alias("frame")))
    aggs = [F.count(F.lit(1)).alias("count"), F.min("ev_ts").alias("first_ts_ns"),
            F.max("ev_ts").alias("last_ts_ns"), F.array_sort(F.array_distinct(F.collect_list(pair))).alias("frames")]
    if client is not None:
        aggs += [F.count_distinct(client).alias("_clients"),
                 F.max(F.col(client).isNull().cast("int")).alias("_null_client"), F.min(client).alias("_client")]
    grouped = ranked.groupBy(*keys).agg(*aggs, *extra)
    if client is not None:
        shared = F.when((F.col("_clients") == 1) & (F.col("_null_client") == 0), F.col("_client"))
        grouped = grouped.withColumn("shared", shared).drop("_clients", "_null_client", "_client")
    else:
        grouped = grouped.withColumn("shared", F.lit(None).cast("string"))
    return grouped


def _finish(df, kind, args: list[str], **columns):
    """One rule's aggregates in the union's columns: the keys, the evidence and ``args`` as JSON.
    ``kind``: the rule's name, or a column holding it."""
    F = _F()
    out = [(F.lit(kind) if isinstance(kind, str) else kind).alias("kind")]
    types = {"partition": "int"}
    for name in _KEY_COLUMNS[1:]:
        value = columns.get(name)
        if value is None:
            value = F.lit(None)
        elif isinstance(value, str):
            value = F.col(value)
        out.append(value.cast(types.get(name, "string")).alias(name))
    out += [F.col("count").cast("long").alias("count"), F.col("first_ts_ns").cast("long").alias("first_ts_ns"),
            F.col("last_ts_ns").cast("long").alias("last_ts_ns"), F.col("frames")]
    out.append(F.to_json(F.struct(*[F.col(a) for a in args])).alias("args") if args
               else F.lit("{}").alias("args"))
    return df.select(*out)


# -- commits (rules 1-4) -----------------------------------------------------------------------------

def _commits(commits):
    """Commit rows as the rules read them (findings._commits): nulls in ts/capture read as 0/''."""
    F = _F()
    return commits.where(F.col("topic").isNotNull() & F.col("partition").isNotNull() & F.col("offset").isNotNull()
                         ).select(
        "group", "topic", "partition", "offset", F.col("member_id").alias("member"), "generation",
        F.col("client_id").alias("client"),
        F.coalesce("ts_ns", F.lit(0)).cast("long").alias("ev_ts"),
        F.coalesce("capture", F.lit("")).alias("ev_capture"),
        F.col("request_frame").alias("ev_frame"),
        F.coalesce("request_frame", F.lit(0)).alias("frame0"),
        _true((F.col("status") == "answered") & (F.coalesce("error_code", F.lit(0)) == 0)).alias("accepted"))


def _commit_rules(commits, group_events, t: Thresholds) -> list:
    F, W = _F(), _W()
    rows = _commits(commits)
    accepted = rows.where("accepted")
    partition_keys = ["group", "topic", "partition"]
    order = W.partitionBy(*partition_keys).orderBy("ev_ts", "ev_capture", "frame0", "offset")

    # 1. offset_backwards
    lagged = (accepted.withColumn("prev_offset", F.lag("offset").over(order))
              .withColumn("prev_member", F.lag("member").over(order)))
    backwards = lagged.where(F.col("offset") < F.col("prev_offset")).withColumn(
        "drop", F.col("prev_offset") - F.col("offset"))
    biggest = F.min_by(F.struct(F.col("prev_offset").alias("drop_from"), F.col("prev_member").alias("drop_from_member"),
                                F.col("offset").alias("drop_to"), F.col("member").alias("drop_to_member")),
                       F.struct(-F.col("drop"), "ev_ts", "ev_capture", "frame0", "offset"))
    agg = _evidence(backwards, partition_keys, client="client",
                    extra=[biggest.alias("biggest"), F.collect_set(F.struct("member")).alias("members")])
    agg = agg.select("*", "biggest.*")
    offset_backwards = _finish(agg, "offset_backwards",
                               ["drop_from", "drop_from_member", "drop_to", "drop_to_member", "members"],
                               protocol=F.lit(_KAFKA), group="group", topic="topic", partition="partition",
                               client="shared")

    # 2. stale_offset_recommit
    upto_ts = W.partitionBy(*partition_keys).orderBy("ev_ts").rangeBetween(W.unboundedPreceding, W.currentRow)
    with_high = accepted.withColumn("high_upto", F.max("offset").over(upto_ts))
    agg = _evidence(with_high, [*partition_keys, "member", "offset"], client="client",
                    extra=[F.max("high_upto").alias("higher")])
    agg = agg.where((F.col("count") >= max(1, t.stale_repeats)) & (F.col("higher") > F.col("offset")))
    stale = _finish(agg, "stale_offset_recommit", ["offset", "higher"], protocol=F.lit(_KAFKA), group="group",
                    topic="topic", partition="partition", client="shared", member="member")

    # 3. partition_committed_by_two_members
    generation_rows = accepted.where(F.col("member").isNotNull() & F.col("generation").isNotNull()
                                     & (F.col("generation") >= 0))
    agg = _evidence(generation_rows, ["group", "generation", "topic", "partition"], client="client",
                    extra=[F.count_distinct("member").alias("n_members"),
                           F.collect_set(F.struct("member")).alias("members")])
    agg = agg.where(F.col("n_members") >= 2)
    two_members = _finish(agg, "partition_committed_by_two_members", ["generation", "members"],
                          protocol=F.lit(_KAFKA), group="group", topic="topic", partition="partition",
                          client="shared")

    # 4. commit_after_partition_lost
    lost = _after_partition_lost(rows, group_events)
    return [offset_backwards, stale, two_members, lost]


def _after_partition_lost(rows, group_events):
    F, W = _F(), _W()
    null_assignment = F.lit(None).cast("struct<generation:int,partitions:array<string>>")
    commits = rows.where(F.col("member").isNotNull() & (F.col("member") != "") & F.col("generation").isNotNull()
                         & (F.col("generation") >= 0)).select(
        "group", "member", "topic", "partition", "generation", "client", "ev_ts", "ev_capture", "ev_frame",
        "accepted", F.col("ev_ts").alias("ts"), F.lit(0).alias("side"), F.lit(None).cast("string").alias("a_capture"),
        F.lit(None).cast("long").alias("a_frame"), null_assignment.alias("a"))
    syncs = group_events.where((F.col("api") == "SyncGroup") & (F.coalesce("error_code", F.lit(0)) == 0)
                               & F.col("assignment").isNotNull() & F.col("member_id").isNotNull()
                               & F.col("ts_ns").isNotNull()).select(
        "group", F.col("member_id").alias("member"), F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"), F.lit(None).cast("int").alias("generation"),
        F.lit(None).cast("string").alias("client"), F.lit(None).cast("long").alias("ev_ts"),
        F.lit(None).cast("string").alias("ev_capture"), F.lit(None).cast("long").alias("ev_frame"),
        F.lit(None).cast("boolean").alias("accepted"), F.col("ts_ns").cast("long").alias("ts"),
        F.lit(1).alias("side"), F.coalesce("capture", F.lit("")).alias("a_capture"),
        F.coalesce("request_frame", "response_frame", F.lit(0)).alias("a_frame"),
        F.struct(F.col("generation").alias("generation"), F.col("assignment").alias("partitions")).alias("a"))
    # Assignments of the same time as a commit come after it (side 1): the rule wants strictly earlier.
    as_of = (W.partitionBy("group", "member").orderBy("ts", "side", "a_capture", "a_frame", "a.generation")
             .rowsBetween(W.unboundedPreceding, W.currentRow))
    stream = commits.unionByName(syncs).withColumn("assigned", F.last("a", ignorenulls=True).over(as_of))
    evidence = stream.where((F.col("side") == 0) & F.col("assigned").isNotNull() & ~F.array_contains(
        F.col("assigned.partitions"), F.concat_ws(":", "topic", F.col("partition").cast("string"))))
    agg = _evidence(evidence, ["group", "topic", "partition", "member"], client="client",
                    extra=[F.collect_set(F.struct(F.col("assigned.generation").alias("generation"))).alias("generations"),
                           F.sum(F.col("accepted").cast("long")).alias("accepted")])
    return _finish(agg, "commit_after_partition_lost", ["generations", "accepted"], protocol=F.lit(_KAFKA),
                   group="group", topic="topic", partition="partition", client="shared", member="member")


# -- windows (rules 5 and 10) -----------------------------------------------------------------------

def _busiest(events, keys: list[str], window_ns: int):
    """Per ``keys``: the busiest window [ts, ts + W) of ``events`` (columns ts, value), earliest among
    equals: (keys..., start, measure).  The measure counts events, or distinct values where
    ``distinct`` is true on the events."""
    F, W = _F(), _W()
    frame = W.partitionBy(*keys).orderBy("ts").rangeBetween(0, window_ns - 1)
    measured = events.withColumn(
        "measure", F.when(F.col("distinct"), F.size(F.collect_set("value").over(frame)))
        .otherwise(F.count(F.lit(1)).over(frame)))
    best = W.partitionBy(*keys).orderBy(F.col("measure").desc(), "ts")
    return (measured.withColumn("_best", F.row_number().over(best)).where(F.col("_best") == 1)
            .select(*keys, F.col("ts").alias("start"), "measure"))


def _in_window(events, chosen, keys: list[str], window_ns: int):
    """The events inside each chosen window (joined on keys, null-safe)."""
    F = _F()
    c = chosen.select(*[F.col(k).alias("_c_" + k) for k in keys], "start", "measure")
    cond = [events[k].eqNullSafe(c["_c_" + k]) for k in keys]
    cond += [events["ts"] >= c["start"], events["ts"] < c["start"] + F.lit(window_ns)]
    return events.join(c, cond, "inner").drop(*["_c_" + k for k in keys])


def _rebalance_storm(group_events, t: Thresholds):
    F, W = _F(), _W()
    window_ns = _window_ns(t.storm_window_s)
    rows = group_events.where(F.col("ts_ns").isNotNull())
    shown = F.coalesce("request_frame", "response_frame")
    common = [F.col("group"), F.col("ts_ns").cast("long").alias("ts"), F.coalesce("capture", F.lit("")).alias("ev_capture")]
    answered_ok = _true((F.col("status") == "answered") & (F.coalesce("error_code", F.lit(0)) == 0))
    # KIP-394's first step of each join (answered MEMBER_ID_REQUIRED) is not a join of its own
    joins = rows.where((F.col("api") == "JoinGroup") & F.col("request_frame").isNotNull()
                       & ~_true(F.col("error_code") == fnd._MEMBER_ID_REQUIRED)).select(
        *common, F.col("request_frame").alias("ev_frame"), F.lit(None).cast("long").alias("value"),
        F.lit(0).alias("cond"), F.lit(False).alias("distinct"))
    generations = rows.where((F.col("api") == "JoinGroup") & answered_ok & F.col("generation").isNotNull()).select(
        *common, shown.alias("ev_frame"), F.col("generation").cast("long").alias("value"),
        F.lit(1).alias("cond"), F.lit(True).alias("distinct"))
    rebalancing = rows.where(_true((F.col("status") == "answered")
                                   & (F.col("error_code") == fnd._REBALANCE_IN_PROGRESS))).select(
        *common, shown.alias("ev_frame"), F.lit(None).cast("long").alias("value"),
        F.lit(2).alias("cond"), F.lit(False).alias("distinct"))
    events = joins.unionByName(generations).unionByName(rebalancing)
    best = _busiest(events, ["group", "cond"], window_ns)
    needed = F.when(F.col("cond") == 0, max(1, t.storm_joins)).when(
        F.col("cond") == 1, max(1, t.storm_generations)).otherwise(max(1, t.storm_rebalance_errors))
    firing = best.where(F.col("measure") >= needed)
    first = W.partitionBy("group").orderBy("cond")
    chosen = firing.withColumn("_n", F.row_number().over(first)).where(F.col("_n") == 1).drop("_n")
    inside = _in_window(events.withColumn("ev_ts", F.col("ts")), chosen, ["group", "cond"], window_ns)
    agg = _evidence(inside, ["group", "cond"], extra=[F.max("measure").alias("measure")])
    agg = agg.withColumn("count", F.col("measure")).withColumn(
        "condition", F.element_at(F.array(*[F.lit(c) for c in ("joins", "generations", "rebalance_errors")]),
                                  F.col("cond") + 1))
    return _finish(agg, "rebalance_storm", ["condition"], protocol=F.lit(_KAFKA), group="group")


def _client_host(column):
    """findings._client_host in SQL: 'a.b.c.d:port' -> 'a.b.c.d', '[v6]:port' -> '[v6]'."""
    F = _F()
    c = F.col(column)
    bracket = F.instr(c, "]")
    return (F.when(c.isNull() | (c == ""), F.lit(""))
            .when(c.startswith("["), F.when(bracket > 0, c.substr(F.lit(1), bracket)).otherwise(c))
            .when(F.instr(c, ":") > 0, F.regexp_extract(c, r"(?s)^(.*):[^:]*$", 1))
            .otherwise(c))


def _reconnect_storm(connections, t: Thresholds):
    F = _F()
    window_ns = _window_ns(t.reconnect_window_s)
    # failed connections only: the server sent them no byte
    failed = F.col("first_ts_ns").isNotNull() & (F.coalesce("bytes_to_client", F.lit(0)) == 0)
    events = connections.where(failed).select(
        F.coalesce("capture", F.lit("")).alias("ev_capture"), _client_host("client").alias("host"), "server",
        F.col("first_ts_ns").cast("long").alias("ts"), F.col("first_ts_ns").cast("long").alias("ev_ts"),
        F.col("first_frame").alias("ev_frame"), "protocol", F.lit(None).cast("long").alias("value"),
        F.lit(False).alias("distinct"))
    keys = ["ev_capture", "host", "server"]
    best = _busiest(events, keys, window_ns)
    chosen = best.where(F.col("measure") >= max(1, t.reconnect_connections))
    inside = _in_window(events, chosen, keys, window_ns)
    agg = _evidence(inside, keys, client="protocol", extra=[F.max("measure").alias("measure")])
    agg = agg.withColumn("count", F.col("measure")).withColumn("capture", F.col("ev_capture"))
    return _finish(agg, "reconnect_storm", ["capture", "host", "server"], protocol="shared", client="host")


# -- exchanges (rules 6-9, 11, 12) ------------------------------------------------------------------

def _exchange_rules(exchanges, t: Thresholds):
    F = _F()
    answered = _true(F.col("status") == "answered")
    kafka = _true(F.col("protocol") == _KAFKA)
    slow_ms = (F.when(F.col("protocol") == _KAFKA, F.lit(float(t.slow_kafka_ms)))
               .when(F.col("protocol") == _MONGODB, F.lit(float(t.slow_mongodb_ms))))
    wait = F.greatest(F.coalesce("expected_wait_ms", F.lit(0)), F.lit(0)).cast("double")
    throttle = F.coalesce("throttle_ms", F.lit(0))
    unsupported = kafka & _true(F.col("error") == "UNSUPPORTED_VERSION")

    def key(cond, kind, *, client=True, error=None, version=False, peak=None):
        return F.when(cond, F.struct(
            F.lit(kind).alias("kind"), F.col("api").alias("k_api") if kind not in ("orphan_response", "undecodable")
            else F.lit(None).cast("string").alias("k_api"),
            (F.col("client_id") if client else F.lit(None).cast("string")).alias("k_client"),
            (error if error is not None else F.lit(None).cast("string")).alias("k_error"),
            (F.col("api_version") if version else F.lit(None).cast("int")).alias("k_version"),
            (peak if peak is not None else F.lit(None).cast("double")).cast("double").alias("peak")))

    keys = F.array(
        key(answered & F.col("error").isNotNull() & ~unsupported, "error_response", client=False,
            error=F.col("error")),
        key(answered & unsupported, "unsupported_version", error=F.lit("UNSUPPORTED_VERSION"), version=True),
        key(answered & (throttle > 0), "throttled", peak=F.col("throttle_ms")),
        key(answered & F.col("latency_ms").isNotNull() & slow_ms.isNotNull()
            & _true(F.col("latency_ms") > wait + slow_ms), "slow_request", peak=F.col("latency_ms")),
        key(_true((F.col("status") == "unanswered") & (F.col("unanswered_by") == "connection_end")), "unanswered"),
        key(_true((F.col("status") == "unanswered") & (F.col("unanswered_by") == "skipped")), "skipped_request"),
        key(_true(F.col("status") == "orphan_response"), "orphan_response", client=False),
        key(_true(F.col("status") == "undecodable"), "undecodable", client=False),
    )
    tagged = exchanges.select(
        "protocol", F.coalesce("capture", F.lit("")).alias("ev_capture"),
        F.coalesce("request_frame", "response_frame").alias("ev_frame"),
        F.coalesce("request_ts_ns", "response_ts_ns").alias("ev_ts"),
        F.explode(F.filter(keys, lambda k: k.isNotNull())).alias("k")).select("*", "k.*").drop("k")
    agg = _evidence(tagged, ["kind", "protocol", "k_api", "k_client", "k_error", "k_version"],
                    extra=[F.max("peak").alias("peak")])
    agg = agg.withColumnRenamed("k_version", "api_version")
    return _finish(agg, F.col("kind"), ["api_version", "peak"], protocol="protocol", api="k_api", client="k_client",
                   error="k_error")


# -- the driver's side ----------------------------------------------------------------------------------

def _finding(row, t: Thresholds) -> Finding:
    """A ``Finding`` from one aggregate row, with findings' message functions."""
    kind = row["kind"]
    args: dict[str, Any] = json.loads(row["args"] or "{}")
    keys = {name: row[name] for name in ("group", "topic", "partition", "api", "client", "member", "error")}
    n = row["count"]
    protocol = row["protocol"]
    group, topic, partition, member = keys["group"], keys["topic"], keys["partition"], keys["member"]
    api, client, error = keys["api"], keys["client"], keys["error"]
    if kind == "offset_backwards":
        members = [m.get("member") for m in args["members"]]
        severity, message = ERROR, fnd.message_offset_backwards(
            group, topic, partition, n, args["drop_from"], args.get("drop_from_member"), args["drop_to"],
            args.get("drop_to_member"), members)
    elif kind == "stale_offset_recommit":
        severity, message = ERROR, fnd.message_stale_offset_recommit(group, topic, partition, member,
                                                                     args["offset"], n, args["higher"])
    elif kind == "partition_committed_by_two_members":
        members = [m.get("member") for m in args["members"]]
        severity, message = WARNING, fnd.message_partition_committed_by_two_members(
            group, args["generation"], topic, partition, n, members)
    elif kind == "commit_after_partition_lost":
        generations = [g.get("generation") for g in args["generations"]]
        severity, message = ERROR, fnd.message_commit_after_partition_lost(
            group, topic, partition, member, n, generations, args["accepted"])
    elif kind == "rebalance_storm":
        severity, message = WARNING, fnd.message_rebalance_storm(group, args["condition"], n, t.storm_window_s)
    elif kind == "reconnect_storm":
        severity, message = WARNING, fnd.message_reconnect_storm(args["capture"], client, args.get("server"), n,
                                                                 t.reconnect_window_s)
    elif kind == "error_response":
        severity = ERROR if error in FATAL_ERRORS else INFO if error in ROUTINE_ERRORS else WARNING
        message = fnd.message_error_response(protocol, api, error, n)
    elif kind == "unsupported_version":
        severity = INFO if api == "ApiVersions" else WARNING
        message = fnd.message_unsupported_version(api, args.get("api_version"), client, n)
    elif kind == "throttled":
        severity, message = INFO, fnd.message_throttled(api, client, n, _number(args["peak"]))
    elif kind == "slow_request":
        slow = t.slow_kafka_ms if protocol == _KAFKA else t.slow_mongodb_ms
        severity, message = WARNING, fnd.message_slow_request(protocol, api, client, n, slow, args["peak"])
    elif kind == "unanswered":
        severity, message = WARNING, fnd.message_unanswered(protocol, api, client, n)
    elif kind == "skipped_request":
        severity, message = WARNING, fnd.message_skipped_request(protocol, api, client, n)
    elif kind == "orphan_response":
        severity, message = INFO, fnd.message_orphan_response(protocol, n)
    else:
        severity, message = INFO, fnd.message_undecodable(protocol, n)
    frames = [(f["capture"], f["frame"]) for f in row["frames"] or ()]
    return Finding(kind=kind, severity=severity, protocol=protocol, message=message, group=group, topic=topic,
                   partition=partition, api=api, client=client, count=n, first_ts_ns=row["first_ts_ns"],
                   last_ts_ns=row["last_ts_ns"], frames=frames, member=member, error=error)


def _number(value):
    """A throttle peak: findings keeps the int it was given; the union carries a double."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
