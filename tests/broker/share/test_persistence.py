"""Share-group state across restarts: ShareUpdate deltas between ShareSnapshots in
``__share_group_state`` (replayed as last snapshot + later updates), the ShareGroup* records in
``__consumer_offsets`` (members come back with their epochs), fsync "always", and bad records."""

from __future__ import annotations

import logging
import uuid

import pytest

from kwire.broker.config import load_config
from kwire.broker.handlers.share_groups import share_of
from kwire.broker.share.partition import AcknowledgeType as A
from kwire.broker.share.partition import RecordState as S
from kwire.broker.share.partition import SharePartition
from kwire.broker.share.persister import PersistedState, SharePersister, combine
from kwire.broker.state import BrokerState
from kwire.protocol import messages
from kwire.protocol.coordinator_records import SHARE_GROUP_STATE_TOPIC, encode_key
from kwire.protocol.records import RecordBatchBuilder

from ..conftest import serve
from .test_handlers import HB, ack, fetch, setup_group

LOCK = 30_000
DESC = messages.ShareGroupDescribeRequest


def reopen(state: BrokerState, **settings) -> BrokerState:
    path = state.data_dir
    state.close()
    return BrokerState(load_config(None, data_dir=path, port=9092, **settings))


# -- the state records: snapshot + updates -----------------------------------------------------
def test_combine_lays_new_runs_over_old_ones_and_drops_what_is_below_the_start():
    old = [(10, 19, S.AVAILABLE, 1), (20, 29, S.ACKNOWLEDGED, 1)]
    new = [(15, 22, S.ARCHIVED, 2)]
    assert combine(old, new, 12) == [(12, 14, S.AVAILABLE, 1), (15, 22, S.ARCHIVED, 2), (23, 29, S.ACKNOWLEDGED, 1)]
    assert combine(old, [], 25) == [(25, 29, S.ACKNOWLEDGED, 1)]
    assert combine([], [(0, 4, S.AVAILABLE, 1)], 3) == [(3, 4, S.AVAILABLE, 1)]


def test_an_acquisition_alone_is_not_written_and_updates_hold_the_changes_since_the_snapshot():
    sp = SharePartition(0)
    assert sp.take_changes() == (True, [])  # a new share partition: its first snapshot
    sp.acquire("a", [(0, 99)], 500, LOCK, now_ms=0)
    assert sp.take_changes() is None  # Kafka's SharePartition does not persist an acquisition
    sp.acknowledge("a", 10, 19, [A.RELEASE], LOCK, now_ms=0)
    assert sp.take_changes() == (False, [(10, 19, S.AVAILABLE, 1)])
    assert sp.take_changes() is None
    sp.acknowledge("a", 0, 9, [A.ACCEPT], LOCK, now_ms=0)
    # An update holds every change since the snapshot (10-19 again), with the new start offset.
    assert sp.start_offset == 10 and sp.take_changes() == (False, [(10, 19, S.AVAILABLE, 1)])
    sp.acknowledge("a", 20, 29, [A.REJECT], LOCK, now_ms=0)
    assert sp.take_changes() == (False, [(10, 19, S.AVAILABLE, 1), (20, 29, S.ARCHIVED, 1)])
    sp.acknowledge("a", 30, 30, [A.ACCEPT], LOCK, now_ms=0)
    assert sp.take_changes(snapshot=True) == (True, sp.state_batches())
    sp.acknowledge("a", 31, 31, [A.ACCEPT], LOCK, now_ms=0)
    assert sp.take_changes() == (False, [(31, 31, S.ACKNOWLEDGED, 1)])  # changes start over at a snapshot


def test_per_offset_acknowledgements_split_one_range_and_merge_back():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 499)], 500, LOCK, now_ms=0)
    assert len(sp._runs) == 1  # one fetched batch, one in-flight range
    sp.acknowledge("a", 100, 103, [A.ACCEPT, A.REJECT, A.RELEASE, A.RELEASE], LOCK, now_ms=0)
    assert [sp.state_of(o) for o in (99, 100, 101, 102, 103, 104)] == [
        S.ACQUIRED, S.ACKNOWLEDGED, S.ARCHIVED, S.AVAILABLE, S.AVAILABLE, S.ACQUIRED]
    sp.acknowledge("a", 0, 99, [A.ACCEPT], LOCK, now_ms=0)
    sp.acknowledge("a", 104, 499, [A.ACCEPT], LOCK, now_ms=0)
    assert sp.start_offset == 102 and sp.state_batches() == [(102, 103, S.AVAILABLE, 1), (104, 499, S.ACKNOWLEDGED, 1)]


