"""Where the consumer reads from: auto.offset.reset (earliest, latest, none; also after an
out-of-range fetch), seek, seek to the beginning/end/a timestamp, pause and resume; and the
synchronous facade.  Records come from librdkafka into kwire's broker."""

from __future__ import annotations

import asyncio

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.consumer import AsyncConsumer, Consumer, NoOffsetForPartitionError
from kwire.client.errors import IllegalStateError
from kwire.client.types import TopicPartition

from .test_consumer_records import MOCK_PARTITIONS, consume_until, produce, quick, run

T0 = 1_700_000_000_000  # record i of a partition has timestamp T0 + 1000 * i


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "kwire-data", default_partitions=MOCK_PARTITIONS) as b:
        yield b


def fill(bootstrap: str, topic: str, n: int, partitions=(0,)) -> None:
    produce(bootstrap, topic, [(b"k%d" % i, b"v%d" % i, [], p, T0 + 1000 * i) for p in partitions for i in range(n)])


def test_auto_offset_reset_earliest_and_latest(broker):
    fill(broker.bootstrap, "reset", 10)
    tp = TopicPartition("reset", 0)

    async def main():
        async with AsyncConsumer(quick(broker.bootstrap, group_id="g-earliest", auto_offset_reset="earliest")) as c:
            c.assign([tp])
            earliest = await consume_until(c, 10)
        async with AsyncConsumer(quick(broker.bootstrap, group_id="g-latest", auto_offset_reset="latest")) as c:
            c.assign([tp])
            at_start = await c.position(tp)
            nothing = await c.getmany(timeout_ms=200)
            await asyncio.to_thread(fill, broker.bootstrap, "reset", 3)
            latest = await consume_until(c, 3)
        return earliest, at_start, nothing, latest

    earliest, at_start, nothing, latest = run(main())
    assert [r.offset for r in earliest] == list(range(10))
    assert at_start == 10 and nothing == []
    assert [(r.offset, r.value) for r in latest] == [(10, b"v0"), (11, b"v1"), (12, b"v2")]


def test_auto_offset_reset_none_names_the_partition_until_the_application_seeks(broker):
    fill(broker.bootstrap, "no-reset", 5, partitions=(0, 1))
    tp0, tp1 = TopicPartition("no-reset", 0), TopicPartition("no-reset", 1)

    async def main():
        async with AsyncConsumer(quick(broker.bootstrap, group_id="g-none", auto_offset_reset="none")) as c:
            c.assign([tp0, tp1])
            errors = []
            for _ in range(2):  # raised again at every poll, not once
                with pytest.raises(NoOffsetForPartitionError) as info:
                    await c.getmany(timeout_ms=2000)
                errors.append(info.value)
            c.seek(tp0, 3)
            c.seek(tp1, 0)
            got = await consume_until(c, 7)
            # Out of range with reset none: the error names the partition and the offset.
            c.seek(tp0, 1000)
            with pytest.raises(NoOffsetForPartitionError) as out_of_range:
                await consume_until(c, 1, timeout=5)
            return errors, got, out_of_range.value

    errors, got, out_of_range = run(main())
    for error in errors:
        assert error.partitions == [TopicPartition("no-reset", 0), TopicPartition("no-reset", 1)]
        assert "no-reset-0" in str(error) and "no committed offset" in str(error)
    assert sorted((r.partition, r.offset) for r in got) == [(0, 3), (0, 4)] + [(1, i) for i in range(5)]
    assert out_of_range.partitions == [TopicPartition("no-reset", 0)]
    assert "no-reset-0" in str(out_of_range) and "fetch offset 1000 is out of range" in str(out_of_range)


def test_out_of_range_fetch_resets_per_auto_offset_reset(broker):
    fill(broker.bootstrap, "oor", 4)
    tp = TopicPartition("oor", 0)

    async def main():
        async with AsyncConsumer(quick(broker.bootstrap, auto_offset_reset="earliest")) as c:
            c.assign([tp])
            c.seek(tp, 50)
            return await consume_until(c, 4)

    assert [r.offset for r in run(main())] == [0, 1, 2, 3]


