"""Checking a Produce request's records and preparing them for the log (Kafka's LogValidator,
reduced to what a v2-only, non-transactional broker needs).

Works on a private copy, so a refused request leaves neither the caller's buffer nor the log
changed.  Only headers are read and CRCs checked: records are not decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

from kwire.protocol.errors import (
    CorruptMessageError,
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    RecordListTooLargeError,
    UnsupportedForMessageFormatError,
)
from kwire.protocol.records import RecordBatch, rewrite_base_offset, set_log_append_time

from .config import LogConfig

__all__ = ["PreparedAppend", "prepare_append"]

# Where every batch format keeps its magic byte (see kwire.protocol.records).
_MAGIC_AT = 16


@dataclass(frozen=True)
class PreparedAppend:
    """Batches with offsets assigned, ready for ``LogSegment.append``."""

    data: bytearray
    base_offset: int
    last_offset: int
    max_timestamp: int
    batch_count: int


def prepare_append(data: bytes | bytearray | memoryview, *, next_offset: int, config: LogConfig,
                   leader_epoch: int, now_ms: int, allow_control: bool = False) -> PreparedAppend:
    """Validate every batch of ``data`` and assign offsets from ``next_offset``.

    Raises (kwire.protocol.errors, so a handler can answer with the error code):
    ``CorruptMessageError`` (bad CRC/length, truncated, no batch), ``UnsupportedForMessageFormatError``
    (magic 0/1: not accepted yet), ``MessageTooLargeError`` (a batch over max.message.bytes),
    ``RecordListTooLargeError`` (all batches over segment.bytes), ``InvalidRecordError``
    (empty batch, offset deltas not 0..n-1, control batch from a client).
    """
    buf = bytearray(data)
    n = len(buf)
    if n == 0:
        raise CorruptMessageError("the produce request holds no record batch")
    batches: list[tuple[int, int, int]] = []  # (position, size, last offset delta)
    max_timestamp = -1
    pos = 0
    while pos < n:
        left = n - pos
        if left <= _MAGIC_AT:
            raise CorruptMessageError(f"{left} trailing bytes at position {pos} are not a record batch")
        magic = buf[pos + _MAGIC_AT]
        if magic in (0, 1):
            raise UnsupportedForMessageFormatError(
                f"message format v{magic} (magic {magic}) is not accepted by this broker: send record batches "
                "(magic 2, Produce v3+)")
        try:
            batch = RecordBatch(buf, pos)
            batch.validate()
        except CorruptRecordError as exc:
            raise CorruptMessageError(f"batch at position {pos}: {exc}") from None
        size = batch.size_in_bytes
        if size > config.max_message_bytes:
            raise MessageTooLargeError(f"batch at position {pos} is {size} bytes, over max.message.bytes "
                                       f"{config.max_message_bytes}")
        if batch.record_count < 1:
            raise InvalidRecordError(f"batch at position {pos} has no records")
        if batch.last_offset_delta != batch.record_count - 1:
            raise InvalidRecordError(f"batch at position {pos}: last offset delta {batch.last_offset_delta} "
                                     f"does not match {batch.record_count} records")
        if batch.is_control and not allow_control:
            raise InvalidRecordError(f"batch at position {pos} is a control batch; clients may not write those")
        batches.append((pos, size, batch.last_offset_delta))
        max_timestamp = max(max_timestamp, batch.max_timestamp)
        pos += size
    if n > config.segment_bytes:
        raise RecordListTooLargeError(f"{n} bytes of batches exceed segment.bytes {config.segment_bytes}")

    offset = next_offset
    for pos, _size, delta in batches:
        rewrite_base_offset(buf, offset, partition_leader_epoch=leader_epoch, pos=pos)
        if config.log_append_time:
            set_log_append_time(buf, now_ms, pos=pos)
        offset += delta + 1
    if config.log_append_time:
        max_timestamp = now_ms
    return PreparedAppend(buf, next_offset, offset - 1, max_timestamp, len(batches))
