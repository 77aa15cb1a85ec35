"""kill -9 of ``kwire broker`` in the middle of a kwire produce and consume run.

A kwire producer (idempotent, acks=all) writes while a kwire consumer in a group reads and
commits what it has read; the broker (``--fsync always``) is killed twice and restarted on the
same port and data dir.  Afterwards the log holds every record exactly once, and the consumer
never went back behind an offset it had committed: after each restart it resumed from there.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from kwire.broker.storage import LogManager
from kwire.client import AsyncConsumer, AsyncProducer, RebalanceListener
from kwire.protocol.records import iter_batches
from tests.broker.test_crash import _free_port, _start

RECORDS = 3000
KILLS = 2
FAST = {"retry.backoff.ms": 20, "retry.backoff.max.ms": 200, "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200, "request.timeout.ms": 3000}


class Assignments(RebalanceListener):
    def __init__(self) -> None:
        self.count = 0

    def on_partitions_assigned(self, assigned) -> None:
        self.count += 1


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_producer_and_consumer_ride_out_kill_9(tmp_path):
    data, port = tmp_path / "data", _free_port()
    bootstrap = f"127.0.0.1:{port}"
    procs = [_start(data, port)]
    resumed_at: list[dict[int, int]] = []   # at each kill: committed offsets, then first reads after it
    committed: dict[int, int] = {}          # the consumer's positions at its last successful commit
    assignments = Assignments()

    async def kill_and_restart():
        # The consumer's commits so far, noted by the killer itself: a consumer loop that noticed
        # restarts on its own missed one whenever a single poll and commit spanned both kills.
        resumed_at.append({"committed": dict(committed), "first": {}})
        procs[-1].send_signal(signal.SIGKILL)
        await asyncio.to_thread(procs[-1].wait, 10)
        await asyncio.sleep(0.2)
        procs.append(await asyncio.to_thread(_start, data, port))

    async def produce(producer):
        futures = []
        for i in range(RECORDS):
            futures.append(await producer.send("kill", b"v-%05d" % i, key=b"k%d" % (i % 5)))
            if i % 100 == 99:
                await asyncio.sleep(0.12)  # a steady stream over ~4 s, so that the kills land mid-run
        return await asyncio.gather(*futures)

    async def consume(consumer, seen: dict[tuple[int, int], bytes], committed: dict[int, int]):
        while len(set(seen.values())) < RECORDS:
            records = await consumer.getmany(timeout_ms=200)
            for r in records:
                if resumed_at and r.partition not in resumed_at[-1]["first"]:
                    resumed_at[-1]["first"][r.partition] = r.offset
                seen[(r.partition, r.offset)] = r.value
            if records:
                try:
                    await consumer.commit()
                except Exception:  # noqa: BLE001 - the broker may be down; the next poll commits again
                    continue
                for tp in consumer.assignment():
                    committed[tp.partition] = await consumer.position(tp)

    async def main():
        seen: dict[tuple[int, int], bytes] = {}
        async with AsyncProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                                  "delivery.timeout.ms": 120_000, **FAST}) as producer, \
                AsyncConsumer({"bootstrap.servers": bootstrap, "group.id": "kill-group",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **FAST},
                              topics=["kill"], listener=assignments) as consumer:
            producing = asyncio.ensure_future(produce(producer))
            consuming = asyncio.ensure_future(consume(consumer, seen, committed))
            for _ in range(KILLS):
                await asyncio.sleep(1.0)
                await kill_and_restart()
            delivered = await asyncio.wait_for(producing, 150)
            await asyncio.wait_for(consuming, 150)
            return delivered, seen

    try:
        delivered, seen = asyncio.run(main())
    finally:
        procs[-1].send_signal(signal.SIGTERM)
        procs[-1].wait(60)
    assert all(p.returncode is not None for p in procs)

    # The producer: every record acknowledged once, at the offset the log holds it.
    stored = {}
    with LogManager(data) as logs:
        for partition in range(2):
            log = logs.get("kill", partition)
            raw = b"".join(s.read() for s in log.read(log.log_start_offset, 1 << 31))
            for batch in iter_batches(raw):
                batch.validate()
                for record in batch:
                    assert record.value not in stored, f"{record.value!r} stored twice"
                    stored[record.value] = (partition, record.offset)
    assert sorted(stored) == [b"v-%05d" % i for i in range(RECORDS)]
    assert {stored[b"v-%05d" % i] for i in range(RECORDS)} == {(md.partition, md.offset) for md in delivered}

    # The consumer: every record read, and after each restart it went on from its commits.
    assert set(seen.values()) == set(stored)
    assert len(resumed_at) == KILLS
    assert any(resume["first"] for resume in resumed_at), "no read after a kill was noted"
    # The restarted coordinator loads the stored generation back (as Kafka does), so the member may
    # carry on without rejoining; it rejoins when a kill lost its newest generation.
    assert assignments.count >= 1
    for resume in resumed_at:
        for partition, first in resume["first"].items():
            assert first >= resume["committed"].get(partition, 0), (partition, first, resume)
