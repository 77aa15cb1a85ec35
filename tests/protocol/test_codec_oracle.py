"""kwire's message codec checked against an implementation nobody here wrote: kafka-python 3.0.12.

kafka-python 3.x builds its request and response classes from Kafka's JSON message definitions
(``kafka/protocol/schemas/resources``) with its own field codecs and code generator, so it is an
independent reading of the same wire format.  For every (api key, version, direction) that both
libraries speak:

* kwire -> kafka-python: random kwire instances (hypothesis, from kwire's schema) are encoded by
  kwire and decoded by kafka-python to the same values; kafka-python re-encodes them to kwire's
  exact bytes.
* kafka-python -> kwire: messages built from kafka-python's schema with a seeded random generator
  are encoded by kafka-python and decoded by kwire to the same values; kwire re-encodes them to
  kafka-python's exact bytes.
* whole frames: size prefix, request/response header (correlation id, client id) and body, byte
  for byte, both ways.

Values are compared in a neutral form keyed by Kafka's own field names (kafka-python's attribute
names differ: ``SASLAuthBytes`` -> ``s_a_s_l_auth_bytes``, and a few fields are renamed by
kafka-python's json patches), with kafka-python's representation choices mapped: the zero UUID is
``None`` there, authorized-operations int32s are sets of bits, unknown tags are ``{"_<tag>": bytes}``.

Known kafka-python deviations, shown concretely by the ``test_kafka_python_deviation_*`` tests and
worked around narrowly (never by skipping an api/version pair):

1. kafka-python cannot read or write tagged fields inside a struct that is itself a tagged field
   (it decodes those structs with an empty tag section asserted).  kwire instances sent to
   kafka-python carry no unknown tags inside tagged structs; everything else still has them.
2. kafka-python never writes unknown tags it decoded, so its re-encoding is compared with kwire's
   bytes only for instances without unknown tags (the decoded values are compared for all).
3. ``ApiVersionsResponse.decode`` switches to version 0 when the error code is non-zero (a client
   workaround, not the codec); the oracle calls kafka-python's generic body decoder instead.
4. kafka-python writes a tagged struct field whenever it is not ``None``, even when it equals the
   struct's defaults; Kafka's generated code (and kwire) leave such a field out.  Both readings give the
   same values, but the bytes differ, so kafka-python-built messages never set a tagged struct to its
   defaults (it is left unset instead, which both libraries read as the defaults).

kafka-python lowers the minimum version of every message to 0 (its json files are Kafka 4.x's, which
still describe the fields of the versions KIP-896 removed), so the oracle covers 0..max of both.
"""

from __future__ import annotations

import io
import random
import struct
import uuid
import warnings
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.protocol import (
    ProtocolError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    messages,
    request_class,
    response_class,
)
from kwire.protocol.schema import StructSpec
from tests.tiers import examples

from .strategies import ZERO_UUID, message_strategy

with warnings.catch_warnings():
    # kafka-python reads its json files with importlib.resources.read_text, deprecated since Python 3.11.
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin  # noqa: F401  (importing a package defines and registers its classes)
    import kafka.protocol.consumer  # noqa: F401
    import kafka.protocol.metadata  # noqa: F401
    import kafka.protocol.producer  # noqa: F401
    import kafka.protocol.sasl  # noqa: F401
    from kafka.protocol.api_header import RequestHeader as KpRequestHeader
    from kafka.protocol.api_header import ResponseHeader as KpResponseHeader
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.schemas import load_json
    from kafka.protocol.schemas.fields.array import ArrayField
    from kafka.protocol.schemas.fields.codecs import UUID as KpUUID
    from kafka.protocol.schemas.fields.codecs import (
        BitField,
        Boolean,
        Bytes,
        Float64,
        Int8,
        Int16,
        Int32,
        Int64,
        String,
        UnsignedInt16,
    )
    from kafka.protocol.schemas.fields.simple import SimpleField
    from kafka.protocol.schemas.fields.struct import StructField
    from kafka.protocol.schemas.fields.struct_array import StructArrayField

pytestmark = pytest.mark.filterwarnings("ignore:.*is deprecated. Use files:DeprecationWarning")

# ----------------------------------------------------------------------------- kafka-python's classes


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _kafka_python_classes() -> dict[tuple[int, str], type]:
    """kafka-python's primary request/response class per (api key, "request"/"response")."""
    found = {}
    for cls in _subclasses(ApiMessage):
        if cls.__dict__.get("_json") is None or cls._class_version is not None:
            continue
        found[(cls.API_KEY, cls.type)] = cls
    return found


