"""Partition sets of a KIP-848 consumer group: topic id -> partitions, as Kafka's coordinator keeps them.

Assignments name topics by id (a topic deleted and created again is another topic), so a
member's partitions of a deleted topic never become a new topic's.  Values are immutable:
``frozenset``s in a plain dict that is never changed after it is built.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

__all__ = ["Assignment", "EMPTY", "count", "difference", "from_pairs", "intersection", "is_subset", "pairs",
           "union"]

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}


def _clean(parts: dict[uuid.UUID, set[int] | frozenset[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(p) for t, p in parts.items() if p}


def from_pairs(items: Iterable[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in items:
        out.setdefault(topic_id, set()).add(partition)
    return _clean(out)


def pairs(a: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, parts in a.items() for p in parts}


def union(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return _clean({t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in {*a, *b}})


def difference(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return _clean({t: parts - b.get(t, frozenset()) for t, parts in a.items()})


def intersection(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return _clean({t: parts & b.get(t, frozenset()) for t, parts in a.items()})


def is_subset(a: Assignment, b: Assignment) -> bool:
    return all(parts <= b.get(t, frozenset()) for t, parts in a.items())


def count(a: Assignment) -> int:
    return sum(len(p) for p in a.values())
