"""The admin apis a one-node Kafka 4.3 answers, served through dispatch without sockets:
DescribeLogDirs, AlterReplicaLogDirs, DescribeTopicPartitions, ElectLeaders, partition
reassignments, DescribeQuorum, DescribeCluster's authorized operations, ListConfigResources,
DescribeProducers, UpdateFeatures and ApiVersions' features, the SCRAM credential apis and the
telemetry apis, and the answer to an api still not served."""

from __future__ import annotations

import logging
import os
import uuid

import pytest

from kwire.broker.handlers import HANDLERS
from kwire.protocol import messages
from kwire.protocol.admin import METADATA_TOPIC, ScramMechanism
from kwire.protocol.errors import (
    DuplicateResourceError,
    ElectionNotNeededError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    InvalidTopicException,
    InvalidUpdateVersionError,
    LogDirNotFoundError,
    NoReassignmentInProgressError,
    ReplicaNotAvailableError,
    ResourceNotFoundError,
    ThrottlingQuotaExceededError,
    UnacceptableCredentialError,
    UnknownSubscriptionIdError,
    UnknownTopicOrPartitionError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)
from kwire.protocol.records import RecordBatchBuilder
from kwire.security.scram import verify_password

from .conftest import serve

M = messages


@pytest.fixture
def topics(state):
    from kwire.broker.handlers.topic_admin import create_topic

    create_topic(state, "alpha", 3, {})
    create_topic(state, "beta", 2, {})
    state.logs.get("alpha", 0).append(_batch())
    state.logs.get("beta", 0).append(_batch(producer_id=42))
    return state


def _batch(producer_id: int = -1) -> bytes:
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=0 if producer_id >= 0 else -1)
    b.append(b"k", b"v")
    return b.build()


def test_describe_log_dirs_sizes_and_disk(topics):
    for v in range(1, 6):
        resp = serve(topics, M.DescribeLogDirsRequest(topics=None), v)
        [d] = resp.results
        assert d.error_code == 0 and d.log_dir == os.path.abspath(topics.data_dir)
        sizes = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
                 for t in d.topics for p in t.partitions}
        assert sizes[("alpha", 0)][0] == topics.logs.get("alpha", 0).size_in_bytes > 0
        assert sizes[("alpha", 1)] == (0, 0, False) and ("beta", 1) in sizes
        if v >= 4:
            assert d.total_bytes >= d.usable_bytes > 0
    resp = serve(topics, M.DescribeLogDirsRequest(topics=[
        M.DescribeLogDirsRequest.DescribableLogDirTopic(topic="beta", partitions=[1, 7])]), 4)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.results[0].topics] == [("beta", [1])]


def test_alter_replica_log_dirs_one_dir(topics):
    Dir = M.AlterReplicaLogDirsRequest.AlterReplicaLogDir
    here = os.path.abspath(topics.data_dir)
    req = M.AlterReplicaLogDirsRequest(dirs=[
        Dir(path=here, topics=[Dir.AlterReplicaLogDirTopic(name="alpha", partitions=[0, 9])]),
        Dir(path="/elsewhere", topics=[Dir.AlterReplicaLogDirTopic(name="beta", partitions=[0])])])
    resp = serve(topics, req, 2)
    got = {(r.topic_name, p.partition_index): p.error_code for r in resp.results for p in r.partitions}
    assert got == {("alpha", 0): 0, ("alpha", 9): ReplicaNotAvailableError.code,
                   ("beta", 0): LogDirNotFoundError.code}


