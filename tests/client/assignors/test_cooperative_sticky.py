"""cooperative-sticky: properties on random groups, the generation rules on hand-made claims, and
kafka-python 3.0.12's CooperativeStickyAssignor as an oracle where its algorithm is Java's.

kafka-python ports Java's older sticky algorithm, which has only the "general" path, and its
cooperative step withholds a partition claimed by another member, as Java does for disjoint
claims.  So it must agree with us exactly on fresh groups (no owned partitions) and, after any
change, on groups whose subscriptions differ.  With identical subscriptions Java (since 2.8)
takes the "constrained" path, which may keep different partitions than the old algorithm; there
the properties below are the judges.
"""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace

import pytest
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as KafkaPythonCooperativeSticky
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription

from kwire.client.assignors import (
    COOPERATIVE,
    EAGER,
    Assignment,
    CooperativeStickyAssignor,
    Subscription,
    check_cooperative,
    sticky_plan,
)
from kwire.client.assignors.sticky_owned import member_generation
from kwire.client.types import TopicPartition

TP = TopicPartition


# -- helpers -------------------------------------------------------------------------------------------
class FakeCluster:
    """What kafka-python's sticky assignor reads of ClusterMetadata."""

    def __init__(self, counts: dict[str, int]):
        self.counts = counts

    def topics(self):
        return set(self.counts)

    def partitions_for_topic(self, topic):
        return set(range(self.counts[topic])) if topic in self.counts else None


