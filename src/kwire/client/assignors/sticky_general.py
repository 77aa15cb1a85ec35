"""The sticky assignment when members subscribe to different topics (Java's "general" path).

No quota can be computed up front, so Java's GeneralAssignmentBuilder (without racks) works
greedily and then improves the result, and so does this port:

1. Members keep the partitions they own, except those of topics they no longer subscribe to.
2. Each partition nobody holds goes to the least-loaded member subscribed to its topic (fewest
   partitions, then member id).  Topics are taken fewest-candidate-members first, so partitions
   with little choice are placed before flexible ones.
3. Balancing: while some member could take a partition from a member holding at least two more,
   partitions move from the loaded member to the least-loaded candidate (or back to the member
   that held them in an older generation, if that one is less loaded).  A move that would undo an
   earlier move of the same topic moves that earlier partition back instead, which keeps
   partitions from hopping around.  If the balancing does not lower the sum of pairwise
   load differences, it is undone and the owners keep their partitions.

Topics only one member can read, and members that already hold everything they can and share
none of it, take no part in step 3.  (That exclusion, and the undo, are kept because Java has
them; in random testing neither ever changed a result: moves only go from a member to one with
at least two fewer partitions, which always lowers the score.)

Differences from Java, all where Java is unspecified or would fail: members and candidates are
walked sorted by member id where Java walks hash maps; when a move could revert several earlier
moves, the smallest partition is chosen (Java: hash-set order); the "back to its older-generation
holder" rule is only applied when that member still subscribes to the topic and takes part in
balancing (Java would assign a partition to a member not subscribed to it, or fail).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from kwire.protocol.consumer_protocol import Subscription

from ..types import TopicPartition
from .ordering import java_string_key, partition_key
from .sticky_owned import OwnedPartitions, member_generation

__all__ = ["general_assign"]


class _ByLoad:
    """Members ordered by (number of partitions, member id): Java's TreeSet of current subscriptions.

    A member's key is computed when it is added, so callers discard a member before changing its
    partitions and add it back afterwards, as Java does with its TreeSet.
    """

    def __init__(self) -> None:
        self._entries: list[tuple[int, bytes, str]] = []
        self._key: dict[str, tuple[int, bytes, str]] = {}

    def add(self, member: str, size: int) -> None:
        entry = (size, java_string_key(member), member)
        bisect.insort(self._entries, entry)
        self._key[member] = entry

    def discard(self, member: str) -> None:
        entry = self._key.pop(member, None)
        if entry is not None:
            del self._entries[bisect.bisect_left(self._entries, entry)]

    def members(self) -> list[str]:
        return [m for _, _, m in self._entries]

    def first_size(self) -> int:
        return self._entries[0][0]

    def last_size(self) -> int:
        return self._entries[-1][0]

    def __bool__(self) -> bool:
        return bool(self._entries)


class _Movements:
    """Partitions moved so far, per topic and (from, to) pair, to avoid moving them back and forth."""

    def __init__(self) -> None:
        self._by_topic: dict[str, dict[tuple[str, str], set[TopicPartition]]] = {}
        self._moves: dict[TopicPartition, tuple[str, str]] = {}

    def _remove(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self._moves.pop(tp)
        pairs = self._by_topic[tp.topic]
        pairs[pair].discard(tp)
        if not pairs[pair]:
            del pairs[pair]
        if not pairs:
            del self._by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self._moves[tp] = pair
        self._by_topic.setdefault(tp.topic, {}).setdefault(pair, set()).add(tp)

    def record(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self._moves:
            source, _ = self._remove(tp)
            if source != new:  # a partition going home leaves no record
                self._add(tp, (source, new))
        else:
            self._add(tp, (old, new))

    def partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """``tp``, or a partition of its topic that earlier moved new -> old, which then moves back."""
        pairs = self._by_topic.get(tp.topic)
        if not pairs:
            return tp
        if tp in self._moves:
            old = self._moves[tp][0]
        reverse = pairs.get((new, old))
        if not reverse:
            return tp
        return min(reverse, key=partition_key)


class _GeneralBuilder:
    def __init__(self, counts: Mapping[str, int], members: Mapping[str, Subscription], owned: OwnedPartitions):
        self.counts = counts
        self.members = members
        self.owned = owned
        order = sorted(members, key=java_string_key)
        self.topic_members: dict[str, list[str]] = {t: [] for t in counts}
        self.member_topics: dict[str, list[str]] = {}
        for m in order:
            topics = [t for t in dict.fromkeys(members[m].topics) if t in counts]
            self.member_topics[m] = topics
            for t in topics:
                self.topic_members[t].append(m)
        self.current: dict[str, list[TopicPartition]] = {m: list(owned.by_member.get(m, ())) for m in order}
        self.owner: dict[TopicPartition, str] = {tp: m for m, tps in self.current.items() for tp in tps}
        topics_by_choice = sorted(counts, key=lambda t: (len(self.topic_members[t]), java_string_key(t)))
        self.all_partitions = [TopicPartition(t, p) for t in topics_by_choice for p in range(counts[t])]
        self.by_load = _ByLoad()
        self.movements = _Movements()
        self.revocation_required = False

    # -- steps 1 and 2 ------------------------------------------------------------------------
    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous_owners()
        held = self._keep_owned()
        unassigned = [tp for tp in self.all_partitions if tp not in held]
        for m, tps in self.current.items():
            self.by_load.add(m, len(tps))
        self._balance(previous, unassigned)
        return self.current

    def _previous_owners(self) -> dict[TopicPartition, tuple[str, int]]:
        """Partition -> (member, generation) from members of older generations: who held it before."""
        previous: dict[TopicPartition, tuple[str, int]] = {}
        for m in self.current:
            generation = member_generation(self.members[m])
            if generation >= self.owned.max_generation:
                continue
            for tp in self.members[m].owned_partitions:
                if tp not in previous or generation > previous[tp][1]:
                    previous[tp] = (m, generation)
        return previous

    def _keep_owned(self) -> set[TopicPartition]:
        held: set[TopicPartition] = set()
        for m, tps in self.current.items():
            topics = set(self.member_topics[m])
            for tp in list(tps):
                if tp.topic not in topics:
                    # The member left this topic: it must revoke, so don't try "new partitions only" first.
                    tps.remove(tp)
                    del self.owner[tp]
                    self.revocation_required = True
                else:
                    held.add(tp)
        return held

    def _give(self, tp: TopicPartition, member: str) -> None:
        self.by_load.discard(member)
        self.current[member].append(tp)
        self.owner[tp] = member
        self.by_load.add(member, len(self.current[member]))

    def _least_loaded_candidate(self, topic: str) -> str | None:
        for m in self.by_load.members():
            if topic in self.member_topics[m]:
                return m
        return None

    # -- step 3 -----------------------------------------------------------------------------------
    def _max_size(self, member: str) -> int:
        return sum(self.counts[t] for t in self.member_topics[member])

    def _can_take_part(self, member: str) -> bool:
        if len(self.current[member]) < self._max_size(member):
            return True
        return any(len(self.topic_members[tp.topic]) >= 2 for tp in self.current[member])

    def _balance(self, previous: dict[TopicPartition, tuple[str, int]], unassigned: list[TopicPartition]) -> None:
        initializing = self.by_load.last_size() == 0
        for tp in unassigned:
            member = self._least_loaded_candidate(tp.topic)
            if member is not None:
                self._give(tp, member)

        movable_topics = {t for t, ms in self.topic_members.items() if len(ms) >= 2}
        movable = [tp for tp in self.all_partitions if tp.topic in movable_topics]
        unassigned = [tp for tp in unassigned if tp.topic in movable_topics]
        fixed: dict[str, list[TopicPartition]] = {}
        for m in list(self.current):
            if not self._can_take_part(m):
                self.by_load.discard(m)
                fixed[m] = self.current.pop(m)

        before = {m: list(tps) for m, tps in self.current.items()}
        before_owner = dict(self.owner)
        if not self.revocation_required:
            # First try to balance by moving only the partitions just placed.
            self._reassign(unassigned, previous)
        moved = self._reassign(movable, previous)
        if not initializing and moved and _imbalance(self.current) >= _imbalance(before):
            self.current = before
            self.owner = before_owner
        self.current.update(fixed)

    def _reassign(self, partitions: list[TopicPartition], previous: dict[TopicPartition, tuple[str, int]]) -> bool:
        moved = False
        while True:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                holder = self.owner[tp]
                load = len(self.current[holder])
                before = previous.get(tp)
                if (before is not None and before[0] in self.current and tp.topic in self.member_topics[before[0]]
                        and load > len(self.current[before[0]]) + 1):
                    self._move(tp, before[0])
                    moved = modified = True
                    continue
                for other in self.topic_members[tp.topic]:
                    if other in self.current and load > len(self.current[other]) + 1:
                        target = self._least_loaded_candidate(tp.topic)
                        assert target is not None
                        self._move(tp, target)
                        moved = modified = True
                        break
            if not modified:
                return moved

    def _is_balanced(self) -> bool:
        if self.by_load.first_size() >= self.by_load.last_size() - 1:
            return True
        for m in self.by_load.members():
            size = len(self.current[m])
            if size == self._max_size(m):
                continue
            for topic in self.member_topics[m]:
                for p in range(self.counts[topic]):
                    holder = self.owner.get(TopicPartition(topic, p))
                    if holder != m and holder in self.current and size + 1 < len(self.current[holder]):
                        return False
        return True

    def _move(self, tp: TopicPartition, new: str) -> None:
        actual = self.movements.partition_to_move(tp, self.owner[tp], new)
        old = self.owner[actual]
        self.by_load.discard(old)
        self.by_load.discard(new)
        self.movements.record(actual, old, new)
        self.current[old].remove(actual)
        self.current[new].append(actual)
        self.owner[actual] = new
        self.by_load.add(new, len(self.current[new]))
        self.by_load.add(old, len(self.current[old]))


def _imbalance(assignment: Mapping[str, list[TopicPartition]]) -> int:
    """Java's balance score: the sum of |load(a) - load(b)| over all pairs of members."""
    sizes = sorted(len(tps) for tps in assignment.values())
    n = len(sizes)
    # In ascending order the i-th size is subtracted by the i smaller ones and subtracts n-1-i larger ones.
    return sum(size * (2 * i - n + 1) for i, size in enumerate(sizes))


def general_assign(counts: Mapping[str, int], members: Mapping[str, Subscription],
                   owned: OwnedPartitions) -> dict[str, list[TopicPartition]]:
    """The assignment by member when subscriptions differ."""
    return _GeneralBuilder(counts, members, owned).build()
