"""range and roundrobin: Java's documented examples, Java's member order, and thousands of random
groups assigned exactly as kafka-python 3.0.12's assignors assign them.

kafka-python's ordering rules were read against Java's before trusting it as an oracle:
topics and partitions sorted the same way; members sorted static-first by group.instance.id,
then by member id, as Java's ``MemberInfo.compareTo``.  Two divergences were found:

* it separates static from dynamic members with ``itertools.groupby`` on the unsorted member
  list, which only groups *adjacent* members: when the JoinGroup response interleaves static
  and dynamic members, the earlier static ones are dropped and get nothing
  (``test_kafka_python_drops_static_members_that_are_not_adjacent``).  The random comparison
  therefore hands kafka-python its members with the static ones first;
* its roundrobin crashes (KeyError) as soon as it must skip a member not subscribed to a topic:
  the skipping loop assigns the ``(instance id, member id)`` pair where the member id belongs
  (``test_kafka_python_roundrobin_cannot_skip_members``).  The oracle runs with a shim
  (``skip_fix``) whose ring entries unpack as that pair *and* are the member id, so its own
  ordering and skipping rules run unchanged;
* it sorts ids by code point, Java by UTF-16 code unit (``test_member_ids_sort_as_java_strings``);
  the random ids are ASCII.
"""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest
from kafka.coordinator.assignors import roundrobin as kafka_roundrobin
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from kwire.client.assignors import RangeAssignor, RoundRobinAssignor, Subscription
from kwire.client.types import TopicPartition

GROUPS = 2500


def tps(*names: str) -> list[TopicPartition]:
    """``tps("t0p1", "t1p0")`` -> TopicPartitions, Java docs style."""
    out = []
    for name in names:
        topic, partition = name.split("p")
        out.append(TopicPartition(topic, int(partition)))
    return out


def partitions_of(result) -> dict[str, list[TopicPartition]]:
    return {m: a.partitions for m, a in result.items()}


# -- Java's documented examples -------------------------------------------------------------------
def test_range_example_from_javas_docs():
    members = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, members)
    assert partitions_of(result) == {"C0": tps("t0p0", "t0p1", "t1p0", "t1p1"), "C1": tps("t0p2", "t1p2")}


def test_roundrobin_examples_from_javas_docs():
    members = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, members)
    assert partitions_of(result) == {"C0": tps("t0p0", "t0p2", "t1p1"), "C1": tps("t0p1", "t1p0", "t1p2")}
    # Different subscriptions: members not subscribed to a topic are skipped.
    members = {"C0": Subscription(["t0"]), "C1": Subscription(["t0", "t1"]), "C2": Subscription(["t0", "t1", "t2"])}
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, members)
    assert partitions_of(result) == {"C0": tps("t0p0"), "C1": tps("t1p0"),
                                     "C2": tps("t1p1", "t2p0", "t2p1", "t2p2")}


def test_topics_without_partitions_or_metadata_are_skipped_and_every_member_answered():
    members = {"a": Subscription(["known", "unknown", "empty"]), "b": Subscription([]), "c": Subscription(["known"])}
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        result = assignor.assign({"known": 3, "empty": 0, "unsubscribed": 4}, members)
        assert set(result) == {"a", "b", "c"}
        assert result["b"].partitions == []
        assert sorted(result["a"].partitions + result["c"].partitions) == tps("knownp0", "knownp1", "knownp2")


def test_a_topic_listed_twice_counts_the_member_once():
    members = {"a": Subscription(["t", "t"]), "b": Subscription(["t"])}
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        result = assignor.assign({"t": 4}, members)
        assert [len(result[m].partitions) for m in "ab"] == [2, 2]


# -- Java's member order ---------------------------------------------------------------------------
def test_static_members_come_first_sorted_by_instance_id():
    # Member ids sort the other way round; Java sorts static members by group.instance.id.
    members = {"m-z": Subscription(["t"], group_instance_id="instance-1"),
               "m-y": Subscription(["t"], group_instance_id="instance-2"),
               "m-a": Subscription(["t"])}
    assert partitions_of(RangeAssignor().assign({"t": 5}, members)) == {
        "m-z": tps("tp0", "tp1"), "m-y": tps("tp2", "tp3"), "m-a": tps("tp4")}
    assert partitions_of(RoundRobinAssignor().assign({"t": 5}, members)) == {
        "m-z": tps("tp0", "tp3"), "m-y": tps("tp1", "tp4"), "m-a": tps("tp2")}


def test_member_ids_sort_as_java_strings():
    # U+1F600 is the surrogate pair D83D DE00 in Java: it sorts before U+FFFD, unlike in Python.
    emoji, replacement = "c-\U0001f600", "c-\ufffd"
    assert sorted([emoji, replacement]) == [replacement, emoji]
    members = {replacement: Subscription(["t"]), emoji: Subscription(["t"])}
    assert RangeAssignor().assign({"t": 3}, members)[emoji].partitions == tps("tp0", "tp1")
    assert RoundRobinAssignor().assign({"t": 3}, members)[emoji].partitions == tps("tp0", "tp2")


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()], ids=lambda a: a.name)
def test_the_order_members_arrive_in_does_not_matter(assignor):
    rng = random.Random(7)
    for _ in range(200):
        cluster, members = random_group(rng)
        expected = assignor.assign(cluster, members)
        shuffled = list(members.items())
        rng.shuffle(shuffled)
        assert assignor.assign(cluster, dict(shuffled)) == expected


