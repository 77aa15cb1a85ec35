"""The admin apis of a one-node cluster under an authorizer, as Kafka checks them: DESCRIBE or
ALTER on the cluster (DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders, reassignments,
DescribeQuorum, UpdateFeatures, the SCRAM apis, ListConfigResources' DESCRIBE_CONFIGS), READ or
DESCRIBE on the topic (DescribeProducers, DescribeTopicPartitions), and the authorized-operations
bit fields computed from the ACLs (DescribeCluster, DescribeTopicPartitions)."""

from __future__ import annotations

import pytest

from kwire.broker.auth import AclOperation, AclStore, ResourceType
from kwire.broker.config import load_config
from kwire.broker.state import BrokerState
from kwire.protocol import messages as M
from kwire.protocol.admin import METADATA_TOPIC
from kwire.protocol.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from tests.security.test_handler_authz import _acl, _create, call

DENIED = ClusterAuthorizationFailedError.code


@pytest.fixture
def state(tmp_path):
    AclStore(tmp_path / "data").add([
        _acl("User:ops", AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),
        _acl("User:ops", AclOperation.READ, ResourceType.TOPIC, "t"),
    ])
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    _create(s)
    yield s
    s.close()


def test_cluster_describe_and_alter(state):
    assert call(state, "User:nobody", M.DescribeLogDirsRequest(topics=None), 4).error_code == DENIED
    assert call(state, "User:ops", M.DescribeLogDirsRequest(topics=None), 4).error_code == 0
    TD = M.DescribeQuorumRequest.TopicData
    quorum = M.DescribeQuorumRequest(topics=[TD(topic_name=METADATA_TOPIC, partitions=[TD.PartitionData(
        partition_index=0)])])
    assert call(state, "User:nobody", quorum, 2).error_code == DENIED
    assert call(state, "User:ops", quorum, 2).error_code == 0
    listed = M.ListPartitionReassignmentsRequest(timeout_ms=10, topics=None)
    assert call(state, "User:nobody", listed, 0).error_code == DENIED
    assert call(state, "User:ops", listed, 0).error_code == 0
    assert call(state, "User:ops", M.DescribeUserScramCredentialsRequest(users=None), 0).error_code == 0
    # ALTER on the cluster: ops may only describe
    TP = M.ElectLeadersRequest.TopicPartitions
    elect = call(state, "User:ops", M.ElectLeadersRequest(election_type=0, topic_partitions=[TP(topic="t", partitions=[0])],
                                                          timeout_ms=10), 2)
    assert elect.error_code == DENIED and elect.replica_election_results[0].partition_result[0].error_code == DENIED
    U = M.UpdateFeaturesRequest.FeatureUpdateKey
    upd = M.UpdateFeaturesRequest(timeout_ms=10, validate_only=True,
                                  feature_updates=[U(feature="transaction.version", max_version_level=2, upgrade_type=1)])
    assert call(state, "User:ops", upd, 1).error_code == DENIED
    assert call(state, "User:admin", upd, 1).error_code == 0
    A = M.AlterUserScramCredentialsRequest
    scram = A(deletions=[A.ScramCredentialDeletion(name="x", mechanism=1)], upsertions=[])
    assert [r.error_code for r in call(state, "User:ops", scram, 0).results] == [DENIED]
    assert call(state, "User:ops", M.ListConfigResourcesRequest(resource_types=[]), 1).error_code == DENIED


def test_topic_operations(state):
    T = M.DescribeProducersRequest.TopicRequest
    resp = call(state, "User:nobody", M.DescribeProducersRequest(topics=[T(name="t", partition_indexes=[0])]), 0)
    assert resp.topics[0].partitions[0].error_code == TopicAuthorizationFailedError.code
    resp = call(state, "User:ops", M.DescribeProducersRequest(topics=[T(name="t", partition_indexes=[0])]), 0)
    assert resp.topics[0].partitions[0].error_code == 0
    Req = M.DescribeTopicPartitionsRequest
    named = Req(topics=[Req.TopicRequest(name="t")], response_partition_limit=10, cursor=None)
    assert [t.error_code for t in call(state, "User:nobody", named, 0).topics] == [TopicAuthorizationFailedError.code]
    assert call(state, "User:nobody", Req(topics=[], response_partition_limit=10, cursor=None), 0).topics == []
    [t] = call(state, "User:ops", named, 0).topics
    read, describe = 1 << AclOperation.READ, 1 << AclOperation.DESCRIBE
    assert t.error_code == 0 and t.topic_authorized_operations == read | describe  # READ implies DESCRIBE


def test_describe_cluster_operations_from_acls(state):
    req = M.DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1)
    assert call(state, "User:ops", req, 1).cluster_authorized_operations == 1 << AclOperation.DESCRIBE
    assert call(state, "User:nobody", req, 1).cluster_authorized_operations == 0
    everything = call(state, "User:admin", req, 1).cluster_authorized_operations
    assert everything & (1 << AclOperation.ALTER) and everything & (1 << AclOperation.CLUSTER_ACTION)
