"""Share-group requests through the broker's dispatch (no sockets): the session and
acknowledgement errors Kafka answers, and a broker that keeps serving after them."""

from __future__ import annotations

import uuid

from kwire.protocol import messages
from kwire.protocol.errors import (
    InvalidRecordStateError,
    InvalidRequestError,
    InvalidShareSessionEpochError,
    ShareSessionNotFoundError,
    UnknownMemberIdError,
    UnknownTopicIdError,
)

from ..conftest import serve

HB, SF, SA = messages.ShareGroupHeartbeatRequest, messages.ShareFetchRequest, messages.ShareAcknowledgeRequest
FT, FP = SF.FetchTopic, SF.FetchTopic.FetchPartition
AT, AP = SA.AcknowledgeTopic, SA.AcknowledgeTopic.AcknowledgePartition
ACCEPT = 1


def setup_group(state, topic="t", n=5, group="g", member="m1"):
    state.topics.add(topic, 1)
    info = state.topics.get(topic)
    state.logs.create_partition(topic, 0, state.log_config_for(info))
    from kwire.protocol.records import RecordBatchBuilder
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(None, b"v%d" % i, 0)
    state.logs.get(topic, 0).append(b.build(), now_ms=0)
    state.group_configs.replace(group, {"share.auto.offset.reset": "earliest"})
    resp = serve(state, HB(group_id=group, member_id=member, member_epoch=0, rack_id=None,
                           subscribed_topic_names=[topic]), 1)
    assert resp.error_code == 0 and resp.assignment.topic_partitions[0].partitions == [0]
    return info.topic_id


def fetch(state, epoch, topic_id, acks=None, member="m1", forgotten=()):
    batches = [FP.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=[t])
               for f, last, t in (acks or [])]
    return serve(state, SF(group_id="g", member_id=member, share_session_epoch=epoch, max_wait_ms=0, min_bytes=1,
                           max_bytes=1 << 20, max_records=100, batch_size=100,
                           topics=[FT(topic_id=topic_id, partitions=[FP(partition_index=0,
                                                                        acknowledgement_batches=batches)])],
                           forgotten_topics_data=[]), 1)


def ack(state, epoch, topic_id, first, last, member="m1"):
    return serve(state, SA(group_id="g", member_id=member, share_session_epoch=epoch, topics=[AT(
        topic_id=topic_id, partitions=[AP(partition_index=0, acknowledgement_batches=[
            AP.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=[ACCEPT])])])]), 1)


def test_a_fetch_acquires_and_an_acknowledge_accepts(state):
    tid = setup_group(state)
    r = fetch(state, 0, tid)
    assert r.error_code == 0 and r.acquisition_lock_timeout_ms == 30_000
    p = r.responses[0].partitions[0]
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records] == [(0, 4, 1)]
    assert ack(state, 1, tid, 0, 4).responses[0].partitions[0].error_code == 0
    assert state.share.partitions[("g", "t", 0)].start_offset == 5


def test_session_errors(state):
    tid = setup_group(state)
    assert fetch(state, 3, tid).error_code == ShareSessionNotFoundError.code
    assert ack(state, 2, tid, 0, 0).error_code == ShareSessionNotFoundError.code
    assert fetch(state, 0, tid).error_code == 0
    assert fetch(state, 5, tid).error_code == InvalidShareSessionEpochError.code  # out of order
    assert fetch(state, 1, tid).error_code == 0
    assert fetch(state, 1, tid).error_code == InvalidShareSessionEpochError.code  # a replay
    # Acknowledgements can't open a session.
    assert ack(state, 0, tid, 0, 0).error_code == InvalidShareSessionEpochError.code
    assert fetch(state, 0, tid, acks=[(0, 0, ACCEPT)]).error_code == InvalidShareSessionEpochError.code


def test_acknowledging_records_not_acquired_is_invalid_record_state(state):
    tid = setup_group(state)
    r = fetch(state, 0, tid)
    assert r.responses[0].partitions[0].acquired_records
    r = ack(state, 1, tid, 3, 9)  # 5-9 never delivered
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == InvalidRecordStateError.code
    # Another member can't acknowledge them either.
    assert fetch(state, 0, tid, member="m2").error_code == 0
    r = ack(state, 1, tid, 0, 0, member="m2")
    assert r.responses[0].partitions[0].error_code == InvalidRecordStateError.code
    # The piggy-backed form gives the partition's AcknowledgeErrorCode.
    r = fetch(state, 2, tid, acks=[(7, 7, ACCEPT)])
    assert r.error_code == 0 and r.responses[0].partitions[0].acknowledge_error_code == InvalidRecordStateError.code
    # No records to give: empty, never null (librdkafka fails the whole response on a null).
    assert r.responses[0].partitions[0].records is not None
    # And the owner still can.
    assert ack(state, 3, tid, 0, 4).responses[0].partitions[0].error_code == 0


