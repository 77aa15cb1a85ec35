"""Which member really owns which partition, from the claims in the members' subscriptions.

Members say what they own in ``owned_partitions`` and in which generation in
``generation_id`` (v2+; older cooperative-sticky members put it in the user data instead).
Claims can disagree: a member that was kicked out and comes back still claims its old
partitions.  Java's AbstractStickyAssignor settles this per partition, and so do we:

* the claim from the highest generation wins; claims from older generations are dropped;
* if several members claim it in that highest generation, nobody keeps it ("contested"): it is
  handed out as a partition that changes owner, so the cooperative assignor withholds it for a
  round, giving both claimants time to revoke it;
* claims of topics the group no longer reads, or of partitions that do not exist (a topic
  deleted and re-created smaller), are dropped.

Java settles claims walking its members in hash-map order, so a partition claimed twice in one
generation and also in a newer one can end up contested or kept depending on that order; here
the newest-generation rule always applies first (kept when one member claims it in the newest
generation).  Java also remembers the highest generation across calls on the same assignor
object; here every call stands alone.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from kwire.protocol.consumer_protocol import Subscription

from ..types import TopicPartition
from .ordering import java_string_key

__all__ = ["DEFAULT_GENERATION", "OwnedPartitions", "member_generation", "resolve_owned"]

DEFAULT_GENERATION = -1
_GENERATION = struct.Struct(">i")


def member_generation(sub: Subscription) -> int:
    """The generation a member's owned partitions come from (-1: unknown).

    As Java's CooperativeStickyAssignor: the v2+ field when set (>= 0), else the int32 the
    assignor itself writes as user data (Kafka 2.4-3.3 consumers have no field for it), else -1.
    """
    if sub.generation_id >= 0:
        return sub.generation_id
    if sub.user_data is None:
        return DEFAULT_GENERATION
    if len(sub.user_data) < _GENERATION.size:
        return DEFAULT_GENERATION  # Java: unreadable user data counts as the default generation
    generation: int = _GENERATION.unpack_from(sub.user_data)[0]
    return generation


@dataclass
class OwnedPartitions:
    """The outcome of settling the claims."""

    by_member: dict[str, list[TopicPartition]] = field(default_factory=dict)
    contested: set[TopicPartition] = field(default_factory=set)
    max_generation: int = DEFAULT_GENERATION


def resolve_owned(counts: Mapping[str, int], members: Mapping[str, Subscription]) -> OwnedPartitions:
    """Settle every member's claims against ``counts`` (the assignable topics and their sizes)."""
    result = OwnedPartitions(by_member={m: [] for m in members})
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member_id in sorted(members, key=java_string_key):
        generation = member_generation(members[member_id])
        result.max_generation = max(result.max_generation, generation)
        # dict.fromkeys: a partition listed twice by one member is one claim, not a conflict.
        for tp in dict.fromkeys(members[member_id].owned_partitions):
            if 0 <= tp.partition < counts.get(tp.topic, 0):
                claims.setdefault(tp, []).append((generation, member_id))
    for tp, claimants in claims.items():
        newest = max(g for g, _ in claimants)
        owners = [m for g, m in claimants if g == newest]
        if len(owners) == 1:
            result.by_member[owners[0]].append(tp)
        else:
            result.contested.add(tp)
    return result
