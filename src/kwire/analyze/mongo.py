"""MongoDB's wire protocol in captured traffic: one connection's stream events in, exchanges out.

``MongoFlow(conn, ctx)`` is the MongoDB layer of ``kwire analyze`` (an ``exchange.Flow``).  It
frames each direction with the project's ``FrameSplitter`` (little-endian messageLength that
counts itself), decodes the messages (``decode_message``: OP_MSG with its sections and CRC-32C
checksum, OP_COMPRESSED with snappy / zlib / zstd, legacy OP_QUERY and OP_REPLY, the other
legacy opcodes by name and namespace), pairs replies with requests by requestID / responseTo and
turns each pair into an ``Exchange``.  BSON is read with pymongo's ``bson``.

Pairing follows the protocol's turn-taking:

* a request with moreToCome gets no reply: ``NO_RESPONSE_EXPECTED`` at once (so do the legacy
  OP_INSERT, OP_UPDATE, OP_DELETE and OP_KILL_CURSORS);
* a reply with moreToCome (exhaust cursor, streaming hello) is followed by more replies, each
  naming the reply before it in responseTo.  Each becomes an exchange of its own, with the
  request's api, requestID and namespace, but timed from the reply before it (that is when the
  server started on it): its ``request_frame`` / ``request_ts_ns`` are that reply's,
  ``request_bytes`` is 0 (nothing was sent for it), and ``details['exhaust_reply']`` counts it;
* a server answers the requests of one connection one at a time, in order: when a reply names a
  later request, the earlier ones were never answered (``details['unanswered_by'] = 'skipped'``);
* a reply naming no request the capture holds is an ``ORPHAN_RESPONSE``.

``Exchange.details`` keys, each present only when it applies: from the request 'compressor',
'checksum' ('valid' / 'mismatch'), 'exhaust_allowed', 'documents' / 'updates' / 'deletes' (batch
sizes), 'cursor_id', 'expected_wait_ms' (maxAwaitTimeMS of a streaming hello, maxTimeMS of an
awaitData getMore), 'skip' / 'return' (legacy query), 'command' (OP_COMMAND), 'cursors'
(OP_KILL_CURSORS); from the reply 'response_id' (its requestID), 'response_opcode',
'response_compressor', 'response_checksum', 'n', 'nModified', 'nReturned', 'cursor_id' (when the
request named none), 'errmsg'; and 'exhaust_reply', 'first_request_frame', 'unanswered_by'.

Damaged streams: at a ``Gap`` the message under way is dropped.  If its header was seen, it says
where the next message starts, and what the message was: a request lost that way still waits for
its reply (the pair is ``UNDECODABLE``), a lost reply still answers its request.  Otherwise the
direction scans for a plausible header (sane length, an opcode that direction sends, for a
request responseTo 0, for a reply a responseTo naming a request in flight), bounded to a few
bytes of look-behind.  A length no MongoDB message can have is a 'forged_length' warning and is
scanned past the same way.  A direction whose start the capture missed starts by scanning.
Memory is bounded: per direction one partial message (at most the maximum message size) and the
scan window; per connection bounded tables of requests in flight.
"""

from __future__ import annotations

import re
import struct
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import cramjam
import crc32c
import zstandard

from kwire.protocol.errors import DecodeError
from kwire.protocol.framing import FrameSplitter

from .exchange import (
    ANSWERED,
    NO_RESPONSE_EXPECTED,
    ORPHAN_RESPONSE,
    UNANSWERED,
    UNDECODABLE,
    Exchange,
    FlowContext,
)
from .tables import exchange_row
from .tcp import TO_CLIENT, TO_SERVER, Chunk, Connection, End, Gap

try:
    import bson
    from bson import Binary, Code, DatetimeMS, DBRef, Decimal128, MaxKey, MinKey, ObjectId, Regex, Timestamp
    from bson.codec_options import CodecOptions, DatetimeConversion
except ImportError:  # pymongo is optional: sniffing works without it, MongoFlow says what is missing
    bson = None

__all__ = [
    "COMPRESSORS",
    "ERROR_NAMES",
    "MAX_MESSAGE_SIZE",
    "OPCODE_NAMES",
    "Message",
    "MongoFlow",
    "decode_message",
    "exchange_json",
    "looks_like_mongo_message",
]

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

# A tailable awaitData cursor's getMore without maxTimeMS waits up to the server's default of 1 s.
_DEFAULT_AWAIT_MS = 1000

_HEADER = struct.Struct("<iiii")  # messageLength, requestID, responseTo, opCode
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")
_COMPRESSED_FIELDS = struct.Struct("<iiB")  # originalOpcode, uncompressedSize, compressorId
_REPLY_FIELDS = struct.Struct("<iqii")  # responseFlags, cursorID, startingFrom, numberReturned
_HEAD_KEPT = 20  # bytes kept of the message under way: the header and OP_MSG's flagBits
_MAX_WAITING = 4096  # requests in flight per connection (MongoDB answers one at a time; this is garbage's bound)
_MAX_AWAIT_CURSORS = 1024
_SENDER = ("client", "server")  # who writes the TO_SERVER / TO_CLIENT stream
_EMPTY = memoryview(b"")

