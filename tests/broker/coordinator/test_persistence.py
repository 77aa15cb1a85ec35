"""What survives a restart: offsets, generations, deletions; clean, unclean and after a torn write."""

from __future__ import annotations

import json
import zlib

import pytest

from kwire.broker.coordinator import GroupStoreError
from kwire.broker.coordinator.coordinator import GROUPS_DIR
from kwire.broker.coordinator.store import JOURNAL_NAME, GroupRecord, MemberRecord
from kwire.broker.topics import META_DIR
from kwire.protocol import errors, messages

from . import SESSION_MS, Broker, call, commit, describe, fetch, heartbeat, join, join_new, run, stable_group

NONE = 0


def _broker(tmp_path, **kwargs) -> Broker:
    broker = Broker(tmp_path, **kwargs)
    for name, n in (("t", 2), ("u", 1)):
        if name not in broker.topics:
            broker.topics.add(name, n)
    return broker


async def _some_state(broker: Broker) -> tuple[int, str]:
    """A consumer group at a generation with offsets, and an offsets-only group; (generation, member id)."""
    a, b = await stable_group(broker, "g", 2)
    await commit(broker, "g", {("t", 0): 10, ("t", 1): 11}, generation=a.generation_id, member_id=a.member_id,
                 metadata="meta", leader_epoch=3, version=8)
    await commit(broker, "g", {("t", 0): 12}, generation=a.generation_id, member_id=a.member_id, version=8)
    await commit(broker, "solo", {("u", 0): 7})
    return a.generation_id, a.member_id


async def _check_state(broker: Broker, generation: int, member_id: str) -> None:
    assert await fetch(broker, "g", None) == {("t", 0): (12, -1, "", NONE), ("t", 1): (11, 3, "meta", NONE)}
    assert await fetch(broker, "solo", {"u": [0]}) == {("u", 0): (7, -1, "", NONE)}
    group = await describe(broker, "g")
    # Kafka's load: the stored generation comes back Stable with its members and their assignments,
    # so a client that outlived the restart carries on without a rebalance.
    assert (group.group_state, group.protocol_type, group.protocol_data) == ("Stable", "consumer", "range")
    assert {m.member_id: bytes(m.member_assignment) for m in group.members} == {
        m.member_id: f"assignment-{m.member_id}".encode() for m in group.members}
    assert member_id in {m.member_id for m in group.members} and len(group.members) == 2
    assert await heartbeat(broker, "g", generation, member_id) == NONE
    assert await commit(broker, "g", {("t", 1): 13}, generation=generation, member_id=member_id, version=8) == {
        ("t", 1): NONE}
    # Members that do not come back are expired by their sessions, started at the load.
    broker.clock.advance(SESSION_MS + 1)
    assert (await describe(broker, "g")).group_state == "Empty"
    assert await heartbeat(broker, "g", generation, member_id) == errors.UnknownMemberIdError.code
    # The generation continues where it was.
    rejoined = await join_new(broker, "g")
    assert rejoined.generation_id > generation


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_offsets_and_generation_survive_a_restart(tmp_path, clean):
    broker = _broker(tmp_path)
    generation, member_id = run(_some_state(broker))
    reopened = broker.reopen(clean=clean)
    run(_check_state(reopened, generation, member_id))
    reopened.coordinator.close()


def test_fsync_policies(tmp_path):
    broker = _broker(tmp_path / "always", fsync="always")
    store = broker.coordinator.store
    before = store.fsyncs
    run(commit(broker, "g", {("t", 0): 1}))
    assert (store.fsyncs, store.dirty) == (before + 1, False)  # fsynced before the commit was answered
    broker.coordinator.close()

    broker = _broker(tmp_path / "interval", fsync="interval")
    store = broker.coordinator.store
    before = store.fsyncs
    run(commit(broker, "g", {("t", 0): 1}))
    assert (store.fsyncs, store.dirty) == (before, True)
    broker.coordinator.flush()  # what the broker calls every fsync_interval_ms
    assert (store.fsyncs, store.dirty) == (before + 1, False)
    broker.coordinator.flush()  # nothing to do
    assert store.fsyncs == before + 1
    reopened = broker.reopen(clean=False)
    assert run(fetch(reopened, "g", {"t": [0]}))[("t", 0)][0] == 1

    broker = _broker(tmp_path / "never", fsync="never")
    store = broker.coordinator.store
    run(commit(broker, "g", {("t", 0): 1}))
    assert store.dirty  # left to the OS...
    broker.coordinator.close()
    assert not store.dirty  # ...but a clean shutdown fsyncs


