"""Membership in a consumer group under KIP-848 (``group.protocol=consumer``): the broker assigns.

One request does everything: ConsumerGroupHeartbeat.  The first (member epoch 0) joins with the
subscription; the answer carries the member epoch, the heartbeat interval and the assignment,
by topic id.  Heartbeats then run every interval the coordinator gave; when one brings another
assignment, the consumer's next poll applies it as a cooperative rebalance: it revokes what it
must give up (listener first), then heartbeats at once with the partitions it still owns, so the
coordinator can hand the revoked ones to their next owner ("revoke before assign"), and takes
what it is given.

The interface is the classic ``GroupMembership``'s, so the consumer drives either: ``join()``
is "send a heartbeat with what this member owns now and return the assignment"; a rejoin
request is "heartbeat now".  The member epoch stands in for the generation in commits.

Errors, as Java's consumer: FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID mean the partitions are lost
and the member joins again at epoch 0 (keeping its id, KIP-1082); UNRELEASED_INSTANCE_ID,
FENCED_INSTANCE_ID, GROUP_AUTHORIZATION_FAILED, UNSUPPORTED_ASSIGNOR and a broker without the
api are fatal; coordinator errors make it look for the coordinator again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from kwire.protocol import messages
from kwire.protocol.errors import ErrorCode, KafkaError, error_name

from .assignors import Assignment
from .assignors.base import COOPERATIVE
from .cluster import Cluster
from .consumer_errors import FatalGroupError
from .errors import ClientError, UnsupportedApiError
from .membership import _COORDINATOR_MOVED, STABLE, UNJOINED, JoinResult, MemberState
from .types import TopicPartition

if TYPE_CHECKING:
    from .config import ConsumerConfig

__all__ = ["ConsumerProtocolMembership"]

logger = logging.getLogger("kwire.client.consumer")

HB = messages.ConsumerGroupHeartbeatRequest
CONSUMER_GROUP_HEARTBEAT = HB.API_KEY
LEAVE_EPOCH, LEAVE_STATIC_EPOCH = -1, -2


class _Protocols:
    """What the consumer asks of ``membership.protocols``: KIP-848 rebalances are cooperative."""

    rebalance_protocol = COOPERATIVE


class ConsumerProtocolMembership(MemberState):
    """One consumer's membership in a KIP-848 group."""

    _REJOIN_LEVEL = logging.DEBUG
    _REJOIN_WORDS = "heartbeat now"

    def __init__(self, cluster: Cluster, config: ConsumerConfig, wakeup: Callable[[], None]) -> None:
        # KIP-1082: the client names itself.  The broker, not the client, watches partition counts.
        super().__init__(cluster, config, wakeup, member_id=str(uuid.uuid4()))
        self.protocols = _Protocols()
        self._assignor: str | None = config.group_remote_assignor
        self._rack = config.client_rack or None
        self._interval = 3.0
        self._sent_topics: tuple[str, ...] | None = None
        self._target: list[TopicPartition] = []
        # The last assignment received, by topic id, until _resolve_target names its topics.
        self._pending_ids: list[tuple[uuid.UUID, list[int]]] = []
        self._target_ids_changed = False
        self._applied: list[TopicPartition] | None = None
        self._lock = asyncio.Lock()

    def member_lost(self, reason: str, *, forget_member_id: bool = False, member_id: str | None = None) -> None:
        # KIP-1082: the member id is the client's own and outlives a lost epoch (rejoining at 0).
        super().member_lost(reason, member_id=member_id)

    def _forget_generation(self) -> None:
        # A member that lost its epoch rejoins at epoch 0, naming its topics and owned partitions anew.
        self._sent_topics = None
        self._applied = None

    # -- joining and reconciling ------------------------------------------------------------------
    async def join(self, topics: Collection[str], owned: Sequence[TopicPartition]) -> JoinResult:
        """Heartbeat now (joining at epoch 0 if not a member) reporting ``owned``; the assignment
        the coordinator wants this member to have."""
        self.rejoin_reason = None
        attempt = 0
        while True:
            if self._closed:
                raise FatalGroupError("the consumer is closed")
            try:
                done = await self._send(topics, owned)
            except (ClientError, KafkaError, OSError) as exc:
                logger.info("group %r: heartbeat failed: %s", self.group_id, exc)
                self._cluster.forget_coordinator(self.group_id)
                done = False
            if done:
                break
            await asyncio.sleep(self._cluster.retry_backoff.delay(attempt))
            attempt += 1
        await self._resolve_target()
        self.state = STABLE
        self.lost_reason = None
        self._applied = list(self._target)
        self._start_heartbeats()
        return JoinResult(self.generation_id, self.member_id, "", False, Assignment(list(self._target)))

    async def _send(self, topics: Collection[str] | None, owned: Sequence[TopicPartition] | None) -> bool:
        """One heartbeat; whether it was answered without an error to retry."""
        async with self._lock:
            joining = self.generation_id < 0
            node = await self._cluster.coordinator(self.group_id)
            conn = await self._cluster.connection(node)
            try:
                version = conn.version_for(CONSUMER_GROUP_HEARTBEAT, 0, 1)
            except UnsupportedApiError as exc:
                raise FatalGroupError(f"the broker does not serve ConsumerGroupHeartbeat (group.protocol=consumer "
                                      f"needs a Kafka 4 broker): {exc}") from None
            request = HB(group_id=self.group_id, member_id=self.member_id,
                         member_epoch=0 if joining else self.generation_id, instance_id=self.instance_id,
                         rack_id=self._rack if joining else None,
                         rebalance_timeout_ms=self._rebalance_timeout_ms if joining else -1,
                         server_assignor=self._assignor if joining else None)
            wanted = tuple(sorted(topics)) if topics is not None else None
            if wanted is not None and (joining or wanted != self._sent_topics):
                request.subscribed_topic_names = list(wanted)
            if joining:
                request.topic_partitions = []
            elif owned is not None:
                request.topic_partitions = await self._by_id(owned)
            response = await conn.send(request, version=version)
            if not self._answer(response, wanted):
                return False
            return True

    def _answer(self, response: messages.ConsumerGroupHeartbeatResponse, wanted: tuple[str, ...] | None) -> bool:
        error = response.error_code
        if error:
            name = error_name(error)
            if error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                self.member_lost(f"{name}: {response.error_message or ''}".strip())
                return False
            if error in _COORDINATOR_MOVED:
                self._cluster.forget_coordinator(self.group_id)
                return False
            if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or KafkaError.for_code(error).retriable:
                return False
            fatal = FatalGroupError(f"ConsumerGroupHeartbeat for group {self.group_id!r} refused: {name}"
                                    + (f" ({response.error_message})" if response.error_message else ""))
            self.set_fatal(fatal)
            raise fatal
        if wanted is not None:
            self._sent_topics = wanted
        if response.member_id:
            self.member_id = response.member_id
        if response.member_epoch != self.generation_id:
            logger.info("group %r: member %r at epoch %d", self.group_id, self.member_id, response.member_epoch)
        self.generation_id = response.member_epoch
        if response.heartbeat_interval_ms > 0:
            self._interval = response.heartbeat_interval_ms / 1000
        if response.assignment is not None:
            self._pending_ids = [(tp.topic_id, list(tp.partitions)) for tp in response.assignment.topic_partitions]
            self._target_ids_changed = True
        return True

    async def _by_id(self, partitions: Sequence[TopicPartition]) -> list[HB.TopicPartitions]:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        if not by_topic:
            return []
        metadata = await self._cluster.metadata_for(by_topic)
        return [HB.TopicPartitions(topic_id=metadata.topic_id(t), partitions=sorted(ps)) for t, ps in by_topic.items()]

    async def _resolve_target(self) -> None:
        """The last assignment received, by topic name (metadata is asked for ids it lacks)."""
        if not self._target_ids_changed:
            return
        self._target_ids_changed = False
        ids = self._pending_ids
        metadata = self._cluster.metadata
        if any(metadata.topic_name(topic_id) is None for topic_id, _ in ids):
            metadata = await self._cluster.refresh_metadata(None)  # a topic this client has not seen yet
        target = []
        for topic_id, partitions in ids:
            name = metadata.topic_name(topic_id)
            if name is None:
                logger.info("group %r: assigned topic id %s that the metadata does not know yet", self.group_id,
                            topic_id)
                self._target_ids_changed = True
                continue
            target += [TopicPartition(name, p) for p in sorted(partitions)]
        self._target = target

    # -- heartbeats -------------------------------------------------------------------------------
    def _start_heartbeats(self) -> None:
        if self._heartbeats is None or self._heartbeats.done():
            self._heartbeats = asyncio.ensure_future(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        failures = 0
        while not self._closed:
            await asyncio.sleep(self._interval)
            if self._closed or self.state != STABLE or self.rejoin_reason is not None:
                continue
            if not self.polling and time.monotonic() - self.last_poll > self._max_poll_interval:
                logger.warning("group %r: the application did not poll for more than max.poll.interval.ms; leaving "
                               "the group", self.group_id)
                await self.leave("consumer poll timeout has expired")
                self.member_lost("max.poll.interval.ms expired")
                continue
            try:
                await self._send(None, None)
                await self._resolve_target()
                failures = 0
            except asyncio.CancelledError:
                raise
            except FatalGroupError:
                return
            except Exception as exc:
                logger.info("group %r: heartbeat failed: %s", self.group_id, exc)
                self._cluster.forget_coordinator(self.group_id)
                failures += 1
                await asyncio.sleep(self._cluster.retry_backoff.delay(failures))
                continue
            if self.state == STABLE and self._applied is not None and self._target != self._applied:
                self.request_rejoin("the coordinator sent a new assignment")

    # -- leaving ----------------------------------------------------------------------------------
    async def leave(self, reason: str) -> None:
        """Leave with epoch -1 (a static member: -2, it keeps its partitions for its session)."""
        epoch = self.generation_id
        self.state = UNJOINED
        self.generation_id = -1
        if epoch < 0:
            return
        try:
            node = await self._cluster.coordinator(self.group_id)
            conn = await self._cluster.connection(node)
            request = HB(group_id=self.group_id, member_id=self.member_id,
                         member_epoch=LEAVE_STATIC_EPOCH if self.is_static else LEAVE_EPOCH,
                         instance_id=self.instance_id)
            response = await conn.send(request, version=conn.version_for(CONSUMER_GROUP_HEARTBEAT, 0, 1))
            if response.error_code:
                logger.info("group %r: leaving answered %s", self.group_id, error_name(response.error_code))
            else:
                logger.info("group %r: member %r left (%s)", self.group_id, self.member_id, reason)
        except (ClientError, KafkaError, OSError) as exc:
            logger.info("group %r: leaving failed: %s", self.group_id, exc)
