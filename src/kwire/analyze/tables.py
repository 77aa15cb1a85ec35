"""The analyzer's tables: flat rows built from exchanges, the same on one machine and on Spark.

Four tables come out of the decoding (``--parquet`` writes each as a Parquet dataset, Spark
builds the same rows in its workers), and the findings are computed from them:

* ``exchanges``: one row per ``Exchange`` (``exchange_row``).
* ``offset_commits``: one row per partition of an OffsetCommit / TxnOffsetCommit (``commit_rows``).
* ``group_events``: one row per JoinGroup, SyncGroup, Heartbeat, LeaveGroup exchange
  (``group_event_row``), with the member's assignment when a SyncGroup response gives it.
* ``connections``: one row per TCP connection (``connection_row``).

Each table's columns and their types are in ``SCHEMAS`` (names of Arrow/Spark types), so the
Parquet writer and the Spark job declare identical schemas.  Times are integer nanoseconds since
the epoch (``*_ts_ns``), frames are the capture's 1-based packet numbers.
"""

from __future__ import annotations

from typing import Any

from .exchange import Exchange

__all__ = [
    "COMMIT_APIS",
    "GROUP_APIS",
    "SCHEMAS",
    "commit_rows",
    "connection_row",
    "exchange_row",
    "group_event_row",
]

COMMIT_APIS = frozenset(("OffsetCommit", "TxnOffsetCommit"))
GROUP_APIS = frozenset(("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup"))

# column name -> type: 'string', 'int32', 'int64', 'double', 'bool', 'list<string>', 'list<int64>'
SCHEMAS: dict[str, dict[str, str]] = {
    "exchanges": {
        "capture": "string", "conn": "int32", "client": "string", "server": "string",
        "protocol": "string", "api": "string", "api_key": "int32", "api_version": "int32",
        "correlation_id": "int64", "status": "string", "client_id": "string",
        "request_frame": "int64", "request_ts_ns": "int64", "response_frame": "int64", "response_ts_ns": "int64",
        "latency_ms": "double", "request_bytes": "int64", "response_bytes": "int64",
        "error_code": "int32", "error": "string", "errors": "list<string>", "throttle_ms": "int32",
        "group": "string", "member_id": "string", "generation": "int32",
        "topics": "list<string>", "partitions": "int32", "records": "int64",
        "database": "string", "collection": "string", "expected_wait_ms": "int64", "unanswered_by": "string",
        "warning": "string",
    },
    "offset_commits": {
        "capture": "string", "conn": "int32", "client": "string", "client_id": "string", "api": "string",
        "api_version": "int32", "request_frame": "int64", "response_frame": "int64", "ts_ns": "int64",
        "group": "string", "member_id": "string", "generation": "int32",
        "topic": "string", "partition": "int32", "offset": "int64", "error_code": "int32", "error": "string",
        "status": "string",
    },
    "group_events": {
        "capture": "string", "conn": "int32", "client": "string", "client_id": "string", "api": "string",
        "api_version": "int32", "request_frame": "int64", "response_frame": "int64", "ts_ns": "int64",
        "group": "string", "member_id": "string", "generation": "int32", "error_code": "int32",
        "error": "string", "status": "string", "protocol_name": "string", "leader": "string",
        "assignment": "list<string>",
    },
    "connections": {
        "capture": "string", "conn": "int32", "client": "string", "server": "string", "protocol": "string",
        "roles": "string", "first_frame": "int64", "first_ts_ns": "int64", "last_frame": "int64",
        "last_ts_ns": "int64", "bytes_to_server": "int64", "bytes_to_client": "int64",
        "gaps": "int32", "gap_bytes": "int64", "exchanges": "int64", "end": "string",
    },
}


def _topics(ex: Exchange) -> list[str]:
    seen: dict[str, None] = {}
    for p in ex.partitions:
        seen.setdefault(p.topic, None)
    return list(seen)


