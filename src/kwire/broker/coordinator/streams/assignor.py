"""The task assignor of streams groups: Kafka's StickyTaskAssignor (KIP-1071), for one broker.

Tasks are (subtopology id, partition).  Active tasks are spread evenly over the members (each gets
at most ceil(tasks / members)), a task staying with the member that had it while that member is
under its share (stickiness: fewer state restores), the rest going to the least loaded member.
Each active task then gets ``num_standby_replicas`` standby tasks on members of *other* processes
(a standby next to its active copy protects nothing), preferring the members that already had
that standby, then the least loaded; when no other process is left the standby is not placed,
as Kafka does.  The sticky assignor places no warm-up tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .member import TaskAssignment, task_assignment

__all__ = ["AssignmentMember", "assign_tasks"]

Task = tuple[str, int]


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    """What the assignor reads of a member: its process and what it had."""

    process_id: str
    active: frozenset[Task] = field(default_factory=frozenset)
    standby: frozenset[Task] = field(default_factory=frozenset)


def assign_tasks(members: Mapping[str, AssignmentMember], tasks: Mapping[str, int],
                 num_standby_replicas: int) -> dict[str, TaskAssignment]:
    """member id -> its target TaskAssignment, for ``tasks`` (subtopology id -> task count)."""
    ids = sorted(members)
    if not ids:
        return {}
    all_tasks = sorted((sid, p) for sid, n in tasks.items() for p in range(n))
    active: dict[str, set[Task]] = {m: set() for m in ids}
    standby: dict[str, set[Task]] = {m: set() for m in ids}
    quota = -(-len(all_tasks) // len(ids))  # ceil
    owner: dict[Task, str] = {}
    previous = {t: m for m in ids for t in members[m].active}
    for task in all_tasks:  # stickiness first
        m = previous.get(task)
        if m is not None and len(active[m]) < quota:
            active[m].add(task)
            owner[task] = m
    for task in all_tasks:
        if task in owner:
            continue
        m = min(ids, key=lambda x: (len(active[x]), x))
        active[m].add(task)
        owner[task] = m
    for task in all_tasks:
        holders = {members[owner[task]].process_id}
        for _ in range(num_standby_replicas):
            candidates = [m for m in ids if members[m].process_id not in holders]
            if not candidates:
                break  # no other process left: Kafka leaves the standby out
            m = min(candidates, key=lambda x: (task not in members[x].standby, len(active[x]) + len(standby[x]), x))
            standby[m].add(task)
            holders.add(members[m].process_id)
    return {m: task_assignment(active[m], standby[m], ()) for m in ids}
