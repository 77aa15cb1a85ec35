"""Per-partition log settings, named after Kafka's topic configs (segment.bytes, retention.ms...)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["LogConfig", "CREATE_TIME", "LOG_APPEND_TIME", "CLEANUP_POLICIES", "LONG_MAX", "normalize_cleanup_policy"]

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
LONG_MAX = (1 << 63) - 1  # Java's Long.MAX_VALUE: Kafka's "no limit" for several settings

# cleanup.policy is a list of "delete" and "compact" (Kafka's TopicConfig.CLEANUP_POLICY_*);
# kwire keeps it in one spelling so that comparisons are plain string equality.
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")


def normalize_cleanup_policy(value: str) -> str:
    """``"delete, compact"`` -> ``"compact,delete"``; ValueError naming what is allowed."""
    parts = sorted({p.strip() for p in value.split(",") if p.strip()})
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise ValueError(f"cleanup.policy must be a list of 'delete' and 'compact', got {value!r}")
    return ",".join(parts)

_DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log.  Defaults are Kafka's broker defaults.

    Frozen so one instance can be shared by many partitions; use ``with_(...)`` to derive one.
    """

    segment_bytes: int = 1 << 30                    # segment.bytes: roll when the active segment would exceed it
    segment_ms: int = 7 * _DAY_MS                   # segment.ms (log.roll.hours=168): roll by age
    retention_ms: int = 7 * _DAY_MS                 # retention.ms; -1 keeps forever
    retention_bytes: int = -1                       # retention.bytes; -1 means no size limit
    index_interval_bytes: int = 4096                # index.interval.bytes: offset/time index sparsity
    message_timestamp_type: str = CREATE_TIME       # message.timestamp.type
    # message.timestamp.before/after.max.ms: how far a CreateTime timestamp may lie behind or
    # ahead of the broker's clock (Kafka 4's defaults: no bound behind, one hour ahead).
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 60 * 60 * 1000
    max_message_bytes: int = 1024 * 1024 + 12       # max.message.bytes (Kafka: 1048588), per batch
    # Kafka flushes a rolled segment (asynchronously); we do it synchronously so the recovery
    # point can move past it and a crash never has to re-scan more than the active segment.
    flush_on_roll: bool = True
    # -- compaction (Kafka's topic configs of the same names; defaults from log.cleaner.*) -----
    cleanup_policy: str = "delete"                  # cleanup.policy: delete | compact | compact,delete
    min_cleanable_dirty_ratio: float = 0.5          # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0                  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX           # max.compaction.lag.ms
    delete_retention_ms: int = _DAY_MS              # delete.retention.ms: how long tombstones stay
    # compression.type: "producer" stores batches as the producer compressed them; a codec name
    # makes the broker store every batch in that codec (Kafka's LogValidator recompresses).
    compression_type: str = "producer"
    # compression.<codec>.level: the level the broker compresses with when compression.type
    # makes it rebuild batches (Kafka's defaults: gzip -1 = the codec's own, lz4 9, zstd 3).
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3

    def __post_init__(self) -> None:
        # A segment must hold at least one batch header, and relative offsets/positions are int32.
        if not 14 <= self.segment_bytes <= 0x7FFFFFFF:
            raise ValueError(f"segment_bytes must be in [14, 2^31-1], got {self.segment_bytes}")
        if self.segment_ms <= 0:
            raise ValueError(f"segment_ms must be positive, got {self.segment_ms}")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise ValueError("retention_ms/retention_bytes must be >= -1")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {self.index_interval_bytes}")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"message_timestamp_type must be {CREATE_TIME!r} or {LOG_APPEND_TIME!r}")
        if self.message_timestamp_before_max_ms < 0 or self.message_timestamp_after_max_ms < 0:
            raise ValueError("message_timestamp_before_max_ms and message_timestamp_after_max_ms must be >= 0")
        if self.max_message_bytes < 0:
            raise ValueError(f"max_message_bytes must be >= 0, got {self.max_message_bytes}")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            # Frozen: normalise through object.__setattr__ so "delete,compact" is accepted too.
            object.__setattr__(self, "cleanup_policy", normalize_cleanup_policy(self.cleanup_policy))
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(f"min_cleanable_dirty_ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}")
        if self.min_compaction_lag_ms < 0 or self.max_compaction_lag_ms < 1 or self.delete_retention_ms < 0:
            raise ValueError("min_compaction_lag_ms and delete_retention_ms must be >= 0, max_compaction_lag_ms >= 1")
        if self.compression_type not in ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"):
            raise ValueError("compression_type must be one of producer, uncompressed, gzip, snappy, lz4, zstd, "
                             f"got {self.compression_type!r}")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    def compression_level(self, codec: str) -> int | None:
        """The level compression.<codec>.level sets, None for a codec without levels."""
        return {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                "zstd": self.compression_zstd_level}.get(codec)

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this log (cleanup.policy holds "compact")."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments (cleanup.policy holds "delete")."""
        return "delete" in self.cleanup_policy

    def with_(self, **changes) -> LogConfig:
        return dataclasses.replace(self, **changes)
