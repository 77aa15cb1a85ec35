"""Which kind of group a group id is: a group id belongs to one group type at a time (KIP-848).

    group_type(broker_state, "orders")   # "consumer", "streams", "classic", "share" or None

The classic coordinator keeps the committed offsets of every group id, so an id it knows only
for offsets, that a consumer group runs, is a consumer group.  Share groups (KIP-932) ask here
before they take an id, and the classic and consumer protocols ask before they take a share
group's id (Kafka: JoinGroup INCONSISTENT_GROUP_PROTOCOL, a heartbeat or commit GROUP_ID_NOT_FOUND).
"""

from __future__ import annotations

from typing import Any

from .consumer import GROUP_TYPE as CONSUMER
from .coordinator import GROUP_TYPE as CLASSIC

__all__ = ["CLASSIC", "CONSUMER", "SHARE", "STREAMS", "group_type", "is_share_group", "is_streams_group"]

SHARE = "share"
STREAMS = "streams"


def group_type(state: Any, group_id: str) -> str | None:
    """"consumer", "streams", "classic", "share" or None for a group id of the broker ``state`` (read only)."""
    consumer_groups = getattr(state, "consumer_groups", None)
    if consumer_groups is not None and consumer_groups.group(group_id) is not None:
        return CONSUMER
    if is_streams_group(state, group_id):  # before classic: its offsets are kept there too
        return STREAMS
    if state.coordinator.group(group_id) is not None:
        return CLASSIC
    if is_share_group(state, group_id):
        return SHARE
    return None


def is_streams_group(state: Any, group_id: str) -> bool:
    """Whether a streams group holds ``group_id``."""
    streams_groups = getattr(state, "streams_groups", None)
    return streams_groups is not None and streams_groups.has_group(group_id)


def is_share_group(state: Any, group_id: str) -> bool:
    """Whether a share group holds ``group_id``, without starting the share manager: until a
    share request starts it after a restart, the share groups are the ShareGroup* records the
    group coordinator loaded from ``__consumer_offsets``.  The group's partition is asked for
    first (``GroupCoordinator.ask_for``): a small one still loading is loaded now, so a share
    group is known before a classic or consumer request would take its id."""
    ask_for = getattr(state.coordinator, "ask_for", None)
    if ask_for is not None:
        ask_for(group_id)
    share = getattr(state, "share", None)
    if share is not None:
        return share.groups.group(group_id) is not None
    store = getattr(state.coordinator, "store", None)
    return store is not None and group_id in getattr(store, "share_groups", {})
