"""The admin side of the classic group coordinator: DescribeGroups, ListGroups, DeleteGroups.

Mixed into ``GroupCoordinator`` as ``GroupAdmin``: it reads the groups the coordinator owns and
removes empty ones through it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupIdNotFoundError,
    NonEmptyGroupError,
)

from .group import Group, GroupState
from .model import GroupDescription, GroupListing, MemberDescription

__all__ = ["GROUP_TYPE", "GroupAdmin"]

logger = logging.getLogger("kwire.broker.coordinator")

# Every group here is a classic group (KIP-848's ListGroups v5 type name).
GROUP_TYPE = "classic"


class GroupAdmin:
    """Describing, listing and deleting classic groups (mixed into ``GroupCoordinator``)."""

    _groups: dict[str, Group]

    if TYPE_CHECKING:  # the coordinator's own methods
        def loading(self, group_id: str | None = None) -> bool: ...
        def _remove_group(self, group: Group) -> None: ...

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """The group's state and members; None if there is no such group."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        stable = group.is_(GroupState.STABLE)
        members = [MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.metadata(group.protocol_name) if stable else b"",
                                     m.assignment if stable else b"")
                   for m in group.members.values()]
        return GroupDescription(group.group_id, group.state.value, group.protocol_type or "",
                                (group.protocol_name or "") if stable else "", members)

    def list_groups(self, states: Collection[str] = (), types: Collection[str] = ()) -> list[GroupListing]:
        """Every group, or those in one of ``states`` / of one of ``types`` (case-insensitive)."""
        if types and GROUP_TYPE not in {t.lower() for t in types}:
            return []
        wanted = {s.lower() for s in states}
        return [GroupListing(g.group_id, g.protocol_type or "", g.state.value)
                for g in sorted(self._groups.values(), key=lambda g: g.group_id)
                if not wanted or g.state.value.lower() in wanted]

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """Delete empty groups with their offsets; an error per group id."""
        results: dict[str, int] = {}
        for group_id in dict.fromkeys(group_ids):
            if self.loading(group_id):  # first: it may load the group's partition now
                results[group_id] = CoordinatorLoadInProgressError.code
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                results[group_id] = GroupIdNotFoundError.code
            elif not group.is_(GroupState.EMPTY):
                results[group_id] = NonEmptyGroupError.code
            else:
                try:
                    self._remove_group(group)
                except OSError:
                    logger.exception("group %s: could not record its deletion", group_id)
                    results[group_id] = CoordinatorNotAvailableError.code
                    continue
                logger.info("group %s deleted", group_id)
                results[group_id] = ErrorCode.NONE
        return results
