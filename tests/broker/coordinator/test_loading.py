"""The coordinators' partitions loaded after start, as Kafka's: while a partition of
__consumer_offsets or __transaction_state loads, requests for its groups or transactional ids get
COORDINATOR_LOAD_IN_PROGRESS (heartbeats are answered blindly, FindCoordinator answers), and once
it is loaded they are served from what it holds.  The load is held by an executor the test runs by
hand (no sleeps).  Each test runs twice: with a partition a request asks for loaded at once,
inside that request (a small one, the usual case: kwire's shortcut, the request is served) and
with every partition counted as too large for that (Kafka's way: refused, loaded in the worker;
``HeldExecutor.schedule`` holds the loader's later turns of the loop)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import pytest

from kwire.broker.config import load_config
from kwire.broker.coordinator import loader
from kwire.broker.coordinator.store import StoredGroup
from kwire.broker.state import BrokerState
from kwire.broker.transactions.state import TxnState
from kwire.protocol import messages
from kwire.protocol.errors import CoordinatorLoadInProgressError, InconsistentGroupProtocolError, NonEmptyGroupError

from ..test_transactions_handlers import (
    add_offsets,
    add_partitions,
    batch,
    call,
    create,
    end_txn,
    fetch,
    init,
    produce,
    txn_offset_commit,
    values,
)

LOADING = CoordinatorLoadInProgressError.code
NONE = 0


class HeldExecutor:
    """An executor whose jobs run only when the test says so, in the test's thread; its
    ``schedule`` holds the loader's turns of the event loop the same way."""

    def __init__(self) -> None:
        self.jobs: list[tuple[concurrent.futures.Future, Callable[..., Any], tuple]] = []
        self.shut_down = False

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.jobs.append((future, fn, args))
        return future

    def schedule(self, fn: Callable[[], None]) -> None:
        self.submit(fn)

    def run_next(self) -> None:
        future, fn, args = self.jobs.pop(0)
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - handed to the loader like a worker's
            future.set_exception(exc)

    def run_all(self) -> None:
        while self.jobs:
            self.run_next()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.shut_down = True
        if cancel_futures:
            for future, _, _ in self.jobs:
                future.cancel()
            self.jobs.clear()


def _commit(state: BrokerState, group: str, offsets: dict[tuple[str, int], int]) -> None:
    R = messages.OffsetCommitRequest
    topics: dict[str, list] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_metadata=""))
    resp = call(state, R(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        R.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()]), 8)
    assert [p.error_code for t in resp.topics for p in t.partitions] == [NONE] * len(offsets)


def _fetch(state: BrokerState, group: str, version: int = 8) -> tuple[int, dict[tuple[str, int], int]]:
    """(error, committed offsets) of OffsetFetch for the group's partitions of topic t."""
    R = messages.OffsetFetchRequest
    if version < 8:
        resp = call(state, R(group_id=group, topics=[R.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])],
                             require_stable=False), version)
        rows = [(t.name, p.partition_index, p.committed_offset, p.error_code) for t in resp.topics for p in t.partitions]
        error = resp.error_code if version >= 2 else max(e for *_, e in rows)
        return error, {(t, p): off for t, p, off, _ in rows if off >= 0}
    G = R.OffsetFetchRequestGroup
    resp = call(state, R(groups=[G(group_id=group, topics=[G.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])])],
                         require_stable=False), version)
    g = resp.groups[0]
    return g.error_code, {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
                          if p.committed_offset >= 0}


def _groups_in_different_partitions(state: BrokerState, n: int) -> list[str]:
    seen: dict[int, str] = {}
    i = 0
    while len(seen) < n:
        group = f"group-{i}"
        seen.setdefault(state.coordinator.store.partition_of(group), group)
        i += 1
    return list(seen.values())


@pytest.fixture
def data(tmp_path):
    """A data dir with three groups' offsets (in three partitions) and an open transaction that
    staged offsets of a fourth group, closed cleanly."""
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", default_partitions=2))
    create(state, "t", 2)
    groups = _groups_in_different_partitions(state, 4)
    for i, group in enumerate(groups[:3]):
        _commit(state, group, {("t", 0): 10 + i, ("t", 1): 20 + i})
    _, pid, epoch = init(state, "tx")
    assert set(add_partitions(state, "tx", pid, epoch, {"t": [0]}).values()) == {NONE}
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx").error_code == NONE
    assert add_offsets(state, "tx", pid, epoch, groups[3]) == NONE
    assert set(txn_offset_commit(state, "tx", pid, epoch, groups[3], {("t", 0): 2}).values()) == {NONE}
    state.close()
    return tmp_path / "data", groups, (pid, epoch)


