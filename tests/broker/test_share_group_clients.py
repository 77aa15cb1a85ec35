"""KIP-932 share groups with the real client that has them: confluent-kafka 2.16's ShareConsumer.

Each test starts its own broker.  Lock expiry is reached by moving the broker's share-group clock
forward (``ShareManager.now_ms``), never by sleeping through a lock duration.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from kwire.broker import EmbeddedBroker
from kwire.broker.handlers.share_groups import share_of
from kwire.client.connection import BrokerConnection
from kwire.protocol import messages

LOCK_MS = 30_000  # Kafka's default share.record.lock.duration.ms


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as b:
        yield b


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(15)


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """Group configs through IncrementalAlterConfigs, as an operator sets them."""
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                               incremental_configs=entries)]).values():
        fut.result(15)


def produce(bootstrap: str, topic: str, n: int, *, per_batch: int = 10, partition: int = 0) -> None:
    """n records "v<i>" in batches of ``per_batch`` (a share partition acquires whole batches)."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=partition)
        if (i + 1) % per_batch == 0:
            assert p.flush(15) == 0
    assert p.flush(15) == 0


def share_consumer(bootstrap: str, group: str, topics: list[str], **conf) -> confluent_kafka.ShareConsumer:
    c = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                       **{k.replace("_", "."): v for k, v in conf.items()}})
    c.subscribe(topics)
    return c


def poll_all(consumers, until, timeout: float = 30.0, on_message=None) -> dict[int, list]:
    """Poll each consumer in turn until ``until(got)`` or ``timeout``; consumer index -> messages."""
    got: dict[int, list] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(got):
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                got[i].append(m)
                if on_message is not None:
                    on_message(c, m)
    return got


def shift_clock(broker: EmbeddedBroker, ms: int) -> None:
    """Move the broker's share-group clock ``ms`` forward (locks and sessions expire by it)."""
    mgr = share_of(broker.broker.state)
    before = mgr.now_ms
    mgr.now_ms = lambda: before() + ms


def start_offset(broker: EmbeddedBroker, group: str, topic: str, p: int = 0) -> int:
    """The share-partition start offset (-1 before the group is first assigned the partition)."""
    sp = share_of(broker.broker.state).partitions.get((group, topic, p))
    return -1 if sp is None else sp.start_offset


def described_start_offsets(broker: EmbeddedBroker, group: str) -> dict[tuple[str, int], int]:
    """DescribeShareGroupOffsets over the wire (kwire's connection): (topic, partition) -> start offset."""
    R = messages.DescribeShareGroupOffsetsRequest

    async def ask():
        conn = await BrokerConnection.open("127.0.0.1", broker.port)
        try:
            return await conn.send(R(groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]))
        finally:
            conn.close()

    [g] = asyncio.run(ask()).groups
    assert g.error_code == 0, g.error_message
    return {(t.topic_name, p.partition_index): p.start_offset for t in g.topics for p in t.partitions}


def total(got) -> int:
    return sum(len(v) for v in got.values())


def test_every_record_is_accepted_exactly_once_across_members(broker):
    bs, topic, group = broker.bootstrap, "orders", "workers"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, 300)
    consumers = [share_consumer(bs, group, [topic], max_poll_records=10) for _ in range(3)]
    try:
        got = poll_all(consumers, lambda g: total(g) >= 300)
        offsets = [m.offset() for ms in got.values() for m in ms]
        assert sorted(offsets) == list(range(300))  # each record once, none lost
        assert sum(1 for ms in got.values() if ms) >= 2  # members shared the one partition
        assert all(m.delivery_count() == 1 for ms in got.values() for m in ms)
        # Implicit acknowledgement: the next poll accepts what the last one returned.
        more = poll_all(consumers, lambda g: start_offset(broker, group, topic) == 300, timeout=15)
        assert total(more) == 0
        assert start_offset(broker, group, topic) == 300
        assert described_start_offsets(broker, group) == {(topic, 0): 300}
    finally:
        for c in consumers:
            c.close()


_DYING_MEMBER = textwrap.dedent("""
    import sys, time, confluent_kafka
    c = confluent_kafka.ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([sys.argv[3]])
    got = []
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        got = c.poll(0.5)
    print(" ".join(str(m.offset()) for m in got), flush=True)
    time.sleep(600)  # never acknowledges: killed here
""")


