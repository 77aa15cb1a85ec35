"""Moving a member from its current assignment towards its target (Kafka's CurrentAssignmentBuilder).

KIP-848's rule is "revoke before assign": a partition is given to a member only once no other
member owns it (holds it assigned or pending revocation).  A member whose target takes partitions
away keeps its epoch and is asked to revoke them (UNREVOKED_PARTITIONS); once its heartbeat no
longer reports them it moves to the target epoch and gets the partitions that are free, waiting
in UNRELEASED_PARTITIONS for those another member has not released yet.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping

from .assignment import Assignment
from .member import ConsumerMember, MemberState

__all__ = ["reconcile"]

# (topic id, partition) -> id of the member that owns it, or None when free.
OwnerOf = Callable[[uuid.UUID, int], str | None]


def reconcile(member: ConsumerMember, *, target_epoch: int, target: Assignment, owner_of: OwnerOf,
              subscribed_topic_ids: Collection[uuid.UUID],
              owned: Mapping[uuid.UUID, Collection[int]] | None) -> ConsumerMember:
    """The member's next state.  ``owned``: the partitions the member's heartbeat reports
    (None: not sent, so it is assumed to own everything it was given)."""
    step = _Step(member, target_epoch, target, owner_of, subscribed_topic_ids, owned)
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return step.next_assignment()
        return step.drop_unsubscribed()
    if state is MemberState.UNREVOKED_PARTITIONS:
        if step.owns_any(member.pending_revocation):
            return step.drop_unsubscribed()
        return step.next_assignment()
    if state is MemberState.UNRELEASED_PARTITIONS:
        return step.next_assignment()
    return member  # UNKNOWN: the coordinator fences such a member before it gets here


class _Step:
    def __init__(self, member: ConsumerMember, target_epoch: int, target: Assignment, owner_of: OwnerOf,
                 subscribed: Collection[uuid.UUID], owned: Mapping[uuid.UUID, Collection[int]] | None):
        self.member = member
        self.target_epoch = target_epoch
        self.target = target
        self.owner_of = owner_of
        self.subscribed = set(subscribed)
        self.owned = owned

    def owns_any(self, partitions: Assignment) -> bool:
        """Whether the member still holds any of ``partitions`` (as its heartbeat says)."""
        if self.owned is None:
            return True
        return any(p in partitions.get(t, ()) for t, ps in self.owned.items() for p in ps)

    def drop_unsubscribed(self) -> ConsumerMember:
        """Same epoch, but partitions of topics the member no longer subscribes to go to revocation."""
        m = self.member
        gone = {t: ps for t, ps in m.assigned.items() if t not in self.subscribed}
        if not gone:
            return m
        assigned = {t: ps for t, ps in m.assigned.items() if t in self.subscribed}
        pending = dict(m.pending_revocation)
        for t, ps in gone.items():
            pending[t] = pending.get(t, frozenset()) | ps
        if self.owns_any(pending):
            return m.with_epoch(m.member_epoch).replace(state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                                          pending_revocation=pending,
                                                          assignment_epochs=self.epochs(assigned, pending))
        return m.with_epoch(m.member_epoch).replace(assigned=assigned, assignment_epochs=self.epochs(assigned))

    def epochs(self, *held: Assignment, new_epoch: int | None = None) -> dict[tuple[uuid.UUID, int], int]:
        """KIP-1251's assignment epochs of the partitions ``held``: a partition the member already
        had keeps the epoch it was given at; one it did not have dates from ``new_epoch``."""
        m = self.member
        out: dict[tuple[uuid.UUID, int], int] = {}
        for parts in held:
            for topic_id, ps in parts.items():
                for p in ps:
                    had = m.assignment_epoch(topic_id, p)
                    out[(topic_id, p)] = had if had is not None else (
                        new_epoch if new_epoch is not None else m.member_epoch)
        return out

    def next_assignment(self) -> ConsumerMember:
        m = self.member
        assigned: dict[uuid.UUID, frozenset[int]] = {}
        revoking: dict[uuid.UUID, frozenset[int]] = {}
        to_assign: dict[uuid.UUID, frozenset[int]] = {}
        unreleased = False
        for topic_id in {*self.target, *m.assigned}:
            target = self.target.get(topic_id, frozenset()) if topic_id in self.subscribed else frozenset()
            current = m.assigned.get(topic_id, frozenset())
            keep = current & target
            revoke = current - keep
            new = set(target - keep)
            pending_here = m.pending_revocation.get(topic_id, frozenset())
            # A partition another member still owns waits; one this member itself is giving
            # back (pending revocation) is not "another member's".
            blocked = {p for p in new if self.owner_of(topic_id, p) is not None and p not in pending_here}
            if blocked:
                unreleased = True
                new -= blocked
            if keep:
                assigned[topic_id] = keep
            if revoke:
                revoking[topic_id] = revoke
            if new:
                to_assign[topic_id] = frozenset(new)
        if revoking and self.owns_any(revoking):
            # Give up first, at the current epoch; the new partitions come after.
            return m.with_epoch(m.member_epoch).replace(state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                                          pending_revocation=revoking,
                                                          assignment_epochs=self.epochs(assigned, revoking))
        for topic_id, new_parts in to_assign.items():
            assigned[topic_id] = assigned.get(topic_id, frozenset()) | new_parts
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        if not to_assign and not unreleased and m.member_epoch == self.target_epoch and not revoking \
                and m.state is MemberState.STABLE and assigned == dict(m.assigned):
            return m
        return m.with_epoch(self.target_epoch).replace(
            state=state, assigned=assigned, pending_revocation={},
            assignment_epochs=self.epochs(assigned, new_epoch=self.target_epoch))
