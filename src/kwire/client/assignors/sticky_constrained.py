"""The sticky assignment when every member subscribes to the same topics (Java's "constrained" path).

With T partitions and N members each member must end with floor(T/N) ("min quota") or
ceil(T/N) ("max quota") partitions, and exactly T % N members get the max quota.  Steps, as in
Java's ConstrainedAssignmentBuilder without racks:

1. Every member keeps what it owns, up to its quota: under the min quota it keeps all; with the
   max quota or more it keeps max-quota partitions while max-quota places remain; otherwise it
   keeps min-quota partitions.  What it owns beyond that is revoked.
2. The partitions nobody kept are dealt, in topic-then-partition order, round-robin to the
   members under the min quota (sorted by member id) until each reaches it, then one each to
   members at the min quota until the max-quota places are used up.

A partition dealt in step 2 that some member revoked in step 1, or that several members claimed
in the same generation, changes owner: it is recorded in ``transferring`` for the cooperative
assignor to hold back.

Java walks members in step 1 in hash-map order (so which members keep a max quota depends on
hashing); kwire walks them sorted by member id.  The kept partitions of a member are its owned
ones sorted by partition number then topic, as in Java.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from ..types import TopicPartition
from .ordering import java_string_key
from .sticky_owned import OwnedPartitions

__all__ = ["constrained_assign"]


def constrained_assign(counts: Mapping[str, int], member_ids: Sequence[str], owned: OwnedPartitions,
                       ) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
    """(assignment by member, {partition changing owner: its new owner}) for identical subscriptions."""
    total = sum(counts.values())
    members = sorted(member_ids, key=java_string_key)
    min_quota, extra = divmod(total, len(members))
    max_quota = min_quota + (1 if extra else 0)
    over_min = 0  # members holding the max quota so far (only counted when min != max)

    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    kept: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    under_min: list[str] = []       # members below the min quota
    at_min: deque[str] = deque()    # members at the min quota that may still take one more

    for member in members:
        mine = sorted(owned.by_member.get(member, ()), key=lambda tp: (tp.partition, java_string_key(tp.topic)))
        if len(mine) < min_quota:
            keep = mine
            under_min.append(member)
        elif len(mine) >= max_quota and over_min < extra:
            keep = mine[:max_quota]
            over_min += 1
            if over_min == extra:
                at_min.clear()  # every max-quota place is taken
        else:
            keep = mine[:min_quota]
            if over_min < extra:
                at_min.append(member)
        assignment[member].extend(keep)
        kept.update(keep)
        revoked.update(mine[len(keep):])

    unassigned = [TopicPartition(t, p) for t in sorted(counts, key=java_string_key) for p in range(counts[t])
                  if TopicPartition(t, p) not in kept]
    at_min = deque(sorted(at_min, key=java_string_key))

    transferring: dict[TopicPartition, str] = {}
    turn = 0  # position in under_min of the next member to deal to
    for tp in unassigned:
        if turn < len(under_min):
            member, from_under = under_min[turn], True
        elif under_min:
            turn = 0
            member, from_under = under_min[0], True
        elif at_min:
            member, from_under = at_min.popleft(), False
        else:
            raise AssertionError(f"sticky assignor: no member can take {tp} (quotas {min_quota}/{max_quota})")
        assignment[member].append(tp)
        if tp in revoked or tp in owned.contested:
            transferring[tp] = member
        size = len(assignment[member])
        if from_under and size == min_quota:
            under_min.pop(turn)  # turn now points at the next member
            at_min.append(member)
        elif from_under:
            turn += 1
    return assignment, transferring