KP_CLASSES = _kafka_python_classes()


def _kwire_class(api_key: int, kind: str):
    return request_class(api_key) if kind == "request" else response_class(api_key)


def _pairs() -> list[tuple[int, int, str]]:
    """Every (api key, version, kind) both libraries speak, computed from both libraries."""
    out = []
    for (api_key, kind), kp in sorted(KP_CLASSES.items()):
        try:
            kw = _kwire_class(api_key, kind)
        except ProtocolError:  # an api kwire lacks (none today; the coverage test would notice)
            continue
        # kafka-python speaks min_version..max_version: it lowers the minimum of its Kafka 4.x json files to 0
        # and those files still describe the old versions' fields.
        lo, hi = kp.min_version, kp.max_version
        lo, hi = max(lo, kw.MIN_VERSION), min(hi, kw.MAX_VERSION)
        out.extend((api_key, v, kind) for v in range(lo, hi + 1))
    return out


PAIRS = _pairs()
COVERAGE = {kind: sum(1 for p in PAIRS if p[2] == kind) for kind in ("request", "response")}
APIS = sorted({p[0] for p in PAIRS})
SUMMARY = (f"kafka-python oracle: {len(APIS)} api keys, {COVERAGE['request']} request and "
           f"{COVERAGE['response']} response (api key, version) pairs, each checked kwire->kafka-python, "
           f"kafka-python->kwire and as whole frames")


def _pair_id(p):
    api_key, version, kind = p
    return f"{_kwire_class(api_key, kind).__name__}-v{version}"


# kwire -> kafka-python draws random messages with hypothesis, the oracle's longest direction (a
# minute and more for every pair): in make test-fast it checks each api's newest shared version of
# requests and responses, the older ones are marked slow; the two seeded directions check every pair.
_NEWEST = {(api_key, kind): version for api_key, version, kind in sorted(PAIRS)}
HYPOTHESIS_PARAMS = [pytest.param(p, id=_pair_id(p), marks=() if _NEWEST[(p[0], p[2])] == p[1] else pytest.mark.slow)
                     for p in PAIRS]


def test_oracle_covers_every_shared_api_and_version():
    """The intersection is computed, not listed by hand; make its size visible and keep it from shrinking."""
    kp_keys = {k for k, _ in KP_CLASSES}
    assert len(kp_keys) >= 52, sorted(kp_keys)
    assert COVERAGE["request"] == COVERAGE["response"] >= 262, COVERAGE
    # Every api key kafka-python has (all are also kwire's) is covered, at every version both speak.
    assert set(APIS) == kp_keys
    for (api_key, kind), kp in KP_CLASSES.items():
        kw = _kwire_class(api_key, kind)
        lo, hi = max(kp.min_version, kw.MIN_VERSION), min(kp.max_version, kw.MAX_VERSION)
        assert hi >= lo
        assert hi - lo + 1 == sum(1 for p in PAIRS if p[0] == api_key and p[2] == kind)


# ----------------------------------------------------------------------------- kafka-python field metadata


@cache
def _original_names(kp_cls) -> dict[int, tuple[str, str]]:
    """id(kafka-python field) -> (Kafka's field name, Kafka's type), from the unpatched json.

    kafka-python's ``json_patch`` hooks rename a few fields (``ClusterAuthorizedOperations`` ->
    ``authorized_operations``) and retype them (``bitfield``); the field order stays that of the json.
    """
    out = {}

    def walk(fields, jfields):
        assert len(fields) == len(jfields)
        for f, j in zip(fields, jfields, strict=True):
            out[id(f)] = (j["name"], j["type"])
            if f.fields is not None and "fields" in j:
                walk(_kp_fields(f), j["fields"])

    walk(kp_cls._struct._fields, load_json(kp_cls.__name__)["fields"])
    return out


def _kp_fields(f):
    if isinstance(f, StructArrayField):
        return f.array_of._fields
    return f._fields


def _kp_tagged(f, version) -> bool:
    return f.tagged_field_q(version)


# ----------------------------------------------------------------------------- neutral value forms

UNKNOWN = "(unknown tags)"
_INT32 = struct.Struct(">i")


def _bits_to_int32(bits) -> int:
    if bits is None:
        bits = {31}
    return _INT32.unpack(struct.pack(">I", BitField.to_32_bit_field(bits)))[0]


