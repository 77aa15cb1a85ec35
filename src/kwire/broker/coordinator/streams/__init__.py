"""KIP-1071 streams groups: the coordinator of StreamsGroupHeartbeat and its pieces.

* ``coordinator``: ``StreamsGroupCoordinator``, heartbeats, member and topology epochs, sessions;
* ``topology``: the application's topology and what the cluster's topics make of it (task counts,
  missing and internal topics, the heartbeat's Status list);
* ``group`` / ``member``: the group and member models;
* ``assignor``: Kafka's sticky task assignor (active and standby tasks).

Reconciliation (revoke before assign) is the KIP-848 consumer groups' (``consumer.reconciliation``).
The request handlers are in ``kwire.broker.handlers.streams_groups``.
"""

from .coordinator import GROUP_TYPE, StreamsGroupCoordinator, StreamsHeartbeat, StreamsHeartbeatResult, StreamsSettings
from .group import StreamsGroup, StreamsGroupState
from .member import StreamsMember
from .topology import StatusCode, StreamsTopology

__all__ = ["GROUP_TYPE", "StatusCode", "StreamsGroup", "StreamsGroupCoordinator", "StreamsGroupState",
           "StreamsHeartbeat", "StreamsHeartbeatResult", "StreamsMember", "StreamsSettings", "StreamsTopology"]
