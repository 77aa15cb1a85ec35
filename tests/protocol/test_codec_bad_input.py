"""Bad input: bytes that are not valid Kafka protocol, and values that cannot be encoded.

Whatever the bytes, decoding either gives a message or raises kwire's DecodeError (a ProtocolError)
that names the message, the version and the field path: never IndexError, struct.error,
ValueError, MemoryError, never a hang, never an allocation sized by a forged length prefix.
Unknown api keys and versions raise UnknownApiVersionError (a ProtocolError; Kafka's error code 35
is the unrelated KafkaError UnsupportedVersionError) naming both.  The frame splitter refuses
forged and negative sizes before buffering anything.
"""

from __future__ import annotations

import random
import struct
import time
import tracemalloc
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.protocol import (
    DecodeError,
    EncodeError,
    FrameSplitter,
    FrameTooLargeError,
    KafkaError,
    ProtocolError,
    UnknownApiVersionError,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    messages,
    request_class,
    response_class,
)
from kwire.protocol import correlation_id_of_response as correlation_id_of
from kwire.protocol._schema import MESSAGES
from kwire.protocol.schema import FIXED_TYPES, StructSpec
from tests.tiers import examples

from .strategies import all_message_versions, random_instance

pytestmark = pytest.mark.timeout(60)

ALL_PAIRS = all_message_versions()
PAIR_IDS = [f"{n}-v{v}" for n, v in ALL_PAIRS]
TAGGED = "(tagged fields)"


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _resolve(spec: StructSpec, path: list[str]):
    """The FieldSpec a decode error's path names (None for the tagged-field section), or fail."""
    f = None
    for i, part in enumerate(path):
        if part == TAGGED:
            assert i == len(path) - 1, path
            return None
        assert spec is not None, f"path {path} goes below a primitive field"
        matches = [g for g in spec.fields if g.attr == part]
        assert matches, f"path {path}: {spec.name} has no field {part!r}"
        f = matches[0]
        spec = f.struct
    return f


def check_decode_error(err: ProtocolError, cls, version: int, *, need_path: bool) -> None:
    """The error is kwire's, names the message and version, and its field path exists in the schema."""
    assert isinstance(err, DecodeError), type(err)
    assert err.what == cls.__name__ and err.version == version, (err.what, err.version)
    text = str(err)
    assert text.startswith(f"{cls.__name__} v{version}"), text
    if need_path or err.path:
        assert err.path, f"no field path in {text!r}"
        _resolve(cls.SPEC.struct, err.path)
        assert "field " + ".".join(err.path) in text, text


def decode_or_error(cls, version: int, data, *, need_path: bool = False):
    """Decode data: a message, or DecodeError (checked); anything else propagates and fails the test."""
    try:
        msg = cls.decode(data, version)
    except DecodeError as err:
        check_decode_error(err, cls, version, need_path=need_path)
        return None
    # Whatever decodes must encode, and reach a fixed point after one round (bools, nulls and
    # explicitly written defaults have one canonical form).
    again = msg.encode(version)
    assert cls.decode(again, version).encode(version) == again
    return msg


def _rich(cls, version: int, seed) -> bytes:
    rng = random.Random(f"{cls.__name__}-{version}-{seed}")
    return random_instance(cls, version, rng, rich=True, max_array=1).encode(version)


# ----------------------------------------------------------------------------- random bytes


@pytest.mark.parametrize(("name", "version"), ALL_PAIRS, ids=PAIR_IDS)
def test_random_bytes(name, version):
    cls = getattr(messages, name)
    rng = random.Random(f"random-{name}-{version}")
    for size in (0, 1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 64, 200):
        decode_or_error(cls, version, rng.randbytes(size))
    # Bytes that are mostly small numbers decode further before failing.
    for size in (6, 20, 40, 80):
        decode_or_error(cls, version, bytes(rng.choice((0, 0, 0, 1, 2, 0xFF)) for _ in range(size)))


