"""tshark as the oracle: the same real captures (tests/analyze/realcap.py) read by tshark 4.0's
Kafka dissector and by kwire's analyzer must agree message by message.

Every message tshark dissects has a kwire counterpart at the same frame with the same correlation
id, and the other way round.  Then, field by field:

* always: direction, api key and version (where tshark names them), correlation id, size,
  client id, and for responses the frame of their request;
* where tshark knows the version and dissects the message cleanly: topics, partitions, offsets,
  record counts and error codes of Produce, Fetch, ListOffsets, OffsetCommit and OffsetFetch,
  the group, member and generation of the group APIs, and every error code of the response.

tshark 4.0.17 stops at Produce v8, Fetch v11, Metadata v9, OffsetCommit v8...; newer versions
(librdkafka 2.x and kafka-python 3 use them) are flagged "Unsupported ... version" and their
responses go unpaired ("Request missing"), so only the header is compared there.  Two captures
exist for the oracle's sake: kafka-python pinned to Kafka 2.0's versions, and librdkafka held to
its pre-ApiVersions protocol (Produce v1, Metadata v0) against the mock cluster.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

import pytest

from kwire.analyze.analyzer import AnalyzeOptions, decode_captures
from kwire.analyze.exchange import ANSWERED
from kwire.protocol import error_name

from .helpers import DEEPFLOW
from .realcap import RUN_IDS, RUNS, run_scenario, tshark_pdus

PRODUCE, FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 2, 8, 9
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
PARTITIONED = {PRODUCE, FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH}
# Requests naming a generation: the field tshark calls kafka.generation_id.
WITH_GENERATION = {OFFSET_COMMIT, HEARTBEAT, SYNC_GROUP}

@cache
def both(name: str, tool: str):
    """kwire's messages and tshark's, keyed by (frame, is request, correlation id)."""
    run = run_scenario(name, tool)
    exchanges, _ = decode_captures([run.path], AnalyzeOptions())
    ours: dict[tuple, tuple] = {}
    for ex in exchanges:
        for frame, is_request in ((ex.request_frame, True), (ex.response_frame, False)):
            if frame is not None:
                key = (frame, is_request, ex.correlation_id)
                assert key not in ours, f"two kwire messages at {key}"
                ours[key] = ex
    theirs: dict[tuple, object] = {}
    for pdu in tshark_pdus(run.path, run.ports):
        key = (pdu.frame, pdu.is_request, pdu.correlation_id)
        assert key not in theirs, f"two tshark messages at {key}"
        theirs[key] = pdu
    return run, ours, theirs


def pairs(name: str, tool: str):
    _, ours, theirs = both(name, tool)
    return [(ours[key], theirs[key], key[1]) for key in sorted(theirs)]


def clean(pdu) -> bool:
    """tshark knows the version and dissected the message to its end.

    Not clean, besides unknown versions: tshark 4.0.17 reads the non-flexible ``bytes`` fields of
    JoinGroup (protocol and member metadata) and SyncGroup (assignments) with a wrong length,
    shows them as <MISSING> and flags the message "does not end at the pdu length offset".  The
    clients on both ends (kafka-python, librdkafka) read the same bytes without trouble."""
    return not (pdu.unsupported_version or pdu.malformed or pdu.request_missing)


@pytest.mark.parametrize(("name", "tool"), RUNS, ids=RUN_IDS)
def test_tshark_and_kwire_find_the_same_messages(name, tool):
    _, ours, theirs = both(name, tool)
    assert theirs and set(ours) == set(theirs)


@pytest.mark.parametrize(("name", "tool"), RUNS, ids=RUN_IDS)
def test_headers_agree(name, tool):
    _, ours, theirs = both(name, tool)
    for ex, pdu, is_request in pairs(name, tool):
        where = (pdu.frame, pdu.correlation_id, ex.api, ex.api_version)
        assert pdu.length + 4 == (ex.request_bytes if is_request else ex.response_bytes), where
        if is_request:
            assert (pdu.api_key, pdu.api_version) == (ex.api_key, ex.api_version), where
            assert _text(pdu.get("kafka.client_id")) == ex.client_id, where
        elif pdu.request_missing:
            # tshark keeps no request of a version it does not know, so it cannot pair the response.
            request = theirs[(ex.request_frame, True, ex.correlation_id)]
            assert request.unsupported_version, where
        else:
            assert (pdu.api_key, pdu.api_version, pdu.int("kafka.request_frame")) == \
                (ex.api_key, ex.api_version, ex.request_frame), where


@cache
def compare_fields(name: str, tool: str) -> Counter:
    """Compare every clean message of a run field by field; how many were, per (api key, side)."""
    compared: Counter = Counter()
    for ex, pdu, is_request in pairs(name, tool):
        if pdu.unsupported_version or pdu.request_missing:
            continue
        side = "request" if is_request else "response"
        where = (pdu.frame, pdu.correlation_id, ex.api, ex.api_version, side)
        # The group fields come before any bytes field, so they hold even where tshark 4.0 loses its
        # way later in the message (see ``clean``).
        if is_request:
            _compare_group_request(ex, pdu, where)
        elif ex.api_key == JOIN_GROUP:
            assert pdu.int("kafka.error") == ex.error_code, where
            assert pdu.int("kafka.generation_id") == ex.generation, where
            assert pdu.top.get("kafka.member_id") == ex.member_id, where
            assert pdu.top.get("kafka.group_leader_id") == ex.details.get("leader"), where
        if not clean(pdu):
            continue
        if ex.api_key in PARTITIONED:
            _compare_partitions(ex, pdu, is_request, where)
        if not is_request:
            _compare_errors(ex, pdu, where)
        compared[(ex.api_key, side)] += 1
    return compared


@pytest.mark.parametrize(("name", "tool"), RUNS, ids=RUN_IDS)
def test_fields_agree_where_tshark_knows_the_version(name, tool):
    assert compare_fields(name, tool)


def test_the_oracle_compared_every_partitioned_api_both_ways():
    """The captures hold versions tshark knows for each API compared partition by partition, so the
    comparison really ran (a tshark or client upgrade that changes that fails here)."""
    compared = sum((compare_fields(name, tool) for name, tool in RUNS), Counter())
    for api_key in PARTITIONED:
        for side in ("request", "response"):
            assert compared[(api_key, side)] > 0, (api_key, side, compared)


def test_tshark_pairs_responses_to_the_requests_kwire_pairs():
    """Where tshark pairs a response itself (kafka.request_frame), it names the request kwire paired."""
    paired = 0
    for name, tool in RUNS:
        for ex, pdu, is_request in pairs(name, tool):
            if not is_request and pdu.get("kafka.request_frame") is not None:
                assert ex.status == ANSWERED and pdu.int("kafka.request_frame") == ex.request_frame
                paired += 1
    assert paired > 50


# -- comparisons -------------------------------------------------------------------------------


def _text(value: str | None) -> str | None:
    return None if value in (None, "[ Null ]") else value


def _int(part, name: str) -> int | None:
    value = part.first(name)
    return None if value is None else int(value)


def _compare_partitions(ex, pdu, is_request: bool, where) -> None:
    theirs = {(p.topic, p.partition): p for p in pdu.partitions}
    assert len(theirs) == len(pdu.partitions), where  # no partition listed twice
    ours = {(p.topic, p.partition): p for p in ex.partitions}
    key = ex.api_key
    if key == FETCH and is_request:
        # kwire keeps the partitions the response speaks of (with fetch sessions, fewer than the
        # request listed), each with the fetch offset the request asked for.
        if ex.status == ANSWERED:
            assert set(ours) <= set(theirs) or not theirs, where
        else:
            assert set(ours) == set(theirs), where
        for tp, p in ours.items():
            if tp in theirs:
                assert p.offset == _int(theirs[tp], "kafka.offset"), (where, tp)
        return
    if key == OFFSET_FETCH and is_request:
        assert set(theirs) <= set(ours) or not theirs, where  # a null topic list asks for every committed offset
        return
    if key == LIST_OFFSETS and is_request or key == OFFSET_COMMIT and not is_request:
        assert set(ours) == set(theirs), where
        if key == OFFSET_COMMIT:
            for tp, p in ours.items():
                assert p.error_code == _int(theirs[tp], "kafka.error"), (where, tp)
        return
    assert set(ours) == set(theirs), where
    for tp, p in ours.items():
        t = theirs[tp]
        if key == PRODUCE and is_request:
            if t.records is not None:  # None: tshark could not decompress the (legacy) message set
                assert p.records == t.records, (where, tp)
        elif key == PRODUCE:
            assert (p.error_code, p.offset) == (_int(t, "kafka.error"), _int(t, "kafka.offset")), (where, tp)
        elif key == FETCH:  # response: tshark's "Offset" of a partition is its high watermark
            assert (p.error_code, p.high_watermark, p.records) == \
                (_int(t, "kafka.error"), _int(t, "kafka.offset"), t.records), (where, tp)
        elif key == LIST_OFFSETS:  # response (v0 answers a list of offsets: kwire reports the first)
            assert (p.error_code, p.offset) == (_int(t, "kafka.error"), _int(t, "kafka.offset")), (where, tp)
        elif key == OFFSET_COMMIT:  # request
            assert p.offset == _int(t, "kafka.offset"), (where, tp)
        elif key == OFFSET_FETCH:  # response
            assert (p.offset, p.error_code) == (_int(t, "kafka.offset"), _int(t, "kafka.error")), (where, tp)


def _compare_group_request(ex, pdu, where) -> None:
    group = pdu.top.get("kafka.consumer_group")
    if group is not None:
        assert group == ex.group, where
    if ex.api_key in WITH_GENERATION and "kafka.generation_id" in pdu.top:
        assert pdu.int("kafka.generation_id") == ex.generation, where
    member = pdu.top.get("kafka.member_id")
    if member and ex.api_key != LEAVE_GROUP:  # LeaveGroup v3+ names its members in a list
        assert member == ex.member_id, where


def _compare_errors(ex, pdu, where) -> None:
    codes = [int(v) for v in pdu.fields.get("kafka.error", ())]
    named = Counter(error_name(c) for c in codes if c)
    assert named == Counter(ex.errors), where
    top = pdu.int("kafka.error") if "kafka.error" in pdu.top else 0
    first = top or next((c for c in codes if c), 0)
    assert ex.error_code == first, where


# -- MongoDB: DeepFlow's captures (no MongoDB server here to capture a real one) ---------------------

MONGO_CAPTURES = sorted((DEEPFLOW / "mongo").glob("*.pcap"))


@pytest.mark.parametrize("path", MONGO_CAPTURES, ids=[p.name for p in MONGO_CAPTURES])
def test_mongodb_messages_agree_with_tshark(path):
    exchanges, _ = decode_captures([path], AnalyzeOptions())
    assert exchanges
    ports = {int(ex.server.rsplit(":", 1)[1]) for ex in exchanges}
    ours = {}
    for ex in exchanges:
        ours[(ex.request_frame, ex.correlation_id, True)] = ex
        if ex.response_frame is not None:
            ours[(ex.response_frame, ex.correlation_id, False)] = ex
    theirs = {}
    for pdu in tshark_pdus(path, ports, "mongo"):
        is_request = pdu.dst_port in ports  # (a request id may be 0, like the responseTo of requests)
        key = (pdu.frame, pdu.int("mongo.request_id" if is_request else "mongo.response_to"), is_request)
        assert key not in theirs
        theirs[key] = pdu
    assert set(ours) == set(theirs)
    for (frame, _request_id, is_request), pdu in theirs.items():
        ex = ours[(frame, _request_id, is_request)]
        assert pdu.int("mongo.message_length") == (ex.request_bytes if is_request else ex.response_bytes), frame
        if is_request:
            assert pdu.int("mongo.opcode") == ex.api_key, frame
            collection = pdu.get("mongo.full_collection_name")  # OP_QUERY names "db.collection"
            if collection is not None:
                assert collection.split(".", 1)[0] == ex.database, frame
