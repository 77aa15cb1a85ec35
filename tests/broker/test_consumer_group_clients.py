"""KIP-848 consumer groups judged by confluent-kafka (librdkafka) with ``group.protocol=consumer``:
members join and leave under a produce load, every record is consumed once, no partition is
owned by two members at once (checked from the members' own rebalance callbacks), commits and
the group survive a restart, the admin client lists and describes the group by type, and bad
heartbeats get Kafka's errors while the broker keeps serving."""

from __future__ import annotations

import socket
import threading
import time

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker
from kwire.protocol import encode_request
from kwire.protocol import messages as M
from kwire.protocol.admin import GroupMemberType
from kwire.protocol.errors import (
    FencedMemberEpochError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
)
from kwire.protocol.frames import decode_response

from .conftest import serve

TOPIC = "orders"
PARTITIONS = 6
# Short heartbeats so rebalances take a second, not Kafka's 5 s.
FAST = {"group_consumer_heartbeat_interval_ms": 300, "group_consumer_session_timeout_ms": 6000}


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)


class Ownership:
    """Which member owns each partition, as the members' callbacks say; overlaps are errors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.overlaps: list[str] = []
        self.events: list[tuple[str, str, list[int]]] = []

    def assigned(self, member: str, partitions: list[int]) -> None:
        with self.lock:
            self.events.append((member, "assign", partitions))
            for p in partitions:
                if p in self.owner and self.owner[p] != member:
                    self.overlaps.append(f"{member} got {p} still owned by {self.owner[p]}")
                self.owner[p] = member

    def released(self, member: str, partitions: list[int]) -> None:
        with self.lock:
            self.events.append((member, "revoke", partitions))
            for p in partitions:
                if self.owner.get(p) == member:
                    del self.owner[p]


class Member:
    """A confluent-kafka consumer polling in its own thread; commits what it processed when
    partitions are revoked (so the next owner starts right after) and when it stops."""

    def __init__(self, name: str, bootstrap: str, group: str, ownership: Ownership, consumed: list, **conf):
        self.name = name
        self.ownership = ownership
        self.consumed = consumed
        self.processed: dict[int, int] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                           "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                           "enable.auto.commit": False, "client.id": name, **conf})
        self.c.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _on_assign(self, c, parts) -> None:
        self.ownership.assigned(self.name, [p.partition for p in parts])

    def _commit(self, partitions: list[int]) -> None:
        offsets = [TopicPartition(TOPIC, p, self.processed[p]) for p in partitions if p in self.processed]
        if offsets:
            self.c.commit(offsets=offsets, asynchronous=False)

    def _on_revoke(self, c, parts) -> None:
        revoked = [p.partition for p in parts]
        try:
            self._commit(revoked)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(f"commit on revoke: {exc}")
        for p in revoked:
            self.processed.pop(p, None)
        self.ownership.released(self.name, revoked)

    def _on_lost(self, c, parts) -> None:
        self.errors.append(f"lost {[p.partition for p in parts]}")
        self.ownership.released(self.name, [p.partition for p in parts])

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < deadline:
            msg = self.c.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
                continue
            self.consumed.append((msg.partition(), msg.offset(), self.name))
            self.processed[msg.partition()] = msg.offset() + 1
        self._commit(list(self.processed))
        self.c.close()  # leaves the group: the revoke callback runs first

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


def _produce(bootstrap: str, n: int, start: int, pace_s: float = 0.0) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(TOPIC, key=b"k%d" % i, value=b"v%d" % i)
        if pace_s and i % 50 == 0:
            p.poll(0)
            time.sleep(pace_s)
    assert p.flush(30) == 0


def _wait(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_members_join_and_leave_under_load_each_record_once_no_partition_owned_twice(tmp_path):
    data = tmp_path / "data"
    total = 3000
    with EmbeddedBroker(data, **FAST) as broker:
        _create_topic(broker.bootstrap)
        ownership = Ownership()
        consumed: list[tuple[int, int, str]] = []
        producer = threading.Thread(target=_produce, args=(broker.bootstrap, total, 0, 0.05))
        producer.start()
        members = {"m1": Member("m1", broker.bootstrap, "g", ownership, consumed)}
        assert _wait(lambda: len(consumed) > 200)
        members["m2"] = Member("m2", broker.bootstrap, "g", ownership, consumed)
        assert _wait(lambda: any(e[0] == "m2" and e[1] == "assign" and e[2] for e in ownership.events))
        members["m3"] = Member("m3", broker.bootstrap, "g", ownership, consumed)
        assert _wait(lambda: any(e[0] == "m3" and e[1] == "assign" and e[2] for e in ownership.events))
        with ownership.lock:
            assert sorted(set(ownership.owner.values())) == ["m1", "m2", "m3"], ownership.owner
        members.pop("m1").close()
        assert _wait(lambda: set(ownership.owner.values()) == {"m2", "m3"} and len(ownership.owner) == PARTITIONS)
        producer.join(60)
        members.pop("m2").close()
        assert _wait(lambda: len({(p, o) for p, o, _ in consumed}) >= total, timeout=60)
        last = members.pop("m3")
        last.close()
        errors = [e for m in (last,) for e in m.errors]
        assert not ownership.overlaps, ownership.overlaps
        assert not errors, errors
        seen = [(p, o) for p, o, _ in consumed]
        assert len(seen) == len(set(seen)) == total, (len(seen), len(set(seen)))
        by_member = {name for _, _, name in consumed}
        assert by_member == {"m1", "m2", "m3"}
        epoch_before = broker.state.consumer_groups.group("g").group_epoch

    # The commits and the group come back after a restart: only the new records are read.
    with EmbeddedBroker(data, **FAST) as broker:
        assert _wait(lambda: not broker.state.coordinator.loading())  # __consumer_offsets loads after start
        group = broker.state.consumer_groups.group("g")
        assert group is not None and group.group_epoch == epoch_before and not group.members
        _produce(broker.bootstrap, 100, total)
        ownership = Ownership()
        consumed = []
        member = Member("m4", broker.bootstrap, "g", ownership, consumed)
        assert _wait(lambda: len(consumed) >= 100)
        time.sleep(1)  # anything past the new records would show up now
        member.close()
        assert sorted(o for _, o, _ in consumed) and len(consumed) == 100, len(consumed)
        assert not member.errors
        assert broker.state.consumer_groups.group("g").group_epoch > epoch_before


def test_admin_client_lists_and_describes_consumer_groups_by_type(tmp_path):
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        _create_topic(broker.bootstrap)
        ownership = Ownership()
        consumed: list = []
        a = Member("a", broker.bootstrap, "new-style", ownership, consumed, **{"group.remote.assignor": "range"})
        b = Member("b", broker.bootstrap, "new-style", ownership, consumed, **{"group.remote.assignor": "range"})
        assert _wait(lambda: len(ownership.owner) == PARTITIONS and set(ownership.owner.values()) == {"a", "b"})
        classic = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "old-style",
                                            "auto.offset.reset": "earliest"})
        classic.subscribe([TOPIC])
        assert _wait(lambda: (classic.poll(0.1), classic.assignment())[1] != [])
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = admin.list_consumer_groups(request_timeout=10).result()
        types = {g.group_id: g.type for g in listed.valid}
        assert types == {"new-style": ConsumerGroupType.CONSUMER, "old-style": ConsumerGroupType.CLASSIC}
        only = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}, request_timeout=10).result()
        assert [g.group_id for g in only.valid] == ["new-style"]
        desc = admin.describe_consumer_groups(["new-style"], request_timeout=10)["new-style"].result()
        assert desc.type == ConsumerGroupType.CONSUMER and desc.partition_assignor == "range"
        assigned = sorted(tp.partition for m in desc.members for tp in m.assignment.topic_partitions)
        assert assigned == list(range(PARTITIONS)) and len(desc.members) == 2
        classic.close()
        a.close()
        b.close()


def _heartbeat(state, **fields):
    req = M.ConsumerGroupHeartbeatRequest(**{"group_id": "g", "member_id": "m", "member_epoch": 0,
                                             "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"],
                                             "topic_partitions": [], **fields})
    return serve(state, req, 1)


def test_bad_heartbeats_get_kafkas_errors_and_the_broker_keeps_serving(state):
    state.topics.add("t", 2)
    joined = _heartbeat(state, instance_id="i1")
    assert (joined.error_code, joined.member_epoch, joined.member_id) == (0, 1, "m")
    assert sorted(joined.assignment.topic_partitions[0].partitions) == [0, 1]
    cases = [
        (dict(member_epoch=7, topic_partitions=None, subscribed_topic_names=None, rebalance_timeout_ms=-1),
         FencedMemberEpochError),
        (dict(member_id="ghost", member_epoch=1, topic_partitions=None), UnknownMemberIdError),
        (dict(member_id="m2", instance_id="i1"), UnreleasedInstanceIdError),
        (dict(member_id=""), InvalidRequestError),
        (dict(rebalance_timeout_ms=-1, member_id="m3"), InvalidRequestError),
    ]
    for fields, error in cases:
        resp = _heartbeat(state, **fields)
        assert resp.error_code == error.code, (fields, resp)
        assert resp.error_message
    ok = _heartbeat(state, member_epoch=1, topic_partitions=None, subscribed_topic_names=None, rebalance_timeout_ms=-1)
    assert (ok.error_code, ok.member_epoch) == (0, 1)
    desc = serve(state, M.ConsumerGroupDescribeRequest(group_ids=["g", "nope"], include_authorized_operations=False), 0)
    g, nope = desc.groups
    assert (g.error_code, g.group_state, g.group_epoch, [m.member_id for m in g.members]) == (0, "Stable", 1, ["m"])
    assert nope.error_code != 0


def _describe_consumer_group(bootstrap: str, group_id: str, version: int):
    """One ConsumerGroupDescribe over a plain socket, at ``version``."""
    host, port = bootstrap.split(":")
    request = M.ConsumerGroupDescribeRequest(group_ids=[group_id], include_authorized_operations=False)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(request, version, 1, client_id="describe"))
        size = int.from_bytes(_read_exactly(sock, 4), "big")
        _, response = decode_response(_read_exactly(sock, size), request.API_KEY, version)
    return response.groups[0]


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_group_upgraded_by_a_consumer_protocol_member_and_downgraded_back(tmp_path, strategy):
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        _create_topic(broker.bootstrap)
        _produce(broker.bootstrap, 600, 0)
        ownership = Ownership()
        consumed: list = []
        classic = Member("classic", broker.bootstrap, "mixed", ownership, consumed, **{
            "group.protocol": "classic", "partition.assignment.strategy": strategy,
            "heartbeat.interval.ms": 300, "session.timeout.ms": 6000})
        assert _wait(lambda: len(ownership.owner) == PARTITIONS)
        assert broker.state.coordinator.group("mixed").state.value == "Stable"
        modern = Member("modern", broker.bootstrap, "mixed", ownership, consumed)
        # Upgraded: one consumer group with a classic and a consumer-protocol member sharing the partitions.
        assert _wait(lambda: set(ownership.owner.values()) == {"classic", "modern"} and len(ownership.owner) == PARTITIONS)
        group = broker.state.consumer_groups.group("mixed")
        assert group is not None and sorted(m.classic is not None for m in group) == [False, True]
        # ConsumerGroupDescribe v1 tells the two kinds apart (KIP-1099's MemberType); v0 has no such field.
        described = _describe_consumer_group(broker.bootstrap, "mixed", 1)
        assert sorted((m.client_id, m.member_type) for m in described.members) == [
            ("classic", GroupMemberType.CLASSIC), ("modern", GroupMemberType.CONSUMER)]
        assert _describe_consumer_group(broker.bootstrap, "mixed", 0).error_code == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = admin.list_consumer_groups(request_timeout=10).result()
        assert {g.group_id: g.type for g in listed.valid} == {"mixed": ConsumerGroupType.CONSUMER}
        assert _wait(lambda: len({(p, o) for p, o, _ in consumed}) >= 600)
        modern.close()
        # Downgraded: the classic member has the whole topic again in a classic group.
        assert _wait(lambda: broker.state.consumer_groups.group("mixed") is None
                     and set(ownership.owner.values()) == {"classic"} and len(ownership.owner) == PARTITIONS)
        assert broker.state.coordinator.group("mixed").state.value == "Stable"
        listed = admin.list_consumer_groups(request_timeout=10).result()
        assert {g.group_id: g.type for g in listed.valid} == {"mixed": ConsumerGroupType.CLASSIC}
        _produce(broker.bootstrap, 60, 600)
        assert _wait(lambda: len({(p, o) for p, o, _ in consumed}) >= 660)
        classic.close()
        assert not ownership.overlaps, ownership.overlaps
        assert not classic.errors and not modern.errors, (classic.errors, modern.errors)
        seen = [(p, o) for p, o, _ in consumed]
        assert len(seen) == len(set(seen)) == 660


def test_transactional_offsets_of_a_consumer_protocol_member(tmp_path):
    """Consume-transform-produce: the offsets a transaction sends for a KIP-848 member (its member
    id and epoch in the consumer group metadata) become the group's when the transaction commits."""
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        _create_topic(broker.bootstrap)
        _produce(broker.bootstrap, 30, 0)
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos",
                                      "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        c.subscribe([TOPIC])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m)
        assert len(got) == 30
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-1"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("out", value=b"done")
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        committed = c.committed([TopicPartition(TOPIC, i) for i in range(PARTITIONS)], timeout=10)
        ends = {i: 0 for i in range(PARTITIONS)}
        for m in got:
            ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
        assert {tp.partition: tp.offset for tp in committed} == {i: (o if o else -1001) for i, o in ends.items()}
        c.close()


