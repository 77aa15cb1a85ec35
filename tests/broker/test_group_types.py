"""A group id belongs to one group type at a time (Kafka 4's GroupMetadataManager): the classic
and consumer protocols do not take a share group's id, and a share group does not take theirs.
Each refusal is Kafka's error, and the share group goes on working."""

from __future__ import annotations

from kwire.broker.config import load_config
from kwire.broker.state import BrokerState
from kwire.protocol import messages as M
from kwire.protocol.errors import (
    GroupIdNotFoundError,
    InconsistentGroupProtocolError,
)

from .conftest import serve


def _share_group(state, group="shared", topic="t"):
    state.topics.add(topic, 1)
    state.logs.create_partition(topic, 0, state.log_config_for(state.topics.get(topic)))
    resp = serve(state, M.ShareGroupHeartbeatRequest(group_id=group, member_id="s1", member_epoch=0, rack_id=None,
                                                     subscribed_topic_names=[topic]), 1)
    assert resp.error_code == 0, resp
    return resp


def _join(state, group, version=9):
    return serve(state, M.JoinGroupRequest(
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        group_instance_id=None, protocol_type="consumer", reason=None,
        protocols=[M.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]), version)


def _consumer_heartbeat(state, group):
    return serve(state, M.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id="c1", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout_ms=5000,
        subscribed_topic_names=["t"], subscribed_topic_regex=None, server_assignor=None, topic_partitions=[]), 1)


def test_classic_and_consumer_protocols_do_not_take_a_share_groups_id(state):
    _share_group(state)
    for version in (0, 5, 9):
        joined = _join(state, "shared", version)
        assert (joined.error_code, joined.member_id) == (InconsistentGroupProtocolError.code, "")
    beat = _consumer_heartbeat(state, "shared")
    assert beat.error_code == GroupIdNotFoundError.code
    assert beat.error_message == "Group shared is not a consumer group."
    assert state.coordinator.group("shared") is None and state.consumer_groups.group("shared") is None
    commit = serve(state, M.OffsetCommitRequest(
        group_id="shared", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[M.OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
            M.OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=3, committed_leader_epoch=-1, committed_metadata="")])]), 8)
    assert commit.topics[0].partitions[0].error_code == GroupIdNotFoundError.code
    # The share group itself is untouched: its member still heartbeats.
    again = serve(state, M.ShareGroupHeartbeatRequest(group_id="shared", member_id="s1", member_epoch=1, rack_id=None,
                                                      subscribed_topic_names=None), 1)
    assert again.error_code == 0 and again.member_epoch == 1


def test_a_share_group_does_not_take_a_consumer_groups_id(state):
    state.topics.add("t", 1)
    state.logs.create_partition("t", 0, state.log_config_for(state.topics.get("t")))
    assert _consumer_heartbeat(state, "modern").error_code == 0
    refused = serve(state, M.ShareGroupHeartbeatRequest(group_id="modern", member_id="s1", member_epoch=0,
                                                        rack_id=None, subscribed_topic_names=["t"]), 1)
    assert refused.error_code == GroupIdNotFoundError.code
    assert refused.error_message == "Group modern is not a share group."
    assert _join(state, "fresh").error_code != InconsistentGroupProtocolError.code  # no share group: joins as ever


def test_a_share_group_keeps_its_id_across_a_restart(tmp_path):
    """After a restart the share manager starts with the first share request; before it, the
    group's ShareGroup* records in __consumer_offsets still hold the id."""
    config = load_config(None, data_dir=tmp_path / "data", port=9092)
    first = BrokerState(config)
    try:
        _share_group(first)
    finally:
        first.close()
    again = BrokerState(config)
    try:
        assert getattr(again, "share", None) is None  # nothing has asked for share groups yet
        joined = _join(again, "shared")
        assert (joined.error_code, joined.member_id) == (InconsistentGroupProtocolError.code, "")
        assert _consumer_heartbeat(again, "shared").error_code == GroupIdNotFoundError.code
    finally:
        again.close()
