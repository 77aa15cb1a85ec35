"""Share sessions' epochs and share-group membership, on an injected clock."""

from __future__ import annotations

import pytest

from kwire.broker.share.groups import ShareGroups
from kwire.broker.share.sessions import ShareSessionCache, next_epoch
from kwire.protocol.errors import (
    FencedMemberEpochError,
    InvalidRequestError,
    InvalidShareSessionEpochError,
    ShareSessionNotFoundError,
    UnknownMemberIdError,
)


def test_session_epochs():
    cache = ShareSessionCache()
    with pytest.raises(ShareSessionNotFoundError):
        cache.check("g", "m", 1)
    s, old = cache.open("g", "m")
    assert old is None and s.epoch == 1
    assert cache.check("g", "m", 1) is s
    cache.advance(s)
    with pytest.raises(InvalidShareSessionEpochError):
        cache.check("g", "m", 1)  # a replayed request
    with pytest.raises(InvalidShareSessionEpochError):
        cache.check("g", "m", 5)  # one from the future
    assert cache.check("g", "m", -1) is s  # the final request is accepted at any epoch
    assert next_epoch(2**31 - 1) == 1
    cache.close("g", "m")
    with pytest.raises(ShareSessionNotFoundError):
        cache.check("g", "m", 2)


def make_groups(partitions=None):
    parts = partitions if partitions is not None else {"t": 3, "u": 1}
    expired = []
    groups = ShareGroups(parts.get, lambda g, m: expired.append((g, m)))
    return groups, expired


def hb(groups, member, epoch, topics=None, now=0):
    return groups.heartbeat("g", member, epoch, topics, None, client_id="c", client_host="/h",
                            session_timeout_ms=45_000, now_ms=now)


def test_the_simple_assignment_spreads_partitions_and_shares_them_when_members_outnumber_them():
    groups, _ = make_groups()
    a, send = hb(groups, "a", 0, ["t"])
    assert send and a.assignment == {"t": (0, 1, 2)} and a.member_epoch == 1
    b, _ = hb(groups, "b", 0, ["t", "u"])
    assert b.assignment == {"t": (1,), "u": (0,)}
    a, send = hb(groups, "a", 1)  # a learns its smaller share at its next heartbeat
    assert send and a.assignment == {"t": (0, 2)} and a.member_epoch == groups.group("g").group_epoch
    for m in "cd":
        hb(groups, m, 0, ["t", "u"])
    g = groups.group("g")
    # t: 4 members, 3 partitions: each member one partition, every partition taken;
    # u: 3 subscribers, 1 partition: all of them share it.
    assert {m: g.members[m].assignment["t"] for m in "abcd"} == {"a": (0,), "b": (1,), "c": (2,), "d": (0,)}
    assert [g.members[m].assignment["u"] for m in "bcd"] == [(0,)] * 3
    hb(groups, "d", -1)
    assert sorted(p for m in "abc" for p in g.members[m].assignment["t"]) == [0, 1, 2]


def test_heartbeat_errors():
    groups, _ = make_groups()
    with pytest.raises(InvalidRequestError):
        hb(groups, "", 0, ["t"])
    with pytest.raises(InvalidRequestError):
        hb(groups, "a", 0, None)  # the first heartbeat must subscribe
    with pytest.raises(UnknownMemberIdError):
        hb(groups, "nobody", 3)
    hb(groups, "a", 0, ["t"])
    with pytest.raises(FencedMemberEpochError):
        hb(groups, "a", 7)


def test_a_silent_member_expires_and_a_leaving_one_is_removed():
    groups, expired = make_groups()
    hb(groups, "a", 0, ["t"], now=0)
    hb(groups, "b", 0, ["t"], now=0)
    hb(groups, "b", groups.group("g").group_epoch, now=40_000)
    groups.expire(now_ms=45_000)
    assert set(groups.group("g").members) == {"b"} and expired == [("g", "a")]
    m, send = hb(groups, "b", -1, now=46_000)
    assert m is None and groups.group("g").state == "Empty"
    assert expired == [("g", "a")]  # a leave is not an expiry


def test_new_partitions_reach_members_on_their_next_heartbeat():
    parts = {"t": 1}
    groups, _ = make_groups(parts)
    a, _ = hb(groups, "a", 0, ["t"])
    parts["t"] = 2
    a, send = hb(groups, "a", a.member_epoch)
    assert send and a.assignment == {"t": (0, 1)}
