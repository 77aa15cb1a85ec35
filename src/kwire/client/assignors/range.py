"""Kafka's "range" assignor: each topic cut into consecutive ranges, one per subscribed member.

Per topic, the members subscribed to it are sorted (static members by group.instance.id first,
then the others by member id, see ``ordering.member_key``); with P partitions and C members,
each gets P // C consecutive partitions and the first P % C get one more.  Topics are handled
independently, so the first members of every topic get the extras, which is what makes range
useful for joining co-partitioned topics.

Kafka 3.5 (KIP-881) made Java's RangeAssignor rack-aware when both consumers and partition
replicas carry racks.  kwire implements the rack-less behaviour only: ``cluster_partitions``
carries no replica racks, so members' ``rack_id`` is ignored, as Java ignores it when
partitions have no racks.
"""

from __future__ import annotations

from collections.abc import Mapping

from kwire.protocol.consumer_protocol import Assignment, Subscription

from ..types import TopicPartition
from .base import Assignor, assignable_topics, build_assignments
from .ordering import member_key

__all__ = ["RangeAssignor"]


class RangeAssignor(Assignor):
    """Kafka's "range" assignor: per topic, consecutive ranges of partitions, one per
    subscribed member (see the module's docstring)."""

    name = "range"

    def assign(self, cluster_partitions: Mapping[str, int],
               members: Mapping[str, Subscription]) -> dict[str, Assignment]:
        counts = assignable_topics(cluster_partitions, members)
        subscribers: dict[str, list[str]] = {t: [] for t in counts}
        for member_id, sub in members.items():
            # A topic listed twice in one subscription still counts the member once.
            for topic in dict.fromkeys(sub.topics):
                if topic in subscribers:
                    subscribers[topic].append(member_id)

        assigned: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for topic, count in counts.items():
            ordered = sorted(subscribers[topic], key=lambda m: member_key(m, members[m].group_instance_id))
            quota, extra = divmod(count, len(ordered))
            start = 0
            for i, member_id in enumerate(ordered):
                length = quota + (1 if i < extra else 0)
                assigned[member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return build_assignments(members, assigned)
