"""Kafka's "roundrobin" assignor: all partitions dealt out in turn to all members.

Every partition of every subscribed topic, sorted by topic then partition, goes to the next
member in a circular list of the sorted members (``ordering.member_key``), skipping members not
subscribed to that partition's topic.  With identical subscriptions counts differ by at most
one; with different subscriptions the skipping can leave it unbalanced, as in Java.
"""

from __future__ import annotations

from collections.abc import Mapping

from kwire.protocol.consumer_protocol import Assignment, Subscription

from ..types import TopicPartition
from .base import Assignor, assignable_topics, build_assignments
from .ordering import java_string_key, member_key

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(Assignor):
    """Kafka's "roundrobin" assignor: every subscribed partition dealt to the members in turn
    (see the module's docstring)."""

    name = "roundrobin"

    def assign(self, cluster_partitions: Mapping[str, int],
               members: Mapping[str, Subscription]) -> dict[str, Assignment]:
        counts = assignable_topics(cluster_partitions, members)
        ring = sorted(members, key=lambda m: member_key(m, members[m].group_instance_id))
        topics_of = {m: set(members[m].topics) for m in ring}
        assigned: dict[str, list[TopicPartition]] = {m: [] for m in members}
        turn = 0  # index in ring of the member whose turn it is
        for topic in sorted(counts, key=java_string_key):
            for partition in range(counts[topic]):
                # Some member subscribes to every topic in counts, so this ends within one lap.
                while topic not in topics_of[ring[turn]]:
                    turn = (turn + 1) % len(ring)
                assigned[ring[turn]].append(TopicPartition(topic, partition))
                turn = (turn + 1) % len(ring)
        return build_assignments(members, assigned)