def _member_holding_records(bs: str, group: str, topic: str) -> tuple[subprocess.Popen, list[int]]:
    """A share consumer in another process that acquired records and will never acknowledge them."""
    proc = subprocess.Popen([sys.executable, "-c", _DYING_MEMBER, bs, group, topic], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
    except BaseException:
        os.kill(proc.pid, signal.SIGKILL)
        raise
    return proc, sorted(int(x) for x in line.split())


def test_a_killed_members_records_are_redelivered_at_once(broker):
    """Its connection closes: as Kafka (KAFKA-19015) the broker ends its share session and
    releases what it held, without waiting for the acquisition locks."""
    bs, topic, group = broker.bootstrap, "jobs", "crashy"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, 20, per_batch=20)
    proc, held = _member_holding_records(bs, group, topic)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert held == list(range(20))
    survivor = share_consumer(bs, group, [topic])
    try:
        # Well within the 30 s lock: only the release on disconnect can hand them out this soon.
        got = poll_all([survivor], lambda g: total(g) >= 20, timeout=10)
        assert sorted(m.offset() for m in got[0]) == held
        assert all(m.delivery_count() == 2 for m in got[0])
    finally:
        survivor.close()


def test_a_hung_members_records_are_redelivered_after_the_lock_duration(broker):
    """A member that stops (SIGSTOP) keeps its connection: its records come back when their
    acquisition locks run out (share.record.lock.duration.ms), not before."""
    bs, topic, group = broker.bootstrap, "jobs", "hung"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, 20, per_batch=20)
    proc, held = _member_holding_records(bs, group, topic)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        assert held == list(range(20))
        survivor = share_consumer(bs, group, [topic])
        try:
            early = poll_all([survivor], lambda g: False, timeout=2)
            assert total(early) == 0  # within the lock duration nothing is handed out again
            shift_clock(broker, LOCK_MS + 1)
            got = poll_all([survivor], lambda g: total(g) >= 20)
            assert sorted(m.offset() for m in got[0]) == held
            assert all(m.delivery_count() == 2 for m in got[0])
        finally:
            survivor.close()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_rejected_records_are_never_redelivered_and_released_ones_are(broker):
    bs, topic, group = broker.bootstrap, "mixed", "picky"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, 10, per_batch=10)

    def judge(c, m):  # even offsets rejected, odd ones released the first time
        if m.offset() % 2 == 0:
            c.acknowledge(m, confluent_kafka.AcknowledgeType.REJECT)
        elif m.delivery_count() == 1:
            c.acknowledge(m, confluent_kafka.AcknowledgeType.RELEASE)
        else:
            c.acknowledge(m, confluent_kafka.AcknowledgeType.ACCEPT)

    c = share_consumer(bs, group, [topic], share_acknowledgement_mode="explicit")
    try:
        got = poll_all([c], lambda g: total(g) >= 15, on_message=judge)
        seen = [(m.offset(), m.delivery_count()) for m in got[0]]
        assert sorted(o for o, n in seen if n == 1) == list(range(10))
        assert sorted(o for o, n in seen if n == 2) == [1, 3, 5, 7, 9]  # released ones only
        c.commit_sync()
        poll_all([c], lambda g: start_offset(broker, group, topic) == 10, timeout=15)
        assert start_offset(broker, group, topic) == 10
    finally:
        c.close()


def test_the_delivery_count_limit_archives_a_poison_record(broker):
    bs, topic, group = broker.bootstrap, "poison", "retries"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest", share_delivery_count_limit="3")
    produce(bs, topic, 1, per_batch=1)
    c = share_consumer(bs, group, [topic], share_acknowledgement_mode="explicit")
    try:
        got = poll_all([c], lambda g: False, timeout=8,
                       on_message=lambda c, m: c.acknowledge(m, confluent_kafka.AcknowledgeType.RELEASE))
        assert [m.delivery_count() for m in got[0]] == [1, 2, 3]  # then archived, never again
        assert start_offset(broker, group, topic) == 1
    finally:
        c.close()


def test_share_state_survives_a_broker_restart(tmp_path):
    data = tmp_path / "data"
    topic, group = "durable", "resumers"
    with EmbeddedBroker(data, default_partitions=1) as b:
        create_topic(b.bootstrap, topic)
        set_group_configs(b.bootstrap, group, share_auto_offset_reset="earliest")
        produce(b.bootstrap, topic, 20, per_batch=10)

        def accept_first_ten(c, m):
            c.acknowledge(m, confluent_kafka.AcknowledgeType.ACCEPT if m.offset() < 10
                          else confluent_kafka.AcknowledgeType.RELEASE)

        c = share_consumer(b.bootstrap, group, [topic], share_acknowledgement_mode="explicit", max_poll_records=10)
        try:
            poll_all([c], lambda g: start_offset(b, group, topic) >= 10, on_message=accept_first_ten)
            c.commit_sync()
        finally:
            c.close()
        assert start_offset(b, group, topic) >= 10
    with EmbeddedBroker(data, default_partitions=1) as b:
        c = share_consumer(b.bootstrap, group, [topic])
        try:
            got = poll_all([c], lambda g: total(g) >= 10, timeout=30)
            extra = poll_all([c], lambda g: False, timeout=2)
        finally:
            c.close()
        assert sorted(m.offset() for m in got[0]) == list(range(10, 20)) and total(extra) == 0
        assert all(m.delivery_count() >= 2 for m in got[0])  # the released ones kept their count
