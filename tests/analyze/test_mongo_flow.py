"""MongoFlow: MongoDB messages of one connection's stream events decoded into exchanges.

Requests are built by pymongo's own message encoder (``pymongo.message._op_msg`` and its
compression contexts: private, but the bytes a real driver sends); replies and legacy messages
are laid out here from the wire protocol's documented structures with ``bson.encode``.  They are
fed to the flow as the Chunk / Gap / End events the TCP layer produces; DeepFlow's MongoDB
captures then go through the whole analyzer and must agree with DeepFlow's expected output.
"""

from __future__ import annotations

import json
import random
import re
import struct
import uuid
import zlib
from collections import Counter
from datetime import datetime, timezone

import bson
import crc32c
import pytest
import zstandard
from bson import Binary, Decimal128, Int64, ObjectId
from bson.codec_options import DEFAULT_CODEC_OPTIONS
from pymongo import message as pymongo_message
from pymongo.compression_support import SnappyContext, ZlibContext

from kwire.analyze import mongo
from kwire.analyze.analyzer import AnalyzeOptions, decode_captures
from kwire.analyze.exchange import (
    ANSWERED,
    NO_RESPONSE_EXPECTED,
    ORPHAN_RESPONSE,
    UNANSWERED,
    UNDECODABLE,
    FlowContext,
    WarningLog,
)
from kwire.analyze.mongo import MongoFlow, decode_message, exchange_json, looks_like_mongo_message
from kwire.analyze.tables import exchange_row
from kwire.analyze.tcp import TO_CLIENT, TO_SERVER, Chunk, Connection, End, Gap

from .test_captures import _MONGO_INFO, MONGO

TS = 1_700_000_000_000_000_000
MS = 1_000_000


# -- building messages ------------------------------------------------------------------------


class ZstdContext:
    """pymongo's zstd context needs a package not installed here; the same interface over zstandard."""

    compressor_id = 3

    @staticmethod
    def compress(data: bytes) -> bytes:
        return zstandard.ZstdCompressor().compress(data)


COMPRESSION = {"snappy": SnappyContext(), "zlib": ZlibContext(6), "zstd": ZstdContext()}


def op_msg(command: dict, db: str = "shop", flags: int = 0, compression: str | None = None) -> tuple[int, bytes]:
    """(requestID, message) as pymongo sends it (a write's batch goes in a kind 1 section)."""
    ctx = COMPRESSION[compression] if compression else None
    request_id, data, _size, _max = pymongo_message._op_msg(flags, dict(command), db, None, DEFAULT_CODEC_OPTIONS,
                                                            ctx=ctx)
    return request_id, data


def header(length: int, request_id: int, response_to: int, opcode: int) -> bytes:
    return struct.pack("<iiii", length, request_id, response_to, opcode)


def message(request_id: int, response_to: int, opcode: int, body: bytes) -> bytes:
    return header(16 + len(body), request_id, response_to, opcode) + body


def reply(response_to: int, doc: dict, request_id: int = 900, flags: int = 0) -> bytes:
    """An OP_MSG reply: flagBits, one body section."""
    return message(request_id, response_to, 2013, struct.pack("<IB", flags, 0) + bson.encode(doc))


def compressed_reply(response_to: int, doc: dict, compression: str, request_id: int = 901) -> bytes:
    """An OP_MSG reply wrapped by pymongo's OP_COMPRESSED encoder (responseTo set afterwards)."""
    plain = reply(response_to, doc, request_id)
    _rid, data = pymongo_message._compress(2013, plain[16:], COMPRESSION[compression])
    return header(len(data), request_id, response_to, 2012) + data[16:]


def wrapped(original: bytes, compressor_id: int, payload: bytes, size: int | None = None) -> bytes:
    """An OP_COMPRESSED laid out by hand (noop compressor, forged sizes)."""
    length, request_id, response_to, opcode = struct.unpack_from("<iiii", original)
    size = len(original) - 16 if size is None else size
    return message(request_id, response_to, 2012, struct.pack("<iiB", opcode, size, compressor_id) + payload)


def with_checksum(data: bytes, *, corrupt: bool = False) -> bytes:
    """The OP_MSG with checksumPresent set and its CRC-32C appended."""
    out = bytearray(data)
    struct.pack_into("<i", out, 0, len(out) + 4)
    struct.pack_into("<I", out, 16, struct.unpack_from("<I", out, 16)[0] | 1)
    crc = crc32c.crc32c(bytes(out)) ^ (1 if corrupt else 0)
    return bytes(out) + struct.pack("<I", crc)


def cstring(text: str) -> bytes:
    return text.encode() + b"\x00"


def op_query(request_id: int, namespace: str, query: dict, flags: int = 0, skip: int = 0, ret: int = -1) -> bytes:
    body = struct.pack("<i", flags) + cstring(namespace) + struct.pack("<ii", skip, ret) + bson.encode(query)
    return message(request_id, 0, 2004, body)


def op_reply(response_to: int, docs: list[dict], request_id: int = 950, flags: int = 0, cursor_id: int = 0) -> bytes:
    body = struct.pack("<iqii", flags, cursor_id, 0, len(docs)) + b"".join(bson.encode(d) for d in docs)
    return message(request_id, response_to, 1, body)


# -- feeding a flow ---------------------------------------------------------------------------


def connection(*, start_seen: bool = True) -> Connection:
    conn = Connection(3, bytes([10, 0, 0, 1]), 50123, bytes([10, 0, 0, 2]), 27017, "syn", 1, TS)
    if start_seen:  # the SYNs were captured
        conn.directions[TO_SERVER].isn = 1000
        conn.directions[TO_CLIENT].isn = 9000
    return conn


def gap(size: int) -> tuple[str, int]:
    return ("gap", size)


def end(reason: str) -> tuple[str, str]:
    return ("end", reason)