#: MongoDB's names of the error codes commonly met on the wire (from the server's error_codes.yml),
#: for replies that give a code without its codeName (writeErrors, servers before 3.4).
ERROR_NAMES = {
    1: "InternalError", 2: "BadValue", 4: "NoSuchKey", 6: "HostUnreachable", 7: "HostNotFound", 8: "UnknownError",
    9: "FailedToParse", 11: "UserNotFound", 13: "Unauthorized", 14: "TypeMismatch", 15: "Overflow",
    16: "InvalidLength", 17: "ProtocolError", 18: "AuthenticationFailed", 20: "IllegalOperation",
    22: "InvalidBSON", 24: "LockTimeout", 26: "NamespaceNotFound", 27: "IndexNotFound", 43: "CursorNotFound",
    46: "LockBusy", 48: "NamespaceExists", 50: "MaxTimeMSExpired", 52: "DollarPrefixedFieldName",
    59: "CommandNotFound", 61: "ShardKeyNotFound", 64: "WriteConcernTimeout", 66: "ImmutableField",
    67: "CannotCreateIndex", 68: "IndexAlreadyExists", 72: "InvalidOptions", 73: "InvalidNamespace",
    76: "NoReplicationEnabled", 79: "UnknownReplWriteConcern", 85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict", 89: "NetworkTimeout", 91: "ShutdownInProgress", 96: "OperationFailed",
    100: "UnsatisfiableWriteConcern", 112: "WriteConflict", 115: "CommandNotSupported",
    117: "ConflictingOperationInProgress", 121: "DocumentValidationFailure", 125: "CommandFailed",
    133: "FailedToSatisfyReadPreference", 134: "ReadConcernMajorityNotAvailableYet", 136: "CappedPositionLost",
    146: "ExceededMemoryLimit", 150: "StaleEpoch", 175: "QueryPlanKilled", 189: "PrimarySteppedDown",
    202: "NetworkInterfaceExceededTimeLimit", 206: "NoSuchSession", 211: "KeyNotFound", 225: "TransactionTooOld",
    237: "CursorKilled", 244: "NOT_YET_AVAILABLE_TransactionAborted", 246: "SnapshotUnavailable",
    251: "NoSuchTransaction", 256: "TransactionCommitted", 257: "TransactionTooLarge",
    261: "TooManyLogicalSessions", 262: "ExceededTimeLimit", 263: "OperationNotSupportedInTransaction",
    279: "ClientDisconnect", 292: "QueryExceededMemoryLimitNoDiskUseAllowed", 9001: "SocketException",
    10107: "NotWritablePrimary", 10334: "BSONObjectTooLarge", 11000: "DuplicateKey", 11600: "InterruptedAtShutdown",
    11601: "Interrupted", 11602: "InterruptedDueToReplStateChange", 13388: "StaleConfig",
    13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary", 14031: "OutOfDiskSpace",
}

_HELLO_COMMANDS = frozenset(("hello", "isMaster", "ismaster"))
# Commands whose first value is a string that names something other than a collection.
_NOT_A_COLLECTION = frozenset((
    "getLog", "createUser", "updateUser", "dropUser", "usersInfo", "createRole", "updateRole", "dropRole",
    "rolesInfo", "grantRolesToUser", "revokeRolesFromUser", "grantRolesToRole", "revokeRolesFromRole",
    "grantPrivilegesToRole", "revokePrivilegesFromRole", "setFeatureCompatibilityVersion", "configureFailPoint",
    "getParameter", "setParameter", "saslStart", "authenticate", "explain",
))
_SEQUENCE_FIELDS = ("documents", "updates", "deletes")  # a write command's batch, inline or as a kind 1 section


def looks_like_mongo_message(data: bytes) -> bool:
    """Whether the first bytes a client sent start a MongoDB request: a sane messageLength
    (16 bytes to 48 MiB), responseTo 0 and an opcode clients send."""
    if len(data) < 16:
        return False
    length, _request_id, response_to, opcode = _HEADER.unpack_from(data)
    return 16 <= length <= MAX_MESSAGE_SIZE and response_to == 0 and opcode in _CLIENT_OPCODES


# -- one message -------------------------------------------------------------------------------

@dataclass(slots=True, eq=False)
class Message:
    """One decoded message.  Documents are dicts; a batch of documents is a list of them when kept
    (``keep_documents``), else only its count."""

    length: int  #: messageLength on the wire (the OP_COMPRESSED wrapper's, when compressed)
    request_id: int
    response_to: int
    opcode: int  #: inside OP_COMPRESSED, the original opcode
    compressor: str | None = None  #: 'noop', 'snappy', 'zlib', 'zstd' when it came in OP_COMPRESSED
    flags: int = 0  #: OP_MSG flagBits, OP_QUERY / OP_INSERT / OP_UPDATE / OP_DELETE flags, OP_REPLY responseFlags
    body: dict | None = None  #: OP_MSG body, OP_QUERY query, OP_REPLY first document, OP_COMMANDREPLY reply
    sequences: dict[str, Any] = field(default_factory=dict)  #: OP_MSG kind 1: identifier -> documents
    namespace: str | None = None  #: legacy fullCollectionName; OP_COMMAND's database
    command_name: str | None = None  #: OP_COMMAND
    documents: Any = None  #: legacy batches: OP_INSERT, OP_REPLY, OP_COMMAND / OP_COMMANDREPLY documents
    parts: dict[str, Any] = field(default_factory=dict)  #: other legacy documents (selector, update, projection)
    fields: dict[str, int] = field(default_factory=dict)  #: the layout's numbers (skip, cursor_id, ...)
    checksum: str | None = None  #: 'valid' / 'mismatch' when the message carries a CRC-32C
    problems: list[tuple[str, str]] = field(default_factory=list)  #: (warning kind, text): decoding went on
    error: str | None = None  #: why the body did not decode (the header still holds)


class _Malformed(Exception):
    """The message's layout does not hold together."""