# -- kafka-python as the oracle ------------------------------------------------------------------
class FakeCluster:
    """What kafka-python's assignors read of ClusterMetadata."""

    def __init__(self, counts: dict[str, int]):
        self.counts = counts

    def partitions_for_topic(self, topic):
        return set(range(self.counts[topic])) if topic in self.counts else None


def random_group(rng: random.Random) -> tuple[dict[str, int], dict[str, Subscription]]:
    topics = [f"topic-{i}" for i in range(rng.randint(1, 6))]
    # Some subscribed topics have no metadata, some have no partitions.
    cluster = {t: rng.choice([0, 1, 2, 3, 5, 8, 13, 30]) for t in topics if rng.random() < 0.9}
    identical = rng.random() < 0.3
    shared = rng.sample(topics, rng.randint(1, len(topics)))
    members = {}
    for i in range(rng.randint(1, 9)):
        # Shared prefixes and varying lengths exercise the ordering; broker-made ids look like "client-uuid".
        member_id = rng.choice(["consumer", "consumer-1", "c", "C", "z"]) + f"-{rng.randrange(10**rng.randint(1, 6))}-{i}"
        subscribed = shared if identical else rng.sample(topics, rng.randint(0, len(topics)))
        instance = f"instance-{rng.randrange(100)}-{i}" if rng.random() < 0.3 else None
        members[member_id] = Subscription(list(subscribed), group_instance_id=instance)
    return cluster, members


def kafka_python_members(members: dict[str, Subscription]) -> list[SimpleNamespace]:
    # Static members first (kafka-python only groups adjacent ones; see the module docstring).
    ordered = sorted(members.items(), key=lambda kv: kv[1].group_instance_id is None)
    return [SimpleNamespace(member_id=m, group_instance_id=s.group_instance_id,
                            metadata=SimpleNamespace(topics=list(s.topics))) for m, s in ordered]


class _RingEntry(str):
    """A member id that also unpacks as kafka-python's ``(group_instance_id, member_id)`` ring entry."""

    def __new__(cls, pair):
        entry = super().__new__(cls, pair[1])
        entry.pair = (pair[0], entry)
        return entry

    def __iter__(self):
        return iter(self.pair)


@pytest.fixture
def skip_fix(monkeypatch):
    """kafka-python's roundrobin with ring entries that survive its skipping loop (see the docstring)."""
    shim = SimpleNamespace(groupby=itertools.groupby,
                           cycle=lambda ring: itertools.cycle([_RingEntry(pair) for pair in ring]))
    monkeypatch.setattr(kafka_roundrobin, "itertools", shim)


@pytest.mark.usefixtures("skip_fix")
@pytest.mark.parametrize(("ours", "theirs"), [(RangeAssignor(), RangePartitionAssignor),
                                              (RoundRobinAssignor(), RoundRobinPartitionAssignor)],
                         ids=["range", "roundrobin"])
def test_random_groups_match_kafka_python(ours, theirs):
    rng = random.Random(20240601)
    nonempty = 0
    for _ in range(GROUPS):
        cluster, members = random_group(rng)
        expected = theirs.assign(FakeCluster(cluster), kafka_python_members(members))
        got = ours.assign(cluster, members)
        assert set(got) == set(expected)
        for member_id, assignment in got.items():
            want = sorted(TopicPartition(*tp) for tp in expected[member_id].partitions())
            assert sorted(assignment.partitions) == want, (cluster, members, member_id)
            nonempty += bool(want)
    assert nonempty > GROUPS  # the groups were not trivially empty


def test_kafka_python_drops_static_members_that_are_not_adjacent():
    # JoinGroup lists members in the coordinator's order; here static, dynamic, static.
    members = {"m1": Subscription(["t"], group_instance_id="s1"), "m2": Subscription(["t"]),
               "m3": Subscription(["t"], group_instance_id="s3")}
    theirs = RangePartitionAssignor.assign(FakeCluster({"t": 6}), [
        SimpleNamespace(member_id=m, group_instance_id=s.group_instance_id, metadata=SimpleNamespace(topics=s.topics))
        for m, s in members.items()])
    assert theirs["m1"].partitions() == []  # kafka-python's bug: s1 was overwritten by s3's group
    ours = RangeAssignor().assign({"t": 6}, members)
    assert partitions_of(ours) == {"m1": tps("tp0", "tp1"), "m3": tps("tp2", "tp3"), "m2": tps("tp4", "tp5")}


def test_kafka_python_roundrobin_cannot_skip_members():
    members = [SimpleNamespace(member_id=m, group_instance_id=None, metadata=SimpleNamespace(topics=ts))
               for m, ts in (("C0", ["t0"]), ("C1", ["t0", "t1"]))]
    with pytest.raises(KeyError):
        RoundRobinPartitionAssignor.assign(FakeCluster({"t0": 1, "t1": 2}), members)


def test_the_shim_leaves_kafka_python_roundrobin_as_it_is_otherwise(skip_fix):
    # Java's documented example, which needs skipping, comes out right through the shim.
    members = [SimpleNamespace(member_id=m, group_instance_id=None, metadata=SimpleNamespace(topics=ts))
               for m, ts in (("C0", ["t0"]), ("C1", ["t0", "t1"]), ("C2", ["t0", "t1", "t2"]))]
    result = RoundRobinPartitionAssignor.assign(FakeCluster({"t0": 1, "t1": 2, "t2": 3}), members)
    assert {m: [TopicPartition(*tp) for tp in a.partitions()] for m, a in result.items()} == {
        "C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1", "t2p0", "t2p1", "t2p2")}
