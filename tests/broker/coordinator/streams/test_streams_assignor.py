"""The sticky task assignor of streams groups (Kafka's StickyTaskAssignor)."""

from __future__ import annotations

from kwire.broker.coordinator.streams.assignor import AssignmentMember, assign_tasks
from kwire.broker.coordinator.streams.member import ACTIVE, STANDBY, tasks_of


def test_tasks_spread_evenly_and_stay_where_they_were():
    first = assign_tasks({"a": AssignmentMember("p1"), "b": AssignmentMember("p2")}, {"0": 4, "1": 4}, 0)
    a, b = tasks_of(first["a"], ACTIVE), tasks_of(first["b"], ACTIVE)
    assert len(a) == len(b) == 4 and not a & b
    again = assign_tasks({"a": AssignmentMember("p1", a), "b": AssignmentMember("p2", b),
                          "c": AssignmentMember("p3")}, {"0": 4, "1": 4}, 0)
    assert tasks_of(again["a"], ACTIVE) <= a and tasks_of(again["b"], ACTIVE) <= b  # nothing moves between a and b
    assert sorted(len(tasks_of(again[m], ACTIVE)) for m in "abc") == [2, 3, 3]
    # Two members of one process count as twice its capacity.
    two = assign_tasks({"x1": AssignmentMember("px"), "x2": AssignmentMember("px"), "y": AssignmentMember("py")},
                       {"0": 6}, 0)
    assert sorted(len(tasks_of(two[m], ACTIVE)) for m in two) == [2, 2, 2]


def test_standbys_of_stateful_tasks_only_and_a_standby_takes_over():
    tasks = {"stateful": 2, "stateless": 2}
    out = assign_tasks({"a": AssignmentMember("p1"), "b": AssignmentMember("p2")}, tasks, 1, {"stateful"})
    for m, other in (("a", "b"), ("b", "a")):
        assert tasks_of(out[m], STANDBY) == {t for t in tasks_of(out[other], ACTIVE) if t[0] == "stateful"}
    assert not any(t[0] == "stateless" for m in out for t in tasks_of(out[m], STANDBY))
    # A newcomer that held a task's state (its standby) gets that task rather than another.
    moved = assign_tasks({"b": AssignmentMember("p2"), "c": AssignmentMember("p3", frozenset(),
                                                                            frozenset({("stateful", 1)}))},
                         {"stateful": 2}, 0, {"stateful"})
    assert tasks_of(moved["c"], ACTIVE) == {("stateful", 1)}