class _Reader:
    """Reads a message's fields in order, within ``end``; layout errors raise ``_Malformed``."""

    __slots__ = ("data", "view", "pos", "end")

    def __init__(self, data: bytes, pos: int, end: int):
        self.data = data
        self.view = memoryview(data)
        self.pos = pos
        self.end = end

    def _take(self, size: int, what: str) -> int:
        pos = self.pos
        if self.end - pos < size:
            raise _Malformed(f"{what} runs past the end of the message (byte {pos})")
        self.pos = pos + size
        return pos

    def int32(self, what: str) -> int:
        return _INT32.unpack_from(self.data, self._take(4, what))[0]

    def uint32(self, what: str) -> int:
        return _UINT32.unpack_from(self.data, self._take(4, what))[0]

    def int64(self, what: str) -> int:
        return struct.unpack_from("<q", self.data, self._take(8, what))[0]

    def uint8(self, what: str) -> int:
        return self.data[self._take(1, what)]

    def cstring(self, what: str, end: int | None = None) -> str:
        stop = self.data.find(b"\x00", self.pos, self.end if end is None else end)
        if stop < 0:
            raise _Malformed(f"{what} has no terminating NUL")
        text = self.data[self.pos:stop].decode("utf-8", "replace")
        self.pos = stop + 1
        return text

    def document(self, what: str) -> dict:
        return _decode_document(self.view[self._document_span(what)])

    def _document_span(self, what: str) -> slice:
        pos = self.pos
        if self.end - pos < 5:
            raise _Malformed(f"{what} runs past the end of the message (byte {pos})")
        size = _INT32.unpack_from(self.data, pos)[0]
        if size < 5 or size > self.end - pos:
            raise _Malformed(f"{what} has an impossible length {size} (byte {pos})")
        self.pos = pos + size
        return slice(pos, pos + size)

    def documents(self, what: str, keep: bool, end: int | None = None) -> list | int:
        """The documents from here to ``end``: decoded when kept, else counted (walking their lengths)."""
        saved = self.end
        if end is not None:
            self.end = end
        out: list = []
        count = 0
        try:
            while self.pos < self.end:
                span = self._document_span(what)
                if keep:
                    out.append(_decode_document(self.view[span]))
                count += 1
        finally:
            self.end = saved
        return out if keep else count


if bson is not None:
    # Never fail a whole document over one bad string or an out-of-range date: replace and go on.
    _CODEC = CodecOptions(tz_aware=True, unicode_decode_error_handler="replace",
                          datetime_conversion=DatetimeConversion.DATETIME_AUTO)


def _decode_document(buf) -> dict:
    return bson.decode(buf, codec_options=_CODEC)


def _count(documents: list | int | None) -> int:
    if documents is None:
        return 0
    return documents if isinstance(documents, int) else len(documents)


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


def _uncompress(data: bytes, msg: Message, max_size: int) -> bytes:
    """The original message inside an OP_COMPRESSED: its header rebuilt, its body unpacked."""
    if len(data) < 25:
        raise _Malformed("OP_COMPRESSED shorter than its fixed fields")
    original, size, compressor_id = _COMPRESSED_FIELDS.unpack_from(data, 16)
    msg.opcode = original
    msg.compressor = COMPRESSORS.get(compressor_id, f"unknown ({compressor_id})")
    if original == OP_COMPRESSED:
        raise _Malformed("OP_COMPRESSED inside OP_COMPRESSED")
    if compressor_id not in COMPRESSORS:
        raise _Malformed(f"unknown compressorId {compressor_id}")
    if not 0 <= size <= max_size - 16:
        raise _Malformed(f"uncompressedSize {size} is out of bounds (0..{max_size - 16})")
    payload = memoryview(data)[25:]
    try:
        body = _UNCOMPRESS[compressor_id](payload, size)
    except _Malformed:
        raise
    except Exception as e:  # each codec has its own error type
        raise _Malformed(f"{msg.compressor} data does not decompress: {e}") from e
    if len(body) > size:
        raise _Malformed(f"{msg.compressor} data unpacks to more than uncompressedSize {size}")
    if len(body) < size:
        msg.problems.append(("compression", f"{msg.compressor} data unpacks to {len(body)} bytes, "
                                            f"uncompressedSize says {size}"))
    return _HEADER.pack(16 + len(body), msg.request_id, msg.response_to, original) + body


def _snappy_declared_size(payload) -> int:
    """A raw snappy block starts with its uncompressed length as a varint."""
    result = shift = 0
    for byte in bytes(payload[:5]):
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
    raise _Malformed("snappy block has no valid length")


def _unsnappy(payload, size: int) -> bytes:
    declared = _snappy_declared_size(payload)
    if declared > size:  # checked first: the decoder allocates what the block declares
        raise _Malformed(f"snappy block declares {declared} bytes, more than uncompressedSize {size}")
    return bytes(cramjam.snappy.decompress_raw(bytes(payload)))


def _unzlib(payload, size: int) -> bytes:
    return zlib.decompressobj().decompress(payload, size + 1)  # one byte more tells an overrun


def _unzstd(payload, size: int) -> bytes:
    # A forged frame header must not make the decoder set aside a huge window: allow what a
    # one-shot compression of ``size`` bytes uses, and at least a streaming compressor's default.
    window = max(1 << 23, 1 << max(size - 1, 1).bit_length())
    reader = zstandard.ZstdDecompressor(max_window_size=window).stream_reader(bytes(payload))
    parts = []
    total = 0
    while total <= size:
        part = reader.read(size + 1 - total)
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


_UNCOMPRESS = {0: lambda payload, size: bytes(payload[:size + 1]), 1: _unsnappy, 2: _unzlib, 3: _unzstd}


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


# -- replies: errors and facts -----------------------------------------------------------------

def _error_name(code, code_name, message) -> str:
    """An error's name: its codeName, else MongoDB's name for its code, else its message."""
    if isinstance(code_name, str) and code_name:
        return code_name
    if isinstance(code, int) and code in ERROR_NAMES:
        return ERROR_NAMES[code]
    if isinstance(message, str) and message:
        return message[:200]
    return f"code {code}" if isinstance(code, int) else "error"


def _failed(ok) -> bool:
    return isinstance(ok, (int, float)) and ok == 0  # ok is 1 / 1.0 / true, or 0 / 0.0 / false


