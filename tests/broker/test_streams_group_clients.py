"""KIP-1071 streams groups end to end: StreamsGroupHeartbeat / StreamsGroupDescribe over real
sockets to a broker each test starts, spoken with kwire's protocol layer (no Python client has
the Streams Rebalance Protocol), and what real clients see of a streams group (ListGroups,
DescribeGroups) with confluent-kafka and kafka-python."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from kwire.broker import EmbeddedBroker
from kwire.client.config import parse_host_port
from kwire.client.connection import BrokerConnection
from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    ErrorCode,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    StaleMemberEpochError,
    StreamsInvalidTopologyError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)

HB = messages.StreamsGroupHeartbeatRequest
SUB = HB.Topology.Subtopology
MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS = 1, 3


def topology(epoch=0, source="input", changelog="app-store-changelog", changelog_partitions=0):
    info = SUB.TopicInfo
    compact = [HB.KeyValue(key="cleanup.policy", value="compact")]  # what Kafka Streams asks of a changelog
    return HB.Topology(epoch=epoch, subtopologies=[SUB(
        subtopology_id="0", source_topics=[source], source_topic_regex=[],
        state_changelog_topics=[info(name=changelog, partitions=changelog_partitions, replication_factor=0,
                                     topic_configs=compact)],
        repartition_sink_topics=[], repartition_source_topics=[], copartition_groups=[])])


class Member:
    """One streams client's heartbeats, over its own connection."""

    def __init__(self, conn: BrokerConnection, member_id: str, group: str = "app", process: str | None = None):
        self.conn, self.member_id, self.group = conn, member_id, group
        self.process = process or f"process-{member_id}"
        self.epoch = 0
        self.active: dict[str, list[int]] = {}
        self.standby: dict[str, list[int]] = {}

    @staticmethod
    def _ids(tasks):
        return [HB.TaskIds(subtopology_id=s, partitions=ps) for s, ps in sorted(tasks.items())]

    async def beat(self, **fields):
        joining = self.epoch == 0
        req = HB(group_id=self.group, member_id=self.member_id, member_epoch=self.epoch, endpoint_information_epoch=-1,
                 rebalance_timeout_ms=30_000 if joining else -1,
                 topology=fields.pop("topology", topology()) if joining else None,
                 active_tasks=self._ids(self.active), standby_tasks=self._ids(self.standby), warmup_tasks=[],
                 process_id=self.process if joining else None, **fields)
        resp = await self.conn.send(req)
        if resp.error_code == ErrorCode.NONE:
            self.epoch = resp.member_epoch
            if resp.active_tasks is not None:
                self.active = {t.subtopology_id: sorted(t.partitions) for t in resp.active_tasks if t.partitions}
                self.standby = {t.subtopology_id: sorted(t.partitions) for t in resp.standby_tasks if t.partitions}
        return resp

    async def leave(self):
        return await self.conn.send(HB(group_id=self.group, member_id=self.member_id, member_epoch=-1,
                                       endpoint_information_epoch=-1))

    def tasks(self) -> set[int]:
        return set(self.active.get("0", ()))


async def connect(bootstrap: str) -> BrokerConnection:
    return await BrokerConnection.open(*parse_host_port(bootstrap))


async def create_topics(conn: BrokerConnection, **partitions: int) -> None:
    C = messages.CreateTopicsRequest
    resp = await conn.send(C(topics=[C.CreatableTopic(name=n, num_partitions=p, replication_factor=1, assignments=[],
                                                      configs=[]) for n, p in partitions.items()],
                             timeout_ms=10_000, validate_only=False))
    assert [t.error_code for t in resp.topics] == [0] * len(partitions)


async def settle(members, rounds=5):
    for _ in range(rounds):
        for m in members:
            resp = await m.beat()
            assert resp.error_code == ErrorCode.NONE, resp


