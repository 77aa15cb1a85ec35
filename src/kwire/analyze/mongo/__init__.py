"""MongoDB's wire protocol in captured traffic: one connection's stream events in, exchanges out.

``MongoFlow(conn, ctx)`` is the MongoDB layer of ``kwire analyze`` (an ``exchange.Flow``).  It
frames each direction with the project's ``FrameSplitter`` (little-endian messageLength that
counts itself), decodes the messages (``decode_message``: OP_MSG with its sections and CRC-32C
checksum, OP_COMPRESSED with snappy / zlib / zstd, legacy OP_QUERY and OP_REPLY, the other
legacy opcodes by name and namespace), pairs replies with requests by requestID / responseTo and
turns each pair into an ``Exchange``.  BSON is read with pymongo's ``bson``.

* ``flow``: ``MongoFlow``: pairing replies with requests, the exchanges they make;
* ``framing``: splitting each direction into messages, and finding its place again after damage;
* ``decode``: ``decode_message`` and OP_MSG; ``legacy``: the legacy opcodes; ``compression``:
  OP_COMPRESSED; ``message``: the decoded ``Message``, the field reader, the BSON options;
* ``commands``: what an exchange takes from a command and from its reply document;
* ``errors``: ``ERROR_NAMES``, MongoDB's names of error codes;
* ``json_output``: ``exchange_json``;
* ``wire``: opcodes, flags and header layouts, and ``looks_like_mongo_message``.
"""

from .decode import decode_message
from .errors import ERROR_NAMES
from .flow import _MAX_WAITING as _MAX_WAITING  # read by the tests
from .flow import MongoFlow
from .json_output import exchange_json
from .message import Message
from .wire import (  # noqa: F401 - the public names of the old single module, still importable from here
    COMPRESSORS,
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
    looks_like_mongo_message,
)

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
