"""Sans-IO: a Fetch naming only caught-up partitions waits fetch.max.wait.ms at the broker and
holds the node's one fetch slot, so it is not sent while another partition of that node has a
full prefetch buffer (it would starve the application as that buffer drains); it goes with
the next fetch that partition needs."""

from __future__ import annotations

import asyncio

from kwire.client.consumer import AsyncConsumer
from kwire.client.fetcher import Fetcher, _Chunk, _PartitionBuffer
from kwire.client.subscription import SubscriptionState
from kwire.client.types import TopicPartition


class _Metadata:
    def leader(self, topic, partition):
        return 1


class _Cluster:
    metadata = _Metadata()


def _fetcher(positions: dict[int, int], high_watermarks: dict[int, int]):
    config = AsyncConsumer({"bootstrap_servers": ["127.0.0.1:1"]}).config
    sub = SubscriptionState()
    tps = [TopicPartition("t", p) for p in positions]
    sub.assign(tps)
    for tp in tps:
        sub.state(tp).seek(positions[tp.partition])
        sub.state(tp).high_watermark = high_watermarks[tp.partition]
    fetcher = Fetcher(_Cluster(), config, sub, lambda: None)
    sent: list[list[tuple[int, int]]] = []

    async def fake_fetch(node, parts):
        sent.append(sorted((state.tp.partition, offset) for state, offset in parts))
        fetcher._fetching.difference_update(state.tp for state, _ in parts)
        del fetcher._fetching_nodes[node]

    fetcher._fetch = fake_fetch
    return fetcher, sub, sent


def _fill(fetcher: Fetcher, sub: SubscriptionState, partition: int, chunks: int, fetch_offset: int) -> None:
    tp = TopicPartition("t", partition)
    buf = fetcher._buffers[tp] = _PartitionBuffer(tp, sub.state(tp).seek_epoch, fetch_offset)
    for _ in range(chunks):
        buf.chunks.append(_Chunk([], [], 0))


def test_caught_up_partitions_wait_for_the_fetch_a_busy_partition_needs():
    async def main():
        # Partition 0 has a full buffer (and data beyond it); partition 1 is at its high watermark.
        fetcher, sub, sent = _fetcher({0: 0, 1: 50}, {0: 1000, 1: 50})
        _fill(fetcher, sub, 0, 2, fetch_offset=200)
        fetcher.maybe_fetch()
        await asyncio.sleep(0)
        assert sent == []
        fetcher._buffers[TopicPartition("t", 0)].chunks.popleft()  # the application drained a chunk
        fetcher.maybe_fetch()
        await asyncio.sleep(0)
        assert sent == [[(0, 200), (1, 50)]]

    asyncio.run(main())


def test_caught_up_partitions_are_fetched_when_nothing_else_waits():
    async def main():
        fetcher, sub, sent = _fetcher({0: 10, 1: 50}, {0: 10, 1: 50})  # both at their end, no buffers
        fetcher.maybe_fetch()
        await asyncio.sleep(0)
        assert sent == [[(0, 10), (1, 50)]]
        # A partition with data to fetch makes the broker answer at once: caught-up ones go along.
        fetcher, sub, sent = _fetcher({0: 0, 1: 50}, {0: 1000, 1: 50})
        _fill(fetcher, sub, 0, 1, fetch_offset=200)
        fetcher.maybe_fetch()
        await asyncio.sleep(0)
        assert sent == [[(0, 200), (1, 50)]]

    asyncio.run(main())