@pytest.fixture(params=["at once", "in the worker"])
def where(request, monkeypatch) -> str:
    """Where a partition asked for is loaded: the data dirs here are small (at once, in the
    request), unless every partition counts as large (in the worker, next)."""
    if request.param == "in the worker":
        monkeypatch.setattr(loader, "INLINE_BYTES", -1)
    return request.param


def _start_loading(state: BrokerState) -> HeldExecutor:
    executor = HeldExecutor()
    # The worker's results installed at once; the loop's turns and the worker's jobs held.
    state.start_loading(post=lambda fn: fn(), executor=executor, schedule=executor.schedule)
    return executor


def _loading_state(data_dir) -> tuple[BrokerState, HeldExecutor]:
    state = BrokerState(load_config(None, data_dir=data_dir), load_coordinators=False)
    return state, _start_loading(state)


def test_the_log_manager_leaves_internal_partitions_unopened_after_a_clean_shutdown(data):
    data_dir, groups, _ = data
    state, executor = _loading_state(data_dir)
    try:
        internal = [(t, p) for t, p in state.logs.partitions() if t.startswith("__")]
        assert len(internal) == 5  # four groups' partitions and one of __transaction_state
        assert not any(state.logs.opened(t, p) for t, p in internal)
        assert state.logs.opened("t", 0)
        executor.run_all()
        assert all(state.logs.opened(t, p) for t, p in internal)
    finally:
        state.close()


def test_a_new_data_dir_is_ready_at_once_without_a_load(tmp_path):
    state, executor = _loading_state(tmp_path / "new")
    try:
        assert not executor.jobs and state.loader.done.is_set()
        assert not state.coordinator.loading() and not state.transactions.loading()
        assert init(state, "tx")[0] == NONE
    finally:
        state.close()


def test_after_a_crash_internal_partitions_are_recovered_at_start(data):
    data_dir, _, _ = data
    BrokerState(load_config(None, data_dir=data_dir)).close(clean=False)  # no clean-shutdown marker
    state = BrokerState(load_config(None, data_dir=data_dir), load_coordinators=False)
    try:
        internal = [(t, p) for t, p in state.logs.partitions() if t.startswith("__")]
        assert internal and all(state.logs.opened(t, p) for t, p in internal)
        assert state.coordinator.loading()  # (the replay still waits for the loader)
    finally:
        state.close()


def test_group_requests_while_their_partition_loads(data, monkeypatch):
    """Kafka's refusals, kept for a partition above the threshold (here: every one)."""
    monkeypatch.setattr(loader, "INLINE_BYTES", -1)
    data_dir, groups, _ = data
    state, executor = _loading_state(data_dir)
    try:
        group = groups[0]
        R = messages
        # FindCoordinator still answers (Kafka's too: the client then asks the coordinator).
        resp = call(state, R.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        assert resp.coordinators[0].error_code == NONE
        for version in (1, 7, 8):
            assert _fetch(state, group, version) == (LOADING, {})
        join = call(state, R.JoinGroupRequest(group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                              member_id="", protocol_type="consumer", protocols=[
                                                  R.JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                              metadata=b"")]), 5)
        assert join.error_code == LOADING
        sync = call(state, R.SyncGroupRequest(group_id=group, generation_id=1, member_id="m", assignments=[]), 3)
        assert sync.error_code == LOADING
        # Kafka answers a heartbeat blindly while the group loads (its member rejoins after).
        hb = call(state, R.HeartbeatRequest(group_id=group, generation_id=1, member_id="m"), 3)
        assert hb.error_code == NONE
        leave = call(state, R.LeaveGroupRequest(group_id=group, member_id="m"), 2)
        assert leave.error_code == LOADING
        OC = R.OffsetCommitRequest
        commit = call(state, OC(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            OC.OffsetCommitRequestTopic(name="t", partitions=[
                OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=99,
                                                                         committed_metadata="")])]), 8)
        assert commit.topics[0].partitions[0].error_code == LOADING
        described = call(state, R.DescribeGroupsRequest(groups=[group]), 5)
        assert described.groups[0].error_code == LOADING
        assert call(state, R.ListGroupsRequest(), 4).error_code == LOADING
        deleted = call(state, R.DeleteGroupsRequest(groups_names=[group]), 2)
        assert deleted.results[0].error_code == LOADING
        OD = R.OffsetDeleteRequest
        resp = call(state, OD(group_id=group, topics=[OD.OffsetDeleteRequestTopic(
            name="t", partitions=[OD.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])]), 0)
        assert resp.error_code == LOADING
        assert state.coordinator.load_refusals > 0

        # A group whose partition has no log is not loading: it is served at once.
        fresh = next(f"new-{i}" for i in range(1000)
                     if state.coordinator.store.partition_of(f"new-{i}") not in state.coordinator.loading_partitions)
        assert _fetch(state, fresh) == (NONE, {})
    finally:
        state.close()


