"""KIP-848 consumer groups: the coordinator of ConsumerGroupHeartbeat and its pieces.

* ``coordinator``: ``ConsumerGroupCoordinator``, heartbeats, member epochs, sessions, offsets checks;
* ``group`` / ``member``: the group and member models (epochs, target assignment, partition owners);
* ``reconciliation``: a member's way from its assignment to its target (revoke before assign);
* ``assignors``: the server-side assignors ``uniform`` and ``range``;
* ``records``: the groups in ``__consumer_offsets`` as Kafka's ConsumerGroup* records;
* ``topic_regex``: subscriptions by regular expression (RE2's syntax).

The request handlers are in ``kwire.broker.handlers.consumer_groups``.
"""

from .coordinator import GROUP_TYPE, ConsumerGroupCoordinator, Timeouts
from .group import ConsumerGroup, ConsumerGroupState
from .member import ConsumerMember, MemberState
from .model import HeartbeatRequest, HeartbeatResult

__all__ = ["GROUP_TYPE", "ConsumerGroup", "ConsumerGroupCoordinator", "ConsumerGroupState", "ConsumerMember",
           "HeartbeatRequest", "HeartbeatResult", "MemberState", "Timeouts"]