def neutral_kwire(obj, spec: StructSpec, version: int, flexible: bool):
    """kwire value -> {Kafka field name: neutral value} for the fields on the wire in version."""
    if obj is None:
        return None
    out = {}
    for f in spec.fields:
        if not f.present(version):
            continue
        value = getattr(obj, f.attr)
        if f.struct is not None:
            if f.is_array:
                value = None if value is None else [neutral_kwire(x, f.struct, version, flexible) for x in value]
            else:
                value = neutral_kwire(value, f.struct, version, flexible)
        elif f.is_array and value is not None:
            value = list(value)
        out[f.name] = value
    if flexible and obj.unknown_tags:
        out[UNKNOWN] = {int(t): bytes(v) for t, v in obj.unknown_tags.items()}
    return out


def neutral_kp(obj, fields, names, version: int, flexible: bool):
    """kafka-python value -> the same neutral form as ``neutral_kwire``."""
    if obj is None:
        return None
    out = {}
    for f in fields:
        if not f.for_version_q(version):
            continue
        name = names[id(f)][0]
        value = getattr(obj, f.name)
        if isinstance(f, StructArrayField):
            value = None if value is None else [neutral_kp(x, _kp_fields(f), names, version, flexible) for x in value]
        elif isinstance(f, StructField):
            if value is None and _kp_tagged(f, version) and not f.nullable_for_version_q(version):
                # kafka-python's "absent" tagged struct is None; Kafka's (and kwire's) is the struct's defaults.
                value = f.data_class(version=version)
            value = neutral_kp(value, _kp_fields(f), names, version, flexible)
        elif isinstance(f, ArrayField):
            value = None if value is None else [_neutral_kp_scalar(f.array_of, x) for x in value]
        else:
            value = _neutral_kp_scalar(f, value)
        out[name] = value
    unknown = getattr(obj, "unknown_tags", None)
    if flexible and unknown:
        out[UNKNOWN] = {int(k.lstrip("_")): bytes(v) for k, v in unknown.items()}
    return out


def _neutral_kp_scalar(f: SimpleField, value):
    t = f._type
    if t is KpUUID:
        return ZERO_UUID if value is None else value
    if t is BitField:
        return _bits_to_int32(value)
    if t is Bytes and value is not None:
        return bytes(value)
    return value


def _kp_top(kp_cls):
    return kp_cls._struct._fields, _original_names(kp_cls)


def kp_neutral_top(kp_cls, obj, version):
    fields, names = _kp_top(kp_cls)
    return neutral_kp(obj, fields, names, version, kp_cls.flexible_version_q(version))


def kw_neutral_top(obj, version):
    spec = type(obj).SPEC
    return neutral_kwire(obj, spec.struct, version, spec.is_flexible(version))


def _has_unknown_tags(obj) -> bool:
    if obj is None:
        return False
    if getattr(obj, "unknown_tags", None):
        return True
    for f in obj._spec.fields:
        if f.struct is None:
            continue
        value = getattr(obj, f.attr)
        items = value if f.is_array else [value]
        if any(_has_unknown_tags(x) for x in items or ()):
            return True
    return False


# ----------------------------------------------------------------------------- kafka-python codec calls


def kp_decode_body(kp_cls, data: bytes, version: int, pos: int = 0):
    """kafka-python's generic body decoder, checked to consume every byte (its ``decode`` does not check)."""
    flexible = kp_cls.flexible_version_q(version)
    decoder = kp_cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=kp_cls)
    obj, end = decoder(memoryview(data), pos)
    assert end == len(data), f"kafka-python read {end - pos} of {len(data) - pos} body bytes"
    obj._header = None  # its fast decoder skips __init__; encode() needs this slot
    return obj


def kp_encode_body(kp_obj, version: int) -> bytes:
    return bytes(kp_obj.encode(version=version))


# ----------------------------------------------------------------------------- kafka-python random messages


