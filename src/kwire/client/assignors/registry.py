"""From ``partition.assignment.strategy`` to JoinGroup's protocol list, and back to an assignor.

A consumer offers the group coordinator one protocol per configured assignor, most preferred
first, each with its own subscription metadata; the coordinator picks one every member offers,
and the leader runs that assignor.

Mixing eager and cooperative assignors: Java allows it and runs the group under the newest
rebalance protocol *every* configured assignor supports, which is how a group migrates from
range to cooperative-sticky (configure both, roll, then drop range).  Its default list,
``["range", "cooperative-sticky"]``, is such a mix and rebalances eagerly.  librdkafka instead
refuses a mix.  kwire follows Java, so its defaults and upgrade path work, and reports the
protocol in ``GroupProtocols.rebalance_protocol``; a list with no protocol in common is refused.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple

from kwire.protocol.consumer_protocol import CONSUMER_PROTOCOL_VERSION, Subscription, encode_subscription

from ..types import TopicPartition
from .base import COOPERATIVE, EAGER, Assignor
from .cooperative_sticky import CooperativeStickyAssignor
from .range import RangeAssignor
from .roundrobin import RoundRobinAssignor

__all__ = ["ASSIGNORS", "DEFAULT_STRATEGIES", "GroupProtocols", "JoinProtocol", "make_assignor"]

ASSIGNORS: dict[str, type[Assignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)
}

# Java's default partition.assignment.strategy (since Kafka 3.0).
DEFAULT_STRATEGIES: tuple[str, ...] = ("range", "cooperative-sticky")

# Newest first: the order in which a common rebalance protocol is preferred.
_PROTOCOL_PREFERENCE = (COOPERATIVE, EAGER)


class JoinProtocol(NamedTuple):
    """One entry of JoinGroupRequest.protocols: an assignor's name and its subscription bytes."""

    name: str
    metadata: bytes


def make_assignor(strategy: str | Assignor) -> Assignor:
    """An assignor instance from Kafka's strategy name, or the given (custom) assignor itself."""
    if isinstance(strategy, Assignor):
        return strategy
    try:
        return ASSIGNORS[strategy]()
    except KeyError:
        raise ValueError(f"unknown partition assignment strategy {strategy!r} "
                         f"(kwire has {', '.join(ASSIGNORS)})") from None


class GroupProtocols:
    """A consumer's assignors, in order of preference, and what it tells the coordinator about them."""

    def __init__(self, strategies: Iterable[str | Assignor] = DEFAULT_STRATEGIES):
        self.assignors: list[Assignor] = [make_assignor(s) for s in strategies]
        if not self.assignors:
            raise ValueError("partition.assignment.strategy lists no assignor")
        names = [a.name for a in self.assignors]
        if len(set(names)) != len(names):
            raise ValueError(f"partition.assignment.strategy names an assignor twice: {names}")
        self.rebalance_protocol: str = self._common_protocol()

    def _common_protocol(self) -> str:
        common = set(self.assignors[0].supported_protocols)
        for assignor in self.assignors[1:]:
            common &= set(assignor.supported_protocols)
        for protocol in _PROTOCOL_PREFERENCE:
            if protocol in common:
                return protocol
        listing = ", ".join(f"{a.name} ({'/'.join(a.supported_protocols)})" for a in self.assignors)
        raise ValueError(f"the assignors {listing} share no rebalance protocol")

    def join_protocols(self, topics: Collection[str], *, owned_partitions: Sequence[TopicPartition] = (),
                       generation_id: int = -1, rack_id: str | None = None,
                       version: int = CONSUMER_PROTOCOL_VERSION) -> list[JoinProtocol]:
        """JoinGroup's protocol list: each assignor's name and this member's subscription for it.

        ``owned_partitions`` are the partitions the member holds as it joins (none under the
        eager protocol, where it revoked everything first); ``generation_id`` the generation it
        got them in.
        """
        ordered_topics = sorted(topics)
        return [JoinProtocol(a.name, encode_subscription(Subscription(
                    topics=ordered_topics,
                    user_data=a.subscription_user_data(topics),
                    owned_partitions=list(owned_partitions),
                    generation_id=generation_id,
                    rack_id=rack_id), version))
                for a in self.assignors]

    def assignor(self, protocol_name: str | None) -> Assignor:
        """The assignor for the protocol the coordinator chose; ValueError if we never offered it."""
        for assignor in self.assignors:
            if assignor.name == protocol_name:
                return assignor
        raise ValueError(f"the coordinator chose assignment protocol {protocol_name!r}, "
                         f"which this consumer did not offer ({', '.join(a.name for a in self.assignors)})")
