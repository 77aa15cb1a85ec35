"""One member of a streams group (Kafka's StreamsGroupMember) and its task assignments.

A member's assignment keys its tasks by (kind, subtopology id) -> partitions, kind being
``active``, ``standby`` or ``warmup``: the shape the KIP-848 reconciliation works on
(``consumer.reconciliation.reconcile`` keys partitions by topic), so streams members move to
their targets by the same revoke-before-assign rule, with one task kind per key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..consumer.member import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, MemberState

__all__ = ["ACTIVE", "KINDS", "LEAVE_GROUP_MEMBER_EPOCH", "LEAVE_GROUP_STATIC_MEMBER_EPOCH", "STANDBY", "WARMUP",
           "MemberState", "StreamsMember", "TaskAssignment", "by_kind", "task_assignment"]

ACTIVE, STANDBY, WARMUP = "active", "standby", "warmup"
KINDS = (ACTIVE, STANDBY, WARMUP)

# (kind, subtopology id) -> partitions.
TaskAssignment = Mapping[tuple[str, str], frozenset[int]]


def task_assignment(active: Iterable[tuple[str, int]], standby: Iterable[tuple[str, int]],
                    warmup: Iterable[tuple[str, int]]) -> dict[tuple[str, str], frozenset[int]]:
    """The assignment holding these (subtopology id, partition) tasks of each kind."""
    out: dict[tuple[str, str], set[int]] = {}
    for kind, tasks in ((ACTIVE, active), (STANDBY, standby), (WARMUP, warmup)):
        for sid, p in tasks:
            out.setdefault((kind, sid), set()).add(p)
    return {k: frozenset(v) for k, v in out.items()}


def by_kind(assignment: TaskAssignment, kind: str) -> dict[str, frozenset[int]]:
    """subtopology id -> partitions of one task kind."""
    return {sid: ps for (k, sid), ps in assignment.items() if k == kind and ps}


def tasks_of(assignment: TaskAssignment, kind: str) -> frozenset[tuple[str, int]]:
    return frozenset((sid, p) for (k, sid), ps in assignment.items() if k == kind for p in ps)


@dataclass(frozen=True, slots=True)
class StreamsMember:
    """A member as the coordinator knows it; changed by replacing (``replace``)."""

    member_id: str
    process_id: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = 0
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    task_offsets: tuple[tuple[str, int, int], ...] = ()
    task_end_offsets: tuple[tuple[str, int, int], ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: TaskAssignment = field(default_factory=dict)
    pending_revocation: TaskAssignment = field(default_factory=dict)
    # KIP-1251 (Kafka 4.3): the member epoch each task was given at, kept by the shared
    # reconciliation (a kept task keeps its epoch, a new one gets the target epoch).  Those of
    # active tasks date an older epoch's offset commit and are persisted (Kafka's
    # TasksTupleWithEpochs); standby and warm-up tasks commit nothing and are persisted without.
    assignment_epochs: Mapping[tuple[tuple[str, str], int], int] = field(default_factory=dict)

    def replace(self, **changes) -> StreamsMember:
        if ("assigned" in changes or "pending_revocation" in changes) and "assignment_epochs" not in changes:
            changes["assignment_epochs"] = {}
        return dataclasses.replace(self, **changes)

    def assignment_epoch(self, key: tuple[str, str], partition: int) -> int | None:
        """The epoch the member was given the task at (None: it holds it neither assigned nor
        pending revocation; without an entry, the member's epoch, as Kafka reads a record
        written before KIP-1251)."""
        if partition not in self.assigned.get(key, ()) and partition not in self.pending_revocation.get(key, ()):
            return None
        return self.assignment_epochs.get((key, partition), self.member_epoch)

    def with_epoch(self, epoch: int) -> StreamsMember:
        """Kafka's updateMemberEpoch: the previous epoch remembers the one it leaves."""
        return dataclasses.replace(self, previous_member_epoch=self.member_epoch, member_epoch=epoch)

    def tasks(self, kind: str) -> frozenset[tuple[str, int]]:
        return tasks_of(self.assigned, kind)
