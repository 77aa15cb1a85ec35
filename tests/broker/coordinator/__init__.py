"""Tests of the group coordinator and its request handlers, and the harness they share.

The handlers are called directly with a small broker-like object (config, topic registry and a
real ``GroupCoordinator`` on a temp dir).  ``call`` sends each request the way a client of that
version would: the request is encoded at the version and decoded again (so fields the version
lacks are gone), and the response is encoded at the version and decoded again, which must give
the same response (so a field the version can't carry fails the test, even an ignorable one).
"""

from __future__ import annotations

import asyncio
import inspect
import struct
from pathlib import Path
from typing import Any

from kwire.broker.config import BrokerConfig
from kwire.broker.context import RequestContext
from kwire.broker.coordinator import GroupCoordinator
from kwire.broker.coordinator.consumer import ConsumerGroupCoordinator, Timeouts
from kwire.broker.coordinator.consumer.records import ConsumerGroupRecords
from kwire.broker.coordinator.streams import StreamsGroupCoordinator
from kwire.broker.coordinator.timers import ManualClock
from kwire.broker.handlers import HANDLERS
from kwire.broker.internal_topics import InternalTopics
from kwire.broker.state import PartitionWaiters
from kwire.broker.storage import LogManager
from kwire.broker.topics import TopicRegistry
from kwire.protocol import messages

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 8, 9, 15, 16, 42, 47

# Short enough for tests that wait for timeouts, within the broker's bounds set below.
MIN_SESSION_MS = 10
SESSION_MS = 10_000
REBALANCE_MS = 10_000


# Wall-clock milliseconds that only move when the test says so: commit stamps, offset expiry, and
# the coordinators' timeouts (sessions, joins, syncs), which fire as the clock passes them.
FakeClock = ManualClock


class Broker:
    """What the group handlers read of ``BrokerState``: config, topics and the coordinator, with
    the logs of ``__consumer_offsets`` where the coordinator keeps its state."""

    def __init__(self, data_dir: Path, *, clock: FakeClock | None = None, clean_shutdown: bool = True,
                 coordinator_options: dict[str, Any] | None = None, **settings: Any):
        settings.setdefault("group_min_session_timeout_ms", MIN_SESSION_MS)
        self.data_dir = Path(data_dir)
        self.settings = settings
        self.clock = clock or FakeClock()
        _CLOCK[0] = self.clock
        self.coordinator_options = coordinator_options or {}
        self.config = BrokerConfig(data_dir=self.data_dir, **settings)
        self.topics = TopicRegistry(self.data_dir)
        self.internal_topics = InternalTopics(self.topics, self.config)
        self.logs = LogManager(self.data_dir, self.config.log)
        self.internal_topics.attach(self.logs, lambda info: self.config.log.with_(cleanup_policy="compact"))
        self.waiters = PartitionWaiters()
        self.coordinator = GroupCoordinator(self.data_dir, self.config, self.topics, clean_shutdown=clean_shutdown,
                                            internal_topics=self.internal_topics, notify=self.waiters.notify,
                                            clock=self.clock, **self.coordinator_options)
        # KIP-848 groups, on the same clock; their records go where the classic groups' do.
        self.consumer_groups = ConsumerGroupCoordinator(
            self.topics, now_ms=self.clock, records=ConsumerGroupRecords(self.coordinator.store),
            timeouts=lambda _g: Timeouts(self.config.group_consumer_session_timeout_ms,
                                         self.config.group_consumer_heartbeat_interval_ms),
            classic_group_active=lambda g: bool((c := self.coordinator.group(g)) is not None and c.members),
            release_classic=self.coordinator.release_group, adopt_classic=self.coordinator.adopt_group)
        # KIP-1071 streams groups, on the same clock (in memory: the handlers ask them of every group id).
        self.streams_groups = StreamsGroupCoordinator(
            lambda t: (i.partitions if (i := self.topics.get(t)) is not None else None), now_ms=self.clock)
        self.coordinator.topics_in_use = self.consumer_groups.topics_in_use
        self.coordinator.on_expiry_check = lambda: self.consumer_groups.remove_empty_groups(
            lambda g: bool((c := self.coordinator.group(g)) is not None and c.offsets))

    def close(self) -> None:
        self.coordinator.close()
        self.logs.close()

    def reopen(self, *, clean: bool = True) -> Broker:
        """A new broker on the same data dir; ``clean=False`` skips ``close()`` (like kill -9:
        the logs are left unflushed, without their clean-shutdown marker)."""
        if clean:
            self.close()
        else:
            self.logs.close(clean=False)
        return Broker(self.data_dir, clock=self.clock, clean_shutdown=clean,
                      coordinator_options=self.coordinator_options, **self.settings)


