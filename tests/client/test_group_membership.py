"""Consumer groups: kwire consumers with librdkafka consumers in one group (range, and
cooperative-sticky) on the mock cluster; kwire members joining and leaving on kwire's broker
(LeaveGroup rebalances at once; static members do not leave); committed offsets resumed after a
restart; pattern subscriptions following new topics; listener callbacks in the polling thread."""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
import time

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.admin import AsyncAdmin
from kwire.client.consumer import AsyncConsumer, Consumer, RebalanceListener
from kwire.client.types import TopicPartition
from kwire.protocol import messages
from tests.security.helpers import RawConnection

from .test_consumer_records import MOCK_PARTITIONS, QUIET, consume_until, mock_cluster, produce, quick, run

ALL = set(range(MOCK_PARTITIONS))


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "kwire-data", default_partitions=MOCK_PARTITIONS) as b:
        yield b


@pytest.fixture(scope="module")
def mock_bootstrap():
    yield from mock_cluster()


def fill(bootstrap: str, topic: str, per_partition: int) -> None:
    produce(bootstrap, topic, [(b"k%d" % i, b"v%d" % i, [], p) for p in sorted(ALL) for i in range(per_partition)])


def group_settings(bootstrap: str, group: str, **settings) -> dict:
    return quick(bootstrap, **{"group_id": group, "auto_offset_reset": "earliest", "enable_auto_commit": False,
                               "heartbeat_interval_ms": 100, "session_timeout_ms": 10000, **settings})


async def poll_until(consumers, condition, timeout: float = 20) -> dict:
    """Poll every consumer (concurrently: a rebalance needs them all) until ``condition()``;
    the records each got, by consumer index."""
    got = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout

    async def one(i, c):
        while not condition() and time.monotonic() < deadline:
            got[i] += await c.getmany(timeout_ms=100)

    await asyncio.gather(*(one(i, c) for i, c in enumerate(consumers)))
    return got