def test_updates_between_snapshots_replay_to_the_same_state(state):
    tid = setup_group(state, n=20)
    mgr = share_of(state)
    mgr.persister.snapshot_every = 3
    epoch = 0
    for first in range(0, 20, 2):  # acquire all, then acknowledge two at a time: 10 writes
        r = fetch(state, epoch, tid)
        epoch += 1
        assert r.error_code == 0
        assert ack(state, epoch, tid, first, first + 1).responses[0].partitions[0].error_code == 0
        epoch += 1
    sp = mgr.partitions[("g", "t", 0)]
    assert sp.start_offset == 20
    # 1 initial snapshot; then per 3 updates one snapshot.
    assert mgr.persister.snapshots >= 3 and mgr.persister.updates >= 6
    replayed = SharePersister(state.internal_topics).load_all()
    assert replayed[("g", tid, 0)].start_offset == 20


def test_a_restart_replays_the_last_snapshot_and_the_updates_after_it(state):
    tid = setup_group(state, n=10)
    mgr = share_of(state)
    mgr.persister.snapshot_every = 2
    assert fetch(state, 0, tid).error_code == 0  # acquires 0-9 (one batch)
    r = fetch(state, 1, tid, acks=[(0, 2, A.ACCEPT), (3, 3, A.RELEASE), (4, 4, A.REJECT)])
    assert r.responses[0].partitions[0].acknowledge_error_code == 0
    assert ack(state, 2, tid, 5, 5).error_code == 0  # a second update
    assert ack(state, 3, tid, 6, 6).error_code == 0  # a snapshot (2 updates since the last)
    assert ack(state, 4, tid, 7, 7).error_code == 0  # an update after it
    assert (mgr.persister.snapshots, mgr.persister.updates) == (2, 3)
    # What was written: the second fetch acquired 3 again (its second delivery), which the
    # snapshot holds (a snapshot is the whole in-memory state, records in flight as AVAILABLE with
    # their counts); the updates hold only what the acknowledgements changed.
    expected = [(3, 3, S.AVAILABLE, 2), (4, 4, S.ARCHIVED, 1), (5, 7, S.ACKNOWLEDGED, 1)]
    state = reopen(state)
    try:
        sp = share_of(state).partition("g", "t", 0)
        assert sp.start_offset == 3 and [b for b in sp.state_batches() if b[0] < 8] == expected
        assert sp.state_of(4) == S.ARCHIVED and sp.delivery_count_of(8) == 1
    finally:
        state.close()


def test_fsync_always_flushes_the_state_before_answering(tmp_path):
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", port=9092, fsync="always"))
    try:
        tid = setup_group(state, n=5)
        before = state.durability.flushes
        assert fetch(state, 0, tid).error_code == 0
        assert ack(state, 1, tid, 0, 4).error_code == 0
        assert state.durability.flushes > before  # the acknowledgement's ShareUpdate was fsynced
        assert share_of(state).persister.written_logs() == []
    finally:
        state.close()


def test_bad_records_in_the_state_topic_are_skipped_and_the_rest_loads(state, caplog):
    tid = setup_group(state, n=5)
    assert fetch(state, 0, tid).error_code == 0
    assert ack(state, 1, tid, 0, 1).error_code == 0
    mgr = share_of(state)
    p = state.internal_topics.partition_of(SHARE_GROUP_STATE_TOPIC, f"g:{tid}:0")
    log = state.internal_topics.partition_log(SHARE_GROUP_STATE_TOPIC, p)
    b = RecordBatchBuilder()
    b.append(b"\x00\x07garbage", b"\x01\x02", 0)  # an unknown key version
    b.append(encode_key(messages.OffsetCommitKey(group="x", topic="t", partition=0)), b"\x00", 0)  # wrong topic
    log.append(b.build(), now_ms=0)
    assert mgr.partitions[("g", "t", 0)].start_offset == 2
    with caplog.at_level(logging.WARNING, logger="kwire.broker.share"):
        state = reopen(state)
    try:
        assert share_of(state).partition("g", "t", 0).start_offset == 2
        assert sum("skipped" in r.getMessage() for r in caplog.records) >= 2
    finally:
        state.close()