def play(script, *, per_byte: bool = False, keep_messages: bool = False, start_seen: bool = True,
         close: bool = True) -> tuple[list, WarningLog]:
    """Feed ``script`` ((direction, bytes | gap(n) | end(reason)) per packet, packet i at frame i and
    i ms) to a new MongoFlow; return the exchanges (close()'s included) and the warnings."""
    warnings = WarningLog()
    flow = MongoFlow(connection(start_seen=start_seen),
                     FlowContext(capture="test.pcap", warn=warnings, keep_messages=keep_messages))
    out = []
    for i, (d, item) in enumerate(script, 1):
        ts = TS + i * MS
        if isinstance(item, tuple) and item[0] == "gap":
            out += flow.feed(d, Gap(i, ts, item[1]))
        elif isinstance(item, tuple):
            out += flow.feed(d, End(i, ts, item[1]))
        elif per_byte:  # every byte its own Chunk, all from the same packet
            for k in range(len(item)):
                out += flow.feed(d, Chunk(i, ts, item[k:k + 1]))
        else:
            out += flow.feed(d, Chunk(i, ts, item))
    if close:
        out += flow.close()
    return out, warnings


def kinds(warnings: WarningLog) -> Counter:
    return Counter(w.kind for w in warnings.kept)


def rows(exchanges) -> list[dict]:
    return [exchange_row(ex) | {"details": ex.details} for ex in exchanges]


# -- commands over OP_MSG ---------------------------------------------------------------------


def test_find_pairs_with_its_reply_naming_database_collection_and_batch():
    rid, find = op_msg({"find": "users", "filter": {"age": {"$gt": 30}}, "batchSize": 2})
    answer = reply(rid, {"cursor": {"firstBatch": [{"_id": 1}, {"_id": 2}], "id": Int64(8877), "ns": "shop.users"},
                         "ok": 1.0}, request_id=41)
    (ex,), warnings = play([(TO_SERVER, find), (TO_CLIENT, answer)])
    assert not warnings.kept
    assert (ex.protocol, ex.api, ex.api_key, ex.api_version, ex.correlation_id, ex.status) == (
        "mongodb", "find", 2013, -1, rid, ANSWERED)
    assert (ex.database, ex.collection, ex.error_code, ex.error) == ("shop", "users", 0, None)
    assert (ex.request_frame, ex.response_frame, ex.latency_ms) == (1, 2, 1.0)
    assert (ex.request_bytes, ex.response_bytes) == (len(find), len(answer))
    assert ex.details == {"nReturned": 2, "cursor_id": 8877, "response_id": 41, "response_opcode": 2013}
    assert (ex.client, ex.server, ex.conn, ex.capture) == ("10.0.0.1:50123", "10.0.0.2:27017", 3, "test.pcap")
    assert ex.request is None and ex.response is None  # kept only for --json


def test_insert_batch_in_a_document_sequence():
    rid, insert = op_msg({"insert": "orders", "ordered": True, "documents": [{"i": i} for i in range(3)]})
    assert insert[insert.index(b"documents\x00") - 5] == 1  # pymongo sent the batch as a kind 1 section
    answer = reply(rid, {"n": 3, "ok": 1})
    (ex,), warnings = play([(TO_SERVER, insert), (TO_CLIENT, answer)], keep_messages=True)
    assert not warnings.kept
    assert (ex.api, ex.database, ex.collection, ex.status) == ("insert", "shop", "orders", ANSWERED)
    assert ex.details["documents"] == 3 and ex.details["n"] == 3
    assert ex.request["sequences"] == {"documents": [{"i": 0}, {"i": 1}, {"i": 2}]}
    assert ex.request["body"]["insert"] == "orders"
    assert ex.response["body"] == {"n": 3, "ok": 1}


def test_get_more_names_its_collection_and_cursor():
    rid, get_more = op_msg({"getMore": Int64(8877), "collection": "users", "batchSize": 100})
    answer = reply(rid, {"cursor": {"nextBatch": [{"_id": 3}], "id": Int64(0), "ns": "shop.users"}, "ok": 1})
    (ex,), _ = play([(TO_SERVER, get_more), (TO_CLIENT, answer)])
    assert (ex.api, ex.database, ex.collection) == ("getMore", "shop", "users")
    assert ex.details["nReturned"] == 1 and ex.details["cursor_id"] == 8877  # the cursor it named
    assert "expected_wait_ms" not in ex.details  # an ordinary cursor: the server does not wait


def test_hello_names_the_application_for_the_whole_connection():
    client = {"application": {"name": "billing"}, "driver": {"name": "PyMongo", "version": "4.9"}}
    hello_id, hello = op_msg({"hello": 1, "client": client}, db="admin")
    find_id, find = op_msg({"find": "users"})
    script = [(TO_SERVER, hello), (TO_CLIENT, reply(hello_id, {"isWritablePrimary": True, "ok": 1})),
              (TO_SERVER, find), (TO_CLIENT, reply(find_id, {"cursor": {"firstBatch": [], "id": 0}, "ok": 1}))]
    hello_ex, find_ex = play(script)[0]
    assert (hello_ex.api, hello_ex.database, hello_ex.collection) == ("hello", "admin", None)
    assert hello_ex.client_id == find_ex.client_id == "billing"


def test_collection_is_not_taken_from_commands_whose_string_names_something_else():
    rid, get_log = op_msg({"getLog": "startupWarnings"}, db="admin")
    (ex,), _ = play([(TO_SERVER, get_log), (TO_CLIENT, reply(rid, {"log": [], "ok": 1}))])
    assert (ex.api, ex.collection) == ("getLog", None)


# -- errors ------------------------------------------------------------------------------------


def test_command_failure_gives_code_and_code_name():
    rid, drop = op_msg({"drop": "ghosts"})
    answer = reply(rid, {"ok": 0.0, "errmsg": "ns not found", "code": 26, "codeName": "NamespaceNotFound"})
    (ex,), _ = play([(TO_SERVER, drop), (TO_CLIENT, answer)])
    assert (ex.status, ex.error_code, ex.error) == (ANSWERED, 26, "NamespaceNotFound")
    assert ex.errors == Counter({"NamespaceNotFound": 1})
    assert ex.details["errmsg"] == "ns not found"


@pytest.mark.parametrize("doc, name", [
    ({"ok": 0, "code": 13, "errmsg": "not authorized on shop"}, "Unauthorized"),  # old server: no codeName
    ({"ok": 0, "code": 987654, "errmsg": "something odd"}, "something odd"),
    ({"ok": 0}, "error"),
])
def test_failure_without_code_name_is_named_from_the_code_or_message(doc, name):
    rid, find = op_msg({"find": "users"})
    (ex,), _ = play([(TO_SERVER, find), (TO_CLIENT, reply(rid, doc))])
    assert ex.error == name
    assert ex.error_code == doc.get("code", -1)


