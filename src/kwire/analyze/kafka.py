"""The Kafka layer of ``kwire analyze``: one connection's stream events in, ``Exchange``s out.

``KafkaFlow(conn, ctx)`` splits each direction into size-prefixed frames with the codec's
``FrameSplitter``, decodes requests and responses with ``kwire.protocol`` and pairs them by
correlation id.  What a capture throws at it, and what it does:

* Responses come in request order on a Kafka connection, so a response to request N means the
  requests sent before N were answered in bytes the capture lost: they become ``UNANSWERED``
  (``details["unanswered_by"] = "skipped"``) at once, which also keeps the in-flight table small.
* Produce with acks=0 gets no response: ``NO_RESPONSE_EXPECTED`` as soon as the request is read.
* ApiVersions v3+ refused with UNSUPPORTED_VERSION is answered in the v0 layout (KIP-511).
* After a SaslHandshake v0 answered without error, both sides exchange raw SASL tokens
  (size-prefixed, no Kafka header) until the client sends a real request again: those become
  ``SaslToken`` exchanges instead of garbage requests.
* A ``Gap``, a size prefix no broker would accept (``forged_length``), or a direction captured
  from its middle: the partial frame is dropped and a bounded scan looks for the next plausible
  frame start (a request header the codec knows; a response naming a request in flight).
* Frames that do not decode become ``UNDECODABLE`` exchanges with a warning; nothing raises out
  of ``feed``/``close``.

Record batches are decompressed to count records and uncompressed bytes.  ``exchange_json``
turns an exchange (with its kept messages) into the ``--json`` object.
"""

from __future__ import annotations

import itertools
import re
import struct
from collections import Counter, OrderedDict, deque
from functools import lru_cache
from typing import Any
from uuid import UUID

from kwire.protocol import (
    API_KEYS,
    DEFAULT_MAX_FRAME_SIZE,
    FrameSplitter,
    Message,
    ProtocolError,
    api_name,
    api_versions,
    correlation_id_of_response,
    decode_request,
    decode_request_header,
    decode_response,
    error_name,
    response_class,
)
from kwire.protocol.records import HEADER_SIZE, decompress, iter_batches

from .exchange import (
    ANSWERED,
    NO_RESPONSE_EXPECTED,
    ORPHAN_RESPONSE,
    UNANSWERED,
    UNDECODABLE,
    Exchange,
    FlowContext,
    PartitionInfo,
)
from .tables import exchange_row
from .tcp import TO_CLIENT, TO_SERVER, Chunk, Connection, End, Gap

__all__ = ["KafkaFlow", "exchange_json", "looks_like_kafka_request"]

# Api keys of the requests this module reads fields from.
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, SASL_HANDSHAKE, API_VERSIONS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 15, 17, 18, 21, 23
TXN_OFFSET_COMMIT, DELETE_GROUPS = 28, 42
CONTROLLED_SHUTDOWN = 7
UNSUPPORTED_VERSION = 35

SASL_TOKEN = "SaslToken"  #: api name of the raw SASL tokens after a SaslHandshake v0
UNKNOWN_API = "Unknown"  #: api name when not even the request header could be read

_DIRECTION_NAMES = ("client->server", "server->client")
_CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

# Versions the sniffer accepts above the newest the codec knows: a client newer than kwire
# still speaks Kafka (its request is then reported as an unknown version).
_VERSION_SLACK = 4
# A client id longer than this is taken for garbage (real ones are tens of bytes).
_MAX_CLIENT_ID = 1024
# Requests waiting for a response, per connection.  Kafka clients keep at most a handful in
# flight (max.in.flight.requests.per.connection is 5 by default); beyond this the capture has
# lost the responses (one-sided capture) and the oldest are reported rather than kept forever.
_MAX_IN_FLIGHT = 1024
# During the first bytes of a direction captured from its middle, a response to a request the
# capture does not hold is accepted at offset 0 only if it is complete within this many bytes.
_PROBE_LIMIT = 64 * 1024
# Bytes a resynchronising scan holds while candidates wait for their frame to be whole (a frame
# larger than that is taken on its header only if that is strong evidence), and how many
# candidates it keeps.
_SCAN_LIMIT = 1024 * 1024
_MAX_PENDING = 256
# Verdicts on candidate frames remembered during a scan (bodies up to this size, this many).
_MEMO_MAX_BODY = 4096
_MEMO_ENTRIES = 256

_REQUEST_START = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length
_RESPONSE_START = struct.Struct(">ii")  # size, correlation id
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_NOT_TEXT = re.compile(rb"[\x00-\x1f\x7f]")  # bytes no client id contains


#: api key -> the newest version the codec knows
_NEWEST: dict[int, int] = {key: api_versions(key)[1] for key in API_KEYS}


def _int32_at(buf, pos: int) -> int:
    return _INT32.unpack_from(buf, pos)[0]


# ---------------------------------------------------------------------------------------------
# Recognising a frame start


def _request_start(buf, pos: int, end: int, max_size: int, slack: int) -> bool | None:
    """Is there a plausible request header at ``buf[pos:end]``?  None: not enough bytes to tell.

    Plausible: a sane size, an api key the codec knows, a version up to the newest known plus
    ``slack``, and a client id that is null or short text fitting in the frame.
    """
    have = end - pos
    if have < 8:
        return None
    if have < 14:
        size, key, version = struct.unpack_from(">ihh", buf, pos)
        clen = None
    else:
        size, key, version, _cid, clen = _REQUEST_START.unpack_from(buf, pos)
    newest = _NEWEST.get(key)
    if newest is None or not 0 <= version <= newest + slack or not 8 <= size <= max_size:
        return False
    if key == CONTROLLED_SHUTDOWN and version == 0:
        return True  # request header v0: no client id to check
    if size < 10:
        return False
    if clen is None:
        return None
    if clen < -1 or clen > size - 10 or clen > _MAX_CLIENT_ID:
        return False
    if clen > 0:
        stop = min(end, pos + 14 + clen)
        if _NOT_TEXT.search(buf, pos + 14, stop):
            return False
        if stop < pos + 14 + clen:
            return None
    return True