def test_persister_refuses_a_bad_snapshot_cadence(state):
    with pytest.raises(ValueError, match="snapshot_every"):
        SharePersister(state.internal_topics, snapshot_every=0)
    persister = SharePersister(state.internal_topics)
    tid = uuid.uuid4()
    persister.write("g", tid, 0, PersistedState(0, 5, [(5, 6, S.AVAILABLE, 1)]), snapshot=False)
    assert persister.snapshots == 1  # the first write of a key is a snapshot whatever is asked


# -- the group records: members come back with their epochs ---------------------------------------
def describe(state, group="g"):
    [g] = serve(state, DESC(group_ids=[group], include_authorized_operations=False), 1).groups
    return g


def test_members_and_epochs_survive_a_restart_and_heartbeat_on(state):
    setup_group(state)  # m1 joins
    r = serve(state, HB(group_id="g", member_id="m2", member_epoch=0, rack_id="r2", subscribed_topic_names=["t"]), 1)
    assert r.error_code == 0
    before = describe(state)
    epochs = {m.member_id: m.member_epoch for m in before.members}
    assert before.group_epoch >= 2 and set(epochs) == {"m1", "m2"}
    state = reopen(state)
    try:
        after = describe(state)
        assert after.error_code == 0 and after.group_epoch == before.group_epoch
        assert after.assignment_epoch == before.assignment_epoch
        assert {m.member_id: m.member_epoch for m in after.members} == epochs
        m2 = next(m for m in after.members if m.member_id == "m2")
        assert m2.rack_id == "r2" and m2.subscribed_topic_names == ["t"]
        # The members heartbeat on with the epochs they had (no rejoin, no fencing); m1, behind
        # since m2 joined, catches up with the group epoch as it would have without the restart.
        for member, epoch in epochs.items():
            r = serve(state, HB(group_id="g", member_id=member, member_epoch=epoch, rack_id=None,
                                subscribed_topic_names=None), 1)
            assert r.error_code == 0 and r.member_epoch == before.group_epoch
        assert describe(state).group_epoch == before.group_epoch
        listed = serve(state, messages.ListGroupsRequest(states_filter=[], types_filter=["share"]), 5).groups
        assert [(g.group_id, g.group_type, g.group_state) for g in listed] == [("g", "share", "Stable")]
        # A member leaving is written too: after another restart only m1 is there.
        r = serve(state, HB(group_id="g", member_id="m2", member_epoch=-1, rack_id=None,
                            subscribed_topic_names=None), 1)
        assert r.error_code == 0
        state = reopen(state)
        assert [m.member_id for m in describe(state).members] == ["m1"]
    finally:
        state.close()


def test_a_deleted_share_group_stays_deleted_after_a_restart(state):
    setup_group(state)
    assert serve(state, HB(group_id="g", member_id="m1", member_epoch=-1, rack_id=None,
                           subscribed_topic_names=None), 1).error_code == 0
    [res] = serve(state, messages.DeleteGroupsRequest(groups_names=["g"]), 2).results
    assert res.error_code == 0
    state = reopen(state)
    try:
        assert describe(state).error_code != 0
        listed = serve(state, messages.ListGroupsRequest(states_filter=[], types_filter=[]), 5).groups
        assert "g" not in [g.group_id for g in listed]
    finally:
        state.close()


def test_an_unknown_member_after_a_restart_is_told_so(state):
    setup_group(state)
    state = reopen(state)
    try:
        r = serve(state, HB(group_id="g", member_id="stranger", member_epoch=3, rack_id=None,
                            subscribed_topic_names=None), 1)
        assert r.error_code != 0 and r.member_epoch == -1
        assert describe(state).error_code == 0  # the broker keeps serving the group
    finally:
        state.close()


