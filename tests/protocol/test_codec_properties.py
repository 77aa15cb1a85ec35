"""Properties of kwire's codec over every message class and version, from random valid instances.

* decode(encode(x)) == x and encode(decode(b)) == b, for every (class, version) kwire knows,
  requests, responses, headers and data messages alike (see strategies.py for what "random" covers);
* the same through whole frames (size prefix + header + body) for requests and responses;
* a field absent in a version: a non-default value is an EncodeError naming the field, unless the
  field is ignorable, in which case it is silently left out;
* string limits count UTF-8 bytes; NaN payloads survive a round trip bit for bit.
"""

from __future__ import annotations

import math
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.protocol import (
    EncodeError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    messages,
    request_header_version,
    response_header_version,
)
from kwire.protocol.messages import Request, Response
from kwire.protocol.schema import API_KEYS, FieldSpec, StructSpec
from tests.tiers import examples

from .strategies import INT_RANGES, all_message_versions, message_strategy

ALL_PAIRS = all_message_versions()

ROUND_TRIP = settings(max_examples=examples(10), deadline=None, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                             HealthCheck.filter_too_much])


def test_every_message_version_is_covered():
    assert len(ALL_PAIRS) >= 706
    assert len(all_message_versions(("request", "response"))) >= 686


def _check_frame(cls, version, msg, correlation_id, client_id):
    if issubclass(cls, Request):
        frame = encode_request(msg, version, correlation_id, client_id=client_id)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        api_key, api_version, cid = struct.unpack(">hhi", frame[4:12])
        assert (api_key, api_version, cid) == (cls.API_KEY, version, correlation_id)
        header, body = decode_request(frame[4:])
        assert (header.request_api_key, header.request_api_version, header.correlation_id) == (
            cls.API_KEY, version, correlation_id)
        if request_header_version(cls.API_KEY, version) >= 1:
            assert header.client_id == client_id
        assert body == msg
        assert frame.endswith(msg.encode(version))
    elif issubclass(cls, Response):
        frame = encode_response(msg, version, correlation_id)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        assert struct.unpack(">i", frame[4:8])[0] == correlation_id
        header, body = decode_response(frame[4:], cls.API_KEY, version)
        assert header.correlation_id == correlation_id
        assert body == msg
        hv = response_header_version(cls.API_KEY, version)
        assert frame == frame[:8] + (b"\0" if hv == 1 else b"") + msg.encode(version)


@pytest.mark.parametrize(("name", "version"), ALL_PAIRS, ids=[f"{n}-v{v}" for n, v in ALL_PAIRS])
def test_round_trip(name, version):
    cls = getattr(messages, name)

    @ROUND_TRIP
    @given(msg=message_strategy(cls, version), correlation_id=st.integers(-(2**31), 2**31 - 1),
           client_id=st.one_of(st.none(), st.text(st.characters(codec="utf-8"), max_size=10)))
    def check(msg, correlation_id, client_id):
        data = msg.encode(version)
        assert isinstance(data, bytes)
        decoded = cls.decode(data, version)
        assert decoded == msg
        assert decoded.encode(version) == data
        assert cls.decode(bytearray(data), version) == msg
        assert cls.decode(memoryview(data), version) == msg
        assert cls.from_dict(msg.to_dict()) == msg
        _check_frame(cls, version, msg, correlation_id, client_id)

    check()


def test_header_versions_follow_kafkas_rules():
    for api_key in API_KEYS:
        req, resp = messages.request_class(api_key), messages.response_class(api_key)
        for v in range(req.MIN_VERSION, req.MAX_VERSION + 1):
            expected = 0 if (api_key, v) == (7, 0) else (2 if req.SPEC.is_flexible(v) else 1)
            assert request_header_version(api_key, v) == expected, (api_key, v)
            expected = 0 if api_key == 18 else (1 if resp.SPEC.is_flexible(v) else 0)
            assert response_header_version(api_key, v) == expected, (api_key, v)


