"""The broker's classic consumer-group coordinator.

* ``group``: one group's state machine (members, generations, protocol selection);
* ``coordinator``: ``GroupCoordinator``, the rebalance protocol, sessions and committed offsets;
* ``validation``: Kafka's checks of a member's request against its group, in Kafka's order;
* ``retention``: which committed offsets expired (KIP-211);
* ``store``: the durable journal of offsets (transactions' staged ones too) and group metadata;
* ``timers``, ``offsets``, ``subscription``, ``model``: the small pieces they share.

The request handlers in ``kwire.broker.handlers.groups`` translate the wire versions to calls here.
"""

from .coordinator import GROUP_TYPE, GroupCoordinator
from .group import Group, GroupState, Member
from .model import (
    GroupDescription,
    GroupListing,
    JoinedMember,
    JoinRequest,
    JoinResult,
    MemberDescription,
    OffsetCommitEntry,
    SyncResult,
)
from .offsets import CommittedOffset
from .store import GroupStore, GroupStoreError

__all__ = [
    "GROUP_TYPE", "CommittedOffset", "Group", "GroupCoordinator", "GroupDescription", "GroupListing", "GroupState",
    "GroupStore", "GroupStoreError", "JoinRequest", "JoinResult", "JoinedMember", "Member", "MemberDescription",
    "OffsetCommitEntry", "SyncResult",
]