async def describe(conn, *groups, include_ops=False):
    D = messages.StreamsGroupDescribeRequest
    return (await conn.send(D(group_ids=list(groups), include_authorized_operations=include_ops))).groups


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_members_split_tasks_revoke_first_leave_and_describe(tmp_path):
    async def scenario():
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                assert conn.version_for(ApiKey.STREAMS_GROUP_HEARTBEAT) == 0
                assert conn.version_for(ApiKey.STREAMS_GROUP_DESCRIBE) == 0
                await create_topics(conn, input=6)
                a, b = Member(conn, "a"), Member(conn, "b")
                first = await a.beat()
                # The changelog topic does not exist yet: the broker creates it and says so.
                assert first.error_code == ErrorCode.NONE and first.member_epoch >= 1
                assert [s.status_code for s in first.status] == [MISSING_INTERNAL_TOPICS]
                assert "app-store-changelog" in first.status[0].status_detail
                assert first.heartbeat_interval_ms == 5000
                await a.beat()
                assert a.tasks() == set(range(6))
                changelog = broker.state.topics.get("app-store-changelog")  # created by the broker, as Kafka 4.2+
                assert (changelog.partitions, changelog.configs) == (6, {"cleanup.policy": "compact"})
                await b.beat()
                await settle([a, b])
                assert len(a.tasks()) == len(b.tasks()) == 3 and a.tasks() | b.tasks() == set(range(6))

                c = Member(conn, "c")
                joined = await c.beat()
                assert joined.error_code == ErrorCode.NONE and c.tasks() == set()  # revocation comes first
                before = a.tasks()
                await a.beat()
                assert a.tasks() < before and len(a.tasks()) == 2  # a gives tasks up, keeping its epoch
                await settle([a, b, c])
                assert [len(m.tasks()) for m in (a, b, c)] == [2, 2, 2]

                [group] = await describe(conn, "app", include_ops=True)
                assert (group.error_code, group.group_state) == (ErrorCode.NONE, "Stable")
                assert group.topology.epoch == 0
                [sub] = group.topology.subtopologies
                assert sub.source_topics == ["input"]
                assert [(t.name, t.partitions) for t in sub.state_changelog_topics] == [("app-store-changelog", 6)]
                described = {m.member_id: m for m in group.members}
                assert sorted(described) == ["a", "b", "c"]
                for m in (a, b, c):
                    got = described[m.member_id]
                    assert got.process_id == m.process and got.member_epoch == m.epoch
                    assert {p for t in got.assignment.active_tasks for p in t.partitions} == m.tasks()
                    assert got.target_assignment.active_tasks == got.assignment.active_tasks
                assert group.authorized_operations > 0

                left = await c.leave()
                assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
                await settle([a, b])
                assert a.tasks() | b.tasks() == set(range(6)) and len(a.tasks()) == 3
                # A member the group no longer has is told so; an epoch the group never gave is fenced.
                assert (await c.conn.send(HB(group_id="app", member_id="c", member_epoch=5,
                                             endpoint_information_epoch=-1))).error_code == UnknownMemberIdError.code
                stale = Member(conn, "a")
                stale.epoch = 999
                fenced = await stale.beat()
                assert (fenced.error_code, fenced.error_message) == (FencedMemberEpochError.code, (
                    f"The streams group member has a greater member epoch (999) than the one known by the group "
                    f"coordinator ({a.epoch}). The member must abandon all its partitions and rejoin."))
            finally:
                conn.close()

    run(scenario())


def test_bad_topology_unknown_group_and_missing_sources_answer_as_kafka(tmp_path):
    async def scenario():
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                bad = await Member(conn, "x").beat(topology=topology(changelog_partitions=3))
                assert bad.error_code == StreamsInvalidTopologyError.code
                assert bad.error_message == ("Changelog topic app-store-changelog must have an undefined partition "
                                             "count, but it is set to 3.")
                [unknown] = await describe(conn, "nope")
                assert (unknown.error_code, unknown.error_message) == (GroupIdNotFoundError.code,
                                                                       "Group nope not found.")
                waiting = Member(conn, "w", group="waits")
                resp = await waiting.beat()
                assert [s.status_code for s in resp.status] == [MISSING_SOURCE_TOPICS]
                [group] = await describe(conn, "waits")
                assert group.group_state == "NotReady" and group.topology.subtopologies is None
                await create_topics(conn, input=2)
                await waiting.beat()  # now the changelog is created
                resp = await waiting.beat()
                assert resp.status is None and waiting.tasks() == {0, 1}
            finally:
                conn.close()

    run(scenario())