def test_seek_pause_resume_and_seek_to_timestamp(broker):
    fill(broker.bootstrap, "moves", 10, partitions=(0, 1))
    tp0, tp1 = TopicPartition("moves", 0), TopicPartition("moves", 1)

    async def main():
        out = {}
        async with AsyncConsumer(quick(broker.bootstrap, auto_offset_reset="earliest")) as c:
            c.assign([tp0, tp1])
            c.seek(tp0, 5)
            c.pause(tp1)
            out["paused"] = c.paused()
            out["while_paused"] = await consume_until(c, 5)
            out["nothing_more"] = await c.getmany(timeout_ms=300)
            c.resume([tp1])
            out["resumed"] = await consume_until(c, 10)
            await c.seek_to_timestamp(T0 + 7000, [tp0])     # the record stamped T0 + 7 s is offset 7
            await c.seek_to_timestamp(T0 + 7500, tp1)       # first at or after: offset 8
            out["by_time"] = await consume_until(c, 5)
            out["times"] = await c.offsets_for_times({tp0: T0 + 3000, tp1: T0 + 99_000})
            c.seek_to_beginning([tp0])
            c.seek_to_end([tp1])
            out["positions"] = (await c.position(tp0), await c.position(tp1))
            out["from_start"] = await consume_until(c, 10)
            out["highwater"] = c.highwater(tp0)
            out["bounds"] = (await c.beginning_offsets([tp0]), await c.end_offsets([tp0, tp1]))
            with pytest.raises(IllegalStateError, match="moves-7 is not assigned"):
                c.seek(TopicPartition("moves", 7), 0)
        return out

    out = run(main())
    assert out["paused"] == {tp1}
    assert [(r.partition, r.offset) for r in out["while_paused"]] == [(0, o) for o in range(5, 10)]
    assert out["nothing_more"] == []
    assert [(r.partition, r.offset) for r in out["resumed"]] == [(1, o) for o in range(10)]
    assert sorted((r.partition, r.offset) for r in out["by_time"]) == [(0, 7), (0, 8), (0, 9), (1, 8), (1, 9)]
    assert out["times"][tp0].offset == 3 and out["times"][tp0].timestamp == T0 + 3000
    assert out["times"][tp1] is None
    assert out["positions"] == (0, 10)
    assert [(r.partition, r.offset) for r in out["from_start"]] == [(0, o) for o in range(10)]
    assert out["highwater"] == 10
    assert out["bounds"] == ({tp0: 0}, {tp0: 10, tp1: 10})


def test_sync_consumer_polls_commits_and_closes(broker):
    fill(broker.bootstrap, "sync", 20, partitions=(0, 1))
    tp0, tp1 = TopicPartition("sync", 0), TopicPartition("sync", 1)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": "g-sync", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "fetch.max.wait.ms": 100}
    with Consumer(conf) as c:
        c.assign([tp0, tp1])
        got = []
        for _ in range(50):
            if len(got) >= 40:
                break
            batch = c.poll(timeout=0.5, max_records=15)
            assert isinstance(batch, list) and len(batch) <= 15
            got += batch
        assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in (0, 1) for o in range(20)]
        c.commit({tp0: 12})
        c.commit()  # the positions: 20 and 20
        results = []
        future = c.commit_async({tp1: 20}, callback=lambda offsets, error: results.append((offsets, error)))
        future.result(10)
        assert c.committed([tp0, tp1]) == {tp0: (20, "", 0), tp1: (20, "", -1)}  # the last commit of tp1 named no epoch
        assert c.position(tp0) == 20 and c.assignment() == {tp0, tp1}
        c.poll(0)  # commit callbacks run in this thread, at the next call
        assert results == [({tp1: (20, "", -1)}, None)]
    assert c.closed
    with pytest.raises(IllegalStateError, match="closed"):
        c.poll(0)


def test_a_partition_of_a_topic_created_later_is_read_once_it_exists(broker):
    tp = TopicPartition("later", 2)

    async def main():
        async with AsyncConsumer(quick(broker.bootstrap, auto_offset_reset="earliest",
                                       allow_auto_create_topics=False)) as c:
            c.assign([tp])
            before = await c.getmany(timeout_ms=300)           # unknown topic: metadata refreshed, retried
            await asyncio.to_thread(fill, broker.bootstrap, "later", 3, (2,))
            return before, await consume_until(c, 3)

    before, after = run(main())
    assert before == [] and [(r.partition, r.offset) for r in after] == [(2, 0), (2, 1), (2, 2)]


def test_async_for_yields_records_one_by_one_and_ends_at_close(broker):
    fill(broker.bootstrap, "iterate", 6)
    tp = TopicPartition("iterate", 0)

    async def main():
        c = AsyncConsumer(quick(broker.bootstrap, auto_offset_reset="earliest"))
        c.assign([tp])
        seen = []
        async for record in c:
            seen.append(record.offset)
            if len(seen) == 6:
                await c.close()  # the loop ends (StopAsyncIteration) once the consumer is closed
        return seen

    assert run(main()) == [0, 1, 2, 3, 4, 5]


def test_partitions_for_never_creates_the_topic(broker):
    from kwire.protocol.errors import UnknownTopicOrPartitionError

    fill(broker.bootstrap, "known", 1)

    async def main():
        async with AsyncConsumer(quick(broker.bootstrap)) as consumer:
            known = await consumer.partitions_for("known")
            with pytest.raises(UnknownTopicOrPartitionError, match="'ghost'"):
                await consumer.partitions_for("ghost")
            return known, await consumer.partitions_for("known")

    known, again = run(main())
    assert known == again == list(range(MOCK_PARTITIONS))
    with Consumer(quick(broker.bootstrap)) as consumer:
        assert consumer.partitions_for("known") == known
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.partitions_for("ghost")  # still unknown: asking did not create it