def test_each_partition_is_served_once_it_is_loaded(data, where):
    data_dir, groups, _ = data
    state, executor = _loading_state(data_dir)
    try:
        order = state.coordinator.loading_partitions
        by_partition = {state.coordinator.store.partition_of(g): g for g in groups}
        first, later = by_partition[order[0]], [by_partition[p] for p in order[1:]]
        executor.run_next()
        expected = {g: {("t", 0): 10 + i, ("t", 1): 20 + i} for i, g in enumerate(groups[:3])}
        assert _fetch(state, first) == (NONE, expected.get(first, {}))
        # The second is in the worker now: refused.  The others: served at once if small.
        in_worker, rest = later[0], later[1:]
        assert _fetch(state, in_worker)[0] == LOADING
        if where == "at once":
            assert all(_fetch(state, g) == (NONE, expected.get(g, {})) for g in rest)
        else:
            assert all(_fetch(state, g)[0] == LOADING for g in rest)
        executor.run_all()
        assert all(_fetch(state, g) == (NONE, expected.get(g, {})) for g in groups)
        assert call(state, messages.ListGroupsRequest(), 4).error_code == NONE
        assert executor.shut_down is False  # (an executor given is the caller's to shut down)
        assert state.loader.done.is_set() and not state.loader.failed
        assert state.loader.inline_loads == (len(order) - 2 if where == "at once" else 0)
    finally:
        state.close()
    assert executor.shut_down


def test_a_partition_a_client_asks_for_is_loaded_next(data, where):
    data_dir, groups, _ = data
    state, executor = _loading_state(data_dir)
    try:
        order = state.coordinator.loading_partitions
        asked = next(g for g in groups if state.coordinator.store.partition_of(g) == order[-1])
        expected = {g: {("t", 0): 10 + i, ("t", 1): 20 + i} for i, g in enumerate(groups[:3])}.get(asked, {})
        refused = state.coordinator.load_refusals
        if where == "at once":
            # Loaded inside the request, which is served; the lowest partition's load, under way
            # in the worker before it, goes on, and the loader's next turn is held.
            assert _fetch(state, asked) == (NONE, expected)
            assert state.coordinator.load_refusals == refused
            assert [fn.__name__ for _, fn, _ in executor.jobs] == ["read_partition", "_next_turn"]
            assert state.coordinator.loading_partitions == order[:-1]
        else:
            # Refused (Kafka's answer), then the worker's next after the lowest partition.
            assert _fetch(state, asked) == (LOADING, {})
            assert state.coordinator.load_refusals == refused + 1
            assert [fn.__name__ for _, fn, _ in executor.jobs] == ["read_partition"]
            executor.run_next()
            executor.run_next()
            assert _fetch(state, asked) == (NONE, expected)
            assert state.coordinator.loading_partitions == order[1:-1]
        assert state.loader.inline_loads == (1 if where == "at once" else 0)
    finally:
        state.close()


def test_a_topic_deleted_while_its_groups_load_is_forgotten_by_them(data):
    data_dir, groups, _ = data
    state, executor = _loading_state(data_dir)
    try:
        resp = call(state, messages.DeleteTopicsRequest(topic_names=["t"], timeout_ms=1000), 4)
        assert resp.responses[0].error_code == NONE
        executor.run_all()
        assert all(state.coordinator.fetch_offsets(g, None) == [] for g in groups)
    finally:
        state.close()
    state = BrokerState(load_config(None, data_dir=data_dir))  # tombstones written: gone for good
    try:
        assert all(state.coordinator.fetch_offsets(g, None) == [] for g in groups)
    finally:
        state.close()


