"""The group leader's job between JoinGroup and SyncGroup: member metadata in, assignment bytes out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kwire.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_VERSION,
    Subscription,
    decode_subscription,
    encode_assignment,
)

from ..types import TopicPartition
from .base import COOPERATIVE, Assignor, partitions_changing_owner

__all__ = ["AssignmentError", "check_cooperative", "perform_assignment"]


class AssignmentError(Exception):
    """An assignor returned an assignment the group protocol does not allow."""


def perform_assignment(assignor: Assignor, cluster_partitions: Mapping[str, int],
                       members: Iterable[tuple[str, str | None, bytes]], *, rebalance_protocol: str | None = None,
                       version: int = CONSUMER_PROTOCOL_VERSION) -> dict[str, bytes]:
    """SyncGroup's assignments from JoinGroup's members, each ``(member_id, group_instance_id, metadata)``.

    A member whose metadata does not decode fails the whole assignment (DecodeError), as in Java:
    a leader cannot assign without knowing everyone's subscription.  Under the cooperative
    protocol the result is checked as Java's leader checks it (``check_cooperative``).
    """
    subscriptions = {m: decode_subscription(metadata, group_instance_id=i) for m, i, metadata in members}
    result = assignor.assign(cluster_partitions, subscriptions)
    if set(result) != set(subscriptions):
        raise AssignmentError(f"{assignor.name} assigned to {sorted(result)}, the members are {sorted(subscriptions)}")
    if rebalance_protocol == COOPERATIVE:
        check_cooperative(subscriptions, {m: a.partitions for m, a in result.items()})
    return {m: encode_assignment(a, version) for m, a in result.items()}


def check_cooperative(members: Mapping[str, Subscription], assignment: Mapping[str, Iterable[TopicPartition]]) -> None:
    """Refuse an assignment that gives a member a partition another member still owns.

    Under cooperative rebalancing the owner keeps consuming until it sees the partition gone
    from its own assignment, so handing it over in the same round would have two consumers.
    """
    moved = partitions_changing_owner(members, assignment)
    if moved:
        listing = ", ".join(f"{tp} to {member}" for tp, member in sorted(moved.items()))
        raise AssignmentError(f"cooperative assignment hands over partitions still owned by another member: {listing}")