def looks_like_kafka_request(data: bytes) -> bool:
    """Do the first bytes a client sent look like a Kafka request?  (Used to detect the protocol.)"""
    if len(data) < 8:
        return False
    return _request_start(data, 0, len(data), DEFAULT_MAX_FRAME_SIZE, _VERSION_SLACK) is not False


def _size_pattern(max_size: int, least: int) -> bytes:
    """Regex bytes matching a big-endian int32 size from ``least`` (< 256) to about ``max_size``."""
    top = re.escape(bytes((min(max_size >> 24, 0x7F),)))
    return b"(?!\\x00\\x00\\x00[\\x00-" + re.escape(bytes((least - 1,))) + b"])[\\x00-" + top + b"]..."


@lru_cache(maxsize=32)
def _request_scan_pattern(max_size: int, client_id: bytes | None) -> re.Pattern:
    """A regex finding candidate request starts (checked exactly afterwards): it lets the resync
    scan run in C instead of testing every offset in Python.  With the connection's client id
    known (a client sends the same one in every request), only that one matches."""
    keys = b"".join(re.escape(bytes((k,))) for k in API_KEYS if 0 <= k < 256)
    newest = re.escape(bytes((max(_NEWEST.values()),)))
    tail = b"(?:[\\x00-\\x03].|\\xff\\xff)" if client_id is None else re.escape(client_id)
    return re.compile(b"(?=" + _size_pattern(max_size, 10) + b"\\x00[" + keys + b"]\\x00[\\x00-" + newest
                      + b"]...." + tail + b")", re.DOTALL)


@lru_cache(maxsize=64)
def _response_scan_pattern(max_size: int, correlation_ids: tuple[int, ...]) -> re.Pattern:
    """A regex finding candidate response starts: a sane size, then the id of a request in flight."""
    ids = b"|".join(re.escape(_INT32.pack(c)) for c in correlation_ids)
    return re.compile(b"(?=" + _size_pattern(max_size, 4) + b"(?:" + ids + b"))", re.DOTALL)


def _request_body_decodes(body: bytes, _entry) -> bool:
    try:
        decode_request(body, strict=False)
    except ProtocolError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Records


def _summarize_records(data) -> tuple[int, int, int, str | None]:
    """(data records, uncompressed bytes, bitmask of codecs, error) of a records blob.

    Compressed batches are decompressed: their uncompressed size is only known that way, and a
    payload that does not decompress is a corrupt batch.  Control batches (transaction markers)
    count no records, as a consumer sees none.  On a corrupt batch the counts cover the batches
    before it and ``error`` says what was wrong.
    """
    records = raw = mask = 0
    try:
        for batch in iter_batches(data):
            codec = batch.attributes & 7
            mask |= 1 << codec
            if batch.magic == 2:
                count = batch.record_count
                if codec:
                    payload = len(decompress(codec, batch.raw_records()))
                else:
                    payload = batch.size_in_bytes - HEADER_SIZE
                if count < 0 or count * 7 > payload:  # 7 bytes: the smallest record
                    return records, raw, mask, f"batch at offset {batch.base_offset} claims {count} records " \
                                               f"in {payload} bytes"
                raw += HEADER_SIZE + payload
                if not batch.is_control:
                    records += count
            elif codec:  # a legacy wrapper message: its value is the compressed inner message set
                # (records() decompresses it again; magic 0/1 traffic is rare enough not to matter)
                inner = decompress(codec, batch.value or b"")
                records += len(batch.records())
                raw += batch.size_in_bytes - len(batch.value or b"") + len(inner)
            else:
                records += 1
                raw += batch.size_in_bytes
    except ProtocolError as e:
        return records, raw, mask, str(e)
    return records, raw, mask, None


class _RecordStats:
    """Records, bytes and codecs summed over the partitions of one exchange."""

    __slots__ = ("mask", "uncompressed", "errors")

    def __init__(self):
        self.mask = 0
        self.uncompressed = 0
        self.errors: list[str] = []

    def add(self, data) -> tuple[int, int]:
        """(records, wire bytes) of one partition's records blob."""
        if not data:
            return 0, 0
        n, raw, mask, error = _summarize_records(data)
        self.mask |= mask
        self.uncompressed += raw
        if error is not None:
            self.errors.append(error)
        return n, len(data)

    def store(self, flow: KafkaFlow, ex: Exchange, frame: int, side: str) -> None:
        if self.mask:
            ex.details["codecs"] = [_CODEC_NAMES[c] for c in range(5) if self.mask >> c & 1]
            ex.details["uncompressed_bytes"] = self.uncompressed
        for error in self.errors:
            flow._warn(frame, "corrupt_records", f"{ex.api} {side} (correlation id {ex.correlation_id}): {error}")


# ---------------------------------------------------------------------------------------------
# Errors of a response: every error_code field, found by a walker compiled per (api, version)

_WALKERS: dict[tuple[int, int], Any] = {}  # (api key, version) -> walker, or None: no error fields
_UNSET = object()
_ERROR_NAMES: dict[int, str] = {}


def _has_error_field(struct_spec, version: int) -> bool:
    for f in struct_spec.fields:
        if not f.present(version):
            continue
        if f.attr == "error_code" and f.struct is None and not f.is_array:
            return True
        if f.struct is not None and _has_error_field(f.struct, version):
            return True
    return False


def _compile_error_walker(api_key: int, version: int):
    """A function ``walk(response, out)`` appending every non-zero error code, each struct's own
    before its children's (so the top-level error comes first); None if the response has none.

    Written as straight-line Python and compiled once, like the codec itself: a generic walk
    over the schema per response costs more than decoding the response.
    """
    spec = response_class(api_key).SPEC
    lines: list[str] = []
    names = itertools.count()

    def emit(struct_spec, var: str, ind: str) -> None:
        fields = [f for f in struct_spec.fields if f.present(version)]
        for f in fields:
            if f.attr == "error_code" and f.struct is None and not f.is_array:
                lines.extend((f"{ind}c = {var}.error_code", f"{ind}if c:", f"{ind}    out.append(c)"))
        for f in fields:
            if f.struct is None or not _has_error_field(f.struct, version):
                continue
            x = f"x{next(names)}"
            if f.is_array:
                lines.append(f"{ind}for {x} in {var}.{f.attr} or ():")
            else:
                lines.extend((f"{ind}{x} = {var}.{f.attr}", f"{ind}if {x} is not None:"))
            emit(f.struct, x, ind + "    ")

    emit(spec.struct, "o", "    ")
    if not lines:
        return None
    namespace: dict[str, Any] = {}
    source = "def walk(o, out):\n" + "\n".join(lines) + "\n"
    exec(compile(source, f"<kwire analyze {spec.name} v{version} errors>", "exec"), namespace)
    return namespace["walk"]