def test_transaction_requests_wait_for_the_transaction_state(data, where):
    data_dir, groups, (pid, epoch) = data
    state, executor = _loading_state(data_dir)
    try:
        # Refused while the worker reads the first group partition (the rest is small: it is
        # loaded at once on the loop's turn that read ends, else the worker goes on).
        assert init(state, "tx") == (LOADING, -1, -1)
        assert set(add_partitions(state, "tx", pid, epoch, {"t": [1]}).values()) == {LOADING}
        assert add_offsets(state, "tx", pid, epoch, groups[0]) == LOADING
        assert end_txn(state, "tx", pid, epoch, True) == LOADING
        assert set(txn_offset_commit(state, "tx", pid, epoch, groups[3], {("t", 0): 3}).values()) == {LOADING}
        described = call(state, messages.DescribeTransactionsRequest(transactional_ids=["tx"]), 0)
        assert described.transaction_states[0].error_code == LOADING
        assert call(state, messages.ListTransactionsRequest(state_filters=[], producer_id_filters=[]),
                    0).error_code == LOADING
        # Transactional data waits too (Produce's retriable answer while a transaction completes).
        assert produce(state, "t", 0, batch(pid, epoch, 2), "tx").error_code != NONE
        executor.run_next()
        if where == "at once":
            assert not state.transactions.loading() and not state.coordinator.loading()
            assert state.loader.inline_loads == 4  # 3 group partitions + the state
            assert [fn.__name__ for _, fn, _ in executor.jobs] == ["_next_turn"]  # (nothing in the worker)
        else:
            assert state.transactions.loading()
        executor.run_all()
        assert state.loader.done.is_set() and not state.loader.failed
        txn = state.transactions.describe("tx")
        assert txn.state is TxnState.ONGOING and txn.groups == {groups[3]}
        assert state.coordinator.pending_txn_partitions(groups[3]) == {("t", 0)}
        assert end_txn(state, "tx", pid, epoch, True) == NONE
        assert _fetch(state, groups[3]) == (NONE, {("t", 0): 2})
    finally:
        state.close()


def test_a_transaction_left_preparing_is_completed_once_loaded(data):
    data_dir, groups, (pid, epoch) = data
    state = BrokerState(load_config(None, data_dir=data_dir))
    txn = state.transactions.describe("tx")
    txn.state = TxnState.PREPARE_COMMIT  # a crash between storing the decision and writing the markers
    state.transactions._save()
    state.close()
    state, executor = _loading_state(data_dir)
    try:
        log = state.logs.get("t", 0)
        assert log.last_stable_offset == 0  # held until the coordinator completes it
        executor.run_all()
        assert state.transactions.describe("tx").state is TxnState.COMPLETE_COMMIT
        assert log.last_stable_offset == log.log_end_offset == 3
        assert values(fetch(state, "t", 0, 0, isolation=1).records) == [b"v0", b"v1"]
        assert _fetch(state, groups[3]) == (NONE, {("t", 0): 2})  # the offsets it staged, committed
    finally:
        state.close()


def _break_partition(state, broken: int, monkeypatch) -> None:
    """Reading ``__consumer_offsets`` partition ``broken`` fails with an OSError (a disk error)."""
    read = state.coordinator.store.read_partition

    def failing(partition: int) -> tuple[int, dict[str, StoredGroup], list[str]]:
        if partition == broken:
            raise OSError("disk error")
        return read(partition)

    monkeypatch.setattr(state.coordinator.store, "read_partition", failing)


def test_a_partition_that_fails_to_load_stays_loading(data, monkeypatch):
    data_dir, groups, _ = data
    state = BrokerState(load_config(None, data_dir=data_dir), load_coordinators=False)
    broken = state.coordinator.loading_partitions[0]
    _break_partition(state, broken, monkeypatch)
    executor = _start_loading(state)
    try:
        executor.run_all()
        assert state.coordinator.loading_partitions == [broken]
        victim = next(g for g in groups if state.coordinator.store.partition_of(g) == broken)
        assert _fetch(state, victim)[0] == LOADING
        assert state.transactions.loading()  # it needs every group first
        assert len(state.loader.failed) == 1 and "disk error" in state.loader.failed[0]
        assert state.loader.done.is_set()
    finally:
        state.close()


def test_closing_while_loading_drops_the_rest(data):
    data_dir, _, _ = data
    state, executor = _loading_state(data_dir)
    executor.run_next()
    state.close()
    assert executor.shut_down and not executor.jobs
    # Nothing was written: the next start finds everything as it was.
    state = BrokerState(load_config(None, data_dir=data_dir))
    try:
        assert state.transactions.describe("tx").state is TxnState.ONGOING
        assert len(state.coordinator.store.groups) == 4
    finally:
        state.close()