def context(broker: Broker, api_key: int, version: int, *, client_id: str | None = "c",
            client_host: str = "/127.0.0.1") -> RequestContext:
    return RequestContext(broker=broker, api_key=api_key, api_version=version, correlation_id=1,  # type: ignore[arg-type]
                          client_id=client_id, client_host=client_host, connection_id=1)


async def call(broker: Broker, request, version: int, *, client_id: str | None = "c",
               client_host: str = "/127.0.0.1"):
    """Serve ``request`` at ``version`` through its registered handler; the decoded response."""
    cls = type(request)
    entry = HANDLERS[cls.API_KEY]
    assert entry.min_version <= version <= entry.max_version, f"{cls.__name__} v{version} is not registered"
    wire = cls.decode(request.encode(version), version)
    result = entry.fn(context(broker, cls.API_KEY, version, client_id=client_id, client_host=client_host), wire)
    if inspect.isawaitable(result):
        result = await result
    rcls = type(result)
    assert rcls.API_KEY == cls.API_KEY
    decoded = rcls.decode(rcls.encode(result, version), version)
    # Nothing the handler set may be lost on the way: a field the version lacks would be
    # dropped silently when ignorable, and raise EncodeError when not.
    assert decoded.to_dict() == result.to_dict(), f"{rcls.__name__} v{version} lost fields"
    return decoded


def consumer_metadata(topics: list[str], version: int = 1) -> bytes:
    """A consumer's subscription as it sends it in JoinGroup: int16 version + body."""
    body = messages.ConsumerProtocolSubscription(topics=topics).encode(version)
    return struct.pack(">h", version) + body


def consumer_assignment(partitions: dict[str, list[int]], version: int = 1) -> bytes:
    A = messages.ConsumerProtocolAssignment
    body = A(assigned_partitions=[A.TopicPartition(topic=t, partitions=ps) for t, ps in partitions.items()])
    return struct.pack(">h", version) + body.encode(version)


def join_request(group_id: str, member_id: str = "", *, protocols=None, protocol_type: str = "consumer",
                 session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS, instance_id: str | None = None,
                 topics: list[str] | None = None, reason: str | None = None):
    R = messages.JoinGroupRequest
    if protocols is None:
        protocols = [("range", consumer_metadata(topics or ["t"]))]
    return R(group_id=group_id, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, member_id=member_id,
             group_instance_id=instance_id, protocol_type=protocol_type,
             protocols=[R.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols], reason=reason)


async def join(broker: Broker, group_id: str, member_id: str = "", *, version: int = 9, client_id: str = "c",
               **options: Any):
    """One JoinGroup request (it may wait for the rebalance to end)."""
    return await call(broker, join_request(group_id, member_id, **options), version, client_id=client_id)


async def join_new(broker: Broker, group_id: str, *, version: int = 9, client_id: str = "c", **options: Any):
    """Join as a new member, doing the MEMBER_ID_REQUIRED round trip of v4+ (not for static members)."""
    resp = await join(broker, group_id, version=version, client_id=client_id, **options)
    if version >= 4 and resp.error_code == 79 and not options.get("instance_id"):
        resp = await join(broker, group_id, resp.member_id, version=version, client_id=client_id, **options)
    return resp


async def sync(broker: Broker, group_id: str, generation: int, member_id: str,
               assignments: dict[str, bytes] | None = None, *, version: int = 5, instance_id: str | None = None,
               protocol_type: str | None = None, protocol_name: str | None = None):
    R = messages.SyncGroupRequest
    req = R(group_id=group_id, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
            protocol_type=protocol_type, protocol_name=protocol_name,
            assignments=[R.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()])
    return await call(broker, req, version)


async def heartbeat(broker: Broker, group_id: str, generation: int, member_id: str, *, version: int = 4,
                    instance_id: str | None = None) -> int:
    req = messages.HeartbeatRequest(group_id=group_id, generation_id=generation, member_id=member_id,
                                    group_instance_id=instance_id)
    return (await call(broker, req, version)).error_code


async def leave(broker: Broker, group_id: str, members: list[tuple[str, str | None]], *, version: int = 5):
    R = messages.LeaveGroupRequest
    if version >= 3:
        req = R(group_id=group_id, members=[R.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members])
    else:
        (member_id, _), = members
        req = R(group_id=group_id, member_id=member_id)
    return await call(broker, req, version)


