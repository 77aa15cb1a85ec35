"""The records of Kafka's internal topics: generated key/value classes and version prefixes.

Expected bytes are written out by hand from Kafka's schemas (coordinator-records/*.json), not
produced by the code under test."""

from __future__ import annotations

import struct

import pytest

from kwire.protocol import messages
from kwire.protocol.coordinator_records import (
    OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
    CoordinatorRecordError,
    TransactionStatus,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def _string(s: str) -> bytes:  # a non-flexible STRING: int16 length + UTF-8
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def test_offset_commit_key_is_version_1_then_group_topic_partition():
    key = messages.OffsetCommitKey(group="g1", topic="orders", partition=7)
    assert encode_key(key) == struct.pack(">h", 1) + _string("g1") + _string("orders") + struct.pack(">i", 7)
    assert decode_key(encode_key(key), OFFSETS_TOPIC) == key


def test_offset_commit_value_v3_layout():
    value = messages.OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000)
    expected = (struct.pack(">h", 3) + struct.pack(">q", 42) + struct.pack(">i", 5) + _string("m")
                + struct.pack(">q", 1000))
    assert encode_value(value, 3) == expected
    key = messages.OffsetCommitKey(group="g", topic="t", partition=0)
    assert decode_value(key, expected) == value


def test_offset_commit_value_v1_carries_the_expire_timestamp():
    data = struct.pack(">hq", 1, 9) + _string("") + struct.pack(">qq", 100, 200)
    value = decode_value(messages.OffsetCommitKey(group="g", topic="t", partition=0), data)
    assert (value.offset, value.commit_timestamp, value.expire_timestamp) == (9, 100, 200)


def test_group_metadata_key_and_value():
    key = messages.GroupMetadataKey(group="grp")
    assert encode_key(key) == struct.pack(">h", 2) + _string("grp")
    member = messages.GroupMetadataValue.MemberMetadata(
        member_id="m-1", group_instance_id=None, client_id="c", client_host="/127.0.0.1", rebalance_timeout=300,
        session_timeout=10, subscription=b"\x00\x01", assignment=b"")
    value = messages.GroupMetadataValue(protocol_type="consumer", generation=3, protocol="range", leader="m-1",
                                        current_state_timestamp=77, members=[member])
    expected = (struct.pack(">h", 3) + _string("consumer") + struct.pack(">i", 3) + _string("range") + _string("m-1")
                + struct.pack(">q", 77) + struct.pack(">i", 1)
                + _string("m-1") + struct.pack(">h", -1) + _string("c") + _string("/127.0.0.1")
                + struct.pack(">ii", 300, 10) + struct.pack(">i", 2) + b"\x00\x01" + struct.pack(">i", 0))
    assert encode_value(value, 3) == expected
    assert decode_value(decode_key(encode_key(key), OFFSETS_TOPIC), expected) == value


def test_transaction_log_records():
    key = messages.TransactionLogKey(transactional_id="tx")
    assert encode_key(key) == struct.pack(">h", 0) + _string("tx")
    value = messages.TransactionLogValue(
        producer_id=1000, producer_epoch=2, transaction_timeout_ms=60000,
        transaction_status=TransactionStatus.ONGOING,
        transaction_partitions=[messages.TransactionLogValue.PartitionsSchema(topic="t", partition_ids=[0, 3])],
        transaction_last_update_timestamp_ms=5, transaction_start_timestamp_ms=4)
    expected = (struct.pack(">hqhib", 0, 1000, 2, 60000, 1) + struct.pack(">i", 1) + _string("t")
                + struct.pack(">iii", 2, 0, 3) + struct.pack(">qq", 5, 4))
    assert encode_value(value, 0) == expected
    assert decode_value(decode_key(encode_key(key), TRANSACTION_STATE_TOPIC), expected) == value


def test_transaction_log_value_v1_tagged_fields_exist_without_versions_in_the_schema():
    # PreviousProducerId/NextProducerId/ClientTransactionVersion have only "taggedVersions": 1+.
    value = messages.TransactionLogValue(
        producer_id=1, previous_producer_id=7, producer_epoch=0, transaction_timeout_ms=1, transaction_status=0,
        transaction_partitions=None, transaction_last_update_timestamp_ms=0, transaction_start_timestamp_ms=-1)
    decoded = decode_value(messages.TransactionLogKey(transactional_id="x"), encode_value(value, 1))
    assert decoded.previous_producer_id == 7 and decoded.next_producer_id == -1


def test_tombstone_is_none_both_ways():
    key = messages.OffsetCommitKey(group="g", topic="t", partition=0)
    assert encode_value(None, 3) is None
    assert decode_value(key, None) is None


@pytest.mark.parametrize("topic,version,name", [
    (OFFSETS_TOPIC, 0, "OffsetCommitKey"), (OFFSETS_TOPIC, 1, "OffsetCommitKey"), (OFFSETS_TOPIC, 2, "GroupMetadataKey"),
    (OFFSETS_TOPIC, 3, "ConsumerGroupMetadataKey"), (OFFSETS_TOPIC, 8, "ConsumerGroupCurrentMemberAssignmentKey"),
    (OFFSETS_TOPIC, 15, "ShareGroupStatePartitionMetadataKey"), (TRANSACTION_STATE_TOPIC, 0, "TransactionLogKey"),
    (SHARE_GROUP_STATE_TOPIC, 0, "ShareSnapshotKey"), (SHARE_GROUP_STATE_TOPIC, 1, "ShareUpdateKey"),
])
def test_the_key_version_names_the_record_type(topic, version, name):
    cls = getattr(messages, name)
    data = struct.pack(">h", version) + cls().encode(version)  # every field at its default
    assert type(decode_key(data, topic)).__name__ == name


def test_unknown_record_type_and_bad_bytes_are_named():
    with pytest.raises(CoordinatorRecordError, match="unknown record type: key version 99"):
        decode_key(struct.pack(">h", 99), OFFSETS_TOPIC)
    with pytest.raises(CoordinatorRecordError, match="without its version"):
        decode_key(b"\x00", OFFSETS_TOPIC)
    with pytest.raises(CoordinatorRecordError, match="without its version"):
        decode_key(None, OFFSETS_TOPIC)  # a record of the topic with a null key
    with pytest.raises(CoordinatorRecordError, match="OffsetCommitValue version 9"):
        decode_value(messages.OffsetCommitKey(group="g", topic="t", partition=0), struct.pack(">h", 9))
    with pytest.raises(CoordinatorRecordError, match="unreadable OffsetCommitKey"):
        decode_key(struct.pack(">h", 1) + b"\x00\x05ab", OFFSETS_TOPIC)


def test_every_key_has_its_value_schema():
    for name in ("OffsetCommit", "GroupMetadata", "TransactionLog", "ConsumerGroupMetadata", "ShareSnapshot",
                 "ShareUpdate", "ShareGroupMetadata"):
        assert getattr(messages, name + "Key").SPEC.kind == "data"
        assert getattr(messages, name + "Value").SPEC.kind == "data"
