"""The streams-group coordinator's state machine (KIP-1071), on an injected clock."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from kwire.broker.coordinator.streams import (
    StatusCode,
    StreamsGroupCoordinator,
    StreamsGroupState,
    StreamsHeartbeat,
    StreamsSettings,
)
from kwire.broker.coordinator.streams.coordinator import owned_tasks
from kwire.broker.coordinator.streams.member import ACTIVE, STANDBY, by_kind
from kwire.protocol.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidRequestError,
    StaleMemberEpochError,
    StreamsInvalidTopologyError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)


def topic_info(name, partitions=0):
    return NS(name=name, partitions=partitions, replication_factor=0, topic_configs=[])


def topology(epoch=0, sources=("input",), changelog="app-store-changelog", repartition=None, sink=None,
             copartition=()):
    sub = NS(subtopology_id="0", source_topics=list(sources), source_topic_regex=[],
             state_changelog_topics=[topic_info(changelog)] if changelog else [],
             repartition_sink_topics=[sink] if sink else [],
             repartition_source_topics=[], copartition_groups=list(copartition))
    subs = [sub]
    if repartition:
        subs.append(NS(subtopology_id="1", source_topics=[], source_topic_regex=[], state_changelog_topics=[],
                       repartition_sink_topics=[], repartition_source_topics=[topic_info(repartition)],
                       copartition_groups=[]))
    return NS(epoch=epoch, subtopologies=subs)


class Clock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now


class Env:
    def __init__(self, topics=None, standbys=0, initial_delay=0):
        self.topics = dict(topics) if topics is not None else {"input": 6, "app-store-changelog": 6}
        self.clock = Clock()
        self.settings = StreamsSettings(45_000, 5_000, standbys, initial_delay)
        self.deadlines = []
        self.coord = StreamsGroupCoordinator(self.topics.get, settings=lambda gid: self.settings, now_ms=self.clock,
                                             on_deadline=self.deadlines.append)

    def join(self, member, process=None, topo=None, group="app"):
        return self.coord.heartbeat(StreamsHeartbeat(
            group, member, 0, rebalance_timeout_ms=30_000, topology=topo or topology(),
            owned={}, owned_lists_sent=(True, True, True), process_id=process or f"p-{member}"))

    def beat(self, member, epoch, owned=None, group="app"):
        """A heartbeat reporting ``owned`` (a result's assignment, or None: unchanged)."""
        sent = (True, True, True) if owned is not None else (False, False, False)
        return self.coord.heartbeat(StreamsHeartbeat(group, member, epoch, owned=owned, owned_lists_sent=sent))

    def settle(self, results, rounds=6):
        """Heartbeat every member, each reporting what it was last given, until nothing moves."""
        held = {m: r.assignment or {} for m, r in results.items()}
        epochs = {m: r.member_epoch for m, r in results.items()}
        for _ in range(rounds):
            for m in sorted(held):
                r = self.beat(m, epochs[m], dict(held[m]))
                epochs[m] = r.member_epoch
                if r.assignment is not None:
                    held[m] = r.assignment
        return held, epochs


def actives(assignment):
    return {(sid, p) for sid, ps in by_kind(assignment, ACTIVE).items() for p in ps}


def test_two_members_split_the_tasks_and_a_third_takes_some_after_revocation():
    env = Env()
    a = env.join("a")
    # Kafka 4.3 gives a new group's first member epoch 2.
    assert a.member_epoch == 2 and len(actives(a.assignment)) == 6 and a.statuses == []
    b = env.join("b")
    held, epochs = env.settle({"a": a, "b": b})
    assert len(actives(held["a"])) == 3 and len(actives(held["b"])) == 3
    assert actives(held["a"]) | actives(held["b"]) == {("0", p) for p in range(6)}
    assert env.coord.group("app").state is StreamsGroupState.STABLE

    c = env.join("c")
    assert actives(c.assignment) == set()  # nothing is free yet: a and b still hold every task
    # a's next heartbeat revokes first: same epoch, fewer tasks.
    r = env.beat("a", epochs["a"], dict(held["a"]))
    assert r.member_epoch == epochs["a"] and len(actives(r.assignment)) == 2
    held["a"] = r.assignment
    r = env.beat("b", epochs["b"], dict(held["b"]))
    held["b"] = r.assignment
    held, epochs = env.settle({"a": NS(assignment=held["a"], member_epoch=epochs["a"]),
                               "b": NS(assignment=held["b"], member_epoch=r.member_epoch),
                               "c": c})
    assert [len(actives(held[m])) for m in "abc"] == [2, 2, 2]
    assert len(set.union(*(actives(held[m]) for m in "abc"))) == 6
    assert len({epochs[m] for m in "abc"}) == 1


def test_a_member_leaving_or_timing_out_gives_its_tasks_back():
    env = Env()
    a, b = env.join("a"), env.join("b")
    held, epochs = env.settle({"a": a, "b": b})
    left = env.beat("b", -1)
    assert left.member_epoch == -1
    r = env.beat("a", epochs["a"], dict(held["a"]))
    assert len(actives(r.assignment)) == 6
    with pytest.raises(UnknownMemberIdError):
        env.beat("b", epochs["b"])
    # a timeout: nothing but the clock moves.
    env.join("c")
    env.clock.now += 45_001
    gone = env.coord.expire()
    assert {m for _, m in gone} == {"a", "c"}
    assert env.coord.group("app").state is StreamsGroupState.EMPTY
    assert env.deadlines[-1] is None


def test_fencing_and_the_lost_response():
    env = Env()
    a = env.join("a")
    with pytest.raises(FencedMemberEpochError, match="greater member epoch"):
        env.beat("a", a.member_epoch + 5)
    b = env.join("b")
    assert b.member_epoch == 3
    with pytest.raises(FencedMemberEpochError, match="smaller member epoch"):
        env.beat("b", 1)
    with pytest.raises(UnknownMemberIdError):
        env.beat("nobody", 3)


def test_standby_tasks_go_to_another_process_only():
    env = Env(standbys=1)
    a, b = env.join("a", process="p1"), env.join("b", process="p2")
    held, _ = env.settle({"a": a, "b": b})
    for m, other in (("a", "b"), ("b", "a")):
        standby = {(sid, p) for sid, ps in by_kind(held[m], STANDBY).items() for p in ps}
        assert standby == actives(held[other])
    # Two members of one process: no standby can be placed away from its active copy.
    env2 = Env(standbys=1)
    x, y = env2.join("x", process="same"), env2.join("y", process="same")
    held2, _ = env2.settle({"x": x, "y": y})
    assert all(not by_kind(held2[m], STANDBY) for m in "xy")


def test_missing_source_topics_make_the_group_not_ready():
    env = Env(topics={})
    r = env.join("a")
    assert [s[0] for s in r.statuses] == [StatusCode.MISSING_SOURCE_TOPICS]
    assert "input" in r.statuses[0][1] and actives(r.assignment) == set()
    assert env.coord.group("app").state is StreamsGroupState.NOT_READY
    env.topics["input"] = 4  # created: the next heartbeat names the internal topics to create
    r = env.beat("a", r.member_epoch)
    assert [s[0] for s in r.statuses] == [StatusCode.MISSING_INTERNAL_TOPICS]
    assert [(t.name, t.partitions) for t in r.to_create] == [("app-store-changelog", 4)]
    env.topics["app-store-changelog"] = 4
    r = env.beat("a", r.member_epoch)
    assert r.statuses == [] and actives(r.assignment) == {("0", p) for p in range(4)}


def test_repartition_topics_take_their_writers_partition_count():
    env = Env(topics={"input": 3})
    r = env.join("a", topo=topology(sink="app-repartition", repartition="app-repartition", changelog=None))
    assert {(t.name, t.partitions) for t in r.to_create} == {("app-repartition", 3)}


def test_topology_errors_and_epochs():
    env = Env()
    bad = topology()
    bad.subtopologies[0].state_changelog_topics[0].partitions = 3
    with pytest.raises(StreamsInvalidTopologyError, match="must have an undefined partition count"):
        env.join("a", topo=bad)
    regex = topology()
    regex.subtopologies[0].source_topic_regex = ["in.*"]
    with pytest.raises(InvalidRequestError, match="Regular expressions"):
        env.join("a", topo=regex)
    env.join("a", topo=topology(epoch=1))
    # Kafka 4.3's maybeUpdateTopology: no topology updates, whatever the epoch.
    for other in (topology(epoch=1, sources=("other",)), topology(epoch=2)):
        with pytest.raises(InvalidRequestError, match="Topology updates are not supported yet."):
            env.join("b", topo=other)
    stale = env.join("c", topo=topology(epoch=0))
    assert stale.statuses == [(StatusCode.STALE_TOPOLOGY,
                               "The member's topology epoch 0 is behind the group's topology epoch 1.")]
    same = env.join("d", topo=topology(epoch=1))
    assert same.statuses == [] and env.coord.group("app").topology.epoch == 1


def test_request_checks_in_kafkas_words():
    env = Env()
    with pytest.raises(InvalidRequestError, match="Topology must be non-null"):
        env.coord.heartbeat(StreamsHeartbeat("app", "a", 0, rebalance_timeout_ms=1, owned={},
                                             owned_lists_sent=(True, True, True)))
    with pytest.raises(InvalidRequestError, match="ActiveTasks must be empty"):
        env.coord.heartbeat(StreamsHeartbeat("app", "a", 0, rebalance_timeout_ms=1, topology=topology()))
    with pytest.raises(InvalidRequestError, match="MemberId can't be empty"):
        env.beat("", 1)
    with pytest.raises(InvalidRequestError, match="If one task-type is non-null"):
        env.coord.heartbeat(StreamsHeartbeat("app", "a", 3, owned={}, owned_lists_sent=(True, False, False)))


def test_another_group_type_keeps_its_id():
    coord = StreamsGroupCoordinator({"input": 1}.get, other_group_type=lambda gid: "consumer")
    with pytest.raises(GroupIdNotFoundError, match="is not a streams group"):
        coord.heartbeat(StreamsHeartbeat("g", "a", 0, rebalance_timeout_ms=1, topology=topology(), owned={},
                                         owned_lists_sent=(True, True, True)))


def test_offset_commits_check_the_member_epoch_and_delete_waits_for_an_empty_group():
    env = Env()
    a = env.join("a")
    assert env.coord.check_offset_commit("app", "a", a.member_epoch) == 0
    assert env.coord.check_offset_commit("app", "a", a.member_epoch - 1, partitions=[("input", 0)]) != 0
    # Kafka: a member of the streams protocol commits with OffsetCommit v9+.
    assert env.coord.check_offset_commit("app", "a", a.member_epoch, api_version=8) == UnsupportedVersionError.code
    assert env.coord.check_offset_commit("app", "a", a.member_epoch, api_version=8, transactional=True) == 0
    assert env.coord.check_offset_commit("app", "x", 1) != 0
    assert env.coord.check_offset_commit("other", "a", 1) is None
    assert env.coord.delete_group("app") != 0
    env.beat("a", -1)
    assert env.coord.list_groups()[0].state == "Empty"
    assert env.coord.delete_group("app") == 0 and env.coord.list_groups() == []


def test_an_older_epochs_commit_holds_for_the_active_tasks_held_since_then():
    """KIP-1251 (Kafka 4.3's StreamsGroup.validateOffsetCommit): a member whose epoch a heartbeat
    bumped may still commit, with the epoch before, the partitions of the active tasks it has held
    since then, of source and repartition source topics alike; not those it gave up or got later."""
    env = Env(topics={"input": 2, "app-rep": 2})
    topo = topology(sink="app-rep", repartition="app-rep", changelog=None)
    topic_of = {"0": "input", "1": "app-rep"}
    a = env.join("a", topo=topo)
    assert a.member_epoch == 2 and len(actives(a.assignment)) == 4
    env.join("b", topo=topo)
    r = env.beat("a", 2, dict(a.assignment))  # revokes first, at epoch 2
    assert r.member_epoch == 2
    kept = sorted(actives(r.assignment))
    gone = sorted(actives(a.assignment) - set(kept))
    assert len(kept) == len(gone) == 2
    check = env.coord.check_offset_commit

    def parts(tasks):
        return [(topic_of[sid], p) for sid, p in tasks]

    # Pending revocation still counts as held: epoch 2 is the current one anyway, and is checked below too.
    assert check("app", "a", 2, partitions=parts(gone)) == 0
    r = env.beat("a", 2, dict(r.assignment))  # revoked: on to epoch 3, the kept tasks keep epoch 2
    assert r.member_epoch == 3
    assert {t: env.coord.group("app").members["a"].assignment_epoch((ACTIVE, t[0]), t[1]) for t in kept} == \
        dict.fromkeys(kept, 2)
    assert check("app", "a", 2, partitions=parts(kept)) == 0
    assert check("app", "a", 2, partitions=parts(kept), transactional=True) == 0
    # One task it gave up refuses the whole commit; TxnOffsetCommit answers ILLEGAL_GENERATION.
    assert check("app", "a", 2, partitions=parts(kept + gone[:1])) == StaleMemberEpochError.code
    assert check("app", "a", 2, partitions=parts(gone[:1]), transactional=True) == IllegalGenerationError.code
    assert check("app", "a", 1, partitions=parts(kept)) == StaleMemberEpochError.code  # older than the tasks
    assert check("app", "a", 4, partitions=parts(kept)) == StaleMemberEpochError.code  # newer than the member
    # A topic the topology does not read (a changelog, a sink, any other) is no task's.
    assert check("app", "a", 2, partitions=[("other", 0)]) == StaleMemberEpochError.code
    # b got its tasks at epoch 3: an epoch-2 commit of them is a zombie's.
    b = env.beat("b", 3, {})
    assert sorted(actives(b.assignment)) == gone
    assert check("app", "b", 3, partitions=parts(gone)) == 0
    assert check("app", "b", 2, partitions=parts(gone)) == StaleMemberEpochError.code


def test_a_standby_task_commits_nothing_with_an_older_epoch():
    """Kafka's TasksTupleWithEpochs dates active tasks only: an older epoch's commit of a
    standby task's partition is refused even when the standby is held since then."""
    env = Env(standbys=1, topics={"input": 2, "app-store-changelog": 2})
    a, b = env.join("a", process="p1"), env.join("b", process="p2")
    held, epochs = env.settle({"a": a, "b": b})
    env.join("c", process="p3")  # epoch 4: a and b move on, keeping what they hold
    held, new_epochs = env.settle({m: NS(assignment=held[m], member_epoch=epochs[m]) for m in "ab"})
    member = env.coord.group("app").members["b"]
    standby = [(s, p) for s, ps in by_kind(member.assigned, STANDBY).items() for p in ps
               if member.assignment_epoch((STANDBY, s), p) <= epochs["b"]]
    kept = [(s, p) for s, p in actives(member.assigned) if member.assignment_epoch((ACTIVE, s), p) <= epochs["b"]]
    assert new_epochs["b"] > epochs["b"] and standby and kept
    check = env.coord.check_offset_commit
    assert check("app", "b", epochs["b"], partitions=[("input", p) for _, p in kept]) == 0
    assert check("app", "b", epochs["b"], partitions=[("input", p) for _, p in standby]) == \
        StaleMemberEpochError.code


def test_owned_tasks_of_a_heartbeat():
    assert owned_tasks(None, None, None) is None
    assert owned_tasks({"0": [1, 2]}, {}, {}) == {(ACTIVE, "0"): frozenset({1, 2})}


def test_a_new_standby_replicas_config_reassigns_with_standbys():
    env = Env()
    a, b = env.join("a"), env.join("b")
    held, epochs = env.settle({"a": a, "b": b})
    assert all(not by_kind(held[m], STANDBY) for m in "ab")
    env.settings = StreamsSettings(45_000, 5_000, 1, 0)  # streams.num.standby.replicas set on the group
    held, new_epochs = env.settle({m: NS(assignment=held[m], member_epoch=epochs[m]) for m in "ab"})
    assert new_epochs["a"] > epochs["a"]
    for m, other in (("a", "b"), ("b", "a")):
        assert {(s, p) for s, ps in by_kind(held[m], STANDBY).items() for p in ps} == actives(held[other])


def test_a_standby_becomes_active_only_after_its_standby_copy_is_revoked():
    env = Env(standbys=1)
    a, b = env.join("a", process="p1"), env.join("b", process="p2")
    held, epochs = env.settle({"a": a, "b": b})
    a_active = actives(held["a"])
    assert {(s, p) for s, ps in by_kind(held["b"], STANDBY).items() for p in ps} == a_active
    env.beat("a", -1)
    # b holds a's tasks as standbys: it gives those copies up first (same epoch), then gets them active.
    r = env.beat("b", epochs["b"], dict(held["b"]))
    assert r.member_epoch == epochs["b"] and not by_kind(r.assignment, STANDBY) and actives(r.assignment) != \
        actives(held["b"]) | a_active
    held_b = r.assignment
    for _ in range(3):
        r = env.beat("b", r.member_epoch, dict(held_b))
        held_b = r.assignment if r.assignment is not None else held_b
    assert actives(held_b) == {("0", p) for p in range(6)} and not by_kind(held_b, STANDBY)
    assert env.coord.group("app").state is StreamsGroupState.STABLE


def test_copartitioned_sources_of_different_sizes_are_reported_in_kafkas_words():
    env = Env(topics={"foo": 6, "bar": 3})
    topo = topology(sources=("foo", "bar"), changelog=None,
                    copartition=[NS(source_topics=[0, 1], source_topic_regex=[], repartition_source_topics=[])])
    r = env.join("a", topo=topo)
    assert r.statuses == [(StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
                           "Following topics do not have the same number of partitions: [{bar=3, foo=6}]")]
    assert env.coord.group("app").state is StreamsGroupState.NOT_READY


def test_a_shutdown_request_is_told_to_every_member():
    env = Env()
    a, b = env.join("a"), env.join("b")
    env.coord.heartbeat(StreamsHeartbeat("app", "a", a.member_epoch, shutdown_application=True))
    r = env.beat("b", b.member_epoch)
    assert r.statuses == [(StatusCode.SHUTDOWN_APPLICATION, "Streams group member a encountered a fatal error and "
                                                            "requested a shutdown for the entire application.")]


def test_user_endpoints_get_the_partitions_of_every_endpoint():
    env = Env()
    join = StreamsHeartbeat("app", "a", 0, rebalance_timeout_ms=30_000, topology=topology(), owned={},
                            owned_lists_sent=(True, True, True), process_id="pa", user_endpoint=("host-a", 8080))
    first = env.coord.heartbeat(join)
    assert first.endpoint_epoch == 0  # the group was created by this request
    r = env.coord.heartbeat(StreamsHeartbeat("app", "a", first.member_epoch, endpoint_information_epoch=0))
    assert r.endpoint_epoch == 1
    assert r.partitions_by_endpoint == {("host-a", 8080): ({"input": set(range(6))}, {})}
    same = env.coord.heartbeat(StreamsHeartbeat("app", "a", r.member_epoch, endpoint_information_epoch=1))
    assert same.partitions_by_endpoint is None


def test_what_kafka_4_3_does_not_support_yet_is_refused_first():
    env = Env()
    for fields, words in (({"instance_id": "i"}, "Static membership is not yet supported."),
                          ({"task_offsets": ()}, "TaskOffsets are not supported yet."),
                          ({"task_end_offsets": ()}, "TaskEndOffsets are not supported yet."),
                          ({"owned": {("warmup", "0"): frozenset({1})}, "owned_lists_sent": (True, True, True)},
                           "WarmupTasks are not supported yet.")):
        with pytest.raises(InvalidRequestError) as refused:
            env.coord.heartbeat(StreamsHeartbeat("", "", 0, **fields))  # before the empty ids are seen
        assert refused.value.message == words
    assert env.coord.list_groups() == []


def test_a_new_groups_first_assignment_waits_for_the_initial_rebalance_delay():
    env = Env(initial_delay=3_000)
    delayed = (StatusCode.ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay.")
    a = env.join("a")
    assert (a.member_epoch, a.assignment, a.statuses) == (1, {}, [delayed])
    env.clock.now += 500
    b = env.join("b")
    assert (b.member_epoch, b.assignment, b.statuses) == (1, {}, [delayed])
    assert env.coord.group("app").state is StreamsGroupState.ASSIGNING
    env.clock.now += 2_500  # the delay is over: the next heartbeat assigns every member that joined
    held, epochs = env.settle({"a": a, "b": b})
    assert len(actives(held["a"])) == len(actives(held["b"])) == 3
    assert epochs["a"] == epochs["b"] == env.coord.group("app").group_epoch
    c = env.join("c")  # the group is not new any more: no delay
    assert c.statuses == []


def test_reported_tasks_must_be_tasks_of_the_topology():
    env = Env()
    a = env.join("a")
    with pytest.raises(InvalidRequestError, match="Subtopology 9 does not exist in the topology."):
        env.beat("a", a.member_epoch, {(ACTIVE, "9"): frozenset({0})})
    with pytest.raises(InvalidRequestError, match="Task 6 for subtopology 0 is invalid. Number of tasks for this "
                                                  "subtopology: 6"):
        env.beat("a", a.member_epoch, {(ACTIVE, "0"): frozenset({6})})
    assert env.beat("a", a.member_epoch, dict(a.assignment)).member_epoch == a.member_epoch


def test_a_heartbeat_for_a_group_that_does_not_exist():
    env = Env()
    for epoch in (3, -1):
        with pytest.raises(GroupIdNotFoundError, match="Streams group nope not found."):
            env.beat("a", epoch, group="nope")