def test_heartbeat_and_describe_are_authorized_as_kafka(tmp_path):
    from kwire.broker.auth import AclOperation, AclStore, ResourceType
    from kwire.broker.config import load_config
    from kwire.broker.state import BrokerState
    from kwire.protocol.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    from tests.security.test_handler_authz import _acl, _create, call

    AclStore(tmp_path / "data").add([
        _acl("User:reader", AclOperation.READ, ResourceType.GROUP, "g"),
        _acl("User:reader", AclOperation.DESCRIBE, ResourceType.TOPIC, "t"),
    ])
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    try:
        _create(state)
        _create(state, "secret")
        join = M.ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=1000,
                                               subscribed_topic_names=["t"], topic_partitions=[])
        assert call(state, "User:nobody", join, 1).error_code == GroupAuthorizationFailedError.code
        join.subscribed_topic_names = ["t", "secret"]
        denied = call(state, "User:reader", join, 1)
        assert denied.error_code == TopicAuthorizationFailedError.code and "secret" in denied.error_message
        join.subscribed_topic_names = ["t"]
        assert call(state, "User:reader", join, 1).error_code == 0
        describe = M.ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=True)
        assert call(state, "User:nobody", describe, 0).groups[0].error_code == GroupAuthorizationFailedError.code
        desc = call(state, "User:reader", describe, 0).groups[0]  # READ implies DESCRIBE, as in Kafka
        assert desc.error_code == 0 and [m.member_id for m in desc.members] == ["m"]
        assert desc.authorized_operations == (1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE)
    finally:
        state.close()


