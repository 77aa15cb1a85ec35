"""The KIP-848 consumer-group coordinator on its own: heartbeats, epochs, reconciliation (revoke
before assign), static members, timeouts on a fake clock, Kafka's errors for bad heartbeats."""

from __future__ import annotations

import pytest

from kwire.broker.coordinator.consumer import (
    ConsumerGroupCoordinator,
    ConsumerGroupState,
    HeartbeatRequest,
    MemberState,
    Timeouts,
)
from kwire.broker.coordinator.consumer.assignors import MemberSpec, range_assign, uniform_assign
from kwire.broker.topics import TopicRegistry
from kwire.protocol.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
)

SESSION, INTERVAL, REBALANCE = 45_000, 5_000, 30_000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def topics(tmp_path):
    registry = TopicRegistry(tmp_path)
    registry.add("t", 6)
    registry.add("u", 2)
    return registry


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def cg(topics, clock):
    return ConsumerGroupCoordinator(topics, timeouts=lambda _g: Timeouts(SESSION, INTERVAL), now_ms=clock)


def tid(topics, name):
    return topics.get(name).topic_id


def join(cg, member_id, topics=("t",), *, instance_id=None, regex=None, assignor=None):
    return cg.heartbeat(HeartbeatRequest("g", member_id, 0, instance_id=instance_id, rebalance_timeout_ms=REBALANCE,
                                         subscribed_topic_names=list(topics) if regex is None else None,
                                         subscribed_topic_regex=regex, server_assignor=assignor, owned={}))


def beat(cg, member_id, epoch, owned=None, **kw):
    return cg.heartbeat(HeartbeatRequest("g", member_id, epoch, owned=owned, **kw))


def parts(assignment, topic_id):
    return set(assignment.get(topic_id, ()))


def test_first_member_gets_every_partition_at_epoch_1(cg, topics):
    r = join(cg, "a")
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("a", 1, INTERVAL)
    assert parts(r.assignment, tid(topics, "t")) == set(range(6))
    assert cg.group("g").state is ConsumerGroupState.STABLE
    # A plain heartbeat changes nothing and sends no assignment.
    again = beat(cg, "a", 1)
    assert again.member_epoch == 1 and again.assignment is None


def test_second_member_waits_for_the_first_to_revoke(cg, topics):
    t = tid(topics, "t")
    join(cg, "a")
    b = join(cg, "b")
    # b is at epoch 2 but gets nothing a still owns: revoke before assign.
    assert b.member_epoch == 2 and parts(b.assignment, t) == set()
    assert cg.group("g").members["b"].state is MemberState.UNRELEASED_PARTITIONS
    a = beat(cg, "a", 1, owned={t: list(range(6))})
    kept = parts(a.assignment, t)
    assert a.member_epoch == 1 and len(kept) == 3  # must give three up first, still epoch 1
    assert cg.group("g").members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert cg.group("g").state is ConsumerGroupState.RECONCILING
    # No partition is owned twice while a still reports all six.
    assert beat(cg, "b", 2).assignment is None
    a = beat(cg, "a", 1, owned={t: sorted(kept)})
    assert a.member_epoch == 2 and cg.group("g").members["a"].state is MemberState.STABLE
    b = beat(cg, "b", 2, owned={})
    assert parts(b.assignment, t) == set(range(6)) - kept
    assert cg.group("g").state is ConsumerGroupState.STABLE


def test_member_epoch_errors_are_kafkas(cg, topics):
    t = tid(topics, "t")
    join(cg, "a")
    with pytest.raises(FencedMemberEpochError):
        beat(cg, "a", 5)
    with pytest.raises(UnknownMemberIdError):
        beat(cg, "nobody", 1)
    with pytest.raises(UnknownMemberIdError):
        cg.heartbeat(HeartbeatRequest("other", "a", 3))
    join(cg, "b")
    beat(cg, "a", 1, owned={t: list(range(6))})
    beat(cg, "a", 1, owned={t: [0, 1, 2]})  # a moves to epoch 2; its previous epoch is 1
    # A lost response: the previous epoch is accepted while a owns only what it still has.
    assert beat(cg, "a", 1, owned={t: [0, 1, 2]}).member_epoch == 2
    with pytest.raises(FencedMemberEpochError):
        beat(cg, "a", 1, owned={t: [0, 1, 2, 3]})
    with pytest.raises(FencedMemberEpochError):
        beat(cg, "a", 0 + 1)  # previous epoch without its owned partitions


