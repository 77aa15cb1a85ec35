"""The classic consumer protocol's bytes, as a consumer group reads and writes them for its
classic members (the upgrade path) and for DescribeGroups: ``ConsumerProtocolSubscription``
(JoinGroup metadata) and ``ConsumerProtocolAssignment`` (SyncGroup assignment), each an int16
version and the body.  A version newer than the codec knows is read as the newest known one,
trailing fields ignored, as Kafka's ConsumerProtocol does.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from kwire.protocol import messages
from kwire.protocol.errors import DecodeError

if TYPE_CHECKING:
    from ...topics import TopicRegistry

__all__ = ["decode_assignment", "decode_subscription", "encode_assignment", "encode_subscription"]

_VERSION = struct.Struct(">h")
# What Kafka's ConsumerGroup writes for its classic members: version 0 holds all a KIP-848
# member has (topics and partitions).
WRITE_VERSION = 0


def _decode(cls, data: bytes):
    if len(data) < _VERSION.size:
        return None
    (version,) = _VERSION.unpack_from(data)
    if version < cls.MIN_VERSION:
        return None
    try:
        return cls.decode(memoryview(data)[_VERSION.size:], min(version, cls.MAX_VERSION), strict=False)
    except DecodeError:
        return None


def decode_subscription(data: bytes) -> tuple[list[str], dict[str, list[int]]] | None:
    """(subscribed topics, owned partitions by topic) of a JoinGroup's metadata; None if unreadable."""
    sub = _decode(messages.ConsumerProtocolSubscription, data)
    if sub is None:
        return None
    owned: dict[str, list[int]] = {}
    for tp in getattr(sub, "owned_partitions", None) or ():
        owned.setdefault(tp.topic, []).extend(tp.partitions)
    return [t for t in sub.topics if t is not None], owned


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """Partitions by topic of a SyncGroup assignment (empty if unreadable)."""
    a = _decode(messages.ConsumerProtocolAssignment, data)
    out: dict[str, list[int]] = {}
    for tp in getattr(a, "assigned_partitions", None) or ():
        out.setdefault(tp.topic, []).extend(tp.partitions)
    return out


def encode_subscription(topics: Collection[str]) -> bytes:
    body = messages.ConsumerProtocolSubscription(topics=sorted(topics), user_data=None)
    return _VERSION.pack(WRITE_VERSION) + body.encode(WRITE_VERSION)


def encode_assignment(topics: TopicRegistry, parts: Mapping[uuid.UUID, Collection[int]]) -> bytes:
    """A ConsumerProtocolAssignment of ``parts`` (by topic id), named by topic."""
    A = messages.ConsumerProtocolAssignment
    rows = []
    for topic_id, ps in parts.items():
        info = topics.by_id(topic_id)
        if info is not None and ps:
            rows.append(A.TopicPartition(topic=info.name, partitions=sorted(ps)))
    body = A(assigned_partitions=sorted(rows, key=lambda r: r.topic), user_data=None)
    return _VERSION.pack(WRITE_VERSION) + body.encode(WRITE_VERSION)