def _kp_random_scalar(f: SimpleField, rng: random.Random):
    t = f._type
    if t is Int8:
        return rng.choice([-128, 127, 0, rng.randint(-128, 127)])
    if t is Int16:
        return rng.choice([-(2**15), 2**15 - 1, -1, rng.randint(-(2**15), 2**15 - 1)])
    if t is UnsignedInt16:
        return rng.choice([0, 2**16 - 1, rng.randint(0, 2**16 - 1)])
    if t is Int32:
        return rng.choice([-(2**31), 2**31 - 1, -1, rng.randint(-(2**31), 2**31 - 1)])
    if t is Int64:
        return rng.choice([-(2**63), 2**63 - 1, -1, rng.randint(-(2**63), 2**63 - 1)])
    if t is Float64:
        return rng.choice([0.0, -0.0, 0.5, -1e300, float("inf"), float("-inf"), rng.uniform(-1e9, 1e9)])
    if t is Boolean:
        return rng.random() < 0.5
    if t is KpUUID:
        return None if rng.random() < 0.2 else uuid.UUID(int=rng.getrandbits(128))
    long = rng.random() < 0.1  # long enough for a multi-byte uvarint length
    if isinstance(t, String):
        pool = "kafka-python_.0123 ÄéΩ✓日本😀\u0000"
        return "".join(rng.choice(pool) for _ in range(rng.randint(100, 3000) if long else rng.randint(0, 10)))
    if t is Bytes:
        return rng.randbytes(rng.randint(128, 20000) if long else rng.randint(0, 12))
    if t is BitField:
        if rng.random() < 0.3:
            return None
        return {b for b in range(31) if rng.random() < 0.2}
    raise AssertionError(f"unexpected kafka-python type {t}")


def _same_kp_struct(f, a, b, version) -> bool:
    names = {id(g): (g.name, g.type_str) for g in _kp_all_fields(f)}
    return neutral_kp(a, _kp_fields(f), names, version, False) == neutral_kp(b, _kp_fields(f), names, version, False)


def _kp_all_fields(f):
    for g in _kp_fields(f):
        yield g
        if g.fields is not None:
            yield from _kp_all_fields(g)


def kp_random(fields, data_class, version: int, rng: random.Random, depth: int = 0):
    """A kafka-python instance with random values for the fields its schema puts in version."""
    kwargs = {}
    for f in fields:
        if not f.for_version_q(version):
            continue
        if _kp_tagged(f, version) and rng.random() < 0.4:
            continue  # left at kafka-python's default: not written
        if f.nullable_for_version_q(version) and rng.random() < 0.2:
            kwargs[f.name] = None
            continue
        if isinstance(f, StructArrayField):
            n = rng.randint(0, 3 if depth < 2 else 1)
            kwargs[f.name] = [kp_random(_kp_fields(f), f.data_class, version, rng, depth + 1) for _ in range(n)]
        elif isinstance(f, StructField):
            value = kp_random(_kp_fields(f), f.data_class, version, rng, depth + 1)
            if _kp_tagged(f, version) and _same_kp_struct(f, value, f.data_class(version=version), version):
                continue  # deviation 4: kafka-python would write the defaults that Kafka leaves out
            kwargs[f.name] = value
        elif isinstance(f, ArrayField):
            n = rng.randint(127, 300) if rng.random() < 0.1 else rng.randint(0, 3)
            kwargs[f.name] = [_kp_random_scalar(f.array_of, rng) for _ in range(n)]
        else:
            kwargs[f.name] = _kp_random_scalar(f, rng)
    return data_class(version=version, **kwargs)


# ----------------------------------------------------------------------------- the oracle tests

HYPOTHESIS = settings(max_examples=examples(10), deadline=None, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                             HealthCheck.filter_too_much])
KP_EXAMPLES = 10


