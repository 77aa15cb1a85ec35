"""Classic and consumer-protocol members in one group: Kafka 4.x's online upgrade and downgrade.

``group.consumer.migration.policy`` (``bidirectional`` by default, ``upgrade``, ``downgrade``,
``disabled``) says which ways a group may convert:

* Upgrade: a ConsumerGroupHeartbeat join to a classic group of the consumer protocol (in any
  state: a rebalance under way is abandoned, as Kafka's convertToConsumerGroup)
  turns it into a consumer group: the generation becomes the group epoch, each classic member a
  member at that epoch with the partitions its SyncGroup assignment gave it.
* Classic members then stay in the consumer group and keep speaking JoinGroup / SyncGroup /
  Heartbeat / LeaveGroup: a JoinGroup moves the member towards its target (the partitions it
  reports owning in its subscription count as still owned: cooperative clients give them up and
  join again; eager ones own nothing when they join) and is answered at once, with the member
  epoch as the generation and no leader (the coordinator assigns); SyncGroup answers the
  member's assignment; a Heartbeat answers REBALANCE_IN_PROGRESS while the member is not at
  its target, so it joins again.
* Downgrade: when the last consumer-protocol member leaves (or is fenced) and classic members
  remain, the group goes back to the classic coordinator, with those members at the generation
  they know, and rebalances.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kwire.protocol.errors import (
    ErrorCode,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

from ..model import JoinRequest, JoinResult, SyncResult
from .classic_protocol import decode_assignment, decode_subscription, encode_assignment
from .group import ConsumerGroup
from .member import ClassicMetadata, ConsumerMember, MemberState

if TYPE_CHECKING:
    from .coordinator import ConsumerGroupCoordinator

__all__ = ["MIGRATION_POLICIES", "ClassicMembers"]

MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")
CONSUMER_PROTOCOL_TYPE = "consumer"


class ClassicMembers:
    """The classic side of ``ConsumerGroupCoordinator`` (mixed into it)."""

    # ------------------------------------------------------------------ conversion

    def _upgrade(self: ConsumerGroupCoordinator, group_id: str) -> ConsumerGroup | None:
        """The classic group of ``group_id`` as a consumer group, or None if it can't convert."""
        from .coordinator import _Changes
        if self._migration_policy not in ("upgrade", "bidirectional") or self._release_classic is None:
            return None
        released = self._release_classic(group_id)
        if released is None:
            return None
        generation, protocol, members = released
        group = ConsumerGroup(group_id)
        group.group_epoch = group.assignment_epoch = generation
        now = self._now()
        changes = _Changes(created=True, group_epoch=True, partition_metadata=True, target_epoch=True)
        for m in members:
            topics = (decode_subscription(m.metadata(protocol)) or ([], {}))[0]
            assigned = self._ids_of(decode_assignment(m.assignment))
            member = ConsumerMember(
                member_id=m.member_id, instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=tuple(sorted(set(topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=generation,
                previous_member_epoch=generation, assigned=assigned,
                classic=ClassicMetadata(m.session_timeout_ms, tuple(m.protocols)))
            group.put_member(member)
            group.target[m.member_id] = assigned
            self._deadlines.start_session((group_id, m.member_id), now + m.session_timeout_ms)
            changes.member_metadata.add(m.member_id)
            changes.current_assignment.add(m.member_id)
            changes.target_members.add(m.member_id)
        group.topic_snapshot = self._topic_snapshot(group)
        self._groups[group_id] = group
        self._taken.add(group_id)
        self._persist(group, changes)
        self._logger.info("group %s: classic group of generation %d upgraded to a consumer group (%d member(s))",
                          group_id, generation, len(members))
        return group

    def _maybe_downgrade(self: ConsumerGroupCoordinator, group: ConsumerGroup) -> None:
        """Give the group back to the classic coordinator if only classic members are left."""
        if (self._migration_policy not in ("downgrade", "bidirectional") or self._adopt_classic is None
                or not group.members or any(m.classic is None for m in group)
                or self._groups.get(group.group_id) is not group):
            return
        from ..group import Member
        members = list(group)
        common = set.intersection(*({name for name, _ in m.classic.protocols} for m in members))
        protocol = next((name for name, _ in members[0].classic.protocols if name in common), None)
        if protocol is None:
            return  # no protocol every member speaks: the classic group could not choose one
        classic = [Member(member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                          client_host=m.client_host, rebalance_timeout_ms=max(m.rebalance_timeout_ms, 0),
                          session_timeout_ms=m.classic.session_timeout_ms, protocol_type=CONSUMER_PROTOCOL_TYPE,
                          protocols=list(m.classic.protocols), assignment=encode_assignment(self._topics, m.assigned))
                   for m in members]
        gid = group.group_id
        for m in members:
            self._deadlines.forget((gid, m.member_id))
        if self._records is not None:
            try:
                self._records.delete_group(group, members=[m.member_id for m in members])
            except OSError:
                self._logger.exception("group %s: could not write its conversion to __consumer_offsets", gid)
        del self._groups[gid]
        group.deleted = True
        # The generation the classic members know (their epoch, as Kafka's conversion keeps the
        # epoch before the leave), so their heartbeats hear REBALANCE_IN_PROGRESS and join
        # again, not ILLEGAL_GENERATION (which would make them drop their partitions as lost).
        generation = max(m.member_epoch for m in members)
        self._adopt_classic(gid, generation, protocol, classic)
        self._logger.info("group %s: the last consumer-protocol member left; downgraded to a classic group at "
                          "generation %d with %d member(s)", gid, generation, len(classic))
        self._deadlines.moved()

    def _ids_of(self: ConsumerGroupCoordinator, by_name: dict[str, list[int]]) -> dict[uuid.UUID, frozenset[int]]:
        out = {}
        for name, ps in by_name.items():
            info = self._topics.get(name)
            if info is not None and ps:
                out[info.topic_id] = frozenset(p for p in ps if 0 <= p < info.partitions)
        return {t: ps for t, ps in out.items() if ps}

    # ------------------------------------------------------------------ the classic requests

    def takes_classic_requests(self: ConsumerGroupCoordinator, group_id: str) -> bool:
        """Whether JoinGroup/SyncGroup/Heartbeat/LeaveGroup of ``group_id`` are this coordinator's:
        a consumer group with members.  An empty one gives its id up to a classic JoinGroup
        (Kafka converts an empty consumer group on a classic join)."""
        group = self.group(group_id)
        if group is None:
            return False
        if group.members:
            return True
        self.delete_group(group_id)
        self._logger.info("group %s: empty consumer group given to the classic protocol", group_id)
        return False

    def classic_join(self: ConsumerGroupCoordinator, group_id: str, req: JoinRequest) -> JoinResult:
        from .coordinator import _Changes
        group = self.group(group_id)
        if group is None:
            return JoinResult(UnknownMemberIdError.code, req.member_id)
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return JoinResult(InconsistentGroupProtocolError.code, req.member_id)
        chosen = None
        for name, metadata in req.protocols:
            parsed = decode_subscription(metadata)
            if parsed is not None:
                chosen = name, parsed
                break
        if chosen is None:
            return JoinResult(InconsistentGroupProtocolError.code, req.member_id)
        name, (topics, owned_by_name) = chosen
        member_id = req.member_id
        existing = group.members.get(member_id) if member_id else None
        if not member_id:
            member_id = f"{req.client_id}-{uuid.uuid4()}"
            if req.require_known_member_id and req.group_instance_id is None:
                # KIP-394: the member joins again with the id it is given.
                self._pending_classic.add((group_id, member_id))
                return JoinResult(MemberIdRequiredError.code, member_id)
        elif existing is None and (group_id, member_id) not in self._pending_classic:
            return JoinResult(UnknownMemberIdError.code, member_id)
        if existing is not None and existing.classic is None:
            return JoinResult(InconsistentGroupProtocolError.code, member_id)
        self._pending_classic.discard((group_id, member_id))
        changes = _Changes()
        if existing is None and req.group_instance_id is not None:
            old = group.member_by_instance(req.group_instance_id)
            if old is not None:  # a static member's new incarnation replaces the old one
                self._forget_member(group, old.member_id, changes)
        base = existing or ConsumerMember(member_id=member_id, instance_id=req.group_instance_id)
        member = base.replace(client_id=req.client_id, client_host=req.client_host,
                              rebalance_timeout_ms=req.rebalance_timeout_ms,
                              subscribed_topic_names=tuple(sorted(set(topics))),
                              classic=ClassicMetadata(req.session_timeout_ms, tuple(req.protocols)))
        bumped = existing is None or member.subscription != base.subscription
        changes.member_metadata.add(member_id)
        owned = {t: sorted(ps) for t, ps in self._ids_of(owned_by_name).items()}
        updated = self._settle(group, member, bumped, changes, owned, req.session_timeout_ms,
                               "classic member joined" if existing is None else "classic member rejoined")
        return JoinResult(ErrorCode.NONE, member_id, generation_id=updated.member_epoch, protocol_type=CONSUMER_PROTOCOL_TYPE,
                          protocol_name=name, leader_id="", members=[])

    def _classic_member(self: ConsumerGroupCoordinator, group_id: str, generation: int, member_id: str,
                        ) -> tuple[ConsumerGroup | None, ConsumerMember | None, int]:
        group = self.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None or member.classic is None:
            return group, None, UnknownMemberIdError.code
        if generation != member.member_epoch:
            return group, member, IllegalGenerationError.code
        self._deadlines.start_session((group_id, member_id), self._now() + member.classic.session_timeout_ms)
        return group, member, ErrorCode.NONE

    def classic_sync(self: ConsumerGroupCoordinator, group_id: str, generation: int, member_id: str,
                     protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        _, member, error = self._classic_member(group_id, generation, member_id)
        if error:
            return SyncResult(error)
        if protocol_type not in (None, CONSUMER_PROTOCOL_TYPE):
            return SyncResult(InconsistentGroupProtocolError.code)
        name = protocol_name or member.classic.protocols[0][0]
        return SyncResult(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE, name, encode_assignment(self._topics, member.assigned))

    def classic_heartbeat(self: ConsumerGroupCoordinator, group_id: str, generation: int, member_id: str) -> int:
        from .coordinator import _Changes
        group, member, error = self._classic_member(group_id, generation, member_id)
        if error:
            return error
        if group.group_epoch > group.assignment_epoch:
            changes = _Changes()
            self._assign(group, changes)
            self._persist(group, changes)
        if member.state is not MemberState.STABLE or member.member_epoch != group.assignment_epoch:
            return RebalanceInProgressError.code  # it joins again to move towards its target
        return ErrorCode.NONE

    def classic_leave(self: ConsumerGroupCoordinator, group_id: str,
                      leaving: Sequence[tuple[str, str | None]]) -> tuple[int, list[int]]:
        from .coordinator import _Changes
        group = self.group(group_id)
        codes: list[int] = []
        changes = _Changes()
        for member_id, instance_id in leaving:
            member = group.member_by_instance(instance_id) if group is not None and instance_id else \
                (group.members.get(member_id) if group is not None else None)
            if member is None:
                codes.append(UnknownMemberIdError.code)
                continue
            self._remove(group, member.member_id, changes, "left (classic LeaveGroup)")
            codes.append(ErrorCode.NONE)
        if group is not None:
            self._persist(group, changes)
            self._maybe_downgrade(group)
            self._deadlines.moved()
        return ErrorCode.NONE, codes