@given(pair=st.sampled_from(ALL_PAIRS), data=st.binary(max_size=80))
@settings(max_examples=examples(1500), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_bytes_hypothesis(pair, data):
    name, version = pair
    decode_or_error(getattr(messages, name), version, data)


@given(data=st.binary(max_size=60))
@settings(max_examples=examples(800), deadline=None, database=None)
def test_random_frames(data):
    """Random request frames: a header and a request, or a ProtocolError (DecodeError/UnknownApiVersionError)."""
    try:
        decode_request(data)
    except ProtocolError as err:
        assert isinstance(err, (DecodeError, UnknownApiVersionError)), type(err)
    for api_key, version in ((3, 12), (18, 3), (0, 9)):
        try:
            decode_response(data, api_key, version)
        except ProtocolError as err:
            assert isinstance(err, DecodeError), type(err)


# ----------------------------------------------------------------------------- truncations


@pytest.mark.parametrize(("name", "version"), ALL_PAIRS, ids=PAIR_IDS)
def test_every_truncation(name, version):
    """Every proper prefix of a valid encoding is a DecodeError naming the message, version and field."""
    cls = getattr(messages, name)
    data = _rich(cls, version, "trunc")
    assert cls.decode(data, version).encode(version) == data
    for n in range(len(data)):
        for strict in (True, False):
            with pytest.raises(DecodeError) as info:
                cls.decode(data[:n], version, strict=strict)
            check_decode_error(info.value, cls, version, need_path=True)
            assert info.value.offset is not None and 0 <= info.value.offset <= n


def _truncation_problems(cls, version: int, data: bytes) -> list[str]:
    """Truncations inside a fixed-width field must name that field: its offset <= cut < offset + size."""
    problems = []
    for n in range(len(data)):
        try:
            cls.decode(data[:n], version)
        except DecodeError as err:
            f = _resolve(cls.SPEC.struct, err.path)
            if f is None or f.is_array or f.struct is not None or f.element not in FIXED_TYPES:
                continue
            size = FIXED_TYPES[f.element][1]
            if not err.offset <= n < err.offset + size:
                problems.append(f"{cls.__name__} v{version} cut at byte {n}: error names "
                                f"{'.'.join(err.path)} ({f.element}) at byte {err.offset}: {err}")
    return problems


def test_truncation_names_the_field_where_the_data_ends():
    """The hand-checked case: FindCoordinatorResponse v0 is ErrorCode int16, NodeId int32, Host string, Port int32."""
    cls = messages.FindCoordinatorResponse
    data = cls(error_code=1, node_id=7, host="h", port=9).encode(0)
    assert data == bytes.fromhex("0001" "00000007" "0001" "68" "00000009")
    for n, field, offset in [(0, "error_code", 0), (1, "error_code", 0), (2, "node_id", 2), (5, "node_id", 2),
                             (6, "host", 6), (9, "port", 9), (12, "port", 9)]:
        with pytest.raises(DecodeError) as info:
            cls.decode(data[:n], 0)
        assert info.value.path == [field], f"cut at {n}: {info.value}"
        if field != "host":
            assert info.value.offset == offset, f"cut at {n}: {info.value}"


def test_truncation_names_the_right_field_in_every_message():
    problems = []
    for name, version in ALL_PAIRS:
        cls = getattr(messages, name)
        problems += _truncation_problems(cls, version, _rich(cls, version, "trunc"))
    affected = sorted({p.split(" cut at")[0] for p in problems})
    assert not problems, (f"{len(problems)} truncations in {len(affected)} (message, version) pairs name another "
                          f"field than the one the data ends in, e.g.:\n" + "\n".join(problems[:8]))


def test_truncated_frames():
    req = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="topic")])
    frame = encode_request(req, 12, correlation_id=5, client_id="client")[4:]
    for n in range(len(frame)):
        with pytest.raises(DecodeError) as info:
            decode_request(frame[:n])
        assert info.value.what in ("RequestHeader", "MetadataRequest"), str(info.value)
    resp = messages.MetadataResponse(brokers=[messages.MetadataResponse.MetadataResponseBroker(node_id=1, host="h")])
    frame = encode_response(resp, 12, correlation_id=5)[4:]
    for n in range(len(frame)):
        with pytest.raises(DecodeError):
            decode_response(frame[:n], 3, 12)
    for n in range(4):
        with pytest.raises(DecodeError):
            correlation_id_of(frame[:n])
    assert correlation_id_of(frame) == 5


# ----------------------------------------------------------------------------- mutations and forged lengths