def _classes(api_key: int, kind: str):
    return _kwire_class(api_key, kind), KP_CLASSES[(api_key, kind)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pair", HYPOTHESIS_PARAMS)
def test_kwire_encodes_what_kafka_python_decodes(pair):
    api_key, version, kind = pair
    kw_cls, kp_cls = _classes(api_key, kind)

    @HYPOTHESIS
    @given(message_strategy(kw_cls, version, unknown_tags_in_tagged=False))  # deviation 1
    def check(msg):
        data = msg.encode(version)
        decoded = kp_decode_body(kp_cls, data, version)
        assert kp_neutral_top(kp_cls, decoded, version) == kw_neutral_top(msg, version)
        if not _has_unknown_tags(msg):  # deviation 2
            assert kp_encode_body(decoded, version) == data, "kafka-python re-encodes kwire's bytes differently"

    check()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pair", PAIRS, ids=_pair_id)
def test_kafka_python_encodes_what_kwire_decodes(pair):
    api_key, version, kind = pair
    kw_cls, kp_cls = _classes(api_key, kind)
    fields, _ = _kp_top(kp_cls)
    rng = random.Random(f"{api_key}-{version}-{kind}")
    for _ in range(KP_EXAMPLES):
        kp_msg = kp_random(fields, kp_cls, version, rng)
        data = kp_encode_body(kp_msg, version)
        kw_msg = kw_cls.decode(data, version)
        assert kw_neutral_top(kw_msg, version) == kp_neutral_top(kp_cls, kp_msg, version)
        assert kw_msg.encode(version) == data, "kwire re-encodes kafka-python's bytes differently"


CLIENT_IDS = ["kafka-python", "", None, "clïent-✓-😀", "x" * 300]


@pytest.mark.parametrize("pair", PAIRS, ids=_pair_id)
def test_frames_match_kafka_python(pair):
    """Size prefix, header (correlation id, client id) and body, byte for byte, both ways."""
    api_key, version, kind = pair
    kw_cls, kp_cls = _classes(api_key, kind)
    fields, _ = _kp_top(kp_cls)
    rng = random.Random(f"frame-{api_key}-{version}-{kind}")
    for client_id in CLIENT_IDS if kind == "request" else [None]:
        correlation_id = rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)])
        kp_msg = kp_random(fields, kp_cls, version, rng)
        kw_msg = kw_cls.decode(kp_encode_body(kp_msg, version), version)
        if kind == "request":
            kp_msg.with_header(correlation_id=correlation_id, client_id=client_id)
            kw_frame = encode_request(kw_msg, version, correlation_id, client_id=client_id)
        else:
            kp_msg.with_header(correlation_id=correlation_id)
            kw_frame = encode_response(kw_msg, version, correlation_id)
        # No version= here: with it, kafka-python sets request_api_version on a ResponseHeader and fails.
        assert kp_msg.API_VERSION == version
        kp_frame = bytes(kp_msg.encode(header=True, framed=True))
        assert kw_frame == kp_frame

        # kwire reads kafka-python's frame ...
        assert struct.unpack(">i", kp_frame[:4])[0] == len(kp_frame) - 4
        if kind == "request":
            header, body = decode_request(kp_frame[4:])
            assert (header.request_api_key, header.request_api_version) == (api_key, version)
            assert header.client_id == client_id
        else:
            header, body = decode_response(kp_frame[4:], api_key, version)
        assert header.correlation_id == correlation_id
        assert body == kw_msg

        # ... and kafka-python reads kwire's.
        stream = io.BytesIO(kw_frame[4:])
        kp_header = kp_cls.parse_header(stream, version=version)
        assert kp_header.correlation_id == correlation_id
        if kind == "request":
            assert (kp_header.request_api_key, kp_header.request_api_version) == (api_key, version)
            assert kp_header.client_id == client_id
        kp_body = kp_decode_body(kp_cls, kw_frame[4:], version, pos=stream.tell())
        assert kp_neutral_top(kp_cls, kp_body, version) == kw_neutral_top(kw_msg, version)


@pytest.mark.parametrize("flexible", [False, True])
@given(correlation_id=st.integers(-(2**31), 2**31 - 1), api_key=st.integers(-(2**15), 2**15 - 1),
       api_version=st.integers(-(2**15), 2**15 - 1),
       client_id=st.one_of(st.none(), st.text(st.characters(codec="utf-8"), max_size=20)))
@settings(max_examples=examples(60), deadline=None, database=None)
def test_headers_match_kafka_python(flexible, correlation_id, api_key, api_version, client_id):
    """Request header v1/v2 and response header v0/v1 alone, for any field values."""
    kp = KpRequestHeader(request_api_key=api_key, request_api_version=api_version,
                         correlation_id=correlation_id, client_id=client_id)
    kw_cls = messages.RequestHeader
    kw = kw_cls(request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id,
                client_id=client_id)
    hv = 2 if flexible else 1
    assert kw.encode(hv) == bytes(kp.encode(flexible=flexible))
    back = KpRequestHeader.decode(io.BytesIO(kw.encode(hv)), flexible=flexible)
    assert (back.request_api_key, back.request_api_version, back.correlation_id, back.client_id) == (
        api_key, api_version, correlation_id, client_id)
    assert kw_cls.decode(bytes(kp.encode(flexible=flexible)), hv) == kw

    kp_resp = KpResponseHeader(correlation_id=correlation_id)
    rv = 1 if flexible else 0
    kw_resp = messages.ResponseHeader(correlation_id=correlation_id)
    assert kw_resp.encode(rv) == bytes(kp_resp.encode(flexible=flexible))
    assert messages.ResponseHeader.decode(bytes(kp_resp.encode(flexible=flexible)), rv) == kw_resp


