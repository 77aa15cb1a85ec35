"""``--json``: ``exchange_json`` turns an exchange, with its kept messages, into JSON values."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from ..exchange import Exchange
from ..tables import exchange_row
from .commands import _SEQUENCE_FIELDS

try:
    from bson import Binary, Code, DatetimeMS, DBRef, Decimal128, MaxKey, MinKey, ObjectId, Regex, Timestamp
except ImportError:  # pymongo is optional (see ``message``): there are no exchanges to write without it
    pass


def exchange_json(ex: Exchange, record_values: bool) -> dict[str, Any]:
    """The --json record of an exchange: its ``exchanges`` row, its details, and the request and
    response messages (null unless kept) as JSON values.  Without ``record_values`` the documents a
    message carries as data (inserted, updated, returned) are replaced by their count."""
    row = exchange_row(ex)
    row["details"] = _jsonable(ex.details)
    row["request"] = None if ex.request is None else _message_json(ex.request, record_values)
    row["response"] = None if ex.response is None else _message_json(ex.response, record_values)
    return row


def _message_json(message: dict, record_values: bool) -> Any:
    out = _jsonable(message)
    if not record_values and isinstance(out, dict):
        _hide_values(out)
    return out


def _hidden(value) -> Any:
    return {"documents_hidden": len(value)} if isinstance(value, list) else value


def _is_command_reply(doc) -> bool:
    return isinstance(doc, dict) and ("ok" in doc or "$err" in doc)


def _hide_values(message: dict) -> None:
    """Replace the documents a message carries as data by their count, in place: write batches
    (kind 1 sequences, inline arrays, legacy inserts and updates) and returned batches (cursor
    batches, legacy query results).  Commands and replies themselves stay."""
    sequences = message.get("sequences")
    if isinstance(sequences, dict):
        for key, value in sequences.items():
            sequences[key] = _hidden(value)
    if "update" in message:  # OP_UPDATE's new contents
        message["update"] = {"documents_hidden": 1}
    commands = [message.get("body")]
    documents = message.get("documents")
    if isinstance(documents, list):
        if any(_is_command_reply(d) for d in documents):  # a command's reply over OP_REPLY / OP_COMMANDREPLY
            commands += documents
        else:  # inserted documents, or a legacy query's results
            message["documents"] = _hidden(documents)
    for command in commands:
        if not isinstance(command, dict):
            continue
        for key in _SEQUENCE_FIELDS:
            if key in command:
                command[key] = _hidden(command[key])
        cursor = command.get("cursor")
        if isinstance(cursor, dict):
            for key in ("firstBatch", "nextBatch"):
                if key in cursor:
                    cursor[key] = _hidden(cursor[key])


_MAX_JSON_DEPTH = 100


def _jsonable(value, depth: int = 0) -> Any:
    """BSON values as JSON values: ids, decimals and UUIDs as text, dates in ISO 8601, binary as hex."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return int(value)  # Int64 too
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if depth >= _MAX_JSON_DEPTH:
        return "..."
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Binary):
        if value.subtype == 4 and len(value) == 16:
            return str(uuid.UUID(bytes=bytes(value)))
        return bytes(value).hex()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (ObjectId, Decimal128, uuid.UUID, Code)):
        return str(value)
    if isinstance(value, Timestamp):
        return {"t": value.time, "i": value.inc}
    if isinstance(value, DatetimeMS):  # a date outside Python's range: milliseconds since the epoch
        return {"date_ms": int(value)}
    if isinstance(value, (Regex, re.Pattern)):
        return {"regex": str(value.pattern), "flags": int(value.flags)}
    if isinstance(value, DBRef):
        return {"$ref": value.collection, "$id": _jsonable(value.id, depth + 1)}
    if isinstance(value, (MinKey, MaxKey)):
        return type(value).__name__
    return str(value)
