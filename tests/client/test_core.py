"""The client core (connections, version negotiation, metadata, coordinators) against real peers:
kwire's broker, librdkafka's mock cluster, and small misbehaving servers on loopback."""

from __future__ import annotations

import asyncio
import struct
import time

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.cluster import Cluster
from kwire.client.config import CommonConfig, parse_host_port
from kwire.client.connection import BrokerConnection
from kwire.client.errors import (
    BrokerConnectionError,
    ClientTimeoutError,
    NoBrokersAvailableError,
    UnsupportedApiError,
)
from kwire.client.retry import Backoff, retrying
from kwire.protocol import messages
from kwire.protocol.errors import NotLeaderOrFollowerError, TopicAuthorizationFailedError
from kwire.protocol.schema import api_versions

from ..ports import refusing_ports


def config(*bootstrap: str, **changes) -> CommonConfig:
    values = dict(bootstrap_servers=list(bootstrap), client_id="kwire-test", request_timeout_ms=5000,
                  retry_backoff_ms=20, retry_backoff_max_ms=200, reconnect_backoff_ms=20,
                  reconnect_backoff_max_ms=200, socket_connection_setup_timeout_ms=3000)
    values.update(changes)
    return CommonConfig.from_settings(**values)


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=3) as b:
        yield b


@pytest.fixture(scope="module")
def mock_cluster():
    """librdkafka's mock cluster with 3 brokers; yields their addresses while it lives."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 3, "log_level": 0})
    md = owner.list_topics(timeout=10)
    yield [f"{b.host}:{b.port}" for b in sorted(md.brokers.values(), key=lambda b: b.id)]
    owner.flush(1)


def run(coro, timeout: float = 30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# -- a peer that misbehaves on purpose ----------------------------------------------------------
class FakeBroker:
    """A loopback server that answers ApiVersions and then does what ``behaviour`` says."""

    def __init__(self, behaviour: str):
        self.behaviour = behaviour
        self.server: asyncio.AbstractServer | None = None
        self.requests: list[int] = []  # api keys of the requests read, in order
        self.ended: asyncio.Future | None = None  # how the client's side ended: "eof" or an error

    async def __aenter__(self) -> str:
        self.ended = asyncio.get_running_loop().create_future()
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                head = await reader.read(4)
                if not head:
                    self.ended.set_result("eof")
                    return
                size = struct.unpack(">i", head + await reader.readexactly(4 - len(head)))[0]
                frame = await reader.readexactly(size)
                api_key, _, correlation_id = struct.unpack_from(">hhi", frame)
                self.requests.append(api_key)
                if api_key == 18:
                    body = messages.ApiVersionsResponse(api_keys=[
                        messages.ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=v)
                        for k, v in ((0, 3), (3, 1), (18, 0))])
                    out = bytearray(struct.pack(">i", correlation_id))
                    messages.ApiVersionsResponse.codec(0).encode(body, out)
                    writer.write(struct.pack(">i", len(out)) + bytes(out))
                elif self.behaviour == "wrong-correlation":
                    writer.write(struct.pack(">ii", 4, correlation_id + 1000))
                elif self.behaviour == "huge-frame":
                    writer.write(struct.pack(">i", 0x7FFFFFF0))
                elif self.behaviour == "answers-acks-0-slowly":
                    # As librdkafka's mock: every Produce answered, acks=0 too (an empty v3 answer),
                    # and slow to read, so that the client's requests wait in its socket.
                    writer.write(struct.pack(">iii", 12, correlation_id, 0) + struct.pack(">i", 0))
                    await asyncio.sleep(0.05)
                # "silent": read and never answer
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if not self.ended.done():
                self.ended.set_result(repr(exc))
        finally:
            writer.close()


# -- connections ------------------------------------------------------------------------------
def test_negotiates_versions_with_kwire_broker(broker):
    async def go():
        host, port = parse_host_port(broker.bootstrap)
        conn = await BrokerConnection.open(host, port)
        try:
            # kwire's broker serves Produce 3+ and Fetch 4+; the codec knows more.
            assert conn.broker_versions[0][0] == 3 and conn.broker_versions[1][0] == 4
            assert conn.version_for(3) == min(api_versions(3)[1], conn.broker_versions[3][1])
            assert conn.version_for(0, high=5) == 5
            with pytest.raises(UnsupportedApiError, match="no common version of Produce"):
                conn.version_for(0, high=2)
            with pytest.raises(UnsupportedApiError, match="does not support"):
                # (was UpdateFeatures, served since the broker answers a one-node cluster's admin apis)
                conn.version_for(63)  # BrokerHeartbeat: controller-only (was 38, then 64, answered since)
        finally:
            conn.close()
    run(go())


def test_kip511_fallback_with_librdkafka_mock(mock_cluster):
    """The mock refuses ApiVersions v3+ in a layout that is neither v0 nor the asked version;
    the connection falls back and still learns every api's range."""
    async def go():
        host, port = parse_host_port(mock_cluster[0])
        conn = await BrokerConnection.open(host, port)
        try:
            assert conn.broker_versions[18][1] < api_versions(18)[1]
            assert conn.broker_versions[0][0] == 0  # the mock still speaks Produce v0
            assert conn.supports(3)
        finally:
            conn.close()
    run(go())