def test_bad_requests_are_refused_with_kafkas_messages(cg):
    bad = [
        (HeartbeatRequest("", "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"], owned={}),
         InvalidRequestError, "GroupId can't be empty."),
        (HeartbeatRequest("g", "", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"], owned={}),
         InvalidRequestError, "MemberId can't be empty."),
        (HeartbeatRequest("g", "a", 0, subscribed_topic_names=["t"], owned={}),
         InvalidRequestError, "RebalanceTimeoutMs must be provided in first request."),
        (HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, owned={}),
         InvalidRequestError, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
        (HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"]),
         InvalidRequestError, "TopicPartitions must be empty when (re-)joining."),
        (HeartbeatRequest("g", "a", -2), InvalidRequestError, "InstanceId can't be null."),
        (HeartbeatRequest("g", "a", -3), InvalidRequestError, "MemberEpoch is invalid"),
        (HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"], owned={},
                          server_assignor="sticky"), UnsupportedAssignorError, "ServerAssignor sticky"),
        (HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(a", owned={}),
         InvalidRegularExpressionError, "(a"),
        (HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, subscribed_topic_regex=r"(t)\1", owned={}),
         InvalidRegularExpressionError, "invalid escape sequence"),
        (HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(?=t)", owned={}),
         InvalidRegularExpressionError, "invalid perl operator"),
    ]
    for req, error, words in bad:
        with pytest.raises(error) as info:
            cg.heartbeat(req)
        assert words in str(info.value)
    assert cg.group("g") is None  # nothing was created by a refused join


def test_session_timeout_fences_a_member_on_the_clock(cg, topics, clock):
    t = tid(topics, "t")
    join(cg, "a")
    join(cg, "b")
    beat(cg, "a", 1, owned={t: list(range(6))})
    clock.ms += SESSION - 1
    beat(cg, "a", 1, owned={t: [0, 1, 2]})
    assert cg.expire() == []
    clock.ms += 2
    assert cg.expire() == [("g", "b")]
    group = cg.group("g")
    assert set(group.members) == {"a"} and group.group_epoch == 3
    a = beat(cg, "a", 2, owned={t: [0, 1, 2]})
    assert (a.member_epoch, parts(a.assignment, t)) == (3, set(range(6)))


def test_rebalance_timeout_fences_a_member_that_keeps_its_partitions(cg, topics, clock):
    t = tid(topics, "t")
    join(cg, "a")
    join(cg, "b")
    beat(cg, "a", 1, owned={t: list(range(6))})  # asked to revoke three
    for _ in range(3):
        clock.ms += REBALANCE // 3
        beat(cg, "b", 2)  # b's session goes on
        beat(cg, "a", 1, owned={t: list(range(6))})  # a heartbeats but never revokes
    clock.ms += 1
    assert cg.expire() == [("g", "a")]
    b = beat(cg, "b", 2, owned={})
    assert parts(b.assignment, t) == set(range(6)) and b.member_epoch == 3


def test_leaving_frees_the_partitions_at_once(cg, topics):
    t = tid(topics, "t")
    join(cg, "a")
    join(cg, "b")
    left = beat(cg, "a", -1)
    assert left.member_epoch == -1
    b = beat(cg, "b", 2, owned={})
    assert parts(b.assignment, t) == set(range(6))
    assert cg.group("g").state is ConsumerGroupState.STABLE


