"""AsyncAdmin's unregister_broker, add_raft_voter and remove_raft_voter (Java's Admin
unregisterBroker, addRaftVoter, removeRaftVoter) against a kwire broker of each test's own: the
newest common version is used (AddRaftVoter v1, KIP-1186), the broker's refusal arrives as the
typed error with Kafka's message, a bad endpoint is refused before anything is sent, and the
synchronous Admin is the same call."""

from __future__ import annotations

import asyncio
import inspect
import uuid

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.admin import Admin, AsyncAdmin
from kwire.client.admin_quorum import RaftVoterEndpoint
from kwire.protocol import messages
from kwire.protocol.errors import BrokerIdNotRegisteredError, InvalidRequestError, UnsupportedVersionError


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as b:
        yield b


def run(coro, timeout: float = 30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_async_admin_calls_at_the_newest_common_version(broker):
    async def go():
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap}) as admin:
            conn = await admin.cluster.any_connection()
            assert conn.version_for(messages.AddRaftVoterRequest.API_KEY) == 1
            with pytest.raises(UnsupportedVersionError, match="adding voter because the kraft.version feature is 0"):
                await admin.add_raft_voter(3, uuid.uuid4(), [RaftVoterEndpoint("PLAINTEXT", "127.0.0.1", 9093)],
                                           timeout=5)
            with pytest.raises(InvalidRequestError, match="Remove voter request didn't include a valid voter"):
                await admin.remove_raft_voter(-1, uuid.uuid4(), timeout=5)
            with pytest.raises(BrokerIdNotRegisteredError, match="broker 5"):
                await admin.unregister_broker(5, timeout=5)
            node = (await admin.describe_cluster()).brokers[0].node_id
            await admin.unregister_broker(node, timeout=5)  # this node: Kafka's NONE
    run(go())


@pytest.mark.parametrize(("name", "host", "port", "wrong"), [
    ("", "h", 1, "must not be empty"), ("A", "", 1, "must not be empty"), ("A", "h", -1, "port -1")])
def test_a_bad_endpoint_is_refused_before_sending(name, host, port, wrong):
    with pytest.raises(ValueError, match=wrong):
        RaftVoterEndpoint(name, host, port)


def test_sync_admin_is_the_same_call(broker):
    for name in ("unregister_broker", "add_raft_voter", "remove_raft_voter"):
        assert inspect.signature(getattr(Admin, name)).parameters.keys() == \
            inspect.signature(getattr(AsyncAdmin, name)).parameters.keys()
        assert getattr(Admin, name).__doc__ and getattr(Admin, name).__doc__.startswith(
            getattr(AsyncAdmin, name).__doc__.split("\n")[0])
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        with pytest.raises(UnsupportedVersionError, match="removing voter"):
            admin.remove_raft_voter(1, uuid.uuid4(), timeout=5)