def _not_in_the_worker(state: BrokerState, groups: list[str]) -> list[str]:
    """The groups with offsets whose partition is not the one the worker has started reading
    (the lowest): theirs load at once when asked for."""
    first = state.coordinator.loading_partitions[0]
    return [g for g in groups[:3] if state.coordinator.store.partition_of(g) != first]


def test_the_first_request_for_a_small_partition_is_served_at_once(data):
    """kwire's shortcut: no COORDINATOR_LOAD_IN_PROGRESS for a group of a small partition, each
    kind of request served from what the partition holds, as after the worker's load."""
    data_dir, groups, _ = data
    state, executor = _loading_state(data_dir)
    try:
        expected = {g: {("t", 0): 10 + i, ("t", 1): 20 + i} for i, g in enumerate(groups[:3])}
        fetched, described = _not_in_the_worker(state, groups)
        assert _fetch(state, fetched, 8) == (NONE, expected[fetched])
        resp = call(state, messages.DescribeGroupsRequest(groups=[described]), 5)
        assert (resp.groups[0].error_code, resp.groups[0].group_state) == (NONE, "Empty")
        assert state.coordinator.load_refusals == 0 and state.loader.inline_loads == 2
        executor.run_all()
        assert state.loader.done.is_set() and not state.loader.failed
        assert all(_fetch(state, g) == (NONE, expected[g]) for g in groups[:3])
    finally:
        state.close()


def test_delete_groups_asks_whether_the_group_loads_before_it_reads_it(data):
    """DeleteGroups of an empty group whose small partition is still loading: the partition is
    loaded first, then the group deleted (read before, it was not there yet: GROUP_ID_NOT_FOUND)."""
    data_dir, groups, _ = data
    state, executor = _loading_state(data_dir)
    try:
        group = _not_in_the_worker(state, groups)[0]
        assert state.coordinator.delete_groups([group]) == {group: NONE}
        assert _fetch(state, group) == (NONE, {})
        executor.run_all()
        assert _fetch(state, group) == (NONE, {})
    finally:
        state.close()


def test_release_group_asks_whether_the_group_loads_before_it_reads_it(data):
    """The KIP-848 upgrade's look at a classic group loads its small partition first (it has no
    members after a restart, so nothing is released)."""
    data_dir, groups, _ = data
    state, executor = _loading_state(data_dir)
    try:
        group = _not_in_the_worker(state, groups)[0]
        partition = state.coordinator.store.partition_of(group)
        assert state.coordinator.release_group(group) is None
        assert partition not in state.coordinator.loading_partitions
        assert state.coordinator.group(group) is not None
    finally:
        state.close()


def test_a_consumer_or_share_group_looked_up_first_loads_its_small_partition(tmp_path):
    """Handlers that look a KIP-848 or share group up before the classic coordinator's check
    (DeleteGroups, JoinGroup on a share group's id) see it: the lookup asks for its partition,
    which loads at once, instead of finding nothing there yet."""
    data_dir = tmp_path / "data"
    state = BrokerState(load_config(None, data_dir=data_dir, default_partitions=1))
    create(state, "t", 1)
    store = state.coordinator.store
    by_partition: dict[int, list[str]] = {}
    for i in range(400):
        by_partition.setdefault(store.partition_of(f"id-{i}"), []).append(f"id-{i}")
    low, mid, high = sorted(by_partition)[:3]  # the worker's first, then the two looked up
    decoy, consumer, share = by_partition[low][0], by_partition[mid][0], by_partition[high][0]
    _commit(state, decoy, {("t", 0): 1})
    HB = messages.ConsumerGroupHeartbeatRequest
    resp = call(state, HB(group_id=consumer, member_id="m1", member_epoch=0, rebalance_timeout_ms=30_000,
                          subscribed_topic_names=["t"], topic_partitions=[]), 1)
    assert resp.error_code == NONE
    SHB = messages.ShareGroupHeartbeatRequest
    resp = call(state, SHB(group_id=share, member_id="s1", member_epoch=0, rack_id=None,
                           subscribed_topic_names=["t"]), 1)
    assert resp.error_code == NONE
    state.close()
    state, executor = _loading_state(data_dir)
    try:
        assert state.coordinator.loading_partitions == [low, mid, high]
        deleted = call(state, messages.DeleteGroupsRequest(groups_names=[consumer]), 2)
        assert deleted.results[0].error_code == NonEmptyGroupError.code  # its member is back
        J = messages.JoinGroupRequest
        join = call(state, J(group_id=share, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                             protocol_type="consumer", protocols=[J.JoinGroupRequestProtocol(name="range",
                                                                                             metadata=b"")]), 5)
        assert join.error_code == InconsistentGroupProtocolError.code  # a share group's id
        assert state.coordinator.load_refusals == 0 and state.loader.inline_loads == 2
        executor.run_all()
        assert state.coordinator.group(share) is None  # no classic group was made of it
    finally:
        state.close()