def test_write_errors_and_write_concern_error_are_counted():
    rid, insert = op_msg({"insert": "orders", "documents": [{"_id": 1}, {"_id": 2}, {"_id": 1}]})
    answer = reply(rid, {
        "n": 1, "ok": 1,
        "writeErrors": [{"index": 1, "code": 11000, "errmsg": "E11000 duplicate key error"},
                        {"index": 2, "code": 11000, "errmsg": "E11000 duplicate key error"}],
        "writeConcernError": {"code": 64, "codeName": "WriteConcernTimeout", "errmsg": "waiting for replication"},
    })
    (ex,), _ = play([(TO_SERVER, insert), (TO_CLIENT, answer)])
    assert (ex.status, ex.error_code, ex.error) == (ANSWERED, 11000, "DuplicateKey")
    assert ex.errors == Counter({"DuplicateKey": 2, "WriteConcernTimeout": 1})
    assert ex.details["n"] == 1 and ex.details["errmsg"].startswith("E11000")
    assert exchange_row(ex)["errors"] == ["DuplicateKey", "WriteConcernTimeout"]


# -- checksums, flags, compression -------------------------------------------------------------


def test_valid_checksums_are_checked_and_reported():
    rid, ping = op_msg({"ping": 1}, db="admin")
    (ex,), warnings = play([(TO_SERVER, with_checksum(ping)), (TO_CLIENT, with_checksum(reply(rid, {"ok": 1})))])
    assert not warnings.kept
    assert (ex.status, ex.api, ex.warning) == (ANSWERED, "ping", None)
    assert ex.details["checksum"] == ex.details["response_checksum"] == "valid"


def test_checksum_mismatch_is_a_warning_and_the_exchange_says_so():
    rid, ping = op_msg({"ping": 1}, db="admin")
    script = [(TO_SERVER, with_checksum(ping, corrupt=True)),
              (TO_CLIENT, with_checksum(reply(rid, {"ok": 1}), corrupt=True))]
    (ex,), warnings = play(script)
    assert kinds(warnings) == Counter({"checksum": 2})
    assert (ex.status, ex.api) == (ANSWERED, "ping")  # decoding went on
    assert ex.details["checksum"] == ex.details["response_checksum"] == "mismatch"
    assert "checksum" in ex.warning


def test_unknown_required_flag_bits_are_a_warning():
    rid, ping = op_msg({"ping": 1}, db="admin", flags=1 << 5)
    (ex,), warnings = play([(TO_SERVER, ping), (TO_CLIENT, reply(rid, {"ok": 1}))])
    assert kinds(warnings) == Counter({"flags": 1})
    assert "0x0020" in warnings.kept[0].message and ex.status == ANSWERED


@pytest.mark.parametrize("compression", ["snappy", "zlib", "zstd"])
def test_compressed_messages_are_unwrapped(compression):
    rid, find = op_msg({"find": "users", "filter": {"name": "x" * 300}}, compression=compression)
    assert struct.unpack_from("<i", find, 12)[0] == 2012  # pymongo did compress it
    answer = compressed_reply(rid, {"cursor": {"firstBatch": [{"n": "y" * 300}], "id": 0}, "ok": 1}, compression)
    (ex,), warnings = play([(TO_SERVER, find), (TO_CLIENT, answer)], keep_messages=True)
    assert not warnings.kept
    assert (ex.api, ex.api_key, ex.database, ex.collection, ex.status) == ("find", 2013, "shop", "users", ANSWERED)
    assert ex.details["compressor"] == ex.details["response_compressor"] == compression
    assert ex.details["nReturned"] == 1 and ex.details["response_opcode"] == 2013
    assert (ex.request_bytes, ex.response_bytes) == (len(find), len(answer))  # the bytes on the wire
    assert ex.request["body"]["filter"] == {"name": "x" * 300}


def test_noop_compressor():
    rid, ping = op_msg({"ping": 1}, db="admin")
    (ex,), warnings = play([(TO_SERVER, wrapped(ping, 0, ping[16:])), (TO_CLIENT, reply(rid, {"ok": 1}))])
    assert not warnings.kept
    assert (ex.api, ex.api_key, ex.details["compressor"]) == ("ping", 2013, "noop")


@pytest.mark.parametrize("compressor_id, payload, size, reason", [
    (2, zlib.compress(b"x" * 1000), 0x7FFFFFF0, "out of bounds"),  # forged: never allocated
    (2, zlib.compress(b"\x00" * 5_000_000), 100, "more than uncompressedSize"),  # a bomb stops at 101 bytes
    (1, b"\xff\xff\xff\xff\x0f" + b"\x00" * 20, 100, "declares 4294967295 bytes"),  # snappy's own length
    (3, b"not zstd at all", 100, "does not decompress"),
    (7, b"whatever", 10, "unknown compressorId 7"),
])
def test_bad_compressed_messages_are_undecodable_but_still_pair(compressor_id, payload, size, reason):
    rid, ping = op_msg({"ping": 1}, db="admin")
    (ex,), warnings = play([(TO_SERVER, wrapped(ping, compressor_id, payload, size)),
                            (TO_CLIENT, reply(rid, {"ok": 1}))])
    assert ex.status == UNDECODABLE and ex.correlation_id == rid
    assert reason in ex.warning and kinds(warnings) == Counter({"undecodable": 1})


def test_decode_message_never_raises_on_corrupt_documents():
    rid, find = op_msg({"find": "users"})
    corrupt = bytearray(find)
    corrupt[-2] = 0x42  # the body document's last element loses its terminator
    msg = decode_message(bytes(corrupt))
    assert msg.error and msg.request_id == rid and msg.opcode == 2013
    (ex,), warnings = play([(TO_SERVER, bytes(corrupt)), (TO_CLIENT, reply(rid, {"ok": 1}))])
    assert (ex.status, ex.api, ex.correlation_id) == (UNDECODABLE, "OP_MSG", rid)
    assert kinds(warnings) == Counter({"undecodable": 1})


