"""A committed offset as the coordinator keeps it (and the journal stores it)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CommittedOffset"]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str      # null metadata is kept as "", as Kafka does
    commit_timestamp_ms: int
    # Only OffsetCommit v2-v4 with an explicit retention_time_ms set one; then it alone decides expiry.
    expire_timestamp_ms: int | None = None