async def commit(broker: Broker, group_id: str, offsets: dict[tuple[str, int], int], *, generation: int = -1,
                 member_id: str = "", version: int = 9, metadata: str | None = "", leader_epoch: int = -1,
                 instance_id: str | None = None, retention_ms: int = -1) -> dict[tuple[str, int], int]:
    """OffsetCommit by topic name (v0-9); the error code of each partition."""
    R = messages.OffsetCommitRequest
    by_topic: dict[str, list] = {}
    for (t, p), off in offsets.items():
        by_topic.setdefault(t, []).append(R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_metadata=metadata,
            committed_leader_epoch=leader_epoch if version >= 6 else -1))
    req = R(group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance_id, retention_time_ms=retention_ms,
            topics=[R.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
    resp = await call(broker, req, version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


async def fetch(broker: Broker, group_id: str, partitions: dict[str, list[int]] | None, *, version: int = 7):
    """OffsetFetch (v1-7 form); {(topic, partition): (offset, leader epoch, metadata, error)}."""
    R = messages.OffsetFetchRequest
    topics = None if partitions is None else [R.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                              for t, ps in partitions.items()]
    resp = await call(broker, R(group_id=group_id, topics=topics), version)
    return {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
            for t in resp.topics for p in t.partitions}


async def describe(broker: Broker, group_id: str, *, version: int = 5):
    resp = await call(broker, messages.DescribeGroupsRequest(groups=[group_id]), version)
    (group,) = resp.groups
    return group


async def stable_group(broker: Broker, group_id: str, n: int, *, version: int = 9, **options: Any):
    """n members joined into one generation and synced (the first to join leads); returns their join answers.

    Members join one by one and each earlier member rejoins, as real clients do when a heartbeat
    says REBALANCE_IN_PROGRESS.
    """
    joined = []
    for i in range(n):
        task = asyncio.ensure_future(join_new(broker, group_id, version=version, client_id=f"c{i}", **options))
        await asyncio.sleep(0)
        rejoins = [asyncio.ensure_future(join(broker, group_id, r.member_id, version=version, client_id=f"c{j}",
                                              **options))
                   for j, r in enumerate(joined)]
        joined = [*(await asyncio.gather(*rejoins)), await task]
    for r in joined:
        assert r.error_code == 0, r
    leader = next(r for r in joined if r.leader == r.member_id)
    assignments = {r.member_id: f"assignment-{r.member_id}".encode() for r in joined}
    followers = [asyncio.ensure_future(sync(broker, group_id, r.generation_id, r.member_id))
                 for r in joined if r is not leader]
    await asyncio.sleep(0)
    answers = await asyncio.gather(sync(broker, group_id, leader.generation_id, leader.member_id, assignments),
                                   *followers)
    for a in answers:
        assert a.error_code == 0, a
    return joined


def run(coro, clock: ManualClock | None = None):
    """Run a test coroutine with a deadline, so a rebalance that never ends fails instead of hanging.

    With the coordinators on a ``ManualClock`` (``Broker``'s), time jumps: whenever every task
    is waiting, the clock moves to the next timer due (as trio's autojump clock), so the
    coordinator's timeouts fire in order without real waiting.  The test waits on that clock
    with ``pause`` (never ``asyncio.sleep`` for time to pass)."""
    async def main():
        task = asyncio.ensure_future(coro)
        jumper = asyncio.ensure_future(_autojump(clock or _CLOCK[0], task)) if (clock or _CLOCK[0]) else None
        try:
            return await asyncio.wait_for(task, 10)
        finally:
            if jumper is not None:
                jumper.cancel()

    return asyncio.run(main())


# The clock of the last Broker made: ``run`` jumps it unless told another.
_CLOCK: list[ManualClock | None] = [None]


async def _autojump(clock: ManualClock, task: asyncio.Future) -> None:
    loop = asyncio.get_running_loop()
    while not task.done():
        await asyncio.sleep(0)
        # Idle means no other callback is ready to run (the loop's ready queue, CPython's
        # ``_ready``: the only way to ask asyncio whether every task is waiting).
        if loop._ready:  # type: ignore[attr-defined]
            continue
        # A moment of real time too: a write's fsync may be finishing in a worker thread.
        await asyncio.sleep(0.001)
        if not task.done() and not loop._ready and clock.pending():  # type: ignore[attr-defined]
            clock.advance_to_next()


async def pause(broker: Broker, seconds: float) -> None:
    """Let ``seconds`` pass on the broker's clock (its timers due meanwhile fire, in order)."""
    done = asyncio.get_running_loop().create_future()
    broker.clock.call_later(seconds, lambda: done.done() or done.set_result(None))
    await done