# The journal of kwire before __consumer_offsets: its damage is still handled when it is migrated
# (a torn or corrupt record is skipped, a record from a newer version stops the start).
def _old_journal(tmp_path):
    from kwire.broker.coordinator import GroupStore
    from kwire.broker.coordinator.offsets import CommittedOffset

    store = GroupStore(tmp_path / META_DIR / GROUPS_DIR)
    store.put_offsets("g", {("t", 0): CommittedOffset(1, -1, "", 1)})
    store.put_offsets("g", {("t", 1): CommittedOffset(2, -1, "", 1)})
    store.put_offsets("h", {("t", 0): CommittedOffset(3, -1, "", 1)})
    store.close()
    return store.path


def test_a_torn_last_record_of_the_old_journal_is_ignored(tmp_path, caplog):
    path = _old_journal(tmp_path)
    # A crash in the middle of writing the next commit: half a line, no newline.
    line = b'00000000 {"t":"offsets","g":"g","o":[["t",0,99,-1,"",1,null]]}\n'
    with open(path, "ab") as f:
        f.write(line[:30])
    broker = _broker(tmp_path)
    assert "torn last record" in caplog.text
    assert run(fetch(broker, "g", {"t": [0, 1]})) == {("t", 0): (1, -1, "", NONE), ("t", 1): (2, -1, "", NONE)}
    again = broker.reopen(clean=False)
    assert again.coordinator.store.findings == []
    assert run(fetch(again, "g", {"t": [0]}))[("t", 0)][0] == 1


