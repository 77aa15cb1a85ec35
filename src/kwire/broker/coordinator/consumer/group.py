"""One KIP-848 consumer group (Kafka's ConsumerGroup): members, epochs, target assignment, owners.

* The *group epoch* grows whenever what the assignment depends on changes: a member joins or
  leaves, a subscription changes, a subscribed topic gets partitions or goes away.
* The *target assignment* is what the assignor computed at ``assignment_epoch``; when the group
  epoch is ahead, the next heartbeat computes a new one.
* Each member moves towards its target at its own pace (``reconciliation``); ``owners`` says
  which member holds each partition (assigned or still to revoke), so no partition is given to
  a second member before the first released it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from enum import Enum

from .assignment import Assignment
from .member import ConsumerMember, MemberState

__all__ = ["ConsumerGroup", "ConsumerGroupState"]


class ConsumerGroupState(Enum):
    """Kafka's ConsumerGroup.ConsumerGroupState, by the names ListGroups and Describe show."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"       # the group epoch is ahead of the target assignment
    RECONCILING = "Reconciling"   # some member has not reached its target yet
    STABLE = "Stable"
    DEAD = "Dead"


class ConsumerGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}   # member id -> target assignment
        self.owners: dict[tuple[uuid.UUID, int], str] = {}
        # What the last assignment saw of the subscribed topics: name -> (id, partitions).
        self.topic_snapshot: dict[str, tuple[uuid.UUID, int]] = {}
        self.deleted = False

    # ------------------------------------------------------------------ reading

    @property
    def state(self) -> ConsumerGroupState:
        if self.deleted:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self.owners.get((topic_id, partition))

    def member_by_instance(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
        return names

    def regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def __iter__(self) -> Iterator[ConsumerMember]:
        return iter(self.members.values())

    def __len__(self) -> int:
        return len(self.members)

    # ------------------------------------------------------------------ changing

    def put_member(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping the owners and the static index in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            if old.instance_id and old.instance_id != member.instance_id \
                    and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        if member.instance_id:
            self.static_members[member.instance_id] = member.member_id
        for parts in (member.assigned, member.pending_revocation):
            for topic_id, ps in parts.items():
                for p in ps:
                    self.owners[(topic_id, p)] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if member.instance_id and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def _release(self, member: ConsumerMember) -> None:
        for parts in (member.assigned, member.pending_revocation):
            for topic_id, ps in parts.items():
                for p in ps:
                    if self.owners.get((topic_id, p)) == member.member_id:
                        del self.owners[(topic_id, p)]