def test_bad_requests_get_errors_and_the_broker_keeps_serving(state):
    tid = setup_group(state)
    assert fetch(state, 0, uuid.uuid4()).responses[0].partitions[0].error_code == UnknownTopicIdError.code
    r = serve(state, HB(group_id="g", member_id="", member_epoch=0, rack_id=None, subscribed_topic_names=["t"]), 1)
    assert r.error_code == InvalidRequestError.code
    r = serve(state, HB(group_id="g", member_id="ghost", member_epoch=4, rack_id=None, subscribed_topic_names=None), 1)
    assert r.error_code == UnknownMemberIdError.code
    r = fetch(state, 1, tid, acks=[(4, 0, ACCEPT)])  # last < first
    p = r.responses[0].partitions[0]
    assert p.acknowledge_error_code == InvalidRequestError.code
    # Still serving: the same request acquired the records, and they can be accepted.
    assert p.error_code == 0 and p.acquired_records[0].first_offset == 0
    assert ack(state, 2, tid, 0, 4).responses[0].partitions[0].error_code == 0


def test_the_final_epoch_closes_the_session_and_releases_what_the_member_held(state):
    tid = setup_group(state)
    fetch(state, 0, tid)
    r = ack(state, -1, tid, 0, 1)
    assert r.error_code == 0
    assert fetch(state, 2, tid).error_code == ShareSessionNotFoundError.code
    r = fetch(state, 0, tid, member="m2")
    acquired = r.responses[0].partitions[0].acquired_records
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired] == [(2, 4, 2)]


DSO, ASO, DLO = (messages.DescribeShareGroupOffsetsRequest, messages.AlterShareGroupOffsetsRequest,
                 messages.DeleteShareGroupOffsetsRequest)


def describe_offsets(state, group="g", topics=None):
    T = DSO.DescribeShareGroupOffsetsRequestGroup.DescribeShareGroupOffsetsRequestTopic
    req = DSO(groups=[DSO.DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=None if topics is None else [T(topic_name=t, partitions=ps) for t, ps in topics])])
    g = serve(state, req, 0).groups[0]
    return g.error_code, {(t.topic_name, p.partition_index): (p.start_offset, p.error_code)
                          for t in g.topics for p in t.partitions}


def test_describe_alter_and_delete_share_group_offsets(state):
    from kwire.protocol.errors import GroupIdNotFoundError, NonEmptyGroupError, UnknownTopicOrPartitionError
    tid = setup_group(state)
    assert describe_offsets(state) == (0, {("t", 0): (0, 0)})
    fetch(state, 0, tid)
    ack(state, 1, tid, 0, 2)
    assert describe_offsets(state) == (0, {("t", 0): (3, 0)})
    assert describe_offsets(state, topics=[("t", [0, 7]), ("nope", [0])])[1] == {
        ("t", 0): (3, 0), ("t", 7): (-1, UnknownTopicOrPartitionError.code),
        ("nope", 0): (-1, UnknownTopicOrPartitionError.code)}
    assert describe_offsets(state, group="other")[0] == GroupIdNotFoundError.code
    AT_, AP_ = ASO.AlterShareGroupOffsetsRequestTopic, ASO.AlterShareGroupOffsetsRequestTopic.\
        AlterShareGroupOffsetsRequestPartition
    alter = ASO(group_id="g", topics=[AT_(topic_name="t", partitions=[AP_(partition_index=0, start_offset=1)])])
    assert serve(state, alter, 0).error_code == NonEmptyGroupError.code  # m1 is still a member
    serve(state, HB(group_id="g", member_id="m1", member_epoch=-1, rack_id=None, subscribed_topic_names=None), 1)
    r = serve(state, alter, 0)
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
    assert describe_offsets(state) == (0, {("t", 0): (1, 0)})
    r = serve(state, DLO(group_id="g", topics=[DLO.DeleteShareGroupOffsetsRequestTopic(topic_name="t"),
                                               DLO.DeleteShareGroupOffsetsRequestTopic(topic_name="u")]), 0)
    assert r.error_code == 0
    assert [(t.topic_name, t.error_code) for t in r.responses] == [("t", 0), ("u", UnknownTopicOrPartitionError.code)]
    assert describe_offsets(state)[1] == {}


