"""WriteTxnMarkers from an admin (Kafka's Admin.abortTransaction): through dispatch, the marker ends
the producer's open transaction in the partition (the last stable offset moves past it and
read_committed fetches list the transaction as aborted), an unknown partition and
an older producer epoch fail as in Kafka, a transactional offset commit is ended with it, and
under an authorizer CLUSTER_ACTION is required."""

from __future__ import annotations

import pytest

from kwire.broker.auth import AclOperation, AclStore, ResourceType
from kwire.broker.config import load_config
from kwire.broker.handlers import supported_versions
from kwire.broker.handlers.api_versions import api_versions_response
from kwire.broker.state import BrokerState
from kwire.protocol import messages
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidProducerEpochError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from tests.security.test_handler_authz import _acl

from .test_transactions_handlers import (  # noqa: F401 - state is the fixture
    add_offsets,
    add_partitions,
    batch,
    call,
    fetch,
    init,
    produce,
    state,
    txn_offset_commit,
    values,
)

WRITE_TXN_MARKERS = messages.WriteTxnMarkersRequest.API_KEY
READ_COMMITTED = 1


def markers(pid: int, epoch: int, commit: bool, partitions: dict[str, list[int]], coordinator_epoch: int = -1):
    R = messages.WriteTxnMarkersRequest
    M = R.WritableTxnMarker
    return R(markers=[M(producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                        coordinator_epoch=coordinator_epoch,
                        topics=[M.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in partitions.items()])])


def errors(response) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for m in response.markers for t in m.topics for p in t.partitions}


def test_write_txn_markers_is_advertised_as_kafka_4_3_brokers_do():
    assert supported_versions()[WRITE_TXN_MARKERS] == (1, 2)
    assert any(k.api_key == WRITE_TXN_MARKERS for k in api_versions_response().api_keys)


@pytest.mark.parametrize("version", [1, 2])
def test_an_admin_abort_ends_a_hanging_transaction(state, version):  # noqa: F811
    code, pid, epoch = init(state, "hanging")
    assert code == 0 and add_partitions(state, "hanging", pid, epoch, {"t": [0]}) == {("t", 0): 0}
    assert produce(state, "t", 0, batch(pid, epoch, 0, n=3, tag=b"open"), "hanging").error_code == 0
    before = fetch(state, "t", 0, 0, READ_COMMITTED)
    assert before.last_stable_offset == 0 and values(before.records) == []
    answer = call(state, markers(pid, epoch, False, {"t": [0, 7], "nope": [0]}), version)
    assert errors(answer) == {("t", 0): 0, ("t", 7): UnknownTopicOrPartitionError.code,
                              ("nope", 0): UnknownTopicOrPartitionError.code}
    after = fetch(state, "t", 0, 0, READ_COMMITTED)
    assert after.last_stable_offset == after.high_watermark == 4  # three records and the marker
    # The records come with the aborted transaction's list, for the consumer to drop (Kafka's Fetch).
    assert values(after.records) == [b"open0", b"open1", b"open2"]
    assert [(a.producer_id, a.first_offset) for a in after.aborted_transactions] == [(pid, 0)]
    # The coordinator still had the transaction open: a new init bumps the epoch (and aborts it
    # again). A marker of the older epoch is then refused, and nothing is written.
    code, pid2, epoch2 = init(state, "hanging")
    assert code == 0 and pid2 == pid and epoch2 > epoch
    end = state.logs.get("t", 0).log_end_offset
    assert errors(call(state, markers(pid, epoch, True, {"t": [0]}), version)) == {
        ("t", 0): InvalidProducerEpochError.code}
    assert state.logs.get("t", 0).log_end_offset == end
    assert errors(call(state, markers(-1, -1, False, {"t": [0]}), version)) == {("t", 0): InvalidRequestError.code}


def test_a_commit_marker_in_the_offsets_topic_commits_the_staged_offsets(state):  # noqa: F811
    code, pid, epoch = init(state, "offsets")
    assert add_offsets(state, "offsets", pid, epoch, "g") == 0
    assert txn_offset_commit(state, "offsets", pid, epoch, "g", {("t", 0): 5}) == {("t", 0): 0}
    partition = state.coordinator.store.partition_of("g")
    answer = call(state, markers(pid, epoch, True, {"__consumer_offsets": [partition]}), 2)
    assert errors(answer) == {("__consumer_offsets", partition): 0}
    R = messages.OffsetFetchRequest
    fetched = call(state, R(group_id="g", topics=None, require_stable=True), 7)
    assert [(t.name, p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions] == \
        [("t", 0, 5)]


def test_write_txn_markers_needs_cluster_action(tmp_path):
    AclStore(tmp_path / "data").add([_acl("User:coordinator", AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                          "kafka-cluster")])
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    try:
        from tests.security.test_handler_authz import _create
        from tests.security.test_handler_authz import call as authz_call

        _create(s)
        denied = authz_call(s, "User:nobody", markers(1, 0, False, {"t": [0]}), 1)
        assert errors(denied) == {("t", 0): ClusterAuthorizationFailedError.code}
        assert s.logs.get("t", 0).log_end_offset == 0
        allowed = authz_call(s, "User:coordinator", markers(1, 0, False, {"t": [0]}), 1)
        assert errors(allowed) == {("t", 0): 0} and s.logs.get("t", 0).log_end_offset == 1
    finally:
        s.close()
