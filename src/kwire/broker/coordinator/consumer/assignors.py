"""The server-side assignors of KIP-848 consumer groups: ``uniform`` (the default) and ``range``.

Kafka's names, and the same promises (not Kafka's exact placements, which no client depends on):

* ``uniform`` spreads all subscribed partitions so member loads differ by at most one where
  the subscriptions allow it, and keeps partitions where they are when that stays balanced
  (sticky), so a member joining or leaving moves as few partitions as it can.
* ``range`` gives each member, topic by topic, a contiguous range of the topic's partitions
  (members in member id order), so members subscribed to co-partitioned topics get the same
  partition numbers of each: joins stay local.

An assignor sees the members' subscriptions (resolved to topic ids) and current target
assignment, and the subscribed topics' partition counts; it returns every member's new target.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from .assignment import Assignment, from_pairs

__all__ = ["ASSIGNORS", "MemberSpec", "range_assign", "uniform_assign"]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed: frozenset[uuid.UUID]
    current: Assignment


Specs = Mapping[str, MemberSpec]
Topics = Mapping[uuid.UUID, int]  # topic id -> partition count
Result = dict[str, dict[uuid.UUID, frozenset[int]]]


def uniform_assign(members: Specs, topics: Topics) -> Result:
    """Balanced and sticky.  Partitions are placed topic by topic in a fixed order: each first
    stays with its current owner if that member is subscribed and under its share, the rest go
    to the least-loaded subscribed member (ties: member id), so the result is deterministic."""
    order = sorted(members)
    # Each member's fair share of the partitions anyone subscribes to: ``base``, and ``extra``
    # of the members one more.
    total = sum(n for t, n in topics.items() if any(t in members[m].subscribed for m in order))
    base, extra = divmod(total, len(order)) if order else (0, 0)
    load = {m: 0 for m in order}
    placed: dict[tuple[uuid.UUID, int], str] = {}
    # 1. Stickiness: keep what members have, up to the base share, then one more for as many
    #    members as there are extra partitions.
    for second_pass in (False, True):
        for m in order:
            spec = members[m]
            if second_pass:
                if extra <= 0 or load[m] != base:
                    continue
                cap = base + 1
            else:
                cap = base
            for topic_id in sorted(spec.current, key=str):
                if topic_id not in spec.subscribed or topic_id not in topics:
                    continue
                for p in sorted(spec.current[topic_id]):
                    if load[m] >= cap:
                        break
                    if p >= topics[topic_id] or (topic_id, p) in placed:
                        continue
                    placed[(topic_id, p)] = m
                    load[m] += 1
            if second_pass and load[m] == base + 1:
                extra -= 1
    # 2. The rest to the least-loaded subscribed member.
    for topic_id in sorted(topics, key=str):
        subscribers = [m for m in order if topic_id in members[m].subscribed]
        if not subscribers:
            continue
        for p in range(topics[topic_id]):
            if (topic_id, p) in placed:
                continue
            m = min(subscribers, key=lambda x: (load[x], x))
            placed[(topic_id, p)] = m
            load[m] += 1
    return _by_member(order, placed)


def range_assign(members: Specs, topics: Topics) -> Result:
    """Per topic, its subscribers in member id order each get a contiguous range, the first
    ``partitions % subscribers`` one partition more."""
    order = sorted(members)
    placed: dict[tuple[uuid.UUID, int], str] = {}
    for topic_id, n in topics.items():
        subscribers = [m for m in order if topic_id in members[m].subscribed]
        if not subscribers:
            continue
        each, extra = divmod(n, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            size = each + (1 if i < extra else 0)
            for p in range(start, start + size):
                placed[(topic_id, p)] = m
            start += size
    return _by_member(order, placed)


def _by_member(order: list[str], placed: dict[tuple[uuid.UUID, int], str]) -> Result:
    result: Result = {m: {} for m in order}
    grouped: dict[str, list[tuple[uuid.UUID, int]]] = {}
    for tp, m in placed.items():
        grouped.setdefault(m, []).append(tp)
    for m, tps in grouped.items():
        result[m] = from_pairs(tps)
    return result


# In the order of Kafka's group.consumer.assignors default, "uniform,range": the first is what
# a member that names none gets.
ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}