def kafka_python_assign(cluster, members: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
    entries = []
    for member_id, sub in members.items():
        owned: dict[str, list[int]] = {}
        for t, p in sub.owned_partitions:
            owned.setdefault(t, []).append(p)
        entries.append(SimpleNamespace(member_id=member_id, group_instance_id=None, metadata=SimpleNamespace(
            topics=list(sub.topics), generation_id=sub.generation_id,
            owned_partitions=[KSubscription.TopicPartition(topic=t, partitions=ps) for t, ps in owned.items()])))
    result = KafkaPythonCooperativeSticky().assign(FakeCluster(cluster), entries)
    return {m: sorted(TP(*tp) for tp in a.partitions()) for m, a in result.items()}


def assign(cluster, members: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
    return {m: a.partitions for m, a in CooperativeStickyAssignor().assign(cluster, members).items()}


def members_owning(subs: dict[str, list[str]], owned: dict[str, list[TopicPartition]], generation: int):
    return {m: Subscription(list(ts), owned_partitions=list(owned.get(m, [])), generation_id=generation)
            for m, ts in subs.items()}


def all_partitions(cluster, subs) -> set[TopicPartition]:
    topics = {t for ts in subs.values() for t in ts if t in cluster}
    return {TP(t, p) for t in topics for p in range(cluster[t])}


def random_group(rng: random.Random, identical: bool):
    topics = [f"t{i}" for i in range(rng.randint(1, 5))]
    cluster = {t: rng.randint(1, 12) for t in topics}
    shared = rng.sample(topics, rng.randint(1, len(topics)))
    subs = {f"m{i:02d}": list(shared) if identical else rng.sample(topics, rng.randint(1, len(topics)))
            for i in range(rng.randint(1, 8))}
    return cluster, subs


def random_ownership(rng: random.Random, cluster, subs) -> dict[str, list[TopicPartition]]:
    """Disjoint claims, arbitrary and unbalanced, some of topics the owner left or of partitions that are gone."""
    pool = sorted(all_partitions(cluster, subs)) + [TP("gone", 0), TP(next(iter(cluster)), 99)]
    owned: dict[str, list[TopicPartition]] = {m: [] for m in subs}
    for tp in pool:
        if rng.random() < 0.7:
            owned[rng.choice(list(subs))].append(tp)
    return owned


def converge(cluster, subs, owned, generation, rounds):
    """Rebalance as the group would until nothing changes; (assignment, rounds that changed something)."""
    for changed in range(rounds):
        members = members_owning(subs, owned, generation)
        new = assign(cluster, members)
        check_cooperative(members, new)
        generation += 1
        if new == {m: sorted(owned.get(m, [])) for m in subs}:
            return new, changed
        owned = new
    raise AssertionError(f"no stable assignment after {rounds} rounds: {owned}")


def check_valid(cluster, subs, assignment):
    seen = [tp for tps in assignment.values() for tp in tps]
    assert len(seen) == len(set(seen)), "a partition assigned twice"
    assert set(seen) <= all_partitions(cluster, subs)
    for member, tps in assignment.items():
        assert all(tp.topic in subs[member] for tp in tps), (member, tps)


def spread(assignment) -> int:
    sizes = [len(tps) for tps in assignment.values()]
    return max(sizes) - min(sizes)


# -- kafka-python as the oracle ------------------------------------------------------------------
def test_fresh_groups_match_kafka_python():
    rng = random.Random(41)
    for _ in range(600):
        cluster, subs = random_group(rng, identical=rng.random() < 0.4)
        members = members_owning(subs, {}, -1)
        assert assign(cluster, members) == kafka_python_assign(cluster, members), (cluster, subs)


def test_differing_subscriptions_after_a_change_match_kafka_python():
    rng = random.Random(42)
    compared = 0
    while compared < 400:
        cluster, subs = random_group(rng, identical=False)
        owned, _ = converge(cluster, subs, {}, 1, rounds=4)
        change = rng.choice(["add", "remove", "resubscribe"])
        if change == "add":
            subs["new"] = rng.sample(list(cluster), rng.randint(1, len(cluster)))
        elif change == "remove" and len(subs) > 1:
            gone = rng.choice(list(subs))
            del subs[gone], owned[gone]
        else:
            subs[rng.choice(list(subs))] = rng.sample(list(cluster), rng.randint(1, len(cluster)))
        if len({frozenset(ts) for ts in subs.values()}) < 2:
            continue  # identical subscriptions: Java's constrained path, not kafka-python's algorithm
        members = members_owning(dict(sorted(subs.items())), owned, 9)
        assert assign(cluster, members) == kafka_python_assign(cluster, members), (cluster, subs, owned)
        compared += 1


# -- properties ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("identical", [True, False], ids=["same-topics", "different-topics"])
def test_valid_and_cooperative_from_any_ownership(identical):
    rng = random.Random(43 + identical)
    for _ in range(700):
        cluster, subs = random_group(rng, identical)
        owned = random_ownership(rng, cluster, subs)
        members = members_owning(subs, owned, 5)
        plan = sticky_plan(cluster, members)
        assert plan.identical_subscriptions == (len({frozenset(ts) for ts in subs.values()}) == 1)
        check_valid(cluster, subs, plan.assignment)
        assert sorted(tp for tps in plan.assignment.values() for tp in tps) == sorted(all_partitions(cluster, subs))
        if identical:
            assert spread(plan.assignment) <= 1
        result = assign(cluster, members)
        check_valid(cluster, subs, result)
        claimed_by = {tp: m for m, tps in owned.items() for tp in tps}
        for member, tps in result.items():
            # The cooperative rule: nobody gets a partition another member still owns ...
            assert all(claimed_by.get(tp, member) == member for tp in tps), (member, tps, owned)
            # ... and only such partitions are held back from the plan.
            for tp in set(plan.assignment[member]) - set(tps):
                assert claimed_by.get(tp, member) != member


def test_identical_subscriptions_settle_in_two_rounds():
    rng = random.Random(44)
    for _ in range(500):
        cluster, subs = random_group(rng, identical=True)
        owned = random_ownership(rng, cluster, subs)
        first = assign(cluster, members_owning(subs, owned, 3))
        second = assign(cluster, members_owning(subs, first, 4))
        assert sorted(tp for tps in second.values() for tp in tps) == sorted(all_partitions(cluster, subs))
        assert spread(second) <= 1
        assert assign(cluster, members_owning(subs, second, 5)) == second  # and it stays


def test_different_subscriptions_settle_complete():
    rng = random.Random(45)
    for _ in range(400):
        cluster, subs = random_group(rng, identical=False)
        owned = random_ownership(rng, cluster, subs)
        settled, _ = converge(cluster, subs, owned, 3, rounds=5)
        assert sorted(tp for tps in settled.values() for tp in tps) == sorted(all_partitions(cluster, subs))


@pytest.mark.parametrize("change", ["add", "remove"])
def test_members_keep_all_they_can_when_one_joins_or_leaves(change):
    rng = random.Random(46 if change == "add" else 47)
    changed = 0
    for _ in range(500):
        cluster, subs = random_group(rng, identical=True)
        owned, _ = converge(cluster, subs, {}, 1, rounds=3)
        if change == "add":
            subs["m-new"] = list(next(iter(subs.values())))
        elif len(subs) > 1:
            gone = rng.choice(list(subs))
            del subs[gone], owned[gone]
        plan = sticky_plan(cluster, members_owning(subs, owned, 7)).assignment
        total, n = len(all_partitions(cluster, subs)), len(subs)
        low, extra = divmod(total, n)
        # The fewest moves any balanced assignment allows: members keep up to their quota, and the
        # `extra` bigger quotas go to members that own more than the smaller one.
        best = sum(min(len(owned.get(m, [])), low) for m in subs)
        best += min(extra, sum(1 for m in subs if len(owned.get(m, [])) > low))
        kept = {m: len(set(plan[m]) & set(owned.get(m, []))) for m in subs}
        assert sum(kept.values()) == best, (cluster, subs, owned, plan)
        for m in subs:
            assert kept[m] == min(len(owned.get(m, [])), len(plan[m]))
        changed += any(sorted(plan[m]) != sorted(owned.get(m, [])) for m in subs)
    assert changed > 200  # the changes did force partitions to move


# -- generations -----------------------------------------------------------------------------------
def test_a_newer_generation_wins_a_contested_partition():
    members = {"old": Subscription(["t"], owned_partitions=[TP("t", 0), TP("t", 1)], generation_id=4),
               "new": Subscription(["t"], owned_partitions=[TP("t", 0)], generation_id=5)}
    result = assign({"t": 2}, members)
    assert result == {"new": [TP("t", 0)], "old": [TP("t", 1)]}


def test_a_partition_claimed_twice_in_one_generation_waits_a_round():
    members = {"a": Subscription(["t"], owned_partitions=[TP("t", 0)], generation_id=5),
               "b": Subscription(["t"], owned_partitions=[TP("t", 0), TP("t", 1)], generation_id=5)}
    plan = sticky_plan({"t": 2}, members)
    assert plan.transferring == {TP("t", 0): "a"}
    assert assign({"t": 2}, members) == {"a": [], "b": [TP("t", 1)]}


def test_the_generation_in_user_data_serves_members_without_the_field():
    # Kafka 2.4-3.3 cooperative-sticky consumers send v1 subscriptions with the generation as user data.
    mine = CooperativeStickyAssignor()
    assert mine.subscription_user_data(["t"]) == struct.pack(">i", -1)
    mine.on_assignment(Assignment([TP("t", 0)]), 8)
    user_data = mine.subscription_user_data(["t"])
    assert user_data == struct.pack(">i", 8)
    old = Subscription(["t"], user_data=struct.pack(">i", 7), owned_partitions=[TP("t", 0)])
    new = Subscription(["t"], user_data=user_data, owned_partitions=[TP("t", 0)])
    assert (member_generation(old), member_generation(new)) == (7, 8)
    assert member_generation(Subscription(["t"], user_data=b"\x01")) == -1
    assert member_generation(Subscription(["t"], user_data=struct.pack(">i", 7), generation_id=9)) == 9
    assert assign({"t": 1}, {"a": old, "b": new}) == {"a": [], "b": [TP("t", 0)]}


def test_claims_the_group_cannot_honour_are_dropped():
    members = {"a": Subscription(["t"], owned_partitions=[TP("t", 5), TP("u", 0), TP("t", 1)], generation_id=2),
               "b": Subscription(["t"], generation_id=2)}
    # t-5 does not exist and nobody reads u: only a's claim on t-1 counts.
    assert sticky_plan({"t": 2, "u": 1}, members).assignment == {"a": [TP("t", 1)], "b": [TP("t", 0)]}


def test_eager_members_own_nothing_and_get_everything_at_once():
    assignor = CooperativeStickyAssignor()
    assert (assignor.protocol, assignor.supported_protocols) == (COOPERATIVE, (COOPERATIVE, EAGER))
    members = {f"m{i}": Subscription(["t", "u"]) for i in range(3)}
    result = assign({"t": 4, "u": 3}, members)
    assert sorted(tp for tps in result.values() for tp in tps) == sorted(all_partitions({"t": 4, "u": 3}, {"x": ["t", "u"]}))
    assert spread(result) <= 1
    assert assignor.assign({"t": 1}, {}) == {}


# -- Java's rules, traced by hand through Java's algorithm -------------------------------------------
def test_an_over_quota_member_keeps_its_lowest_partition_numbers():
    # Java keeps owned partitions sorted by partition number, then topic: one of each topic here.
    owned = [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)]
    members = {"m-a": Subscription(["t0", "t1"], owned_partitions=owned, generation_id=1),
               "m-b": Subscription(["t0", "t1"])}
    plan = sticky_plan({"t0": 2, "t1": 2}, members)
    assert plan.assignment == {"m-a": [TP("t0", 0), TP("t1", 0)], "m-b": [TP("t0", 1), TP("t1", 1)]}
    assert plan.transferring == {TP("t0", 1): "m-b", TP("t1", 1): "m-b"}
    assert assign({"t0": 2, "t1": 2}, members) == {"m-a": [TP("t0", 0), TP("t1", 0)], "m-b": []}


def test_a_partition_goes_back_to_its_previous_generation_owner():
    # t1-0: m2 owns it in generation 3, m1 held it in generation 2.  Balancing moves it, and
    # Java's rule sends it back to m1 rather than to the least-loaded m0.
    members = {"m0": Subscription(["t1", "t0"], generation_id=3),
               "m1": Subscription(["t0", "t1"], owned_partitions=[TP("t1", 0)], generation_id=2),
               "m2": Subscription(["t0", "t1"], owned_partitions=[TP("t0", 0), TP("t1", 0)], generation_id=3),
               "m3": Subscription(["t0"], generation_id=2)}
    assert sticky_plan({"t0": 1, "t1": 1}, members).assignment == {
        "m0": [], "m1": [TP("t1", 0)], "m2": [TP("t0", 0)], "m3": []}


def test_a_move_that_would_undo_an_earlier_one_moves_that_partition_back():
    # Balancing first moves t1-1 from m2 to m0; when m0 later must give a t1 partition to m2,
    # Java's partition-movement rule sends t1-1 home instead of moving t1-0.
    members = {"m0": Subscription(["t1", "t2", "t0"], owned_partitions=[TP("t1", 0), TP("t2", 2)], generation_id=3),
               "m1": Subscription(["t0"], generation_id=3),
               "m2": Subscription(["t1", "t2", "t0"], generation_id=3, owned_partitions=[
                   TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1), TP("t1", 2), TP("t2", 0)])}
    plan = sticky_plan({"t0": 2, "t1": 3, "t2": 3}, members)
    assert {m: sorted(tps) for m, tps in plan.assignment.items()} == {
        "m0": [TP("t1", 0), TP("t2", 1), TP("t2", 2)], "m1": [TP("t0", 0), TP("t0", 1)],
        "m2": [TP("t1", 1), TP("t1", 2), TP("t2", 0)]}