def test_describe_topic_partitions_pages_with_cursor(topics):
    Req = M.DescribeTopicPartitionsRequest
    seen, cursor, pages = [], None, 0
    while pages < 200:
        resp = serve(topics, Req(topics=[], response_partition_limit=7, cursor=cursor), 0)
        pages += 1
        seen += [(t.name, p.partition_index) for t in resp.topics for p in t.partitions]
        assert sum(len(t.partitions) for t in resp.topics) <= 7
        if resp.next_cursor is None:
            break
        cursor = Req.Cursor(topic_name=resp.next_cursor.topic_name, partition_index=resp.next_cursor.partition_index)
    names = sorted(topics.topics.names(internal=True))
    assert [t for t, _ in seen if t in ("alpha", "beta")] == ["alpha"] * 3 + ["beta"] * 2
    assert seen == sorted(seen) and {t for t, _ in seen} == set(names)
    resp = serve(topics, Req(topics=[Req.TopicRequest(name="beta"), Req.TopicRequest(name="nope")],
                             response_partition_limit=100, cursor=None), 0)
    by = {t.name: t for t in resp.topics}
    assert by["nope"].error_code == UnknownTopicOrPartitionError.code
    b = by["beta"]
    assert b.error_code == 0 and b.topic_id == topics.topics.get("beta").topic_id
    assert [(p.leader_id, p.replica_nodes, p.isr_nodes) for p in b.partitions] == [(1, [1], [1])] * 2
    assert b.topic_authorized_operations > 0 and resp.next_cursor is None
    # a page ending exactly with a topic points at the next topic's partition 0
    resp = serve(topics, Req(topics=[Req.TopicRequest(name="alpha"), Req.TopicRequest(name="beta")],
                             response_partition_limit=3, cursor=None), 0)
    assert [t.name for t in resp.topics] == ["alpha"]
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("beta", 0)
    # Kafka: the cursor's topic must be among those named
    resp = serve(topics, Req(topics=[Req.TopicRequest(name="beta")], response_partition_limit=3,
                             cursor=Req.Cursor(topic_name="alpha", partition_index=1)), 0)
    assert [(t.name, t.error_code) for t in resp.topics] == [("beta", InvalidRequestError.code)]


def test_elect_leaders_not_needed_and_unknown(topics):
    TP = M.ElectLeadersRequest.TopicPartitions
    for v in range(3):
        req = M.ElectLeadersRequest(topic_partitions=[TP(topic="alpha", partitions=[0, 5]),
                                                      TP(topic="ghost", partitions=[0])], timeout_ms=1000)
        if v >= 1:
            req.election_type = 0
        resp = serve(topics, req, v)
        got = {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results
               for p in r.partition_result}
        assert got == {("alpha", 0): ElectionNotNeededError.code, ("alpha", 5): UnknownTopicOrPartitionError.code,
                       ("ghost", 0): UnknownTopicOrPartitionError.code}
        messages_ = {(r.topic, p.partition_id): p.error_message for r in resp.replica_election_results
                     for p in r.partition_result}
        assert messages_[("ghost", 0)] == "No such topic as ghost"  # Kafka's words, bare
    resp = serve(topics, M.ElectLeadersRequest(election_type=1, topic_partitions=None, timeout_ms=10), 2)
    assert resp.error_code == 0
    assert {(r.topic, tuple(r.partition_result)) for r in resp.replica_election_results} >= {("alpha", ()), ("beta", ())}


def test_partition_reassignments(topics):
    T = M.AlterPartitionReassignmentsRequest.ReassignableTopic
    P = T.ReassignablePartition
    req = M.AlterPartitionReassignmentsRequest(timeout_ms=1000, allow_replication_factor_change=True, topics=[
        T(name="alpha", partitions=[P(partition_index=0, replicas=[1]), P(partition_index=1, replicas=None),
                                     P(partition_index=2, replicas=[2]), P(partition_index=9, replicas=[1])])])
    resp = serve(topics, req, 1)
    assert resp.error_code == 0
    assert [p.error_code for p in resp.responses[0].partitions] == [
        0, NoReassignmentInProgressError.code, InvalidReplicaAssignmentError.code, UnknownTopicOrPartitionError.code]
    listed = serve(topics, M.ListPartitionReassignmentsRequest(timeout_ms=10, topics=None), 0)
    assert listed.error_code == 0 and listed.topics == []