def _mutation_pairs():
    """Each api's newest version, its first flexible version and its oldest, plus every header and data message."""
    chosen = set()
    for name in {n for n, _ in ALL_PAIRS}:
        cls = getattr(messages, name)
        chosen.add((name, cls.MIN_VERSION))
        chosen.add((name, cls.MAX_VERSION))
        flex = [v for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1) if cls.SPEC.is_flexible(v)]
        if flex:
            chosen.add((name, flex[0]))
    return sorted(chosen)


MUTATION_PAIRS = _mutation_pairs()


def _newest_in_the_fast_tier(pairs: list[tuple[str, int]], kinds: tuple[str, ...]) -> list:
    """The pairs as parameters: the newest version of each message of the given kinds in both
    tiers, the others marked slow (``make test`` only).  These sweeps are the codec's longest tests
    (a forged length at every offset runs under tracemalloc: minutes in all); the day-to-day tier
    keeps the versions clients send most."""
    return [pytest.param(name, version, id=f"{name}-v{version}",
                         marks=() if version == getattr(messages, name).MAX_VERSION
                         and MESSAGES[name]["type"] in kinds else pytest.mark.slow)
            for name, version in pairs]


# In the fast tier only requests, what a broker reads from anyone ("a server never dies of one bad
# request"); responses and stored records (two thirds of these sweeps' time) in make test.
MUTATION_PARAMS = FORGERY_PARAMS = _newest_in_the_fast_tier(MUTATION_PAIRS, ("request",))


@pytest.mark.parametrize(("name", "version"), MUTATION_PARAMS)
def test_single_byte_mutations(name, version):
    cls = getattr(messages, name)
    data = _rich(cls, version, "mutate")
    for i in range(len(data)):
        for value in {0x00, 0x01, 0x7F, 0x80, 0xFF, data[i] ^ 0x01, data[i] ^ 0x40}:
            mutated = data[:i] + bytes([value]) + data[i + 1:]
            decode_or_error(cls, version, mutated)


FORGERIES = [
    ("int32 0x7fffffff", b"\x7f\xff\xff\xff", 4),
    ("int32 0x80000000", b"\x80\x00\x00\x00", 4),
    ("int16 0x7fff", b"\x7f\xff", 2),
    ("int16 -2", b"\xff\xfe", 2),
    ("uvarint 2^32", _uvarint(2**32), 1),
    ("uvarint 2^31", _uvarint(2**31), 1),
    ("uvarint 2^35-1", b"\xff\xff\xff\xff\x7f", 1),
    ("uvarint 6 bytes", b"\x80\x80\x80\x80\x80\x01", 1),
    ("uvarint 100000", _uvarint(100000), 1),
]


@pytest.mark.parametrize(("name", "version"), FORGERY_PARAMS)
def test_forged_lengths_everywhere(name, version):
    """A forged length written at every offset of a valid encoding: quick failure, nothing big allocated."""
    cls = getattr(messages, name)
    data = _rich(cls, version, "forge")
    inputs = [data[:i] + forged + data[i + width:] for i in range(len(data)) for _, forged, width in FORGERIES]
    start = time.perf_counter()
    tracemalloc.start()
    try:
        for forged in inputs:
            decode_or_error(cls, version, forged)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes decoding {len(inputs)} inputs of at most {len(data) + 5} bytes"
    assert time.perf_counter() - start < 30


