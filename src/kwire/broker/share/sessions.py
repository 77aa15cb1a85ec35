"""Share sessions (KIP-932): the partitions a member fetches from this broker, kept between its
ShareFetch requests like a fetch session (KIP-227), keyed by (group, member).

The ShareSessionEpoch of a request says what it is, as in Kafka's ShareSessionCache:
0 opens a new session (replacing one the member had), -1 is the member's last request (its
acknowledgements are applied, then the session closes), any other value must be the epoch the
session expects next, which then moves on by one (wrapping to 1).  A request with no session gets
SHARE_SESSION_NOT_FOUND, one with the wrong epoch INVALID_SHARE_SESSION_EPOCH.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kwire.protocol.errors import InvalidShareSessionEpochError, ShareSessionNotFoundError

__all__ = ["ShareSession", "ShareSessionCache", "INITIAL_EPOCH", "FINAL_EPOCH", "next_epoch"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= _INT32_MAX else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    # (topic name, partition) in the order they were added
    partitions: dict[tuple[str, int], None] = field(default_factory=dict)
    connection_id: int | None = None


class ShareSessionCache:
    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, connection_id: int | None = None) -> tuple[ShareSession,
                                                                                              ShareSession | None]:
        """A new session at epoch 1; the one it replaces, if any (its records must be released)."""
        old = self._sessions.pop((group_id, member_id), None)
        s = self._sessions[(group_id, member_id)] = ShareSession(group_id, member_id, 1, connection_id=connection_id)
        return s, old

    def check(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request at ``epoch`` (not 0) continues, or the error Kafka answers."""
        s = self._sessions.get((group_id, member_id))
        if s is None:
            raise ShareSessionNotFoundError(f"no share session for member {member_id} of group {group_id}")
        if epoch != FINAL_EPOCH and epoch != s.epoch:
            raise InvalidShareSessionEpochError(f"share session epoch {epoch}, expected {s.epoch}")
        return s

    def advance(self, s: ShareSession) -> None:
        s.epoch = next_epoch(s.epoch)

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def on_connection(self, connection_id: int) -> list[ShareSession]:
        """The sessions opened on that connection."""
        return [s for s in self._sessions.values() if s.connection_id == connection_id]

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for (g, _), s in self._sessions.items() if g == group_id]

    def __len__(self) -> int:
        return len(self._sessions)
