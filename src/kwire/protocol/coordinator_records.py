"""The records of Kafka's internal topics: version-prefixed keys and values.

Kafka's coordinators keep their state in compacted topics (``__consumer_offsets``,
``__transaction_state``, ``__share_group_state``).  A record's key is an INT16 version followed by
the key schema of that version, and the version also names the record type (OffsetCommitKey is
versions 0-1, GroupMetadataKey 2, ConsumerGroupMetadataKey 3, ...); the value is an INT16 version
followed by the value schema of that version, or null (a tombstone: the key's state is deleted).
The schemas are the generated ``messages.<Name>Key`` / ``<Name>Value`` data classes.

    key = encode_key(messages.OffsetCommitKey(group="g", topic="t", partition=0), version=1)
    record = decode_key(key, OFFSETS_TOPIC)           # an OffsetCommitKey instance
    value = decode_value(record, value_bytes)          # its OffsetCommitValue, or None
"""

from __future__ import annotations

from enum import IntEnum
from functools import cache

from ._schema import MESSAGES
from .errors import DecodeError
from .message_base import message_class_of
from .messages import Data
from .primitives import INT16

__all__ = [
    "OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC", "SHARE_GROUP_STATE_TOPIC", "CoordinatorRecordError",
    "TransactionStatus", "decode_key", "decode_value", "encode_key", "encode_value", "key_version_of",
    "value_class_for",
]

# Kafka's Topic.GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"

# The key schemas each topic holds (Kafka's group, transaction and share coordinators' records).
_SHARE_STATE_KEYS = ("ShareSnapshotKey", "ShareUpdateKey")
_TOPIC_KEYS: dict[str, tuple[str, ...]] = {
    TRANSACTION_STATE_TOPIC: ("TransactionLogKey",),
    SHARE_GROUP_STATE_TOPIC: _SHARE_STATE_KEYS,
    OFFSETS_TOPIC: tuple(sorted(name for name in MESSAGES if name.endswith("Key") and MESSAGES[name]["type"] == "data"
                                and name.startswith(("OffsetCommit", "GroupMetadata", "ConsumerGroup", "ShareGroup",
                                                     "StreamsGroup")))),
}


class CoordinatorRecordError(DecodeError):
    """A record of an internal topic that can't be read (unknown type or version, bad bytes)."""


class TransactionStatus(IntEnum):
    """``TransactionLogValue.TransactionStatus``: Kafka's TransactionState ids."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@cache
def _key_classes(topic: str) -> dict[int, type[Data]]:
    """Key version -> key class, for the records of ``topic``."""
    table: dict[int, type[Data]] = {}
    for name in _TOPIC_KEYS.get(topic, ()):
        cls = message_class_of(name, Data)
        for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            if version in table:
                raise RuntimeError(f"key version {version} of {topic} is both {table[version].__name__} and {name}")
            table[version] = cls
    return table


def key_version_of(key_class: type[Data]) -> int:
    """The version a key of this type is written with: its newest (OffsetCommitKey: 1)."""
    return key_class.MAX_VERSION


def value_class_for(key_class: type[Data]) -> type[Data]:
    """``OffsetCommitKey`` -> ``OffsetCommitValue``."""
    return _value_class(key_class.SPEC.name)


@cache
def _value_class(key_name: str) -> type[Data]:
    return message_class_of(key_name[:-len("Key")] + "Value", Data)


def encode_key(key: Data, version: int | None = None) -> bytes:
    """INT16 version + the key at that version (default: the newest, which names its type)."""
    v = key_version_of(type(key)) if version is None else version
    return INT16.pack(v) + key.encode(v)


def encode_value(value: Data | None, version: int) -> bytes | None:
    """INT16 version + the value at that version; None (a tombstone) stays None."""
    if value is None:
        return None
    return INT16.pack(version) + value.encode(version)


def decode_key(data: bytes | memoryview | None, topic: str) -> Data:
    """The key of a record of ``topic``: its version picks the schema.  ``CoordinatorRecordError``
    for an unknown version (Kafka's loaders skip those) or bytes that don't fit the schema."""
    if data is None or len(data) < INT16.size:
        raise CoordinatorRecordError(f"a record key of {topic} without its version ({data!r})")
    (version,) = INT16.unpack_from(data, 0)
    cls = _key_classes(topic).get(version)
    if cls is None:
        raise CoordinatorRecordError(f"unknown record type: key version {version} in {topic}")
    try:
        return cls.decode(bytes(data[INT16.size:]), version, strict=False)
    except DecodeError as exc:
        raise CoordinatorRecordError(f"unreadable {cls.__name__} v{version} in {topic}: {exc}") from None


def decode_value(key: Data, data: bytes | memoryview | None) -> Data | None:
    """The value of ``key``'s record, None for a tombstone.  Read leniently (strict=False), as
    Kafka does: a newer writer may append fields."""
    if data is None:
        return None
    cls = value_class_for(type(key))
    if len(data) < INT16.size:
        raise CoordinatorRecordError(f"a {cls.__name__} without its version ({bytes(data)!r})")
    (version,) = INT16.unpack_from(data, 0)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise CoordinatorRecordError(f"unknown {cls.__name__} version {version} "
                                     f"(kwire reads {cls.MIN_VERSION}-{cls.MAX_VERSION})")
    try:
        return cls.decode(bytes(data[INT16.size:]), version, strict=False)
    except DecodeError as exc:
        raise CoordinatorRecordError(f"unreadable {cls.__name__} v{version}: {exc}") from None