class LibrdkafkaMember(threading.Thread):
    """A librdkafka consumer polling in its own thread: its assignment, records, and a commit on request."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str):
        super().__init__(daemon=True)
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "partition.assignment.strategy": strategy,
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 100, **QUIET})
        self.consumer.subscribe([topic], on_assign=self._assigned)
        self.assignment: set[int] = set()
        self.records: list[tuple[int, int]] = []
        self.commit_requested = threading.Event()
        self.committed = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def _assigned(self, _consumer, partitions) -> None:
        # A partition (re)assigned is read again from its committed offset (none yet: the
        # earliest), so only records read since then count as read: otherwise "read everything"
        # could hold right after an eager rebalance, before any position is stored, and the
        # commit would fail with "No offset stored".
        given = {tp.partition for tp in partitions}
        self.records = [r for r in self.records if r[0] not in given]

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 60
            while not self.stop.is_set() and time.monotonic() < deadline:
                for m in self.consumer.consume(100, 0.05):
                    if m.error() is None:
                        self.records.append((m.partition(), m.offset()))
                self.assignment = {tp.partition for tp in self.consumer.assignment()}
                if self.commit_requested.is_set() and not self.committed.is_set():
                    self.consumer.commit(asynchronous=False)
                    self.committed.set()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.consumer.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_kwire_and_librdkafka_share_a_group(strategy, mock_bootstrap):
    topic, group = f"shared-{strategy}", f"g-shared-{strategy}"
    per_partition = 25
    fill(mock_bootstrap, topic, per_partition)
    other = LibrdkafkaMember(mock_bootstrap, group, topic, strategy)
    other.start()

    async def main():
        settings = group_settings(mock_bootstrap, group, partition_assignment_strategy=[strategy])
        async with AsyncConsumer(settings, topics=[topic]) as kwire:
            got: list = []

            def split_and_done() -> bool:
                ours = {tp.partition for tp in kwire.assignment()}
                theirs = other.assignment
                done_ours = {(r.partition, r.offset) for r in got} >= {(p, o) for p in ours for o in range(per_partition)}
                done_theirs = set(other.records) >= {(p, o) for p in theirs for o in range(per_partition)}
                return bool(ours) and bool(theirs) and not ours & theirs and ours | theirs == ALL \
                    and done_ours and done_theirs

            deadline = time.monotonic() + 30
            while not split_and_done() and time.monotonic() < deadline:
                got += await kwire.getmany(timeout_ms=100)
            ours = {tp.partition for tp in kwire.assignment()}
            await kwire.commit()
            other.commit_requested.set()
            await asyncio.to_thread(other.committed.wait, 20)
            committed = await kwire.committed([TopicPartition(topic, p) for p in sorted(ALL)])
            return ours, got, committed

    try:
        ours, got, committed = run(main())
    finally:
        other.stop.set()
        other.join(20)
    assert other.error is None
    theirs = other.assignment
    assert ours and theirs and not ours & theirs and ours | theirs == ALL
    # Each read its own partitions (after the last rebalance), and both commits landed.
    assert {r.partition for r in got} >= ours
    assert {tp.partition: om.offset for tp, om in committed.items()} == dict.fromkeys(ALL, per_partition)


def test_members_joining_and_leaving_rebalance_at_once(broker, caplog):
    topic, group = "joins", "g-joins"
    fill(broker.bootstrap, topic, 10)
    caplog.set_level(logging.DEBUG, logger="kwire.client.consumer")

    async def main():
        # A session timeout far beyond the test's bounds: only LeaveGroup can move partitions in time.
        settings = group_settings(broker.bootstrap, group, session_timeout_ms=60000,
                                  partition_assignment_strategy=["range"])
        first = AsyncConsumer(settings, topics=[topic])
        await poll_until([first], lambda: len(first.assignment()) == 4)
        alone = first.assignment()
        second = AsyncConsumer(settings, topics=[topic])
        await poll_until([first, second], lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2)
        split = first.assignment(), second.assignment()
        await second.close()
        await poll_until([first], lambda: len(first.assignment()) == 4, timeout=15)
        after = first.assignment()
        await first.close()
        return alone, split, after

    alone, split, after = run(main())
    every = {TopicPartition(topic, p) for p in ALL}
    assert alone == every
    assert not split[0] & split[1] and split[0] | split[1] == every
    assert after == every
    # New members joined through MEMBER_ID_REQUIRED (JoinGroup v4+), rejoining with the given id.
    assert sum("MEMBER_ID_REQUIRED" in r.getMessage() for r in caplog.records) >= 2


def test_committed_offsets_resume_after_restart(broker):
    topic, group = "restart", "g-restart"
    fill(broker.bootstrap, topic, 20)

    async def main():
        settings = group_settings(broker.bootstrap, group, partition_assignment_strategy=["roundrobin"])
        async with AsyncConsumer(settings, topics=[topic]) as first:
            got = await consume_until(first, 30, max_records=30)
            await first.commit()
            positions = {tp: await first.position(tp) for tp in first.assignment()}
        async with AsyncConsumer(settings, topics=[topic]) as second:
            rest = await consume_until(second, 80 - len(got))
            rest += await second.getmany(timeout_ms=300)
        return got, positions, rest

    got, positions, rest = run(main())
    first_seen = {(r.partition, r.offset) for r in got}
    second_seen = [(r.partition, r.offset) for r in rest]
    assert not first_seen & set(second_seen)                      # nothing read twice ...
    assert first_seen | set(second_seen) == {(p, o) for p in ALL for o in range(20)}  # ... nothing skipped
    for tp, position in positions.items():                        # restarted exactly at the commits
        assert min((o for p, o in second_seen if p == tp.partition), default=20) == position


def test_static_member_does_not_leave_on_close_a_dynamic_member_does(broker):
    topic = "static"
    fill(broker.bootstrap, topic, 2)

    async def members(group: str, **extra) -> tuple[int, int]:
        settings = group_settings(broker.bootstrap, group, session_timeout_ms=60000, **extra)
        async with AsyncConsumer(settings, topics=[topic]) as c:
            await poll_until([c], lambda: len(c.assignment()) == 4)
            async with AsyncAdmin({"bootstrap.servers": broker.bootstrap}) as admin:
                before = len((await admin.describe_groups([group]))[group].members)
                await c.close()
                after = len((await admin.describe_groups([group]))[group].members)
        return before, after

    assert run(members("g-dynamic")) == (1, 0)
    assert run(members("g-static", group_instance_id="instance-1")) == (1, 1)


def test_pattern_subscription_picks_up_new_matching_topics(broker):
    fill(broker.bootstrap, "pat-a", 3)
    fill(broker.bootstrap, "other", 3)

    async def main():
        # Auto commit: the eager rebalance for the new topic revokes pat-a; its positions are
        # committed first, so pat-a is not read again.
        settings = group_settings(broker.bootstrap, "g-pattern", metadata_max_age_ms=200, enable_auto_commit=True)
        async with AsyncConsumer(settings) as c:
            c.subscribe(pattern=r"pat-.*")
            first = await consume_until(c, 12)
            subscribed_first = c.subscription()
            await asyncio.to_thread(fill, broker.bootstrap, "pat-b", 3)
            second = await consume_until(c, 12)
            return first, subscribed_first, second, c.subscription()

    first, subscribed_first, second, subscribed_then = run(main())
    assert subscribed_first == {"pat-a"} and {r.topic for r in first} == {"pat-a"} and len(first) == 12
    assert subscribed_then == {"pat-a", "pat-b"} and {r.topic for r in second} == {"pat-b"} and len(second) == 12


def test_listener_callbacks_run_in_the_polling_thread_and_may_commit(broker):
    topic, group = "listener", "g-listener"
    fill(broker.bootstrap, topic, 5)
    caller = threading.get_ident()
    calls: list[tuple[str, list, bool]] = []

    class Listener(RebalanceListener):
        def on_partitions_assigned(self, assigned):
            calls.append(("assigned", assigned, threading.get_ident() == caller))

        def on_partitions_revoked(self, revoked):
            calls.append(("revoked", revoked, threading.get_ident() == caller))
            consumer.commit()  # the usual place to commit what was processed

    settings = group_settings(broker.bootstrap, group)
    consumer = Consumer(settings, topics=[topic], listener=Listener())
    with consumer:
        got = []
        for _ in range(100):
            if len(got) >= 20:
                break
            got += consumer.poll(0.1)
    every = [TopicPartition(topic, p) for p in sorted(ALL)]
    assert calls == [("assigned", every, True), ("revoked", every, True)]
    with Consumer(settings) as check:
        assert {tp: om.offset for tp, om in check.committed(every).items()} == dict.fromkeys(every, 5)


class Recorder(RebalanceListener):
    def __init__(self):
        self.calls: list[tuple[str, list[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked):  # a coroutine: AsyncConsumer awaits it
        self.calls.append(("revoked", revoked))

    def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", assigned))


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_eager_revokes_everything_cooperative_only_what_moves(strategy, broker):
    topic = f"moves-{strategy}"
    fill(broker.bootstrap, topic, 1)
    every = [TopicPartition(topic, p) for p in sorted(ALL)]

    async def main():
        settings = group_settings(broker.bootstrap, f"g-{strategy}", partition_assignment_strategy=[strategy])
        first_listener, second_listener = Recorder(), Recorder()
        first = AsyncConsumer(settings, topics=[topic], listener=first_listener)
        await poll_until([first], lambda: len(first.assignment()) == 4)
        second = AsyncConsumer(settings, topics=[topic], listener=second_listener)
        kept_throughout = set(every)

        def settled() -> bool:
            kept_throughout.intersection_update(first.assignment())
            return len(first.assignment()) == 2 and len(second.assignment()) == 2

        await poll_until([first, second], settled)
        moved = sorted(second.assignment())
        await second.close()
        await first.close()
        return first_listener.calls, second_listener.calls, moved, kept_throughout

    first_calls, second_calls, moved, kept = run(main())
    if strategy == "range":
        # Eager: everything is revoked before rejoining, then the new share assigned.
        assert first_calls[:3] == [("assigned", every), ("revoked", every),
                                   ("assigned", [tp for tp in every if tp not in moved])]
        assert kept == set()
    else:
        # Cooperative: only the two partitions that move are revoked; the other two are never
        # given up (consumption goes on), and the second member gets them in a follow-up round.
        assert first_calls[:3] == [("assigned", every), ("revoked", moved), ("assigned", [])]
        assert kept == set(every) - set(moved)
    assert ("assigned", moved) in second_calls


def test_auto_commit_every_interval_and_on_close(broker):
    topic = "auto"
    fill(broker.bootstrap, topic, 5)
    every = [TopicPartition(topic, p) for p in sorted(ALL)]

    async def main():
        often = group_settings(broker.bootstrap, "g-auto", enable_auto_commit=True, auto_commit_interval_ms=100)
        async with AsyncConsumer(often, topics=[topic]) as c:
            got = await consume_until(c, 20)
            # The positions reached are committed by a later poll, once the interval has passed.
            deadline = time.monotonic() + 10
            committed = {}
            while time.monotonic() < deadline:
                await c.getmany(timeout_ms=100)
                committed = {tp: om and om.offset for tp, om in (await c.committed(every)).items()}
                if committed == dict.fromkeys(every, 5):
                    break
        rarely = group_settings(broker.bootstrap, "g-auto-close", enable_auto_commit=True,
                                auto_commit_interval_ms=600_000)
        async with AsyncConsumer(rarely, topics=[topic]) as c:
            await consume_until(c, 20)
            before_close = await c.committed(every)
        async with AsyncConsumer(rarely) as check:
            after_close = await check.committed(every)
        return got, committed, before_close, after_close

    got, committed, before_close, after_close = run(main())
    assert len(got) == 20
    assert committed == dict.fromkeys(every, 5)
    assert before_close == dict.fromkeys(every)                     # the interval never came ...
    assert {tp: om.offset for tp, om in after_close.items()} == dict.fromkeys(every, 5)  # ... close committed


def test_resubscribing_and_new_partitions_rebalance_the_group(broker):
    fill(broker.bootstrap, "first", 2)
    fill(broker.bootstrap, "second", 2)

    async def main():
        settings = group_settings(broker.bootstrap, "g-resub", metadata_max_age_ms=200)
        async with AsyncConsumer(settings, topics=["first"]) as c:
            await poll_until([c], lambda: len(c.assignment()) == 4)
            on_first = c.assignment()
            c.subscribe(["second"])
            await poll_until([c], lambda: {tp.topic for tp in c.assignment()} == {"second"})
            on_second = c.assignment()
            # More partitions for a subscribed topic: the leader notices at its next metadata
            # check (metadata.max.age.ms) and the group rebalances onto them.
            async with AsyncAdmin({"bootstrap.servers": broker.bootstrap}) as admin:
                await admin.create_partitions({"second": 6})
            await poll_until([c], lambda: len(c.assignment()) == 6)
            return on_first, on_second, c.assignment()

    on_first, on_second, grown = run(main())
    assert on_first == {TopicPartition("first", p) for p in ALL}
    assert on_second == {TopicPartition("second", p) for p in ALL}
    assert grown == {TopicPartition("second", p) for p in range(6)}


def test_a_member_rides_out_a_broker_restart(tmp_path):
    """The broker goes away and comes back on the same port: connections fail and are made again,
    the restarted coordinator loads the stored generation back (as Kafka does), so the member
    keeps its partitions without a rebalance, and consumption goes on."""
    data = tmp_path / "kwire-data"
    first = EmbeddedBroker(data, default_partitions=MOCK_PARTITIONS).start()
    port = first.port
    fill(first.bootstrap, "restart-broker", 3)
    every = [TopicPartition("restart-broker", p) for p in sorted(ALL)]

    async def main():
        settings = group_settings(first.bootstrap, "g-restart-broker", retry_backoff_max_ms=200,
                                  reconnect_backoff_max_ms=200)
        listener = Recorder()
        async with AsyncConsumer(settings, topics=["restart-broker"], listener=listener) as c:
            before = await consume_until(c, 12)
            await c.commit()
            await asyncio.to_thread(first.stop)
            second = await asyncio.to_thread(EmbeddedBroker(data, port=port, default_partitions=MOCK_PARTITIONS).start)
            try:
                await asyncio.to_thread(fill, second.bootstrap, "restart-broker", 2)
                after = []
                deadline = time.monotonic() + 30
                while len({(r.partition, r.offset) for r in after}) < 8 and time.monotonic() < deadline:
                    after += await c.getmany(timeout_ms=100)
                return before, after, list(listener.calls)
            finally:
                await c.close()
                await asyncio.to_thread(second.stop)

    before, after, calls = run(main())
    assert sorted((r.partition, r.offset) for r in before) == [(p, o) for p in sorted(ALL) for o in range(3)]
    # From where it was: nothing read before the restart comes again.
    assert {(r.partition, r.offset) for r in after} == {(p, o) for p in ALL for o in (3, 4)}
    # Still the member of the loaded generation: no partition was lost or assigned again.
    assert calls == [("assigned", every)]


def join_raw(connection: RawConnection, group: str, member_id: str, topic: str):
    """One JoinGroup of a member the test drives by hand (it decides when, or whether, to sync)."""
    R = messages.JoinGroupRequest
    subscription = struct.pack(">h", 1) + messages.ConsumerProtocolSubscription(topics=[topic]).encode(1)
    return connection.call(R(group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id=member_id,
                             group_instance_id=None, protocol_type="consumer",
                             protocols=[R.JoinGroupRequestProtocol(name="range", metadata=subscription)]), 5)


@pytest.mark.slow
@pytest.mark.parametrize("interruptions", [1, 2])
def test_a_sync_ended_by_a_rebalance_on_the_mock_rejoins_as_the_same_member(mock_bootstrap, caplog, interruptions):
    # librdkafka's mock ends a SyncGroup that another member's join interrupts with
    # REBALANCE_IN_PROGRESS and a null assignment, which the protocol does not allow.  kwire's
    # consumer cannot read that answer; it must join again as the member it was, however often
    # that happens (cooperative rebalances come in pairs).  As a new member it left its old id in
    # the group until the session timed out, so the next generation counted a member that was gone
    # (and under load the churn failed others' commits).
    topic, group = "sync-abort", f"g-sync-abort-{interruptions}"
    fill(mock_bootstrap, topic, 2)
    with RawConnection(mock_bootstrap.split(",")[0]) as finder:
        coordinator = finder.call(messages.FindCoordinatorRequest(key=group, key_type=0), 2)
    leader, newcomer = (RawConnection(f"{coordinator.host}:{coordinator.port}", timeout=30) for _ in range(2))
    answers: dict = {}

    def join(name: str, member: RawConnection, member_id: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.__setitem__(name, join_raw(member, group, member_id, topic)))
        thread.start()
        return thread

    async def main():
        first_join = join("first", leader, "raw-leader")  # first in: the mock makes it the leader
        await asyncio.sleep(0.3)
        settings = group_settings(mock_bootstrap, group, session_timeout_ms=6000)
        async with AsyncConsumer(settings, topics=[topic]) as kwire:
            polling = asyncio.ensure_future(kwire.getmany(timeout_ms=30000))
            await asyncio.to_thread(first_join.join, 20)
            first = answers["first"]
            assert first.error_code == 0 and first.leader == "raw-leader"
            (ours,) = {m.member_id for m in first.members} - {"raw-leader"}
            for i in range(interruptions):
                await asyncio.sleep(0.5)  # kwire waits in SyncGroup for the leader, who does not sync
                newcomer_join = join("newcomer", newcomer, "raw-newcomer")  # ends that sync with the null answer
                await asyncio.sleep(0.5)
                rejoin = join(f"again-{i}", leader, "raw-leader")
                await asyncio.to_thread(rejoin.join, 30)
                await asyncio.to_thread(newcomer_join.join, 30)
            polling.cancel()
            return ours, answers[f"again-{interruptions - 1}"]

    try:
        with caplog.at_level(logging.WARNING, logger="kwire.client.consumer"):
            ours, again = run(main())
    finally:
        leader.close()
        newcomer.close()
    assert sum("unreadable SyncGroup answer" in r.getMessage() and r.getMessage().endswith(repr(ours))
               for r in caplog.records) == interruptions
    assert again.error_code == 0
    assert sorted(m.member_id for m in again.members) == sorted(["raw-leader", "raw-newcomer", ours])
