"""librdkafka (confluent-kafka) and a hand-driven kwire member in one group on kwire's broker.

The kwire member is JoinGroup/SyncGroup/Heartbeat requests written with kwire's codec over a
plain socket, using the assignors package for the consumer-protocol bytes.  Both directions:

* librdkafka leads: the assignment our member receives decodes with our decoder and equals what
  our assignor computes for the same group;
* kwire leads: librdkafka's subscription decodes with our decoder, and librdkafka takes the
  assignment our assignor computed; for cooperative-sticky over the two rounds the protocol
  needs (a partition moves only after its owner gave it up).

Every wait has a deadline; the librdkafka consumer is polled on a thread of its own, which
records its assignment after every poll.
"""

from __future__ import annotations

import socket
import threading
import time

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.assignors import (
    COOPERATIVE,
    EAGER,
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    perform_assignment,
)
from kwire.client.types import TopicPartition
from kwire.protocol import FrameSplitter, decode_response, encode_request, messages

pytestmark = pytest.mark.timeout(60)

PARTITIONS = 5
WAIT = 10.0  # seconds any one step may take
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS = 79, 27
ASSIGNORS = {"range": RangeAssignor, "roundrobin": RoundRobinAssignor}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("peer") / "data") as b:
        yield b


class RawMember:
    """One group member: a socket, kwire's codec, and the group state a consumer keeps."""

    def __init__(self, bootstrap: str, group: str):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT)
        self.splitter = FrameSplitter()
        self.correlation = 0
        self.group = group
        self.member_id = ""
        self.generation = -1
        self.protocol = ""

    def call(self, request, version: int):
        self.correlation += 1
        self.sock.sendall(encode_request(request, version, self.correlation, client_id="kwire-raw"))
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the broker closed the connection")
            for frame in self.splitter.feed(data):
                header, response = decode_response(frame, request.API_KEY, version)
                assert header.correlation_id == self.correlation
                return response
        raise TimeoutError(f"no answer to {type(request).__name__} within {WAIT}s")

    def create_topic(self, name: str, partitions: int) -> None:
        R = messages.CreateTopicsRequest
        topic = R.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
        (result,) = self.call(R(topics=[topic], timeout_ms=5000), 4).topics
        assert result.error_code == 0, result

    def join(self, protocols: list[tuple[str, bytes]]):
        R = messages.JoinGroupRequest
        for _ in range(2):  # v4+: a new member first gets its id with MEMBER_ID_REQUIRED
            resp = self.call(R(group_id=self.group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                               member_id=self.member_id, protocol_type="consumer",
                               protocols=[R.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols]), 7)
            self.member_id = resp.member_id
            if resp.error_code != MEMBER_ID_REQUIRED:
                break
        assert resp.error_code == 0, resp
        self.generation, self.protocol = resp.generation_id, resp.protocol_name
        return resp

    def sync(self, assignments: dict[str, bytes]) -> Assignment:
        R = messages.SyncGroupRequest
        resp = self.call(R(group_id=self.group, generation_id=self.generation, member_id=self.member_id,
                           protocol_type="consumer", protocol_name=self.protocol,
                           assignments=[R.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                        for m, a in assignments.items()]), 5)
        assert resp.error_code == 0, resp
        return decode_assignment(resp.assignment)

    def wait_for_rebalance(self) -> None:
        """Heartbeat until the coordinator says another member joined."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            resp = self.call(messages.HeartbeatRequest(group_id=self.group, generation_id=self.generation,
                                                       member_id=self.member_id), 4)
            if resp.error_code == REBALANCE_IN_PROGRESS:
                return
            assert resp.error_code == 0, resp
            time.sleep(0.05)
        raise TimeoutError("no rebalance started")

    def close(self) -> None:
        R = messages.LeaveGroupRequest
        try:
            self.call(R(group_id=self.group, members=[R.MemberIdentity(member_id=self.member_id)]), 3)
        finally:
            self.sock.close()


class PolledConsumer:
    """A confluent-kafka consumer polled on its own thread; ``assignment`` as of the last poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str):
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": strategy,
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 100, "enable.auto.commit": False,
            "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        self.assignment: list[TopicPartition] = []
        self.errors: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="librdkafka-poll", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.02)
            if msg is not None and msg.error():
                self.errors.append(msg.error())
            self.assignment = sorted(TopicPartition(tp.topic, tp.partition) for tp in self.consumer.assignment())

    def wait_for(self, expected: list[TopicPartition]) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and self.assignment != sorted(expected):
            time.sleep(0.01)
        assert self.assignment == sorted(expected), (self.assignment, expected, self.errors)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(WAIT)
        assert not self._thread.is_alive()
        self.consumer.close()


