"""KIP-932 share consumers: members of a share group, which hands each record to one member at a
time and takes it back unless the member acknowledges it.

    async with AsyncShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "workers"}) as c:
        c.subscribe(["jobs"])
        for record in await c.poll(1.0):
            ...                                    # implicit mode: accepted at the next poll

    with ShareConsumer({..., "share.acknowledgement.mode": "explicit"}) as c:
        c.subscribe(["jobs"])
        for record in c.poll(1.0):
            c.acknowledge(record, AcknowledgeType.REJECT if bad(record) else AcknowledgeType.ACCEPT)
        c.commit_sync()                           # or sent with the next poll

As Kafka's KafkaShareConsumer: the member names itself (a random member id), heartbeats to the
group coordinator (ShareGroupHeartbeat) and fetches with ShareFetch from each partition leader in a
share session, piggy-backing its acknowledgements; ``commit`` sends them at once with
ShareAcknowledge; ``close`` acknowledges what is pending, closes the sessions (epoch -1) and leaves
the group.  ``share.acknowledgement.mode``: ``implicit`` (each poll accepts what the previous one
returned) or ``explicit`` (every record returned must be acknowledged before the next poll).
Offsets the broker acquired that hold no record (compacted away, control records) are
acknowledged as gaps.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, NamedTuple, TypeVar

from kwire.protocol import messages
from kwire.protocol.errors import FencedMemberEpochError, KafkaError, UnknownMemberIdError
from kwire.protocol.records import iter_batches
from kwire.protocol.splice import SplicedBytes
from kwire.settings import ConfigError

from .cluster import Cluster
from .config import CommonConfig, _choice, _int
from .errors import IllegalStateError
from .facade import SyncFacade, blocking, mirrors, on_loop
from .loop_thread import LoopThread

_FetchAckBatch = messages.ShareFetchRequest.FetchTopic.FetchPartition.AcknowledgementBatch
_AckAckBatch = messages.ShareAcknowledgeRequest.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch
# An acknowledgement batch of ShareFetch or of ShareAcknowledge (two classes, the same fields).
_AckBatch = TypeVar("_AckBatch", _FetchAckBatch, _AckAckBatch)


def error_for_code(code: int, message: str) -> KafkaError:
    return KafkaError.for_code(code)(message)

__all__ = ["AcknowledgeType", "AsyncShareConsumer", "ShareConsumer", "ShareConsumerConfig", "ShareRecord"]

logger = logging.getLogger("kwire.client.share_consumer")

INITIAL_EPOCH, FINAL_EPOCH = 0, -1


class AcknowledgeType(IntEnum):
    """How a member is done with a record (the ShareFetch/ShareAcknowledge AcknowledgeTypes)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class ShareRecord(NamedTuple):
    """One record of a share group, with how many times it has been delivered (this one included)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int     # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    delivery_count: int


@dataclass(frozen=True)
class ShareConsumerConfig(CommonConfig):
    """A share consumer's settings (KIP-932): the common ones and the share group, how records
    are acknowledged, and fetching."""

    ROLE: ClassVar[str] = "share consumer"

    # The share group (required).
    group_id: str | None = None
    # implicit: each poll accepts the records of the previous one; explicit: acknowledge() each.
    share_acknowledgement_mode: str = _choice("implicit", "implicit", "explicit")
    # Records asked for per ShareFetch (the broker may give a few more, whole batches).
    max_poll_records: int = _int(500, low=1)
    fetch_min_bytes: int = _int(1)
    fetch_max_wait_ms: int = _int(500)
    fetch_max_bytes: int = _int(52_428_800)

    def _check(self) -> None:
        super()._check()
        if not self.group_id:
            raise ConfigError("group.id is required for a share consumer")


class _Session:
    """One share session with one broker."""

    def __init__(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.partitions: set[tuple[str, int]] = set()  # in the session on the broker
        self.forget: set[tuple[str, int]] = set()


class AsyncShareConsumer:
    """A share-group member on asyncio."""

    def __init__(self, config: ShareConsumerConfig | Mapping[str, Any] | None = None, /, **settings: Any):
        if not isinstance(config, ShareConsumerConfig):
            config = ShareConsumerConfig.from_settings(config, **settings)
        self.config = config
        assert config.group_id  # ShareConsumerConfig requires group.id
        self._group_id: str = config.group_id
        self.member_id = str(uuid.uuid4())
        self._cluster: Cluster | None = None
        self._topics: list[str] = []
        self._member_epoch = 0
        self._assignment: dict[str, tuple[int, ...]] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._interval = 5.0
        self._subscription_sent = False
        self._sessions: dict[int, _Session] = {}
        # (topic, partition) -> offset -> acknowledge type, waiting to be sent
        self._acks: dict[tuple[str, int], dict[int, int]] = {}
        self._delivered: list[ShareRecord] = []  # returned by the last poll, not yet acknowledged
        self._closed = False

    async def __aenter__(self) -> AsyncShareConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- membership ---------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to these topics (replacing the subscription); the group assigns partitions."""
        self._check_open()
        self._topics = sorted(set(topics))
        self._subscription_sent = False
        if self._heartbeat is None:
            self._cluster = self._cluster or Cluster(self.config)
            self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    def assignment(self) -> dict[str, tuple[int, ...]]:
        """The partitions the group gave this member, by topic."""
        return dict(self._assignment)

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            try:
                await self._heartbeat_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried at the next interval
                logger.warning("share group %s: heartbeat failed: %s", self.config.group_id, exc)
                if self._cluster is not None:
                    self._cluster.forget_coordinator(self._group_id)
            await asyncio.sleep(self._interval)

    async def _heartbeat_once(self, leave: bool = False) -> None:
        assert self._cluster is not None
        node = await self._cluster.coordinator(self._group_id)
        R = messages.ShareGroupHeartbeatRequest
        req = R(group_id=self._group_id, member_id=self.member_id,
                member_epoch=FINAL_EPOCH if leave else self._member_epoch, rack_id=None,
                subscribed_topic_names=None if self._subscription_sent and not leave else list(self._topics))
        if leave:
            req.subscribed_topic_names = None
        resp = await self._cluster.send(req, node)
        if resp.error_code:
            err = error_for_code(resp.error_code, resp.error_message or "")
            if resp.error_code in (UnknownMemberIdError.code, FencedMemberEpochError.code):  # join again
                self._member_epoch, self._subscription_sent = 0, False
            raise err
        if leave:
            return
        self._subscription_sent = True
        self._member_epoch = resp.member_epoch
        self._interval = max(resp.heartbeat_interval_ms, 100) / 1000
        if resp.assignment is not None:
            md = await self._cluster.refresh_metadata(self._topics)
            new = {}
            for tp in resp.assignment.topic_partitions:
                name = md.topic_name(tp.topic_id)
                if name is not None:
                    new[name] = tuple(sorted(tp.partitions))
            self._assignment = new

    # -- records ------------------------------------------------------------------------------
    def acknowledge(self, record: ShareRecord, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Say how this member is done with a record the last poll returned (sent with the next
        poll, or by commit)."""
        self._check_open()
        if record not in self._delivered:
            raise IllegalStateError(f"{record.topic}-{record.partition}@{record.offset} is not in flight here")
        self._delivered.remove(record)
        self._acks.setdefault((record.topic, record.partition), {})[record.offset] = int(ack_type)

    async def poll(self, timeout: float = 1.0) -> list[ShareRecord]:
        """Records acquired for this member, waiting up to ``timeout`` seconds for some."""
        self._check_open()
        if self._delivered:
            if self.config.share_acknowledgement_mode == "explicit":
                raise IllegalStateError("explicit acknowledgement mode: acknowledge every record of the last "
                                        "poll before polling again")
            for r in self._delivered:
                self._acks.setdefault((r.topic, r.partition), {})[r.offset] = AcknowledgeType.ACCEPT
            self._delivered = []
        deadline = time.monotonic() + timeout
        while True:
            got = await self._fetch(max(deadline - time.monotonic(), 0))
            if got or time.monotonic() >= deadline:
                self._delivered = list(got)
                return got
            if not self._assignment:
                await asyncio.sleep(min(0.05, max(deadline - time.monotonic(), 0)))

    async def _fetch(self, wait: float) -> list[ShareRecord]:
        assert self._cluster is not None
        by_leader: dict[int, list[tuple[str, int]]] = {}
        md = self._cluster.metadata
        for topic, parts in self._assignment.items():
            for p in parts:
                leader = md.leader(topic, p)
                if leader is not None:
                    by_leader.setdefault(leader, []).append((topic, p))
        for (topic, p) in self._acks:
            leader = md.leader(topic, p)
            if leader is not None and (topic, p) not in by_leader.get(leader, []):
                by_leader.setdefault(leader, []).append((topic, p))
        for node, s in self._sessions.items():  # partitions that moved away leave the sessions
            s.forget = {tp for tp in s.partitions if tp not in by_leader.get(node, [])}
        if not by_leader:
            return []
        results = await asyncio.gather(*(self._fetch_from(node, tps, wait) for node, tps in by_leader.items()))
        return [r for rs in results for r in rs]

    def _ack_batches(self, tp: tuple[str, int], batch_type: type[_AckBatch]) -> list[_AckBatch]:
        acks = self._acks.pop(tp, {})
        out: list[_AckBatch] = []
        for off in sorted(acks):
            t = acks[off]
            if out and out[-1].last_offset == off - 1 and out[-1].acknowledge_types == [t]:
                out[-1].last_offset = off
            else:
                out.append(batch_type(first_offset=off, last_offset=off, acknowledge_types=[t]))
        return out

    async def _fetch_from(self, node: int, tps: list[tuple[str, int]], wait: float) -> list[ShareRecord]:
        assert self._cluster is not None
        s = self._sessions.setdefault(node, _Session())
        R = messages.ShareFetchRequest
        md = self._cluster.metadata
        topics: dict[str, messages.ShareFetchRequest.FetchTopic] = {}
        sent_acks: dict[tuple[str, int], list[_FetchAckBatch]] = {}
        for topic, p in tps:
            batches = self._ack_batches((topic, p), _FetchAckBatch) if s.epoch != INITIAL_EPOCH else []
            if (topic, p) in s.partitions and not batches:
                continue
            sent_acks[(topic, p)] = batches
            ft = topics.setdefault(topic, R.FetchTopic(topic_id=md.topic_id(topic), partitions=[]))
            ft.partitions.append(R.FetchTopic.FetchPartition(partition_index=p, acknowledgement_batches=batches))
        forgotten: dict[str, list[int]] = {}
        for topic, p in s.forget:
            forgotten.setdefault(topic, []).append(p)
        req = R(group_id=self._group_id, member_id=self.member_id, share_session_epoch=s.epoch,
                max_wait_ms=int(wait * 1000), min_bytes=self.config.fetch_min_bytes,
                max_bytes=self.config.fetch_max_bytes, max_records=self.config.max_poll_records,
                batch_size=self.config.max_poll_records, share_acquire_mode=0, topics=list(topics.values()),
                forgotten_topics_data=[R.ForgottenTopic(topic_id=md.topic_id(t), partitions=ps)
                                       for t, ps in forgotten.items()])
        resp = await self._cluster.send(req, node, high=1)
        if resp.error_code:
            # SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH: start a new session.
            self._sessions.pop(node, None)
            raise error_for_code(resp.error_code, resp.error_message or "")
        s.epoch = 1 if s.epoch >= 2**31 - 1 else s.epoch + 1
        s.partitions = (s.partitions | set(sent_acks)) - s.forget
        s.forget = set()
        out: list[ShareRecord] = []
        for t in resp.responses:
            name = md.topic_name(t.topic_id)
            for part in t.partitions:
                if part.acknowledge_error_code:
                    logger.warning("%s-%d: acknowledgement failed: %s", name, part.partition_index,
                                   error_for_code(part.acknowledge_error_code, part.acknowledge_error_message or ""))
                if part.error_code or name is None or not part.acquired_records:
                    continue
                out += self._records_of(name, part)
        return out

    def _records_of(self, topic: str, p: messages.ShareFetchResponse.ShareFetchableTopicResponse.PartitionData
                    ) -> list[ShareRecord]:
        acquired: dict[int, int] = {}
        for a in p.acquired_records:
            for off in range(a.first_offset, a.last_offset + 1):
                acquired[off] = a.delivery_count
        records = p.records
        data = records.read() if isinstance(records, SplicedBytes) else bytes(records or b"")
        out: list[ShareRecord] = []
        for batch in iter_batches(data):
            if batch.is_control:
                continue
            ts = batch.timestamp_type  # None only in a magic 0 message set, which has no timestamps
            ts_type = -1 if ts is None else int(ts)
            for r in batch:
                n = acquired.pop(r.offset, None)
                if n is not None:
                    out.append(ShareRecord(topic, p.partition_index, r.offset, r.timestamp, ts_type,
                                           r.key, r.value, tuple(r.headers), n))
        if acquired:  # acquired offsets with no record: gaps
            gaps = self._acks.setdefault((topic, p.partition_index), {})
            for off in acquired:
                gaps[off] = AcknowledgeType.GAP
        return out

    async def commit(self) -> dict[tuple[str, int], KafkaError | None]:
        """Send the pending acknowledgements now (ShareAcknowledge); the result per partition."""
        self._check_open()
        if self.config.share_acknowledgement_mode == "implicit":
            for r in self._delivered:
                self._acks.setdefault((r.topic, r.partition), {})[r.offset] = AcknowledgeType.ACCEPT
            self._delivered = []
        return await self._acknowledge(final=False)

    async def _acknowledge(self, final: bool) -> dict[tuple[str, int], KafkaError | None]:
        assert self._cluster is not None
        md = self._cluster.metadata
        R = messages.ShareAcknowledgeRequest
        by_leader: dict[int, dict[str, messages.ShareAcknowledgeRequest.AcknowledgeTopic]] = {}
        for tp in list(self._acks):
            leader = md.leader(*tp)
            s = self._sessions.get(leader) if leader is not None else None
            if leader is None or s is None or s.epoch == INITIAL_EPOCH:
                continue
            batches = self._ack_batches(tp, _AckAckBatch)
            topics = by_leader.setdefault(leader, {})
            at = topics.setdefault(tp[0], R.AcknowledgeTopic(topic_id=md.topic_id(tp[0]), partitions=[]))
            at.partitions.append(R.AcknowledgeTopic.AcknowledgePartition(partition_index=tp[1],
                                                                         acknowledgement_batches=batches))
        if final:
            for node, s in self._sessions.items():
                if s.epoch != INITIAL_EPOCH:
                    by_leader.setdefault(node, {})
        results: dict[tuple[str, int], KafkaError | None] = {}
        for node, topics in by_leader.items():
            s = self._sessions[node]
            req = R(group_id=self._group_id, member_id=self.member_id,
                    share_session_epoch=FINAL_EPOCH if final else s.epoch, topics=list(topics.values()))
            resp = await self._cluster.send(req, node, high=1)
            if resp.error_code:
                err = error_for_code(resp.error_code, resp.error_message or "")
                for at in topics.values():
                    name = md.topic_name(at.topic_id)
                    if name is None:  # a topic deleted meanwhile
                        continue
                    for ap in at.partitions:
                        results[(name, ap.partition_index)] = err
                continue
            if not final:
                s.epoch = 1 if s.epoch >= 2**31 - 1 else s.epoch + 1
            for t in resp.responses:
                name = md.topic_name(t.topic_id)
                if name is None:  # a topic id the metadata no longer knows: nothing to name
                    continue
                for p in t.partitions:
                    results[(name, p.partition_index)] = \
                        error_for_code(p.error_code, p.error_message or "") if p.error_code else None
        return results

    async def close(self) -> None:
        """Acknowledge what is pending (implicit mode: accept the last poll's records), close the
        share sessions and leave the group."""
        if self._closed:
            return
        try:
            if self._cluster is not None and self._heartbeat is not None:
                if self.config.share_acknowledgement_mode == "implicit":
                    for r in self._delivered:
                        self._acks.setdefault((r.topic, r.partition), {})[r.offset] = AcknowledgeType.ACCEPT
                try:
                    await self._acknowledge(final=True)
                    await self._heartbeat_once(leave=True)
                except Exception as exc:  # noqa: BLE001 - the broker expires what is left
                    logger.warning("share group %s: leaving failed: %s", self._group_id, exc)
        finally:
            self._closed = True
            if self._heartbeat is not None:
                self._heartbeat.cancel()
            if self._cluster is not None:
                await self._cluster.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the share consumer is closed")


class ShareConsumer(SyncFacade):
    """The blocking share consumer: ``AsyncShareConsumer`` run on kwire's loop thread."""

    def __init__(self, config: ShareConsumerConfig | Mapping[str, Any] | None = None, /, **settings: Any):
        self._loop = LoopThread.get()
        self._async = AsyncShareConsumer(config, **settings)

    @property
    def _twin(self) -> AsyncShareConsumer:
        return self._async

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    subscribe = on_loop(AsyncShareConsumer.subscribe)
    assignment = on_loop(AsyncShareConsumer.assignment)
    poll = blocking(AsyncShareConsumer.poll)

    @mirrors(AsyncShareConsumer.acknowledge)
    def acknowledge(self, record: ShareRecord, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        # Called once per record: it only notes the acknowledgement for the next poll or commit,
        # so it runs in the caller's thread rather than paying a loop round trip per record.
        self._async.acknowledge(record, ack_type)

    @mirrors(AsyncShareConsumer.commit, blocking=True)
    def commit_sync(self) -> dict[tuple[str, int], KafkaError | None]:
        return self._loop.run(self._async.commit())

    close = blocking(AsyncShareConsumer.close)
