"""Membership in a consumer group under the classic protocol: joining, heartbeats, leaving.

A join round is FindCoordinator, JoinGroup (v4+ answers a new member MEMBER_ID_REQUIRED with
an id to join again with), the leader's assignment, and SyncGroup.  ``join()`` runs rounds until
one completes or fails for good.  It is the consumer that decides when to join and what the
assignment means for its partitions (revoking, listener calls): this module only speaks the
protocol and keeps the member's identity.

Heartbeats run in the background every ``heartbeat.interval.ms`` while the member is in a
stable generation.  What they learn is left for the consumer's next poll, as Java does:
REBALANCE_IN_PROGRESS asks for a rejoin; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION mean the member
was removed, so its partitions are lost; FENCED_INSTANCE_ID means another consumer took this
static member's place, which is fatal.  The heartbeat task also enforces
``max.poll.interval.ms``: an application that stops polling leaves the group (a static member
just stops heartbeating, as in Kafka) so the others get its partitions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import DecodeError, ErrorCode, KafkaError, ProtocolError, error_name

from .assignors import Assignment, GroupProtocols, decode_assignment, decode_subscription, perform_assignment
from .cluster import Cluster
from .consumer_errors import FatalGroupError
from .errors import ClientError, IllegalStateError, is_retriable
from .types import TopicPartition

if TYPE_CHECKING:
    from .config import ConsumerConfig

__all__ = ["GroupMembership", "JoinResult"]

logger = logging.getLogger("kwire.client.consumer")

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP
PROTOCOL_TYPE = "consumer"
# The newest JoinGroup and SyncGroup versions used: those librdkafka uses.  Newer ones add
# nothing the classic consumer protocol needs (flexible encoding, a leave reason, KIP-814's
# skip_assignment), and librdkafka's mock cluster advertises but cannot read them (it drops the
# connection on JoinGroup v6 and SyncGroup v4).
MAX_JOIN_GROUP_VERSION = 5
MAX_SYNC_GROUP_VERSION = 3

_COORDINATOR_MOVED = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
_TRY_AGAIN = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.REBALANCE_IN_PROGRESS}

UNJOINED, JOINING, STABLE = "unjoined", "joining", "stable"
_AGAIN_NOW = "again now"


@dataclass(frozen=True)
class JoinResult:
    """What one JoinGroup/SyncGroup round gave this member: the generation, its member id,
    the assignor the coordinator chose, whether it leads the group, and its assignment."""

    generation_id: int
    member_id: str
    protocol_name: str | None  # the assignor the coordinator chose (null only in a refusal)
    leader: bool
    assignment: Assignment


class MemberState:
    """What the consumer reads and calls on its membership, whichever protocol runs the group:
    the classic one (``GroupMembership``: JoinGroup/SyncGroup/Heartbeat) or KIP-848's
    (``membership_kip848.ConsumerProtocolMembership``: ConsumerGroupHeartbeat)."""

    # How a rejoin is logged: classic members rejoin (an event worth INFO), KIP-848 members only
    # heartbeat sooner.
    _REJOIN_LEVEL = logging.INFO
    _REJOIN_WORDS = "rejoining"

    def __init__(self, cluster: Cluster, config: ConsumerConfig, wakeup: Callable[[], None], *,
                 member_id: str) -> None:
        self._cluster = cluster
        self._wakeup = wakeup
        if config.group_id is None:  # the consumer makes a membership only for a group
            raise IllegalStateError("a group membership needs group.id")
        self.group_id: str = config.group_id
        self.instance_id: str | None = config.group_instance_id
        self._rebalance_timeout_ms = config.max_poll_interval_ms
        self._max_poll_interval = config.max_poll_interval_ms / 1000
        self.member_id = member_id
        self.generation_id = -1  # the generation (classic) or member epoch (KIP-848) commits carry
        self.protocol_name: str | None = None
        self.state = UNJOINED
        self.rejoin_reason: str | None = None   # why the next poll must rejoin (None: no need)
        self.lost_reason: str | None = None     # set when the group dropped this member: partitions lost
        self.fatal: BaseException | None = None
        # Classic leader: the partition count of every topic the group reads, to notice changes.
        self.group_partition_counts: dict[str, int] | None = None
        self.last_poll = time.monotonic()
        self.polling = 0  # polls in progress: a poll blocked waiting for records counts as polling
        self._heartbeats: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    @property
    def needs_join(self) -> bool:
        return self.state != STABLE or self.rejoin_reason is not None

    def polled(self) -> None:
        """The application polled: it is alive as far as max.poll.interval.ms goes."""
        self.last_poll = time.monotonic()

    def request_rejoin(self, reason: str) -> None:
        if self.rejoin_reason is None:
            logger.log(self._REJOIN_LEVEL, "group %r: %s (%s)", self.group_id, self._REJOIN_WORDS, reason)
            self.rejoin_reason = reason
        self._wakeup()

    def member_lost(self, reason: str, *, forget_member_id: bool = False, member_id: str | None = None) -> None:
        """The group no longer counts this member in its generation: the partitions are lost."""
        logger.warning("group %r: member %r lost its partitions: %s", self.group_id,
                       self.member_id if member_id is None else member_id, reason)
        if forget_member_id:
            self.member_id = ""
        self.generation_id = -1
        self.state = UNJOINED
        self._forget_generation()
        self.lost_reason = reason
        self.request_rejoin(reason)

    def _forget_generation(self) -> None:
        """What else a member drops with its generation (nothing here)."""

    def set_fatal(self, error: BaseException) -> None:
        self.fatal = error
        self.state = UNJOINED
        self._wakeup()

    async def close(self) -> None:
        """Stop heartbeating (leaving the group is the protocol's own step, before this)."""
        self._closed = True
        task, self._heartbeats = self._heartbeats, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class GroupMembership(MemberState):
    """One consumer's membership in its (classic) group."""

    def __init__(self, cluster: Cluster, config: ConsumerConfig, protocols: GroupProtocols,
                 wakeup: Callable[[], None]) -> None:
        super().__init__(cluster, config, wakeup, member_id="")
        self.protocols = protocols
        self._session_timeout_ms = config.session_timeout_ms
        self._heartbeat_interval = config.heartbeat_interval_ms / 1000
        self._rack = config.client_rack
        self._allow_auto_create = config.allow_auto_create_topics

    # -- joining ----------------------------------------------------------------------------------
    async def join(self, topics: Collection[str], owned: Sequence[TopicPartition]) -> JoinResult:
        """Join rounds until this member has an assignment in a new generation.

        ``owned``: the partitions kept through the rebalance (cooperative protocol; none under
        eager).  Raises ``FatalGroupError`` when the group cannot be joined at all.
        """
        self.state = JOINING
        self.rejoin_reason = None
        attempt = 0
        unreadable = 0  # answers in a row that broke the protocol
        while True:
            if self._closed:
                raise IllegalStateError("the consumer is closed")
            try:
                result = await self._join_round(topics, owned)
                unreadable = 0
            except (ClientError, KafkaError) as exc:
                unreadable = 0
                if not is_retriable(exc):
                    raise
                logger.info("group %r: join attempt failed: %s", self.group_id, exc)
                result = None
            except DecodeError as exc:
                # A JoinGroup answer that breaks the protocol (an unreadable SyncGroup answer is
                # taken for REBALANCE_IN_PROGRESS in _join_round).  Its error code is unknown: join
                # again as the same member first, since a new member id would leave the old one in
                # the group until its session timed out; twice in a row, start over as a new member.
                unreadable += 1
                self.generation_id = -1
                if unreadable >= 2 or not self.member_id:
                    logger.warning("group %r: unreadable answer while joining (%s); joining again as a new member",
                                   self.group_id, exc)
                    self.member_id, unreadable = "", 0
                else:
                    logger.warning("group %r: unreadable answer while joining (%s); joining again as %r",
                                   self.group_id, exc, self.member_id)
                result = None
            if result is _AGAIN_NOW and attempt < 3:
                attempt += 1
                continue
            if isinstance(result, JoinResult):
                self.generation_id = result.generation_id
                self.member_id = result.member_id
                self.protocol_name = result.protocol_name
                self.state = STABLE
                self.lost_reason = None
                self.protocols.assignor(result.protocol_name).on_assignment(result.assignment, result.generation_id)
                self._start_heartbeats()
                return result
            await asyncio.sleep(self._cluster.retry_backoff.delay(attempt))
            attempt += 1

    async def _join_round(self, topics: Collection[str], owned: Sequence[TopicPartition]) -> JoinResult | None | str:
        """One JoinGroup + SyncGroup; None when the round has to be run again after a backoff,
        ``_AGAIN_NOW`` when at once."""
        node = await self._cluster.coordinator(self.group_id)
        conn = await self._cluster.connection(node)
        # v5 brought static membership.
        version = conn.version_for(JOIN_GROUP, 5 if self.is_static else 0, MAX_JOIN_GROUP_VERSION)
        protocols = self.protocols.join_protocols(
            topics, owned_partitions=owned, generation_id=self.generation_id if owned else -1, rack_id=self._rack)
        request = messages.JoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self._session_timeout_ms,
            rebalance_timeout_ms=self._rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.instance_id, protocol_type=PROTOCOL_TYPE,
            protocols=[messages.JoinGroupRequest.JoinGroupRequestProtocol(name=p.name, metadata=p.metadata)
                       for p in protocols])
        # The coordinator holds JoinGroup until every member joined, up to the rebalance timeout.
        timeout = max(self._cluster.request_timeout, self._rebalance_timeout_ms / 1000 + 5)
        response = await conn.send(request, version=version, timeout=timeout)
        error = response.error_code
        if error == ErrorCode.MEMBER_ID_REQUIRED:
            # KIP-394: the coordinator gave this new member its id; join again with it, at once.
            logger.debug("group %r: JoinGroup answered MEMBER_ID_REQUIRED; joining again as %r",
                         self.group_id, response.member_id)
            self.member_id = response.member_id
            return _AGAIN_NOW
        if error:
            self._join_error(error, "JoinGroup")
            return None
        member_id = response.member_id
        leader = response.leader == member_id
        assignments: dict[str, bytes] = {}
        self.group_partition_counts = None
        if leader:
            assignments = await self._lead(response, version)
        sync_version = conn.version_for(SYNC_GROUP, 3 if self.is_static else 0, MAX_SYNC_GROUP_VERSION)
        sync = messages.SyncGroupRequest(
            group_id=self.group_id, generation_id=response.generation_id, member_id=member_id,
            group_instance_id=self.instance_id, protocol_type=PROTOCOL_TYPE, protocol_name=response.protocol_name,
            assignments=[messages.SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in assignments.items()])
        self.member_id = member_id
        try:
            sync_response = await conn.send(sync, version=sync_version, timeout=timeout)
        except DecodeError as exc:
            # librdkafka's mock ends a SyncGroup that a rebalance interrupts with
            # REBALANCE_IN_PROGRESS and a null assignment, which no version allows.  Join again as
            # this member, as for that error, however often it happens (cooperative rebalances
            # come in pairs): a new member id would not make the answer readable, and the old one
            # would stay in the group until its session timed out, every rebalance waiting for it.
            logger.warning("group %r: unreadable SyncGroup answer (%s); taking it for REBALANCE_IN_PROGRESS and "
                           "joining again as %r", self.group_id, exc, member_id)
            return None
        if sync_response.error_code:
            self._join_error(sync_response.error_code, "SyncGroup")
            return None
        data = sync_response.assignment
        assignment = decode_assignment(data) if data else Assignment([])
        logger.info("group %r: generation %d, member %r%s, protocol %s, assigned %s", self.group_id,
                    response.generation_id, member_id, " (leader)" if leader else "", response.protocol_name,
                    ", ".join(map(str, assignment.partitions)) or "nothing")
        return JoinResult(response.generation_id, member_id, response.protocol_name, leader, assignment)

    def _join_error(self, error: int, what: str) -> None:
        name = error_name(error)
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.generation_id = -1
        elif error == ErrorCode.ILLEGAL_GENERATION:
            self.generation_id = -1
        elif error in _COORDINATOR_MOVED:
            self._cluster.forget_coordinator(self.group_id)
        elif error == ErrorCode.FENCED_INSTANCE_ID:
            raise FatalGroupError(f"{what}: group.instance.id {self.instance_id!r} is used by another consumer "
                                  f"of group {self.group_id!r} (FENCED_INSTANCE_ID)")
        elif error not in _TRY_AGAIN:
            raise FatalGroupError(f"{what} for group {self.group_id!r} refused: {name}")
        logger.info("group %r: %s answered %s; joining again", self.group_id, what, name)

    async def _lead(self, response: messages.JoinGroupResponse, version: int) -> dict[str, bytes]:
        """The leader's step: everyone's subscriptions and the topics' partition counts -> assignments."""
        members = [(m.member_id, m.group_instance_id if version >= 5 else None, m.metadata)
                   for m in response.members]
        topics = sorted({t for _, _, metadata in members for t in decode_subscription(metadata).topics})
        counts: dict[str, int] = {}
        if topics:
            metadata = await self._cluster.refresh_metadata(topics, allow_auto_create=self._allow_auto_create)
            counts = {t: len(metadata.partitions_for(t) or ()) for t in topics}
        self.group_partition_counts = counts
        assignor = self.protocols.assignor(response.protocol_name)
        return perform_assignment(assignor, counts, members, rebalance_protocol=self.protocols.rebalance_protocol)

    # -- heartbeats -------------------------------------------------------------------------------
    def _start_heartbeats(self) -> None:
        if self._heartbeats is None or self._heartbeats.done():
            self._heartbeats = asyncio.ensure_future(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        failures = 0
        while not self._closed:
            await asyncio.sleep(self._heartbeat_interval)
            if self._closed or self.state != STABLE:
                continue
            if not self.polling and time.monotonic() - self.last_poll > self._max_poll_interval:
                await self._poll_timeout()
                continue
            try:
                error = await self._heartbeat()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # No answer: the coordinator may have moved; find it again and keep trying.
                logger.info("group %r: heartbeat failed: %s", self.group_id, exc)
                self._cluster.forget_coordinator(self.group_id)
                failures += 1
                await asyncio.sleep(self._cluster.retry_backoff.delay(failures))
                continue
            if self.state != STABLE:  # a rejoin started while the heartbeat was out: its answer is old news
                continue
            self._heartbeat_result(error)

    async def _heartbeat(self) -> int:
        node = await self._cluster.coordinator(self.group_id)
        conn = await self._cluster.connection(node)
        version = conn.version_for(HEARTBEAT, 3 if self.is_static else 0)
        request = messages.HeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id,
                                            member_id=self.member_id, group_instance_id=self.instance_id)
        response = await conn.send(request, version=version)
        return response.error_code

    def _heartbeat_result(self, error: int) -> None:
        if error == ErrorCode.NONE:
            return
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("the group is rebalancing")
        elif error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_lost("the coordinator no longer knows this member (UNKNOWN_MEMBER_ID)",
                             forget_member_id=True)
        elif error == ErrorCode.ILLEGAL_GENERATION:
            self.member_lost(f"generation {self.generation_id} is over (ILLEGAL_GENERATION)", forget_member_id=False)
        elif error == ErrorCode.FENCED_INSTANCE_ID:
            self.set_fatal(FatalGroupError(
                f"group.instance.id {self.instance_id!r} of group {self.group_id!r} was taken over by another "
                "consumer (FENCED_INSTANCE_ID)"))
        elif error in _COORDINATOR_MOVED:
            self._cluster.forget_coordinator(self.group_id)
        elif error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            pass
        elif not KafkaError.for_code(error).retriable:
            self.set_fatal(FatalGroupError(f"heartbeat for group {self.group_id!r} refused: {error_name(error)}"))

    async def _poll_timeout(self) -> None:
        logger.warning(
            "group %r: the application did not poll for more than max.poll.interval.ms (%d ms); %s. "
            "Poll more often, process less per poll (max.poll.records), or raise max.poll.interval.ms",
            self.group_id, self._max_poll_interval * 1000,
            "the member stops heartbeating (static members do not leave)" if self.is_static
            else "leaving the group so its partitions go to other members")
        generation, member_id = self.generation_id, self.member_id
        await self.leave("consumer poll timeout has expired")
        self.member_lost(f"max.poll.interval.ms expired in generation {generation}",
                         forget_member_id=not self.is_static, member_id=member_id)

    # -- leaving ----------------------------------------------------------------------------------
    async def leave(self, reason: str) -> None:
        """Send LeaveGroup (dynamic members only, as Kafka) so the group rebalances at once."""
        member_id = self.member_id
        self.state = UNJOINED
        self.generation_id = -1
        if self.is_static or not member_id:
            return
        self.member_id = ""
        try:
            node = await self._cluster.coordinator(self.group_id)
            conn = await self._cluster.connection(node)
            version = conn.version_for(LEAVE_GROUP)
            request = messages.LeaveGroupRequest(group_id=self.group_id)
            if version >= 3:
                request.members = [messages.LeaveGroupRequest.MemberIdentity(member_id=member_id, reason=reason)]
            else:
                request.member_id = member_id
            response = await conn.send(request, version=version)
            error = response.error_code or next((m.error_code for m in getattr(response, "members", None) or ()
                                                 if m.error_code), 0)
            if error:
                logger.info("group %r: LeaveGroup answered %s", self.group_id, error_name(error))
            else:
                logger.info("group %r: member %r left (%s)", self.group_id, member_id, reason)
        except (ClientError, KafkaError, ProtocolError) as exc:
            # Closing goes on regardless: without the leave the session timeout removes the member.
            logger.info("group %r: LeaveGroup failed: %s", self.group_id, exc)