def test_the_snapshot_cadence_is_a_broker_config(tmp_path):
    from kwire.broker.config import ConfigError
    with pytest.raises(ConfigError, match="share_coordinator_snapshot_update_records_per_snapshot"):
        load_config(None, data_dir=tmp_path / "x", share_coordinator_snapshot_update_records_per_snapshot=0)
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", port=9092,
                                    share_coordinator_snapshot_update_records_per_snapshot=2))
    try:
        assert share_of(state).persister.snapshot_every == 2
    finally:
        state.close()


def test_an_update_without_its_snapshot_is_taken_as_the_state(state):
    """What Kafka's shard does with a ShareUpdate whose ShareSnapshot is gone (compacted)."""
    persister = SharePersister(state.internal_topics)
    tid = uuid.uuid4()
    out: dict = {}
    key = encode_key(messages.ShareUpdateKey(group_id="g", topic_id=tid, partition=0), version=1)
    V = messages.ShareUpdateValue
    from kwire.protocol.coordinator_records import encode_value
    value = encode_value(V(snapshot_epoch=0, leader_epoch=0, start_offset=4, state_batches=[
        V.StateBatch(first_offset=2, last_offset=6, delivery_state=int(S.ARCHIVED), delivery_count=1)]), version=0)
    persister.apply(out, key, value)
    assert out[("g", tid, 0)].start_offset == 4 and out[("g", tid, 0)].batches == [(4, 6, S.ARCHIVED, 1)]
    persister.apply(out, key.replace(b"\x00\x01", b"\x00\x00", 1), None)  # a snapshot tombstone
    assert ("g", tid, 0) not in out


def test_while_the_groups_partition_loads_the_group_answers_load_in_progress(state):
    """As Kafka's coordinator runtime: COORDINATOR_LOAD_IN_PROGRESS (retriable) until the
    ``__consumer_offsets`` partition holding the group is loaded, then the group as it was."""
    from kwire.protocol.errors import CoordinatorLoadInProgressError

    from ..coordinator.test_loading import HeldExecutor
    setup_group(state)
    epoch = describe(state).group_epoch
    path = state.data_dir
    state.close()
    state = BrokerState(load_config(None, data_dir=path, port=9092), load_coordinators=False)
    executor = HeldExecutor()
    state.start_loading(post=lambda fn: fn(), executor=executor, schedule=executor.schedule)
    try:
        r = serve(state, HB(group_id="g", member_id="m1", member_epoch=epoch, rack_id=None,
                            subscribed_topic_names=None), 1)
        assert r.error_code == CoordinatorLoadInProgressError.code
        assert describe(state).error_code == CoordinatorLoadInProgressError.code
        executor.run_all()
        r = serve(state, HB(group_id="g", member_id="m1", member_epoch=epoch, rack_id=None,
                            subscribed_topic_names=None), 1)
        assert r.error_code == 0 and r.member_epoch == epoch
    finally:
        state.close()


def test_bad_share_group_records_in_the_offsets_topic_are_skipped(state):
    """An unreadable ShareGroup* value is noted and skipped; member records without their group's
    ShareGroupMetadata make no group; the good group loads and the broker serves."""
    from kwire.protocol.coordinator_records import encode_value
    setup_group(state)
    store = state.coordinator.store
    member = messages.ShareGroupMemberMetadataValue(rack_id=None, client_id="c", client_host="/h",
                                                    subscribed_topic_names=["t"])
    store.append_records("orphan", [(encode_key(messages.ShareGroupMemberMetadataKey(group_id="orphan",
                                                                                    member_id="x")),
                                     encode_value(member, 0))])
    store.append_records("broken", [(encode_key(messages.ShareGroupMetadataKey(group_id="broken")), b"\xff\xff")])
    state = reopen(state)
    try:
        listed = serve(state, messages.ListGroupsRequest(states_filter=[], types_filter=[]), 5).groups
        assert [(g.group_id, g.group_type) for g in listed] == [("g", "share")]
        [orphan] = serve(state, DESC(group_ids=["orphan"], include_authorized_operations=False), 1).groups
        assert orphan.error_code != 0
        assert len(state.coordinator.store.findings) == 1  # the unreadable value, noted
        assert describe(state).error_code == 0 and [m.member_id for m in describe(state).members] == ["m1"]
    finally:
        state.close()


