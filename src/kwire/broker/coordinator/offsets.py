"""A committed offset as the coordinator keeps it (and the journal stores it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CommittedOffset", "newer_txn_offsets"]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str      # null metadata is kept as "", as Kafka does
    commit_timestamp_ms: int
    # Only OffsetCommit v2-v4 with an explicit retention_time_ms set one; then it alone decides expiry.
    expire_timestamp_ms: int | None = None


def newer_txn_offsets(committed: Mapping[tuple[str, int], CommittedOffset],
                      staged: Mapping[tuple[str, int], CommittedOffset]) -> dict[tuple[str, int], CommittedOffset]:
    """The offsets a committing transaction makes the group's: its staged ones, except where the
    group got a plain commit after the offset was staged (Kafka keeps the one later in its log;
    the commit times stand in for log order here)."""
    return {tp: offset for tp, offset in staged.items()
            if tp not in committed or committed[tp].commit_timestamp_ms <= offset.commit_timestamp_ms}
