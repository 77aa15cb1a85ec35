"""Checking a Produce request's records and preparing them for the log (Kafka's LogValidator,
reduced to what a v2-only broker needs).  Control batches (transaction markers) are refused from
clients; the transaction coordinator's own go through here with ``allow_control``.

Two steps, so that a refused request changes nothing: ``prepare_append`` reads and checks every
batch without writing a byte; the caller runs its own checks (producer sequences), and only then
``PreparedAppend.stamp()`` writes the offsets (and LogAppendTime with its CRC).  The stamps go
into a private copy, or, when the caller hands its buffer over (``reuse_buffer``) and that
buffer is writable, into the buffer itself: a Produce request's batches are stored without
being copied in user space.  Only headers are read and CRCs checked: records are not decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

from kwire.protocol.errors import (
    CorruptMessageError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    RecordListTooLargeError,
    UnsupportedForMessageFormatError,
)
from kwire.protocol.records import MAGIC_AT, RecordBatch, rewrite_base_offset, set_log_append_time

from .batch_header import BatchHeader, header_from_fields
from .config import LONG_MAX, LogConfig
from .recompression import recompress, target_codec

__all__ = ["PreparedAppend", "prepare_append"]


@dataclass(slots=True)
class PreparedAppend:
    """Validated batches with their offsets decided, ready for ``stamp()`` and then
    ``LogSegment.append(data, ...)``."""

    data: bytearray | memoryview  # writable; holds the client's offsets until stamp()
    base_offset: int
    last_offset: int
    max_timestamp: int
    leader_epoch: int
    log_append_time_ms: int | None  # set: LogAppendTime, stamped into every batch
    # Each batch's header with its decided offsets (and, with LogAppendTime, that max timestamp):
    # the producer state and the segment take them from here instead of reading the batches again.
    headers: tuple[BatchHeader, ...]

    def stamp(self) -> None:
        """Write the offsets (and LogAppendTime) into ``data``.  Call once, after every check."""
        buf, epoch, append_time = self.data, self.leader_epoch, self.log_append_time_ms
        for header in self.headers:
            rewrite_base_offset(buf, header.base_offset, partition_leader_epoch=epoch, pos=header.position)
            if append_time is not None:
                set_log_append_time(buf, append_time, pos=header.position)


def prepare_append(data: bytes | bytearray | memoryview, *, next_offset: int, config: LogConfig,
                   leader_epoch: int, now_ms: int, allow_control: bool = False,
                   reuse_buffer: bool = False, partition: str = "") -> PreparedAppend:
    """Validate every batch of ``data`` and assign offsets from ``next_offset`` (written by
    ``stamp()``, not here: ``data`` is only read).

    ``reuse_buffer``: the caller gives ``data`` up, so a writable one (bytearray, writable
    memoryview) is stamped in place; otherwise, or when it is read-only (bytes), the stamps go
    into a copy.

    Raises (kwire.protocol.errors, so a handler can answer with the error code):
    ``CorruptMessageError`` (bad CRC/length, truncated, no batch), ``UnsupportedForMessageFormatError``
    (magic 0/1: not accepted yet), ``MessageTooLargeError`` (a batch over max.message.bytes),
    ``RecordListTooLargeError`` (all batches over segment.bytes), ``InvalidRecordError``
    (empty batch, offset deltas not 0..n-1, control batch from a client, a record without a
    key for a compacted log: ``partition`` names it in the message).
    """
    n = len(data)
    if n == 0:
        raise CorruptMessageError("the produce request holds no record batch")
    append_time = now_ms if config.log_append_time else None
    # Only a compacted log decodes records (to see their keys); the others read headers only.
    compacted = config.compact
    max_message_bytes = config.max_message_bytes
    headers: list[BatchHeader] = []
    max_timestamp = -1
    offset = next_offset
    pos = 0
    while pos < n:
        left = n - pos
        if left <= MAGIC_AT:  # where every batch format keeps its magic byte
            raise CorruptMessageError(f"{left} trailing bytes at position {pos} are not a record batch")
        magic = data[pos + MAGIC_AT]
        if magic in (0, 1):
            raise UnsupportedForMessageFormatError(
                f"message format v{magic} (magic {magic}) is not accepted by this broker: send record batches "
                "(magic 2, Produce v3+)")
        try:
            batch = RecordBatch(data, pos)
            batch.validate()
        except CorruptRecordError as exc:
            raise CorruptMessageError(f"batch at position {pos}: {exc}") from None
        header = header_from_fields(batch.header_fields, pos, offset)
        size, count = header.size, batch.record_count
        if size > max_message_bytes:
            raise MessageTooLargeError(f"batch at position {pos} is {size} bytes, over max.message.bytes "
                                       f"{max_message_bytes}")
        if count < 1:
            raise InvalidRecordError(f"batch at position {pos} has no records")
        if header.last_offset - offset != count - 1:
            raise InvalidRecordError(f"batch at position {pos}: last offset delta {header.last_offset - offset} "
                                     f"does not match {count} records")
        if header.is_control and not allow_control:
            raise InvalidRecordError(f"batch at position {pos} is a control batch; clients may not write those")
        if compacted and not header.is_control:
            _check_keys(batch, pos, partition)
        if append_time is None and not header.is_control:
            _check_timestamps(batch, header.max_timestamp, pos, now_ms, config)
        if append_time is not None:
            header = header._replace(max_timestamp=append_time)
        headers.append(header)
        if header.max_timestamp > max_timestamp:
            max_timestamp = header.max_timestamp
        offset = header.last_offset + 1
        pos += size
    if n > config.segment_bytes:
        raise RecordListTooLargeError(f"{n} bytes of batches exceed segment.bytes {config.segment_bytes}")

    codec = target_codec(config.compression_type)
    if codec is not None:  # compression.type names a codec: batches in another one are rebuilt in it
        rebuilt = recompress(data, headers, codec, max_message_bytes=max_message_bytes,
                             level=config.compression_level(config.compression_type))
        if rebuilt is not None:
            (data, headers), reuse_buffer = rebuilt, True
    if reuse_buffer and isinstance(data, (bytearray, memoryview)) and not memoryview(data).readonly:
        buf: bytearray | memoryview = data
    else:
        buf = bytearray(data)  # bytes are immutable, and a caller's buffer stays as it was
    return PreparedAppend(buf, next_offset, offset - 1, max_timestamp, leader_epoch, append_time, tuple(headers))


def _check_timestamps(batch: RecordBatch, max_timestamp: int, pos: int, now_ms: int, config: LogConfig) -> None:
    """Kafka's LogValidator.validateTimestamp for CreateTime: a record timestamp more than
    message.timestamp.after.max.ms ahead of the broker's clock, or more than
    message.timestamp.before.max.ms behind it, is INVALID_TIMESTAMP (-1, no timestamp, passes).

    Kafka checks every record.  Ahead is checked here on the batch's max timestamp, which bounds
    every record's from above, so the usual path decodes nothing; behind needs each record, so
    records are decoded only when that bound is set (Kafka's default has none)."""
    after, before = config.message_timestamp_after_max_ms, config.message_timestamp_before_max_ms
    if max_timestamp != -1 and max_timestamp - now_ms > after:
        raise InvalidTimestampError(
            f"batch at position {pos}: timestamp {max_timestamp} is out of range: it must be within "
            f"[{now_ms - before if before < LONG_MAX else '...'}, {now_ms + after}] "
            f"(message.timestamp.after.max.ms {after})")
    if before >= LONG_MAX:
        return
    try:
        records = batch.records()
    except CorruptRecordError as exc:
        raise CorruptMessageError(f"batch at position {pos}: {exc}") from None
    for record in records:
        if record.timestamp != -1 and now_ms - record.timestamp > before:
            raise InvalidTimestampError(
                f"batch at position {pos}: timestamp {record.timestamp} of the record at offset delta "
                f"{record.offset - batch.base_offset} is out of range: it must be within [{now_ms - before}, "
                f"{now_ms + after}] (message.timestamp.before.max.ms {before})")


def _check_keys(batch: RecordBatch, pos: int, partition: str) -> None:
    """Kafka's LogValidator: a compacted topic refuses a record without a key (the cleaner
    could never keep or remove it by key), the whole batch with it."""
    try:
        records = batch.records()
    except CorruptRecordError as exc:
        raise CorruptMessageError(f"batch at position {pos}: {exc}") from None
    for record in records:
        if record.key is None:
            raise InvalidRecordError(f"Compacted topic cannot accept message without key in topic partition "
                                     f"{partition} (record at offset delta {record.offset - batch.base_offset} of the "
                                     f"batch at position {pos})")
