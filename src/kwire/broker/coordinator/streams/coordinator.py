"""The streams-group coordinator (KIP-1071): StreamsGroupHeartbeat, epochs, tasks, sessions.

Follows Kafka's GroupMetadataManager.streamsGroupHeartbeat:

* Epoch 0 joins with the application's topology (the first member's becomes the group's; an
  older epoch joins but is told STALE_TOPOLOGY; any other change is refused: Kafka 4.3 has no
  topology updates).  -1 leaves.  What Kafka 4.3 does not support yet is refused before anything
  else with its words: static membership (an instance id, epoch -2), task offsets, warm-up tasks,
  regular expressions for source topics.
* Any other epoch must be the member's current one, or its previous one when the tasks it
  reports are all still its own (a lost response), else FENCED_MEMBER_EPOCH; an unknown member
  is UNKNOWN_MEMBER_ID.
* The topology is resolved against the topics (``topology.configure``) on each heartbeat; while
  source topics are missing or topics are wrongly partitioned the group is NotReady and assigns
  no tasks, and the member is told why in the response's Status list.  Missing internal topics
  (repartition, changelog) are returned for the broker to create (``StreamsHeartbeatResult.to_create``),
  as Kafka 4.2's coordinator has its broker create them.
* A join, a leave, a new topology, changed partition counts, a member's new process id, rack or
  client tags, or a new ``streams.num.standby.replicas`` bump the group epoch; the heartbeat that
  sees the group epoch ahead of the target computes it with the sticky task assignor, unless the
  first member of a new group started ``streams.initial.rebalance.delay.ms`` (ASSIGNMENT_DELAYED).
* Members reconcile towards their targets with the KIP-848 rule (``consumer.reconciliation``):
  tasks to give up are revoked first, a task goes to a member only once released
  (``StreamsGroup.holder_of``, Kafka's isUnreleasedTask).
* A member without a heartbeat for ``streams.session.timeout.ms`` is removed, and one that does
  not revoke tasks within its rebalance timeout too; deadlines run on the injected ``now_ms``.

Offsets are the classic coordinator's (as for consumer groups): ``check_offset_commit`` /
``check_offset_fetch`` check the member epochs of OffsetCommit / OffsetFetch; an older epoch's
commit holds for the partitions of active tasks held since then (KIP-1251, Kafka 4.3).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kwire.protocol.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidRequestError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)

from ..consumer.deadlines import MemberDeadlines
from ..consumer.reconciliation import reconcile
from ..model import GroupListing
from .assignor import AssignmentMember, assign_tasks
from .group import StreamsGroup
from .member import (
    ACTIVE,
    KINDS,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    STANDBY,
    WARMUP,
    MemberState,
    StreamsMember,
    TaskAssignment,
    by_kind,
)
from .topology import ConfiguredTopology, InternalTopic, StatusCode, StreamsTopology, configure

__all__ = ["GROUP_TYPE", "StreamsGroupCoordinator", "StreamsHeartbeat", "StreamsHeartbeatResult", "StreamsSettings"]

logger = logging.getLogger("kwire.broker.coordinator.streams")

# ListGroups' and DescribeGroups' type and protocol type of these groups (Kafka's Group.GroupType.STREAMS).
GROUP_TYPE = "streams"


@dataclass(frozen=True, slots=True)
class StreamsSettings:
    """A group's streams.* configs: session timeout, heartbeat interval, standby replicas, and how
    long a new group's first assignment waits for more members (Kafka's defaults)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    num_standby_replicas: int = 0
    initial_rebalance_delay_ms: int = 3_000


