"""One streams group (Kafka's StreamsGroup): members, epochs, topology, target assignment.

As a KIP-848 consumer group: the *group epoch* grows when what the assignment depends on
changes (a member joins or leaves, the topology or its topics' partition counts change, a
member's process or tags change); the target assignment is computed at ``assignment_epoch``;
each member reconciles towards its target, a task going to a member only once it is released
(``holder_of``: no other member holds it active, and its process holds no other copy of it).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum

from .member import ACTIVE, STANDBY, WARMUP, MemberState, StreamsMember, TaskAssignment
from .topology import ConfiguredTopology, StreamsTopology

__all__ = ["StreamsGroup", "StreamsGroupState"]


class StreamsGroupState(Enum):
    """Kafka's StreamsGroupState, by the names ListGroups and StreamsGroupDescribe show."""

    EMPTY = "Empty"
    NOT_READY = "NotReady"        # the topology's topics are missing or wrongly partitioned
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class StreamsGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, StreamsMember] = {}
        self.target: dict[str, TaskAssignment] = {}
        self.topology: StreamsTopology | None = None
        self.configured: ConfiguredTopology | None = None
        # Bumped when the tasks of a member with a user endpoint change (Interactive Queries).
        self.endpoint_epoch = 0
        self.shutdown_requested_by: str | None = None
        # The streams.num.standby.replicas the target assignment was computed with (None: none yet):
        # a new value makes the group compute it again.
        self.num_standby_replicas: int | None = None
        # Until when (clock ms) the first assignment waits for more members
        # (streams.initial.rebalance.delay.ms; not kept across a restart).
        self.initial_delay_until: int | None = None
        self.deleted = False

    @property
    def state(self) -> StreamsGroupState:
        if self.deleted:
            return StreamsGroupState.DEAD
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.configured is None or not self.configured.ready:
            return StreamsGroupState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        for m in self.members.values():
            if m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def holder_of(self, process_id: str, key: tuple[str, str], partition: int) -> str | None:
        """A member that keeps a task from going to a member of ``process_id`` yet (Kafka's
        CurrentAssignmentBuilder.isUnreleasedTask): for an active task, any member holding it
        active, or a member of that process holding its standby or warm-up copy; for a standby
        or warm-up task, a member of that process holding the task in any role.  "Holding" is
        assigned or still to revoke."""
        kind, sid = key
        for m in self.members.values():
            for held_kind in (ACTIVE, STANDBY, WARMUP):
                if partition not in m.assigned.get((held_kind, sid), ()) and \
                        partition not in m.pending_revocation.get((held_kind, sid), ()):
                    continue
                same_process = (m.process_id or m.member_id) == process_id
                if (kind == ACTIVE and held_kind == ACTIVE) or same_process:
                    return m.member_id
        return None

    def member_by_instance(self, instance_id: str) -> StreamsMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def __iter__(self) -> Iterator[StreamsMember]:
        return iter(sorted(self.members.values(), key=lambda m: m.member_id))

    def __len__(self) -> int:
        return len(self.members)