# -- legacy opcodes ----------------------------------------------------------------------------


def test_legacy_handshake_over_op_query_and_op_reply():
    client = {"application": {"name": "MongoDB Shell"}, "driver": {"name": "shell", "version": "4.4"}}
    query = op_query(0, "admin.$cmd", {"isMaster": 1, "client": client}, ret=-1)
    answer = op_reply(0, [{"ismaster": True, "maxWireVersion": 9, "ok": 1.0}], request_id=60)
    (ex,), warnings = play([(TO_SERVER, query), (TO_CLIENT, answer)])
    assert not warnings.kept
    assert (ex.api, ex.api_key, ex.database, ex.collection, ex.client_id) == (
        "isMaster", 2004, "admin", None, "MongoDB Shell")
    assert (ex.status, ex.details["response_opcode"], ex.details["response_id"]) == (ANSWERED, 1, 60)


def test_legacy_command_wrapped_in_dollar_query():
    query = op_query(5, "shop.$cmd", {"$query": {"count": "orders"}, "$readPreference": {"mode": "secondary"}})
    (ex,), _ = play([(TO_SERVER, query), (TO_CLIENT, op_reply(5, [{"n": 12, "ok": 1}]))])
    assert (ex.api, ex.database, ex.collection, ex.details["n"]) == ("count", "shop", "orders", 12)


def test_legacy_query_on_a_collection_and_its_failure():
    find = op_query(7, "shop.orders", {"status": "open"}, skip=5, ret=10)
    answer = op_reply(7, [{"_id": i} for i in range(3)], cursor_id=555)
    failed = op_query(8, "shop.orders", {"$where": "bad("})
    failure = op_reply(8, [{"$err": "SyntaxError", "code": 139}], flags=2)
    lost_cursor = op_reply(9, [], flags=1)
    get_more = message(9, 0, 2005, struct.pack("<i", 0) + cstring("shop.orders") + struct.pack("<iq", 10, 555))
    (ex, bad, more), _ = play([(TO_SERVER, find), (TO_CLIENT, answer), (TO_SERVER, failed), (TO_CLIENT, failure),
                               (TO_SERVER, get_more), (TO_CLIENT, lost_cursor)])
    assert (ex.api, ex.database, ex.collection, ex.status) == ("OP_QUERY", "shop", "orders", ANSWERED)
    assert ex.details["nReturned"] == 3 and ex.details["cursor_id"] == 555 and ex.details["skip"] == 5
    assert (bad.error_code, bad.error) == (139, "SyntaxError")
    assert (more.api, more.collection, more.details["cursor_id"]) == ("OP_GET_MORE", "orders", 555)
    assert (more.error_code, more.error) == (43, "CursorNotFound")


def test_legacy_writes_are_named_and_expect_no_reply():
    docs = b"".join(bson.encode({"i": i}) for i in range(2))
    insert = message(20, 0, 2002, struct.pack("<i", 0) + cstring("shop.orders") + docs)
    update = message(21, 0, 2001, struct.pack("<i", 0) + cstring("shop.orders") + struct.pack("<i", 2)
                     + bson.encode({"i": 1}) + bson.encode({"$set": {"x": 1}}))
    delete = message(22, 0, 2006, struct.pack("<i", 0) + cstring("shop.orders") + struct.pack("<i", 1)
                     + bson.encode({"i": 0}))
    kill = message(23, 0, 2007, struct.pack("<ii", 0, 2) + struct.pack("<qq", 555, 556))
    exchanges, warnings = play([(TO_SERVER, insert), (TO_SERVER, update), (TO_SERVER, delete), (TO_SERVER, kill)])
    assert not warnings.kept
    assert [(e.api, e.api_key, e.status, e.database, e.collection) for e in exchanges] == [
        ("OP_INSERT", 2002, NO_RESPONSE_EXPECTED, "shop", "orders"),
        ("OP_UPDATE", 2001, NO_RESPONSE_EXPECTED, "shop", "orders"),
        ("OP_DELETE", 2006, NO_RESPONSE_EXPECTED, "shop", "orders"),
        ("OP_KILL_CURSORS", 2007, NO_RESPONSE_EXPECTED, None, None),
    ]
    assert exchanges[0].details["documents"] == 2 and exchanges[3].details["cursors"] == 2


def test_op_command_and_op_commandreply():
    command = message(30, 0, 2010, cstring("shop") + cstring("ping") + bson.encode({"ping": 1}) + bson.encode({}))
    answer = message(31, 30, 2011, bson.encode({"ok": 0, "code": 59, "errmsg": "no such command"}) + bson.encode({}))
    (ex,), warnings = play([(TO_SERVER, command), (TO_CLIENT, answer)])
    assert not warnings.kept
    assert (ex.api, ex.api_key, ex.database, ex.details["command"]) == ("OP_COMMAND", 2010, "shop", "ping")
    assert (ex.status, ex.error_code, ex.error) == (ANSWERED, 59, "CommandNotFound")


def test_unknown_opcode_is_undecodable_and_decoding_goes_on():
    odd = message(70, 0, 2099, b"\x00" * 12)
    rid, ping = op_msg({"ping": 1}, db="admin")
    (first, second), warnings = play([(TO_SERVER, odd + ping), (TO_CLIENT, reply(rid, {"ok": 1}))])
    assert (first.status, first.api, first.api_key) == (UNDECODABLE, "opcode 2099", 2099)
    assert (second.status, second.api) == (ANSWERED, "ping")
    assert kinds(warnings) == Counter({"undecodable": 1})


# -- turn-taking: moreToCome, exhaust, orphans, skipped, unanswered ------------------------------


def test_more_to_come_request_expects_no_reply():
    rid, insert = op_msg({"insert": "logs", "documents": [{"m": 1}], "writeConcern": {"w": 0}}, flags=2)
    (ex,), warnings = play([(TO_SERVER, insert)])
    assert not warnings.kept
    assert (ex.status, ex.api, ex.correlation_id, ex.response_frame) == (NO_RESPONSE_EXPECTED, "insert", rid, None)