def _peak_of_failed_decode(cls, version: int, data: bytes) -> tuple[DecodeError, int]:
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as info:
            cls.decode(data, version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return info.value, peak


HUGE = [
    # (case, class, version, 20-ish bytes, expected path)
    ("2 GiB struct array", "MetadataRequest", 1, b"\x7f\xff\xff\xff" + bytes(16), ["topics"]),
    ("2 GiB bytes", "SaslAuthenticateRequest", 0, b"\x7f\xff\xff\xff" + bytes(16), ["auth_bytes"]),
    ("2 GiB int32 array", "ElectLeadersRequest", 0,
     struct.pack(">ihci", 1, 1, b"t", 0x7FFFFFFF) + bytes(9), ["topic_partitions", "partitions"]),
    ("2 GiB string array", "DescribeConfigsRequest", 0,
     struct.pack(">ibhci", 1, 2, 1, b"t", 0x7FFFFFFF) + bytes(8), ["resources", "configuration_keys"]),
    ("int32 array of 100 in 8 bytes", "ElectLeadersRequest", 0,
     struct.pack(">ihci", 1, 1, b"t", 100) + bytes(8), ["topic_partitions", "partitions"]),
    ("string of 0x7fff", "FindCoordinatorRequest", 0, b"\x7f\xff" + b"abc" + bytes(15), ["key"]),
    ("compact array of 2^32", "MetadataRequest", 9, _uvarint(2**32) + bytes(15), ["topics"]),
    ("compact array of 2^31", "MetadataRequest", 12, _uvarint(2**31) + bytes(15), ["topics"]),
    ("compact string of 2^32", "FindCoordinatorRequest", 3, _uvarint(2**32) + bytes(15), ["key"]),
    ("compact bytes of 2^32", "SaslAuthenticateRequest", 2, _uvarint(2**32) + bytes(15), ["auth_bytes"]),
    ("compact bytes of 2^35-1", "SaslAuthenticateRequest", 2, b"\xff\xff\xff\xff\x7f" + bytes(15), ["auth_bytes"]),
    ("varint of 6 bytes", "SaslAuthenticateRequest", 2, b"\x80" * 6 + bytes(14), ["auth_bytes"]),
    ("2^32 tagged fields", "ApiVersionsRequest", 3, b"\x01\x01" + _uvarint(2**32) + bytes(13), [TAGGED]),
    ("tagged field of 2^32 bytes", "ApiVersionsRequest", 3,
     b"\x01\x01\x01\x05" + _uvarint(2**32) + bytes(11), [TAGGED]),
    ("tag 2^32", "ApiVersionsRequest", 3, b"\x01\x01\x01" + _uvarint(2**32) + b"\x00" + bytes(10), None),
]


@pytest.mark.parametrize(("case", "name", "version", "data", "path"), HUGE, ids=[h[0] for h in HUGE])
def test_forged_huge_lengths(case, name, version, data, path):
    cls = getattr(messages, name)
    err, peak = _peak_of_failed_decode(cls, version, data)
    check_decode_error(err, cls, version, need_path=path is not None)
    if path is not None:
        assert err.path == path, str(err)
    assert peak < 64 * 1024, f"{case}: decoding {len(data)} bytes peaked at {peak} bytes"


def test_null_where_not_nullable():
    for name, version, data, path in [
        ("MetadataRequest", 0, b"\xff\xff\xff\xff", ["topics"]),  # nullable from v1 only
        ("FindCoordinatorRequest", 0, b"\xff\xff", ["key"]),
        ("FindCoordinatorRequest", 3, b"\x00\x00\x00", ["key"]),  # compact null
        ("SaslAuthenticateRequest", 0, b"\xff\xff\xff\xff", ["auth_bytes"]),
        ("FindCoordinatorRequest", 4, b"\x00\x00\x00", ["coordinator_keys"]),  # key type, compact null, no tags
    ]:
        cls = getattr(messages, name)
        with pytest.raises(DecodeError) as info:
            cls.decode(data, version)
        check_decode_error(info.value, cls, version, need_path=True)
        assert info.value.path[: len(path)] == path, str(info.value)
        assert "null" in str(info.value)


def test_invalid_utf8():
    with pytest.raises(DecodeError) as info:
        messages.FindCoordinatorRequest.decode(b"\x00\x02\xff\xfe", 0)
    assert info.value.path == ["key"] and "UTF-8" in str(info.value)


def test_tagged_field_size_that_does_not_match_its_content():
    cls = messages.ApiVersionsResponse  # v3: FinalizedFeaturesEpoch is tag 1, an int64
    head = struct.pack(">h", 0) + b"\x01" + struct.pack(">i", 0)
    good = head + b"\x01\x01\x08" + struct.pack(">q", 42)
    assert cls.decode(good, 3).finalized_features_epoch == 42
    for bad in (head + b"\x01\x01\x04" + struct.pack(">q", 42),  # says 4, the int64 takes 8
                head + b"\x01\x01\x09" + struct.pack(">q", 42) + b"\x00"):  # says 9
        with pytest.raises(DecodeError) as info:
            cls.decode(bad, 3)
        check_decode_error(info.value, cls, 3, need_path=True)
        assert info.value.path == ["finalized_features_epoch"], str(info.value)


def test_error_after_a_known_tagged_field_names_the_tag_section():
    """A tag header that fails after a known tagged field was read is not that field's error."""
    cls = messages.ApiVersionsResponse  # v3: FinalizedFeaturesEpoch is tag 1 (int64), FinalizedFeatures tag 2
    head = struct.pack(">h", 0) + b"\x01" + struct.pack(">i", 0)
    epoch = b"\x01\x08" + struct.pack(">q", 42)
    for bad in (head + b"\x02" + epoch + b"\x02\x7f",  # tag 2 claims 127 bytes, none follow
                head + b"\x02" + epoch + b"\x02",  # tag 2 has no size
                head + b"\x02" + epoch):  # the second tag is missing
        with pytest.raises(DecodeError) as info:
            cls.decode(bad, 3)
        check_decode_error(info.value, cls, 3, need_path=True)
        assert info.value.path == [TAGGED], str(info.value)


def test_trailing_bytes():
    data = messages.MetadataRequest().encode(12)
    with pytest.raises(DecodeError) as info:
        messages.MetadataRequest.decode(data + b"\x00", 12)
    assert "MetadataRequest v12" in str(info.value)
    assert messages.MetadataRequest.decode(data + b"\x00", 12, strict=False) == messages.MetadataRequest()


# ----------------------------------------------------------------------------- unknown api keys and versions


def _frame(api_key: int, version: int) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, 1) + b"c" + bytes(8)