def test_a_state_record_with_an_unknown_delivery_state_is_refused(state):
    persister = SharePersister(state.internal_topics)
    tid = uuid.uuid4()
    V = messages.ShareSnapshotValue
    from kwire.protocol.coordinator_records import encode_value
    key = encode_key(messages.ShareSnapshotKey(group_id="g", topic_id=tid, partition=0), version=0)
    for first, last, st in ((0, 4, 3), (5, 1, 0)):
        value = encode_value(V(snapshot_epoch=0, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=[
            V.StateBatch(first_offset=first, last_offset=last, delivery_state=st, delivery_count=1)]), version=0)
        with pytest.raises(ValueError, match="not one Kafka writes"):
            persister.apply({}, key, value)


def test_steady_heartbeats_write_nothing_and_a_change_writes_only_what_changed(state):
    from kwire.protocol.coordinator_records import OFFSETS_TOPIC
    setup_group(state)
    log = state.internal_topics.partition_log(OFFSETS_TOPIC, state.coordinator.store.partition_of("g"))
    epoch = describe(state).members[0].member_epoch
    end = log.log_end_offset
    for _ in range(3):
        r = serve(state, HB(group_id="g", member_id="m1", member_epoch=epoch, rack_id=None,
                            subscribed_topic_names=None), 1)
        assert r.error_code == 0
    assert log.log_end_offset == end
    r = serve(state, HB(group_id="g", member_id="m1", member_epoch=epoch, rack_id="r9",
                        subscribed_topic_names=None), 1)
    assert r.error_code == 0 and log.log_end_offset == end + 1  # its ShareGroupMemberMetadata alone


def test_what_compaction_leaves_of_the_state_topic_replays_to_the_same_state(state):
    """On the compacted ``__share_group_state`` only each key's last record survives (the last
    snapshot, the last update): since an update holds every change since its snapshot, that is
    the same state as the replay of every record."""
    from kwire.broker.internal_topics import log_batches
    tid = setup_group(state, n=30)
    mgr = share_of(state)
    mgr.persister.snapshot_every = 4
    epoch = 0
    assert fetch(state, epoch, tid).error_code == 0
    for first, t in ((0, 2), (1, 1), (3, 3), (5, 2), (7, 1), (9, 3), (11, 1), (2, 3), (13, 2), (15, 1), (4, 1), (17, 1), (19, 3)):
        epoch += 1
        r = fetch(state, epoch, tid, acks=[(first, first, t)])
        assert r.error_code == 0 and r.responses[0].partitions[0].acknowledge_error_code in (0, 121), r
    p = state.internal_topics.partition_of(SHARE_GROUP_STATE_TOPIC, f"g:{tid}:0")
    log = state.internal_topics.partition_log(SHARE_GROUP_STATE_TOPIC, p)
    records = [(r.offset, r.key, r.value) for b in log_batches(log) for r in b]
    last = {key: (offset, key, value) for offset, key, value in records}
    assert len(records) > len(last) == 2  # several snapshots and updates; two keys
    compacted: dict = {}
    replayer = SharePersister(state.internal_topics)
    for _offset, key, value in sorted(last.values()):
        replayer.apply(compacted, key, value)
    full = SharePersister(state.internal_topics).load_all()
    assert compacted[("g", tid, 0)] == full[("g", tid, 0)]
    assert mgr.persister.snapshots >= 2 and mgr.persister.updates >= 4


def test_a_member_that_never_comes_back_after_a_restart_times_out_and_that_is_written(state):
    setup_group(state)
    state = reopen(state)
    try:
        mgr = share_of(state)
        assert [m.member_id for m in describe(state).members] == ["m1"]  # its session starts now
        timeout = mgr.config("g").share_session_timeout_ms
        before = mgr.now_ms
        mgr.now_ms = lambda: before() + timeout + 1
        desc = describe(state)
        assert desc.members == [] and desc.group_state == "Empty"
        state = reopen(state)
        assert describe(state).members == [] and describe(state).group_state == "Empty"
    finally:
        state.close()