def all_of(topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(PARTITIONS)]


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_librdkafka_leads_and_our_member_gets_our_assignors_answer(broker, strategy):
    topic = group = f"rdk-leads-{strategy}"
    ours = RawMember(broker.bootstrap, group)
    ours.create_topic(topic, PARTITIONS)
    theirs = PolledConsumer(broker.bootstrap, group, topic, strategy)
    try:
        theirs.wait_for(all_of(topic))  # alone in the group, it leads and takes everything
        joined = ours.join([(strategy, encode_subscription(Subscription([topic])))])
        assert joined.leader != ours.member_id and joined.members == []
        got = ours.sync({})
        expected = ASSIGNORS[strategy]().assign({topic: PARTITIONS}, {
            joined.leader: Subscription([topic]), ours.member_id: Subscription([topic])})
        assert got.partitions == expected[ours.member_id].partitions
        theirs.wait_for(expected[joined.leader].partitions)
    finally:
        theirs.close()
        ours.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_we_lead_and_librdkafka_takes_our_assignment(broker, strategy):
    topic = group = f"kwire-leads-{strategy}"
    ours = RawMember(broker.bootstrap, group)
    ours.create_topic(topic, PARTITIONS)
    assignor = ASSIGNORS[strategy]()
    protocols = [(strategy, encode_subscription(Subscription([topic])))]
    joined = ours.join(protocols)
    assert joined.leader == ours.member_id
    ours.sync({ours.member_id: encode_assignment(Assignment(all_of(topic)))})
    theirs = PolledConsumer(broker.bootstrap, group, topic, strategy)
    try:
        ours.wait_for_rebalance()
        joined = ours.join(protocols)
        assert joined.leader == ours.member_id and len(joined.members) == 2
        (peer,) = [m for m in joined.members if m.member_id != ours.member_id]
        assert decode_subscription(peer.metadata).topics == [topic]
        plan = perform_assignment(assignor, {topic: PARTITIONS},
                                  [(m.member_id, m.group_instance_id, m.metadata) for m in joined.members],
                                  rebalance_protocol=EAGER)
        mine = ours.sync(plan)
        assert mine == decode_assignment(plan[ours.member_id])
        theirs.wait_for(decode_assignment(plan[peer.member_id]).partitions)
        assert sorted(mine.partitions + theirs.assignment) == all_of(topic)
    finally:
        theirs.close()
        ours.close()


def test_we_lead_librdkafka_cooperatively_over_two_rounds(broker):
    topic = group = "kwire-leads-cooperative"
    ours = RawMember(broker.bootstrap, group)
    ours.create_topic(topic, PARTITIONS)
    assignor = CooperativeStickyAssignor()
    cluster = {topic: PARTITIONS}

    def rebalance(owned: list[TopicPartition]):
        """Join owning ``owned``, lead, sync; (our assignment, everyone's, the peer's decoded subscription)."""
        sub = Subscription([topic], user_data=assignor.subscription_user_data([topic]), owned_partitions=owned,
                           generation_id=ours.generation)
        joined = ours.join([("cooperative-sticky", encode_subscription(sub))])
        assert joined.leader == ours.member_id
        members = [(m.member_id, m.group_instance_id, m.metadata) for m in joined.members]
        plan = perform_assignment(assignor, cluster, members, rebalance_protocol=COOPERATIVE)
        mine = ours.sync(plan)
        assignor.on_assignment(mine, ours.generation)
        peers = {m: decode_subscription(md) for m, _, md in members if m != ours.member_id}
        return mine, {m: decode_assignment(a).partitions for m, a in plan.items()}, peers

    mine, _, _ = rebalance([])
    assert mine.partitions == all_of(topic)  # alone
    theirs = PolledConsumer(broker.bootstrap, group, topic, "cooperative-sticky")
    try:
        ours.wait_for_rebalance()
        mine, first, peers = rebalance(mine.partitions)
        (peer,) = peers
        assert peers[peer].owned_partitions == []
        # Round 1: we keep our share; the rest is ours to give up, so librdkafka gets nothing yet.
        assert first[peer] == [] and len(mine.partitions) == 3
        # We revoked two partitions: rejoin at once, as a cooperative consumer does.
        mine, second, peers = rebalance(mine.partitions)
        assert peers[peer].owned_partitions == []  # it was given nothing in round 1
        assert second[ours.member_id] == mine.partitions and len(second[peer]) == 2
        theirs.wait_for(second[peer])
        assert sorted(mine.partitions + theirs.assignment) == all_of(topic)
    finally:
        theirs.close()
        ours.close()