def test_static_member_comes_back_with_its_partitions(cg, topics):
    t = tid(topics, "t")
    join(cg, "a", instance_id="i-a")
    join(cg, "b", instance_id="i-b")
    beat(cg, "a", 1, owned={t: list(range(6))})
    a = beat(cg, "a", 1, owned={t: [0, 1, 2]})
    b = beat(cg, "b", 2, owned={})
    b_parts = parts(b.assignment, t)
    with pytest.raises(UnreleasedInstanceIdError):
        join(cg, "b2", instance_id="i-b")  # b is still there
    assert beat(cg, "b", -2, instance_id="i-b").member_epoch == -2
    epoch = cg.group("g").group_epoch
    back = join(cg, "b2", instance_id="i-b")
    assert back.member_epoch == 2 and parts(back.assignment, t) == b_parts
    assert cg.group("g").group_epoch == epoch  # no rebalance
    assert set(cg.group("g").target["b2"].get(t, ())) == b_parts  # its target came along
    with pytest.raises((UnknownMemberIdError, FencedInstanceIdError)):
        beat(cg, "b", 2, instance_id="i-b")
    # The same member joining again (fenced, say) is not another instance: it starts over.
    again = join(cg, "b2", instance_id="i-b")
    assert again.member_epoch == epoch + 1
    assert a.member_epoch == 2


def test_subscription_change_and_new_partitions_bump_the_epoch(cg, topics):
    t, u = tid(topics, "t"), tid(topics, "u")
    join(cg, "a")
    r = beat(cg, "a", 1, subscribed_topic_names=["t", "u"], owned={t: list(range(6))})
    assert r.member_epoch == 2 and parts(r.assignment, u) == {0, 1}
    topics.set_partitions("u", 4)
    r = beat(cg, "a", 2)
    assert r.member_epoch == 3 and parts(r.assignment, u) == {0, 1, 2, 3}
    # Dropping a topic: its partitions must be revoked first.
    r = beat(cg, "a", 3, subscribed_topic_names=["u"], owned={t: list(range(6)), u: [0, 1, 2, 3]})
    assert parts(r.assignment, t) == set() and r.member_epoch == 3
    assert cg.group("g").members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert beat(cg, "a", 3, owned={u: [0, 1, 2, 3]}).member_epoch == 4


def test_regex_subscription_matches_whole_names(cg, topics):
    topics.add("t-extra", 1)
    r = join(cg, "a", regex="t.*")
    assert set(r.assignment) == {tid(topics, "t"), tid(topics, "t-extra")}
    r = join(cg, "b", regex="u")
    assert r.member_epoch == 2 and set(r.assignment) == {tid(topics, "u")}  # one bump per heartbeat


def test_regex_subscription_takes_re2_syntax(cg, topics):
    """RE2/J's own constructs, which Python's re lacks: \\Q..\\E quoting and \\p{..} classes."""
    topics.add("a.b", 1)
    topics.add("axb", 1)
    topics.add("tλ", 1)
    r = join(cg, "a", regex=r"\Qa.b\E")
    assert set(r.assignment) == {tid(topics, "a.b")}
    r = join(cg, "b", regex=r"t\p{Greek}+")
    assert tid(topics, "tλ") in set(r.assignment) and tid(topics, "t") not in set(r.assignment)


def test_offset_commit_and_fetch_check_the_member_epoch(cg, topics):
    assert cg.check_offset_commit("none", "x", 1) is None  # not a consumer group
    join(cg, "a")
    assert cg.check_offset_commit("g", "a", 1) == 0
    assert cg.check_offset_commit("g", "a", 0, partitions=[("t", 0)]) == StaleMemberEpochError.code
    assert cg.check_offset_commit("g", "a", 2, partitions=[("t", 0)]) == StaleMemberEpochError.code  # newer
    # Kafka: a member of the consumer protocol commits with OffsetCommit v9+ (its epoch is no generation).
    assert cg.check_offset_commit("g", "a", 1, api_version=8) == UnsupportedVersionError.code
    assert cg.check_offset_commit("g", "a", 1, api_version=8, transactional=True) == 0
    assert cg.check_offset_commit("g", "zz", 1) == UnknownMemberIdError.code
    assert cg.check_offset_commit("g", "", -1) == UnknownMemberIdError.code  # members: not from outside
    assert cg.check_offset_fetch("g", "a", 1) == 0 and cg.check_offset_fetch("g", None, -1) == 0
    assert cg.check_offset_fetch("g", "a", 7) == StaleMemberEpochError.code
    beat(cg, "a", -1)
    assert cg.check_offset_commit("g", "", -1) == 0  # empty: the admin client may commit


