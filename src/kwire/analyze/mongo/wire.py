"""The numbers of MongoDB's wire protocol: opcodes, flag bits, header and field layouts, limits;
and ``looks_like_mongo_message``, which recognises a request header in a client's first bytes."""

from __future__ import annotations

import struct

OP_REPLY = 1
OP_UPDATE = 2001
OP_INSERT = 2002
OP_QUERY = 2004
OP_GET_MORE = 2005
OP_DELETE = 2006
OP_KILL_CURSORS = 2007
OP_COMMAND = 2010
OP_COMMANDREPLY = 2011
OP_COMPRESSED = 2012
OP_MSG = 2013

OPCODE_NAMES = {
    OP_REPLY: "OP_REPLY", OP_UPDATE: "OP_UPDATE", OP_INSERT: "OP_INSERT", OP_QUERY: "OP_QUERY",
    OP_GET_MORE: "OP_GET_MORE", OP_DELETE: "OP_DELETE", OP_KILL_CURSORS: "OP_KILL_CURSORS",
    OP_COMMAND: "OP_COMMAND", OP_COMMANDREPLY: "OP_COMMANDREPLY", OP_COMPRESSED: "OP_COMPRESSED", OP_MSG: "OP_MSG",
}
_CLIENT_OPCODES = frozenset((OP_UPDATE, OP_INSERT, OP_QUERY, OP_GET_MORE, OP_DELETE, OP_KILL_CURSORS, OP_COMMAND,
                             OP_COMPRESSED, OP_MSG))
_SERVER_OPCODES = frozenset((OP_REPLY, OP_COMMANDREPLY, OP_COMPRESSED, OP_MSG))
_NO_REPLY_OPCODES = frozenset((OP_UPDATE, OP_INSERT, OP_DELETE, OP_KILL_CURSORS))  # legacy fire-and-forget

COMPRESSORS = {0: "noop", 1: "snappy", 2: "zlib", 3: "zstd"}  #: OP_COMPRESSED compressorId

#: Largest messageLength taken for real: MongoDB's maxMessageSizeBytes is 48,000,000.
MAX_MESSAGE_SIZE = 48 * 1024 * 1024

# OP_MSG flagBits.  Bits 0-15 are "required": a receiver must understand them or fail.
_CHECKSUM_PRESENT = 1
_MORE_TO_COME = 2
_EXHAUST_ALLOWED = 1 << 16
_KNOWN_FLAGS = _CHECKSUM_PRESENT | _MORE_TO_COME | _EXHAUST_ALLOWED
# OP_QUERY flags
_QUERY_TAILABLE = 1 << 1
_QUERY_AWAIT_DATA = 1 << 5
_QUERY_EXHAUST = 1 << 6
# OP_REPLY responseFlags
_REPLY_CURSOR_NOT_FOUND = 1
_REPLY_QUERY_FAILURE = 2

_HEADER = struct.Struct("<iiii")  # messageLength, requestID, responseTo, opCode
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")
_COMPRESSED_FIELDS = struct.Struct("<iiB")  # originalOpcode, uncompressedSize, compressorId
_REPLY_FIELDS = struct.Struct("<iqii")  # responseFlags, cursorID, startingFrom, numberReturned
_SENDER = ("client", "server")  # who writes the TO_SERVER / TO_CLIENT stream


def looks_like_mongo_message(data: bytes) -> bool:
    """Whether the first bytes a client sent start a MongoDB request: a sane messageLength
    (16 bytes to 48 MiB), responseTo 0 and an opcode clients send."""
    if len(data) < 16:
        return False
    length, _request_id, response_to, opcode = _HEADER.unpack_from(data)
    return 16 <= length <= MAX_MESSAGE_SIZE and response_to == 0 and opcode in _CLIENT_OPCODES