def test_a_share_group_described_first_after_a_restart_is_found(tmp_path):
    """ShareGroupDescribe looks the group up before it asks whether it loads: the lookup asks for
    the group's small partition, which loads at once, instead of answering GROUP_ID_NOT_FOUND
    while the rest still waits for the worker."""
    data_dir = tmp_path / "data"
    state = BrokerState(load_config(None, data_dir=data_dir, default_partitions=1))
    create(state, "t", 1)
    store = state.coordinator.store
    by_partition: dict[int, str] = {}
    for i in range(400):
        by_partition.setdefault(store.partition_of(f"id-{i}"), f"id-{i}")
    low, high = sorted(by_partition)[0], sorted(by_partition)[1]
    decoy, share = by_partition[low], by_partition[high]  # the worker's first; the one described
    _commit(state, decoy, {("t", 0): 1})
    SHB = messages.ShareGroupHeartbeatRequest
    resp = call(state, SHB(group_id=share, member_id="s1", member_epoch=0, rack_id=None,
                           subscribed_topic_names=["t"]), 1)
    assert resp.error_code == NONE
    state.close()
    state, executor = _loading_state(data_dir)
    try:
        assert state.coordinator.loading_partitions == [low, high]
        described = call(state, messages.ShareGroupDescribeRequest(group_ids=[share]), 1).groups[0]
        assert (described.error_code, [m.member_id for m in described.members]) == (NONE, ["s1"])
        assert state.coordinator.loading_partitions == [low] and state.loader.inline_loads == 1
    finally:
        state.close()


def test_what_loads_inside_requests_is_bounded_until_the_loops_next_turn(data, monkeypatch):
    """A request naming groups of several small partitions (or several requests before the loop's
    next turn) loads at most INLINE_BYTES of them in all: the others are refused, as Kafka's, and
    are the worker's next."""
    data_dir, groups, _ = data
    state = BrokerState(load_config(None, data_dir=data_dir), load_coordinators=False)
    first, second = _not_in_the_worker(state, groups)
    sizes = [loader._load_cost(data_dir / f"__consumer_offsets-{state.coordinator.store.partition_of(g)}")
             for g in (first, second)]
    monkeypatch.setattr(loader, "INLINE_BYTES", max(sizes) + min(sizes) - 1)  # one fits, not both
    executor = _start_loading(state)
    try:
        resp = call(state, messages.DescribeGroupsRequest(groups=[first, second]), 5)
        assert [g.error_code for g in resp.groups] == [NONE, LOADING]
        assert state.loader.inline_loads == 1
        # The worker's read under way goes on; the loop's next turn; then the worker takes the
        # refused one (asked for) before the lowest left.
        assert [fn.__name__ for _, fn, _ in executor.jobs] == ["read_partition", "_next_turn"]
        executor.run_next()
        executor.run_next()
        assert executor.jobs[0][2] == (state.coordinator.store.partition_of(second),)
        executor.run_next()
        resp = call(state, messages.DescribeGroupsRequest(groups=[first, second]), 5)
        assert [g.error_code for g in resp.groups] == [NONE, NONE]
        assert state.loader.inline_loads == 1
    finally:
        state.close()


def test_a_partition_that_fails_to_load_inside_a_request_stays_loading(data, monkeypatch):
    """As a failure in the worker: logged, the request refused (retriable), never served empty."""
    data_dir, groups, _ = data
    state = BrokerState(load_config(None, data_dir=data_dir), load_coordinators=False)
    victim = _not_in_the_worker(state, groups)[0]
    broken = state.coordinator.store.partition_of(victim)
    _break_partition(state, broken, monkeypatch)
    executor = _start_loading(state)
    try:
        assert _fetch(state, victim) == (LOADING, {})
        assert len(state.loader.failed) == 1 and "disk error" in state.loader.failed[0]
        assert _fetch(state, victim) == (LOADING, {})  # (not tried again on every request)
        executor.run_all()
        assert state.coordinator.loading_partitions == [broken] and len(state.loader.failed) == 1
        assert state.loader.done.is_set()
    finally:
        state.close()


