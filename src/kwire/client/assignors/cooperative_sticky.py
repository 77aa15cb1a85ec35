"""Kafka's "cooperative-sticky" assignor: Java's sticky assignment, then the cooperative hold-back.

The sticky part (``sticky_plan``) gives a balanced assignment that keeps as many partitions
with their current owners as balance allows.  The cooperative part (KIP-429): a partition that
changes owner is left out of this round's assignment; its old owner sees it missing, revokes
it and rejoins, and the next rebalance, where nobody owns it any more, hands it to the new owner.
So no partition is ever assigned to a member while another still owns it.

Which partitions change owner:

* identical subscriptions: those the sticky step dealt out after someone revoked them, or that
  several members claimed in one generation (``sticky_constrained``);
* different subscriptions: as Java, by comparing each member's claimed ``owned_partitions`` with
  the new assignment: a partition added to one member and dropped by another.  (So, as in Java,
  a partition two members both claim may stay with one of them in this case; two claims only
  happen when a member missed a rebalance.)

Not implemented: Kafka 3.5's rack-aware variant (KIP-881), which needs partition replica racks;
``cluster_partitions`` has none, and Java also assigns without racks when partitions have none.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from kwire.protocol.consumer_protocol import Assignment, Subscription

from ..types import TopicPartition
from .base import COOPERATIVE, EAGER, Assignor, assignable_topics, build_assignments, partitions_changing_owner
from .sticky_constrained import constrained_assign
from .sticky_general import general_assign
from .sticky_owned import DEFAULT_GENERATION, resolve_owned

__all__ = ["CooperativeStickyAssignor", "StickyPlan", "sticky_plan"]

_GENERATION = struct.Struct(">i")


@dataclass(frozen=True)
class StickyPlan:
    """The sticky target assignment and the partitions in it that change owner (partition -> new owner)."""

    assignment: dict[str, list[TopicPartition]]
    transferring: dict[TopicPartition, str]
    identical_subscriptions: bool


def sticky_plan(cluster_partitions: Mapping[str, int], members: Mapping[str, Subscription]) -> StickyPlan:
    """Java's sticky assignment (before the cooperative hold-back) for these members."""
    counts = assignable_topics(cluster_partitions, members)
    owned = resolve_owned(counts, members)
    subscriptions = {frozenset(sub.topics) for sub in members.values()}
    if len(subscriptions) <= 1:
        assignment, transferring = constrained_assign(counts, list(members), owned)
        return StickyPlan(assignment, transferring, True)
    assignment = general_assign(counts, members, owned)
    return StickyPlan(assignment, partitions_changing_owner(members, assignment), False)


class CooperativeStickyAssignor(Assignor):
    """Balanced, sticky, and cooperative: partitions only move after their owner gave them up.

    It can also run under the eager protocol (Java allows it, for groups migrating from an
    eager assignor): members then own nothing when they join, and nothing is held back.
    """

    name = "cooperative-sticky"
    protocol = COOPERATIVE
    supported_protocols = (COOPERATIVE, EAGER)

    def __init__(self) -> None:
        # The generation of the last assignment, sent back as user data for leaders of Kafka
        # 2.4-3.3, which know no generation field in the subscription.
        self.generation_id = DEFAULT_GENERATION

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        return _GENERATION.pack(self.generation_id)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self.generation_id = generation_id

    def assign(self, cluster_partitions: Mapping[str, int],
               members: Mapping[str, Subscription]) -> dict[str, Assignment]:
        if not members:
            return {}
        plan = sticky_plan(cluster_partitions, members)
        held_back = plan.transferring
        now = {m: [tp for tp in tps if held_back.get(tp) != m] for m, tps in plan.assignment.items()}
        return build_assignments(members, now)
