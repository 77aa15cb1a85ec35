"""Consumer-group partition assignment for the classic group protocol (JoinGroup/SyncGroup), sans-IO.

* ``protocol``: the subscription and assignment bytes members exchange through the coordinator.
* ``RangeAssignor``, ``RoundRobinAssignor``, ``CooperativeStickyAssignor``: Kafka's assignors
  under Kafka's names, computing what Java's compute, so kwire can lead groups of Java and
  librdkafka consumers and follow their leaders.
* ``GroupProtocols``: the JoinGroup protocol list for a ``partition.assignment.strategy`` and
  the assignor for the protocol the coordinator chose; ``perform_assignment``: the leader's step.
"""

from kwire.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_VERSION,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

from ..types import TopicPartition
from .base import COOPERATIVE, EAGER, Assignor, partitions_changing_owner
from .cooperative_sticky import CooperativeStickyAssignor, StickyPlan, sticky_plan
from .leader import AssignmentError, check_cooperative, perform_assignment
from .range import RangeAssignor
from .registry import ASSIGNORS, DEFAULT_STRATEGIES, GroupProtocols, JoinProtocol, make_assignor
from .roundrobin import RoundRobinAssignor

__all__ = [
    "ASSIGNORS",
    "CONSUMER_PROTOCOL_VERSION",
    "COOPERATIVE",
    "DEFAULT_STRATEGIES",
    "EAGER",
    "Assignment",
    "AssignmentError",
    "Assignor",
    "CooperativeStickyAssignor",
    "GroupProtocols",
    "JoinProtocol",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyPlan",
    "Subscription",
    "TopicPartition",
    "check_cooperative",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "make_assignor",
    "partitions_changing_owner",
    "perform_assignment",
    "sticky_plan",
]
