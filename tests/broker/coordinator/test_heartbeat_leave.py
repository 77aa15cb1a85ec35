"""Heartbeat and LeaveGroup answers, in Kafka's order of checks."""

from __future__ import annotations

import asyncio

from kwire.protocol import errors

from . import Broker, describe, heartbeat, join, leave, pause, run, stable_group, sync

NONE = 0


def test_heartbeat_errors(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        assert await heartbeat(broker, "", 1, "m") == errors.InvalidGroupIdError.code
        assert await heartbeat(broker, "nope", 1, "m") == errors.UnknownMemberIdError.code
        a, b = await stable_group(broker, "g", 2)
        gen = a.generation_id
        assert await heartbeat(broker, "g", gen, a.member_id, version=0) == NONE
        assert await heartbeat(broker, "g", gen, "c-stranger") == errors.UnknownMemberIdError.code
        assert await heartbeat(broker, "g", gen - 1, a.member_id) == errors.IllegalGenerationError.code
        assert await heartbeat(broker, "g", gen + 1, a.member_id) == errors.IllegalGenerationError.code
        # During the join phase the old generation is still current: members learn to rejoin.
        rejoin = asyncio.ensure_future(join(broker, "g", a.member_id))
        await asyncio.sleep(0)
        assert await heartbeat(broker, "g", gen, b.member_id) == errors.RebalanceInProgressError.code
        b2 = await join(broker, "g", b.member_id)
        a2 = await rejoin
        # CompletingRebalance: heartbeats of the new generation are fine (followers wait for the leader).
        assert await heartbeat(broker, "g", b2.generation_id, b2.member_id) == NONE
        assert await heartbeat(broker, "g", gen, b2.member_id) == errors.IllegalGenerationError.code
        assert a2.generation_id == gen + 1

    run(scenario())


def test_heartbeats_keep_a_member_alive_past_its_session_timeout(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        (a,) = await stable_group(broker, "g", 1, session_ms=200)
        for _ in range(8):  # 0.4 s in all, each gap well under the session timeout
            await pause(broker, 0.05)
            assert await heartbeat(broker, "g", a.generation_id, a.member_id) == NONE
        await pause(broker, 0.4)
        assert await heartbeat(broker, "g", a.generation_id, a.member_id) == errors.UnknownMemberIdError.code

    run(scenario())


def test_static_member_heartbeat_with_a_stale_member_id_is_fenced(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a = await join(broker, "g", version=5, instance_id="i-a")
        await sync(broker, "g", a.generation_id, a.member_id, {a.member_id: b"x"}, instance_id="i-a")
        assert await heartbeat(broker, "g", a.generation_id, a.member_id, version=3, instance_id="i-a") == NONE
        assert await heartbeat(broker, "g", a.generation_id, "i-a-old", version=3, instance_id="i-a") == \
            errors.FencedInstanceIdError.code
        # An instance id the group doesn't know is no fence: the member id decides.
        assert await heartbeat(broker, "g", a.generation_id, a.member_id, instance_id="i-other") == NONE

    run(scenario())


def test_leave_group_v0_to_v2_answer_in_the_top_level_error(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        a, b = await stable_group(broker, "g", 2)
        for version in (0, 1, 2):
            assert (await leave(broker, "g", [("c-stranger", None)], version=version)).error_code == \
                errors.UnknownMemberIdError.code
        assert (await leave(broker, "", [(a.member_id, None)], version=0)).error_code == \
            errors.InvalidGroupIdError.code
        assert (await leave(broker, "nope", [(a.member_id, None)], version=2)).error_code == \
            errors.UnknownMemberIdError.code
        resp = await leave(broker, "g", [(b.member_id, None)], version=0)
        assert resp.error_code == NONE
        assert (await describe(broker, "g")).group_state == "PreparingRebalance"

    run(scenario())


def test_leave_group_batch_with_instance_ids(tmp_path):
    broker = Broker(tmp_path, group_initial_rebalance_delay_ms=100)

    async def scenario():
        a, b, c = await asyncio.gather(join(broker, "g", version=5, instance_id="i-a"),
                                       join(broker, "g", version=5, instance_id="i-b"),
                                       join(broker, "g", version=3, client_id="dyn"))
        assert {a.generation_id, b.generation_id, c.generation_id} == {1}
        resp = await leave(broker, "g", [
            ("", "i-a"),                # the admin client removes a static member by instance id
            ("i-b-stale", "i-b"),       # a zombie of i-b: fenced, i-b stays
            (c.member_id, None),        # a dynamic member leaves
            ("", "i-unknown"),          # nobody has that instance id
            ("c-stranger", None),
        ])
        assert resp.error_code == NONE
        assert [(m.member_id, m.group_instance_id, m.error_code) for m in resp.members] == [
            ("", "i-a", NONE),
            ("i-b-stale", "i-b", errors.FencedInstanceIdError.code),
            (c.member_id, None, NONE),
            ("", "i-unknown", errors.UnknownMemberIdError.code),
            ("c-stranger", None, errors.UnknownMemberIdError.code),
        ]
        assert [m.member_id for m in (await describe(broker, "g")).members] == [b.member_id]
        # A group the broker doesn't know: every member is unknown, no group-level error.
        resp = await leave(broker, "nope", [("x", None), ("", "i-x")], version=3)
        assert resp.error_code == NONE and [m.error_code for m in resp.members] == [errors.UnknownMemberIdError.code] * 2
        resp = await leave(broker, "", [("x", None)], version=4)
        assert (resp.error_code, resp.members) == (errors.InvalidGroupIdError.code, [])

    run(scenario())


def test_a_pending_member_may_leave(tmp_path):
    broker = Broker(tmp_path)

    async def scenario():
        (a,) = await stable_group(broker, "g", 1)
        pending = await join(broker, "g")
        assert pending.error_code == errors.MemberIdRequiredError.code
        rejoin = asyncio.ensure_future(join(broker, "g", a.member_id))
        await pause(broker, 0.01)
        assert not rejoin.done()  # the rebalance waits for the pending member...
        resp = await leave(broker, "g", [(pending.member_id, None)])
        assert [m.error_code for m in resp.members] == [NONE]
        assert (await rejoin).generation_id == a.generation_id + 1  # ...until it leaves

    run(scenario())
