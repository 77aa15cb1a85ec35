"""The values the coordinator takes and gives: version-free forms of the group requests' content.

The request handlers translate each protocol version to and from these, so the coordinator's
logic is written once, independent of the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "GroupDescription", "GroupListing", "JoinRequest", "JoinResult", "JoinedMember", "MemberDescription",
    "OffsetCommitEntry", "SyncResult",
]


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup, whatever its version (older versions fill the fields they lack with defaults)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    # v4+: a member without an id gets one with MEMBER_ID_REQUIRED and must join again with it.
    require_known_member_id: bool = True
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # Only the leader gets the members (with their metadata of the selected protocol).
    members: list[JoinedMember] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    # OffsetCommit v1 only: the client's commit time; -1 means "now".
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes     # empty unless the group is Stable, as in Kafka
    assignment: bytes   # likewise


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str  # the selected protocol's name when Stable, else ""
    members: list[MemberDescription]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
