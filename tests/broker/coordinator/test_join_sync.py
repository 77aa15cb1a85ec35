"""JoinGroup and SyncGroup: generations, leaders, assignments, rebalances and their timeouts."""

from __future__ import annotations

import asyncio

from kwire.protocol import errors

from . import (
    Broker,
    consumer_metadata,
    describe,
    heartbeat,
    join,
    join_new,
    leave,
    pause,
    run,
    stable_group,
    sync,
)

NONE = 0


def test_one_member_joins_and_gets_its_assignment(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        first = await join(broker, "g", client_id="app")
        assert first.error_code == errors.MemberIdRequiredError.code
        assert first.member_id.startswith("app-") and first.generation_id == -1
        joined = await join(broker, "g", first.member_id, client_id="app")
        assert joined.error_code == NONE
        assert joined.member_id == first.member_id == joined.leader
        assert joined.generation_id == 1
        assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
        assert joined.skip_assignment is False
        assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, consumer_metadata(["t"]))]
        synced = await sync(broker, "g", 1, joined.member_id, {joined.member_id: b"mine"})
        assert (synced.error_code, synced.assignment) == (NONE, b"mine")
        assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")
        group = await describe(broker, "g")
        assert (group.group_state, group.protocol_type, group.protocol_data) == ("Stable", "consumer", "range")
        (member,) = group.members
        assert (member.member_id, member.client_id, member.client_host) == (joined.member_id, "app", "/127.0.0.1")
        assert (member.member_metadata, member.member_assignment) == (consumer_metadata(["t"]), b"mine")
        assert await heartbeat(broker, "g", 1, joined.member_id) == NONE

    run(scenario())


def test_three_members_land_in_one_generation_and_followers_get_the_leaders_assignment(tmp_path):
    # The initial delay holds the first rebalance of a new group while members keep arriving.
    broker = Broker(tmp_path, group_initial_rebalance_delay_ms=150)

    async def scenario():
        joins = await asyncio.gather(*(join(broker, "g", version=3, client_id=f"c{i}") for i in range(3)))
        assert {j.error_code for j in joins} == {NONE}
        assert {j.generation_id for j in joins} == {1}
        assert len({j.member_id for j in joins}) == 3
        (leader,) = [j for j in joins if j.leader == j.member_id]
        assert {j.leader for j in joins} == {leader.member_id}
        assert sorted(m.member_id for m in leader.members) == sorted(j.member_id for j in joins)
        followers = [j for j in joins if j is not leader]
        assert all(f.members == [] for f in followers)

        waiting = [asyncio.ensure_future(sync(broker, "g", 1, f.member_id, version=3)) for f in followers]
        await pause(broker, 0.05)
        assert not any(w.done() for w in waiting)  # followers wait for the leader
        assert (await describe(broker, "g")).group_state == "CompletingRebalance"
        plan = {j.member_id: f"part-{j.member_id}".encode() for j in joins}
        mine = await sync(broker, "g", 1, leader.member_id, plan, version=3)
        assert (mine.error_code, mine.assignment) == (NONE, plan[leader.member_id])
        for follower, answer in zip(followers, await asyncio.gather(*waiting), strict=True):
            assert (answer.error_code, answer.assignment) == (NONE, plan[follower.member_id])
        assert (await describe(broker, "g")).group_state == "Stable"

    run(scenario())