def test_pipelined_requests_complete_in_order(broker):
    async def go():
        host, port = parse_host_port(broker.bootstrap)
        conn = await BrokerConnection.open(host, port, max_in_flight=8)
        try:
            seen = []

            async def one(i):
                response = await conn.send(messages.MetadataRequest(topics=[]))
                seen.append(i)
                return response

            responses = await asyncio.gather(*(one(i) for i in range(300)))
            assert len(responses) == 300 and all(r.brokers for r in responses)
            assert seen == list(range(300))
            assert conn.in_flight == 0
        finally:
            conn.close()
    run(go())


def test_request_timeout_closes_the_connection():
    async def go():
        async with FakeBroker("silent") as address:
            host, port = parse_host_port(address)
            conn = await BrokerConnection.open(host, port, request_timeout=0.3)
            first = asyncio.ensure_future(conn.send(messages.MetadataRequest(topics=[])))
            second = asyncio.ensure_future(conn.send(messages.MetadataRequest(topics=[])))
            with pytest.raises(ClientTimeoutError, match="Metadata v1 .* got no answer"):
                await first
            with pytest.raises(ClientTimeoutError):
                await second
            assert conn.closed
            with pytest.raises(BrokerConnectionError, match="closed"):
                await conn.send(messages.MetadataRequest(topics=[]))
    run(go())


@pytest.mark.parametrize("behaviour, message", [
    ("wrong-correlation", "answered correlation id"),
    ("huge-frame", "bad response frame"),
])
def test_out_of_step_responses_drop_the_connection(behaviour, message):
    async def go():
        async with FakeBroker(behaviour) as address:
            host, port = parse_host_port(address)
            conn = await BrokerConnection.open(host, port)
            with pytest.raises(BrokerConnectionError, match=message):
                await conn.send(messages.MetadataRequest(topics=[]))
            assert conn.closed
    run(go())


def test_acks_0_requests_reach_a_broker_that_answers_them_before_the_close():
    """Kafka never answers Produce with acks=0; librdkafka's mock does.  Those answers are read
    and dropped (the connection stays up), and closing with requests still in the socket ends
    with a half-close that lets them all through: a plain close with an answer unread would reset
    the connection and lose them."""
    async def go():
        fake = FakeBroker("answers-acks-0-slowly")
        async with fake as address:
            host, port = parse_host_port(address)
            conn = await BrokerConnection.open(host, port)
            data = messages.ProduceRequest.TopicProduceData
            request = messages.ProduceRequest(acks=0, timeout_ms=1000, topic_data=[data(
                name="t", partition_data=[data.PartitionProduceData(index=0, records=b"x" * 65536)])])
            assert await conn.send(request, version=3, expect_response=False) is None
            for _ in range(100):  # the answer is on its way once the request is read
                if len(fake.requests) == 2:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            assert not conn.closed, conn.close_reason
            for _ in range(39):  # 2.6 MB in all: more than the two sockets' buffers hold
                assert await conn.send(request, version=3, expect_response=False) is None
            conn.close()
            await asyncio.wait_for(conn.wait_closed(), 10)
            assert await asyncio.wait_for(fake.ended, 10) == "eof"
            assert fake.requests == [18] + [0] * 40
    run(go())


def test_connect_refused_names_the_address():
    async def go(port):
        with pytest.raises(BrokerConnectionError, match=f"127.0.0.1:{port}"):
            await BrokerConnection.open("127.0.0.1", port)
    with refusing_ports() as (port,):
        run(go(port))


# -- cluster: metadata, routing, coordinators ---------------------------------------------------
def test_metadata_from_kwire_broker(broker):
    async def go():
        cluster = Cluster(config(broker.bootstrap))
        try:
            md = await cluster.refresh_metadata(["core-a"], allow_auto_create=True)
            assert list(md.brokers) == [1] and md.cluster_id
            assert md.partitions_for("core-a") == [0, 1, 2]
            assert md.leader("core-a", 2) == 1 and md.leader("core-a", 3) is None
            # A refresh of another topic keeps what is known of the first.
            md = await cluster.refresh_metadata(["core-b"], allow_auto_create=True)
            assert {"core-a", "core-b"} <= set(md.topics)
            # Without auto-create an unknown topic comes back with its error and no partitions.
            md = await cluster.refresh_metadata(["core-missing"])
            assert md.topics["core-missing"].error_code == 3 and md.partitions_for("core-missing") is None
            everything = await cluster.refresh_metadata()
            assert {"core-a", "core-b"} <= set(everything.topics) and "core-missing" not in everything.topics
            assert md.topic_name(md.topic_id("core-a")) == "core-a"
        finally:
            await cluster.close()
    run(go())


