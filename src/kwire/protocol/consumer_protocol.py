"""The consumer protocol's bytes: a member's subscription (JoinGroup) and its assignment (SyncGroup).

Both are an int16 version followed by the body of Kafka's ``ConsumerProtocolSubscription`` /
``ConsumerProtocolAssignment`` data message at that version; the body is written and read by
kwire's generated codec, this module only adds the version prefix and plain Python types.

Reading follows Java's ``ConsumerProtocol``: a version above the newest we know is read as the
newest (the format only ever grows at the end, so the fields we know come first), bytes after
the fields we read are ignored, and a negative version is refused.

It lives in ``kwire.protocol`` because more than the client reads these bytes: the traffic analyzer
decodes a SyncGroup's assignment too, and it depends on the protocol layer, not on the client.
``TopicPartition`` (``topic_partition``), the pair the wire carries, is re-exported here; it is the
client's public ``kwire.TopicPartition`` (``kwire.client.types`` re-exports it too).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from . import messages
from .errors import DecodeError, EncodeError
from .topic_partition import TopicPartition

__all__ = [
    "Assignment",
    "CONSUMER_PROTOCOL_VERSION",
    "Subscription",
    "TopicPartition",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]


_VERSION = struct.Struct(">h")
_SUBSCRIPTION = messages.ConsumerProtocolSubscription
_ASSIGNMENT = messages.ConsumerProtocolAssignment

# What Java's consumer writes (its highest version); both messages share the version range.
CONSUMER_PROTOCOL_VERSION: int = _SUBSCRIPTION.MAX_VERSION


@dataclass(frozen=True)
class Subscription:
    """One member's subscription as the group leader sees it.

    ``owned_partitions`` travel from version 1, ``generation_id`` from 2 (-1: none), ``rack_id``
    from 3.  ``group_instance_id`` is not part of the bytes: the leader takes it from the
    member's entry in the JoinGroup response (the range and roundrobin assignors order static
    members by it).
    """

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    """The partitions the leader gives one member, and the assignor's user data for it."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None


def _by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    # The wire groups partitions under their topic; keep the order topics first appear in.
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return list(grouped.items())


class _TopicPartitions(Protocol):
    """An entry of either message's partition list: a topic and its partition indexes."""

    @property
    def topic(self) -> str: ...

    @property
    def partitions(self) -> list[int]: ...


def _flatten(entries: Iterable[_TopicPartitions]) -> list[TopicPartition]:
    return [TopicPartition(e.topic, p) for e in entries for p in e.partitions]


def _check_version(version: int, what: str) -> None:
    if not 0 <= version <= CONSUMER_PROTOCOL_VERSION:
        raise EncodeError(f"version {version} is not one kwire writes (0-{CONSUMER_PROTOCOL_VERSION})", what=what)


def _read_version(data: bytes, what: str) -> int:
    if len(data) < _VERSION.size:
        raise DecodeError(f"{len(data)} bytes: too short for the int16 version that starts it", what=what, offset=0)
    version: int = _VERSION.unpack_from(data)[0]  # struct's values are typed Any
    if version < 0:
        raise DecodeError(f"negative version {version}", what=what, offset=0)
    return version


_Body = TypeVar("_Body", bound=messages.Data)


def _decode_body(cls: type[_Body], data: bytes, version: int) -> _Body:
    """The body at min(version, newest known); codec errors are re-raised with whole-buffer offsets."""
    readable = min(version, cls.MAX_VERSION)
    try:
        return cls.decode(memoryview(data)[_VERSION.size:], readable, strict=False)
    except DecodeError as exc:
        offset = None if exc.offset is None else exc.offset + _VERSION.size
        raise DecodeError(exc.reason, what=cls.__name__, version=version, path=exc.path, offset=offset) from None


def encode_subscription(subscription: Subscription, version: int = CONSUMER_PROTOCOL_VERSION) -> bytes:
    """The member metadata bytes for JoinGroup.

    Fields the version lacks are left out, as Kafka's generated code does for these ignorable
    fields (owned partitions before v1, generation before v2, rack before v3).
    """
    _check_version(version, "ConsumerProtocolSubscription")
    body = _SUBSCRIPTION(
        topics=list(subscription.topics),
        user_data=subscription.user_data,
        owned_partitions=[_SUBSCRIPTION.TopicPartition(topic=t, partitions=ps)
                          for t, ps in _by_topic(subscription.owned_partitions)],
        generation_id=subscription.generation_id,
        rack_id=subscription.rack_id,
    )
    return _VERSION.pack(version) + body.encode(version)


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    """A member's subscription from its JoinGroup metadata; DecodeError names what was wrong.

    ``group_instance_id`` is the member's static id from the JoinGroup response, if any.
    """
    data = bytes(data)
    version = _read_version(data, "ConsumerProtocolSubscription")
    body = _decode_body(_SUBSCRIPTION, data, version)
    return Subscription(
        topics=list(body.topics),
        user_data=body.user_data,
        owned_partitions=_flatten(body.owned_partitions),
        generation_id=body.generation_id,
        rack_id=body.rack_id,
        group_instance_id=group_instance_id,
    )


def encode_assignment(assignment: Assignment, version: int = CONSUMER_PROTOCOL_VERSION) -> bytes:
    """The assignment bytes the leader puts in SyncGroup for one member."""
    _check_version(version, "ConsumerProtocolAssignment")
    body = _ASSIGNMENT(
        assigned_partitions=[_ASSIGNMENT.TopicPartition(topic=t, partitions=ps)
                             for t, ps in _by_topic(assignment.partitions)],
        user_data=assignment.user_data,
    )
    return _VERSION.pack(version) + body.encode(version)


def decode_assignment(data: bytes) -> Assignment:
    """A member's assignment from the SyncGroup response; DecodeError names what was wrong."""
    data = bytes(data)
    version = _read_version(data, "ConsumerProtocolAssignment")
    body = _decode_body(_ASSIGNMENT, data, version)
    return Assignment(partitions=_flatten(body.assigned_partitions), user_data=body.user_data)
