"""The two deadlines of a member of a broker-assigned group (KIP-848 consumer groups and KIP-1071
streams groups): its session, renewed by every heartbeat, and, while it is asked to give up
partitions or tasks, its revocation (the rebalance timeout of Kafka's GroupMetadataManager).

Both are milliseconds of the coordinator's injected clock.  The coordinator's one timer is told
the earliest deadline whenever it may have moved (``moved``); when it fires, ``due`` names the
members to fence.  A revocation deadline counts only while the member is still revoking at the
epoch it was set for: one that finished or moved on is dropped instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .member import MemberState

__all__ = ["MemberDeadlines", "MemberKey"]

MemberKey = tuple[str, str]  # (group id, member id)


class MemberDeadlines:
    """Session and revocation deadlines, keyed by (group id, member id)."""

    __slots__ = ("_on_change", "_revocations", "_sessions")

    def __init__(self, on_change: Callable[[int | None], None] | None = None) -> None:
        self._on_change = on_change
        self._sessions: dict[MemberKey, int] = {}
        self._revocations: dict[MemberKey, tuple[int, int]] = {}  # -> (deadline, member epoch)

    def start_session(self, key: MemberKey, deadline_ms: int) -> None:
        self._sessions[key] = deadline_ms

    def await_revocation(self, key: MemberKey, deadline_ms: int, member_epoch: int) -> None:
        """The member must have given up what it was asked to by then (at this epoch)."""
        self._revocations[key] = (deadline_ms, member_epoch)

    def revocation_done(self, key: MemberKey) -> None:
        self._revocations.pop(key, None)

    def forget(self, key: MemberKey) -> None:
        """The member left or was removed: neither deadline holds any more."""
        self._sessions.pop(key, None)
        self._revocations.pop(key, None)

    def due(self, now_ms: int, member_of: Callable[[MemberKey], Any]) -> list[tuple[MemberKey, str]]:
        """The members to fence at ``now_ms``, each with why ("session timed out" or "timed out
        revoking").  ``member_of`` gives the member a key stands for (None when it is gone)."""
        gone = {key: "session timed out" for key, deadline in self._sessions.items() if deadline <= now_ms}
        for key, (deadline, epoch) in list(self._revocations.items()):
            member = member_of(key)
            if member is None or member.state is not MemberState.UNREVOKED_PARTITIONS or member.member_epoch != epoch:
                del self._revocations[key]
            elif deadline <= now_ms:
                gone.setdefault(key, "timed out revoking")
        return list(gone.items())

    def fence_due(self, now_ms: int, member_of: Callable[[MemberKey], Any],
                  fence: Callable[[MemberKey, str], None]) -> list[MemberKey]:
        """Fence (``fence(key, why)``) every member whose deadline passed at ``now_ms``, forget the
        keys whose member is already gone, and move the timer; the keys that were due."""
        due = self.due(now_ms, member_of)
        for key, why in due:
            if member_of(key) is None:
                self.forget(key)
            else:
                fence(key, why)
        self.moved()
        return [key for key, _ in due]

    def next_deadline(self) -> int | None:
        deadlines = [*self._sessions.values(), *(d for d, _ in self._revocations.values())]
        return min(deadlines) if deadlines else None

    def moved(self) -> None:
        """Tell the coordinator's timer the earliest deadline now."""
        if self._on_change is not None:
            self._on_change(self.next_deadline())

    def close(self) -> None:
        close = getattr(self._on_change, "close", None)
        if close is not None:
            close()