def test_the_balance_score_is_the_sum_of_pairwise_differences():
    from kwire.client.assignors.sticky_general import _imbalance

    for sizes in ([], [3], [0, 2], [5, 1, 1], [4, 0, 2, 7]):
        expected = sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1:])
        assert _imbalance({f"m{i}": [None] * n for i, n in enumerate(sizes)}) == expected


def test_when_a_member_must_revoke_balancing_considers_every_partition():
    # m0 claims t1-0 but no longer reads t1, so Java skips its "move only the new partitions
    # first" pass and balances over all partitions.  (t0-1 is claimed twice: nobody keeps it.)
    members = {"m0": Subscription(["t0"], generation_id=3,
                                  owned_partitions=[TP("t0", 1), TP("t0", 2), TP("t0", 3), TP("t1", 0)]),
               "m1": Subscription(["t1", "t0"], owned_partitions=[TP("t0", 1)], generation_id=3),
               "m2": Subscription(["t0"], owned_partitions=[TP("t0", 0)], generation_id=3),
               "m3": Subscription(["t1"], generation_id=3)}
    plan = sticky_plan({"t0": 6, "t1": 1}, members)
    assert {m: sorted(tps) for m, tps in plan.assignment.items()} == {
        "m0": [TP("t0", 3), TP("t0", 5)], "m1": [TP("t0", 1), TP("t0", 2)],
        "m2": [TP("t0", 0), TP("t0", 4)], "m3": [TP("t1", 0)]}