def test_metadata_and_coordinator_on_three_mock_brokers(mock_cluster):
    async def go():
        cluster = Cluster(config(mock_cluster[1]))
        try:
            md = await cluster.refresh_metadata(["core-mock"], allow_auto_create=True)
            assert sorted(md.brokers) == [1, 2, 3]
            leaders = {md.leader("core-mock", p) for p in md.partitions_for("core-mock")}
            assert leaders <= {1, 2, 3}
            node = await cluster.coordinator("core-group")
            assert node in (1, 2, 3)
            # Requests routed to every broker by node id reach that broker.
            for node_id in (1, 2, 3):
                conn = await cluster.connection(node_id)
                assert (conn.host, conn.port) == parse_host_port(mock_cluster[node_id - 1])
            # Bootstrap connections are dropped once the real brokers are known.
            assert all(n.conn is None for i, n in cluster._nodes.items() if i < 0)
        finally:
            await cluster.close()
    run(go())


def test_reconnects_after_broker_restart(tmp_path):
    async def go():
        async with EmbeddedBroker(tmp_path / "data") as first:
            port = first.port
            cluster = Cluster(config(first.bootstrap))
            await cluster.refresh_metadata(["core-restart"], allow_auto_create=True)
        # The broker is gone: the request fails as retriable and metadata refresh times out.
        with pytest.raises(BrokerConnectionError):
            await cluster.send(messages.MetadataRequest(topics=[]), 1)
        async with EmbeddedBroker(tmp_path / "data", port=port):
            md = await cluster.refresh_metadata(["core-restart"])
            assert md.partitions_for("core-restart") == [0]
            response = await cluster.send(messages.MetadataRequest(topics=[]), 1)
            assert response.brokers[0].port == port
            await cluster.close()
    run(go())


def test_no_brokers_available():
    async def go(ports):
        cluster = Cluster(config(*(f"127.0.0.1:{p}" for p in ports), request_timeout_ms=300))
        with pytest.raises(NoBrokersAvailableError, match=str(ports[0])):
            await cluster.any_connection()
        with pytest.raises(ClientTimeoutError, match="Metadata did not succeed"):
            await cluster.refresh_metadata()
        await cluster.close()
    with refusing_ports(2) as ports:
        run(go(ports))


# -- retries ------------------------------------------------------------------------------------
def test_retrying_retries_only_retriable_errors():
    async def go():
        calls = []

        async def flaky():
            calls.append(time.monotonic())
            if len(calls) < 3:
                raise NotLeaderOrFollowerError("moved")
            return "done"

        refreshed = []
        result = await retrying(flaky, timeout=5, backoff=Backoff(10, 40), what="op",
                                before_retry=lambda exc: refreshed.append(type(exc)))
        assert result == "done" and len(calls) == 3 and refreshed == [NotLeaderOrFollowerError] * 2

        async def denied():
            calls.append(1)
            raise TopicAuthorizationFailedError("no")

        calls.clear()
        with pytest.raises(TopicAuthorizationFailedError):
            await retrying(denied, timeout=5, backoff=Backoff(10, 40), what="op")
        assert len(calls) == 1

        async def always_moving():
            raise NotLeaderOrFollowerError("moved")

        with pytest.raises(ClientTimeoutError, match="op did not succeed within 0.2 s; last error"):
            await retrying(always_moving, timeout=0.2, backoff=Backoff(10, 40), what="op")
    run(go())


def test_backoff_grows_to_its_maximum():
    backoff = Backoff(100, 1000, jitter=0.2)
    assert 0.08 <= backoff.delay(0) <= 0.12
    assert 0.16 <= backoff.delay(1) <= 0.24
    assert all(0.8 <= backoff.delay(n) <= 1.2 for n in range(4, 60))


def test_jitter_and_bootstrap_order_leave_the_applications_random_stream_alone():
    """An application that seeds the global ``random`` gets the same numbers with kwire retrying and
    reconnecting in between: kwire draws from generators of its own."""
    import random


    async def reconnect_attempts(ports):
        cluster = Cluster(config(*(f"127.0.0.1:{p}" for p in ports), request_timeout_ms=300))
        for _ in range(3):
            with pytest.raises(NoBrokersAvailableError):
                await cluster.any_connection()
        await cluster.close()

    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    got = [random.random()]
    assert all(Backoff(100, 1000).delay(n) > 0 for n in range(5))
    got.append(random.random())
    with refusing_ports(3) as ports:
        run(reconnect_attempts(ports))
    got.append(random.random())
    assert got == expected
