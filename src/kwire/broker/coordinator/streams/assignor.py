"""The task assignor of streams groups: Kafka's StickyTaskAssignor (KIP-1071), for one broker.

Tasks are (subtopology id, partition), taken partition first (partition 0 of every subtopology,
then 1, ...: a member gets the same partitions of co-partitioned subtopologies).  Active tasks
are spread evenly over the members (each gets at most ceil(tasks / members)): a task stays with
the member that had it active while that member is under its share, then goes to a member that
had it as a standby or warm-up (its state is there), then to the least loaded process and its
least loaded member.  Each active task of a *stateful* subtopology (one with changelog topics;
a stateless task has no state to keep warm) then gets ``num_standby_replicas`` standby tasks on
members of *other* processes (a standby next to its active copy protects nothing), preferring
the members that had that standby, then the least loaded; when no other process is left the
standby is not placed, as Kafka does.  The sticky assignor places no warm-up tasks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from .member import TaskAssignment, task_assignment

__all__ = ["AssignmentMember", "assign_tasks"]

Task = tuple[str, int]


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    """What the assignor reads of a member: its process and what it had."""

    process_id: str
    active: frozenset[Task] = field(default_factory=frozenset)
    standby: frozenset[Task] = field(default_factory=frozenset)  # standby and warm-up tasks


def assign_tasks(members: Mapping[str, AssignmentMember], tasks: Mapping[str, int],
                 num_standby_replicas: int, stateful: Collection[str] = ()) -> dict[str, TaskAssignment]:
    """member id -> its target TaskAssignment, for ``tasks`` (subtopology id -> task count);
    ``stateful``: the subtopologies whose tasks get standbys."""
    ids = sorted(members)
    if not ids:
        return {}
    all_tasks = sorted(((sid, p) for sid, n in tasks.items() for p in range(n)), key=lambda t: (t[1], t[0]))
    active: dict[str, set[Task]] = {m: set() for m in ids}
    standby: dict[str, set[Task]] = {m: set() for m in ids}
    processes: dict[str, list[str]] = {}
    for m in ids:
        processes.setdefault(members[m].process_id, []).append(m)
    quota = -(-len(all_tasks) // len(ids))  # ceil
    owner: dict[Task, str] = {}

    def give(task: Task, m: str) -> None:
        active[m].add(task)
        owner[task] = m

    previous = {t: m for m in ids for t in members[m].active}
    for task in all_tasks:  # 1. the previous active owner
        m = previous.get(task)
        if m is not None and len(active[m]) < quota:
            give(task, m)
    for task in all_tasks:  # 2. a previous standby owner: its state is there
        if task not in owner:
            had = [m for m in ids if task in members[m].standby and len(active[m]) < quota]
            if had:
                give(task, min(had, key=lambda x: (len(active[x]), x)))

    def process_load(pid: str) -> float:
        return sum(len(active[m]) for m in processes[pid]) / len(processes[pid])

    for task in all_tasks:  # 3. the least loaded process, its least loaded member
        if task not in owner:
            pid = min(processes, key=lambda p: (process_load(p), p))
            give(task, min(processes[pid], key=lambda x: (len(active[x]), x)))
    for task in all_tasks:
        if task[0] not in stateful:
            continue
        holders = {members[owner[task]].process_id}
        for _ in range(num_standby_replicas):
            candidates = [m for m in ids if members[m].process_id not in holders]
            if not candidates:
                break  # no other process left: Kafka leaves the standby out
            m = min(candidates, key=lambda x: (task not in members[x].standby, len(active[x]) + len(standby[x]), x))
            standby[m].add(task)
            holders.add(members[m].process_id)
    return {m: task_assignment(active[m], standby[m], ()) for m in ids}
