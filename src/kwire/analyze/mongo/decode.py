"""Decoding one message: ``decode_message`` reads the header, unpacks OP_COMPRESSED and hands the
body to its opcode's decoder (OP_MSG, with its sections and CRC-32C checksum, here; the legacy
opcodes in ``legacy``); ``_kept`` is a message as an exchange keeps it."""

from __future__ import annotations

from typing import Any

import crc32c

from .compression import _uncompress
from .legacy import (
    _decode_op_command,
    _decode_op_command_reply,
    _decode_op_delete,
    _decode_op_get_more,
    _decode_op_insert,
    _decode_op_kill_cursors,
    _decode_op_query,
    _decode_op_reply,
    _decode_op_update,
)
from .message import Message, _Malformed, _Reader
from .wire import (
    _CHECKSUM_PRESENT,
    _HEADER,
    _KNOWN_FLAGS,
    _UINT32,
    MAX_MESSAGE_SIZE,
    OP_COMMAND,
    OP_COMMANDREPLY,
    OP_COMPRESSED,
    OP_DELETE,
    OP_GET_MORE,
    OP_INSERT,
    OP_KILL_CURSORS,
    OP_MSG,
    OP_QUERY,
    OP_REPLY,
    OP_UPDATE,
    OPCODE_NAMES,
)


def decode_message(raw: bytes, *, keep_documents: bool = False, max_size: int = MAX_MESSAGE_SIZE) -> Message:
    """One whole message, its size prefix included.  Never raises: a body that does not decode
    leaves the reason in ``error``, oddities that did not stop decoding are in ``problems``.

    ``max_size`` bounds what OP_COMPRESSED may unpack to (its uncompressedSize is checked before
    anything is allocated).
    """
    data = bytes(raw)
    if len(data) < 16:
        return Message(len(data), 0, 0, 0, error=f"{len(data)} bytes, shorter than a message header")
    length, request_id, response_to, opcode = _HEADER.unpack_from(data)
    msg = Message(length, request_id, response_to, opcode)
    try:
        if opcode == OP_COMPRESSED:
            data = _uncompress(data, msg, max_size)
        decoder = _BODY_DECODERS.get(msg.opcode)
        if decoder is None:
            raise _Malformed(f"unknown opcode {msg.opcode}")
        decoder(data, msg, keep_documents)
    except _Malformed as e:
        msg.error = str(e)
    except Exception as e:  # bson raises several types on corrupt input (InvalidBSON, ValueError...)
        msg.error = f"{type(e).__name__}: {e}"
    return msg


def _decode_op_msg(data: bytes, msg: Message, keep: bool) -> None:
    r = _Reader(data, 16, len(data))
    flags = msg.flags = r.uint32("flagBits")
    unknown_required = flags & 0xFFFF & ~_KNOWN_FLAGS
    if unknown_required:
        msg.problems.append(("flags", f"OP_MSG sets unknown required flag bits 0x{unknown_required:04x}"))
    if flags & _CHECKSUM_PRESENT:
        if len(data) < 16 + 4 + 4:
            raise _Malformed("checksumPresent but no room for a checksum")
        r.end -= 4
        expected = _UINT32.unpack_from(data, r.end)[0]
        actual = crc32c.crc32c(data[:r.end])
        msg.checksum = "valid" if actual == expected else "mismatch"
        if actual != expected:
            msg.problems.append(("checksum", f"OP_MSG CRC-32C is 0x{expected:08x}, the message's is 0x{actual:08x}"))
    while r.pos < r.end:
        kind = r.uint8("section kind")
        if kind == 0:
            body = r.document("body section")
            if msg.body is None:
                msg.body = body
            else:
                msg.problems.append(("undecodable", "OP_MSG has more than one body section (kind 0)"))
        elif kind == 1:
            start = r.pos
            size = r.int32("document sequence size")
            end = start + size
            if size < 5 or end > r.end:
                raise _Malformed(f"document sequence of impossible size {size} (byte {start})")
            identifier = r.cstring("document sequence identifier", end)
            msg.sequences[identifier] = r.documents(f"document sequence {identifier!r}", keep, end)
        else:
            raise _Malformed(f"unknown OP_MSG section kind {kind}")
    if msg.body is None:
        raise _Malformed("OP_MSG without a body section (kind 0)")


_BODY_DECODERS = {
    OP_MSG: _decode_op_msg, OP_QUERY: _decode_op_query, OP_REPLY: _decode_op_reply,
    OP_GET_MORE: _decode_op_get_more, OP_INSERT: _decode_op_insert, OP_UPDATE: _decode_op_update,
    OP_DELETE: _decode_op_delete, OP_KILL_CURSORS: _decode_op_kill_cursors, OP_COMMAND: _decode_op_command,
    OP_COMMANDREPLY: _decode_op_command_reply,
}


def _kept(msg: Message) -> dict[str, Any]:
    """The message as kept on an exchange (``ctx.keep_messages``): its fields, then its documents."""
    out: dict[str, Any] = {"opcode": OPCODE_NAMES.get(msg.opcode, msg.opcode), "request_id": msg.request_id,
                           "response_to": msg.response_to, "length": msg.length}
    for key in ("compressor", "namespace", "command_name", "checksum", "error"):
        value = getattr(msg, key)
        if value is not None:
            out[key] = value
    out["flags"] = msg.flags
    out.update(msg.fields)
    if msg.body is not None and msg.opcode not in (OP_REPLY, OP_COMMANDREPLY):  # those are in documents
        out["body"] = msg.body
    if msg.sequences:
        out["sequences"] = msg.sequences
    out.update(msg.parts)
    if msg.documents is not None:
        out["documents"] = msg.documents
    return out
