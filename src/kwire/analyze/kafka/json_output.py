"""``--json``: ``exchange_json`` turns an exchange (with its kept messages) into the ``--json`` object."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from kwire.protocol import Message, ProtocolError
from kwire.protocol.records import iter_batches

from ..exchange import Exchange
from ..tables import exchange_row
from .records import _CODEC_NAMES, _summarize_records

_SECRET_FIELDS = frozenset(("auth_bytes",))  # SaslAuthenticate: PLAIN sends the password in clear


def exchange_json(ex: Exchange, record_values: bool) -> dict[str, Any]:
    """The ``--json`` object of an exchange: its ``exchanges`` row, its details, and the request and
    response as JSON values (null unless the flow kept messages, ``FlowContext.keep_messages``).

    Bytes become hex, record batches a summary per batch (with ``record_values``, every record's
    key, value, headers, offset and timestamp too).  SASL credentials are never written.
    """
    row = exchange_row(ex)
    row["details"] = _json_value(ex.details, record_values)
    row["request"] = _json_message(ex.request, record_values)
    row["response"] = _json_message(ex.response, record_values)
    return row


def _json_message(message, record_values: bool):
    if message is None:
        return None
    if isinstance(message, Message):
        return _json_value(message.to_dict(), record_values)
    return _json_value(message, record_values)


def _json_value(value, record_values: bool):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "records" and isinstance(v, (bytes, bytearray, memoryview)):
                out[k] = _json_batches(v, record_values)
            elif k in _SECRET_FIELDS and isinstance(v, (bytes, bytearray, memoryview)):
                out[k] = f"<{len(v)} bytes not shown>"
            else:
                out[str(k)] = _json_value(v, record_values)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_value(v, record_values) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, UUID):
        return str(value)
    return value


def _json_batches(data, record_values: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    start = 0
    try:
        for batch in iter_batches(data):
            size = batch.size_in_bytes
            codec = batch.attributes & 7
            records = batch.records()
            _n, raw, _mask, error = _summarize_records(data[start:start + size])
            start += size
            item: dict[str, Any] = {
                "magic": batch.magic, "base_offset": batch.base_offset, "records": len(records),
                "codec": _CODEC_NAMES[codec] if codec < len(_CODEC_NAMES) else str(codec), "bytes": size,
                "uncompressed_bytes": raw, "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
                "base_sequence": batch.base_sequence, "transactional": batch.is_transactional,
                "control": batch.is_control,
            }
            if record_values:
                item["values"] = [{"offset": r.offset, "timestamp": r.timestamp, "key": _text_or_hex(r.key),
                                   "value": _text_or_hex(r.value),
                                   "headers": [[k, _text_or_hex(v)] for k, v in r.headers]} for r in records]
            out.append(item)
    except ProtocolError as e:
        out.append({"error": str(e)})
    return out


def _text_or_hex(value):
    if value is None:
        return None
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return bytes(value).hex()