def _error_walker(api_key: int, version: int):
    key = (api_key, version)
    walker = _WALKERS.get(key, _UNSET)
    if walker is _UNSET:
        walker = _WALKERS[key] = _compile_error_walker(api_key, version)
    return walker


def _error_name(code: int) -> str:
    name = _ERROR_NAMES.get(code)
    if name is None:
        name = _ERROR_NAMES[code] = error_name(code)
    return name


# ---------------------------------------------------------------------------------------------
# Fields of exchanges, per api.  Request readers fill the request's side and return what the
# response reader needs later; response readers complete the exchange.


def _set_partition(ex: Exchange, index: dict | None, topic: str, partition: int, **changes) -> dict:
    """Update (or add) the PartitionInfo of topic/partition; returns the (topic, partition) index."""
    parts = ex.partitions
    if index is None:
        index = {(p.topic, p.partition): i for i, p in enumerate(parts)}
    i = index.get((topic, partition))
    if i is None:
        index[(topic, partition)] = len(parts)
        parts.append(PartitionInfo(topic, partition, **changes))
    else:
        parts[i] = parts[i]._replace(**changes)
    return index


def _produce_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    d = ex.details
    d["acks"] = req.acks
    d["timeout_ms"] = req.timeout_ms
    if req.transactional_id:
        d["transactional_id"] = req.transactional_id
    stats = _RecordStats()
    parts = ex.partitions
    topic_name = flow._topic_name
    for t in req.topic_data:
        name = t.name or topic_name(t.topic_id)
        for p in t.partition_data:
            n, size = stats.add(p.records)
            parts.append(PartitionInfo(name, p.index, 0, -1, n, size))
    stats.store(flow, ex, frame, "request")


def _produce_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    topic_name = flow._topic_name
    for t in resp.responses:
        name = t.name or topic_name(t.topic_id)
        for p in t.partition_responses:
            index = _set_partition(ex, index, name, p.index, error_code=p.error_code, offset=p.base_offset)


def _fetch_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.details["expected_wait_ms"] = req.max_wait_ms
    if req.isolation_level:
        ex.details["isolation_level"] = req.isolation_level
    parts = ex.partitions
    topic_name = flow._topic_name
    for t in req.topics:
        name = t.topic or topic_name(t.topic_id)
        for p in t.partitions:
            parts.append(PartitionInfo(name, p.partition, 0, p.fetch_offset))


def _fetch_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    # The response lists the partitions it has something to say about (with fetch sessions,
    # fewer than the request named): those replace the request's, keeping its fetch offsets.
    asked = {(p.topic, p.partition): p.offset for p in ex.partitions}
    parts = []
    stats = _RecordStats()
    topic_name = flow._topic_name
    for t in resp.responses:
        name = t.topic or topic_name(t.topic_id)
        for p in t.partitions:
            n, size = stats.add(p.records)
            parts.append(PartitionInfo(name, p.partition_index, p.error_code, asked.get((name, p.partition_index), -1),
                                       n, size, p.high_watermark))
    ex.partitions = parts
    stats.store(flow, ex, frame, "response")


def _list_offsets_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    for t in req.topics:
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(t.name, p.partition_index))


def _list_offsets_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    for t in resp.topics:
        for p in t.partitions:
            offset = p.offset if version >= 1 else (p.old_style_offsets[0] if p.old_style_offsets else -1)
            index = _set_partition(ex, index, t.name, p.partition_index, error_code=p.error_code, offset=offset)


def _metadata_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    if version >= 10:  # topic ids: Fetch v13+, Produce v13+ and OffsetCommit v10+ name topics by them
        names = flow._topic_names
        for t in resp.topics:
            if t.name and t.topic_id is not None and t.topic_id.int:
                names[t.topic_id] = t.name


def _offset_commit_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.group = req.group_id
    if version >= 1:
        ex.member_id = req.member_id
        ex.generation = req.generation_id_or_member_epoch
    if req.group_instance_id:
        ex.details["group_instance_id"] = req.group_instance_id
    topic_name = flow._topic_name
    for t in req.topics:
        name = t.name or topic_name(t.topic_id)
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(name, p.partition_index, 0, p.committed_offset))


def _commit_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    topic_name = flow._topic_name
    for t in resp.topics:
        name = t.name or topic_name(getattr(t, "topic_id", None))
        for p in t.partitions:
            index = _set_partition(ex, index, name, p.partition_index, error_code=p.error_code)


def _txn_offset_commit_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.group = req.group_id
    d = ex.details
    d["transactional_id"] = req.transactional_id
    d["producer_id"] = req.producer_id
    d["producer_epoch"] = req.producer_epoch
    if version >= 3:
        ex.member_id = req.member_id
        ex.generation = req.generation_id
    for t in req.topics:
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(t.name, p.partition_index, 0, p.committed_offset))


def _offset_fetch_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    topic_name = flow._topic_name
    if version < 8:
        ex.group = req.group_id
        topics = [(t.name, t.partition_indexes) for t in req.topics or ()]
    else:
        groups = req.groups
        if not groups:
            return
        first = groups[0]
        ex.group = first.group_id
        if version >= 9 and first.member_id:
            ex.member_id = first.member_id
        ex.details["groups"] = [g.group_id for g in groups]
        topics = [(t.name or topic_name(t.topic_id), t.partition_indexes) for t in first.topics or ()]
    for name, indexes in topics:
        for i in indexes:
            ex.partitions.append(PartitionInfo(name, i))


