"""Strategy names to JoinGroup protocols and back, and the leader's decode-assign-encode step."""

from __future__ import annotations

import struct

import pytest

from kwire.client.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    DEFAULT_STRATEGIES,
    EAGER,
    Assignment,
    AssignmentError,
    Assignor,
    CooperativeStickyAssignor,
    GroupProtocols,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_subscription,
    perform_assignment,
)
from kwire.client.types import TopicPartition
from kwire.protocol.errors import DecodeError

TP = TopicPartition


class CooperativeOnly(Assignor):
    """A custom assignor that hands every partition to the first member, whoever owns it."""

    name = "grabby"
    protocol = COOPERATIVE
    supported_protocols = (COOPERATIVE,)

    def assign(self, cluster_partitions, members):
        first = min(members)
        return {m: Assignment([TP(t, p) for t, n in cluster_partitions.items() for p in range(n)] if m == first else [])
                for m in members}


def test_kafka_names():
    assert set(ASSIGNORS) == {"range", "roundrobin", "cooperative-sticky"}
    assert [ASSIGNORS[n].name for n in ASSIGNORS] == list(ASSIGNORS)


def test_javas_default_list_rebalances_eagerly_and_offers_range_first():
    protocols = GroupProtocols()
    assert DEFAULT_STRATEGIES == ("range", "cooperative-sticky")
    assert protocols.rebalance_protocol == EAGER
    offered = protocols.join_protocols({"b", "a"})
    assert [p.name for p in offered] == ["range", "cooperative-sticky"]
    range_sub, sticky_sub = (decode_subscription(p.metadata) for p in offered)
    assert range_sub == Subscription(["a", "b"])
    assert sticky_sub == Subscription(["a", "b"], user_data=struct.pack(">i", -1))


@pytest.mark.parametrize(("strategies", "protocol"), [
    (["cooperative-sticky"], COOPERATIVE),
    (["roundrobin", "range"], EAGER),
    (["cooperative-sticky", "roundrobin"], EAGER),
    ([CooperativeOnly(), "cooperative-sticky"], COOPERATIVE),
])
def test_the_newest_rebalance_protocol_all_assignors_support(strategies, protocol):
    assert GroupProtocols(strategies).rebalance_protocol == protocol


@pytest.mark.parametrize(("strategies", "message"), [
    ([], "lists no assignor"),
    (["range", "range"], "twice"),
    (["sticky"], "unknown partition assignment strategy 'sticky' \\(kwire has range, roundrobin, cooperative-sticky\\)"),
    ([CooperativeOnly(), "range"], "grabby \\(cooperative\\), range \\(eager\\) share no rebalance protocol"),
])
def test_bad_strategy_lists(strategies, message):
    with pytest.raises(ValueError, match=message):
        GroupProtocols(strategies)


def test_the_member_state_travels_in_every_protocol():
    protocols = GroupProtocols(["cooperative-sticky", "roundrobin"])
    sticky = protocols.assignor("cooperative-sticky")
    sticky.on_assignment(Assignment([TP("t", 1)]), 6)
    offered = protocols.join_protocols(["t"], owned_partitions=[TP("t", 1)], generation_id=6, rack_id="r1", version=2)
    for p in offered:
        assert p.metadata[:2] == b"\x00\x02"
        sub = decode_subscription(p.metadata)
        assert (sub.owned_partitions, sub.generation_id, sub.rack_id) == ([TP("t", 1)], 6, None)  # no rack in v2
    assert decode_subscription(offered[0].metadata).user_data == struct.pack(">i", 6)
    assert decode_subscription(offered[1].metadata).user_data is None


def test_the_coordinators_choice_names_the_assignor():
    protocols = GroupProtocols(["roundrobin", "range"])
    assert isinstance(protocols.assignor("range"), RangeAssignor)
    assert isinstance(protocols.assignor("roundrobin"), RoundRobinAssignor)
    with pytest.raises(ValueError, match="chose assignment protocol 'cooperative-sticky', which this consumer did not"):
        protocols.assignor("cooperative-sticky")


# -- the leader's step ---------------------------------------------------------------------------------
def test_perform_assignment_decodes_assigns_and_encodes():
    members = [("m-b", None, encode_subscription(Subscription(["t"]), 0)),
               ("m-a", "static", encode_subscription(Subscription(["t"]), 3))]
    out = perform_assignment(RangeAssignor(), {"t": 3}, members)
    # The static member sorts first although its member id does not.
    assert {m: decode_assignment(b).partitions for m, b in out.items()} == {
        "m-a": [TP("t", 0), TP("t", 1)], "m-b": [TP("t", 2)]}
    assert {b[:2] for b in out.values()} == {b"\x00\x03"}
    assert perform_assignment(RangeAssignor(), {"t": 3}, members, version=0)["m-a"][:2] == b"\x00\x00"


def test_perform_assignment_refuses_undecodable_metadata():
    with pytest.raises(DecodeError, match="ConsumerProtocolSubscription"):
        perform_assignment(RangeAssignor(), {"t": 1}, [("m", None, b"\x00\x00\x00\x00\x00\x05ab")])


def test_perform_assignment_checks_the_cooperative_rule():
    owner = encode_subscription(Subscription(["t"], owned_partitions=[TP("t", 0)], generation_id=1))
    members = [("a", None, encode_subscription(Subscription(["t"]))), ("b", None, owner)]
    # Unchecked under eager (the owner revoked everything before joining).
    perform_assignment(CooperativeOnly(), {"t": 1}, members, rebalance_protocol=EAGER)
    with pytest.raises(AssignmentError, match="t-0 to a"):
        perform_assignment(CooperativeOnly(), {"t": 1}, members, rebalance_protocol=COOPERATIVE)
    # The real one holds the partition back instead.
    out = perform_assignment(CooperativeStickyAssignor(), {"t": 1}, members, rebalance_protocol=COOPERATIVE)
    assert decode_assignment(out["b"]).partitions == [TP("t", 0)]


def test_perform_assignment_needs_an_answer_for_every_member():
    class Forgetful(RangeAssignor):
        def assign(self, cluster_partitions, members):
            return {}

    with pytest.raises(AssignmentError, match="members are \\['m'\\]"):
        perform_assignment(Forgetful(), {"t": 1}, [("m", None, encode_subscription(Subscription(["t"])))])
