"""Kafka's checks of a member's request against its group, in Kafka's order (first failure wins).

Pure functions of the group's state returning an error code (0: go ahead), shared by SyncGroup,
Heartbeat, OffsetCommit and TxnOffsetCommit so the order of the checks, which clients observe,
is written once (``check_member``).
"""

from __future__ import annotations

from kwire.protocol.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

from .group import Group, GroupState

__all__ = ["check_member", "check_offset_commit", "check_txn_offset_commit"]


def check_member(group: Group, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
    """A member of the current generation (SyncGroup, Heartbeat)."""
    if group.is_(GroupState.DEAD):
        return CoordinatorNotAvailableError.code
    if group.is_static_member_fenced(group_instance_id, member_id):
        return FencedInstanceIdError.code
    if not group.has(member_id):
        return UnknownMemberIdError.code
    if generation_id != group.generation_id:
        return IllegalGenerationError.code
    return 0


def check_offset_commit(group: Group, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
    """OffsetCommit: a member of the current generation, or anyone while the group has no members.

    Generation -1 without a member id is a commit from outside group management (a standalone
    consumer, the admin client): fine for an Empty group, UNKNOWN_MEMBER_ID for one with members.
    """
    if group.is_(GroupState.DEAD):
        return CoordinatorNotAvailableError.code
    if generation_id < 0 and group.is_(GroupState.EMPTY):
        return 0
    if generation_id >= 0 or member_id or group_instance_id is not None:
        error = check_member(group, generation_id, member_id, group_instance_id)
        if error:
            return error
    elif not group.is_(GroupState.EMPTY):
        return UnknownMemberIdError.code
    if group.is_(GroupState.COMPLETING_REBALANCE):
        # The member knows the new generation but has no assignment yet: it must not commit.
        return RebalanceInProgressError.code
    return 0


def check_txn_offset_commit(group: Group, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
    """TxnOffsetCommit: as OffsetCommit, except that a commit without member (v0-2 carry none)
    is taken whatever the group's members, and a rebalance does not stop it (Kafka's rules)."""
    if generation_id >= 0 or member_id or group_instance_id is not None:
        return check_member(group, generation_id, member_id, group_instance_id)
    return CoordinatorNotAvailableError.code if group.is_(GroupState.DEAD) else 0
