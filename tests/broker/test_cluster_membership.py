"""UnregisterBroker, AddRaftVoter and RemoveRaftVoter answered as a one-node Kafka 4.3 (combined
broker and controller, a static quorum: kraft.version 0) answers them through its broker listener:
kwire's Admin against a broker of its own per test, raw requests through kwire's client connection
for every version advertised, and the cluster ALTER check under an authorizer."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.auth import AclOperation, AclStore, ResourceType
from kwire.broker.config import load_config
from kwire.broker.state import BrokerState
from kwire.client.admin import Admin
from kwire.client.admin_quorum import RaftVoterEndpoint
from kwire.client.config import parse_host_port
from kwire.client.connection import BrokerConnection
from kwire.protocol import messages as M
from kwire.protocol.admin import METADATA_TOPIC
from kwire.protocol.errors import (
    BrokerIdNotRegisteredError,
    ClusterAuthorizationFailedError,
    ErrorCode,
    InconsistentClusterIdError,
    InvalidRequestError,
    UnsupportedVersionError,
)
from tests.security.test_handler_authz import _acl, call

NOT_KRAFT_1_ADD = "Cluster doesn't support adding voter because the kraft.version feature is 0"
NOT_KRAFT_1_REMOVE = "Cluster doesn't support removing voter because the kraft.version feature is 0"


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as b:
        yield b


@pytest.fixture
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        yield a


def run(coro, timeout: float = 30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_unregister_broker_unknown_id_and_this_node(broker, admin):
    with pytest.raises(BrokerIdNotRegisteredError):
        admin.unregister_broker(42, timeout=5)
    # This node: Kafka's answer (NONE); kwire keeps serving as the cluster's broker.
    node = admin.describe_cluster().brokers[0].node_id
    admin.unregister_broker(node, timeout=5)
    assert [b.node_id for b in admin.describe_cluster().brokers] == [node]
    assert admin.list_topics() is not None


def test_add_raft_voter_refused_by_a_static_quorum(broker, admin):
    cluster_id = admin.describe_cluster().cluster_id
    plain = [RaftVoterEndpoint("PLAINTEXT", "localhost", 9093)]
    with pytest.raises(UnsupportedVersionError, match=NOT_KRAFT_1_ADD):
        admin.add_raft_voter(2, uuid.uuid4(), plain, timeout=5)
    with pytest.raises(UnsupportedVersionError, match=NOT_KRAFT_1_ADD):
        admin.add_raft_voter(2, uuid.uuid4(), plain, cluster_id=cluster_id, timeout=5)
    # Kafka's order of checks: the cluster id, the voter key, the default listener's endpoint.
    with pytest.raises(InconsistentClusterIdError, match=f'"not-it" doesn\'t match the cluster id "{cluster_id}"'):
        admin.add_raft_voter(2, uuid.UUID(int=0), plain, cluster_id="not-it", timeout=5)
    with pytest.raises(InvalidRequestError, match="Add voter request didn't include a valid voter"):
        admin.add_raft_voter(2, uuid.UUID(int=0), plain, timeout=5)
    with pytest.raises(InvalidRequestError, match=r"Add voter request didn't include the endpoint \(Endpoints\("
                       r"endpoints=\{ListenerName\(CONTROLLER\)=c1/<unresolved>:9093\}\)\) for the default "
                       r"listener ListenerName\(PLAINTEXT\)"):
        admin.add_raft_voter(2, uuid.uuid4(), [RaftVoterEndpoint("CONTROLLER", "c1", 9093)], timeout=5)
    with pytest.raises(ValueError, match="port 70000"):
        RaftVoterEndpoint("PLAINTEXT", "localhost", 70000)


def test_remove_the_only_voter(broker, admin):
    quorum = admin.describe_metadata_quorum()
    [voter] = quorum.voters
    # The voter of a static quorum has no directory id (DescribeQuorum says the zero uuid):
    # Kafka finds no valid voter in a request naming it so, and refuses any real one at kraft.version 0.
    with pytest.raises(InvalidRequestError, match="Remove voter request didn't include a valid voter"):
        admin.remove_raft_voter(voter.replica_id, uuid.UUID(int=0), timeout=5)
    with pytest.raises(UnsupportedVersionError, match=NOT_KRAFT_1_REMOVE):
        admin.remove_raft_voter(voter.replica_id, uuid.uuid4(), timeout=5)
    with pytest.raises(InconsistentClusterIdError):
        admin.remove_raft_voter(voter.replica_id, uuid.uuid4(), cluster_id="other", timeout=5)
    assert [v.replica_id for v in admin.describe_metadata_quorum().voters] == [voter.replica_id]


def test_raw_requests_at_every_advertised_version(broker):
    """ApiVersions lists the three at Kafka 4.3's ranges, and each version answers as Kafka does;
    kraft.version is supported 0-0 and not finalized, and DescribeQuorum's voter has no directory
    id: the static quorum these answers follow."""
    async def go():
        conn = await BrokerConnection.open(*parse_host_port(broker.bootstrap))
        try:
            versions = conn.broker_versions
            assert versions[M.UnregisterBrokerRequest.API_KEY] == (0, 0)
            assert versions[M.AddRaftVoterRequest.API_KEY] == (0, 1)
            assert versions[M.RemoveRaftVoterRequest.API_KEY] == (0, 0)
            av = await conn.send(M.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                 version=4)
            assert [(f.min_version, f.max_version) for f in av.supported_features
                    if f.name == "kraft.version"] == [(0, 0)]
            assert "kraft.version" not in {f.name for f in av.finalized_features}  # level 0: not finalized
            TD = M.DescribeQuorumRequest.TopicData
            quorum = await conn.send(M.DescribeQuorumRequest(topics=[TD(topic_name=METADATA_TOPIC, partitions=[
                TD.PartitionData(partition_index=0)])]), version=2)
            [voter] = quorum.topics[0].partitions[0].current_voters
            assert voter.replica_directory_id == uuid.UUID(int=0)

            Listener = M.AddRaftVoterRequest.Listener
            for v in (0, 1):
                add = await conn.send(M.AddRaftVoterRequest(cluster_id=None, timeout_ms=1000, voter_id=2,
                                                            voter_directory_id=uuid.uuid4(),
                                                            listeners=[Listener(name="PLAINTEXT", host="h", port=1)]),
                                      version=v)
                assert (add.error_code, add.error_message) == (UnsupportedVersionError.code, NOT_KRAFT_1_ADD)
            remove = await conn.send(M.RemoveRaftVoterRequest(cluster_id=None, voter_id=voter.replica_id,
                                                              voter_directory_id=uuid.uuid4()), version=0)
            assert (remove.error_code, remove.error_message) == (UnsupportedVersionError.code, NOT_KRAFT_1_REMOVE)
            unknown = await conn.send(M.UnregisterBrokerRequest(broker_id=7), version=0)
            # ControllerApis sets only the code.
            assert (unknown.error_code, unknown.error_message) == (BrokerIdNotRegisteredError.code, None)
            mine = await conn.send(M.UnregisterBrokerRequest(broker_id=voter.replica_id), version=0)
            assert (mine.error_code, mine.error_message) == (ErrorCode.NONE, None)
        finally:
            conn.close()
    run(go())


@pytest.fixture
def secured(tmp_path):
    AclStore(tmp_path / "data").add([
        _acl("User:ops", AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),
        _acl("User:admin", AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster"),
    ])
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True))
    yield s
    s.close()


def test_cluster_alter_is_required(secured):
    """ControllerApis.authorizeClusterOperation(ALTER) comes first for all three: DESCRIBE is not enough."""
    Listener = M.AddRaftVoterRequest.Listener
    requests = [
        (M.UnregisterBrokerRequest(broker_id=7), 0, BrokerIdNotRegisteredError.code),
        (M.AddRaftVoterRequest(cluster_id=None, timeout_ms=10, voter_id=2, voter_directory_id=uuid.uuid4(),
                               listeners=[Listener(name="PLAINTEXT", host="h", port=1)]), 1,
         UnsupportedVersionError.code),
        (M.RemoveRaftVoterRequest(cluster_id=None, voter_id=1, voter_directory_id=uuid.uuid4()), 0,
         UnsupportedVersionError.code),
    ]
    for request, version, allowed_error in requests:
        for principal in ("User:nobody", "User:ops"):
            refused = call(secured, principal, request, version)
            assert refused.error_code == ClusterAuthorizationFailedError.code, (request, principal)
        assert call(secured, "User:admin", request, version).error_code == allowed_error
    # The raft apis say Errors.CLUSTER_AUTHORIZATION_FAILED's message; UnregisterBroker names the request.
    assert call(secured, "User:ops", requests[1][0], 1).error_message == "Cluster authorization failed."
    assert "is not authorized" in call(secured, "User:ops", requests[0][0], 0).error_message