def test_regex_subscription_follows_new_topics(tmp_path):
    """librdkafka sends a "^..." subscription as SubscribedTopicRegex (v1): the broker resolves it
    (whole-name match, internal topics left out) and a topic created later joins the assignment."""
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("ord-a", 2, 1), NewTopic("other", 1, 1)]).values():
            f.result(30)
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for topic in ("ord-a", "other"):
            for i in range(5):
                p.produce(topic, value=b"%d" % i)
        assert p.flush(30) == 0
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rx",
                                      "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                      "topic.metadata.refresh.interval.ms": 500})
        c.subscribe(["^ord-.*"])
        got: dict[str, int] = {}

        def poll_until(n: int) -> None:
            deadline = time.monotonic() + 30
            while sum(got.values()) < n and time.monotonic() < deadline:
                m = c.poll(0.1)
                if m is not None and not m.error():
                    got[m.topic()] = got.get(m.topic(), 0) + 1

        poll_until(5)
        assert got == {"ord-a": 5}
        admin.create_topics([NewTopic("ord-b", 1, 1)])["ord-b"].result(30)
        for i in range(3):
            p.produce("ord-b", value=b"%d" % i)
        assert p.flush(30) == 0
        poll_until(8)
        assert got == {"ord-a": 5, "ord-b": 3}
        desc = broker.state.consumer_groups.group("rx")
        [member] = list(desc)
        assert "^ord-.*" in member.subscribed_topic_regex and member.subscribed_topic_names == ()
        c.close()