def test_controlled_shutdown_v0_frame_has_header_v0():
    """ControlledShutdown v0 is the one request whose header has no client id (header v0)."""
    req = messages.ControlledShutdownRequest(broker_id=3)
    frame = encode_request(req, 0, correlation_id=9)
    assert frame == struct.pack(">ihhii", 12, 7, 0, 9, 3)
    header, body = decode_request(frame[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (7, 0, 9)
    assert body == req


# ----------------------------------------------------------------------------- absent fields


def _non_default(f: FieldSpec):
    """A value of f's type that differs from f's default."""
    default = f.default()
    if f.is_array:
        if default is None:
            return []
        if f.struct is not None:
            return [f.struct.python_class()()]
        return [_non_default_scalar(f.element, None)]
    if f.struct is not None:
        return f.struct.python_class()() if default is None else None
    return _non_default_scalar(f.element, default)


def _non_default_scalar(t: str, default):
    if t in INT_RANGES:
        return 1 if default != 1 else 2
    return {
        "bool": not default,
        "float64": 1.5 if default != 1.5 else 2.5,
        "string": "x" if default != "x" else "y",
        "bytes": b"x",
        "records": b"x",
        "uuid": uuid.UUID(int=1),
    }[t]


def _absent_cases(spec: StructSpec, version: int, path: tuple[FieldSpec, ...] = ()):
    """(path, leaf) for every field absent in version, in every struct reachable through present fields."""
    for f in spec.fields:
        if not f.present(version):
            yield path, f
        elif f.struct is not None:
            yield from _absent_cases(f.struct, version, (*path, f))


def _build(spec: StructSpec, path: tuple[FieldSpec, ...], leaf: FieldSpec, value):
    cls = spec.python_class()
    if not path:
        return cls(**{leaf.attr: value})
    head, rest = path[0], path[1:]
    sub = _build(head.struct, rest, leaf, value)
    return cls(**{head.attr: [sub] if head.is_array else sub})


MESSAGE_NAMES = sorted({n for n, _ in ALL_PAIRS})


@pytest.mark.parametrize("name", MESSAGE_NAMES)
def test_absent_field_with_a_value(name):
    """Non-default value in a field the version lacks: EncodeError naming it, or dropped if ignorable."""
    cls = getattr(messages, name)
    problems = []
    checked = 0
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
        for path, leaf in _absent_cases(cls.SPEC.struct, version):
            checked += 1
            where = ".".join([p.attr for p in path] + [leaf.attr])
            msg = _build(cls.SPEC.struct, path, leaf, _non_default(leaf))
            if leaf.ignorable:
                try:
                    data = msg.encode(version)
                except EncodeError as e:
                    problems.append(f"v{version} {where}: ignorable field raised {e}")
                    continue
                plain = _build(cls.SPEC.struct, path, leaf, leaf.default())
                if data != plain.encode(version):
                    problems.append(f"v{version} {where}: ignorable field changed the bytes")
                continue
            try:
                msg.encode(version)
            except EncodeError as e:
                text = str(e)
                if e.path != [p.attr for p in path] + [leaf.attr] or where not in text or name not in text \
                        or f"v{version}" not in text:
                    problems.append(f"v{version} {where}: error does not name the field: {text!r} path={e.path}")
            else:
                problems.append(f"v{version} {where}: non-ignorable absent field with a value was encoded")
    assert not problems, f"{len(problems)} of {checked} absent-field cases wrong:\n" + "\n".join(problems[:30])


def test_absent_field_examples():
    # MetadataRequest.AllowAutoTopicCreation appears in v4 and is not ignorable.
    req = messages.MetadataRequest(allow_auto_topic_creation=False)
    with pytest.raises(EncodeError) as err:
        req.encode(3)
    assert err.value.path == ["allow_auto_topic_creation"]
    assert "MetadataRequest v3" in str(err.value) and "allow_auto_topic_creation" in str(err.value)
    assert messages.MetadataRequest.decode(req.encode(4), 4) == req
    # Nested: OffsetCommitRequest.Topics[].Partitions[].CommitTimestamp exists in v1 only.
    topic_cls = messages.OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic_cls.OffsetCommitRequestPartition(partition_index=1, committed_offset=5, commit_timestamp=1234)
    req = messages.OffsetCommitRequest(group_id="g", topics=[topic_cls(name="t", partitions=[part])])
    assert messages.OffsetCommitRequest.decode(req.encode(1), 1) == req
    with pytest.raises(EncodeError) as err:
        req.encode(2)
    assert err.value.path == ["topics", "partitions", "commit_timestamp"]
    assert "OffsetCommitRequest v2" in str(err.value) and "topics.partitions.commit_timestamp" in str(err.value)
    # The default value in an absent field loses nothing: no error.
    part.commit_timestamp = -1
    assert messages.OffsetCommitRequest.decode(req.encode(2), 2) == req
    # Ignorable: MetadataRequest.Topics[].TopicId (v10+) is silently left out of older versions.
    topic = messages.MetadataRequest.MetadataRequestTopic(name="t", topic_id=uuid.UUID(int=7))
    assert messages.MetadataRequest(topics=[topic]).encode(9) == messages.MetadataRequest(
        topics=[messages.MetadataRequest.MetadataRequestTopic(name="t")]).encode(9)


# ----------------------------------------------------------------------------- strings and floats


def test_string_limit_counts_utf8_bytes():
    cls = messages.FindCoordinatorRequest  # v0-2: key is a non-compact string (int16 length)
    ok = cls(key="é" * (0x7FFF // 2) + "a")  # 32767 bytes, 16384 characters
    assert len(ok.key.encode()) == 0x7FFF
    assert cls.decode(ok.encode(2), 2) == ok
    too_long = cls(key="é" * 16384)  # 32768 bytes in 16384 characters
    with pytest.raises(EncodeError) as err:
        too_long.encode(2)
    assert err.value.path == ["key"] and "FindCoordinatorRequest v2" in str(err.value)
    # Compact strings (v3+) have a uvarint length and no such limit.
    big = cls(key="é" * 40000)
    assert cls.decode(big.encode(3), 3) == big


def test_unencodable_string_is_an_encode_error():
    with pytest.raises(EncodeError) as err:
        messages.FindCoordinatorRequest(key="\ud800").encode(2)  # a lone surrogate has no UTF-8 form
    assert err.value.path == ["key"]


NAN_BITS = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF4000000000000, 0x7FFFFFFFFFFFFFFF]


@pytest.mark.parametrize("bits", NAN_BITS, ids=hex)
def test_nan_payloads_round_trip_bit_for_bit(bits):
    cls = messages.DescribeClientQuotasResponse
    entry_cls = cls.EntryData
    for version in (0, 1):
        value = struct.unpack(">d", struct.pack(">Q", bits))[0]
        msg = cls(entries=[entry_cls(values=[entry_cls.ValueData(key="k", value=value)])])
        data = msg.encode(version)
        assert struct.pack(">Q", bits) in data
        decoded = cls.decode(data, version)
        assert math.isnan(decoded.entries[0].values[0].value)
        assert decoded.encode(version) == data


@given(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, 1]))
@settings(max_examples=examples(200), deadline=None, database=None)
def test_float64_round_trips_bit_for_bit(value, version):
    cls = messages.AlterClientQuotasRequest
    entry_cls = cls.EntryData
    msg = cls(entries=[entry_cls(ops=[entry_cls.OpData(key="k", value=value)])])
    data = msg.encode(version)
    back = cls.decode(data, version).entries[0].ops[0].value
    assert struct.pack(">d", back) == struct.pack(">d", value)


def test_field_tags_are_integers():
    """FieldSpec.tag is an int (tagged fields are ordered and compared by it); Kafka's json has a few as strings."""
    wrong = []
    for name in MESSAGE_NAMES:
        for spec in getattr(messages, name).SPEC.struct.walk():
            wrong += [f"{name}.{spec.name}.{f.name}: {f.tag!r}" for f in spec.fields
                      if f.tag is not None and type(f.tag) is not int]
    assert not wrong, wrong