def test_describe_quorum_one_voter(state):
    TD = M.DescribeQuorumRequest.TopicData
    meta = TD(topic_name=METADATA_TOPIC, partitions=[TD.PartitionData(partition_index=0)])
    for v in range(3):
        resp = serve(state, M.DescribeQuorumRequest(topics=[meta]), v)
        assert resp.error_code == 0
        [p] = resp.topics[0].partitions
        assert (p.error_code, p.leader_id, p.leader_epoch) == (0, 1, 1)
        assert [(r.replica_id, r.log_end_offset) for r in p.current_voters] == [(1, p.high_watermark)]
        assert p.high_watermark > 0 and p.observers == []
        if v >= 2:
            assert [n.node_id for n in resp.nodes] == [1] and resp.nodes[0].listeners
    # Kafka: anything but exactly the metadata partition fails every partition named
    other = TD(topic_name="other", partitions=[TD.PartitionData(partition_index=0)])
    resp = serve(state, M.DescribeQuorumRequest(topics=[meta, other]), 2)
    assert resp.error_code == 0
    assert [p.error_code for t in resp.topics for p in t.partitions] == [UnknownTopicOrPartitionError.code] * 2


def test_describe_cluster_authorized_operations(state):
    resp = serve(state, M.DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1), 1)
    assert resp.cluster_authorized_operations > 0 and resp.cluster_authorized_operations & (1 << 8)  # DESCRIBE


def test_list_config_resources(topics):
    resp = serve(topics, M.ListConfigResourcesRequest(), 0)
    assert resp.error_code == 0 and resp.config_resources == []
    resp = serve(topics, M.ListConfigResourcesRequest(resource_types=[]), 1)
    got = {(r.resource_type, r.resource_name) for r in resp.config_resources}
    assert {(2, "alpha"), (2, "beta"), (4, "1")} <= got
    resp = serve(topics, M.ListConfigResourcesRequest(resource_types=[4]), 1)
    assert [(r.resource_type, r.resource_name) for r in resp.config_resources] == [(4, "1")]
    resp = serve(topics, M.ListConfigResourcesRequest(resource_types=[8, 32]), 1)  # loggers, groups: none here
    assert resp.error_code == 0 and resp.config_resources == []
    assert serve(topics, M.ListConfigResourcesRequest(resource_types=[64]), 1).error_code == \
        UnsupportedVersionError.code


def test_describe_producers_from_producer_state(topics):
    T = M.DescribeProducersRequest.TopicRequest
    resp = serve(topics, M.DescribeProducersRequest(topics=[T(name="alpha", partition_indexes=[0, 99])]), 0)
    p0, p99 = resp.topics[0].partitions
    assert p0.error_code == 0 and p0.active_producers == []  # a non-idempotent batch has no producer
    assert p99.error_code == UnknownTopicOrPartitionError.code
    resp = serve(topics, M.DescribeProducersRequest(topics=[T(name="ghost", partition_indexes=[0]),
                                                            T(name="bad name!", partition_indexes=[0])]), 0)
    assert [t.partitions[0].error_code for t in resp.topics] == [UnknownTopicOrPartitionError.code,
                                                                 InvalidTopicException.code]
    resp = serve(topics, M.DescribeProducersRequest(topics=[T(name="beta", partition_indexes=[0])]), 0)
    [p] = resp.topics[0].partitions[0].active_producers
    assert (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset) == (42, 0, 0, -1)