def _offset_fetch_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    if version < 8:
        topics = resp.topics
    else:
        group = next((g for g in resp.groups if g.group_id == ex.group), None)
        topics = group.topics if group is not None else ()
    index = None
    topic_name = flow._topic_name
    for t in topics:
        name = t.name or topic_name(getattr(t, "topic_id", None))
        for p in t.partitions:
            index = _set_partition(ex, index, name, p.partition_index, error_code=p.error_code,
                                   offset=p.committed_offset)


def _find_coordinator_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    keys = list(req.coordinator_keys) if version >= 4 else [req.key]
    if not keys:
        return
    if req.key_type == 0:  # 0: a consumer group, 1: a transactional id
        ex.group = keys[0]
    else:
        ex.details["key_type"] = req.key_type
        ex.details["key"] = keys[0]
    if len(keys) > 1:
        ex.details["coordinator_keys"] = keys


def _find_coordinator_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    if version < 4:
        ex.details["coordinator"] = resp.node_id
    elif resp.coordinators:
        ex.details["coordinator"] = resp.coordinators[0].node_id


def _join_group_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.group = req.group_id
    ex.member_id = req.member_id or None
    d = ex.details
    # v0 has no rebalance timeout: the broker then waits up to the session timeout for members.
    d["expected_wait_ms"] = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
    d["session_timeout_ms"] = req.session_timeout_ms
    if req.group_instance_id:
        d["group_instance_id"] = req.group_instance_id
    d["protocols"] = [p.name for p in req.protocols]


def _join_group_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    ex.generation = resp.generation_id
    if not ex.member_id and resp.member_id:
        ex.member_id = resp.member_id
    d = ex.details
    d["protocol_name"] = resp.protocol_name
    d["leader"] = resp.leader
    if resp.members:
        d["members"] = len(resp.members)


def _member_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    """Heartbeat and SyncGroup: the group, generation and member the request names."""
    ex.group = req.group_id
    ex.generation = req.generation_id
    ex.member_id = req.member_id
    if req.group_instance_id:
        ex.details["group_instance_id"] = req.group_instance_id


def _sync_group_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    if resp.protocol_name:
        ex.details["protocol_name"] = resp.protocol_name
    if resp.error_code or not resp.assignment or (resp.protocol_type and resp.protocol_type != "consumer"):
        return
    from kwire.client.assignors.protocol import decode_assignment  # the consumer protocol; loaded when needed

    try:
        assignment = decode_assignment(resp.assignment)
    except ProtocolError:  # not the consumer protocol (Connect, streams with custom data...): leave it out
        return
    ex.details["assignment"] = [(tp.topic, tp.partition) for tp in assignment.partitions]


def _leave_group_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.group = req.group_id
    if version < 3:
        ex.member_id = req.member_id
    elif req.members:
        ex.member_id = req.members[0].member_id
        ex.details["members"] = [m.member_id for m in req.members]


def _describe_groups_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    groups = req.groups
    if groups:
        ex.group = groups[0]
        if len(groups) > 1:
            ex.details["groups"] = list(groups)


def _delete_groups_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    groups = req.groups_names
    if groups:
        ex.group = groups[0]
        if len(groups) > 1:
            ex.details["groups"] = list(groups)


def _delete_records_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.details["timeout_ms"] = req.timeout_ms
    for t in req.topics:
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(t.name, p.partition_index, 0, p.offset))


def _delete_records_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    for t in resp.topics:
        for p in t.partitions:
            index = _set_partition(ex, index, t.name, p.partition_index, error_code=p.error_code,
                                   offset=p.low_watermark)


def _leader_epoch_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    for t in req.topics:
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(t.topic, p.partition))


def _leader_epoch_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    for t in resp.topics:
        for p in t.partitions:
            index = _set_partition(ex, index, t.topic, p.partition, error_code=p.error_code, offset=p.end_offset)


def _sasl_handshake_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.details["mechanism"] = req.mechanism
    return req.mechanism


def _api_versions_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    if version >= 3 and req.client_software_name:
        ex.details["client_software"] = f"{req.client_software_name} {req.client_software_version}"


_REQUEST_READERS = {
    PRODUCE: _produce_request, FETCH: _fetch_request, LIST_OFFSETS: _list_offsets_request,
    OFFSET_COMMIT: _offset_commit_request, OFFSET_FETCH: _offset_fetch_request,
    FIND_COORDINATOR: _find_coordinator_request, JOIN_GROUP: _join_group_request, HEARTBEAT: _member_request,
    LEAVE_GROUP: _leave_group_request, SYNC_GROUP: _member_request, DESCRIBE_GROUPS: _describe_groups_request,
    SASL_HANDSHAKE: _sasl_handshake_request, API_VERSIONS: _api_versions_request,
    DELETE_RECORDS: _delete_records_request, OFFSET_FOR_LEADER_EPOCH: _leader_epoch_request,
    TXN_OFFSET_COMMIT: _txn_offset_commit_request, DELETE_GROUPS: _delete_groups_request,
}

_RESPONSE_READERS = {
    PRODUCE: _produce_response, FETCH: _fetch_response, LIST_OFFSETS: _list_offsets_response,
    METADATA: _metadata_response, OFFSET_COMMIT: _commit_response, OFFSET_FETCH: _offset_fetch_response,
    FIND_COORDINATOR: _find_coordinator_response, JOIN_GROUP: _join_group_response,
    SYNC_GROUP: _sync_group_response, DELETE_RECORDS: _delete_records_response,
    OFFSET_FOR_LEADER_EPOCH: _leader_epoch_response, TXN_OFFSET_COMMIT: _commit_response,
}

_THROTTLED: dict[int, bool] = {}  # api key -> does its response carry throttle_time_ms


def _has_throttle(api_key: int) -> bool:
    known = _THROTTLED.get(api_key)
    if known is None:
        fields = response_class(api_key).SPEC.struct.fields
        known = _THROTTLED[api_key] = any(f.attr == "throttle_time_ms" for f in fields)
    return known


# ---------------------------------------------------------------------------------------------
# The flow