def exchange_row(ex: Exchange) -> dict[str, Any]:
    """The ``exchanges`` row of one exchange."""
    details = ex.details
    return {
        "capture": ex.capture, "conn": ex.conn, "client": ex.client, "server": ex.server,
        "protocol": ex.protocol, "api": ex.api, "api_key": ex.api_key, "api_version": ex.api_version,
        "correlation_id": ex.correlation_id, "status": ex.status, "client_id": ex.client_id,
        "request_frame": ex.request_frame, "request_ts_ns": ex.request_ts_ns,
        "response_frame": ex.response_frame, "response_ts_ns": ex.response_ts_ns,
        "latency_ms": ex.latency_ms, "request_bytes": ex.request_bytes, "response_bytes": ex.response_bytes,
        "error_code": ex.error_code, "error": ex.error, "errors": sorted(ex.errors),
        "throttle_ms": ex.throttle_ms, "group": ex.group, "member_id": ex.member_id, "generation": ex.generation,
        "topics": _topics(ex), "partitions": len(ex.partitions), "records": sum(p.records for p in ex.partitions),
        "database": ex.database, "collection": ex.collection,
        "expected_wait_ms": details.get("expected_wait_ms"), "unanswered_by": details.get("unanswered_by"),
        "warning": ex.warning,
    }


def commit_rows(ex: Exchange) -> list[dict[str, Any]]:
    """The ``offset_commits`` rows of an OffsetCommit / TxnOffsetCommit exchange (else none)."""
    if ex.protocol != "kafka" or ex.api not in COMMIT_APIS or ex.request_frame is None:
        return []
    base = {
        "capture": ex.capture, "conn": ex.conn, "client": ex.client, "client_id": ex.client_id, "api": ex.api,
        "api_version": ex.api_version, "request_frame": ex.request_frame, "response_frame": ex.response_frame,
        "ts_ns": ex.request_ts_ns, "group": ex.group, "member_id": ex.member_id, "generation": ex.generation,
        "status": ex.status,
    }
    rows = []
    for p in ex.partitions:
        row = dict(base)
        row.update(topic=p.topic, partition=p.partition, offset=p.offset, error_code=p.error_code,
                   error=_error_name(p.error_code))
        rows.append(row)
    return rows


def group_event_row(ex: Exchange) -> dict[str, Any] | None:
    """The ``group_events`` row of a JoinGroup / SyncGroup / Heartbeat / LeaveGroup exchange (else None).

    ``assignment`` ('topic:partition' strings, sorted by topic then partition) is the member's
    assignment from a SyncGroup response, when the group uses the consumer protocol.
    """
    if ex.protocol != "kafka" or ex.api not in GROUP_APIS:
        return None
    d = ex.details
    assignment = d.get("assignment")
    return {
        "capture": ex.capture, "conn": ex.conn, "client": ex.client, "client_id": ex.client_id, "api": ex.api,
        "api_version": ex.api_version, "request_frame": ex.request_frame, "response_frame": ex.response_frame,
        "ts_ns": ex.ts_ns, "group": ex.group, "member_id": ex.member_id, "generation": ex.generation,
        "error_code": ex.error_code, "error": ex.error, "status": ex.status,
        "protocol_name": d.get("protocol_name"), "leader": d.get("leader"),
        "assignment": None if assignment is None else [f"{t}:{p}" for t, p in sorted(assignment)],
    }


def connection_row(capture: str, conn, protocol: str, exchanges: int) -> dict[str, Any]:
    """The ``connections`` row of a ``tcp.Connection`` once it ended (or the capture did)."""
    up, down = conn.directions
    ends = [d.ended for d in conn.directions if d.ended]
    return {
        "capture": capture, "conn": conn.id, "client": conn.client, "server": conn.server, "protocol": protocol,
        "roles": conn.roles, "first_frame": conn.first_frame, "first_ts_ns": conn.first_ts,
        "last_frame": conn.last_frame, "last_ts_ns": conn.last_ts, "bytes_to_server": up.bytes,
        "bytes_to_client": down.bytes, "gaps": up.gaps + down.gaps, "gap_bytes": up.gap_bytes + down.gap_bytes,
        "exchanges": exchanges, "end": ",".join(sorted(set(ends))) or None,
    }


def _error_name(code: int) -> str | None:
    if not code:
        return None
    from kwire.protocol import error_name  # the codec's error table; imported late to keep this module light

    return error_name(code)
