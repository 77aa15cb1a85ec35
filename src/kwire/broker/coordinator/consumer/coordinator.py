"""The KIP-848 consumer-group coordinator: ConsumerGroupHeartbeat, member epochs, sessions.

Follows Kafka's GroupMetadataManager.consumerGroupHeartbeat, because that is what clients are
written against:

* A heartbeat with epoch 0 joins (a static member, one with an instance id, takes over the
  place its instance left with epoch -2; while the old one is still there the join is refused
  with UNRELEASED_INSTANCE_ID).  Epoch -1 leaves, -2 leaves for a while (static members).
* Any other epoch must be the member's current one, or its previous one when the partitions the
  member reports are all still assigned to it (a lost response), else FENCED_MEMBER_EPOCH: the
  client gives its partitions up and joins again.  An unknown member gets UNKNOWN_MEMBER_ID.
* A join, a leave, a changed subscription or a change of the subscribed topics' partitions bumps
  the group epoch; the heartbeat that sees the group epoch ahead of the target assignment runs
  the assignor (``uniform``, or ``range``: the one most members ask for).
* Each member then moves towards its target with ``reconciliation.reconcile`` (revoke first).
  The heartbeat answers with the member's assignment when it joined, sent a full request, or
  its assignment changed.
* A member that does not heartbeat for the session timeout is removed; one that does not give
  up partitions within its rebalance timeout too.  Deadlines are kept in milliseconds of the
  injected ``now_ms`` clock; ``expire()`` removes those past (the broker's timer calls it at the
  next deadline, tests call it after moving their clock).

Offsets of a consumer group are kept by the classic coordinator (its ``Group`` holds the
committed offsets of every group id); this coordinator only checks the member epoch of an
OffsetCommit / OffsetFetch (``check_offset_commit``, ``check_offset_fetch``).  The groups are
written to ``__consumer_offsets`` as Kafka's ConsumerGroup* records (``records``) and replayed on
load; members come back with their epochs and assignments, and their sessions start afresh.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kwire.protocol.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidRequestError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
)

from ...topics import is_internal
from ..model import GroupDescription, GroupListing, MemberDescription
from . import assignment as asg
from .assignors import ASSIGNORS, MemberSpec
from .classic_members import MIGRATION_POLICIES, ClassicMembers
from .classic_protocol import encode_assignment, encode_subscription
from .deadlines import MemberDeadlines
from .group import ConsumerGroup
from .member import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, ConsumerMember, MemberState
from .model import HeartbeatRequest, HeartbeatResult
from .reconciliation import reconcile
from .topic_regex import compile_topic_regex

if TYPE_CHECKING:
    from ...topics import TopicRegistry

__all__ = ["ConsumerGroupCoordinator", "GROUP_TYPE", "Timeouts"]

logger = logging.getLogger("kwire.broker.coordinator.consumer")

# KIP-848's ListGroups / DescribeGroups type name of these groups.
GROUP_TYPE = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class Timeouts:
    session_timeout_ms: int
    heartbeat_interval_ms: int


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ConsumerGroupCoordinator(ClassicMembers):
    """Every consumer group of the broker.

    ``timeouts(group_id)``: the group's session timeout and heartbeat interval (group configs
    over the broker's defaults).  ``classic_group_active(group_id)``: whether a classic group of
    that id has members (a group id is one group type at a time).  ``records``: where the groups
    are persisted (None: in memory only, for tests of the state machine).  ``on_deadline``:
    told the next deadline (clock ms) whenever it may have moved, to arm the broker's timer.
    ``load_group(group_id)``: told before a group is first looked up (its partition may be loading).
    """

    def __init__(self, topics: TopicRegistry, *, timeouts: Callable[[str], Timeouts],
                 now_ms: Callable[[], int] | None = None,
                 classic_group_active: Callable[[str], bool] | None = None,
                 records: Any = None, on_deadline: Callable[[int | None], None] | None = None,
                 release_classic: Callable[[str], Any] | None = None,
                 adopt_classic: Callable[[str, int, str, list], None] | None = None,
                 migration_policy: str = "bidirectional", assignors: Sequence[str] = tuple(ASSIGNORS),
                 load_group: Callable[[str], Any] | None = None):
        unknown = [a for a in assignors if a not in ASSIGNORS]
        if unknown or not assignors:
            raise ValueError(f"group.consumer.assignors must name some of {', '.join(ASSIGNORS)}, got {list(assignors)}")
        # group.consumer.assignors: those members may ask for; the first is the default.
        self._assignors = tuple(assignors)
        if migration_policy not in MIGRATION_POLICIES:
            raise ValueError(f"group.consumer.migration.policy must be one of {', '.join(MIGRATION_POLICIES)}, "
                             f"got {migration_policy!r}")
        self._topics = topics
        self._timeouts = timeouts
        self._now = now_ms or _monotonic_ms
        self._classic_active = classic_group_active or (lambda _gid: False)
        self._records = records
        self._groups: dict[str, ConsumerGroup] = {}
        self._deadlines = MemberDeadlines(on_deadline)
        # Group ids taken from what the store replayed: the store's partitions may load after
        # the broker starts (coordinator.loader), so groups are taken when first looked up.
        self._taken: set[str] = set()
        # Told a group id before it is first looked up: the classic coordinator loads its
        # __consumer_offsets partition at once if small (its groups_loaded then takes it).
        self._load_group = load_group
        self._regex_memo: dict[str, frozenset[str]] | None = None
        # The classic side (classic_members): converting groups, member ids given with MEMBER_ID_REQUIRED.
        self._release_classic = release_classic
        self._adopt_classic = adopt_classic
        self._migration_policy = migration_policy
        self._pending_classic: set[tuple[str, str]] = set()
        self._logger = logger

    # ------------------------------------------------------------------ lookups

    def _take(self, group_id: str) -> None:
        if self._records is None or group_id in self._taken:
            return
        for group in self._records.load(group_id):
            self._taken.add(group_id)
            self._groups[group_id] = group
            now = self._now()
            for m in group:
                # Sessions start again at load: members heartbeat to a restarted broker.
                self._deadlines.start_session((group_id, m.member_id), now + self._session_timeout(group_id, m))
            logger.info("group %s: loaded at epoch %d with %d member(s)", group_id, group.group_epoch, len(group))
            self._deadlines.moved()

    def timeouts_of(self, group_id: str) -> Timeouts:
        """The session timeout and heartbeat interval the group's members get now."""
        return self._timeouts(group_id)

    def _session_timeout(self, group_id: str, member: ConsumerMember) -> int:
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self._timeouts(group_id).session_timeout_ms

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id, if there is one (read it, don't change it)."""
        if group_id not in self._groups:
            if self._load_group is not None:
                self._load_group(group_id)
            self._take(group_id)
        return self._groups.get(group_id)

    def has_group(self, group_id: str) -> bool:
        return self.group(group_id) is not None

    def groups(self) -> list[ConsumerGroup]:
        """Every consumer group, by id."""
        if self._records is not None:
            for group_id in self._records.stored_ids():
                if group_id not in self._groups:
                    self._take(group_id)
        return [self._groups[g] for g in sorted(self._groups)]

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """Answer one ConsumerGroupHeartbeat; a KafkaError names what was refused."""
        self._validate(req)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(req)
        self._regex_memo = {}
        try:
            return self._heartbeat(req)
        finally:
            self._regex_memo = None

    def _validate(self, req: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, in its words."""
        if not req.group_id:
            raise InvalidRequestError("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id:
            raise InvalidRequestError("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id:
            raise InvalidRequestError("RackId can't be empty.")
        if req.api_version >= 1 and not req.member_id:
            # KIP-1082: from v1 the client generates its member id.
            raise InvalidRequestError("MemberId can't be empty.")
        if req.member_epoch > 0 or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not req.member_id:
                raise InvalidRequestError("MemberId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or any(req.owned.values()):
                raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise InvalidRequestError("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise InvalidRequestError("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise InvalidRequestError(f"MemberEpoch is invalid: {req.member_epoch}.")
        if req.server_assignor is not None and req.server_assignor not in self._assignors:
            raise UnsupportedAssignorError(f"ServerAssignor {req.server_assignor} is not supported. "
                                           f"Supported assignors: {', '.join(self._assignors)}.")
        if req.subscribed_topic_regex:
            compile_topic_regex(req.subscribed_topic_regex)

    def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        gid = req.group_id
        group = self.group(gid)
        if group is None and self._classic_active(gid) and req.member_epoch == 0:
            group = self._upgrade(gid)
            if group is None:
                raise GroupIdNotFoundError(f"Group {gid} is a classic group that cannot be upgraded to a consumer "
                                           "group now (it must use the consumer protocol, be loaded, and "
                                           "group.consumer.migration.policy must allow it).")
        if group is None:
            if self._classic_active(gid):
                raise GroupIdNotFoundError(f"Group {gid} is not a consumer group.")
            if req.member_epoch != 0:
                raise UnknownMemberIdError(f"Group {gid} does not have the member {req.member_id}.")
            group = ConsumerGroup(gid)
        changes = _Changes()
        if req.member_epoch == 0:
            member, bumped = self._join(group, req, changes)
        else:
            member = self._known_member(group, req)
            bumped = False
        before = member
        member = member.replace(
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id or member.client_id,
            client_host=req.client_host or member.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
            if req.subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=(req.subscribed_topic_regex or None) if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor)
        if member.subscription != before.subscription:
            bumped = True
        if _metadata_of(member) != _metadata_of(before) or req.member_epoch == 0:
            changes.member_metadata.add(member.member_id)
        timeouts = self._timeouts(gid)
        updated = self._settle(group, member, bumped, changes, req.owned, timeouts.session_timeout_ms,
                               "member joined" if req.member_epoch == 0 else "subscription or topics changed")
        full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1 and req.owned is not None and (
            req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        send = full or updated.assigned != before.assigned
        return HeartbeatResult(updated.member_id, updated.member_epoch, timeouts.heartbeat_interval_ms,
                               dict(updated.assigned) if send else None)

    def _settle(self, group: ConsumerGroup, member: ConsumerMember, bumped: bool, changes: _Changes,
                owned: Mapping[uuid.UUID, Any] | None, session_timeout_ms: int, why: str) -> ConsumerMember:
        """After a member's request changed it: bump the group epoch if needed (a join, a new
        subscription, changed topics), compute the target assignment if the epoch is ahead, move
        the member towards its target, restart its session, persist.  The member as it is now."""
        gid = group.group_id
        now = self._now()
        group.put_member(member)
        if gid not in self._groups:
            self._groups[gid] = group
            self._taken.add(gid)
            changes.created = True
        snapshot = self._topic_snapshot(group)
        if snapshot != group.topic_snapshot:
            group.topic_snapshot = snapshot
            changes.partition_metadata = True
            bumped = True
        if bumped:
            group.group_epoch += 1
            changes.group_epoch = True
            logger.info("group %s: epoch %d (%s)", gid, group.group_epoch, why)
        if group.group_epoch > group.assignment_epoch:
            self._assign(group, changes)
        member = group.members[member.member_id]
        updated = reconcile(member, target_epoch=group.assignment_epoch, target=group.target.get(member.member_id, {}),
                            owner_of=group.owner_of, subscribed_topic_ids=self._subscribed_ids(group, member),
                            owned=owned)
        key = (gid, member.member_id)
        if updated != member:
            group.put_member(updated)
            changes.current_assignment.add(member.member_id)
            if updated.state is MemberState.UNREVOKED_PARTITIONS:
                self._deadlines.await_revocation(key, now + max(updated.rebalance_timeout_ms, 0), updated.member_epoch)
            else:
                self._deadlines.revocation_done(key)
        self._deadlines.start_session(key, now + session_timeout_ms)
        self._persist(group, changes)
        self._deadlines.moved()
        return updated

    def _join(self, group: ConsumerGroup, req: HeartbeatRequest, changes: _Changes) -> tuple[ConsumerMember, bool]:
        """The member a heartbeat with epoch 0 is: new, a static member back, or a member
        starting over (its old self is removed).  Whether the group epoch must grow."""
        member_id = req.member_id or _new_member_id()
        if req.instance_id is not None:
            old = group.member_by_instance(req.instance_id)
            if old is not None and old.member_id != member_id:
                if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    raise UnreleasedInstanceIdError(
                        f"Static member {old.member_id} with instance id {req.instance_id} is not released yet.")
                # The instance comes back: it takes its old place (epoch, assignment) under its new id.
                target = group.target.get(old.member_id)
                self._forget_member(group, old.member_id, changes)
                back = old.replace(member_id=member_id, member_epoch=old.previous_member_epoch,
                                   pending_revocation={})
                group.put_member(back)
                if target is not None:
                    group.target[member_id] = target
                    changes.target_members.add(member_id)
                changes.current_assignment.add(member_id)
                logger.info("group %s: static member %s is back as %s", group.group_id, req.instance_id, member_id)
                return back, False
        existing = group.members.get(member_id)
        if existing is not None:
            # Joining again (after being fenced, say): it starts from nothing.
            self._forget_member(group, member_id, changes)
        member = ConsumerMember(member_id=member_id, instance_id=req.instance_id)
        logger.info("group %s: member %s joins", group.group_id, member_id)
        return member, True

    def _known_member(self, group: ConsumerGroup, req: HeartbeatRequest) -> ConsumerMember:
        member = group.members.get(req.member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {req.member_id} is not a member of group {group.group_id}.")
        if req.instance_id is not None and member.instance_id != req.instance_id:
            raise FencedInstanceIdError(f"Static member {req.member_id} with instance id {req.instance_id} was fenced "
                                        f"by another member of the instance.")
        if member.state is MemberState.UNKNOWN:
            raise FencedMemberEpochError("The consumer group member is in a unknown state. The member must abandon "
                                         "all its partitions and rejoin.")
        if req.member_epoch > member.member_epoch:
            raise FencedMemberEpochError(
                f"The consumer group member has a greater member epoch ({req.member_epoch}) than the one known by "
                f"the group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                "rejoin.")
        if req.member_epoch < member.member_epoch:
            # A lost response: the previous epoch is fine while the member owns nothing it lost.
            if req.member_epoch != member.previous_member_epoch or req.owned is None \
                    or not asg.is_subset(_as_assignment(req.owned), member.assigned):
                raise FencedMemberEpochError(
                    f"The consumer group member has a smaller member epoch ({req.member_epoch}) than the one known "
                    f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                    "partitions and rejoin.")
        return member

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        gid = req.group_id
        group = self.group(gid)
        member = None
        if group is not None:
            if req.instance_id is not None:
                member = group.member_by_instance(req.instance_id)
                if member is not None and member.member_id != req.member_id:
                    raise FencedInstanceIdError(f"Static member {req.member_id} with instance id {req.instance_id} "
                                                "was fenced by another member of the instance.")
            else:
                member = group.members.get(req.member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {req.member_id} is not a member of group {gid}.")
        changes = _Changes()
        interval = self._timeouts(gid).heartbeat_interval_ms
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # The instance keeps its place (and its partitions) until its session ends.
            group.put_member(member.with_epoch(LEAVE_GROUP_STATIC_MEMBER_EPOCH).replace(pending_revocation={}))
            self._deadlines.revocation_done((gid, member.member_id))
            changes.current_assignment.add(member.member_id)
            logger.info("group %s: static member %s (%s) leaves for now", gid, member.member_id, member.instance_id)
        else:
            self._remove(group, member.member_id, changes, "left")
        self._persist(group, changes)
        self._maybe_downgrade(group)
        self._deadlines.moved()
        return HeartbeatResult(member.member_id, req.member_epoch, interval, None)

    # ------------------------------------------------------------------ assignment

    def _subscribed_names(self, member: ConsumerMember) -> set[str]:
        names = {n for n in member.subscribed_topic_names if n in self._topics}
        if member.subscribed_topic_regex:
            names |= self._regex_topics(member.subscribed_topic_regex)
        return names

    def _regex_topics(self, regex: str) -> frozenset[str]:
        """The non-internal topics a regex matches as a whole.  Within one heartbeat a regex is
        resolved once for all members (``_regex_memo``): the topics cannot change meanwhile."""
        memo = self._regex_memo
        if memo is not None and regex in memo:
            return memo[regex]
        pattern = compile_topic_regex(regex)
        found = frozenset(n for n in self._topics.names() if not is_internal(n) and pattern.fullmatch(n))
        if memo is not None:
            memo[regex] = found
        return found

    def _subscribed_ids(self, group: ConsumerGroup, member: ConsumerMember) -> set[uuid.UUID]:
        return {group.topic_snapshot[n][0] for n in self._subscribed_names(member) if n in group.topic_snapshot}

    def _topic_snapshot(self, group: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]:
        """name -> (id, partitions) of every topic some member subscribes to (each regex resolved once)."""
        names: set[str] = set()
        regexes: set[str] = set()
        for m in group:
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                regexes.add(m.subscribed_topic_regex)
        for regex in regexes:
            names |= self._regex_topics(regex)
        snapshot = {}
        for name in names:
            info = self._topics.get(name)
            if info is not None:
                snapshot[name] = (info.topic_id, info.partitions)
        return snapshot

    def assignor_of(self, group: ConsumerGroup) -> str:
        """The assignor the group runs: the one most members name (Kafka's preferred server
        assignor), else the default (the first of group.consumer.assignors)."""
        wanted = Counter(m.server_assignor for m in group if m.server_assignor in self._assignors)
        return wanted.most_common(1)[0][0] if wanted else self._assignors[0]

    def _assign(self, group: ConsumerGroup, changes: _Changes) -> None:
        """A new target assignment for the group epoch (Kafka's TargetAssignmentBuilder)."""
        name = self.assignor_of(group)
        topics = {tid: n for tid, n in group.topic_snapshot.values()}
        specs = {m.member_id: MemberSpec(frozenset(self._subscribed_ids(group, m)), group.target.get(m.member_id, {}))
                 for m in group}
        result = ASSIGNORS[name](specs, topics)
        for member_id, target in result.items():
            if group.target.get(member_id, {}) != target:
                changes.target_members.add(member_id)
            group.target[member_id] = target
        group.assignment_epoch = group.group_epoch
        changes.target_epoch = True
        logger.info("group %s: target assignment of epoch %d by %s for %d member(s)", group.group_id,
                    group.assignment_epoch, name, len(result))

    # ------------------------------------------------------------------ removal and timeouts

    def _forget_member(self, group: ConsumerGroup, member_id: str, changes: _Changes) -> None:
        """Remove a member's state without bumping the epoch (the caller does what follows)."""
        group.remove_member(member_id)
        self._deadlines.forget((group.group_id, member_id))
        changes.removed.add(member_id)

    def _remove(self, group: ConsumerGroup, member_id: str, changes: _Changes, why: str) -> None:
        """A member leaves or is fenced: its partitions are free, the group epoch grows."""
        self._forget_member(group, member_id, changes)
        group.group_epoch += 1
        changes.group_epoch = True
        logger.info("group %s: member %s %s; epoch %d", group.group_id, member_id, why, group.group_epoch)

    def expire(self) -> list[tuple[str, str]]:
        """Remove the members whose session or rebalance deadline passed; (group, member) of each."""
        return self._deadlines.fence_due(self._now(), self._member_of, self._fence)

    def _fence(self, key: tuple[str, str], why: str) -> None:
        group = self._groups[key[0]]
        changes = _Changes()
        self._remove(group, key[1], changes, f"fenced: {why}")
        self._persist(group, changes)
        self._maybe_downgrade(group)

    def _member_of(self, key: tuple[str, str]) -> ConsumerMember | None:
        group = self._groups.get(key[0])
        return group.members.get(key[1]) if group is not None else None

    def next_deadline(self) -> int | None:
        return self._deadlines.next_deadline()

    # ------------------------------------------------------------------ offsets

    def check_offset_commit(self, group_id: str, member_id: str, member_epoch: int, *,
                            transactional: bool = False, api_version: int = 9,
                            partitions: Collection[tuple[str, int]] = ()) -> int | None:
        """None (not a consumer group), 0 or the error of an OffsetCommit (TxnOffsetCommit) to a
        consumer group, as Kafka 4.3's ConsumerGroup.validateOffsetCommit: a commit from outside
        the group (epoch < 0) only while it is empty, else the member must exist.  Its current
        epoch commits anything; a newer one is refused; an older one (KIP-1251: the heartbeat that
        bumped it has not reached the client yet) commits ``partitions`` (topic name, partition)
        only if the member still holds each of them since an epoch no later than the one sent.
        One partition failing refuses the whole commit, as Kafka's validator does.  A member of the
        consumer protocol must commit with OffsetCommit v9+ (UNSUPPORTED_VERSION, as Kafka)."""
        group = self.group(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not member_id and not group.members:
            return 0
        if transactional and member_epoch < 0 and not member_id:
            return 0  # TxnOffsetCommit need not name a member (v0-2, or a producer outside the group)
        member = group.members.get(member_id)
        if member is None:
            return UnknownMemberIdError.code
        if not transactional and member.classic is None and api_version < 9:
            return UnsupportedVersionError.code  # its epoch only fits v9's MemberEpoch, not a generation
        if member_epoch == member.member_epoch:
            return 0
        # A classic member's epoch is its generation: it must match (ILLEGAL_GENERATION, as in a classic group).
        if member.classic is not None:
            return IllegalGenerationError.code
        if member_epoch > member.member_epoch or not self._held_since(member, member_epoch, partitions):
            # Kafka's commitTransactionalOffset answers a stale epoch as ILLEGAL_GENERATION.
            return IllegalGenerationError.code if transactional else StaleMemberEpochError.code
        return 0

    def _held_since(self, member: ConsumerMember, epoch: int, partitions: Collection[tuple[str, int]]) -> bool:
        """KIP-1251's check: assignment epoch <= ``epoch`` for every partition (assigned or pending revocation)."""
        for name, partition in partitions:
            info = self._topics.get(name)
            since = None if info is None else member.assignment_epoch(info.topic_id, partition)
            if since is None or since > epoch:
                return False
        return True

    def topics_in_use(self, group_id: str) -> set[str]:
        """The topics the members of the consumer group subscribe to (empty when there is no
        such group): their committed offsets neither expire nor may be deleted."""
        group = self.group(group_id)
        if group is None:
            return set()
        names: set[str] = set()
        for m in group:
            names |= self._subscribed_names(m)
        return names

    def check_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """0 or the error of an OffsetFetch v9+ that names a member (Kafka's validateOffsetFetch)."""
        group = self.group(group_id)
        if group is None or member_epoch < 0:
            return 0
        member = group.members.get(member_id or "")
        if member is None:
            return UnknownMemberIdError.code
        if member_epoch != member.member_epoch:
            return StaleMemberEpochError.code
        return 0

    # ------------------------------------------------------------------ the classic requests

    GROUP_TYPE = GROUP_TYPE

    def list_groups(self, states: Collection[str] = (), types: Collection[str] = ()) -> list[GroupListing]:
        """ListGroups' rows of the consumer groups (filters as the classic coordinator's)."""
        if types and GROUP_TYPE not in {t.lower() for t in types}:
            return []
        wanted = {s.lower() for s in states}
        return [GroupListing(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state.value) for g in self.groups()
                if not wanted or g.state.value.lower() in wanted]

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """DescribeGroups of a consumer group (Kafka's ConsumerGroup.asDescribedGroup): its
        members' subscriptions and assignments in the classic consumer protocol's encoding."""
        group = self.group(group_id)
        if group is None:
            return None
        # A classic member shows the subscription it sent; a consumer-protocol one, its topics encoded.
        members = [MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                     m.classic.protocols[0][1] if m.classic is not None and m.classic.protocols
                                     else encode_subscription(self._subscribed_names(m)),
                                     encode_assignment(self._topics, m.assigned))
                   for m in group]
        return GroupDescription(group.group_id, group.state.value, CONSUMER_PROTOCOL_TYPE, self.assignor_of(group),
                                members)

    # ------------------------------------------------------------------ admin

    def close(self) -> None:
        """Stop the deadline timer (the broker's ``on_deadline`` may have one to close)."""
        self._deadlines.close()

    def groups_loaded(self, group_ids: list[str]) -> None:
        """Their ``__consumer_offsets`` partition was loaded: take the consumer groups among them,
        so their members' sessions run from now (a member that never comes back is removed)."""
        for group_id in group_ids:
            if group_id not in self._groups:
                self._take(group_id)

    def remove_empty_groups(self, has_offsets: Callable[[str], bool]) -> list[str]:
        """Delete the consumer groups without members nor committed offsets (Kafka's periodic
        cleanup, run with the offsets' expiry check); their ids."""
        gone = [g.group_id for g in self.groups() if not g.members and not has_offsets(g.group_id)]
        for group_id in gone:
            self.delete_group(group_id)
            self._logger.info("group %s: empty, without offsets: removed", group_id)
        return gone

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a consumer group: 0, or NON_EMPTY_GROUP while it has members."""
        group = self.group(group_id)
        if group is None:
            return GroupIdNotFoundError.code
        if group.members:
            return NonEmptyGroupError.code
        if self._records is not None:
            self._records.delete_group(group)
        group.deleted = True
        del self._groups[group_id]
        return 0

    def on_topic_deleted(self, topic: str) -> None:
        """Nothing at once: the next heartbeat of each group sees the topic gone and reassigns."""

    # ------------------------------------------------------------------ persistence

    def _persist(self, group: ConsumerGroup, changes: _Changes) -> None:
        if self._records is None or changes.empty:
            return
        try:
            self._records.write(group, changes)
        except OSError:
            logger.exception("group %s: could not write its state to __consumer_offsets", group.group_id)


@dataclass
class _Changes:
    """What one request changed in a group, so the records written are only those."""

    created: bool = False
    group_epoch: bool = False
    partition_metadata: bool = False
    target_epoch: bool = False

    def __post_init__(self) -> None:
        self.member_metadata: set[str] = set()
        self.current_assignment: set[str] = set()
        self.target_members: set[str] = set()
        self.removed: set[str] = set()

    @property
    def empty(self) -> bool:
        return not (self.created or self.group_epoch or self.partition_metadata or self.target_epoch
                    or self.member_metadata or self.current_assignment or self.target_members or self.removed)


def _metadata_of(m: ConsumerMember) -> tuple:
    return (m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names, m.subscribed_topic_regex,
            m.rebalance_timeout_ms, m.server_assignor)


def _as_assignment(owned: Any) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in owned.items() if ps}


def _new_member_id() -> str:
    return str(uuid.uuid4())