class _Scan:
    """Looking for a frame start in a direction that lost (or never had) its place in the stream.

    ``buf`` holds the bytes not yet ruled out, at most about ``_SCAN_LIMIT``: offsets before
    ``checked`` were examined; ``pending`` are plausible frame starts whose frame is not whole
    yet (a plausible header alone is weak evidence: zero-filled bytes make one easily).
    """

    __slots__ = ("buf", "checked", "pending", "skipped", "probe", "frame")

    def __init__(self, frame: int, probe: bool = False):
        self.buf = bytearray()
        self.checked = 0
        self.pending: list[int] = []
        self.skipped = 0  # bytes dropped so far
        self.probe = probe  # the direction's first bytes, whose start was not captured
        self.frame = frame  # where the stream was lost


class _Side:
    """Framing state of one direction."""

    __slots__ = ("splitter", "scan", "ended")

    def __init__(self, max_frame_size: int, captured_start: bool):
        self.splitter = FrameSplitter(max_frame_size)
        self.scan: _Scan | None = None if captured_start else _Scan(0, probe=True)
        self.ended: str | None = None  # End reason


class _InFlight:
    """A request waiting for its response."""

    __slots__ = ("ex", "key", "version", "aux")

    def __init__(self, ex: Exchange, key: int, version: int, aux):
        self.ex = ex
        self.key = key
        self.version = version
        self.aux = aux