def test_streaming_hello_replies_are_each_an_exchange_of_the_request():
    rid, hello = op_msg({"hello": 1, "topologyVersion": {"processId": ObjectId(), "counter": Int64(0)},
                         "maxAwaitTimeMS": 10000}, db="admin", flags=1 << 16)
    script = [(TO_SERVER, hello),
              (TO_CLIENT, reply(rid, {"isWritablePrimary": True, "ok": 1}, request_id=500, flags=2)),
              (TO_CLIENT, reply(500, {"isWritablePrimary": True, "ok": 1}, request_id=501, flags=2)),
              (TO_CLIENT, reply(501, {"isWritablePrimary": False, "ok": 1}, request_id=502))]
    exchanges, warnings = play(script)
    assert not warnings.kept
    assert [(e.api, e.correlation_id, e.status, e.request_frame, e.response_frame) for e in exchanges] == [
        ("hello", rid, ANSWERED, 1, 2), ("hello", rid, ANSWERED, 2, 3), ("hello", rid, ANSWERED, 3, 4)]
    assert [e.details["expected_wait_ms"] for e in exchanges] == [10000] * 3
    assert [e.details.get("exhaust_reply") for e in exchanges] == [None, 1, 2]
    assert [e.request_bytes for e in exchanges] == [len(hello), 0, 0]
    assert [e.latency_ms for e in exchanges] == [1.0, 1.0, 1.0]  # each timed from the reply before it
    assert exchanges[0].details["exhaust_allowed"] is True


def test_an_open_exhaust_stream_is_not_unanswered_at_close():
    rid, get_more = op_msg({"getMore": Int64(5), "collection": "events"}, flags=1 << 16)
    script = [(TO_SERVER, get_more),
              (TO_CLIENT, reply(rid, {"cursor": {"nextBatch": [{}], "id": Int64(5)}, "ok": 1}, 600, flags=2)),
              (TO_CLIENT, reply(600, {"cursor": {"nextBatch": [{}, {}], "id": Int64(5)}, "ok": 1}, 601, flags=2)),
              (TO_SERVER, end("fin")), (TO_CLIENT, end("fin"))]
    exchanges, _ = play(script)
    assert [(e.status, e.details["nReturned"]) for e in exchanges] == [(ANSWERED, 1), (ANSWERED, 2)]


def test_legacy_exhaust_query_replies_chain():
    query = op_query(40, "local.oplog.rs", {}, flags=2 | 32 | 64)  # tailable, awaitData, exhaust
    script = [(TO_SERVER, query), (TO_CLIENT, op_reply(40, [{}], request_id=41, cursor_id=9)),
              (TO_CLIENT, op_reply(41, [{}, {}], request_id=42, cursor_id=0))]
    exchanges, warnings = play(script)
    assert not warnings.kept
    assert [(e.correlation_id, e.status, e.details["nReturned"]) for e in exchanges] == [
        (40, ANSWERED, 1), (40, ANSWERED, 2)]


def test_await_data_get_more_expects_the_server_to_wait():
    rid, find = op_msg({"find": "capped", "tailable": True, "awaitData": True})
    first = reply(rid, {"cursor": {"firstBatch": [], "id": Int64(77)}, "ok": 1})
    waits = []
    script = [(TO_SERVER, find), (TO_CLIENT, first)]
    for body in ({"getMore": Int64(77), "collection": "capped", "maxTimeMS": 500},
                 {"getMore": Int64(77), "collection": "capped"},
                 {"getMore": Int64(12), "collection": "other"}):
        gid, get_more = op_msg(body)
        script += [(TO_SERVER, get_more), (TO_CLIENT, reply(gid, {"cursor": {"nextBatch": [], "id": 0}, "ok": 1}))]
    for ex in play(script)[0]:
        waits.append(ex.details.get("expected_wait_ms"))
    assert waits == [None, 500, 1000, None]  # 1000: the server's default wait for an awaitData cursor


def test_reply_to_no_known_request_is_an_orphan():
    (ex,), _ = play([(TO_CLIENT, reply(12345, {"ok": 1}, request_id=77))])
    assert (ex.status, ex.correlation_id, ex.api, ex.request_frame, ex.response_frame) == (
        ORPHAN_RESPONSE, 12345, "OP_MSG", None, 1)


def test_requests_passed_over_by_a_later_reply_were_skipped():
    first_id, first = op_msg({"find": "a"})
    second_id, second = op_msg({"find": "b"})
    (skipped, answered), _ = play([(TO_SERVER, first), (TO_SERVER, second), (TO_CLIENT, reply(second_id, {"ok": 1}))])
    assert (skipped.status, skipped.collection, skipped.details["unanswered_by"]) == (UNANSWERED, "a", "skipped")
    assert (answered.status, answered.collection) == (ANSWERED, "b")


def test_a_reused_request_id_gives_up_the_earlier_request():
    first = op_query(5, "shop.$cmd", {"count": "a"})
    second = op_query(5, "shop.$cmd", {"count": "b"})
    (given_up, answered), _ = play([(TO_SERVER, first), (TO_SERVER, second), (TO_CLIENT, op_reply(5, [{"ok": 1}]))])
    assert (given_up.status, given_up.collection, "unanswered_by" in given_up.details) == (UNANSWERED, "a", False)
    assert "reused its requestID" in given_up.warning
    assert (answered.status, answered.collection) == (ANSWERED, "b")


def test_requests_in_flight_are_bounded():
    script = [(TO_SERVER, op_query(i, "shop.$cmd", {"count": f"c{i}"})) for i in range(mongo._MAX_WAITING + 2)]
    exchanges, warnings = play(script, close=False)
    assert [(e.correlation_id, e.status) for e in exchanges] == [(0, UNANSWERED), (1, UNANSWERED)]
    assert kinds(warnings) == Counter({"in_flight_limit": 2})


@pytest.mark.parametrize("ends, by", [
    ([(TO_CLIENT, end("fin")), (TO_SERVER, end("fin"))], "connection_end"),
    ([(TO_SERVER, end("fin")), (TO_CLIENT, end("fin"))], "client_close"),
    ([(TO_CLIENT, end("rst")), (TO_SERVER, end("eof"))], "connection_end"),
    ([(TO_SERVER, end("eof")), (TO_CLIENT, end("eof"))], "capture_end"),
    ([], "capture_end"),
])
def test_requests_waiting_at_close_are_unanswered(ends, by):
    rid, find = op_msg({"find": "slow"})
    (ex,), _ = play([(TO_SERVER, find), *ends])
    assert (ex.status, ex.correlation_id, ex.details["unanswered_by"]) == (UNANSWERED, rid, by)
    assert exchange_row(ex)["unanswered_by"] == by