def test_an_older_epoch_commits_only_partitions_held_since_then(cg, topics):
    """KIP-1251 (Kafka 4.3): a member whose epoch was bumped by a heartbeat answer it has not
    seen yet may still commit the partitions it kept; not those it gave up, nor any at an epoch
    older than the one it got them at."""
    t = tid(topics, "t")
    join(cg, "a")
    join(cg, "b")
    a = beat(cg, "a", 1, owned={t: list(range(6))})
    kept = sorted(parts(a.assignment, t))
    gone = sorted(set(range(6)) - set(kept))
    a = beat(cg, "a", 1, owned={t: kept})
    assert a.member_epoch == 2
    b = beat(cg, "b", 2, owned={})
    assert sorted(parts(b.assignment, t)) == gone
    # a still sends epoch 1: the partitions it has held since epoch 1 commit.
    assert cg.check_offset_commit("g", "a", 1, partitions=[("t", p) for p in kept]) == 0
    # One partition it gave up refuses the whole commit (STALE_MEMBER_EPOCH; ILLEGAL_GENERATION
    # for TxnOffsetCommit, as Kafka's commitTransactionalOffset answers it).
    mixed = [("t", kept[0]), ("t", gone[0])]
    assert cg.check_offset_commit("g", "a", 1, partitions=mixed) == StaleMemberEpochError.code
    assert cg.check_offset_commit("g", "a", 1, partitions=mixed, transactional=True) == IllegalGenerationError.code
    assert cg.check_offset_commit("g", "a", 1, partitions=[("t", kept[0])], transactional=True) == 0
    # b got its partitions at epoch 2: an epoch-1 commit of them is a zombie's.
    assert cg.check_offset_commit("g", "b", 1, partitions=[("t", gone[0])]) == StaleMemberEpochError.code
    assert cg.check_offset_commit("g", "b", 2, partitions=[("t", gone[0])]) == 0
    # A partition of another topic, or of none, is not held.
    assert cg.check_offset_commit("g", "a", 1, partitions=[("u", 0)]) == StaleMemberEpochError.code
    assert cg.check_offset_commit("g", "a", 1, partitions=[("nope", 0)]) == StaleMemberEpochError.code


def test_group_id_of_an_active_classic_group_is_not_taken(topics, clock):
    cg = ConsumerGroupCoordinator(topics, timeouts=lambda _g: Timeouts(SESSION, INTERVAL), now_ms=clock,
                                  classic_group_active=lambda g: g == "g")
    with pytest.raises(GroupIdNotFoundError):
        join(cg, "a")


def test_assignors_balance_and_stick(topics):
    t, u = tid(topics, "t"), tid(topics, "u")
    both = frozenset({t, u})
    first = uniform_assign({m: MemberSpec(both, {}) for m in "ab"}, {t: 6, u: 2})
    assert sorted(sum(len(p) for p in a.values()) for a in first.values()) == [4, 4]
    second = uniform_assign({m: MemberSpec(both, first.get(m, {})) for m in "abc"}, {t: 6, u: 2})
    loads = sorted(sum(len(p) for p in a.values()) for a in second.values())
    assert loads == [2, 3, 3]
    moved = sum(len(set(first[m].get(x, ())) - set(second[m].get(x, ()))) for m in "ab" for x in (t, u))
    assert moved == 2  # only what c needs moves
    ranged = range_assign({m: MemberSpec(both, {}) for m in "ab"}, {t: 6, u: 2})
    assert ranged["a"] == {t: frozenset({0, 1, 2}), u: frozenset({0})}
    assert ranged["b"] == {t: frozenset({3, 4, 5}), u: frozenset({1})}


def test_group_consumer_assignors_limit_what_members_may_ask_for(topics, clock):
    cg = ConsumerGroupCoordinator(topics, timeouts=lambda _g: Timeouts(SESSION, INTERVAL), now_ms=clock,
                                  assignors=("range",))
    with pytest.raises(UnsupportedAssignorError, match="Supported assignors: range"):
        join(cg, "a", assignor="uniform")
    join(cg, "a")
    assert cg.assignor_of(cg.group("g")) == "range"
    with pytest.raises(ValueError, match="group.consumer.assignors"):
        ConsumerGroupCoordinator(topics, timeouts=lambda _g: Timeouts(SESSION, INTERVAL), assignors=("sticky",))