def _int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _reply_facts(ex: Exchange, doc) -> None:
    """Errors and small facts of a command reply document."""
    if not isinstance(doc, dict):
        return
    # (code, name, message) of each error: the command's own first, then each write's, then the
    # write concern's.
    errors: list[tuple[Any, str, Any]] = []
    if _failed(doc.get("ok")) or "$err" in doc:  # '$err': a legacy query failure
        message = doc.get("errmsg", doc.get("$err"))
        errors.append((doc.get("code"), _error_name(doc.get("code"), doc.get("codeName"), message), message))
    write_errors = doc.get("writeErrors")
    if isinstance(write_errors, list):
        for we in write_errors:
            if isinstance(we, dict):
                errors.append((we.get("code"), _error_name(we.get("code"), we.get("codeName"), we.get("errmsg")),
                               we.get("errmsg")))
    wce = doc.get("writeConcernError")
    if isinstance(wce, dict):
        name = _error_name(wce.get("code"), wce.get("codeName"), wce.get("errmsg") or "writeConcernError")
        errors.append((wce.get("code"), name, wce.get("errmsg")))
    if errors:
        code, ex.error, message = errors[0]
        ex.error_code = _int(code) if _int(code) else -1  # -1: an error without a code
        ex.errors.update(name for _code, name, _message in errors)
        if isinstance(message, str):
            ex.details["errmsg"] = message[:500]
    for key in ("n", "nModified"):
        value = _int(doc.get(key))
        if value is not None:
            ex.details[key] = value
    cursor = doc.get("cursor")
    if isinstance(cursor, dict):
        batch = cursor.get("firstBatch", cursor.get("nextBatch"))
        if isinstance(batch, list):
            ex.details["nReturned"] = len(batch)
        cursor_id = _int(cursor.get("id"))
        if cursor_id is not None:  # the new cursor of a find / aggregate (a getMore names its own)
            ex.details.setdefault("cursor_id", cursor_id)


def _app_name(client) -> str | None:
    """The application name in a handshake's client metadata."""
    if isinstance(client, dict):
        app = client.get("application")
        if isinstance(app, dict) and isinstance(app.get("name"), str):
            return app["name"]
    return None


def _split_namespace(namespace: str | None) -> tuple[str | None, str | None]:
    if not namespace:
        return None, None
    db, dot, coll = namespace.partition(".")
    return db, (coll if dot else None)


# -- the flow ----------------------------------------------------------------------------------

@dataclass(slots=True, eq=False)
class _Request:
    """A request waiting for its reply (or replies)."""

    request_id: int
    opcode: int
    api: str
    frame: int | None
    ts_ns: int | None
    size: int
    database: str | None = None
    collection: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    message: Any = None  # kept message (ctx.keep_messages)
    warning: str | None = None
    undecodable: bool = False
    replies_expected: bool = True
    legacy_command: bool = False  # an OP_QUERY on '$cmd': its OP_REPLY holds a command reply
    legacy_exhaust: bool = False  # OP_QUERY with the Exhaust flag: its OP_REPLYs chain without a flag
    opens_await_cursor: bool = False  # find / aggregate of a tailable awaitData cursor
    replies: int = 0
    last_reply_frame: int | None = None
    last_reply_ts: int | None = None
    response_gap: bool = False  # bytes of the reply direction were lost while it waited


class _Side:
    """Framing state of one direction of the connection."""

    __slots__ = ("splitter", "head", "scan", "skipped", "discard", "probation", "started", "ended")

    def __init__(self):
        self.splitter: FrameSplitter | None = None  # None: scanning for a message header
        self.head = b""  # the first bytes (up to _HEAD_KEPT) of the message under way
        self.scan = bytearray()  # the scan window (while scanning)
        self.skipped = 0  # bytes scanned past since the stream was lost
        self.discard = 0  # bytes still to drop: the rest of a message cut by a gap
        self.probation = False  # the next message was found by scanning: if it does not decode, scan on
        self.started = False
        self.ended: str | None = None


def _pattern(opcodes, offset: int, prefix: bytes = b"") -> tuple[re.Pattern, int]:
    """A scan pattern matching a header field at ``offset`` (lookahead: overlapping matches)."""
    alternatives = b"|".join(re.escape(_INT32.pack(op)) for op in sorted(opcodes))
    return re.compile(b"(?=" + re.escape(prefix) + b"(?:" + alternatives + b"))"), offset


# Requests: responseTo 0 then a client opcode (header bytes 8..16).  Replies: a server opcode
# (bytes 12..16); their responseTo is checked against the requests in flight.
_REQUEST_SCAN = _pattern(_CLIENT_OPCODES, 8, b"\x00\x00\x00\x00")
_REPLY_SCAN = _pattern(_SERVER_OPCODES, 12)
# Bytes after the header worth checking before trusting a header found by scanning.
_PROBE_SIZE = {OP_MSG: 26, OP_COMPRESSED: 25, OP_REPLY: 36, OP_QUERY: 20}