def test_member_id_required_then_the_given_id_joins(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        required = await join(broker, "g", version=4)
        assert required.error_code == errors.MemberIdRequiredError.code
        # The id is pending: the group has no member yet, and made-up ids are refused.
        assert (await describe(broker, "g")).members == []
        made_up = await join(broker, "g", "c-not-given-out", version=4)
        assert made_up.error_code == errors.UnknownMemberIdError.code
        joined = await join(broker, "g", required.member_id, version=4)
        assert (joined.error_code, joined.member_id, joined.generation_id) == (NONE, required.member_id, 1)
        # Before v4 a member gets its id and joins in one go.
        old = await join(broker, "h", version=3)
        assert (old.error_code, old.generation_id) == (NONE, 1) and old.member_id

    run(scenario())


def test_a_pending_member_holds_the_rebalance_until_it_joins(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        (a,) = await stable_group(broker, "g", 1)
        required = await join(broker, "g")
        assert required.error_code == errors.MemberIdRequiredError.code
        # The leader rejoins; the rebalance still waits for the member that got its id.
        a_again = asyncio.ensure_future(join(broker, "g", a.member_id))
        await pause(broker, 0.05)
        assert not a_again.done()
        b = await join(broker, "g", required.member_id)
        assert (b.error_code, b.generation_id) == (NONE, 2)
        assert (await a_again).generation_id == 2

    run(scenario())


def test_a_new_member_triggers_a_rebalance_that_the_others_learn_from_heartbeats(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        (a,) = await stable_group(broker, "g", 1)
        assert a.generation_id == 1
        b_join = asyncio.ensure_future(join_new(broker, "g", client_id="b"))
        await pause(broker, 0.01)
        assert not b_join.done()
        assert (await describe(broker, "g")).group_state == "PreparingRebalance"
        assert await heartbeat(broker, "g", 1, a.member_id) == errors.RebalanceInProgressError.code
        # The old generation's assignment can't be fetched any more either.
        assert (await sync(broker, "g", 1, a.member_id)).error_code == errors.RebalanceInProgressError.code
        a2 = await join(broker, "g", a.member_id)
        b = await b_join
        assert (a2.generation_id, b.generation_id) == (2, 2)
        assert a2.leader == b.leader == a.member_id  # the leader stays the leader
        assert sorted(m.member_id for m in a2.members) == sorted([a.member_id, b.member_id])
        assert b.members == []

    run(scenario())


def test_a_member_leaving_triggers_a_rebalance(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2)
        resp = await leave(broker, "g", [(b.member_id, None)])
        assert resp.error_code == NONE and [m.error_code for m in resp.members] == [NONE]
        assert await heartbeat(broker, "g", a.generation_id, a.member_id) == errors.RebalanceInProgressError.code
        a2 = await join(broker, "g", a.member_id)
        assert a2.generation_id == a.generation_id + 1
        assert [m.member_id for m in a2.members] == [a.member_id]
        assert await heartbeat(broker, "g", a2.generation_id, b.member_id) == errors.UnknownMemberIdError.code
        # The last member leaving empties the group; its generation still moves on.
        await sync(broker, "g", a2.generation_id, a.member_id, {a.member_id: b""})
        await leave(broker, "g", [(a.member_id, None)], version=1)
        group = await describe(broker, "g")
        assert (group.group_state, group.members) == ("Empty", [])
        assert broker.coordinator.group("g").generation_id == a2.generation_id + 1

    run(scenario())


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2, rebalance_ms=200)
        c_join = asyncio.ensure_future(join_new(broker, "g", client_id="c", rebalance_ms=200))
        await asyncio.sleep(0)
        a2 = await join(broker, "g", a.member_id, rebalance_ms=200)  # b never rejoins
        c = await c_join
        assert a2.generation_id == c.generation_id == a.generation_id + 1
        assert sorted(m.member_id for m in a2.members) == sorted([a.member_id, c.member_id])
        assert await heartbeat(broker, "g", a2.generation_id, b.member_id) == errors.UnknownMemberIdError.code

    run(scenario())


def test_session_timeout_removes_a_silent_member_and_rebalances(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2, session_ms=300)
        for _ in range(40):  # a heartbeats, b stays silent until its session runs out
            await pause(broker, 0.03)
            code = await heartbeat(broker, "g", a.generation_id, a.member_id)
            if code:
                break
        assert code == errors.RebalanceInProgressError.code
        a2 = await join(broker, "g", a.member_id, session_ms=300)
        assert [m.member_id for m in a2.members] == [a.member_id]
        assert await heartbeat(broker, "g", a2.generation_id, b.member_id) == errors.UnknownMemberIdError.code
        # And the last member timing out leaves the group empty, one generation on.
        await sync(broker, "g", a2.generation_id, a.member_id, {a.member_id: b""})
        await pause(broker, 0.5)
        group = await describe(broker, "g")
        assert (group.group_state, group.members) == ("Empty", [])
        assert broker.coordinator.group("g").generation_id == a2.generation_id + 1

    run(scenario())


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a = await join_new(broker, "g", rebalance_ms=200)
        b_join = asyncio.ensure_future(join_new(broker, "g", client_id="b", rebalance_ms=200))
        await asyncio.sleep(0)
        a = await join(broker, "g", a.member_id, rebalance_ms=200)
        b = await b_join
        leader, follower = (a, b) if a.leader == a.member_id else (b, a)
        await sync(broker, "g", leader.generation_id, leader.member_id, {})
        # The follower never sends SyncGroup: after 0.2 s it is removed and a rebalance starts.
        for _ in range(100):
            code = await heartbeat(broker, "g", leader.generation_id, leader.member_id)
            if code:
                break
            await pause(broker, 0.02)
        assert code == errors.RebalanceInProgressError.code
        assert await heartbeat(broker, "g", follower.generation_id, follower.member_id) == \
            errors.UnknownMemberIdError.code

    run(scenario())


def test_protocol_selection_by_votes_and_inconsistent_protocols(tmp_path):
    broker = Broker(tmp_path, group_initial_rebalance_delay_ms=100)
    md = b"\x00\x00\x00\x00\x00\x00\x00\x00"

    async def scenario():
        prefs = [["roundrobin", "range"], ["range", "roundrobin"], ["range", "roundrobin", "sticky"]]
        joins = await asyncio.gather(*(join(broker, "g", version=3, protocols=[(p, md) for p in pref])
                                       for pref in prefs))
        assert {j.protocol_name for j in joins} == {"range"}  # two votes against one
        # A newcomer must share a protocol with everyone, and the protocol type.
        only_sticky = await join(broker, "g", version=3, protocols=[("sticky", md)])
        assert only_sticky.error_code == errors.InconsistentGroupProtocolError.code
        other_type = await join(broker, "g", version=3, protocol_type="connect", protocols=[("range", md)])
        assert other_type.error_code == errors.InconsistentGroupProtocolError.code
        # A new group needs a protocol type and at least one protocol.
        assert (await join(broker, "h", version=3, protocol_type="")).error_code == \
            errors.InconsistentGroupProtocolError.code
        assert (await join(broker, "h", version=3, protocols=[])).error_code == \
            errors.InconsistentGroupProtocolError.code
        assert broker.coordinator.group("h") is None  # a refused join leaves nothing behind

    run(scenario())


def test_join_validation_errors(tmp_path):
    broker = Broker(tmp_path, group_min_session_timeout_ms=1000, group_max_session_timeout_ms=5000)

    async def scenario():
        assert (await join(broker, "g", session_ms=999)).error_code == errors.InvalidSessionTimeoutError.code
        assert (await join(broker, "g", session_ms=5001)).error_code == errors.InvalidSessionTimeoutError.code
        assert (await join(broker, "", session_ms=2000)).error_code == errors.InvalidGroupIdError.code
        # A member id for a group that doesn't exist.
        assert (await join(broker, "g", "c-123", session_ms=2000)).error_code == errors.UnknownMemberIdError.code
        assert (await sync(broker, "", 1, "m")).error_code == errors.InvalidGroupIdError.code
        assert (await sync(broker, "nope", 1, "m")).error_code == errors.UnknownMemberIdError.code

    run(scenario())


def test_sync_group_errors(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        (a,) = await stable_group(broker, "g", 1)
        gen, mid = a.generation_id, a.member_id
        assert (await sync(broker, "g", gen + 1, mid)).error_code == errors.IllegalGenerationError.code
        assert (await sync(broker, "g", gen, "c-unknown")).error_code == errors.UnknownMemberIdError.code
        # v5 carries the protocol the client believes in; a mismatch is refused.
        assert (await sync(broker, "g", gen, mid, protocol_type="connect")).error_code == \
            errors.InconsistentGroupProtocolError.code
        assert (await sync(broker, "g", gen, mid, protocol_name="roundrobin")).error_code == \
            errors.InconsistentGroupProtocolError.code
        # Stable: a SyncGroup just returns the member's assignment.
        again = await sync(broker, "g", gen, mid, protocol_type="consumer", protocol_name="range")
        assert (again.error_code, again.assignment) == (NONE, f"assignment-{mid}".encode())

    run(scenario())


def test_follower_rejoin_without_changes_keeps_the_generation(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2)
        follower = b if a.leader == a.member_id else a
        again = await join(broker, "g", follower.member_id, client_id="c1")
        assert (again.error_code, again.generation_id, again.members) == (NONE, follower.generation_id, [])
        assert (await describe(broker, "g")).group_state == "Stable"
        # With new metadata it is a rebalance.
        changed = asyncio.ensure_future(join(broker, "g", follower.member_id, topics=["t", "u"]))
        await pause(broker, 0.01)
        assert (await describe(broker, "g")).group_state == "PreparingRebalance"
        changed.cancel()

    run(scenario())


def test_static_member_restart_takes_over_without_rebalance(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a = await join(broker, "g", version=5, instance_id="i-a")  # static members skip MEMBER_ID_REQUIRED
        assert a.error_code == NONE and a.member_id.startswith("i-a-")
        b_join = asyncio.ensure_future(join(broker, "g", version=5, instance_id="i-b"))
        await asyncio.sleep(0)
        a = await join(broker, "g", a.member_id, version=5, instance_id="i-a")
        b = await b_join
        gen = a.generation_id
        await asyncio.gather(sync(broker, "g", gen, a.member_id, {a.member_id: b"A", b.member_id: b"B"}, version=3,
                                  instance_id="i-a"),
                             sync(broker, "g", gen, b.member_id, version=3, instance_id="i-b"))
        # b's process restarts: it joins with its instance id and no member id.
        b2 = await join(broker, "g", version=5, instance_id="i-b")
        assert b2.error_code == NONE and b2.member_id != b.member_id
        assert b2.generation_id == gen and b2.leader == a.member_id and b2.members == []
        assert (await sync(broker, "g", gen, b2.member_id, version=3, instance_id="i-b")).assignment == b"B"
        assert await heartbeat(broker, "g", gen, b.member_id, instance_id="i-b") == errors.FencedInstanceIdError.code
        assert await heartbeat(broker, "g", gen, b2.member_id, instance_id="i-b") == NONE
        assert (await join(broker, "g", b.member_id, version=5, instance_id="i-b")).error_code == \
            errors.FencedInstanceIdError.code
        assert (await describe(broker, "g", version=4)).group_state == "Stable"
        # The restarted leader also takes over quietly, and acts as a follower (old leader id).
        a2 = await join(broker, "g", version=5, instance_id="i-a")
        assert (a2.generation_id, a2.leader, a2.members) == (gen, a.member_id, [])
        assert (await sync(broker, "g", gen, a2.member_id, version=3, instance_id="i-a")).assignment == b"A"
        # A restart with different metadata needs a new assignment: rebalance.
        b3 = asyncio.ensure_future(join(broker, "g", version=5, instance_id="i-b", topics=["other"]))
        await pause(broker, 0.01)
        assert (await describe(broker, "g")).group_state == "PreparingRebalance"
        a3 = await join(broker, "g", a2.member_id, version=5, instance_id="i-a")
        assert (a3.generation_id, (await b3).generation_id) == (gen + 1, gen + 1)

    run(scenario())


def test_a_static_member_replaced_while_parked_is_told_it_is_fenced(tmp_path):
    broker = Broker(tmp_path, group_initial_rebalance_delay_ms=100)

    async def scenario():
        a, b, c = await asyncio.gather(join(broker, "g", version=5, instance_id="i-a"),
                                       join(broker, "g", version=3, client_id="b"),
                                       join(broker, "g", version=3, client_id="c"))
        leader = next(j for j in (a, b, c) if j.leader == j.member_id)
        await asyncio.gather(*(sync(broker, "g", 1, j.member_id, {} if j is not leader else {
            x.member_id: b"" for x in (a, b, c)}) for j in (a, b, c)))
        b2 = asyncio.ensure_future(join(broker, "g", b.member_id, topics=["u"]))  # starts a rebalance
        await asyncio.sleep(0)
        old_a = asyncio.ensure_future(join(broker, "g", a.member_id, version=5, instance_id="i-a"))
        await pause(broker, 0.01)
        assert not old_a.done()  # waiting for c
        new_a = asyncio.ensure_future(join(broker, "g", version=5, instance_id="i-a"))
        assert (await old_a).error_code == errors.FencedInstanceIdError.code
        c2 = await join(broker, "g", c.member_id)
        answers = [await new_a, await b2, c2]
        assert {x.error_code for x in answers} == {NONE} and {x.generation_id for x in answers} == {2}
        assert answers[0].member_id != a.member_id

    run(scenario())


def test_the_initial_delay_grows_while_members_keep_arriving(tmp_path):
    broker = Broker(tmp_path, group_initial_rebalance_delay_ms=200)

    async def scenario():
        a = asyncio.ensure_future(join(broker, "g", version=3, rebalance_ms=2000))
        await pause(broker, 0.05)
        b = asyncio.ensure_future(join(broker, "g", version=3, rebalance_ms=2000))
        await pause(broker, 0.25)  # 0.3 s: past the first 0.2 s, but b arrived within it (so: until 0.4 s)
        assert not a.done()
        first, second = await asyncio.gather(a, b)
        assert (first.generation_id, second.generation_id) == (1, 1)

    run(scenario())


def test_a_second_join_of_a_member_answers_the_first(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2)
        first = asyncio.ensure_future(join(broker, "g", a.member_id))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(join(broker, "g", a.member_id))
        await asyncio.sleep(0)
        assert (await first).error_code == errors.RebalanceInProgressError.code
        b2 = await join(broker, "g", b.member_id)
        assert (await second).generation_id == b2.generation_id == a.generation_id + 1

    run(scenario())


def test_an_abandoned_join_does_not_leave_a_member_behind(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2)
        # c joins, then its connection drops before the answer (the handler task is cancelled).
        c = asyncio.ensure_future(join(broker, "g", version=3, client_id="gone", session_ms=150))
        await asyncio.sleep(0)
        c.cancel()
        a2, b2 = await asyncio.gather(join(broker, "g", a.member_id), join(broker, "g", b.member_id))
        assert len(a2.members or b2.members) == 3  # c is in the generation, but never answers
        leader = a2 if a2.members else b2
        follower = b2 if leader is a2 else a2
        await asyncio.gather(sync(broker, "g", leader.generation_id, leader.member_id, {}),
                             sync(broker, "g", follower.generation_id, follower.member_id))
        await pause(broker, 0.3)  # c's session runs out
        assert await heartbeat(broker, "g", a2.generation_id, a2.member_id) == errors.RebalanceInProgressError.code

    run(scenario())


def test_close_stops_the_timers_and_answers_parked_requests(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2, session_ms=200)
        parked = asyncio.ensure_future(join(broker, "g", a.member_id, session_ms=200))
        await asyncio.sleep(0)
        assert not parked.done()
        broker.coordinator.close()
        broker.coordinator.close()  # twice is fine
        assert (await parked).error_code == errors.NotCoordinatorError.code
        await pause(broker, 0.3)
        assert broker.coordinator.group("g").has(b.member_id)  # nobody expired it after close

    run(scenario())


def test_followers_waiting_in_sync_are_told_when_a_new_rebalance_starts(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a = await join_new(broker, "g")
        b_join = asyncio.ensure_future(join_new(broker, "g", client_id="b"))
        await asyncio.sleep(0)
        a = await join(broker, "g", a.member_id)
        b = await b_join
        follower = b if a.leader == a.member_id else a
        waiting = asyncio.ensure_future(sync(broker, "g", follower.generation_id, follower.member_id))
        await pause(broker, 0.01)
        assert not waiting.done()
        newcomer = asyncio.ensure_future(join_new(broker, "g", client_id="c"))  # before the leader synced
        answer = await waiting
        assert (answer.error_code, answer.assignment) == (errors.RebalanceInProgressError.code, b"")
        newcomer.cancel()

    run(scenario())


def test_static_members_stay_through_a_rebalance_they_miss(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        s = await join(broker, "g", version=5, instance_id="i-s", rebalance_ms=150)
        await sync(broker, "g", s.generation_id, s.member_id, {s.member_id: b""}, instance_id="i-s")
        d_join = asyncio.ensure_future(join(broker, "g", version=3, client_id="d", rebalance_ms=150))
        d = await d_join  # s does not rejoin in time; being static, it is kept
        assert d.generation_id == s.generation_id + 1
        leader_view = await describe(broker, "g")
        assert sorted(m.member_id for m in leader_view.members) == sorted([s.member_id, d.member_id])
        assert await heartbeat(broker, "g", s.generation_id, s.member_id, instance_id="i-s") == \
            errors.IllegalGenerationError.code
        s2 = await join(broker, "g", s.member_id, version=5, instance_id="i-s", rebalance_ms=150)
        assert (s2.error_code, s2.generation_id) == (NONE, d.generation_id)

    run(scenario())


def test_close_from_a_worker_thread_as_the_broker_does(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2)
        parked = asyncio.ensure_future(join(broker, "g", a.member_id))
        await asyncio.sleep(0)
        await asyncio.get_running_loop().run_in_executor(None, broker.coordinator.close)
        assert (await parked).error_code == errors.NotCoordinatorError.code
        assert broker.coordinator.store.closed

    run(scenario())