@dataclass(frozen=True, slots=True)
class StreamsHeartbeat:
    """A StreamsGroupHeartbeat; None (or -1) fields did not change since the last heartbeat.
    ``topology`` is the request's Topology struct (checked here); ``owned`` the tasks the
    member reports by kind (None: not sent)."""

    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = -1
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Any = None
    owned: TaskAssignment | None = None
    owned_lists_sent: tuple[bool, bool, bool] = (False, False, False)
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    task_offsets: tuple[tuple[str, int, int], ...] | None = None
    task_end_offsets: tuple[tuple[str, int, int], ...] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class StreamsHeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    statuses: list[tuple[StatusCode, str]] = field(default_factory=list)
    assignment: TaskAssignment | None = None  # None: unchanged, not sent
    endpoint_epoch: int = 0
    # user endpoint -> (active partitions, standby partitions) by topic; None: not sent.
    partitions_by_endpoint: dict[tuple[str, int], tuple[dict[str, set[int]], dict[str, set[int]]]] | None = None
    to_create: tuple[InternalTopic, ...] = ()


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class StreamsGroupCoordinator:
    """Every streams group of the broker.

    ``partitions_of(topic)``: a topic's partition count (None: no such topic).  ``settings(gid)``:
    the group's streams.* configs.  ``other_group_type(gid)``: the type of another group holding
    the id ("classic" with members, "consumer", "share"), else None.  ``on_deadline``: told the
    next deadline whenever it may have moved (the broker's timer).  ``records``: where groups are
    persisted (None: in memory).  ``load_group(gid)``: told before a group is first looked up.
    """

    GROUP_TYPE = GROUP_TYPE

    def __init__(self, partitions_of: Callable[[str], int | None], *,
                 settings: Callable[[str], StreamsSettings] = lambda _gid: StreamsSettings(),
                 now_ms: Callable[[], int] | None = None,
                 other_group_type: Callable[[str], str | None] | None = None,
                 on_deadline: Callable[[int | None], None] | None = None,
                 records: Any = None, load_group: Callable[[str], Any] | None = None):
        self._partitions_of = partitions_of
        self._settings = settings
        # The clock of sessions and delays (ms): public, so a test may move a running broker's on.
        self.now_ms = now_ms or _monotonic_ms
        self._other_type = other_group_type or (lambda _gid: None)
        self._records = records
        # Told a group id before it is first looked up: its __consumer_offsets partition may still be loading.
        self._load_group = load_group
        self._groups: dict[str, StreamsGroup] = {}
        self._taken: set[str] = set()
        self._deadlines = MemberDeadlines(on_deadline)

    # ------------------------------------------------------------------ lookups

    def _take(self, group_id: str) -> None:
        if self._records is None or group_id in self._taken:
            return
        for group in self._records.load(group_id):
            self._taken.add(group_id)
            self._groups[group_id] = group
            # Resolved again now, so the first heartbeat sees no change unless the topics changed.
            if group.topology is not None:
                group.configured = configure(group.topology, self._partitions_of)
            now = self.now_ms()
            for m in group:
                # Sessions start again at load: members heartbeat to a restarted broker.
                self._deadlines.start_session((group_id, m.member_id), now + self._settings(group_id).session_timeout_ms)
            logger.info("streams group %s: loaded at epoch %d with %d member(s)", group_id, group.group_epoch,
                        len(group))
            self._deadlines.moved()

    def group(self, group_id: str) -> StreamsGroup | None:
        """The streams group of that id, if there is one (read it, don't change it)."""
        if group_id not in self._groups:
            if self._load_group is not None:
                self._load_group(group_id)
            self._take(group_id)
        return self._groups.get(group_id)

    def has_group(self, group_id: str) -> bool:
        return self.group(group_id) is not None

    def groups(self) -> list[StreamsGroup]:
        if self._records is not None:
            for group_id in self._records.stored_ids():
                self._take(group_id)
        return [self._groups[g] for g in sorted(self._groups)]

    def groups_loaded(self, group_ids: Collection[str]) -> None:
        """Their ``__consumer_offsets`` partition was loaded: take the streams groups among them."""
        for group_id in group_ids:
            if group_id not in self._groups:
                self._take(group_id)

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, req: StreamsHeartbeat) -> StreamsHeartbeatResult:
        """Answer one StreamsGroupHeartbeat; a KafkaError names what was refused."""
        topology = self._validate(req)
        other = self._other_type(req.group_id) if req.group_id not in self._groups else None
        if other is not None:
            raise GroupIdNotFoundError(f"Group {req.group_id} is not a streams group.")
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(req)
        return self._heartbeat(req, topology)

    @staticmethod
    def _validate(req: StreamsHeartbeat) -> StreamsTopology | None:
        """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid, in its words; the topology."""
        # Kafka 4.3's throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures, first: static
        # membership, task offsets and warm-up tasks come after 4.3 (a 4.3 client never sends them).
        if req.instance_id is not None:
            raise InvalidRequestError("Static membership is not yet supported.")
        if req.task_offsets is not None:
            raise InvalidRequestError("TaskOffsets are not supported yet.")
        if req.task_end_offsets is not None:
            raise InvalidRequestError("TaskEndOffsets are not supported yet.")
        if req.owned is not None and by_kind(req.owned, WARMUP):
            raise InvalidRequestError("WarmupTasks are not supported yet.")
        topology = None
        if req.topology is not None:
            topology = StreamsTopology.from_request(req.topology)  # regex sources: unsupported too
        if not req.member_id:
            raise InvalidRequestError("MemberId can't be empty.")
        if not req.group_id:
            raise InvalidRequestError("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id:
            raise InvalidRequestError("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id:
            raise InvalidRequestError("RackId can't be empty.")
        sent = req.owned_lists_sent
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
            for name, kind, was_sent in zip(("ActiveTasks", "StandbyTasks", "WarmupTasks"), KINDS, sent, strict=True):
                # Kafka's throwIfNotEmptyCollection refuses a null list too.
                if not was_sent or (req.owned and by_kind(req.owned, kind)):
                    raise InvalidRequestError(f"{name} must be empty when (re-)joining.")
            if topology is None:
                raise InvalidRequestError("Topology must be non-null when (re-)joining.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise InvalidRequestError("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise InvalidRequestError(f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2.")
        if any(sent) and not all(sent):
            raise InvalidRequestError("If one task-type is non-null, all must be non-null.")
        if req.member_epoch != 0 and topology is not None:
            raise InvalidRequestError("Topology can only be provided when (re-)joining.")
        return topology

    def _heartbeat(self, req: StreamsHeartbeat, topology: StreamsTopology | None) -> StreamsHeartbeatResult:
        gid = req.group_id
        group = self.group(gid)
        was_empty = group is None or not group.members
        if group is None:
            if req.member_epoch != 0:  # Kafka's getStreamsGroupOrThrow
                raise GroupIdNotFoundError(f"Streams group {gid} not found.")
            group = StreamsGroup(gid)
        settings = self._settings(gid)
        bumped = False
        if req.member_epoch == 0:
            assert topology is not None  # _validate
            bumped = self._take_topology(group, topology) | self._join(group, req)
            member = group.members[req.member_id]
        else:
            member = self._known_member(group, req)
            self._check_owned_tasks(group, req.owned)
        before = member
        member = member.replace(
            process_id=req.process_id if req.process_id is not None else member.process_id,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id or member.client_id, client_host=req.client_host or member.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            topology_epoch=topology.epoch if topology is not None else member.topology_epoch,
            user_endpoint=req.user_endpoint if req.user_endpoint is not None else member.user_endpoint,
            client_tags=req.client_tags if req.client_tags is not None else member.client_tags,
            task_offsets=req.task_offsets if req.task_offsets is not None else member.task_offsets,
            task_end_offsets=req.task_end_offsets if req.task_end_offsets is not None else member.task_end_offsets)
        if (member.process_id, member.rack_id, member.client_tags) != \
                (before.process_id, before.rack_id, before.client_tags) and req.member_epoch != 0:
            bumped = True
        group.members[member.member_id] = member
        created = gid not in self._groups
        if created:
            self._groups[gid] = group
            self._taken.add(gid)
        if req.shutdown_application and group.shutdown_requested_by is None:
            group.shutdown_requested_by = member.member_id
            logger.info("streams group %s: member %s asks the application to shut down", gid, member.member_id)
        configured = configure(group.topology, self._partitions_of) if group.topology is not None else None
        if configured != group.configured:
            group.configured = configured
            bumped = True
        if group.num_standby_replicas not in (None, settings.num_standby_replicas):
            bumped = True
        now = self.now_ms()
        if was_empty and req.member_epoch == 0 and settings.initial_rebalance_delay_ms > 0:
            # Kafka 4.2+: the first member of a new (or emptied) group starts the initial rebalance delay; until
            # it ends the members reconcile towards an empty target (ASSIGNMENT_DELAYED).
            group.initial_delay_until = now + settings.initial_rebalance_delay_ms
        delayed = group.initial_delay_until is not None and now < group.initial_delay_until
        if bumped:
            # Kafka 4.3 gives a new group's first member epoch 2 (its GroupMetadataManagerTest:
            # the first StreamsGroupMetadata record of a group is at epoch 2, the next join 3).
            group.group_epoch += 2 if group.group_epoch == 0 else 1
            logger.info("streams group %s: epoch %d", gid, group.group_epoch)
        if group.group_epoch > group.assignment_epoch and not delayed:
            group.initial_delay_until = None
            self._assign(group, settings)
        updated = self._reconcile(group, member, req.owned, delayed)
        self._deadlines.start_session((gid, member.member_id), now + settings.session_timeout_ms)
        self._persist(group)
        self._deadlines.moved()
        result = self._answer(group, before, updated, req, settings, configured, created)
        if delayed:
            result.statuses.append((StatusCode.ASSIGNMENT_DELAYED,
                                    "Assignment delayed due to the configured initial rebalance delay."))
        return result

    @staticmethod
    def _check_owned_tasks(group: StreamsGroup, owned: TaskAssignment | None) -> None:
        """Kafka's throwIfRequestContainsInvalidTasks: with the topology configured, the tasks a
        member reports must be tasks of it (checked before anything changes)."""
        configured = group.configured
        if owned is None or configured is None or not configured.ready:
            return
        for (_kind, sid), partitions in sorted(owned.items()):
            if sid not in configured.tasks:
                raise InvalidRequestError(f"Subtopology {sid} does not exist in the topology.")
            count = configured.tasks[sid]
            for p in sorted(partitions):
                if not 0 <= p < count:
                    raise InvalidRequestError(f"Task {p} for subtopology {sid} is invalid. Number of tasks for this "
                                              f"subtopology: {count}")

    @staticmethod
    def _take_topology(group: StreamsGroup, topology: StreamsTopology) -> bool:
        """The group's topology after a member joined with ``topology``; whether it changed.
        Kafka 4.3's maybeUpdateTopology: the first topology initializes the group's, an older
        epoch joins with the group's (the member is told STALE_TOPOLOGY), any other difference
        is refused: topology updates are not supported yet."""
        current = group.topology
        if current is None:
            group.topology = topology
            logger.info("streams group %s: topology initialized at epoch %d", group.group_id, topology.epoch)
            return True
        if current.epoch > topology.epoch:
            return False
        if topology != current:
            raise InvalidRequestError("Topology updates are not supported yet.")
        return False

    def _join(self, group: StreamsGroup, req: StreamsHeartbeat) -> bool:
        """A member joins (or starts over: its old self is forgotten).  The group epoch must grow."""
        old = group.members.pop(req.member_id, None)
        if old is not None:
            group.target.pop(req.member_id, None)
            self._deadlines.revocation_done((group.group_id, req.member_id))
        group.members[req.member_id] = StreamsMember(req.member_id, process_id=req.process_id or "")
        logger.info("streams group %s: member %s joins", group.group_id, req.member_id)
        return True

    def _known_member(self, group: StreamsGroup, req: StreamsHeartbeat) -> StreamsMember:
        member = group.members.get(req.member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {req.member_id} is not a member of group {group.group_id}.")
        if req.member_epoch == member.member_epoch:
            return member
        if req.member_epoch == member.previous_member_epoch and req.owned is not None and \
                all(ps <= member.assigned.get(k, frozenset()) for k, ps in req.owned.items()):
            return member  # the response that moved the member on was lost
        which = "greater" if req.member_epoch > member.member_epoch else "smaller"
        # Kafka's words (its StreamsGroupHeartbeatRequestTest checks them), "partitions" and all.
        raise FencedMemberEpochError(
            f"The streams group member has a {which} member epoch ({req.member_epoch}) than the one known by the "
            f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")

    def _assign(self, group: StreamsGroup, settings: StreamsSettings) -> None:
        configured = group.configured
        tasks = configured.tasks if configured is not None and configured.ready else {}
        members = {m.member_id: AssignmentMember(m.process_id or m.member_id, m.tasks(ACTIVE),
                                                 m.tasks(STANDBY) | m.tasks(WARMUP)) for m in group}
        stateful = {s.subtopology_id for s in group.topology.subtopologies if s.state_changelog_topics} \
            if group.topology is not None else set()
        group.target = assign_tasks(members, tasks, settings.num_standby_replicas, stateful)
        group.assignment_epoch = group.group_epoch
        group.num_standby_replicas = settings.num_standby_replicas
        logger.info("streams group %s: target assignment at epoch %d (%d tasks, %d member(s))", group.group_id,
                    group.assignment_epoch, sum(tasks.values()), len(members))

    def _reconcile(self, group: StreamsGroup, member: StreamsMember, owned: TaskAssignment | None,
                   delayed: bool = False) -> StreamsMember:
        configured = group.configured
        keys = {(k, sid) for k in KINDS for sid in configured.tasks} if configured is not None \
            and configured.ready and not delayed else set()
        # During the initial delay Kafka reconciles towards an empty target at epoch max(1, assignment epoch).
        target_epoch = max(1, group.assignment_epoch) if delayed else group.assignment_epoch
        updated = reconcile(member, target_epoch=target_epoch,  # type: ignore[arg-type]
                            target={} if delayed else group.target.get(member.member_id, {}),  # type: ignore[arg-type]
                            owner_of=lambda key, p: group.holder_of(member.process_id or member.member_id, key, p),
                            subscribed_topic_ids=keys, owned=owned)  # type: ignore[arg-type]
        key = (group.group_id, member.member_id)
        if updated != member:
            group.members[member.member_id] = updated  # type: ignore[assignment]
            if updated.state is MemberState.UNREVOKED_PARTITIONS:
                self._deadlines.await_revocation(key, self.now_ms() + max(updated.rebalance_timeout_ms, 0),
                                                 updated.member_epoch)
            else:
                self._deadlines.revocation_done(key)
        return updated  # type: ignore[return-value]

    def _answer(self, group: StreamsGroup, before: StreamsMember, member: StreamsMember, req: StreamsHeartbeat,
                settings: StreamsSettings, configured: ConfiguredTopology | None,
                created: bool) -> StreamsHeartbeatResult:
        # Kafka's order and words: a stale topology, the topology's configuration, a shutdown request.
        statuses: list[tuple[StatusCode, str]] = []
        if group.topology is not None and member.topology_epoch < group.topology.epoch:
            statuses.append((StatusCode.STALE_TOPOLOGY,
                             f"The member's topology epoch {member.topology_epoch} is behind the group's topology "
                             f"epoch {group.topology.epoch}."))
        if configured is not None:
            statuses += configured.statuses
        if group.shutdown_requested_by is not None:
            statuses.append((StatusCode.SHUTDOWN_APPLICATION,
                             f"Streams group member {group.shutdown_requested_by} encountered a fatal error and "
                             "requested a shutdown for the entire application."))
        # Kafka sends the tasks to a joining member and whenever they changed.
        send = req.member_epoch == 0 or member.assigned != before.assigned
        if send and member.user_endpoint is not None:
            group.endpoint_epoch += 1  # what Interactive Queries see of the group changed
        result = StreamsHeartbeatResult(member.member_id, member.member_epoch, settings.heartbeat_interval_ms,
                                        statuses, dict(member.assigned) if send else None,
                                        # Kafka: a group created by this very request answers epoch 0.
                                        0 if created else group.endpoint_epoch)
        if req.endpoint_information_epoch != group.endpoint_epoch:
            result.partitions_by_endpoint = self._partitions_by_endpoint(group)
        if configured is not None:
            result.to_create = configured.to_create
        return result

    def _partitions_by_endpoint(self, group: StreamsGroup) -> dict:
        """For Interactive Queries: each user endpoint's partitions of its active and standby
        tasks' source and repartition source topics (task p reads partition p), as Kafka's
        EndpointToPartitionsManager (a topic with fewer partitions than the tasks gets the first
        task ids, by its count)."""
        out: dict[tuple[str, int], tuple[dict[str, set[int]], dict[str, set[int]]]] = {}
        topology = group.topology
        if topology is None:
            return out
        for m in group:
            if m.user_endpoint is None:
                continue
            active, standby = out.setdefault(m.user_endpoint, ({}, {}))
            for kind, into in ((ACTIVE, active), (STANDBY, standby)):
                for sid, ps in by_kind(m.assigned, kind).items():
                    sub = topology.subtopology(sid)
                    if sub is None:
                        continue
                    for topic in {*sub.source_topics, *(t.name for t in sub.repartition_source_topics)}:
                        count = self._partitions_of(topic) or 0
                        into.setdefault(topic, set()).update(sorted(ps)[:count] if count < len(ps) else ps)
        return out

    # ------------------------------------------------------------------ leaving and timeouts

    def _leave(self, req: StreamsHeartbeat) -> StreamsHeartbeatResult:
        gid = req.group_id
        group = self.group(gid)
        if group is None:
            raise GroupIdNotFoundError(f"Streams group {gid} not found.")
        member = group.members.get(req.member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {req.member_id} is not a member of group {gid}.")
        self._remove(group, member.member_id, "left")
        self._persist(group)
        self._deadlines.moved()
        return StreamsHeartbeatResult(member.member_id, req.member_epoch, self._settings(gid).heartbeat_interval_ms)

    def _remove(self, group: StreamsGroup, member_id: str, why: str) -> None:
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        self._deadlines.forget((group.group_id, member_id))
        if group.shutdown_requested_by is not None and not group.members:
            group.shutdown_requested_by = None  # Kafka clears the request once the group is empty
        group.group_epoch += 1
        logger.info("streams group %s: member %s %s; epoch %d", group.group_id, member_id, why, group.group_epoch)

    def expire(self) -> list[tuple[str, str]]:
        """Remove the members whose session or rebalance deadline passed; (group, member) of each."""
        return self._deadlines.fence_due(self.now_ms(), self._member_of, self._fence)

    def _fence(self, key: tuple[str, str], why: str) -> None:
        group = self._groups[key[0]]
        self._remove(group, key[1], f"fenced: {why}")
        self._persist(group)

    def _member_of(self, key: tuple[str, str]) -> StreamsMember | None:
        group = self._groups.get(key[0])
        return group.members.get(key[1]) if group is not None else None

    def next_deadline(self) -> int | None:
        return self._deadlines.next_deadline()

    # ------------------------------------------------------------------ offsets

    def check_offset_commit(self, group_id: str, member_id: str, member_epoch: int, *,
                            transactional: bool = False, api_version: int = 9,
                            partitions: Collection[tuple[str, int]] = ()) -> int | None:
        """None (not a streams group), 0 or the error of an OffsetCommit (TxnOffsetCommit) to a
        streams group, as Kafka 4.3's StreamsGroup.validateOffsetCommit: from outside the group
        (epoch < 0) only while it is empty, else the member must exist.  Its current epoch
        commits anything; a newer one is refused; an older one (KIP-1251: the heartbeat that
        bumped it has not reached the client yet) commits ``partitions`` (topic name, partition)
        only if each is a partition of a source or repartition source topic whose subtopology's
        task the member holds active (assigned or pending revocation) since an epoch no later
        than the one sent (Kafka's createAssignmentEpochValidator).  One partition failing
        refuses the whole commit: STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for TxnOffsetCommit
        as Kafka's commitTransactionalOffset answers it."""
        group = self.group(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not member_id and not group.members:
            return 0
        if transactional and member_epoch < 0 and not member_id:
            return 0
        member = group.members.get(member_id)
        if member is None:
            return UnknownMemberIdError.code
        if not transactional and api_version < 9:
            return UnsupportedVersionError.code  # Kafka: members of the streams protocol commit with v9+
        if member_epoch == member.member_epoch:
            return 0
        if member_epoch > member.member_epoch or not self._active_since(group, member, member_epoch, partitions):
            return IllegalGenerationError.code if transactional else StaleMemberEpochError.code
        return 0

    @staticmethod
    def _active_since(group: StreamsGroup, member: StreamsMember, epoch: int,
                      partitions: Collection[tuple[str, int]]) -> bool:
        """KIP-1251's check of an older epoch's commit: every partition is one of an active task
        of the member with an assignment epoch <= ``epoch`` (standby and warm-up tasks commit nothing)."""
        if group.topology is None:
            return False  # Kafka: 'Topology is not available for offset commit validation.'
        subtopology_of = group.topology.source_topic_map()
        for name, partition in partitions:
            sid = subtopology_of.get(name)
            since = None if sid is None else member.assignment_epoch((ACTIVE, sid), partition)
            if since is None or since > epoch:
                return False
        return True

    def check_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """0 or the error of an OffsetFetch naming a member of a streams group (v9+)."""
        group = self.group(group_id)
        if group is None or member_id is None or member_epoch < 0:
            return 0
        member = group.members.get(member_id)
        if member is None:
            return UnknownMemberIdError.code
        return StaleMemberEpochError.code if member_epoch != member.member_epoch else 0

    def topics_in_use(self, group_id: str) -> set[str]:
        """The topics a streams group with members reads (its topology's source and repartition
        topics): their committed offsets neither expire nor may be deleted (OffsetDelete answers
        GROUP_SUBSCRIBED_TO_TOPIC), as for a consumer group's subscribed topics."""
        group = self.group(group_id)
        if group is None or group.topology is None or not group.members:
            return set()
        return {t for s in group.topology.subtopologies
                for t in (*s.source_topics, *(r.name for r in s.repartition_source_topics))}

    # ------------------------------------------------------------------ admin

    def list_groups(self, states: Collection[str] = (), types: Collection[str] = ()) -> list[GroupListing]:
        """ListGroups' rows of the streams groups (protocol type "streams", as Kafka lists them)."""
        if types and GROUP_TYPE not in {t.lower() for t in types}:
            return []
        wanted = {s.lower() for s in states}
        return [GroupListing(g.group_id, GROUP_TYPE, g.state.value) for g in self.groups()
                if not wanted or g.state.value.lower() in wanted]

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a streams group: 0, or NON_EMPTY_GROUP while it has members."""
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

    def remove_empty_groups(self, has_offsets: Callable[[str], bool]) -> list[str]:
        """Delete the streams groups without members nor committed offsets (Kafka's cleanup)."""
        gone = [g.group_id for g in self.groups() if not g.members and not has_offsets(g.group_id)]
        for group_id in gone:
            self.delete_group(group_id)
        return gone

    def close(self) -> None:
        self._deadlines.close()

    def _persist(self, group: StreamsGroup) -> None:
        if self._records is None:
            return
        try:
            self._records.write(group)
        except OSError:
            logger.exception("streams group %s: could not write its state to __consumer_offsets", group.group_id)


def owned_tasks(active: Mapping[str, Collection[int]] | None, standby: Mapping[str, Collection[int]] | None,
                warmup: Mapping[str, Collection[int]] | None) -> TaskAssignment | None:
    """The tasks a heartbeat reports, or None when it sent none."""
    if active is None and standby is None and warmup is None:
        return None
    out: dict[tuple[str, str], frozenset[int]] = {}
    for kind, tasks in zip(KINDS, (active, standby, warmup), strict=True):
        for sid, ps in (tasks or {}).items():
            if ps:
                out[(kind, sid)] = out.get((kind, sid), frozenset()) | frozenset(ps)
    return out
