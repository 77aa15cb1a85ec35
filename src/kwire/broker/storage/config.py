"""Per-partition log settings, named after Kafka's topic configs (segment.bytes, retention.ms...)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["LogConfig", "CREATE_TIME", "LOG_APPEND_TIME"]

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

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
    max_message_bytes: int = 1024 * 1024 + 12       # max.message.bytes (Kafka: 1048588), per batch
    # Kafka flushes a rolled segment (asynchronously); we do it synchronously so the recovery
    # point can move past it and a crash never has to re-scan more than the active segment.
    flush_on_roll: bool = True

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
        if self.max_message_bytes < 0:
            raise ValueError(f"max_message_bytes must be >= 0, got {self.max_message_bytes}")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    def with_(self, **changes) -> LogConfig:
        return dataclasses.replace(self, **changes)