def test_list_groups_lists_share_groups_by_type(state):
    setup_group(state)
    L = messages.ListGroupsRequest
    by_type = {}
    for types in ([], ["share"], ["Share"], ["classic"], ["consumer"]):
        r = serve(state, L(states_filter=[], types_filter=types), 5)
        by_type[tuple(types)] = [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in r.groups]
    assert by_type[()] == by_type[("share",)] == by_type[("Share",)] == [("g", "share", "Stable", "share")]
    assert by_type[("classic",)] == by_type[("consumer",)] == []
    r = serve(state, L(states_filter=["Empty"], types_filter=["share"]), 5)
    assert r.groups == []


def test_forgetting_a_partition_releases_the_members_records_there(state):
    tid = setup_group(state)
    assert fetch(state, 0, tid).responses[0].partitions[0].acquired_records
    forget = SF(group_id="g", member_id="m1", share_session_epoch=1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                max_records=100, batch_size=100, topics=[],
                forgotten_topics_data=[SF.ForgottenTopic(topic_id=tid, partitions=[0])])
    assert serve(state, forget, 1).error_code == 0
    r = fetch(state, 0, tid, member="m2")
    assert [(a.first_offset, a.last_offset, a.delivery_count)
            for a in r.responses[0].partitions[0].acquired_records] == [(0, 4, 2)]


def test_share_fetch_v2_record_limit_mode(state):
    tid = setup_group(state)
    req = SF(group_id="g", member_id="m1", share_session_epoch=0, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
             max_records=2, batch_size=2, share_acquire_mode=1,
             topics=[FT(topic_id=tid, partitions=[FP(partition_index=0, acknowledgement_batches=[])])],
             forgotten_topics_data=[])
    r = serve(state, req, 2)
    assert [(a.first_offset, a.last_offset) for a in r.responses[0].partitions[0].acquired_records] == [(0, 1)]
    req.share_acquire_mode, req.share_session_epoch = 0, 1  # batch-optimized: the rest of the batch
    r = serve(state, req, 2)
    assert [(a.first_offset, a.last_offset) for a in r.responses[0].partitions[0].acquired_records] == [(2, 4)]


def test_a_topic_created_again_starts_a_new_share_partition(state):
    tid = setup_group(state)
    fetch(state, 0, tid)
    ack(state, 1, tid, 0, 4)
    assert state.share.partitions[("g", "t", 0)].start_offset == 5
    D, C = messages.DeleteTopicsRequest, messages.CreateTopicsRequest
    assert serve(state, D(topic_names=["t"], timeout_ms=1000), 5).responses[0].error_code == 0
    assert serve(state, C(topics=[C.CreatableTopic(name="t", num_partitions=1, replication_factor=1, assignments=[],
                                                   configs=[])], timeout_ms=1000, validate_only=False),
                 5).topics[0].error_code == 0
    new_tid = state.topics.get("t").topic_id
    assert new_tid != tid
    r = serve(state, HB(group_id="g", member_id="m1", member_epoch=0, rack_id=None, subscribed_topic_names=["t"]), 1)
    assert r.error_code == 0
    assert state.share.partitions[("g", "t", 0)].start_offset == 0  # not the old topic's 5


def test_a_member_whose_session_times_out_loses_its_records(state):
    tid = setup_group(state)
    # Locks outlast the session: what frees the records here is the member's expiry.
    state.group_configs.replace("g", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "60000"})
    assert fetch(state, 0, tid).responses[0].partitions[0].acquired_records
    clock = state.share.now_ms
    state.share.now_ms = lambda: clock() + 45_001  # group.share.session.timeout.ms, default 45 s
    r = serve(state, HB(group_id="g", member_id="m2", member_epoch=0, rack_id=None, subscribed_topic_names=["t"]), 1)
    assert r.error_code == 0
    assert list(state.share.groups.group("g").members) == ["m2"]
    acquired = fetch(state, 0, tid, member="m2").responses[0].partitions[0].acquired_records
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired] == [(0, 4, 2)]
    assert fetch(state, 2, tid).error_code == ShareSessionNotFoundError.code  # its session went with it