def test_a_corrupt_record_of_the_old_journal_is_skipped_and_the_rest_kept(tmp_path, caplog):
    path = _old_journal(tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"o":[["t",1,2', b'"o":[["t",1,9')  # a flipped digit: checksum fails
    path.write_bytes(b"\n".join(lines))
    broker = _broker(tmp_path)
    assert "bad checksum" in caplog.text
    assert run(fetch(broker, "g", {"t": [0, 1]})) == {("t", 0): (1, -1, "", NONE), ("t", 1): (-1, -1, "", NONE)}
    assert run(fetch(broker, "h", {"t": [0]}))[("t", 0)][0] == 3


def test_a_record_from_a_newer_version_in_the_old_journal_stops_the_open(tmp_path):
    path = _old_journal(tmp_path)
    payload = json.dumps({"t": "share_group", "g": "x"}, separators=(",", ":")).encode()
    with open(path, "ab") as f:
        f.write(b"%08x %s\n" % (zlib.crc32(payload), payload))
    with pytest.raises(GroupStoreError, match="line 4"):
        Broker(tmp_path)
    assert path.exists()  # nothing was given up


def test_the_latest_of_many_commits_is_what_a_restart_serves(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        for i in range(200):
            await commit(broker, "g", {("t", i % 2): i})
        await commit(broker, "h", {("u", 0): 1})

    run(scenario())
    assert broker.coordinator.delete_groups(["h"]) == {"h": NONE}
    reopened = broker.reopen(clean=False)
    assert reopened.coordinator.group("h") is None
    assert run(fetch(reopened, "g", None)) == {("t", 0): (198, -1, "", NONE), ("t", 1): (199, -1, "", NONE)}


def test_deletions_survive_a_restart(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        await commit(broker, "g", {("t", 0): 1, ("t", 1): 2})
        await commit(broker, "h", {("t", 0): 3})
        (a,) = await stable_group(broker, "k", 1)
        await commit(broker, "k", {("u", 0): 4}, generation=a.generation_id, member_id=a.member_id)
        assert broker.coordinator.delete_groups(["h"]) == {"h": NONE}
        assert broker.coordinator.delete_offsets("g", [("t", 1)]) == (NONE, {("t", 1): NONE})
        assert broker.coordinator.on_topic_deleted("u") == 1

    run(scenario())
    reopened = broker.reopen(clean=False)
    coordinator = reopened.coordinator
    assert coordinator.group("h") is None
    assert list(coordinator.group("g").offsets) == [("t", 0)]
    assert coordinator.group("k").offsets == {} and coordinator.group("k").generation_id == 1


def test_a_restarted_empty_group_keeps_when_it_emptied(tmp_path):
    broker = _broker(tmp_path)

    async def scenario():
        (a,) = await stable_group(broker, "g", 1)
        await commit(broker, "g", {("t", 0): 1}, generation=a.generation_id, member_id=a.member_id)
        await call(broker, messages.LeaveGroupRequest(group_id="g", member_id=a.member_id), 0)
        return broker.coordinator.group("g").state_timestamp_ms

    emptied_at = run(scenario())
    broker.clock.advance(60_000)
    reopened = broker.reopen()
    group = reopened.coordinator.group("g")
    assert (group.state.value, group.generation_id, group.state_timestamp_ms) == ("Empty", 2, emptied_at)
    # A stored generation with members comes back Stable; when its member, gone with the old
    # broker, is expired by its session, the group counts as empty from then on.
    (b,) = run(stable_group(reopened, "g", 1))
    reopened.clock.advance(1000)
    restarted = reopened.reopen(clean=False)
    loaded_at = restarted.clock.now_ms

    async def expire_the_member():
        assert await heartbeat(restarted, "g", b.generation_id, b.member_id) == NONE
        restarted.clock.advance(SESSION_MS + 1)
        return await heartbeat(restarted, "g", b.generation_id, b.member_id)

    assert run(expire_the_member()) == errors.UnknownMemberIdError.code
    group = restarted.coordinator.group("g")
    assert (group.state.value, group.state_timestamp_ms) == ("Empty", loaded_at + SESSION_MS)
    assert run(join(restarted, "g", "c-gone")).error_code == errors.UnknownMemberIdError.code


def test_transactional_offsets_in_the_journal_survive_replay_and_compaction(tmp_path):
    """Staged offsets (TxnOffsetCommit) are journaled per producer; a transaction's end records the
    offsets it committed, so replay and compaction agree with what the coordinator decided."""
    from kwire.broker.coordinator import GroupStore
    from kwire.broker.coordinator.offsets import CommittedOffset

    def off(n: int, at: int = 1) -> CommittedOffset:
        return CommittedOffset(n, -1, "", at)

    directory = tmp_path / "groups"
    store = GroupStore(directory)
    store.put_offsets("g", {("t", 0): off(1)})
    store.put_txn_offsets("g", 7, {("t", 0): off(5), ("t", 1): off(6)})
    store.put_txn_offsets("g", 8, {("t", 1): off(9)})
    store.end_txn("g", 7, {("t", 0): off(5)})           # committed; its (t, 1) lost to a newer plain commit
    store.put_txn_offsets("solo", 9, {("t", 0): off(2)})
    store.end_txn("solo", 9, {})                        # aborted: the group had nothing else, so it is gone
    store.close()
    for compact in (False, True):
        store = GroupStore(directory)
        assert store.findings == []
        assert store.groups["g"].offsets == {("t", 0): off(5)}
        assert store.groups["g"].pending == {8: {("t", 1): off(9)}}
        assert "solo" not in store.groups
        if compact:
            assert len(_journal_lines(directory)) == 2   # one offsets line, one staged line
        store.compact()
        store.close()


def _journal_lines(directory) -> list[dict]:
    return [json.loads(line.split(b" ", 1)[1]) for line in (directory / JOURNAL_NAME).read_bytes().splitlines()]


def test_a_plain_commit_made_after_a_transaction_staged_its_offset_wins():
    """Kafka keeps whichever is later in its log; the commit times stand in for that order."""
    from kwire.broker.coordinator.offsets import CommittedOffset, newer_txn_offsets

    committed = {("t", 0): CommittedOffset(50, -1, "", 200), ("t", 1): CommittedOffset(3, -1, "", 100)}
    staged = {("t", 0): CommittedOffset(40, -1, "", 150), ("t", 1): CommittedOffset(8, -1, "", 150),
              ("t", 2): CommittedOffset(1, -1, "", 150)}
    assert newer_txn_offsets(committed, staged) == {("t", 1): staged[("t", 1)], ("t", 2): staged[("t", 2)]}


def test_a_generation_stored_without_assignments_is_not_loaded_as_stable(tmp_path):
    """An earlier kwire stored each generation at its join, before the assignment: such a record
    loaded Stable would leave its members with nothing to read until some other rebalance."""
    broker = _broker(tmp_path)
    members = tuple(MemberRecord(f"m{i}", None, "c", "/127.0.0.1", 10_000, SESSION_MS, b"sub", b"")
                    for i in range(2))
    broker.coordinator.store.put_group(GroupRecord("mid", "consumer", 4, "range", "m0", "CompletingRebalance",
                                                   broker.clock(), members))
    broker.coordinator.store.put_group(GroupRecord("done", "consumer", 4, "range", "m0", "Stable", broker.clock(),
                                                   (members[0], MemberRecord("m1", None, "c", "/127.0.0.1", 10_000,
                                                                             SESSION_MS, b"sub", b"parts"))))
    reopened = broker.reopen()
    mid, done = reopened.coordinator.group("mid"), reopened.coordinator.group("done")
    assert (mid.state.value, mid.generation_id, mid.members) == ("Empty", 4, {})
    assert (done.state.value, done.generation_id, sorted(done.members)) == ("Stable", 4, ["m0", "m1"])
    reopened.coordinator.close()