def _check_unsupported(err: BaseException, *needles: str) -> None:
    assert isinstance(err, UnknownApiVersionError), type(err)
    assert isinstance(err, ProtocolError), f"UnknownApiVersionError is not a ProtocolError: {type(err).__mro__}"
    for needle in needles:
        assert needle in str(err), f"{needle!r} not in {str(err)!r}"


def test_unknown_api_version_error_is_a_protocol_error():
    """kwire's own error, not Kafka's error code 35 (UNSUPPORTED_VERSION, a KafkaError a broker sends)."""
    assert issubclass(UnknownApiVersionError, ProtocolError)
    assert not issubclass(UnknownApiVersionError, KafkaError)
    assert KafkaError.for_code(35).name == "UNSUPPORTED_VERSION"
    err = UnknownApiVersionError("no version 99", what="MetadataRequest", version=99)
    assert "MetadataRequest" in str(err)


@pytest.mark.parametrize("call", [
    lambda: request_class(999),
    lambda: response_class(999),
    lambda: request_class(-1),
], ids=["request_class", "response_class", "negative"])
def test_unknown_api_key(call):
    with pytest.raises(Exception) as info:  # noqa: B017 - the type is checked below, to report it
        call()
    _check_unsupported(info.value)
    assert "999" in str(info.value) or "-1" in str(info.value)


@pytest.mark.parametrize("case", [
    "decode", "encode", "decode_request", "decode_request_unknown_key", "decode_response",
    "decode_response_unknown_key", "encode_request", "encode_response"])
def test_unknown_version_names_api_and_version(case):
    calls = {
        "decode": (lambda: messages.MetadataRequest.decode(b"", 77), ("MetadataRequest", "77")),
        "encode": (lambda: messages.MetadataRequest().encode(77), ("MetadataRequest", "77")),
        "decode_request": (lambda: decode_request(_frame(3, 77)), ("Metadata", "77")),
        "decode_request_unknown_key": (lambda: decode_request(_frame(999, 77)), ("999", "77")),
        "decode_response": (lambda: decode_response(b"\0\0\0\1", 3, 77), ("Metadata", "77")),
        "decode_response_unknown_key": (lambda: decode_response(b"\0\0\0\1", 999, 77), ("999", "77")),
        "encode_request": (lambda: encode_request(messages.MetadataRequest(), 77, 1), ("Metadata", "77")),
        "encode_response": (lambda: encode_response(messages.MetadataResponse(), 77, 1), ("Metadata", "77")),
    }
    call, needles = calls[case]
    with pytest.raises(Exception) as info:  # noqa: B017 - the type is checked below, to report it
        call()
    _check_unsupported(info.value, *needles)


