"""The group state machine and the consumer-metadata reader, without requests."""

from __future__ import annotations

import struct

import pytest

from kwire.broker.coordinator import Group, GroupState, Member
from kwire.broker.coordinator.subscription import subscribed_topics
from kwire.protocol import messages

from . import consumer_metadata


def _member(member_id: str, protocols: list[str], *, metadata: bytes = b"", instance: str | None = None,
            rebalance_ms: int = 1000) -> Member:
    return Member(member_id, instance, "client", "/127.0.0.1", rebalance_ms, 1000, "consumer",
                  [(p, metadata) for p in protocols])


def test_protocol_selection_votes_and_tie_breaks_by_the_leader():
    group = Group("g")
    group.add(_member("a", ["sticky", "range"]))
    group.add(_member("b", ["range", "sticky", "roundrobin"]))
    assert group.candidate_protocols() == {"sticky", "range"}
    # One vote each: the leader's (a's) preference decides.
    assert group.select_protocol() == "sticky"
    group.add(_member("c", ["range", "sticky"]))
    assert group.select_protocol() == "range"
    group.remove("c")
    group.remove("a")
    assert group.leader_id == "b"
    assert group.select_protocol() == "range"
    assert dict(group.supported_protocols) == {"range": 1, "sticky": 1, "roundrobin": 1}


def test_supports_protocols():
    group = Group("g")
    assert group.supports_protocols("consumer", ["range"])
    assert not group.supports_protocols("", ["range"])
    assert not group.supports_protocols("consumer", [])
    group.add(_member("a", ["range", "sticky"]))
    group.transition_to(GroupState.PREPARING_REBALANCE, 1)
    assert group.protocol_type == "consumer"
    assert group.supports_protocols("consumer", ["sticky", "other"])
    assert not group.supports_protocols("consumer", ["other"])
    assert not group.supports_protocols("connect", ["range"])


def test_illegal_transitions_raise():
    group = Group("g")
    with pytest.raises(RuntimeError, match="Empty -> Stable"):
        group.transition_to(GroupState.STABLE, 1)
    group.transition_to(GroupState.PREPARING_REBALANCE, 2)
    with pytest.raises(RuntimeError):
        group.transition_to(GroupState.STABLE, 3)
    group.transition_to(GroupState.DEAD, 4)
    assert (group.state, group.state_timestamp_ms) == (GroupState.DEAD, 4)


def test_leader_election_and_next_generation():
    group = Group("g")
    a, b = _member("a", ["range"], rebalance_ms=500), _member("b", ["range"], rebalance_ms=900)
    group.add(a)
    group.add(b)
    assert group.rebalance_timeout_ms == 900
    group.transition_to(GroupState.PREPARING_REBALANCE, 1)
    assert not group.has_all_members_joined()
    assert not group.maybe_elect_new_joined_leader()  # nobody rejoined
    b.join_waiter = object()  # type: ignore[assignment]  # "parked" is all the group looks at
    assert group.maybe_elect_new_joined_leader() and group.leader_id == "b"
    assert [m.member_id for m in group.not_yet_rejoined()] == ["a"]
    group.remove("a")
    assert group.has_all_members_joined()
    group.init_next_generation(5)
    assert (group.generation_id, group.protocol_name, group.state) == (1, "range", GroupState.COMPLETING_REBALANCE)
    assert group.pending_sync == {"b"}
    group.remove("b")
    group.transition_to(GroupState.PREPARING_REBALANCE, 6)
    group.init_next_generation(7)
    assert (group.generation_id, group.protocol_name, group.state) == (2, None, GroupState.EMPTY)


def test_static_members_are_replaced_and_fence_their_old_ids():
    group = Group("g")
    group.add(_member("i-1", ["range"], instance="i"))
    group.add(_member("d-1", ["range"]))
    assert group.is_static_member_fenced("i", "i-0")
    assert not group.is_static_member_fenced("i", "i-1")
    assert not group.is_static_member_fenced(None, "whatever")
    group.pending_sync = {"i-1"}
    member = group.replace_static_member("i", "i-1", "i-2")
    assert member.member_id == "i-2" and group.leader_id == "i-2"
    assert group.static_member_id("i") == "i-2" and group.pending_sync == {"i-2"}
    assert list(group.members) == ["d-1", "i-2"]
    group.remove("i-2")
    assert group.static_member_id("i") is None


def test_subscribed_topics_of_consumer_groups():
    group = Group("g")
    group.add(_member("a", ["range"], metadata=consumer_metadata(["x", "y"])))
    group.add(_member("b", ["range"], metadata=consumer_metadata(["z"], version=3)))
    group.transition_to(GroupState.PREPARING_REBALANCE, 1)
    group.init_next_generation(2)
    assert group.subscribed_topics == {"x", "y", "z"}
    assert group.is_subscribed_to("x") and not group.is_subscribed_to("w")
    # One unreadable subscription: the group might read anything.
    other = Group("h")
    other.add(_member("a", ["range"], metadata=b"\x00"))
    other.transition_to(GroupState.PREPARING_REBALANCE, 1)
    other.init_next_generation(2)
    assert other.subscribed_topics is None and other.is_subscribed_to("w")


def test_reading_subscriptions():
    assert subscribed_topics(consumer_metadata(["a", "b"], version=0)) == {"a", "b"}
    # A newer version than the codec knows: read as the newest, trailing fields ignored.
    body = messages.ConsumerProtocolSubscription(topics=["a"]).encode(3) + b"\x00\x07future"
    assert subscribed_topics(struct.pack(">h", 9) + body) == {"a"}
    assert subscribed_topics(b"") is None
    assert subscribed_topics(b"\xff\xff") is None  # negative version
    assert subscribed_topics(struct.pack(">hi", 0, 5)) is None  # 5 topics announced, none there
