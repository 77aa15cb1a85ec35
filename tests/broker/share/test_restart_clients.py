"""Share groups across a broker restart with the real clients: confluent-kafka's ShareConsumer and
kwire's.  The group's members, epochs and assignments come back from ``__consumer_offsets`` and
its share state from ``__share_group_state``; a consumer that stays open through the restart
heartbeats on with its member epoch instead of joining a new group."""

from __future__ import annotations

import asyncio
import json
import time

from kwire.broker import EmbeddedBroker
from kwire.client import ShareConsumer
from kwire.client.connection import BrokerConnection
from kwire.protocol import messages
from kwire.protocol.errors import ErrorCode

from ...cli.test_consume_cmd import ok
from ..test_share_group_clients import create_topic, poll_all, produce, set_group_configs, share_consumer, total


def ask(port: int, request):
    async def run():
        conn = await BrokerConnection.open("127.0.0.1", port)
        try:
            return await conn.send(request)
        finally:
            conn.close()
    return asyncio.run(run())


def describe(port: int, group: str):
    """ShareGroupDescribe over the wire, retried while the coordinator still loads after a start."""
    deadline = time.monotonic() + 15
    while True:
        [g] = ask(port, messages.ShareGroupDescribeRequest(group_ids=[group],
                                                            include_authorized_operations=False)).groups
        if g.error_code != 14 or time.monotonic() > deadline:  # COORDINATOR_LOAD_IN_PROGRESS
            return g
        time.sleep(0.1)


def list_share_groups(port: int) -> list[tuple[str, str]]:
    """The share groups, asked again while the coordinators still load after a restart: Kafka
    answers ListGroups COORDINATOR_LOAD_IN_PROGRESS then, and its clients retry (as here, 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        resp = ask(port, messages.ListGroupsRequest(states_filter=[], types_filter=["share"]))
        if resp.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert resp.error_code == 0
    return [(g.group_id, g.group_state) for g in resp.groups]


def kwire_consume(bootstrap: str, group: str, topic: str, n: int) -> list[int]:
    """Offsets a kwire ShareConsumer got (implicitly accepted) until ``n`` or 30 s; it then leaves."""
    got: list[int] = []
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 10}) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [r.offset for r in c.poll(0.5)]
        c.commit_sync()
    return got


def test_a_confluent_share_consumer_keeps_its_membership_through_a_restart(tmp_path):
    data, topic, group = tmp_path / "data", "jobs", "workers"
    with EmbeddedBroker(data, default_partitions=1) as b:
        port, bs = b.port, b.bootstrap
        create_topic(bs, topic)
        set_group_configs(bs, group, share_auto_offset_reset="earliest")
        produce(bs, topic, 20)
        # A kwire member first (it joins and leaves: the group epoch moves past what a new group has).
        assert sorted(kwire_consume(bs, group, topic, 10)) == list(range(10))
        c = share_consumer(bs, group, [topic], max_poll_records=10)
        got = poll_all([c], lambda g: total(g) >= 10)
        assert sorted(m.offset() for m in got[0]) == list(range(10, 20))
        c.commit_sync()  # (implicit acknowledgements otherwise go with the next poll)
        before = describe(port, group)
        assert before.error_code == 0 and len(before.members) == 1 and before.group_epoch >= 3
    try:
        # The same port: the consumer, still open, finds the broker again.
        with EmbeddedBroker(data, port=port, default_partitions=1) as b:
            after = describe(port, group)
            assert after.error_code == 0 and after.group_epoch == before.group_epoch
            assert [(m.member_id, m.member_epoch) for m in after.members] == \
                [(m.member_id, m.member_epoch) for m in before.members]
            assert list_share_groups(port) == [(group, "Stable")]
            produce(b.bootstrap, topic, 5)
            more = poll_all([c], lambda g: total(g) >= 5)
            assert sorted(m.offset() for m in more[0]) == list(range(20, 25))
            # It carried on as the member it was: no new join (which would start the epochs over).
            later = describe(port, group)
            assert [m.member_id for m in later.members] == [m.member_id for m in before.members]
            assert later.group_epoch == before.group_epoch
    finally:
        c.close()


def test_a_kwire_share_consumer_resumes_after_a_restart_and_the_empty_group_is_listed(tmp_path):
    data, topic, group = tmp_path / "data", "tasks", "resumers"
    with EmbeddedBroker(data, default_partitions=1) as b:
        create_topic(b.bootstrap, topic)
        set_group_configs(b.bootstrap, group, share_auto_offset_reset="earliest")
        produce(b.bootstrap, topic, 30, per_batch=10)
        assert sorted(kwire_consume(b.bootstrap, group, topic, 10)) == list(range(10))
    with EmbeddedBroker(data, default_partitions=1) as b:
        # No member since the last left, but the group and its offsets are still there.
        assert list_share_groups(b.port) == [(group, "Empty")]
        listed = json.loads(ok("groups", "list", "--json", "-b", b.bootstrap))["groups"]  # as a user sees it
        assert [(g["group_id"], g["type"], g["state"]) for g in listed] == [(group, "share", "Empty")]
        desc = describe(b.port, group)
        assert desc.error_code == 0 and desc.group_state == "Empty" and desc.members == []
        got = kwire_consume(b.bootstrap, group, topic, 20)
        assert sorted(got) == list(range(10, 30))
        # And a confluent member finds nothing left to deliver.
        c = share_consumer(b.bootstrap, group, [topic])
        try:
            assert total(poll_all([c], lambda g: False, timeout=2)) == 0
        finally:
            c.close()


def test_with_fsync_always_what_a_member_accepted_is_on_disk_when_it_is_answered(tmp_path):
    data, topic, group = tmp_path / "data", "ledger", "auditors"
    with EmbeddedBroker(data, default_partitions=1, fsync="always") as b:
        create_topic(b.bootstrap, topic)
        set_group_configs(b.bootstrap, group, share_auto_offset_reset="earliest")
        produce(b.bootstrap, topic, 20, per_batch=10)
        flushes = b.broker.state.durability.flushes
        assert sorted(kwire_consume(b.bootstrap, group, topic, 20)) == list(range(20))
        assert b.broker.state.durability.flushes > flushes  # the acknowledgements' group commits
    with EmbeddedBroker(data, default_partitions=1) as b:
        c = share_consumer(b.bootstrap, group, [topic])
        try:
            assert total(poll_all([c], lambda g: False, timeout=2)) == 0  # nothing redelivered
        finally:
            c.close()
