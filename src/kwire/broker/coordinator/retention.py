"""Which committed offsets have outlived ``offsets.retention.minutes`` (KIP-211 semantics).

Offsets expire only when nobody needs them any more, measured from the right moment:

* a group only ever used to store offsets (standalone consumers, admin tools): each offset
  ``retention_ms`` after its last commit;
* an Empty group: all its offsets ``retention_ms`` after the group became Empty (after its
  last commit if that moment is unknown);
* a Stable consumer group: offsets of topics no member subscribes to any more, ``retention_ms``
  after their last commit; the subscribed topics' offsets are kept however old;
* any other group (rebalancing, or members whose subscriptions can't be read): nothing.

An offset committed with an explicit retention (OffsetCommit v2-v4) expires at its own time instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .group import CONSUMER_PROTOCOL_TYPE, Group, GroupState
from .offsets import CommittedOffset

__all__ = ["expired_offsets", "expired_partitions"]


def expired_partitions(group: Group, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
    """The partitions of ``group`` whose committed offsets expired at ``now_ms``."""
    if group.protocol_type is None:
        return expired_offsets(group.offsets, now_ms, retention_ms, _committed_at)
    if group.is_(GroupState.EMPTY):
        emptied_at = group.state_timestamp_ms

        def since_empty(c: CommittedOffset) -> int:
            return emptied_at if emptied_at is not None else c.commit_timestamp_ms

        return expired_offsets(group.offsets, now_ms, retention_ms, since_empty)
    if (group.is_(GroupState.STABLE) and group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None):
        return expired_offsets(group.offsets, now_ms, retention_ms, _committed_at, group.subscribed_topics)
    return []


def _committed_at(c: CommittedOffset) -> int:
    return c.commit_timestamp_ms


def expired_offsets(offsets: Mapping[tuple[str, int], CommittedOffset], now_ms: int, retention_ms: int,
                    base_timestamp: Callable[[CommittedOffset], int],
                    keep_topics: set[str] | frozenset[str] = frozenset()) -> list[tuple[str, int]]:
    """The partitions whose offsets are ``retention_ms`` past ``base_timestamp(offset)``, or past
    their explicit expire timestamp; offsets of ``keep_topics`` never expire."""
    expired = []
    for (topic, partition), committed in offsets.items():
        if topic in keep_topics:
            continue
        if committed.expire_timestamp_ms is not None:
            if now_ms >= committed.expire_timestamp_ms:
                expired.append((topic, partition))
        elif now_ms - base_timestamp(committed) >= retention_ms:
            expired.append((topic, partition))
    return expired
