"""The consumer protocol bytes: round trips at v0-v3, kafka-python reads ours and we read its,
newer versions are read as the newest known one, and bad bytes fail naming what was wrong."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription

from kwire.client.assignors import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kwire.client.types import TopicPartition
from kwire.protocol.errors import DecodeError, EncodeError
from tests.tiers import examples

VERSIONS = [0, 1, 2, 3]
SETTINGS = settings(max_examples=examples(150), deadline=None, database=None)

names = st.text(max_size=12)
int32 = st.integers(-(2**31), 2**31 - 1)
partitions = st.lists(st.builds(TopicPartition, st.sampled_from(["a", "b", "ü-c", ""]), int32), max_size=8)
subscriptions = st.builds(Subscription, topics=st.lists(names, max_size=6),
                          user_data=st.none() | st.binary(max_size=20), owned_partitions=partitions,
                          generation_id=int32, rack_id=st.none() | names)
assignments = st.builds(Assignment, partitions=partitions, user_data=st.none() | st.binary(max_size=20))


def grouped(tps: list[TopicPartition]) -> list[TopicPartition]:
    """The order the wire gives back: partitions grouped under their topic, topics by first appearance."""
    order = list(dict.fromkeys(tp.topic for tp in tps))
    return [tp for topic in order for tp in tps if tp.topic == topic]


def as_of(sub: Subscription, version: int) -> Subscription:
    """What survives a trip at ``version``: later fields fall back to their defaults."""
    return Subscription(topics=sub.topics, user_data=sub.user_data,
                        owned_partitions=grouped(sub.owned_partitions) if version >= 1 else [],
                        generation_id=sub.generation_id if version >= 2 else -1,
                        rack_id=sub.rack_id if version >= 3 else None)


def by_topic(tps: list[TopicPartition]) -> list[tuple[str, list[int]]]:
    out: dict[str, list[int]] = {}
    for t, p in tps:
        out.setdefault(t, []).append(p)
    return list(out.items())


# -- round trips -------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(sub=subscriptions)
def test_subscription_round_trip(version, sub):
    data = encode_subscription(sub, version)
    assert data[:2] == struct.pack(">h", version)
    assert decode_subscription(data) == as_of(sub, version)


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(assignment=assignments)
def test_assignment_round_trip(version, assignment):
    data = encode_assignment(assignment, version)
    assert data[:2] == struct.pack(">h", version)
    assert decode_assignment(data) == Assignment(grouped(assignment.partitions), assignment.user_data)


def test_group_instance_id_is_carried_beside_the_bytes():
    data = encode_subscription(Subscription(["t"]))
    assert decode_subscription(data, group_instance_id="static-1").group_instance_id == "static-1"
    assert decode_subscription(data).group_instance_id is None


def test_known_bytes_of_a_v3_subscription():
    # Laid out by hand from ConsumerProtocolSubscription.json, so the codec is not its own judge.
    sub = Subscription(["t"], b"\x01", [TopicPartition("t", 2)], 5, "r")
    assert encode_subscription(sub) == (
        b"\x00\x03"                                   # version 3
        b"\x00\x00\x00\x01" b"\x00\x01t"              # topics ["t"]
        b"\x00\x00\x00\x01" b"\x01"                   # user data
        b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x01" b"\x00\x00\x00\x02"  # owned t-2
        b"\x00\x00\x00\x05"                           # generation
        b"\x00\x01r")                                 # rack


# -- kafka-python, both ways -----------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(sub=subscriptions)
def test_kafka_python_reads_our_subscriptions(version, sub):
    theirs = KSubscription.decode(encode_subscription(sub, version))
    assert theirs.version == version
    assert list(theirs.topics) == sub.topics
    assert theirs.user_data == sub.user_data
    if version >= 1:
        assert [(tp.topic, list(tp.partitions)) for tp in theirs.owned_partitions] == by_topic(sub.owned_partitions)
    if version >= 2:
        assert theirs.generation_id == sub.generation_id
    if version >= 3:
        assert theirs.rack_id == sub.rack_id


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(sub=subscriptions)
def test_we_read_kafka_python_subscriptions(version, sub):
    theirs = KSubscription(version=version, topics=sub.topics, user_data=sub.user_data,
                           owned_partitions=[KSubscription.TopicPartition(topic=t, partitions=ps)
                                             for t, ps in by_topic(sub.owned_partitions)],
                           generation_id=sub.generation_id, rack_id=sub.rack_id)
    data = theirs.encode()
    assert decode_subscription(data) == as_of(sub, version)
    assert data == encode_subscription(sub, version)  # byte for byte


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(assignment=assignments)
def test_assignments_both_ways_with_kafka_python(version, assignment):
    ours = encode_assignment(assignment, version)
    theirs = KAssignment.decode(ours)
    assert [TopicPartition(*tp) for tp in theirs.partitions()] == grouped(assignment.partitions)
    assert theirs.user_data == assignment.user_data
    made = KAssignment(version=version, assigned_partitions=by_topic(assignment.partitions),
                       user_data=assignment.user_data).encode()
    assert made == ours
    assert decode_assignment(made) == Assignment(grouped(assignment.partitions), assignment.user_data)


# -- newer versions ------------------------------------------------------------------------------
@pytest.mark.parametrize("newer", [4, 9, 32767])
def test_a_newer_version_is_read_as_the_newest_known(newer):
    sub = Subscription(["t", "u"], b"ud", [TopicPartition("t", 1)], 12, "rack-a")
    # A future version appends fields after the ones we know; they are skipped, as Java does.
    data = struct.pack(">h", newer) + encode_subscription(sub)[2:] + b"\x00\x00\x00\x2a\x00\x03new"
    assert decode_subscription(data) == sub
    assert KSubscription.decode(data).generation_id == 12  # kafka-python agrees
    assignment = Assignment([TopicPartition("t", 1)], b"x")
    data = struct.pack(">h", newer) + encode_assignment(assignment)[2:] + b"\xff\xff"
    assert decode_assignment(data) == assignment


def test_we_write_only_versions_we_know():
    with pytest.raises(EncodeError, match="version 4"):
        encode_subscription(Subscription(["t"]), 4)
    with pytest.raises(EncodeError, match="version -1"):
        encode_assignment(Assignment([]), -1)


# -- bad bytes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"", b"\x00"])
def test_too_short_for_the_version(data):
    with pytest.raises(DecodeError, match="too short for the int16 version") as err:
        decode_subscription(data)
    assert err.value.what == "ConsumerProtocolSubscription"
    with pytest.raises(DecodeError, match="too short for the int16 version"):
        decode_assignment(data)


def test_a_negative_version_is_refused():
    with pytest.raises(DecodeError, match="negative version -1"):
        decode_subscription(b"\xff\xff" + encode_subscription(Subscription(["t"]))[2:])
    with pytest.raises(DecodeError, match="negative version -2"):
        decode_assignment(b"\xff\xfe\x00\x00\x00\x00\xff\xff\xff\xff")


def test_every_truncation_names_the_field_and_the_byte():
    data = encode_subscription(Subscription(["topic"], b"data", [TopicPartition("topic", 3)], 4, "rack"))
    for cut in range(2, len(data)):
        with pytest.raises(DecodeError) as err:
            decode_subscription(data[:cut])
        e = err.value
        assert (e.what, e.version) == ("ConsumerProtocolSubscription", 3)
        assert e.path and e.path[0] in {"topics", "user_data", "owned_partitions", "generation_id", "rack_id"}
        # Offsets count from the start of the metadata, version prefix included.
        assert 2 <= e.offset <= cut, (cut, str(e))
        assert f"at byte {e.offset}" in str(e)


def test_bad_contents_name_the_field():
    bad_utf8 = b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x02\xff\xfe" + b"\xff\xff\xff\xff"
    with pytest.raises(DecodeError, match=r"ConsumerProtocolSubscription v1, field topics, at byte 8: invalid UTF-8"):
        decode_subscription(bad_utf8)
    null_topics = b"\x00\x00" + b"\xff\xff\xff\xff" + b"\xff\xff\xff\xff"
    with pytest.raises(DecodeError, match="field topics.*null array"):
        decode_subscription(null_topics)
    huge_array = b"\x00\x00" + b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff"
    with pytest.raises(DecodeError, match="ConsumerProtocolAssignment v0.*field user_data"):
        decode_assignment(huge_array)
