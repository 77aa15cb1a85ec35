"""What every partition assignor offers, and the bookkeeping they share.

An assignor runs on the group leader: it gets each member's decoded subscription and the
partition count of the topics the group reads, and returns each member's assignment.  It is
pure computation (no I/O); encoding and decoding the bytes is ``protocol``'s job.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping
from typing import ClassVar

from kwire.protocol.consumer_protocol import Assignment, Subscription

from ..types import TopicPartition
from .ordering import partition_key

__all__ = ["COOPERATIVE", "EAGER", "Assignor", "assignable_topics", "build_assignments", "partitions_changing_owner"]

# Kafka's two rebalance protocols (KIP-429).  Eager: every member gives up all its partitions
# before rejoining.  Cooperative: members keep what they own; only partitions that move are
# revoked, and a follow-up rebalance hands them to their new owner.
EAGER = "eager"
COOPERATIVE = "cooperative"


class Assignor(ABC):
    """A partition assignor, named as Kafka names it so mixed-client groups agree on the protocol."""

    #: The protocol name members list in JoinGroup ("range", "roundrobin", "cooperative-sticky").
    name: ClassVar[str]
    #: The rebalance protocol the assignor is built for.
    protocol: ClassVar[str] = EAGER
    #: Every rebalance protocol it can run under, most preferred first.
    supported_protocols: ClassVar[tuple[str, ...]] = (EAGER,)

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        """User data for this member's subscription (None: the assignor needs none)."""
        return None

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Called on every member once SyncGroup gave it ``assignment`` in ``generation_id``."""
        return None  # stateless assignors have nothing to remember

    @abstractmethod
    def assign(self, cluster_partitions: Mapping[str, int],
               members: Mapping[str, Subscription]) -> dict[str, Assignment]:
        """Each member's assignment.

        ``cluster_partitions``: partition count by topic (topics absent, or with no partitions,
        are skipped, as Java skips topics without metadata).  ``members``: subscriptions by
        member id.  Every member gets an entry, possibly empty.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def assignable_topics(cluster_partitions: Mapping[str, int], members: Mapping[str, Subscription]) -> dict[str, int]:
    """Partition counts of the topics some member subscribes to and that have partitions.

    This is the ``partitionsPerTopic`` Java's assignors receive: the leader only looks up the
    group's subscribed topics, and leaves out any it has no metadata for.
    """
    subscribed = {t for sub in members.values() for t in sub.topics}
    return {t: n for t, n in cluster_partitions.items() if t in subscribed and n > 0}


def build_assignments(members: Iterable[str], partitions: Mapping[str, Iterable[TopicPartition]],
                      user_data: bytes | None = None) -> dict[str, Assignment]:
    """An Assignment for every member, partitions in topic-then-partition order."""
    return {m: Assignment(sorted(partitions.get(m, ()), key=partition_key), user_data) for m in members}


def partitions_changing_owner(members: Mapping[str, Subscription],
                              assignment: Mapping[str, Iterable[TopicPartition]]) -> dict[TopicPartition, str]:
    """Partitions given to a member that does not claim them while a claimant loses them -> new owner.

    The claims are the members' ``owned_partitions`` as sent, the comparison Java's cooperative
    assignor and leader make.
    """
    added: dict[TopicPartition, str] = {}
    dropped: set[TopicPartition] = set()
    for member, partitions in assignment.items():
        claimed = set(members[member].owned_partitions)
        given = set(partitions)
        added.update((tp, member) for tp in given - claimed)
        dropped |= claimed - given
    return {tp: member for tp, member in added.items() if tp in dropped}