class KafkaFlow:
    """Decodes one TCP connection's Kafka traffic into exchanges (see the module docstring)."""

    def __init__(self, conn: Connection, ctx: FlowContext):
        self.conn = conn
        self.ctx = ctx
        self._capture = ctx.capture
        self._conn_id = conn.id
        self._client = conn.client
        self._server = conn.server
        self._keep = ctx.keep_messages
        self._max = ctx.max_frame_size
        self._sides = (_Side(self._max, conn.directions[TO_SERVER].isn is not None),
                       _Side(self._max, conn.directions[TO_CLIENT].isn is not None))
        self._in_flight: OrderedDict[int, _InFlight] = OrderedDict()
        # Topic ids (Fetch v13+, Produce v13+) are named by Metadata responses, which a client
        # often reads on another connection than the one it fetches on: one map per capture.
        self._topic_names: dict[UUID, str] = ctx.topic_names
        self._client_id: str | None = None  # the last one seen: SASL tokens carry none
        self._client_id_bytes: bytes | None = None  # its length prefix and bytes, for the resync scan
        self._verdicts: dict[tuple, bool] = {}  # see _verdict
        self._sasl_raw = False  # raw SASL tokens are being exchanged (after SaslHandshake v0)
        self._sasl_mechanism: str | None = None
        self._sasl_tokens: deque[Exchange] = deque()  # client tokens waiting for the server's
        self._warned_in_flight = False
        self._closed = False

    # -- Flow ----------------------------------------------------------------------------------

    def feed(self, direction: int, event) -> list[Exchange]:
        out: list[Exchange] = []
        try:
            kind = type(event)
            if kind is Chunk:
                side = self._sides[direction]
                frame = event.frame
                if side.scan is None:
                    splitter = side.splitter
                    had = splitter.buffered
                    try:
                        frames = splitter.feed(event.data)
                    except ProtocolError as e:  # a negative or oversized size prefix
                        frames = self._forged(direction, side, event, had, e)
                else:
                    frames = self._rescan(direction, side, event.data, frame)
                if frames:
                    ts = event.ts_ns
                    if direction == TO_SERVER:
                        on_request = self._request
                        for body in frames:
                            on_request(body, frame, ts, out)
                    else:
                        on_response = self._response
                        for body in frames:
                            on_response(body, frame, ts, out)
            elif kind is Gap:
                self._gap(direction, event, out)
            elif kind is End:
                self._sides[direction].ended = event.reason
        except Exception as e:  # a bug must not stop the analysis of the whole capture
            self._internal_error(direction, event, e)
        return out

    def close(self) -> list[Exchange]:
        out: list[Exchange] = []
        if self._closed:
            return out
        self._closed = True
        try:
            ended = any(s.ended in ("fin", "rst") for s in self._sides) or any(
                d.ended in ("fin", "rst") for d in self.conn.directions)
            why = "connection_end" if ended else "capture_end"
            for entry in self._in_flight.values():
                out.append(self._unanswered(entry.ex, why))
            self._in_flight.clear()
            while self._sasl_tokens:
                out.append(self._unanswered(self._sasl_tokens.popleft(), why))
            for direction, side in enumerate(self._sides):
                name = _DIRECTION_NAMES[direction]
                scan = side.scan
                if scan is not None:
                    lost = scan.skipped + len(scan.buf)
                    if lost and not scan.probe:
                        self._warn(scan.frame, "resync",
                                   f"{name}: no frame start found in the {lost} bytes after frame {scan.frame}")
                    elif lost:
                        self._warn(scan.frame, "truncated",
                                   f"{name}: {lost} bytes without a whole frame (the capture holds only a part)")
                elif side.splitter.buffered:
                    self._warn(self.conn.last_frame, "truncated",
                               f"{name}: the last frame is incomplete ({side.splitter.buffered} bytes of it captured)")
        except Exception as e:
            self._internal_error(TO_SERVER, None, e)
        return out

    # -- framing -------------------------------------------------------------------------------

    def _forged(self, direction: int, side: _Side, event: Chunk, had: int, error: ProtocolError) -> list[bytes]:
        """A size prefix no broker accepts: drop the partial frame and scan this chunk for a frame start.

        With no partial frame before the chunk, the chunk started at a frame boundary: frames
        before the bad prefix are still found (the scan takes them at once).
        """
        self._warn(event.frame, "forged_length",
                   f"{_DIRECTION_NAMES[direction]}: {error.reason} at frame {event.frame}; resynchronising"
                   + (f" ({had} bytes of a partial frame dropped)" if had else ""))
        side.splitter = FrameSplitter(self._max)
        side.scan = _Scan(event.frame)
        return self._rescan(direction, side, event.data, event.frame)

    def _gap(self, direction: int, event: Gap, out: list[Exchange]) -> None:
        side = self._sides[direction]
        scan = side.scan
        partial = side.splitter.buffered if scan is None else len(scan.buf)
        self._warn(event.frame, "gap", f"{_DIRECTION_NAMES[direction]}: {event.size} bytes missing before frame "
                                       f"{event.frame}" + (f"; {partial} bytes of a partial frame dropped"
                                                           if partial else ""))
        side.splitter = FrameSplitter(self._max)
        side.scan = _Scan(event.frame)
        if self._sasl_raw:  # the tokens' pairing is lost: look for Kafka frames again
            self._sasl_raw = False
            while self._sasl_tokens:
                out.append(self._unanswered(self._sasl_tokens.popleft(), "skipped"))

    def _rescan(self, direction: int, side: _Side, data, frame: int) -> list[bytes]:
        """Scan the bytes held plus ``data`` for frames; once in step again, hand over to the splitter.

        Whole frames the scan finds were validated by decoding them, and scanning goes on after
        each; the splitter takes over when the bytes end right after a frame, or at a frame too
        large for the scan window whose header is strong evidence (``_strong_start``).
        """
        scan = side.scan
        buf = scan.buf
        buf += data
        frames: list[bytes] = []
        while True:
            start = self._frame_start(direction, scan)
            if start is None:
                self._trim(scan)
                return frames
            size = _int32_at(buf, start)
            skipped = scan.skipped + start
            if skipped:
                where = "" if scan.probe else f" (stream lost at frame {scan.frame})"
                self._warn(frame, "resync", f"{_DIRECTION_NAMES[direction]}: {skipped} bytes skipped to the frame "
                                            f"start found in frame {frame}{where}")
            end = start + 4 + size
            if end > len(buf):
                self._in_step(side)
                frames.extend(side.splitter.feed(bytes(buf[start:])))  # one size prefix, already checked
                return frames
            frames.append(bytes(buf[start + 4:end]))
            del buf[:end]
            if not buf:  # the bytes ended right after a frame: in step again
                self._in_step(side)
                return frames
            scan.checked = scan.skipped = 0
            scan.pending = []
            scan.probe = False

    def _in_step(self, side: _Side) -> None:
        """The scan found its frame: the splitter frames from here."""
        side.scan = None
        side.splitter = FrameSplitter(self._max)
        self._verdicts.clear()

    def _trim(self, scan: _Scan) -> None:
        """Drop the bytes ruled out; give up the oldest candidates past the scan window."""
        pending = scan.pending
        if len(pending) > _MAX_PENDING:
            del pending[:len(pending) - _MAX_PENDING]
        drop = min(pending[0], scan.checked) if pending else scan.checked
        if drop:
            del scan.buf[:drop]
            scan.skipped += drop
            scan.checked -= drop
            scan.pending = [p - drop for p in pending]
            scan.probe = False

    def _frame_start(self, direction: int, scan: _Scan) -> int | None:
        """Where the next frame starts in the scan buffer, or None while no candidate proves itself.

        The first candidate whose frame is whole and decodes wins; a candidate not whole yet
        waits (pending) until it is, or until the bytes after it fill the scan window: a frame
        that large is then taken on its header if that is strong evidence (``_strong_start``),
        else given up.
        """
        buf = scan.buf
        end = len(buf)
        pending = scan.pending
        if direction == TO_SERVER:
            candidates = self._request_candidates(scan)
            valid = self._request_decodes
        else:
            candidates = self._response_candidates(scan)
            valid = self._response_valid
        for p in list(pending):  # candidates whose frames may have become whole
            if p + 4 + _int32_at(buf, p) <= end:
                if valid(scan, p):
                    return p
                pending.remove(p)
        for p in candidates:
            if p + 4 + _int32_at(buf, p) <= end:
                if valid(scan, p):
                    return p
            else:
                pending.append(p)
        while pending and end - pending[0] > _SCAN_LIMIT:
            p = pending.pop(0)
            if self._strong_start(direction, buf, p):
                return p
        return None

    def _strong_start(self, direction: int, buf, p: int) -> bool:
        """Is the header at ``p`` good enough evidence on its own (its frame exceeds the scan window)?

        A request must carry the client id this connection's requests carry (a client sends the
        same in all); a response must answer the oldest request in flight (Kafka answers in
        order).  Without that, zero fill or arrays of small numbers make headers often enough
        that taking one would swallow up to a maximum-size frame of the stream.
        """
        if direction == TO_SERVER:
            known = self._client_id_bytes
            return known is not None and len(known) > 2 and buf[p + 12:p + 12 + len(known)] == known
        return bool(self._in_flight) and _int32_at(buf, p + 4) == next(iter(self._in_flight))

    def _request_candidates(self, scan: _Scan):
        """Offsets of plausible request headers from ``scan.checked`` on (advancing it)."""
        buf = scan.buf
        end = len(buf)
        maximum = self._max
        pattern = _request_scan_pattern(maximum, self._client_id_bytes)
        for m in pattern.finditer(buf, scan.checked):
            p = m.start()
            verdict = _request_start(buf, p, end, maximum, 0)
            if verdict is None:  # its client id is not all there yet: judge it later
                scan.checked = p
                return
            if verdict and not (buf[p + 5] == CONTROLLED_SHUTDOWN and buf[p + 7] == 0):
                yield p  # (ControlledShutdown v0 has no client id to check: too weak to resync on)
        # The pattern needs 14 bytes and the client id: a start may hide in the tail.
        scan.checked = max(scan.checked, end - 13 - len(self._client_id_bytes or b""))

    def _request_decodes(self, scan: _Scan, p: int) -> bool:
        body = bytes(scan.buf[p + 4:p + 4 + _int32_at(scan.buf, p)])
        return self._verdict(body, None, _request_body_decodes)

    def _response_candidates(self, scan: _Scan):
        """Offsets of plausible response starts from ``scan.checked`` on (advancing it): a sane size
        then the correlation id of a request in flight."""
        buf = scan.buf
        end = len(buf)
        maximum = self._max
        start = scan.checked
        if scan.probe and start == 0 and end >= 8 and 4 <= _int32_at(buf, 0) <= maximum:
            yield 0  # the direction's first bytes may start with a response to a request not captured
            start = 1
        scan.checked = max(start, end - 7)  # a size and id cut by the end of the bytes: look again later
        if self._in_flight:
            for m in _response_scan_pattern(maximum, tuple(self._in_flight)).finditer(buf, start):
                yield m.start()

    def _response_valid(self, scan: _Scan, p: int) -> bool:
        buf = scan.buf
        size, cid = _RESPONSE_START.unpack_from(buf, p)
        entry = self._in_flight.get(cid)
        if entry is not None and (entry.ex.status == UNDECODABLE  # its request is unknown: cannot tell
                                  or self._verdict(bytes(buf[p + 4:p + 4 + size]), entry, self._response_decodes)):
            return True
        if scan.probe and p == 0 and size <= _PROBE_LIMIT:
            # A response to a request the capture lacks: taken if the next bytes start a frame too.
            after = p + 4 + size
            return len(buf) < after + 4 or 4 <= _int32_at(buf, after) <= self._max
        return False

    def _response_decodes(self, body: bytes, entry: _InFlight) -> bool:
        return self._decode_response(body, entry)[0] is not None

    def _verdict(self, body: bytes, entry: _InFlight | None, check) -> bool:
        """``check(body, entry)``, remembered for small bodies: periodic data (zero fill, arrays of
        small numbers) offers the same candidate frame over and over, each worth a decode."""
        if len(body) > _MEMO_MAX_BODY:
            return check(body, entry)
        key = (body, None if entry is None else (entry.key, entry.version))
        memo = self._verdicts
        verdict = memo.get(key)
        if verdict is None:
            if len(memo) >= _MEMO_ENTRIES:
                memo.clear()
            verdict = memo[key] = check(body, entry)
        return verdict

    # -- requests ------------------------------------------------------------------------------

    def _request(self, body: bytes, frame: int, ts: int, out: list[Exchange]) -> None:
        if self._sasl_raw:
            try:
                header, req = decode_request(body)
            except ProtocolError:
                dropped = self._sasl_token(body, frame, ts)
                if dropped is not None:
                    out.append(dropped)
                return
            self._sasl_raw = False  # a real request: the SASL exchange is over
            while self._sasl_tokens:
                out.append(self._unanswered(self._sasl_tokens.popleft(), "skipped"))
            warning = None
        else:
            try:
                header, req = decode_request(body)
                warning = None
            except ProtocolError as e:
                header, req, warning = self._lenient_request(body, frame, ts, e, out)
                if header is None:
                    return
        key = header.request_api_key
        version = header.request_api_version
        cid = header.correlation_id
        client_id = header.client_id
        if client_id != self._client_id and req is not None:  # (a garbage header must not teach the scan)
            self._client_id = client_id
            encoded = b"\xff\xff" if client_id is None else client_id.encode()
            self._client_id_bytes = encoded if client_id is None else struct.pack(">h", len(encoded)) + encoded
        name = api_name(key) if key in _NEWEST else f"ApiKey({key})"
        ex = Exchange("kafka", self._capture, self._conn_id, self._client, self._server, name, key, version, cid,
                      ANSWERED, client_id, frame, ts)
        ex.request_bytes = len(body) + 4
        aux = None
        if req is None:  # undecodable, but its header is known: its response can still be paired
            ex.status = UNDECODABLE
            ex.warning = warning
        else:
            if warning is not None:
                ex.warning = warning
            if self._keep:
                ex.request = req
            reader = _REQUEST_READERS.get(key)
            if reader is not None:
                aux = reader(self, ex, req, version, frame)
            if key == PRODUCE and req.acks == 0:
                ex.status = NO_RESPONSE_EXPECTED
                out.append(ex)
                return
        self._track(cid, _InFlight(ex, key, version, aux), frame, out)

    def _lenient_request(self, body: bytes, frame: int, ts: int, error: ProtocolError, out: list[Exchange]):
        """A request the strict decode refused: (header, request or None, warning); header None when
        not even the header reads (an UNDECODABLE exchange is then emitted here)."""
        try:
            header = decode_request_header(body)[0]
        except ProtocolError as e:
            message = f"request at frame {frame} has no readable header: {e}"
            self._warn(frame, "undecodable", message)
            ex = Exchange("kafka", self._capture, self._conn_id, self._client, self._server, UNKNOWN_API, -1, -1, -1,
                          UNDECODABLE, self._client_id, frame, ts)
            ex.request_bytes = len(body) + 4
            ex.warning = message
            out.append(ex)
            return None, None, message
        key, version = header.request_api_key, header.request_api_version
        if key not in _NEWEST:
            message = f"unknown api key {key} (version {version}, correlation id {header.correlation_id})"
            self._warn(frame, "unknown_api", f"frame {frame}: {message}")
            return header, None, message
        if version > _NEWEST[key] or version < 0:
            message = f"{api_name(key)} v{version} is not a version kwire knows"
            self._warn(frame, "unknown_api", f"frame {frame}: {message} (correlation id {header.correlation_id})")
            return header, None, message
        try:  # bytes left over after a request that otherwise decodes (a newer client, padding)
            header, req = decode_request(body, strict=False)
        except ProtocolError as e:
            message = f"{api_name(key)} v{version} request does not decode: {e}"
            self._warn(frame, "undecodable", f"frame {frame}: {message}")
            return header, None, message
        message = f"{api_name(key)} v{version} request: {error}"
        self._warn(frame, "undecodable", f"frame {frame}: {message}")
        return header, req, message

    def _track(self, cid: int, entry: _InFlight, frame: int, out: list[Exchange]) -> None:
        in_flight = self._in_flight
        old = in_flight.pop(cid, None)
        if old is not None:  # the client reused a correlation id still waiting: the first lost its answer
            self._warn(frame, "correlation", f"correlation id {cid} reused at frame {frame} while waiting")
            out.append(self._unanswered(old.ex, "skipped"))
        in_flight[cid] = entry
        if len(in_flight) > _MAX_IN_FLIGHT:
            if not self._warned_in_flight:
                self._warned_in_flight = True
                self._warn(frame, "in_flight", f"over {_MAX_IN_FLIGHT} requests without a response (the capture "
                                               f"lacks the server's side?): the oldest are reported unanswered")
            out.append(self._unanswered(in_flight.popitem(last=False)[1].ex, "skipped"))

    def _sasl_token(self, body: bytes, frame: int, ts: int) -> Exchange | None:
        ex = Exchange("kafka", self._capture, self._conn_id, self._client, self._server, SASL_TOKEN, -1, -1, -1,
                      ANSWERED, self._client_id, frame, ts)
        ex.request_bytes = len(body) + 4
        if self._sasl_mechanism:
            ex.details["mechanism"] = self._sasl_mechanism
        self._sasl_tokens.append(ex)
        if len(self._sasl_tokens) > _MAX_IN_FLIGHT:  # a server that never answers: keep memory bounded
            return self._unanswered(self._sasl_tokens.popleft(), "skipped")
        return None

    # -- responses -----------------------------------------------------------------------------

    def _response(self, body: bytes, frame: int, ts: int, out: list[Exchange]) -> None:
        if self._sasl_tokens:  # the server's answer to a raw SASL token
            ex = self._sasl_tokens.popleft()
            ex.response_frame, ex.response_ts_ns, ex.response_bytes = frame, ts, len(body) + 4
            out.append(ex)
            return
        size = len(body) + 4
        in_flight = self._in_flight
        entry = in_flight.get(correlation_id_of_response(body)) if len(body) >= 4 else None
        if entry is None:
            out.append(self._orphan(body, frame, ts))
            return
        ex = entry.ex
        cid = ex.correlation_id
        if next(iter(in_flight)) != cid:
            # Responses come in request order: the requests before this one were answered in
            # bytes the capture lost.
            while True:
                first, older = in_flight.popitem(last=False)
                if first == cid:
                    break
                out.append(self._unanswered(older.ex, "skipped"))
        else:
            del in_flight[cid]
        ex.response_frame = frame
        ex.response_ts_ns = ts
        ex.response_bytes = size
        if ex.status == UNDECODABLE:  # its request did not decode; ApiVersions still says its error
            if entry.key == API_VERSIONS and len(body) >= 6:
                self._set_error(ex, [_INT16.unpack_from(body, 4)[0]])
            out.append(ex)
            return
        key = entry.key
        version = entry.version
        resp, warning = self._decode_response(body, entry)
        if resp is None:
            ex.status = UNDECODABLE
            ex.warning = warning
            self._warn(frame, "undecodable", f"frame {frame}: {warning}")
            if key == API_VERSIONS and len(body) >= 6:
                self._set_error(ex, [_INT16.unpack_from(body, 4)[0]])
                ex.status = ANSWERED
            out.append(ex)
            return
        if warning is not None:
            ex.warning = warning
            self._warn(frame, "undecodable", f"frame {frame}: {warning}")
        if self._keep:
            ex.response = resp
        if _has_throttle(key):
            ex.throttle_ms = resp.throttle_time_ms
        walker = _error_walker(key, version)
        if walker is not None:
            codes: list[int] = []
            walker(resp, codes)
            if codes:
                self._set_error(ex, codes)
        reader = _RESPONSE_READERS.get(key)
        if reader is not None:
            reader(self, ex, resp, version, entry.aux, frame)
        if key == SASL_HANDSHAKE and version == 0 and not resp.error_code:
            # SASL before KIP-152: the client's next frames are the mechanism's raw tokens.
            self._sasl_raw = True
            self._sasl_mechanism = entry.aux
        out.append(ex)

    def _decode_response(self, body: bytes, entry: _InFlight):
        """(response, warning) or (None, why it does not decode)."""
        key, version = entry.key, entry.version
        if key == API_VERSIONS:
            return self._decode_api_versions(body, version)
        try:
            return decode_response(body, key, version)[1], None
        except ProtocolError as e:
            try:  # bytes left over after a response that otherwise decodes (a newer broker)
                response = decode_response(body, key, version, strict=False)[1]
            except ProtocolError:
                return None, f"{api_name(key)} v{version} response does not decode: {e}"
            return response, f"{api_name(key)} v{version} response: {e}"

    def _decode_api_versions(self, body: bytes, version: int):
        # KIP-511: a broker refusing the request's version (UNSUPPORTED_VERSION) answers in the
        # v0 layout, the one every client can read.  Try that layout first when the error says so.
        refused = version > 0 and len(body) >= 6 and _INT16.unpack_from(body, 4)[0] == UNSUPPORTED_VERSION
        layouts = (0, version) if refused else (version, 0)
        first_error = None
        for layout in dict.fromkeys(layouts):
            try:
                return decode_response(body, API_VERSIONS, layout)[1], None
            except ProtocolError as e:
                first_error = first_error or e
        return None, f"ApiVersions v{version} response decodes in neither its layout nor v0's: {first_error}"

    def _set_error(self, ex: Exchange, codes: list[int]) -> None:
        names = [_error_name(c) for c in codes]
        ex.error_code = codes[0]
        ex.error = names[0]
        ex.errors = Counter(names)

    def _orphan(self, body: bytes, frame: int, ts: int) -> Exchange:
        cid = correlation_id_of_response(body) if len(body) >= 4 and not self._sasl_raw else -1
        ex = Exchange("kafka", self._capture, self._conn_id, self._client, self._server,
                      SASL_TOKEN if self._sasl_raw else UNKNOWN_API, -1, -1, cid, ORPHAN_RESPONSE)
        ex.response_frame, ex.response_ts_ns, ex.response_bytes = frame, ts, len(body) + 4
        return ex

    def _unanswered(self, ex: Exchange, why: str) -> Exchange:
        if ex.status == ANSWERED:
            ex.status = UNANSWERED
        ex.details["unanswered_by"] = why
        return ex

    # -- helpers -------------------------------------------------------------------------------

    def _topic_name(self, topic_id) -> str:
        """A topic named by id: its name if a Metadata response on this connection gave it."""
        if topic_id is None:
            return ""
        return self._topic_names.get(topic_id) or str(topic_id)

    def _warn(self, frame: int, kind: str, message: str) -> None:
        self.ctx.warn(self._capture, frame, self._conn_id, kind, message)

    def _internal_error(self, direction: int, event, error: Exception) -> None:
        frame = getattr(event, "frame", 0)
        self._warn(frame, "internal", f"{_DIRECTION_NAMES[direction]}: {type(error).__name__}: {error} "
                                      f"(frame {frame}); resynchronising")
        side = self._sides[direction]
        side.splitter = FrameSplitter(self._max)
        side.scan = _Scan(frame)


# ---------------------------------------------------------------------------------------------
# --json

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