def test_header_of_an_unknown_api_is_still_read():
    """A broker must answer unknown apis with UNSUPPORTED_VERSION, so it needs their header."""
    frame = struct.pack(">hhih", 999, 77, 12345, 6) + b"client" + b"body"
    header, offset = decode_request_header(frame)
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (
        999, 77, 12345, "client")
    assert frame[offset:] == b"body"
    for n in range(8):
        with pytest.raises(DecodeError):
            decode_request_header(frame[:n])


# ----------------------------------------------------------------------------- values that cannot be encoded


class _Opaque:
    """A value of no Kafka type: no len(), no encode(), no bytes, not an int."""


def _bad_value_cases():
    for name, version in ALL_PAIRS:
        cls = getattr(messages, name)
        for f in cls.SPEC.struct.fields:
            if f.present(version) and f.element != "bool":  # struct packs any object as a bool
                yield cls, version, f


def test_wrong_types_are_encode_errors_naming_the_field():
    problems = []
    count = 0
    for cls, version, f in _bad_value_cases():
        count += 1
        try:
            cls(**{f.attr: _Opaque()}).encode(version)
        except EncodeError as err:
            # A struct-valued field may add the nested field that failed: the path starts with the field.
            if err.path[:1] != [f.attr] or f"{cls.__name__} v{version}" not in str(err):
                problems.append(f"{cls.__name__} v{version} {f.attr}: {err} (path {err.path})")
        except Exception as err:  # noqa: BLE001 - reported below
            problems.append(f"{cls.__name__} v{version} {f.attr}: {type(err).__name__}: {err}")
        else:
            problems.append(f"{cls.__name__} v{version} {f.attr}: encoded an object of no Kafka type")
    assert not problems, f"{len(problems)} of {count} cases:\n" + "\n".join(problems[:10])


@pytest.mark.parametrize(("name", "version", "kwargs", "path"), [
    ("FindCoordinatorResponse", 0, {"error_code": 2**15}, ["error_code"]),
    ("FindCoordinatorResponse", 0, {"node_id": 2**31}, ["node_id"]),
    ("FindCoordinatorResponse", 0, {"port": -(2**31) - 1}, ["port"]),
    ("FindCoordinatorResponse", 0, {"host": None}, ["host"]),
    ("FindCoordinatorResponse", 0, {"host": b"bytes"}, ["host"]),
    ("MetadataRequest", 0, {"topics": None}, ["topics"]),
    ("MetadataRequest", 1, {"topics": [None]}, ["topics"]),
    ("SaslAuthenticateRequest", 0, {"auth_bytes": "text"}, ["auth_bytes"]),
    ("SaslAuthenticateRequest", 2, {"auth_bytes": None}, ["auth_bytes"]),
    ("ApiVersionsRequest", 3, {"unknown_tags": {-1: b""}}, None),
    ("ApiVersionsRequest", 3, {"unknown_tags": {1: "text"}}, None),
    ("DescribeClusterResponse", 0, {"cluster_id": "c", "throttle_time_ms": 1.5}, ["throttle_time_ms"]),
    ("ProduceRequest", 13, {"topic_data": [messages.ProduceRequest.TopicProduceData(topic_id="not a uuid")]},
     ["topic_data", "topic_id"]),
    ("ElectLeadersRequest", 0, {"topic_partitions": [
        messages.ElectLeadersRequest.TopicPartitions(topic="t", partitions=[1, 2**31])]},
     ["topic_partitions", "partitions"]),
])
def test_bad_values(name, version, kwargs, path):
    cls = getattr(messages, name)
    with pytest.raises(EncodeError) as info:
        cls(**kwargs).encode(version)
    assert f"{name} v{version}" in str(info.value)
    if path is not None:  # the path starts with the field holding the bad value (a None element may add its field)
        assert info.value.path[: len(path)] == path, str(info.value)


def test_uuid_fields_take_uuids():
    topic = messages.ProduceRequest.TopicProduceData(topic_id=uuid.UUID(int=1))
    data = messages.ProduceRequest(topic_data=[topic]).encode(13)
    assert messages.ProduceRequest.decode(data, 13).topic_data[0].topic_id == uuid.UUID(int=1)


# ----------------------------------------------------------------------------- the frame splitter


def _frames(bodies):
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


