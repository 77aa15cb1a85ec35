"""Decoders of the legacy opcodes: OP_QUERY and OP_REPLY, OP_GET_MORE, OP_INSERT, OP_UPDATE,
OP_DELETE, OP_KILL_CURSORS, OP_COMMAND and OP_COMMANDREPLY."""

from __future__ import annotations

from .message import Message, _count, _Malformed, _Reader
from .wire import _REPLY_FIELDS


def _decode_op_query(data: bytes, msg: Message, keep: bool) -> None:
    r = _Reader(data, 16, len(data))
    msg.flags = r.int32("flags")
    msg.namespace = r.cstring("fullCollectionName")
    msg.fields["skip"] = r.int32("numberToSkip")
    msg.fields["return"] = r.int32("numberToReturn")
    msg.body = r.document("query")
    if r.pos < r.end and keep:
        msg.parts["projection"] = r.document("returnFieldsSelector")


def _decode_op_reply(data: bytes, msg: Message, keep: bool) -> None:
    if len(data) < 36:
        raise _Malformed("OP_REPLY shorter than its fixed fields")
    msg.flags, cursor_id, starting_from, returned = _REPLY_FIELDS.unpack_from(data, 16)
    msg.fields.update(cursor_id=cursor_id, starting_from=starting_from, number_returned=returned)
    r = _Reader(data, 36, len(data))
    if r.pos < r.end:  # the first document is the command reply or the error ($err): always read
        first = r.document("OP_REPLY document")
        rest = r.documents("OP_REPLY document", keep)
        msg.body = first
        msg.documents = [first, *rest] if keep else 1 + rest
    else:
        msg.documents = [] if keep else 0
    if _count(msg.documents) != returned:
        msg.problems.append(("undecodable", f"OP_REPLY numberReturned is {returned} but it holds "
                                            f"{_count(msg.documents)} documents"))


def _decode_op_get_more(data: bytes, msg: Message, keep: bool) -> None:
    r = _Reader(data, 16, len(data))
    r.int32("ZERO")
    msg.namespace = r.cstring("fullCollectionName")
    msg.fields["return"] = r.int32("numberToReturn")
    msg.fields["cursor_id"] = r.int64("cursorID")


def _decode_op_insert(data: bytes, msg: Message, keep: bool) -> None:
    r = _Reader(data, 16, len(data))
    msg.flags = r.int32("flags")
    msg.namespace = r.cstring("fullCollectionName")
    msg.documents = r.documents("OP_INSERT document", keep)


def _decode_op_update(data: bytes, msg: Message, keep: bool) -> None:
    r = _Reader(data, 16, len(data))
    r.int32("ZERO")
    msg.namespace = r.cstring("fullCollectionName")
    msg.flags = r.int32("flags")
    selector = r.document("selector")
    update = r.document("update")
    if keep:
        msg.parts.update(selector=selector, update=update)


def _decode_op_delete(data: bytes, msg: Message, keep: bool) -> None:
    r = _Reader(data, 16, len(data))
    r.int32("ZERO")
    msg.namespace = r.cstring("fullCollectionName")
    msg.flags = r.int32("flags")
    selector = r.document("selector")
    if keep:
        msg.parts["selector"] = selector


def _decode_op_kill_cursors(data: bytes, msg: Message, keep: bool) -> None:
    r = _Reader(data, 16, len(data))
    r.int32("ZERO")
    count = r.int32("numberOfCursorIDs")
    if count < 0 or count * 8 != r.end - r.pos:
        raise _Malformed(f"numberOfCursorIDs {count} does not match the {r.end - r.pos} bytes that follow")
    msg.fields["cursors"] = count


def _decode_op_command(data: bytes, msg: Message, keep: bool) -> None:
    r = _Reader(data, 16, len(data))
    msg.namespace = r.cstring("database")
    msg.command_name = r.cstring("commandName")
    msg.documents = r.documents("OP_COMMAND document", keep)


def _decode_op_command_reply(data: bytes, msg: Message, keep: bool) -> None:
    # Its documents (metadata, command reply, output documents) are few: all are read, and the one
    # with 'ok' is the reply.
    docs = _Reader(data, 16, len(data)).documents("OP_COMMANDREPLY document", True)
    msg.body = next((d for d in docs if "ok" in d), None)
    msg.documents = docs if keep else len(docs)
