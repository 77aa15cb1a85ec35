"""Share-group membership (KIP-932 ShareGroupHeartbeat), as Kafka's GroupMetadataManager runs it.

A member names itself (Kafka 4.1+: the client generates the member id), joins with epoch 0,
heartbeats with the epoch it was given and leaves with -1.  The group epoch moves on whenever the
members, their subscriptions or the subscribed topics' partitions change; a member is then given
its new assignment with the group epoch as its member epoch.  Share groups have no revocation
step: a partition may be assigned to several members at once (the share partition hands each
record to one member at a time), so an assignment is installed as soon as it is computed.

Assignment ("simple", as Kafka's SimpleAssignor aims): per topic, among the members subscribed to
it (by member id), each partition goes to one member, in turn, while there are at least as many
partitions as members; with more members than partitions every member gets one partition, so a
partition has several members.  Every partition always has a member.  Unlike Kafka's, the
assignment is recomputed from scratch (no stickiness): a share partition does not care which
member fetches it, and records a member held when its partition moved stay its own to acknowledge
until their locks run out.

A member not heard from for ``share.session.timeout.ms`` is removed.  Time is the ``now_ms``
passed in: the coordinator owns no timer, expiry happens when a request looks (``expire``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kwire.protocol.errors import FencedMemberEpochError, InvalidRequestError, UnknownMemberIdError

__all__ = ["ShareGroup", "ShareMember", "ShareGroups", "ASSIGNOR_NAME"]

ASSIGNOR_NAME = "simple"
LEAVE_EPOCH = -1


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    deadline_ms: int
    # topic -> partitions
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)
    previous_member_epoch: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


class ShareGroups:
    """The share groups of this broker.  ``partitions_of(topic) -> int | None`` reads topic
    metadata; ``on_member_expired(group, member)`` releases what a member that timed out held.
    A member that leaves (epoch -1) keeps its share session: as Kafka, its records are released
    when that session closes (its last ShareAcknowledge or ShareFetch, which a closing client
    sends alongside the leave) or when their locks run out."""

    def __init__(self, partitions_of: Callable[[str], int | None],
                 on_member_expired: Callable[[str, str], None] = lambda g, m: None,
                 load: Callable[[str], ShareGroup | None] = lambda g: None) -> None:
        self._partitions_of = partitions_of
        self._on_member_expired = on_member_expired
        # A group persisted before a restart, taken when first looked up (None: there is none).
        self._load = load
        self.groups: dict[str, ShareGroup] = {}
        # Groups whose members, epochs or assignments may have changed since ``take_changed``.
        self._changed: set[str] = set()

    def mark_changed(self, group_id: str) -> None:
        self._changed.add(group_id)

    def take_changed(self) -> list[str]:
        changed, self._changed = sorted(self._changed), set()
        return [g for g in changed if g in self.groups]

    def group(self, group_id: str) -> ShareGroup | None:
        g = self.groups.get(group_id)
        if g is None:
            g = self._load(group_id)
            if g is not None:
                self.groups[group_id] = g
        return g

    def _target(self, g: ShareGroup, member: ShareMember) -> dict[str, tuple[int, ...]]:
        out = {}
        for topic in sorted(member.subscribed):
            n = self._partitions_of(topic)
            if not n:
                continue
            members = sorted(m.member_id for m in g.members.values() if topic in m.subscribed)
            i = members.index(member.member_id)
            if len(members) <= n:
                parts = tuple(range(i, n, len(members)))
            else:
                parts = (i % n,)
            out[topic] = parts
        return out

    def _reassign(self, g: ShareGroup) -> None:
        """Compute every member's target assignment; the group epoch moves on if one changed."""
        changed = False
        for m in g.members.values():
            target = self._target(g, m)
            if target != m.assignment:
                m.assignment = target
                changed = True
        if changed:
            g.group_epoch += 1

    def expire(self, now_ms: int) -> None:
        """Remove members whose session timed out."""
        for g in list(self.groups.values()):
            for m in [m for m in g.members.values() if m.deadline_ms <= now_ms]:
                self._remove(g, m.member_id)
                self._on_member_expired(g.group_id, m.member_id)

    def _remove(self, g: ShareGroup, member_id: str) -> None:
        if g.members.pop(member_id, None) is not None:
            self._changed.add(g.group_id)
            g.group_epoch += 1
            self._reassign(g)

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, subscribed: list[str] | None,
                  rack_id: str | None, *, client_id: str, client_host: str, session_timeout_ms: int,
                  now_ms: int) -> tuple[ShareMember | None, bool]:
        """Process one heartbeat: (the member, whether its assignment must be sent); (None, False)
        after a leave."""
        if not member_id:
            raise InvalidRequestError("MemberId can't be empty.")
        self.expire(now_ms)
        g = self.group(group_id)
        if member_epoch == LEAVE_EPOCH:
            if g is not None:
                self._remove(g, member_id)
            return None, False
        if g is None:
            g = self.groups[group_id] = ShareGroup(group_id)
            self._changed.add(group_id)
        start_epochs = (g.group_epoch, g.assignment_epoch)
        m = g.members.get(member_id)
        joined = False
        if member_epoch == 0:
            if subscribed is None:
                raise InvalidRequestError("SubscribedTopicNames must be set in first request.")
            if m is None:
                m = ShareMember(member_id, 0, (), rack_id, client_id, client_host, 0)
                g.members[member_id] = m
                joined = True
        elif m is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group_id}.")
        elif member_epoch > m.member_epoch or member_epoch < m.member_epoch - 1:
            # Kafka accepts the current epoch, and the previous one (a lost response).
            raise FencedMemberEpochError(f"The share group member has a smaller or larger member epoch "
                                         f"({member_epoch}) than the one known by the group coordinator "
                                         f"({m.member_epoch}).")
        m.deadline_ms = now_ms + session_timeout_ms
        details = (m.client_id, m.client_host, m.rack_id)
        m.client_id, m.client_host = client_id, client_host
        if rack_id is not None:
            m.rack_id = rack_id
        if subscribed is not None and tuple(sorted(set(subscribed))) != m.subscribed:
            m.subscribed = tuple(sorted(set(subscribed)))
            joined = True
        if joined:  # one new group epoch for a join or a changed subscription
            g.group_epoch += 1
        before = m.assignment
        epoch = g.group_epoch
        self._reassign(g)  # (also catches partitions added to a subscribed topic)
        if joined and g.group_epoch > epoch:
            g.group_epoch = epoch  # the join's epoch covers its reassignment
        send = member_epoch == 0 or m.assignment != before
        if m.member_epoch != g.group_epoch:
            m.previous_member_epoch, m.member_epoch = m.member_epoch, g.group_epoch
            send = True
        g.assignment_epoch = g.group_epoch
        # Only a heartbeat that changed what the group's records say has them written again.
        if joined or send or start_epochs != (g.group_epoch, g.assignment_epoch) \
                or details != (m.client_id, m.client_host, m.rack_id):
            self._changed.add(group_id)
        return m, send

    def delete(self, group_id: str) -> None:
        self.groups.pop(group_id, None)
        self._changed.discard(group_id)
