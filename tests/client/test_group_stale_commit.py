"""The stale-commit guard, the failure this project exists to prevent: a batch consumer that lost
partitions in a rebalance must not commit its old offsets for them over the new owner's progress.

* lost in a rebalance (another member joined while the batch was processed): refused before
  reaching the broker, naming the partitions and the generation;
* lost to max.poll.interval.ms (the member left the group): refused the same way;
* the broker's own generation check still applies (a member whose session expired);
* a commit that moves a partition backwards is logged as a WARNING.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.consumer import AsyncConsumer, CommitFailedError, FatalGroupError, StaleCommitError
from kwire.client.types import TopicPartition

from .test_consumer_records import MOCK_PARTITIONS, consume_until, quick, run
from .test_group_membership import ALL, Recorder, fill, group_settings, poll_until

TOPIC = "work"
EVERY = [TopicPartition(TOPIC, p) for p in sorted(ALL)]


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "kwire-data", default_partitions=MOCK_PARTITIONS) as b:
        yield b


def offsets_of(records) -> dict[TopicPartition, int]:
    """What a batch consumer commits after processing ``records``: next offset per partition."""
    out: dict[TopicPartition, int] = {}
    for r in records:
        out[TopicPartition(r.topic, r.partition)] = r.offset + 1
    return out


def test_commit_of_partitions_lost_in_a_rebalance_is_refused(broker):
    fill(broker.bootstrap, TOPIC, 10)

    async def main():
        settings = group_settings(broker.bootstrap, "g-stale", partition_assignment_strategy=["range"])
        first = AsyncConsumer(settings, topics=[TOPIC])
        batch = await consume_until(first, 40)          # one batch from all four partitions
        generation = first._membership.generation_id
        # While the batch is "processed", a second member joins; the first rejoins in its next poll.
        second = AsyncConsumer(settings, topics=[TOPIC])
        got = await poll_until([first, second], lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2)
        theirs = sorted(second.assignment())
        second_progress = got[1] + await consume_until(second, 20 - len(got[1]))
        await second.commit()
        # The first consumer now commits its batch: the offsets of all four partitions.
        with pytest.raises(StaleCommitError) as refused:
            await first.commit(offsets_of(batch))
        after = await first.committed(EVERY)
        ours = offsets_of(r for r in batch if TopicPartition(r.topic, r.partition) in first.assignment())
        await first.commit(ours)                         # what it still owns commits fine
        await second.close()
        await first.close()
        return refused.value, generation, theirs, second_progress, after

    error, generation, theirs, second_progress, after = run(main())
    assert error.partitions == theirs
    message = str(error)
    assert all(str(tp) in message for tp in theirs)
    assert f"lost them in a rebalance (it owned them in generation {generation}" in message
    assert "nothing was committed" in message
    # Nothing of the refused commit reached the broker: the new owner's progress stands.
    assert len(second_progress) == 20
    assert {tp: after[tp].offset for tp in theirs} == dict.fromkeys(theirs, 10)


def test_commit_after_max_poll_interval_expired_is_refused(broker):
    fill(broker.bootstrap, TOPIC, 5)

    async def main():
        settings = group_settings(broker.bootstrap, "g-slow", partition_assignment_strategy=["range"])
        slow_listener = Recorder()
        slow = AsyncConsumer({**settings, "max_poll_interval_ms": 1000}, topics=[TOPIC], listener=slow_listener)
        other = AsyncConsumer(settings, topics=[TOPIC])
        got = await poll_until([slow, other], lambda: len(slow.assignment()) == 2 and len(other.assignment()) == 2)
        held = sorted(slow.assignment())
        batch = [r for r in got[0] if TopicPartition(r.topic, r.partition) in held]
        batch += await consume_until(slow, 10 - len(batch))
        # The slow consumer "processes" for longer than max.poll.interval.ms: it leaves the group,
        # and the other member takes everything (in its polls).
        await poll_until([other], lambda: len(other.assignment()) == 4, timeout=15)
        with pytest.raises(StaleCommitError) as refused:
            await slow.commit(offsets_of(batch))
        await slow.getmany(timeout_ms=0)                   # the next poll tells the listener
        calls = list(slow_listener.calls)
        other_has = other.assignment()
        await other.close()
        await slow.close()
        return refused.value, held, other_has, calls

    error, held, other_has, calls = run(main())
    assert other_has == set(EVERY)
    assert error.partitions == held
    assert "lost them in a rebalance" in str(error) and "has not rejoined the group yet" in str(error)
    # on_partitions_lost (RebalanceListener's default: on_partitions_revoked) saw them go.
    assert ("revoked", held) in calls


def test_the_brokers_generation_check_still_applies(tmp_path):
    """A member whose heartbeats stopped (a stalled process) still believes it owns its
    partitions, so the guard lets the commit through; the coordinator refuses it."""

    async def main():
        async with EmbeddedBroker(tmp_path / "data", default_partitions=4, group_min_session_timeout_ms=500) as b:
            await asyncio.to_thread(fill, b.bootstrap, TOPIC, 5)
            settings = group_settings(b.bootstrap, "g-expired", session_timeout_ms=1000,
                                      partition_assignment_strategy=["range"])
            stalled = AsyncConsumer(settings, topics=[TOPIC])
            other = AsyncConsumer(settings, topics=[TOPIC])
            got = await poll_until([stalled, other],
                                   lambda: len(stalled.assignment()) == 2 and len(other.assignment()) == 2)
            batch = got[0] + await consume_until(stalled, 10 - len(got[0]))
            held = sorted(stalled.assignment())
            stalled._membership._heartbeats.cancel()        # the stall: no more heartbeats
            await poll_until([other], lambda: len(other.assignment()) == 4, timeout=15)
            with pytest.raises(CommitFailedError) as refused:
                await stalled.commit(offsets_of(batch))
            await other.close()
            await stalled.close()
            return refused.value, held

    error, held = run(main())
    assert error.error_code in (22, 25)  # ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID
    assert "the group rebalanced" in str(error) and all(str(tp) in str(error) for tp in held)


def test_a_fenced_static_member_is_told_so(broker):
    fill(broker.bootstrap, TOPIC, 2)

    async def main():
        settings = group_settings(broker.bootstrap, "g-fenced", group_instance_id="worker-1")
        old = AsyncConsumer(settings, topics=[TOPIC])
        await poll_until([old], lambda: len(old.assignment()) == 4)
        new = AsyncConsumer(settings, topics=[TOPIC])   # the same group.instance.id: replaces the old one
        await poll_until([new], lambda: len(new.assignment()) == 4)
        with pytest.raises(CommitFailedError) as commit_refused:
            await old.commit()
        with pytest.raises(FatalGroupError) as poll_refused:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                await old.getmany(timeout_ms=100)
        await new.close()
        await old.close()
        return commit_refused.value, poll_refused.value

    commit_error, poll_error = run(main())
    assert commit_error.error_code == 82 and "group.instance.id" in str(commit_error)
    assert "worker-1" in str(poll_error) and "FENCED_INSTANCE_ID" in str(poll_error)


def test_a_commit_moving_a_partition_backwards_logs_a_warning(broker, caplog):
    fill(broker.bootstrap, TOPIC, 20)
    tp = TopicPartition(TOPIC, 1)

    async def main():
        settings = quick(broker.bootstrap, group_id="g-back", auto_offset_reset="earliest", enable_auto_commit=False)
        async with AsyncConsumer(settings) as c:
            c.assign([tp])
            await c.commit({tp: 15})
            await c.commit({tp: 16})            # forwards: quiet
            forwards = [r for r in caplog.records if r.levelno == logging.WARNING]
            await c.commit({tp: 12})            # backwards from what this consumer committed
        async with AsyncConsumer(settings) as c:  # a fresh consumer knows the committed offset from OffsetFetch
            c.assign([tp])
            assert await c.position(tp) == 12
            await c.commit({tp: 3})
        return forwards

    caplog.set_level(logging.WARNING, logger="kwire.client.consumer")
    forwards = run(main())
    assert forwards == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "work-1" in warnings[0] and "committed offset is 16" in warnings[0] and "sets 12" in warnings[0]
    assert "work-1" in warnings[1] and "committed offset is 12" in warnings[1] and "sets 3" in warnings[1]