def test_features_in_api_versions_and_update_features(state):
    resp = serve(state, M.ApiVersionsRequest(client_software_name="t", client_software_version="1"), 4)
    fin = {f.name: f.max_version_level for f in resp.finalized_features}
    # A new Kafka 4.3 cluster's levels; streams.version 1 since KIP-1071 went GA in Kafka 4.2.
    assert fin == {"metadata.version": 30, "transaction.version": 2, "group.version": 1, "share.version": 1,
                   "streams.version": 1}
    sup = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
    assert sup["metadata.version"] == (7, 30) and sup["group.version"] == (0, 1) and sup["share.version"] == (0, 1)
    assert sup["streams.version"] == (0, 1)
    assert sup["transaction.version"] == (0, 2)  # KIP-890 part 2 is served
    epoch = resp.finalized_features_epoch
    assert M.GetTelemetrySubscriptionsRequest.API_KEY not in {k.api_key for k in resp.api_keys}
    U = M.UpdateFeaturesRequest.FeatureUpdateKey
    down = M.UpdateFeaturesRequest(timeout_ms=1000, validate_only=True,
                                   feature_updates=[U(feature="transaction.version", max_version_level=0, upgrade_type=2)])
    assert serve(state, down, 1).error_code == 0
    assert serve(state, M.ApiVersionsRequest(), 3).finalized_features_epoch == epoch  # validate only
    for bad in (U(feature="no.such", max_version_level=1, upgrade_type=1),
                U(feature="group.version", max_version_level=2, upgrade_type=1),
                U(feature="transaction.version", max_version_level=3, upgrade_type=1),
                U(feature="metadata.version", max_version_level=29, upgrade_type=2),
                U(feature="transaction.version", max_version_level=0, upgrade_type=1)):
        r = serve(state, M.UpdateFeaturesRequest(timeout_ms=10, validate_only=False, feature_updates=[bad]), 1)
        assert r.error_code == InvalidUpdateVersionError.code and r.results == []  # Kafka 4: top level only
    down.validate_only = False
    assert serve(state, down, 2).error_code == 0
    resp = serve(state, M.ApiVersionsRequest(), 3)
    assert {f.name for f in resp.finalized_features} == {"metadata.version", "group.version", "share.version",
                                                          "streams.version"}
    assert resp.finalized_features_epoch == epoch + 1