class MongoFlow:
    """One MongoDB connection's decoder (see the module docstring)."""

    def __init__(self, conn: Connection, ctx: FlowContext):
        if bson is None:
            raise ImportError("decoding MongoDB traffic needs pymongo (its bson package): pip install pymongo")
        self.conn = conn
        self.ctx = ctx
        self._limit = min(ctx.max_frame_size, MAX_MESSAGE_SIZE)
        self._client = conn.client
        self._server = conn.server
        self._sides = (_Side(), _Side())
        self._waiting: dict[int, _Request] = {}  # requestID -> request waiting for its first reply
        self._chains: dict[int, _Request] = {}  # requestID of a reply with moreToCome -> its request
        self._await_cursors: dict[int, None] = {}  # ids of tailable awaitData cursors, oldest first
        self._app_name: str | None = None
        self._ends: dict[int, str] = {}

    # -- Flow -------------------------------------------------------------------------------

    def feed(self, direction: int, event: Chunk | Gap | End) -> list[Exchange]:
        out: list[Exchange] = []
        kind = type(event)
        try:
            if kind is Chunk:
                self._on_chunk(direction, event, out)
            elif kind is Gap:
                self._on_gap(direction, event, out)
            elif kind is End:
                self._on_end(direction, event)
        except Exception as e:  # a decoder bug must not stop the capture's analysis: drop and rescan
            side = self._sides[direction]
            side.splitter, side.head, side.scan, side.discard, side.probation = None, b"", bytearray(), 0, False
            self._warn(event.frame, "internal", f"MongoDB decoder error on the {_SENDER[direction]} stream "
                                                f"({type(e).__name__}: {e}); scanning for the next message")
        return out

    def close(self) -> list[Exchange]:
        ended = set(self._ends.values())
        by = "connection_end" if ended & {"fin", "rst", "reused"} else "capture_end"
        out = [self._unanswered(req, by) for req in self._waiting.values()]
        self._waiting.clear()
        self._chains.clear()  # an exhaust stream or streaming hello left open: its request was answered
        return out

    # -- framing ----------------------------------------------------------------------------

    def _splitter(self) -> FrameSplitter:
        return FrameSplitter(self.ctx.max_frame_size, byteorder="little", size_includes_prefix=True,
                             keep_prefix=True)

    def _on_chunk(self, d: int, chunk: Chunk, out: list[Exchange]) -> None:
        side = self._sides[d]
        if side.ended:
            return
        if not side.started:
            side.started = True
            if self.conn.directions[d].isn is not None:  # else the capture began mid-stream: scan
                side.splitter = self._splitter()
        data = memoryview(chunk.data)
        if side.discard:
            n = min(side.discard, len(data))
            side.discard -= n
            data = data[n:]
        while len(data):
            if side.splitter is None:
                data = self._scan(d, side, data, chunk.frame)
            else:
                data = self._split(d, side, data, chunk, out)

    def _split(self, d: int, side: _Side, data: memoryview, chunk: Chunk, out: list[Exchange]) -> memoryview:
        """Frame in-sync bytes.  Returns the bytes to scan when the stream turns out to be lost."""
        splitter = side.splitter
        held = splitter.buffered
        if held:
            if held <= len(side.head):  # all of the message under way is in head: start over from it
                data = memoryview(side.head + bytes(data))
                splitter = side.splitter = self._splitter()
            else:  # its size was checked: feed up to its end alone, a bad size after it must not cost it
                rest = _INT32.unpack_from(side.head)[0] - held
                if rest > len(data):
                    splitter.feed(data)
                    return _EMPTY
                (raw,) = splitter.feed(data[:rest])
                side.head = b""
                if not self._message(d, side, raw, chunk, out):
                    return memoryview(raw[1:] + bytes(data[rest:]))
                data = data[rest:]
        # data starts at a message boundary
        try:
            frames = splitter.feed(data)
        except DecodeError:
            return self._bad_size(d, side, data, chunk, out)
        for i, raw in enumerate(frames):
            if not self._message(d, side, raw, chunk, out):
                tail = data[len(data) - splitter.buffered:] if splitter.buffered else b""
                return memoryview(b"".join((raw[1:], *frames[i + 1:], tail)))
        held = splitter.buffered
        side.head = bytes(data[len(data) - held:len(data) - held + _HEAD_KEPT]) if held else b""
        if len(side.head) >= 4:
            length = _INT32.unpack_from(side.head)[0]
            if not self._sane_length(d, length, chunk.frame):
                side.splitter, side.head = None, b""
                return data[len(data) - held + 1:]
        return _EMPTY

    def _sane_length(self, d: int, length: int, frame: int) -> bool:
        if 16 <= length <= self._limit:
            return True
        self._warn(frame, "forged_length", f"{_SENDER[d]} message length {length} is not a MongoDB message "
                                           f"size (16..{self._limit}); scanning for the next message")
        return False

    def _bad_size(self, d: int, side: _Side, data: memoryview, chunk: Chunk, out: list[Exchange]) -> memoryview:
        """The splitter refused a size in ``data`` (which starts at a message boundary).  It does not
        say where; the messages before the bad size are whole and worth keeping, so find the shortest
        prefix of ``data`` a fresh splitter refuses: the bad size is its last four bytes."""
        good, bad = 0, len(data)
        while bad - good > 1:
            mid = (good + bad) // 2
            try:
                self._splitter().feed(data[:mid])
                good = mid
            except DecodeError:
                bad = mid
        at = bad - 4
        frames = self._splitter().feed(data[:at])
        for i, raw in enumerate(frames):
            if not self._message(d, side, raw, chunk, out):
                return memoryview(b"".join((raw[1:], *frames[i + 1:], bytes(data[at:]))))
        self._sane_length(d, _INT32.unpack_from(data, at)[0], chunk.frame)  # warns
        side.splitter, side.head = None, b""
        return data[at + 1:]

    def _scan(self, d: int, side: _Side, data: memoryview, frame: int) -> memoryview:
        """Look for a plausible message header; return the bytes from it on, or nothing (keep looking)."""
        window = side.scan
        window += data
        pos, found = self._find_header(d, window)
        side.skipped += pos
        if not found:
            del window[:pos]
            return _EMPTY
        # On probation until the message decodes: a look-alike header makes scanning go on, and the
        # bytes skipped are reported once, when a real message is found.
        rest = bytes(window[pos:])
        side.scan = bytearray()
        side.splitter, side.head, side.probation = self._splitter(), b"", True
        return memoryview(rest)

    def _find_header(self, d: int, window: bytearray) -> tuple[int, bool]:
        """(position, found): the first plausible header, or where to resume when more bytes come."""
        keep_from = max(0, len(window) - 15)  # a header whose opcode has not fully arrived
        if d == TO_CLIENT and not (self._waiting or self._chains):
            return keep_from, False  # a reply must name a request in flight: there is none
        pattern, offset = _REQUEST_SCAN if d == TO_SERVER else _REPLY_SCAN
        for m in pattern.finditer(window):
            start = m.start() - offset
            if start < 0:
                continue
            verdict = self._plausible(d, window, start)
            if verdict is None:
                return start, False
            if verdict:
                return start, True
        return keep_from, False

    def _plausible(self, d: int, buf: bytearray, i: int) -> bool | None:
        """Whether a message header may start at ``buf[i]``; None until enough bytes tell."""
        avail = len(buf) - i
        if avail < 16:
            return None
        length, _request_id, response_to, opcode = _HEADER.unpack_from(buf, i)
        if not 16 <= length <= self._limit:
            return False
        if d == TO_SERVER:
            if response_to != 0 or opcode not in _CLIENT_OPCODES:
                return False
        elif opcode not in _SERVER_OPCODES or (response_to not in self._waiting and response_to not in self._chains):
            return False
        need = _PROBE_SIZE.get(opcode, 16)
        if length < need:
            return False
        if avail < need:
            return None
        if opcode == OP_MSG:
            flags = _UINT32.unpack_from(buf, i + 16)[0]
            size = _INT32.unpack_from(buf, i + 21)[0]
            return not flags & ~_KNOWN_FLAGS and buf[i + 20] in (0, 1) and 5 <= size <= length - 21
        if opcode == OP_COMPRESSED:
            original, size, compressor_id = _COMPRESSED_FIELDS.unpack_from(buf, i + 16)
            return (original in OPCODE_NAMES and original != OP_COMPRESSED and compressor_id in COMPRESSORS
                    and 0 <= size <= self._limit)
        if opcode == OP_REPLY:
            flags, _cursor, starting_from, returned = _REPLY_FIELDS.unpack_from(buf, i + 16)
            return 0 <= flags < 16 and starting_from >= 0 and returned >= 0
        if opcode == OP_QUERY:
            return not _INT32.unpack_from(buf, i + 16)[0] & ~0xFE
        return True

    def _on_gap(self, d: int, gap: Gap, out: list[Exchange]) -> None:
        side = self._sides[d]
        if side.ended:
            return
        side.started = True
        self._warn(gap.frame, "gap", f"{gap.size} bytes of the {_SENDER[d]} stream were not captured")
        if d == TO_CLIENT:
            for req in (*self._waiting.values(), *self._chains.values()):
                req.response_gap = True
        splitter, head, trusted = side.splitter, side.head, not side.probation
        side.splitter, side.head, side.probation, side.scan = None, b"", False, bytearray()
        if side.discard:  # the gap fell in the rest of a message already dropped
            side.discard = max(0, side.discard - gap.size)
            return
        if splitter is None or not splitter.buffered or len(head) < 16 or not trusted:
            return  # the lost message's header was not seen (or was only a scanning guess): scan
        length, request_id, response_to, opcode = _HEADER.unpack_from(head)
        rest = length - splitter.buffered
        if gap.size < rest:  # the message ends after the gap: its header says where the next starts
            side.discard = rest - gap.size
        flags = _UINT32.unpack_from(head, 16)[0] if opcode == OP_MSG and len(head) >= 20 else 0
        if opcode == OP_COMPRESSED and len(head) >= 20:
            opcode = _INT32.unpack_from(head, 16)[0]  # the original opcode; the OP_MSG flags are compressed
        if d == TO_SERVER:
            self._lost_request(request_id, opcode, flags, length, gap, out)
        else:
            self._lost_reply(request_id, response_to, flags, length, gap, out)

    def _lost_request(self, request_id: int, opcode: int, flags: int, length: int, gap: Gap,
                      out: list[Exchange]) -> None:
        """A request cut by a gap: known by its header only."""
        if opcode not in _CLIENT_OPCODES:
            return
        req = _Request(request_id, opcode, OPCODE_NAMES[opcode], gap.frame, gap.ts_ns, length,
                       warning="the request was cut by a capture gap", undecodable=True)
        if opcode in _NO_REPLY_OPCODES or flags & _MORE_TO_COME:
            out.append(self._exchange(req, UNDECODABLE))
        else:
            self._wait(req, gap.frame, out)

    def _lost_reply(self, reply_id: int, response_to: int, flags: int, length: int, gap: Gap,
                    out: list[Exchange]) -> None:
        """A reply cut by a gap still answers its request."""
        req, chained = self._request_for(response_to, out)
        if req is None:
            return
        ex = self._answer(req, chained, UNDECODABLE, gap.frame, gap.ts_ns, length)
        ex.details["response_id"] = reply_id
        ex.warning = "the reply was cut by a capture gap"
        out.append(ex)
        if flags & _MORE_TO_COME:
            self._chain(reply_id, req, gap.frame, gap.ts_ns)

    def _on_end(self, d: int, end: End) -> None:
        side = self._sides[d]
        if side.ended:
            return
        side.ended = self._ends[d] = end.reason
        splitter = side.splitter
        if splitter is not None and splitter.buffered:
            head = side.head
            total = f" of {_INT32.unpack_from(head)[0]}" if len(head) >= 4 else ""
            self._warn(end.frame, "truncated", f"the {_SENDER[d]} stream ended inside a message "
                                               f"({splitter.buffered}{total} bytes)")
            if d == TO_CLIENT and len(head) >= 16:
                req = self._waiting.get(_HEADER.unpack_from(head)[2])
                if req is not None:
                    req.warning = "its reply was cut short by the end of the stream"
        lost = side.skipped + len(side.scan)
        if lost:
            self._warn(end.frame, "resync", f"the {_SENDER[d]} stream ended while scanning: {lost} bytes "
                                            f"without a message")
        side.splitter, side.head, side.scan, side.skipped = None, b"", bytearray(), 0

    # -- messages ---------------------------------------------------------------------------

    def _message(self, d: int, side: _Side, raw: bytes, chunk: Chunk, out: list[Exchange]) -> bool:
        """Decode one framed message and pair it.  False: it cannot be a message, the stream is lost."""
        if not self._sane_length(d, len(raw), chunk.frame):
            side.splitter = None
            return False
        msg = decode_message(raw, keep_documents=self.ctx.keep_messages, max_size=self._limit)
        if side.probation:
            side.probation = False
            if msg.error is not None:  # the header found by scanning was a look-alike: scan on past it
                side.skipped += 1
                side.splitter = None
                return False
            if side.skipped:
                self._warn(chunk.frame, "resync", f"{_SENDER[d]} stream: skipped {side.skipped} bytes to the "
                                                  f"next message")
                side.skipped = 0
        what = "request" if d == TO_SERVER else "reply"
        for kind, text in msg.problems:
            self._warn(chunk.frame, kind, f"{what} {msg.request_id}: {text}")
        if msg.error is not None:
            self._warn(chunk.frame, "undecodable", f"{what} {msg.request_id} "
                                                   f"({OPCODE_NAMES.get(msg.opcode, msg.opcode)}): {msg.error}")
        if d == TO_SERVER:
            self._on_request(msg, chunk, out)
        else:
            self._on_reply(msg, chunk, out)
        return True

    def _on_request(self, msg: Message, chunk: Chunk, out: list[Exchange]) -> None:
        op = msg.opcode
        req = _Request(msg.request_id, op, OPCODE_NAMES.get(op, f"opcode {op}"), chunk.frame, chunk.ts_ns,
                       msg.length)
        if self.ctx.keep_messages:
            req.message = _kept(msg)
        if msg.compressor is not None:
            req.details["compressor"] = msg.compressor
        if msg.checksum is not None:
            req.details["checksum"] = msg.checksum
            if msg.checksum == "mismatch":
                req.warning = "the request's checksum does not match"
        if op not in _CLIENT_OPCODES:
            req.undecodable = True
            req.warning = f"request: {msg.error or f'{req.api} is not a request opcode'}"
            if msg.error is None:  # (a decoding error was warned about already)
                self._warn(chunk.frame, "undecodable", f"request {msg.request_id}: {req.warning}")
            out.append(self._exchange(req, UNDECODABLE))
            return
        if msg.error is not None:
            req.undecodable = True
            req.warning = f"request: {msg.error}"
        req.database, req.collection = _split_namespace(msg.namespace)
        if op == OP_MSG:
            self._command(req, msg.body, msg.sequences)
            req.replies_expected = not msg.flags & _MORE_TO_COME
            if msg.flags & _EXHAUST_ALLOWED:
                req.details["exhaust_allowed"] = True
        elif op == OP_QUERY:
            if req.collection == "$cmd" and msg.body:
                req.collection = None
                req.legacy_command = True
                self._command(req, _unwrap_query(msg.body), {})
            else:
                req.details.update(msg.fields)
                req.opens_await_cursor = bool(msg.flags & _QUERY_TAILABLE and msg.flags & _QUERY_AWAIT_DATA)
            req.legacy_exhaust = bool(msg.flags & _QUERY_EXHAUST)
        elif op == OP_COMMAND:
            req.database, req.collection = msg.namespace, None
            if msg.command_name:
                req.details["command"] = msg.command_name
        elif op == OP_INSERT:
            req.details["documents"] = _count(msg.documents)
        elif op in (OP_GET_MORE, OP_KILL_CURSORS):
            req.details.update(msg.fields)
        if op in _NO_REPLY_OPCODES or not req.replies_expected:
            out.append(self._exchange(req, UNDECODABLE if req.undecodable else NO_RESPONSE_EXPECTED))
        else:
            self._wait(req, chunk.frame, out)

    def _command(self, req: _Request, body: dict | None, sequences: dict[str, Any]) -> None:
        """Name, namespace and facts of a command (an OP_MSG body, or an OP_QUERY on $cmd)."""
        if not body:
            return
        name = next(iter(body))
        req.api = name
        value = body[name]
        db = body.get("$db")
        if isinstance(db, str):
            req.database = db
        if name == "getMore":
            collection = body.get("collection")
            cursor_id = _int(value)
            if cursor_id is not None:
                req.details["cursor_id"] = cursor_id
        else:
            collection = value if name not in _NOT_A_COLLECTION else None
        req.collection = collection if isinstance(collection, str) else None
        for key in _SEQUENCE_FIELDS:
            batch = sequences.get(key, body.get(key))
            if isinstance(batch, (list, int)) and not isinstance(batch, bool):
                req.details[key] = _count(batch)
        wait = None
        if name in _HELLO_COMMANDS:
            app = _app_name(body.get("client"))
            if app is not None:
                self._app_name = app
            wait = _int(body.get("maxAwaitTimeMS"))
        elif name == "getMore":
            wait = _int(body.get("maxTimeMS"))
            if wait is None and req.details.get("cursor_id") in self._await_cursors:
                wait = _DEFAULT_AWAIT_MS
        elif name in ("find", "aggregate"):
            pipeline = body.get("pipeline")
            change_stream = (isinstance(pipeline, list) and pipeline and isinstance(pipeline[0], dict)
                             and "$changeStream" in pipeline[0])
            req.opens_await_cursor = bool((body.get("tailable") and body.get("awaitData")) or change_stream)
        if wait is not None and wait > 0:
            req.details["expected_wait_ms"] = wait

    def _wait(self, req: _Request, frame: int, out: list[Exchange]) -> None:
        """Keep a request until its reply; bounded."""
        old = self._waiting.pop(req.request_id, None)
        if old is not None:
            old.warning = old.warning or "a later request reused its requestID before a reply came"
            out.append(self._unanswered(old, None))
        if len(self._waiting) >= _MAX_WAITING:
            oldest = self._waiting.pop(next(iter(self._waiting)))
            oldest.warning = f"given up: more than {_MAX_WAITING} requests waiting on the connection"
            self._warn(frame, "in_flight_limit", oldest.warning)
            out.append(self._unanswered(oldest, None))
        self._waiting[req.request_id] = req

    def _request_for(self, response_to: int, out: list[Exchange]) -> tuple[_Request | None, bool]:
        """The request a reply answers, and whether it follows an earlier reply (moreToCome)."""
        if response_to in self._waiting:
            # The server answers in order: requests sent before this one never will be.
            for request_id in list(self._waiting):
                if request_id == response_to:
                    break
                out.append(self._unanswered(self._waiting.pop(request_id), "skipped"))
            return self._waiting.pop(response_to), False
        req = self._chains.pop(response_to, None)
        return req, req is not None

    def _chain(self, reply_id: int, req: _Request, frame: int, ts_ns: int) -> None:
        """A reply with moreToCome: the next reply names this one."""
        req.last_reply_frame, req.last_reply_ts = frame, ts_ns
        if len(self._chains) >= _MAX_WAITING:
            self._chains.pop(next(iter(self._chains)))
        self._chains[reply_id] = req

    def _on_reply(self, msg: Message, chunk: Chunk, out: list[Exchange]) -> None:
        req, chained = self._request_for(msg.response_to, out)
        undecodable = msg.error is not None or msg.opcode not in _SERVER_OPCODES
        if req is None:
            ex = Exchange(protocol="mongodb", capture=self.ctx.capture, conn=self.conn.id, client=self._client,
                          server=self._server, api=OPCODE_NAMES.get(msg.opcode, f"opcode {msg.opcode}"),
                          api_key=msg.opcode, api_version=-1, correlation_id=msg.response_to,
                          status=UNDECODABLE if undecodable else ORPHAN_RESPONSE, client_id=self._app_name,
                          response_frame=chunk.frame, response_ts_ns=chunk.ts_ns, response_bytes=msg.length)
        else:
            status = UNDECODABLE if undecodable or req.undecodable else ANSWERED
            ex = self._answer(req, chained, status, chunk.frame, chunk.ts_ns, msg.length)
        if self.ctx.keep_messages:
            ex.response = _kept(msg)
        details = ex.details
        details["response_id"] = msg.request_id
        details["response_opcode"] = msg.opcode
        if msg.compressor is not None:
            details["response_compressor"] = msg.compressor
        if msg.checksum is not None:
            details["response_checksum"] = msg.checksum
        if undecodable:
            reason = msg.error or f"{OPCODE_NAMES.get(msg.opcode, msg.opcode)} is not a reply opcode"
            ex.warning = f"reply: {reason}" if ex.warning is None else f"{ex.warning}; reply: {reason}"
        elif msg.checksum == "mismatch":
            ex.warning = ex.warning or "the reply's checksum does not match"
        if msg.opcode == OP_REPLY:
            self._legacy_reply(ex, req, msg)
        else:
            _reply_facts(ex, msg.body)
        if req is None:
            out.append(ex)
            return
        more = (msg.opcode == OP_MSG and msg.flags & _MORE_TO_COME) or (
            msg.opcode == OP_REPLY and req.legacy_exhaust and msg.fields.get("cursor_id"))
        if more:
            self._chain(msg.request_id, req, chunk.frame, chunk.ts_ns)
        if req.opens_await_cursor and details.get("cursor_id"):
            self._await_cursors[details["cursor_id"]] = None
            if len(self._await_cursors) > _MAX_AWAIT_CURSORS:
                self._await_cursors.pop(next(iter(self._await_cursors)))
        out.append(ex)

    def _legacy_reply(self, ex: Exchange, req: _Request | None, msg: Message) -> None:
        if req is not None and req.legacy_command:
            _reply_facts(ex, msg.body)
        elif msg.flags & _REPLY_QUERY_FAILURE:
            _reply_facts(ex, msg.body if isinstance(msg.body, dict) else {"$err": "query failure"})
        else:
            ex.details["nReturned"] = msg.fields.get("number_returned", 0)
            ex.details.setdefault("cursor_id", msg.fields.get("cursor_id", 0))
        if msg.flags & _REPLY_CURSOR_NOT_FOUND and ex.error is None:
            ex.error_code, ex.error = 43, ERROR_NAMES[43]
            ex.errors[ex.error] += 1

    # -- exchanges --------------------------------------------------------------------------

    def _exchange(self, req: _Request, status: str) -> Exchange:
        return Exchange(protocol="mongodb", capture=self.ctx.capture, conn=self.conn.id, client=self._client,
                        server=self._server, api=req.api, api_key=req.opcode, api_version=-1,
                        correlation_id=req.request_id, status=status, client_id=self._app_name,
                        request_frame=req.frame, request_ts_ns=req.ts_ns, request_bytes=req.size,
                        database=req.database, collection=req.collection, details=dict(req.details),
                        request=req.message, warning=req.warning)

    def _answer(self, req: _Request, chained: bool, status: str, frame: int, ts_ns: int, size: int) -> Exchange:
        ex = self._exchange(req, status)
        if chained:  # timed from the reply before it: the server's wait for this one
            req.replies += 1
            ex.request_frame, ex.request_ts_ns, ex.request_bytes = req.last_reply_frame, req.last_reply_ts, 0
            ex.details["exhaust_reply"] = req.replies
            ex.details["first_request_frame"] = req.frame
        ex.response_frame, ex.response_ts_ns, ex.response_bytes = frame, ts_ns, size
        return ex

    def _unanswered(self, req: _Request, by: str | None) -> Exchange:
        ex = self._exchange(req, UNANSWERED)
        if req.response_gap:  # its reply may well be in what the capture missed: not the server's fault
            ex.warning = ex.warning or "its reply may be in a capture gap"
        elif by is not None:
            ex.details["unanswered_by"] = by
        return ex

    def _warn(self, frame: int, kind: str, message: str) -> None:
        self.ctx.warn(self.ctx.capture, frame, self.conn.id, kind, message)


def _unwrap_query(query: dict) -> dict:
    """A legacy command query may be wrapped with read preferences: {'$query': {...}, ...}."""
    first = next(iter(query), None)
    if first in ("$query", "query") and isinstance(query[first], dict):
        return query[first]
    return query


# -- JSON --------------------------------------------------------------------------------------

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