# -- the worker's hold until the loop's first requests are answered ---------------------------------


class ManualTimers:
    """A ``call_later`` whose timers fire when the test says (no sleeps)."""

    class Handle:
        def __init__(self, delay: float, fn: Callable[[], None]) -> None:
            self.delay, self.fn, self.cancelled = delay, fn, False

        def cancel(self) -> None:
            self.cancelled = True

    def __init__(self) -> None:
        self.pending: list[ManualTimers.Handle] = []

    def call_later(self, delay: float, fn: Callable[[], None]) -> Handle:
        handle = ManualTimers.Handle(delay, fn)
        self.pending.append(handle)
        return handle

    def fire(self) -> None:
        """The one timer pending fires (the hold has one at a time)."""
        assert len(self.pending) == 1, self.pending
        handle = self.pending.pop()
        if not handle.cancelled:
            handle.fn()

    def armed(self) -> bool:
        return any(not h.cancelled for h in self.pending)


class Held:
    """A loading state whose worker's hold runs on ManualTimers; ``serve`` answers a request as
    the network layer does (counted)."""

    def __init__(self, data_dir) -> None:
        self.state = BrokerState(load_config(None, data_dir=data_dir), load_coordinators=False)
        self.executor = HeldExecutor()
        self.timers = ManualTimers()
        self.requests = 0
        self.state.start_loading(post=lambda fn: fn(), executor=self.executor, schedule=self.executor.schedule,
                                 call_later=self.timers.call_later, requests_seen=lambda: self.requests)
        self.loader = self.state.loader

    def serve(self, request, version: int):
        self.requests += 1
        return call(self.state, request, version)

    def reads(self) -> list[tuple]:
        """The worker's reads submitted so far (not the loop's held turns)."""
        return [args for _, fn, args in self.executor.jobs if fn.__name__ in ("read_partition", "read_state")]


def _fetch_request(group: str):
    R = messages.OffsetFetchRequest
    return R(groups=[R.OffsetFetchRequestGroup(group_id=group, topics=[
        R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])])], require_stable=False)


def test_the_worker_reads_nothing_until_the_first_requests_are_answered(data):
    """After start no worker thread and no read: the first requests are answered alone (a small
    partition asked for is loaded inside its request, as without the hold); the worker starts at
    the first look that finds requests answered and none since the look before."""
    data_dir, groups, _ = data
    held = Held(data_dir)
    try:
        assert held.loader.holding and held.reads() == []
        assert [h.delay for h in held.timers.pending] == [loader.QUIET_MS / 1e3]
        assert held.serve(messages.ApiVersionsRequest(), 3).error_code == NONE
        resp = held.serve(_fetch_request(groups[0]), 8)
        assert resp.groups[0].error_code == NONE and held.loader.inline_loads == 1
        held.executor.run_all()  # (the loop's next turn after the inline load: still no read)
        assert held.reads() == [] and held.loader.holding
        held.timers.fire()  # requests came since start: they may go on
        assert held.loader.holding and held.reads() == []
        held.requests += 1  # one more (served by the network layer)
        held.timers.fire()
        assert held.loader.holding and held.reads() == []
        held.timers.fire()  # quiet since the last look: the worker starts
        assert not held.loader.holding and not held.timers.armed()
        assert held.reads() == [(held.state.coordinator.loading_partitions[0],)]
        held.executor.run_all()
        assert held.loader.done.is_set() and not held.loader.failed
        expected = {g: {("t", 0): 10 + i, ("t", 1): 20 + i} for i, g in enumerate(groups[:3])}
        assert all(_fetch(held.state, g) == (NONE, expected[g]) for g in groups[:3])
        assert held.state.transactions.describe("tx").state is TxnState.ONGOING
    finally:
        held.state.close()