def test_static_member_restarts_into_its_partitions_without_a_rebalance(tmp_path):
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        _create_topic(broker.bootstrap)

        def member(instance: str) -> confluent_kafka.Consumer:
            c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "static",
                                          "group.protocol": "consumer", "group.instance.id": instance})
            c.subscribe([TOPIC])
            return c

        def parts(c) -> list[int]:
            return sorted(p.partition for p in c.assignment())

        c1, c2 = member("i1"), member("i2")
        assert _wait(lambda: (c1.poll(0.05), c2.poll(0.05)) and len(parts(c1)) + len(parts(c2)) == PARTITIONS
                     and parts(c1) and parts(c2))
        before, epoch = parts(c1), broker.state.consumer_groups.group("static").group_epoch
        c1.close()  # a static member leaves for a while (epoch -2): its partitions wait for it
        group = broker.state.consumer_groups.group("static")
        assert sorted(m.member_epoch for m in group) == [-2, epoch]
        c1 = member("i1")
        assert _wait(lambda: (c1.poll(0.05), c2.poll(0.05)) and parts(c1) == before)
        assert broker.state.consumer_groups.group("static").group_epoch == epoch  # no rebalance
        c1.close()
        c2.close()


def test_group_configs_set_the_session_timeout_and_heartbeat_interval(state):
    state.topics.add("t", 1)
    assert _heartbeat(state).heartbeat_interval_ms == 5000  # the broker's default
    state.group_configs.replace("g", {"consumer.heartbeat.interval.ms": "7000",
                                      "consumer.session.timeout.ms": "50000"})
    assert _heartbeat(state, member_epoch=1, topic_partitions=None, subscribed_topic_names=None,
                      rebalance_timeout_ms=-1).heartbeat_interval_ms == 7000
    assert state.consumer_groups.timeouts_of("g").session_timeout_ms == 50000