@pytest.fixture
def broker_with_streams_group(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as broker:
        async def make():
            conn = await connect(broker.bootstrap)
            try:
                await create_topics(conn, input=2, **{"app-store-changelog": 2})
                m = Member(conn, "a")
                await m.beat()
                await m.beat()
                assert m.tasks() == {0, 1}
            finally:
                conn.close()

        run(make())
        yield broker


def test_real_clients_list_and_describe_a_streams_group(broker_with_streams_group):
    bootstrap = broker_with_streams_group.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Kafka lists a streams group with protocol type "streams": librdkafka's consumer-group listing
    # leaves it out, without an error, as it does against Kafka.
    listed = admin.list_consumer_groups(request_timeout=15).result()
    assert listed.errors == [] and "app" not in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups(["app"], request_timeout=15)["app"]
    # ConsumerGroupDescribe says GROUP_ID_NOT_FOUND ("not a consumer group"); librdkafka then asks
    # DescribeGroups, which describes a group of another type as Dead without members, as Kafka does.
    d = described.result()
    assert d.state == ConsumerGroupState.DEAD and d.members == []

    from kafka import KafkaAdminClient
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    try:
        assert {"group_id": "app", "protocol_type": "streams", "group_state": "Stable", "group_type": "streams"} \
            in kp.list_groups()
    finally:
        kp.close()


def test_list_groups_names_the_type_and_state(broker_with_streams_group):
    async def scenario():
        conn = await connect(broker_with_streams_group.bootstrap)
        try:
            L = messages.ListGroupsRequest
            resp = await conn.send(L(states_filter=[], types_filter=["streams"]))
            assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in resp.groups] == \
                [("app", "streams", "streams", "Stable")]
            resp = await conn.send(L(states_filter=[], types_filter=["consumer"]))
            assert resp.groups == []
            C = messages.ConsumerGroupDescribeRequest
            [g] = (await conn.send(C(group_ids=["app"], include_authorized_operations=False))).groups
            assert (g.error_code, g.error_message) == (GroupIdNotFoundError.code, "Group app is not a consumer group.")
            # A group id is one group type at a time: the other protocols keep off a streams group's id.
            D = messages.DescribeGroupsRequest
            [g] = (await conn.send(D(groups=["app"], include_authorized_operations=False), version=5)).groups
            assert (g.error_code, g.group_state) == (ErrorCode.NONE, "Dead")  # Kafka before DescribeGroups v6
            [g] = (await conn.send(D(groups=["app"], include_authorized_operations=False), version=6)).groups
            assert (g.error_code, g.error_message) == (GroupIdNotFoundError.code, "Group app is not a classic group.")
            J = messages.JoinGroupRequest
            joined = await conn.send(J(group_id="app", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                       member_id="", group_instance_id=None, protocol_type="consumer",
                                       protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")]))
            assert joined.error_code == InconsistentGroupProtocolError.code
            CH = messages.ConsumerGroupHeartbeatRequest
            hb = await conn.send(CH(group_id="app", member_id="x", member_epoch=0, rebalance_timeout_ms=1000,
                                    subscribed_topic_names=["input"], topic_partitions=[]))
            assert hb.error_code == GroupIdNotFoundError.code
            SH = messages.ShareGroupHeartbeatRequest
            share = await conn.send(SH(group_id="app", member_id="y", member_epoch=0, subscribed_topic_names=["input"]))
            assert share.error_code == GroupIdNotFoundError.code
        finally:
            conn.close()

    run(scenario())


def test_a_restart_keeps_the_group_its_epochs_and_tasks(tmp_path):
    async def before():
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                await create_topics(conn, input=4, **{"app-store-changelog": 4})
                a, b = Member(conn, "a"), Member(conn, "b")
                await a.beat()
                await b.beat()
                await settle([a, b])
                [group] = await describe(conn, "app")
                return a, b, group
            finally:
                conn.close()

    async def after(a, b, group):
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                [again] = await describe(conn, "app")
                for _ in range(50):  # the coordinator may still be loading __consumer_offsets: Kafka's retry
                    if again.error_code != CoordinatorLoadInProgressError.code:
                        break
                    await asyncio.sleep(0.1)
                    [again] = await describe(conn, "app")
                assert (again.error_code, again.group_state) == (ErrorCode.NONE, "Stable")
                assert (again.group_epoch, again.assignment_epoch) == (group.group_epoch, group.assignment_epoch)
                assert again.topology == group.topology
                assert {m.member_id: (m.member_epoch, m.assignment) for m in again.members} == \
                    {m.member_id: (m.member_epoch, m.assignment) for m in group.members}
                # The members heartbeat on with the epochs they had; nothing moves.
                for m in (a, b):
                    m.conn = conn
                    held = m.tasks()
                    resp = await m.beat()
                    assert resp.error_code == ErrorCode.NONE and m.tasks() == held
                # Emptied, the group is deleted with DeleteGroups, as Kafka allows.
                await a.leave()
                await b.leave()
                deleted = await conn.send(messages.DeleteGroupsRequest(groups_names=["app"]))
                assert [r.error_code for r in deleted.results] == [ErrorCode.NONE]
                [gone] = await describe(conn, "app")
                assert gone.error_code == GroupIdNotFoundError.code
            finally:
                conn.close()

    a, b, group = run(before())
    assert group.group_state == "Stable" and len(group.members) == 2
    run(after(a, b, group))


async def commit_input(conn, member_id, epoch, partition):
    """An OffsetCommit v9 of one ``input`` partition; its error code."""
    R = messages.OffsetCommitRequest
    part = R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=partition, committed_offset=7, committed_metadata="", committed_leader_epoch=-1)
    resp = await conn.send(R(group_id="app", generation_id_or_member_epoch=epoch, member_id=member_id,
                             group_instance_id=None, retention_time_ms=-1,
                             topics=[R.OffsetCommitRequestTopic(name="input", partitions=[part])]), version=9)
    return resp.topics[0].partitions[0].error_code


async def _a_bumped_past_a_revocation(conn) -> tuple[int, set[int]]:
    """Member "a" holds every task of a 4-partition app, "b" joins, "a" gives some up and moves
    on to the next epoch: (a's epoch before that bump, the tasks it kept)."""
    await create_topics(conn, input=4, **{"app-store-changelog": 4})
    a, b = Member(conn, "a"), Member(conn, "b")
    await a.beat()
    first = a.epoch
    assert a.tasks() == {0, 1, 2, 3}
    await b.beat()
    await a.beat()  # revokes first, at the same epoch
    kept = a.tasks()
    assert a.epoch == first and 0 < len(kept) < 4
    await a.beat()  # revoked: on to the next epoch, the kept tasks keep theirs
    assert a.epoch > first
    return first, kept


def test_an_older_epochs_commit_of_kept_tasks_holds_across_a_restart(tmp_path):
    """KIP-1251 (Kafka 4.3): each active task's assignment epoch is written with the member's
    assignment (StreamsGroupCurrentMemberAssignmentValue's tagged AssignmentEpochs), so after a
    restart a member still sending the epoch before its last bump commits the partitions of the
    tasks it kept, and only those."""
    async def before():
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                return await _a_bumped_past_a_revocation(conn)
            finally:
                conn.close()

    async def after(first, kept):
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                gone = sorted({0, 1, 2, 3} - kept)
                code = await commit_input(conn, "a", first, min(kept))
                for _ in range(50):  # the coordinator may still be loading __consumer_offsets: Kafka's retry
                    if code != CoordinatorLoadInProgressError.code:
                        break
                    await asyncio.sleep(0.1)
                    code = await commit_input(conn, "a", first, min(kept))
                assert code == ErrorCode.NONE
                assert await commit_input(conn, "a", first, gone[0]) == StaleMemberEpochError.code
                assert await commit_input(conn, "a", first - 1, min(kept)) == StaleMemberEpochError.code
            finally:
                conn.close()

    first, kept = run(before())
    run(after(first, kept))


def test_an_older_epochs_transactional_commit_holds_for_kept_tasks_only(tmp_path):
    """TxnOffsetCommit (exactly-once Streams) with the epoch before the member's last bump:
    the partitions of the tasks it kept commit, one it gave up is ILLEGAL_GENERATION, as Kafka's
    commitTransactionalOffset answers KIP-1251's STALE_MEMBER_EPOCH."""
    async def scenario():
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                first, kept = await _a_bumped_past_a_revocation(conn)
                gone = sorted({0, 1, 2, 3} - kept)
                init = await conn.send(messages.InitProducerIdRequest(
                    transactional_id="eos", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
                assert init.error_code == ErrorCode.NONE
                pid, pepoch = init.producer_id, init.producer_epoch
                added = await conn.send(messages.AddOffsetsToTxnRequest(
                    transactional_id="eos", producer_id=pid, producer_epoch=pepoch, group_id="app"))
                assert added.error_code == ErrorCode.NONE
                T = messages.TxnOffsetCommitRequest

                async def txn_commit(partition):
                    part = T.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=3, committed_leader_epoch=-1,
                        committed_metadata="")
                    resp = await conn.send(T(transactional_id="eos", group_id="app", producer_id=pid,
                                             producer_epoch=pepoch, generation_id=first, member_id="a",
                                             group_instance_id=None,
                                             topics=[T.TxnOffsetCommitRequestTopic(name="input", partitions=[part])]),
                                           version=4)
                    return resp.topics[0].partitions[0].error_code

                assert await txn_commit(min(kept)) == ErrorCode.NONE
                assert await txn_commit(gone[0]) == IllegalGenerationError.code
            finally:
                conn.close()

    run(scenario())


def test_streams_version_0_turns_the_protocol_off(tmp_path):
    """As Kafka 4.3 with streams.version lowered to 0: both requests answer UNSUPPORTED_VERSION,
    and ApiVersions still advertises them (Kafka 4.3 gates no API key by a feature)."""
    async def scenario():
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                U = messages.UpdateFeaturesRequest
                down = U(timeout_ms=10_000, validate_only=False, feature_updates=[U.FeatureUpdateKey(
                    feature="streams.version", max_version_level=0, upgrade_type=2)])
                assert (await conn.send(down)).error_code == ErrorCode.NONE
                resp = await Member(conn, "a").beat()
                assert resp.error_code == UnsupportedVersionError.code
                [group] = await describe(conn, "app")
                assert group.error_code == UnsupportedVersionError.code
                # Kafka 4.3's ApiVersions is not gated by features (DefaultApiVersionManager lists every
                # API of the broker listener; only telemetry and unstable versions are left out): both
                # keys stay advertised at level 0, answering UNSUPPORTED_VERSION as above.
                versions = await conn.send(messages.ApiVersionsRequest(
                    client_software_name="kwire-test", client_software_version="0"), version=4)
                keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
                assert keys[ApiKey.STREAMS_GROUP_HEARTBEAT] == (0, 0) and keys[ApiKey.STREAMS_GROUP_DESCRIBE] == (0, 0)
                # A feature finalized at 0 is no finalized feature (Kafka drops level 0); still supported.
                assert "streams.version" not in {f.name for f in versions.finalized_features}
                assert {f.name: (f.min_version, f.max_version) for f in versions.supported_features}[
                    "streams.version"] == (0, 1)
            finally:
                conn.close()

    run(scenario())


def test_offsets_of_a_streams_group_check_member_epochs(broker_with_streams_group):
    """OffsetCommit / OffsetFetch v9 with a streams member's epoch (Kafka's StreamsGroup
    validateOffsetCommit / validateOffsetFetch); its source topics' offsets are in use."""
    async def commit(conn, member_id, epoch):
        return await commit_input(conn, member_id, epoch, 0)

    async def scenario():
        conn = await connect(broker_with_streams_group.bootstrap)
        try:
            [group] = await describe(conn, "app")
            epoch = group.members[0].member_epoch
            assert await commit(conn, "a", epoch) == ErrorCode.NONE
            assert await commit(conn, "a", epoch + 1) == StaleMemberEpochError.code
            assert await commit(conn, "nobody", epoch) == UnknownMemberIdError.code
            F = messages.OffsetFetchRequest
            G = F.OffsetFetchRequestGroup

            async def fetch(member_epoch):
                req = F(groups=[G(group_id="app", member_id="a", member_epoch=member_epoch, topics=None)],
                        require_stable=False)
                return (await conn.send(req, version=9)).groups[0]

            fetched = await fetch(epoch)
            assert fetched.error_code == ErrorCode.NONE
            assert [(t.name, p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions] \
                == [("input", 0, 7)]
            assert (await fetch(epoch + 1)).error_code == StaleMemberEpochError.code
            D = messages.OffsetDeleteRequest
            T = D.OffsetDeleteRequestTopic
            deleted = await conn.send(D(group_id="app", topics=[T(name="input", partitions=[
                T.OffsetDeleteRequestPartition(partition_index=0)])]))
            assert deleted.topics[0].partitions[0].error_code == GroupSubscribedToTopicError.code
        finally:
            conn.close()

    run(scenario())


def test_a_member_that_stops_heartbeating_is_removed_and_its_tasks_move(tmp_path):
    """The session timeout over real sockets: the broker's streams clock is moved past Kafka's
    45 s (as the share-group tests move theirs), never slept through."""
    async def scenario():
        async with EmbeddedBroker(tmp_path / "data") as broker:
            conn = await connect(broker.bootstrap)
            try:
                await create_topics(conn, input=4, **{"app-store-changelog": 4})
                a, b = Member(conn, "a"), Member(conn, "b")
                await a.beat()
                await b.beat()
                await settle([a, b])
                assert len(a.tasks()) == 2
                coordinator = broker.state.streams_groups
                real = coordinator.now_ms
                coordinator.now_ms = lambda: real() + 46_000  # 46 s on: b never heartbeats again
                await a.beat()  # a does, and keeps its session
                gone = coordinator.expire()
                assert gone == [("app", "b")]
                await settle([a])
                assert a.tasks() == {0, 1, 2, 3}
                [group] = await describe(conn, "app")
                assert [m.member_id for m in group.members] == ["a"] and group.group_state == "Stable"
            finally:
                conn.close()

    run(scenario())