@pytest.mark.parametrize("clients", ["none", "busy"])
def test_the_hold_ends_after_hold_ms_at_the_latest(data, clients):
    """A broker nobody talks to (no request: nothing to wait for), or one whose clients never
    pause: the worker starts HOLD_MS after start."""
    data_dir, _, _ = data
    held = Held(data_dir)
    try:
        looks = -(-loader.HOLD_MS // loader.QUIET_MS)  # (rounded up)
        for _ in range(looks - 1):
            held.requests += clients == "busy"
            held.timers.fire()
        assert held.loader.holding and held.reads() == []
        held.requests += clients == "busy"
        held.timers.fire()
        assert not held.loader.holding and len(held.reads()) == 1 and not held.timers.armed()
    finally:
        held.state.close()


def test_hold_ms_0_starts_the_worker_at_once(data, monkeypatch):
    monkeypatch.setattr(loader, "HOLD_MS", 0)
    data_dir, _, _ = data
    held = Held(data_dir)
    try:
        assert not held.loader.holding and not held.timers.pending and len(held.reads()) == 1
    finally:
        held.state.close()


def test_a_refused_group_request_ends_the_hold_with_its_partition_first(data, monkeypatch):
    """Above the threshold the request is refused (Kafka's answer) and the client waits for the
    worker: the hold ends at once and the worker reads that partition first."""
    monkeypatch.setattr(loader, "INLINE_BYTES", -1)
    data_dir, groups, _ = data
    held = Held(data_dir)
    try:
        store, lowest = held.state.coordinator.store, held.state.coordinator.loading_partitions[0]
        asked = next(g for g in groups[:3] if store.partition_of(g) != lowest)
        partition = store.partition_of(asked)
        assert held.serve(_fetch_request(asked), 8).groups[0].error_code == LOADING
        assert not held.loader.holding and not held.timers.armed()
        assert held.reads() == [(partition,)]
        held.executor.run_next()
        assert held.serve(_fetch_request(asked), 8).groups[0].error_code == NONE
    finally:
        held.state.close()


def test_a_refused_list_groups_ends_the_hold_at_the_next_look(data):
    """ListGroups names no partition: it is refused while any loads (Kafka's), and the refusal
    ends the hold at the next look even while requests keep coming."""
    data_dir, _, _ = data
    held = Held(data_dir)
    try:
        assert held.serve(messages.ListGroupsRequest(), 4).error_code == LOADING
        assert held.loader.holding
        held.requests += 1
        held.timers.fire()
        assert not held.loader.holding and len(held.reads()) == 1
        held.executor.run_all()
        assert held.serve(messages.ListGroupsRequest(), 4).error_code == NONE
    finally:
        held.state.close()


def test_a_transaction_request_during_the_hold(data, where):
    """The rest small: loaded on the loop inside the request, which is served; else refused and
    the hold ends, the worker reading the rest."""
    data_dir, _, _ = data
    held = Held(data_dir)
    try:
        loads = len(held.state.coordinator.loading_partitions) + 1  # (+ the transaction state)
        held.requests += 1
        error, *_ = init(held.state, "tx")
        if where == "at once":
            assert error == NONE and not held.state.coordinator.loading()
            assert held.reads() == [] and held.loader.inline_loads == loads
        else:
            assert error == LOADING and not held.loader.holding and len(held.reads()) == 1
        held.executor.run_all()
        assert held.loader.done.is_set() and not held.loader.holding and not held.timers.armed()
    finally:
        held.state.close()


def test_a_rest_of_many_small_partitions_waits_for_the_worker(data, monkeypatch):
    """Each partition counts PARTITION_COST_BYTES besides its bytes (opening it costs the loop
    about as much as 4 KiB of commits): a transaction request needing the rest of several small
    partitions is refused and the worker reads them, while one small partition asked for still
    loads inside its request."""
    monkeypatch.setattr(loader, "PARTITION_COST_BYTES", loader.INLINE_BYTES // 3)  # 3 do not fit, 1 does
    data_dir, groups, _ = data
    held = Held(data_dir)
    try:
        assert len(held.state.coordinator.loading_partitions) == 4
        held.requests += 1
        assert init(held.state, "tx")[0] == LOADING
        assert held.loader.inline_loads == 0 and not held.loader.holding and len(held.reads()) == 1
        asked = _not_in_the_worker(held.state, groups)[0]
        assert _fetch(held.state, asked)[0] == NONE and held.loader.inline_loads == 1
        held.executor.run_all()
        assert held.loader.done.is_set() and init(held.state, "tx")[0] == NONE
    finally:
        held.state.close()


def test_closing_during_the_hold_reads_nothing(data):
    data_dir, _, _ = data
    held = Held(data_dir)
    held.state.close()
    held.timers.fire()  # (a look the loop had already due)
    assert held.reads() == [] and not held.executor.jobs
    assert not held.loader.done.is_set()
