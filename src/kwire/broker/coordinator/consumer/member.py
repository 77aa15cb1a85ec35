"""One member of a KIP-848 consumer group (Kafka's ConsumerGroupMember) and its reconciliation states."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from .assignment import EMPTY, Assignment

__all__ = ["ClassicMetadata", "ConsumerMember", "MemberState", "LEAVE_GROUP_MEMBER_EPOCH", "LEAVE_GROUP_STATIC_MEMBER_EPOCH"]

# The member epochs a heartbeat sends to leave (KIP-848): -1 leaves for good, -2 is a static
# member going away for a while (its instance id keeps its assignment until the session expires).
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(IntEnum):
    """Kafka's MemberState, with its record ids (ConsumerGroupCurrentMemberAssignmentValue.State)."""

    STABLE = 0                  # has its target assignment
    UNREVOKED_PARTITIONS = 1    # must give partitions up before it moves to the next epoch
    UNRELEASED_PARTITIONS = 2   # at the target epoch, waiting for partitions others still own
    UNKNOWN = 127               # a state a newer coordinator wrote: the member is fenced to start over

    @property
    def label(self) -> str:
        """The name ConsumerGroupDescribe and the logs use."""
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a member that speaks the classic protocol (JoinGroup/SyncGroup) in a consumer group
    keeps of it (Kafka's ConsumerGroupMemberMetadataValue.ClassicMemberMetadata)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, subscription metadata), in preference order


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """A member as the coordinator knows it; changed by replacing (``dataclasses.replace``)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=lambda: EMPTY)
    pending_revocation: Assignment = field(default_factory=lambda: EMPTY)
    classic: ClassicMetadata | None = None  # set for a classic-protocol member (upgrade path)
    # KIP-1251 (Kafka 4.3): the member epoch at which each partition of ``assigned`` and
    # ``pending_revocation`` was given to this member.  Only reconciliation fills it; a partition
    # without an entry counts as assigned at the current member epoch, the strictest answer.
    assignment_epochs: Mapping[tuple[uuid.UUID, int], int] = field(default_factory=dict)

    def replace(self, **changes) -> ConsumerMember:
        if ("assigned" in changes or "pending_revocation" in changes) and "assignment_epochs" not in changes:
            changes["assignment_epochs"] = {}  # epochs are only valid together with the partitions they date
        return dataclasses.replace(self, **changes)

    def assignment_epoch(self, topic_id: uuid.UUID, partition: int) -> int | None:
        """The epoch the member was given the partition at, or None when it holds it neither
        assigned nor pending revocation (Kafka's assignedPartitionsWithEpochs)."""
        if partition not in self.assigned.get(topic_id, ()) and \
                partition not in self.pending_revocation.get(topic_id, ()):
            return None
        return self.assignment_epochs.get((topic_id, partition), self.member_epoch)

    def with_epoch(self, epoch: int) -> ConsumerMember:
        """Kafka's updateMemberEpoch: the previous epoch remembers the one it leaves."""
        return dataclasses.replace(self, previous_member_epoch=self.member_epoch, member_epoch=epoch)

    @property
    def subscription(self) -> tuple[tuple[str, ...], str | None]:
        return self.subscribed_topic_names, self.subscribed_topic_regex