def test_read_committed_share_groups_skip_aborted_records(state):
    from kwire.protocol.records import RecordBatchBuilder
    tid = setup_group(state)  # offsets 0-4 committed plain records
    state.group_configs.replace("g", {"share.auto.offset.reset": "earliest",
                                      "share.isolation.level": "read_committed"})
    log = state.logs.get("t", 0)
    for commit, pid in ((False, 7), (True, 8)):
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
        b.append(None, b"txn-%d" % pid, 0)
        log.append(b.build(), now_ms=0)
        log.append_marker(pid, 0, commit)
    # 5: aborted (pid 7), 6: its marker, 7: committed (pid 8), 8: its marker
    r = fetch(state, 0, tid)
    acquired = [(a.first_offset, a.last_offset) for a in r.responses[0].partitions[0].acquired_records]
    assert acquired == [(0, 4), (7, 7)]


def test_share_group_describe(state):
    from kwire.protocol.errors import GroupIdNotFoundError
    tid = setup_group(state)
    D = messages.ShareGroupDescribeRequest
    r = serve(state, D(group_ids=["g", "nope"], include_authorized_operations=False), 1)
    g, missing = r.groups
    assert (g.error_code, g.group_state, g.assignor_name, g.group_epoch) == (0, "Stable", "simple", 1)
    [m] = g.members
    assert (m.member_id, m.member_epoch, m.client_id, m.subscribed_topic_names) == ("m1", 1, "test", ["t"])
    assert [(tp.topic_id, tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions] == [(tid, "t", [0])]
    assert missing.error_code == GroupIdNotFoundError.code


def test_a_classic_group_id_is_not_a_share_group(state):
    from kwire.protocol.errors import GroupIdNotFoundError
    state.topics.add("t", 1)
    J = messages.JoinGroupRequest
    serve(state, J(group_id="classic", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                   group_instance_id=None, protocol_type="consumer",
                   protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")]), 5)
    r = serve(state, HB(group_id="classic", member_id="m", member_epoch=0, rack_id=None,
                        subscribed_topic_names=["t"]), 1)
    assert r.error_code == GroupIdNotFoundError.code


def test_delete_groups_deletes_an_empty_share_group_and_its_state(state):
    from kwire.protocol.errors import NonEmptyGroupError
    tid = setup_group(state)
    fetch(state, 0, tid)
    ack(state, 1, tid, 0, 1)
    D = messages.DeleteGroupsRequest
    assert serve(state, D(groups_names=["g"]), 2).results[0].error_code == NonEmptyGroupError.code
    serve(state, HB(group_id="g", member_id="m1", member_epoch=-1, rack_id=None, subscribed_topic_names=None), 1)
    assert serve(state, D(groups_names=["g"]), 2).results[0].error_code == 0
    assert not state.share.is_share_group("g")
    assert serve(state, messages.ListGroupsRequest(states_filter=[], types_filter=["share"]), 5).groups == []
    # Its state is gone for good: a restarted broker does not bring it back.
    from kwire.broker.share import ShareManager
    assert not ShareManager(state).is_share_group("g")


def test_describe_share_group_offsets_v1_gives_the_lag(state):
    """KIP-1226: the records from the start offset to the end not yet done with; -1 where the
    group has no state (v0 answers have no lag at all)."""
    tid = setup_group(state, n=10)
    T = DSO.DescribeShareGroupOffsetsRequestGroup.DescribeShareGroupOffsetsRequestTopic
    req = DSO(groups=[DSO.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=[T(topic_name="t",
                                                                                       partitions=[0, 7])])])

    def lags():
        [g] = serve(state, req, 1).groups
        assert g.error_code == 0
        return {p.partition_index: (p.start_offset, p.lag) for p in g.topics[0].partitions}

    assert lags() == {0: (0, 10), 7: (-1, -1)}  # partition 7 does not exist: no lag
    assert fetch(state, 0, tid).error_code == 0
    r = fetch(state, 1, tid, acks=[(0, 1, ACCEPT), (4, 5, ACCEPT)])
    assert r.responses[0].partitions[0].acknowledge_error_code == 0
    assert lags()[0] == (2, 6)  # 2-9 are 8 records, 4 and 5 of them done
    [g] = serve(state, req, 0).groups
    assert g.topics[0].partitions[0].start_offset == 2