BODIES = [b"", b"a", b"hello", bytes(range(256)) * 3, b"\x00\x00\x00\x05", b""]


def test_splitter_byte_at_a_time():
    splitter = FrameSplitter(max_frame_size=1024)
    got = []
    for byte in _frames(BODIES):
        got += splitter.feed(bytes([byte]))
    assert got == BODIES
    assert splitter.buffered == 0


@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(1, 30), min_size=1))
@settings(max_examples=examples(200), deadline=None, database=None)
def test_splitter_any_chunking(bodies, cuts):
    stream = _frames(bodies)
    splitter = FrameSplitter(max_frame_size=64)
    got, pos, i = [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        chunk = stream[pos:pos + step]
        got += splitter.feed(memoryview(chunk) if i % 2 else bytearray(chunk))
        pos += step
        i += 1
    assert got == bodies
    assert splitter.buffered == 0


def test_splitter_keep_prefix_and_partial_input():
    splitter = FrameSplitter(max_frame_size=100, keep_prefix=True)
    assert splitter.feed(b"\x00\x00") == []
    assert splitter.feed(b"\x00\x03ab") == []
    assert splitter.buffered == 6
    assert splitter.feed(b"c\x00") == [b"\x00\x00\x00\x03abc"]
    assert splitter.buffered == 1


@pytest.mark.parametrize("size", [0x7FFFFFFF, 101, 2**31 - 4])
def test_splitter_refuses_a_forged_size(size):
    splitter = FrameSplitter(max_frame_size=100)
    assert splitter.feed(struct.pack(">i", 100) + bytes(100)) == [bytes(100)]  # the maximum itself is fine
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLargeError) as info:
            splitter.feed(struct.pack(">i", size) + b"xyz")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(info.value, DecodeError) and isinstance(info.value, ProtocolError)
    assert str(size) in str(info.value)
    assert peak < 64 * 1024
    with pytest.raises(FrameTooLargeError):  # the stream is out of sync: refused from now on
        splitter.feed(b"\x00\x00\x00\x01a")


@pytest.mark.parametrize("size", [-1, -2, -(2**31)])
def test_splitter_refuses_a_negative_size(size):
    splitter = FrameSplitter(max_frame_size=100)
    with pytest.raises(DecodeError) as info:
        splitter.feed(struct.pack(">i", size))
    assert "negative" in str(info.value)
    with pytest.raises(DecodeError):
        splitter.feed(b"\x00\x00\x00\x00")


def test_splitter_size_including_its_prefix():
    """MongoDB's layout: little-endian size that counts itself; a size under 4 is invalid."""
    splitter = FrameSplitter(max_frame_size=100, byteorder="little", size_includes_prefix=True)
    assert splitter.feed(struct.pack("<i", 7) + b"abc") == [b"abc"]
    with pytest.raises(DecodeError):
        splitter.feed(struct.pack("<i", 3))


def test_splitter_does_not_reserve_memory_for_an_allowed_big_frame():
    splitter = FrameSplitter()  # default maximum: 100 MiB
    tracemalloc.start()
    try:
        assert splitter.feed(struct.pack(">i", 100 * 1024 * 1024) + b"start") == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    assert splitter.buffered == 9


def test_a_forbidden_null_array_is_an_error_unless_forgiven():
    # OffsetFetchResponse v6 (flexible): throttle_time_ms, topics as a null compact array (length
    # 0 = null), error_code, no tags: what librdkafka's mock broker answers a whole-group fetch.
    from kwire.protocol import messages
    from kwire.protocol.errors import DecodeError

    codec = messages.OffsetFetchResponse.codec(6)
    data = struct.pack(">i", 0) + b"\x00" + struct.pack(">h", 0) + b"\x00"
    with pytest.raises(DecodeError, match="field topics.*null array in a field that is not nullable"):
        codec.decode(data)
    with pytest.raises(DecodeError, match="null array"):
        codec.decode(data, strict=False)  # trailing bytes allowed is not nulls forgiven
    response, end = codec.decode(data, forgive_null_arrays=True)
    assert (response.topics, response.error_code, end) == ([], 0, len(data))
    # Forgiving does not mean anything goes: a truncated message still fails.
    with pytest.raises(DecodeError):
        codec.decode(data[:-2], forgive_null_arrays=True)
