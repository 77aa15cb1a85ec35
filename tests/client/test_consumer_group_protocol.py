"""kwire's consumer with ``group.protocol=consumer`` (KIP-848) against kwire's broker, next to a
confluent-kafka member of the same group: the broker assigns, partitions move revoke-before-assign
(checked from the listeners, no partition owned twice), every record is read once, a member that
leaves gives its partitions to the others, and the group's commits hold after a restart."""

from __future__ import annotations

import threading
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker
from kwire.client.config import ConsumerConfig
from kwire.client.consumer import Consumer

TOPIC = "kip848"
PARTITIONS = 4
FAST = {"group_consumer_heartbeat_interval_ms": 300, "group_consumer_session_timeout_ms": 6000}


class Owners:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.overlaps: list[str] = []

    def take(self, name: str, parts) -> None:
        with self.lock:
            for p in parts:
                if self.owner.get(p, name) != name:
                    self.overlaps.append(f"{name} got {p} owned by {self.owner[p]}")
                self.owner[p] = name

    def drop(self, name: str, parts) -> None:
        with self.lock:
            for p in parts:
                if self.owner.get(p) == name:
                    del self.owner[p]


class Listener:
    """Commits what was read before giving partitions up, so the next owner starts after it."""

    def __init__(self, name: str, owners: Owners):
        self.name, self.owners = name, owners
        self.consumer: Consumer | None = None
        self.read: dict[int, int] = {}

    def on_partitions_assigned(self, partitions) -> None:
        self.owners.take(self.name, [tp.partition for tp in partitions])

    def on_partitions_revoked(self, partitions) -> None:
        done = {tp: self.read[tp.partition] for tp in partitions if tp.partition in self.read}
        if done:
            self.consumer.commit(done)
        self.owners.drop(self.name, [tp.partition for tp in partitions])


def _wait(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_the_setting_is_known():
    assert ConsumerConfig.from_settings({"group.id": "g", "group.protocol": "consumer",
                                         "group.remote.assignor": "range"}).group_protocol == "consumer"


def test_kwire_and_confluent_members_share_a_kip848_group(tmp_path):
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(400):
            p.produce(TOPIC, key=b"%d" % i, value=b"%d" % i)
        assert p.flush(30) == 0
        owners = Owners()
        seen: list[tuple[int, int]] = []
        conf = {"bootstrap.servers": broker.bootstrap, "group.id": "mixed848", "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        members = []
        for name in ("k1", "k2"):
            listener = Listener(name, owners)
            c = Consumer(conf)
            listener.consumer = c
            c.subscribe([TOPIC], listener=listener)
            members.append((c, listener))

        stop = threading.Event()
        ck_owned: set[int] = set()

        def confluent_member() -> None:
            ck = confluent_kafka.Consumer({**conf, "group.protocol": "consumer"})
            ck.subscribe([TOPIC], on_assign=lambda c, ps: (owners.take("ck", [x.partition for x in ps]),
                                                           ck_owned.update(x.partition for x in ps)),
                         on_revoke=lambda c, ps: owners.drop("ck", [x.partition for x in ps]))
            while not stop.is_set():
                m = ck.poll(0.1)
                if m is not None and not m.error():
                    seen.append((m.partition(), m.offset()))
                    ck.commit(message=m, asynchronous=False)
            ck.close()

        thread = threading.Thread(target=confluent_member)
        thread.start()
        try:
            def poll_all() -> bool:
                for c, listener in members:
                    for r in c.poll(0.05):
                        seen.append((r.partition, r.offset))
                        listener.read[r.partition] = r.offset + 1
                with owners.lock:
                    return len(owners.owner) == PARTITIONS and set(owners.owner.values()) == {"k1", "k2", "ck"}

            assert _wait(poll_all), owners.owner
            group = broker.state.consumer_groups.group("mixed848")
            assert len(group.members) == 3 and all(m.classic is None for m in group)
            # k1 leaves: its partitions go to the others once it has committed and let go.
            c1, l1 = members.pop(0)
            c1.close()
            with owners.lock:
                for p in [p for p, n in owners.owner.items() if n == "k1"]:
                    del owners.owner[p]  # close() revoked them (the listener may not run on close)

            def settled() -> bool:
                poll_all()
                with owners.lock:
                    return len(owners.owner) == PARTITIONS and set(owners.owner.values()) == {"k2", "ck"}

            assert _wait(settled), owners.owner
            assert _wait(lambda: (poll_all(), len(set(seen)) >= 400)[1])
        finally:
            stop.set()
            thread.join(30)
            for c, _ in members:
                c.close()
        assert not owners.overlaps, owners.overlaps
        assert len(seen) == len(set(seen)) == 400  # each record once: leavers commit before letting go

    # The group's commits survive a restart: a new kwire member of the group starts after them.
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(400, 450):
            p.produce(TOPIC, key=b"%d" % i, value=b"%d" % i)
        assert p.flush(30) == 0
        after = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "mixed848", "group.protocol": "consumer",
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
        after.subscribe([TOPIC])
        values: list[bytes] = []
        try:
            assert _wait(lambda: (values.extend(r.value for r in after.poll(0.1)), len(values) >= 50)[1])
        finally:
            after.close()
        assert sorted(values) == sorted(b"%d" % i for i in range(400, 450))



def test_a_commit_refused_for_a_stale_member_epoch_is_sent_again_with_the_new_one(tmp_path):
    import asyncio

    from kwire.client.consumer import AsyncConsumer
    from kwire.protocol.errors import StaleMemberEpochError

    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)

        async def scenario() -> None:
            c = AsyncConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "stale", "group.protocol": "consumer",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False}, topics=[TOPIC])
            try:
                deadline = time.monotonic() + 20
                while not c.assignment() and time.monotonic() < deadline:
                    await c.getmany(timeout_ms=100)
                m = c._membership
                epoch = m.generation_id
                assert epoch > 0
                tp = next(iter(c.assignment()))
                m._heartbeats.cancel()  # no heartbeat may see the made-up epoch (it would be fenced)
                m.generation_id = epoch + 5  # as if an answer with a newer epoch were still on its way...
                asyncio.get_running_loop().call_later(0.01, setattr, m, "generation_id", epoch)  # ...it arrives
                await c.commit({tp: 7})
                assert (await c.committed([tp]))[tp].offset == 7
                m.generation_id = epoch + 5  # and when it never does, the error reaches the caller
                with pytest.raises(StaleMemberEpochError):
                    await c.commit({tp: 8})
                m.generation_id = epoch
            finally:
                await c.close()

        asyncio.run(scenario())