def test_scram_credentials_describe_and_alter(state):
    from kwire.broker.handlers.scram_admin import credential_from_salted_password
    from kwire.security.scram import make_credential

    store = state.security.credentials
    store.set_password("alice", "pw-a", ["SCRAM-SHA-256"], iterations=4096)
    resp = serve(state, M.DescribeUserScramCredentialsRequest(users=None), 0)
    assert [(r.user, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in resp.results] == \
        [("alice", [(ScramMechanism.SCRAM_SHA_256, 4096)])]
    U = M.DescribeUserScramCredentialsRequest.UserName
    resp = serve(state, M.DescribeUserScramCredentialsRequest(users=[U(name="bob"), U(name="al"), U(name="al")]), 0)
    assert [(r.user, r.error_code) for r in resp.results] == [("bob", ResourceNotFoundError.code),
                                                             ("al", DuplicateResourceError.code)]
    import hashlib

    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac("sha512", b"pw-b", salt, 8192)
    A = M.AlterUserScramCredentialsRequest
    req = A(deletions=[A.ScramCredentialDeletion(name="alice", mechanism=1),
                       A.ScramCredentialDeletion(name="carol", mechanism=1),
                       A.ScramCredentialDeletion(name="dave", mechanism=0)],
            upsertions=[A.ScramCredentialUpsertion(name="bob", mechanism=2, iterations=8192, salt=salt,
                                                   salted_password=salted),
                        A.ScramCredentialUpsertion(name="eve", mechanism=2, iterations=10, salt=salt,
                                                   salted_password=salted)])
    resp = serve(state, req, 0)
    assert {r.user: r.error_code for r in resp.results} == {
        "alice": 0, "carol": ResourceNotFoundError.code, "dave": UnsupportedSaslMechanismError.code,
        "bob": 0, "eve": UnacceptableCredentialError.code}
    assert store.users() == {"bob": ["SCRAM-SHA-512"]}
    assert verify_password(store.get("bob", "SCRAM-SHA-512"), "pw-b")
    # one change per user and request, as Kafka
    req = A(deletions=[A.ScramCredentialDeletion(name="bob", mechanism=2)],
            upsertions=[A.ScramCredentialUpsertion(name="bob", mechanism=1, iterations=4096, salt=salt,
                                                   salted_password=salted)])
    assert [(r.user, r.error_code) for r in serve(state, req, 0).results] == [("bob", DuplicateResourceError.code)]
    assert store.users() == {"bob": ["SCRAM-SHA-512"]}
    assert credential_from_salted_password("SCRAM-SHA-512", salt, salted, 8192) == \
        make_credential("SCRAM-SHA-512", "pw-b", iterations=8192, salt=salt)


def test_telemetry_as_without_plugin(state):
    resp = serve(state, M.GetTelemetrySubscriptionsRequest(client_instance_id=uuid.UUID(int=0)), 0)
    assert resp.error_code == 0 and resp.client_instance_id.int and resp.requested_metrics == []
    assert resp.push_interval_ms == 300000 and resp.telemetry_max_bytes > 0
    push = M.PushTelemetryRequest(client_instance_id=resp.client_instance_id, subscription_id=resp.subscription_id,
                                  terminating=False, compression_type=0, metrics=b"x")
    assert serve(state, push, 0).error_code == 0  # right after the subscription: accepted
    assert serve(state, push, 0).error_code == ThrottlingQuotaExceededError.code  # before the interval
    again = M.GetTelemetrySubscriptionsRequest(client_instance_id=resp.client_instance_id)
    assert serve(state, again, 0).error_code == ThrottlingQuotaExceededError.code
    push.subscription_id += 1
    push.terminating = True  # a terminating push is never too early
    assert serve(state, push, 0).error_code == UnknownSubscriptionIdError.code
    push.subscription_id -= 1
    assert serve(state, push, 0).error_code == InvalidRequestError.code  # nothing after terminating
    push.client_instance_id = uuid.UUID(int=0)
    assert serve(state, push, 0).error_code == InvalidRequestError.code


def test_still_unserved_api_answers_unsupported_version_and_logs_it(state, caplog):
    # BrokerHeartbeat is controller-only (a broker's heartbeat to the controller).  (was
    # CreateDelegationToken, then UnregisterBroker, answered since as a one-node Kafka answers them)
    assert M.BrokerHeartbeatRequest.API_KEY not in HANDLERS
    with caplog.at_level(logging.WARNING, logger="kwire.broker.requests"):
        resp = serve(state, M.BrokerHeartbeatRequest(broker_id=1, broker_epoch=1), 0)
    assert resp.error_code == UnsupportedVersionError.code
    assert any("BrokerHeartbeat" in r.getMessage() for r in caplog.records)


def test_finalized_features_survive_restart(tmp_path):
    from kwire.broker.config import load_config
    from kwire.broker.state import BrokerState

    U = M.UpdateFeaturesRequest.FeatureUpdateKey
    down = M.UpdateFeaturesRequest(timeout_ms=10, validate_only=False,
                                   feature_updates=[U(feature="transaction.version", max_version_level=0, upgrade_type=2)])
    for expected in ({"metadata.version": 30, "transaction.version": 2, "group.version": 1, "share.version": 1,
                      "streams.version": 1},
                     {"metadata.version": 30, "group.version": 1, "share.version": 1, "streams.version": 1}):
        s = BrokerState(load_config(None, data_dir=tmp_path / "data", port=9092))
        try:
            assert {f.name: f.max_version_level for f in serve(s, M.ApiVersionsRequest(), 3).finalized_features} \
                == expected
            assert serve(s, down, 2).error_code == 0
        finally:
            s.close()


def test_unserved_version_of_served_api_is_logged_once_per_request(state, caplog):
    from kwire.broker.dispatch import _error_response
    from kwire.protocol.messages import request_class

    # a served api with a version the codec knows outside the served range, whose response has a
    # top-level error code
    key, version = next((k, v) for k, e in sorted(HANDLERS.items()) for v in (e.max_version + 1, e.min_version - 1)
                        if request_class(k).SPEC.min_version <= v <= request_class(k).SPEC.max_version
                        and _error_response(k, v, 0) is not None)
    cls = request_class(key)
    with caplog.at_level(logging.WARNING, logger="kwire.broker.requests"):
        resp = serve(state, cls(), version)
    assert resp.error_code == UnsupportedVersionError.code
    name = cls.SPEC.name.removesuffix("Request")
    assert [r.getMessage() for r in caplog.records if name in r.getMessage()] == [
        f"{name} v{version} (api key {key}) from 127.0.0.1:1 (client test) is not served "
        f"(v{HANDLERS[key].min_version}-{HANDLERS[key].max_version} are): answered UNSUPPORTED_VERSION"]