def test_a_reply_cut_by_the_end_of_the_stream_is_warned_about():
    rid, find = op_msg({"find": "big"})
    answer = reply(rid, {"cursor": {"firstBatch": [{"x": "y" * 100}], "id": 0}, "ok": 1})
    (ex,), warnings = play([(TO_SERVER, find), (TO_CLIENT, answer[:60]), (TO_CLIENT, end("eof"))])
    assert ex.status == UNANSWERED and "cut short" in ex.warning
    assert kinds(warnings) == Counter({"truncated": 1})


# -- damaged streams ---------------------------------------------------------------------------


def exchange_pair(command: dict, answer: dict, reply_id: int) -> tuple[int, bytes, bytes]:
    rid, request = op_msg(command)
    return rid, request, reply(rid, answer, request_id=reply_id)


def test_gap_inside_a_request_whose_header_was_seen():
    a_id, a, a_reply = exchange_pair({"find": "a"}, {"ok": 1}, 801)
    b_id, b, b_reply = exchange_pair({"find": "b", "filter": {"k": "v" * 200}}, {"ok": 1}, 802)
    c_id, c, c_reply = exchange_pair({"find": "c"}, {"ok": 1}, 803)
    script = [(TO_SERVER, a), (TO_CLIENT, a_reply),
              (TO_SERVER, b[:40]), (TO_SERVER, gap(100)), (TO_SERVER, b[140:] + c),
              (TO_CLIENT, b_reply), (TO_CLIENT, c_reply)]
    exchanges, warnings = play(script)
    assert kinds(warnings) == Counter({"gap": 1})  # the header told where the next message starts
    assert [(e.correlation_id, e.status) for e in exchanges] == [
        (a_id, ANSWERED), (b_id, UNDECODABLE), (c_id, ANSWERED)]
    lost = exchanges[1]
    assert (lost.api, lost.request_frame, lost.response_frame) == ("OP_MSG", 4, 6)
    assert "cut by a capture gap" in lost.warning


def test_gap_hiding_a_message_start_is_resynchronised_by_scanning():
    a_id, a, a_reply = exchange_pair({"find": "a"}, {"ok": 1}, 811)
    b_id, b, b_reply = exchange_pair({"find": "b", "filter": {"k": "v" * 200}}, {"ok": 1}, 812)
    c_id, c, c_reply = exchange_pair({"find": "c"}, {"ok": 1}, 813)
    script = [(TO_SERVER, a), (TO_CLIENT, a_reply),
              (TO_SERVER, gap(30)), (TO_SERVER, b[30:] + c),  # b's header was never captured
              (TO_CLIENT, b_reply), (TO_CLIENT, c_reply)]
    exchanges, warnings = play(script)
    assert kinds(warnings) == Counter({"gap": 1, "resync": 1})
    assert f"skipped {len(b) - 30} bytes" in next(w.message for w in warnings.kept if w.kind == "resync")
    assert [(e.correlation_id, e.status) for e in exchanges] == [
        (a_id, ANSWERED), (b_id, ORPHAN_RESPONSE), (c_id, ANSWERED)]


def test_reply_cut_by_a_gap_still_answers_its_request():
    a_id, a, a_reply = exchange_pair({"find": "a"}, {"cursor": {"firstBatch": [{"x": "y" * 300}], "id": 0},
                                                     "ok": 1}, 821)
    b_id, b, b_reply = exchange_pair({"find": "b"}, {"ok": 1}, 822)
    script = [(TO_SERVER, a), (TO_CLIENT, a_reply[:50]), (TO_CLIENT, gap(200)), (TO_CLIENT, a_reply[250:]),
              (TO_SERVER, b), (TO_CLIENT, b_reply)]
    exchanges, warnings = play(script)
    assert kinds(warnings) == Counter({"gap": 1})
    assert [(e.correlation_id, e.status, e.response_frame) for e in exchanges] == [
        (a_id, UNDECODABLE, 3), (b_id, ANSWERED, 6)]
    assert exchanges[0].details["response_id"] == 821 and "reply was cut" in exchanges[0].warning


def test_request_whose_reply_direction_lost_bytes_is_not_blamed_on_the_server():
    rid, find = op_msg({"find": "a"})
    (ex,), _ = play([(TO_SERVER, find), (TO_CLIENT, gap(500)), (TO_SERVER, end("fin")), (TO_CLIENT, end("fin"))])
    assert ex.status == UNANSWERED and "unanswered_by" not in ex.details and "capture gap" in ex.warning


@pytest.mark.parametrize("bad_length", [0x7FFFFFFF, -20, 5, 60 * 1024 * 1024])
def test_forged_length_keeps_the_messages_before_it_and_resynchronises(bad_length):
    a_id, a, a_reply = exchange_pair({"find": "a"}, {"ok": 1}, 831)
    b_id, b, b_reply = exchange_pair({"find": "b"}, {"ok": 1}, 832)
    forged = struct.pack("<i", bad_length) + b"\x11" * 40
    script = [(TO_SERVER, a + forged + b), (TO_CLIENT, a_reply + b_reply)]
    for per_byte in (False, True):
        exchanges, warnings = play(script, per_byte=per_byte)
        assert [(e.correlation_id, e.status) for e in exchanges] == [(a_id, ANSWERED), (b_id, ANSWERED)]
        assert kinds(warnings)["forged_length"] == 1 and kinds(warnings)["resync"] == 1
        assert str(bad_length) in next(w.message for w in warnings.kept if w.kind == "forged_length")


def test_capture_starting_mid_stream_scans_for_the_first_message():
    a_id, a, a_reply = exchange_pair({"find": "a"}, {"ok": 1}, 841)
    b_id, b, b_reply = exchange_pair({"find": "b"}, {"ok": 1}, 842)
    script = [(TO_SERVER, a[25:] + b), (TO_CLIENT, a_reply[10:] + b_reply)]
    exchanges, warnings = play(script, start_seen=False)
    assert [(e.correlation_id, e.status) for e in exchanges] == [(b_id, ANSWERED)]
    assert kinds(warnings) == Counter({"resync": 2})  # both directions skipped a partial message


