"""kwire's share consumer (KIP-932) against kwire's broker, and side by side with confluent-kafka's
ShareConsumer in one share group."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.handlers.share_groups import share_of
from kwire.client.errors import IllegalStateError
from kwire.client.share_consumer import AcknowledgeType, AsyncShareConsumer, ShareConsumer, ShareConsumerConfig
from kwire.settings import ConfigError

from ..broker.test_share_group_clients import create_topic, produce, set_group_configs


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as b:
        yield b


def start_offsets(broker, group):
    return {k[1:]: sp.start_offset for k, sp in share_of(broker.broker.state).partitions.items() if k[0] == group}


def test_config_needs_a_group():
    with pytest.raises(ConfigError, match="group.id"):
        ShareConsumerConfig.from_settings({"bootstrap.servers": "x:1"})
    with pytest.raises(ConfigError):
        ShareConsumerConfig.from_settings({"group.id": "g", "share.acknowledgement.mode": "sometimes"})


def test_implicit_mode_accepts_each_poll_at_the_next_and_at_close(broker):
    bs, topic, group = broker.bootstrap, "work", "implicit"
    create_topic(bs, topic, 2)
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    for p in (0, 1):
        produce(bs, topic, 50, partition=p)
    with ShareConsumer({"bootstrap.servers": bs, "group.id": group}) as c:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            got += c.poll(0.5)
        assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in (0, 1) for o in range(50)]
        assert c.assignment() == {topic: (0, 1)}
        assert all(r.delivery_count == 1 and r.value == b"v%d" % r.offset for r in got)
    assert start_offsets(broker, group) == {(topic, 0): 50, (topic, 1): 50}  # accepted by close


def test_explicit_mode_reject_release_accept(broker):
    bs, topic, group = broker.bootstrap, "picky", "explicit"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, 10)
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe([topic])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 15 and time.monotonic() < deadline:
            for r in c.poll(0.5):
                seen.append((r.offset, r.delivery_count))
                if r.offset % 2 == 0:
                    c.acknowledge(r, AcknowledgeType.REJECT)
                elif r.delivery_count == 1:
                    c.acknowledge(r, AcknowledgeType.RELEASE)
                else:
                    c.acknowledge(r, AcknowledgeType.ACCEPT)
                with pytest.raises(IllegalStateError):
                    c.acknowledge(r)  # once only
        assert sorted(o for o, n in seen if n == 1) == list(range(10))
        assert sorted(o for o, n in seen if n == 2) == [1, 3, 5, 7, 9]
        assert all(err is None for err in c.commit_sync().values())
        assert start_offsets(broker, group) == {(topic, 0): 10}
        produce(bs, topic, 1)
        deadline = time.monotonic() + 30
        pending = []
        while not pending and time.monotonic() < deadline:
            pending = c.poll(0.5)
        with pytest.raises(IllegalStateError, match="acknowledge every record"):
            c.poll(0)
    finally:
        c.close()


def test_async_kwire_and_confluent_members_share_one_group(broker):
    bs, topic, group = broker.bootstrap, "mixed", "mixed-members"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, 200)
    theirs = confluent_kafka.ShareConsumer({"bootstrap.servers": bs, "group.id": group, "max.poll.records": 10})
    theirs.subscribe([topic])

    async def run():
        got_ours, got_theirs = [], []
        async with AsyncShareConsumer({"bootstrap.servers": bs, "group.id": group, "max.poll.records": 10}) as ours:
            ours.subscribe([topic])
            deadline = time.monotonic() + 30
            while len(got_ours) + len(got_theirs) < 200 and time.monotonic() < deadline:
                got_ours += [r.offset for r in await ours.poll(0.2)]
                got_theirs += [m.offset() for m in await asyncio.to_thread(theirs.poll, 0.2)]
        return got_ours, got_theirs

    try:
        ours, theirs_got = asyncio.run(run())
    finally:
        theirs.close()
    assert sorted(ours + theirs_got) == list(range(200))
    assert ours and theirs_got  # both members had records of the one partition