def test_the_oracle_notices_a_changed_meaning():
    """The comparison is not vacuous: one changed value, or a shifted byte, is caught."""
    kw_cls, kp_cls = _classes(3, "request")
    msg = kw_cls(topics=[kw_cls.MetadataRequestTopic(name="a", topic_id=uuid.UUID(int=5))],
                 allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    data = msg.encode(12)
    decoded = kp_decode_body(kp_cls, data, 12)
    assert kp_neutral_top(kp_cls, decoded, 12) == kw_neutral_top(msg, 12)
    msg.topics[0].name = "b"
    assert kp_neutral_top(kp_cls, decoded, 12) != kw_neutral_top(msg, 12)
    with pytest.raises(AssertionError):
        kp_decode_body(kp_cls, data + b"\0", 12)


# ----------------------------------------------------------------------------- kafka-python's deviations, shown


def test_kafka_python_deviation_unknown_tags_in_tagged_structs():
    """Deviation 1: a tagged struct carrying its own (unknown) tagged fields, valid Kafka, breaks kafka-python."""
    kw_cls, kp_cls = _classes(1, "response")  # FetchResponse v12+: PartitionData.CurrentLeader is tagged
    part = kw_cls.FetchableTopicResponse.PartitionData(
        partition_index=0, current_leader=kw_cls.FetchableTopicResponse.PartitionData.LeaderIdAndEpoch(
            leader_id=1, leader_epoch=2, unknown_tags={7: b"x"}))
    msg = kw_cls(responses=[kw_cls.FetchableTopicResponse(topic="t", partitions=[part])])
    data = msg.encode(12)
    assert kw_cls.decode(data, 12) == msg  # kwire reads its own valid bytes
    with pytest.raises(AssertionError):  # kafka-python: TaggedFields.decode_empty asserts no tags
        kp_decode_body(kp_cls, data, 12)


def test_kafka_python_deviation_drops_unknown_tags_on_encode():
    """Deviation 2: kafka-python keeps unknown tags it decodes but does not write them back."""
    kw_cls, kp_cls = _classes(18, "request")
    msg = kw_cls(client_software_name="n", client_software_version="1", unknown_tags={9: b"\x01\x02"})
    data = msg.encode(3)
    decoded = kp_decode_body(kp_cls, data, 3)
    assert decoded.unknown_tags == {"_9": b"\x01\x02"}
    assert kp_encode_body(decoded, 3) == kw_cls(client_software_name="n", client_software_version="1").encode(3)


def test_kafka_python_deviation_api_versions_error_decodes_as_v0():
    """Deviation 3: kafka-python's ApiVersionsResponse.decode reads any response with an error as v0."""
    kw_cls, kp_cls = _classes(18, "response")
    data = kw_cls(error_code=35, throttle_time_ms=7).encode(3)
    with pytest.raises(struct.error):  # the v3 compact array and throttle time, read as a v0 int32 count
        kp_cls.decode(data, version=3)
    assert kp_decode_body(kp_cls, data, 3).throttle_time_ms == 7  # its generic decoder reads v3


def test_kafka_python_deviation_writes_default_tagged_structs():
    """Deviation 4: kafka-python writes a tagged struct equal to its defaults; Kafka and kwire leave it out."""
    kw_cls, kp_cls = _classes(0, "response")  # ProduceResponse v10+: PartitionProduceResponse.CurrentLeader, tag 0
    topic_cls = kp_cls.fields["responses"].data_class
    part_field = topic_cls._struct.fields["partition_responses"]
    leader_field = part_field.fields["current_leader"]
    leader = leader_field.data_class(version=10, leader_id=-1, leader_epoch=-1)  # the schema's defaults
    part = part_field.data_class(version=10, index=0, current_leader=leader)
    kp_msg = kp_cls(version=10, responses=[topic_cls(version=10, name="t", partition_responses=[part])])
    kp_bytes = kp_encode_body(kp_msg, 10)
    kw_msg = kw_cls.decode(kp_bytes, 10)
    assert kw_neutral_top(kw_msg, 10) == kp_neutral_top(kp_cls, kp_msg, 10)  # same values ...
    kw_bytes = kw_msg.encode(10)
    assert len(kp_bytes) - len(kw_bytes) == 11  # ... but kafka-python adds tag 0, size 8, 2 x int32, 1 empty tag section
    assert kp_neutral_top(kp_cls, kp_decode_body(kp_cls, kw_bytes, 10), 10) == kw_neutral_top(kw_msg, 10)