def test_capture_starting_at_a_message_start_needs_no_warning():
    a_id, a, a_reply = exchange_pair({"find": "a"}, {"ok": 1}, 851)
    (ex,), warnings = play([(TO_SERVER, a), (TO_CLIENT, a_reply)], start_seen=False)
    assert not warnings.kept and ex.status == ANSWERED


def test_look_alike_header_inside_garbage_is_passed_over():
    b_id, b, b_reply = exchange_pair({"find": "b"}, {"ok": 1}, 861)
    # A request header look-alike (sane length, responseTo 0, OP_MSG, plausible flags and section)
    # whose body is not BSON: the scanner takes it, the decoder refuses it, scanning goes on.
    fake = header(40, 1, 0, 2013) + struct.pack("<IBi", 0, 0, 19) + b"\xee" * 15
    script = [(TO_SERVER, b"\x99" * 7 + fake + b), (TO_CLIENT, b_reply)]
    exchanges, warnings = play(script, start_seen=False)
    assert [(e.correlation_id, e.status) for e in exchanges] == [(b_id, ANSWERED)]
    skipped = 7 + len(fake)
    assert [(w.kind, w.message) for w in warnings.kept] == [
        ("resync", f"client stream: skipped {skipped} bytes to the next message")]


def test_garbage_never_raises_and_memory_stays_bounded():
    rng = random.Random(20240611)
    pieces = []
    for i in range(40):
        rid, req = op_msg({"find": f"c{i}", "filter": {"i": i}}, flags=rng.choice([0, 1 << 16]))
        pieces += [(TO_SERVER, req), (TO_CLIENT, reply(rid, {"ok": rng.choice([0, 1]), "code": 2}, 1000 + i))]
    stream = []
    for d, data in pieces:  # damage: random bytes flipped, cut, inserted, gaps
        data = bytearray(data)
        for _ in range(rng.randrange(3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.2:
            data = data[:rng.randrange(len(data))]
        if rng.random() < 0.2:
            data += rng.randbytes(rng.randrange(1, 64))
        stream.append((d, bytes(data)))
        if rng.random() < 0.1:
            stream.append((d, gap(rng.randrange(1, 500))))
    stream.append((TO_SERVER, rng.randbytes(5000)))
    for per_byte in (False, True):
        exchanges, warnings = play(stream, per_byte=per_byte, start_seen=rng.random() < 0.5)
        assert "internal" not in kinds(warnings)
        assert exchanges and all(e.protocol == "mongodb" for e in exchanges)
        json.dumps([exchange_json(e, True) for e in exchanges])


def test_scan_window_is_bounded():
    flow = MongoFlow(connection(start_seen=False), FlowContext(warn=WarningLog()))
    for i in range(200):
        flow.feed(TO_SERVER, Chunk(i + 1, TS, b"\x00\x07" * 2000))
        flow.feed(TO_CLIENT, Chunk(i + 1, TS, b"\x01\x00\x00\x00" * 1000))
    assert all(len(side.scan) < 64 for side in flow._sides)


# -- chunking, JSON, sniffing ------------------------------------------------------------------


def mixed_script() -> list:
    client = {"application": {"name": "svc"}}
    hello_id, hello = op_msg({"hello": 1, "client": client}, db="admin")
    find_id, find = op_msg({"find": "users", "filter": {"n": 1}}, compression="zlib")
    ins_id, insert = op_msg({"insert": "users", "documents": [{"n": i} for i in range(4)]})
    w0_id, w0 = op_msg({"delete": "users", "deletes": [{"q": {}, "limit": 0}]}, flags=2)
    return [
        (TO_SERVER, with_checksum(hello)), (TO_CLIENT, reply(hello_id, {"ok": 1}, 1)),
        (TO_SERVER, find), (TO_CLIENT, compressed_reply(find_id, {"cursor": {"firstBatch": [{}], "id": 0},
                                                                  "ok": 1}, "snappy", 2)),
        (TO_SERVER, insert + w0), (TO_CLIENT, reply(ins_id, {"ok": 0, "code": 11600}, 3)),
        (TO_SERVER, op_query(77, "admin.$cmd", {"ping": 1})), (TO_CLIENT, op_reply(77, [{"ok": 1}], 4)),
        (TO_SERVER, op_msg({"find": "never"})[1]), (TO_SERVER, end("fin")), (TO_CLIENT, end("fin")),
    ]


def test_one_byte_per_chunk_gives_identical_results():
    script = mixed_script()
    whole, whole_warnings = play(script)
    bytewise, bytewise_warnings = play(script, per_byte=True)
    assert rows(whole) == rows(bytewise)
    assert whole_warnings.kept == bytewise_warnings.kept == []
    assert [(e.api, e.status) for e in whole] == [
        ("hello", ANSWERED), ("find", ANSWERED), ("delete", NO_RESPONSE_EXPECTED), ("insert", ANSWERED),
        ("ping", ANSWERED), ("find", UNANSWERED)]
    assert {e.client_id for e in whole} == {"svc"}
    assert whole[3].error == "InterruptedAtShutdown"


def test_exchange_json_turns_bson_values_into_json():
    oid = ObjectId("672c2bc7f4ef2be05f1ddcc4")
    when = datetime(2024, 6, 11, 8, 30, 15, 123000, tzinfo=timezone.utc)
    session = uuid.UUID("12345678-1234-5678-1234-567812345678")
    rid, insert = op_msg({"insert": "orders", "lsid": {"id": Binary(session.bytes, 4)},
                          "documents": [{"_id": oid, "at": when, "price": Decimal128("9.99"), "raw": Binary(b"\x01\xff")}]})
    answer = reply(rid, {"n": 1, "ok": 1.0, "operationTime": bson.Timestamp(1730962793, 1)})
    (ex,), _ = play([(TO_SERVER, insert), (TO_CLIENT, answer)], keep_messages=True)
    shown = json.loads(json.dumps(exchange_json(ex, True)))
    assert shown["api"] == "insert" and shown["collection"] == "orders" and shown["details"]["documents"] == 1
    assert shown["request"]["body"]["lsid"] == {"id": str(session)}
    assert shown["request"]["sequences"]["documents"] == [
        {"_id": "672c2bc7f4ef2be05f1ddcc4", "at": "2024-06-11T08:30:15.123000+00:00", "price": "9.99", "raw": "01ff"}]
    assert shown["response"]["body"]["operationTime"] == {"t": 1730962793, "i": 1}
    hidden = exchange_json(ex, False)
    assert hidden["request"]["sequences"]["documents"] == {"documents_hidden": 1}
    assert hidden["request"]["body"]["insert"] == "orders"
    plain, _ = play([(TO_SERVER, insert), (TO_CLIENT, answer)])
    assert exchange_json(plain[0], True)["request"] is None


def test_exchange_json_hides_legacy_data_but_not_command_replies():
    find = op_query(7, "shop.orders", {"status": "open"})
    results = op_reply(7, [{"_id": 1, "secret": "a"}, {"_id": 2, "secret": "b"}])
    command = op_query(8, "shop.$cmd", {"find": "orders"})
    command_reply = op_reply(8, [{"cursor": {"firstBatch": [{"secret": "c"}], "id": 0}, "ok": 1}])
    docs = b"".join(bson.encode({"secret": i}) for i in range(3))
    insert = message(9, 0, 2002, struct.pack("<i", 0) + cstring("shop.orders") + docs)
    (legacy, cmd, ins), _ = play([(TO_SERVER, find), (TO_CLIENT, results), (TO_SERVER, command),
                                  (TO_CLIENT, command_reply), (TO_SERVER, insert)], keep_messages=True)
    assert exchange_json(legacy, True)["response"]["documents"][1] == {"_id": 2, "secret": "b"}
    assert exchange_json(legacy, False)["response"]["documents"] == {"documents_hidden": 2}
    assert exchange_json(legacy, False)["request"]["body"] == {"status": "open"}  # the query stays
    assert exchange_json(cmd, False)["response"]["documents"] == [
        {"cursor": {"firstBatch": {"documents_hidden": 1}, "id": 0}, "ok": 1}]
    assert exchange_json(ins, False)["request"]["documents"] == {"documents_hidden": 3}
    assert "secret" not in json.dumps([exchange_json(e, False) for e in (legacy, cmd, ins)])


def test_sniffer_knows_a_client_message_from_other_bytes():
    assert looks_like_mongo_message(op_msg({"ping": 1})[1][:64])
    assert looks_like_mongo_message(op_query(1, "admin.$cmd", {"isMaster": 1})[:16])
    assert not looks_like_mongo_message(op_msg({"ping": 1})[1][:15])  # too short to tell
    assert not looks_like_mongo_message(reply(5, {"ok": 1}))  # responseTo set: not a client's first message
    assert not looks_like_mongo_message(op_reply(0, []))  # a reply opcode
    kafka_api_versions = struct.pack(">ihhih", 20, 18, 3, 1, 4) + b"test"
    assert not looks_like_mongo_message(kafka_api_versions + b"\x00" * 12)
    assert not looks_like_mongo_message(header(60 * 1024 * 1024, 1, 0, 2013))


# -- DeepFlow's captures -----------------------------------------------------------------------

_DEEPFLOW_DETAILS = re.compile(r'request: "\{ \\"(\w+)\\".*?response_code: (\d+), exception: "([^"]*)"')


def deepflow_mongo(result_path) -> list[dict]:
    """DeepFlow's expected exchanges: one per Request line with its Response line."""
    out: list[dict] = []
    for line in result_path.read_text().splitlines():
        m = _MONGO_INFO.match(line)
        if not m:
            continue
        msg_type, request_id, response_id, op, name, req_bytes, resp_bytes = m.groups()
        if msg_type == "Request":
            command = _DEEPFLOW_DETAILS.search(line)
            out.append({"request_id": int(request_id), "opcode": int(op), "request_bytes": int(req_bytes),
                        "command": command.group(1) if command else None})
        else:
            code, exception = re.search(r'response_code: (\d+), exception: "([^"]*)"', line).groups()
            assert out[-1]["request_id"] == int(request_id)
            out[-1].update(response_id=int(response_id), response_opcode=int(op), response_bytes=int(resp_bytes),
                           error_code=int(code), errmsg=exception or None)
    return out


def test_deepflow_captures_agree_with_deepflow():
    exchanges, decoder = decode_captures(MONGO)
    assert not decoder.warnings.kept
    for path in MONGO:
        expected = deepflow_mongo(path.with_suffix(".result"))
        got = [{"request_id": e.correlation_id, "opcode": e.api_key, "request_bytes": e.request_bytes,
                "command": e.api, "response_id": e.details["response_id"],
                "response_opcode": e.details["response_opcode"], "response_bytes": e.response_bytes,
                "error_code": e.error_code, "errmsg": e.details.get("errmsg")}
               for e in exchanges if e.capture == path.name]
        assert got == expected
        assert len(expected) == {"mongo.pcap": 15, "mongo-msg.pcap": 1}[path.name]
    assert all(e.status == ANSWERED and e.protocol == "mongodb" for e in exchanges)
    failed = [e for e in exchanges if e.error]
    assert [(e.api, e.error) for e in failed] == [("replSetGetStatus", "NoReplicationEnabled")]
    shell = [e for e in exchanges if e.capture == "mongo.pcap"]
    assert {e.client_id for e in shell} == {"MongoDB Shell"}  # from the OP_QUERY handshake
    assert {e.details.get("checksum") for e in shell if e.api_key == 2013} == {"valid"}  # real CRC-32Cs
    (find,) = [e for e in exchanges if e.capture == "mongo-msg.pcap"]
    assert (find.database, find.collection, find.details["nReturned"]) == ("sky-test", "query", 1)


def test_deepflow_captures_decode_the_same_with_ports_named():
    detected, _ = decode_captures(MONGO)
    named, _ = decode_captures(MONGO, AnalyzeOptions(mongo_ports=frozenset({27017, 3717})))
    assert rows(named) == rows(detected)
