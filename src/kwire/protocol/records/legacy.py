"""Legacy message sets: magic v0 and v1 (Kafka before 0.11, and old clients since).

Each entry of a message set::

    offset int64 | messageSize int32 | crc uint32 | magic int8 | attributes int8 |
    [timestamp int64, v1 only] | keyLength int32 | key | valueLength int32 | value

The CRC (plain CRC-32, zlib's) covers magic..end of the message.  A compressed message is a
"wrapper": attributes bits 0-2 name the codec and its value is a whole nested message set,
compressed.  In v1 the inner offsets are relative (0, 1, ...) and the wrapper's offset is the
absolute offset of the last inner message; in v0 inner offsets are absolute.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import CorruptRecordError, DecodeError, EncodeError
from ..primitives import INT32, INT64, UINT32
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .record import NO_TIMESTAMP, Record, TimestampType

if TYPE_CHECKING:
    from .batch_header import Data

# (offset, magic, attributes, timestamp, key, value, crc, where the entry ends)
_Message = tuple[int, int, int, int, "bytes | None", "bytes | None", int, int]

__all__ = ["LegacyRecordBatch", "LegacyMessageSetBuilder"]

_WHAT = "legacy message"

# offset, messageSize, crc, magic, attributes [, timestamp]
_HEADER_V0 = struct.Struct(">qiIbb")
_HEADER_V1 = struct.Struct(">qiIbbq")
_LOG_OVERHEAD = 12  # offset + messageSize
_MAGIC_OFFSET = 16  # where the CRC-covered bytes start
# crc, magic, attributes, [timestamp], key length, value length
_MESSAGE_OVERHEAD = (14, 22)
_TIMESTAMP_TYPE_BIT = 0x08


def _parse_message(data: Data, pos: int, end: int, what: str, path: list[str]) -> _Message:
    """Parse the message at ``pos`` (entry ends at or before ``end``).

    Returns ``(offset, magic, attributes, timestamp, key, value, crc, entry_end)``; key and
    value are bytes (or None).  Raises ``CorruptRecordError`` naming the field.
    """
    if end - pos < _LOG_OVERHEAD:
        raise CorruptRecordError(f"truncated message: {end - pos} bytes, 12 needed for offset and size",
                                 what=what, path=path, offset=pos)
    offset, size = struct.unpack_from(">qi", data, pos)
    if size < _MESSAGE_OVERHEAD[0]:
        raise CorruptRecordError(f"message size {size} is smaller than the smallest message (14)",
                                 what=what, path=[*path, "message_size"], offset=pos + 8)
    entry_end = pos + _LOG_OVERHEAD + size
    if entry_end > end:
        raise CorruptRecordError(f"message size {size} exceeds the {end - pos - _LOG_OVERHEAD} bytes left",
                                 what=what, path=[*path, "message_size"], offset=pos + 8)
    magic = data[pos + _MAGIC_OFFSET]
    if magic == 0:
        _, _, crc, _, attributes = _HEADER_V0.unpack_from(data, pos)
        timestamp = NO_TIMESTAMP
        p = pos + _HEADER_V0.size
    elif magic == 1:
        if size < _MESSAGE_OVERHEAD[1]:
            raise CorruptRecordError(f"message size {size} is smaller than the smallest v1 message (22)",
                                     what=what, path=[*path, "message_size"], offset=pos + 8)
        _, _, crc, _, attributes, timestamp = _HEADER_V1.unpack_from(data, pos)
        p = pos + _HEADER_V1.size
    else:
        raise CorruptRecordError(f"magic {magic} is not 0 or 1", what=what, path=[*path, "magic"],
                                 offset=pos + _MAGIC_OFFSET)
    fields: list[bytes | None] = []
    for field in ("key", "value"):
        if entry_end - p < 4:
            raise CorruptRecordError(f"message ends before the {field} length", what=what, path=[*path, field],
                                     offset=p)
        (n,) = INT32.unpack_from(data, p)
        p += 4
        if n < 0:  # -1 is null; like Java, any negative length reads as null
            fields.append(None)
        else:
            if n > entry_end - p:
                raise CorruptRecordError(f"{field} length {n} exceeds the {entry_end - p} bytes left in the message",
                                         what=what, path=[*path, field], offset=p - 4)
            fields.append(bytes(data[p:p + n]))
            p += n
    if p != entry_end:
        raise CorruptRecordError(f"{entry_end - p} unused bytes after the value", what=what, path=path, offset=p)
    return offset, magic, attributes, timestamp, fields[0], fields[1], crc, entry_end


class LegacyRecordBatch:
    """One top-level entry of a v0/v1 message set at ``pos`` in ``data``: a single message, or a
    compressed wrapper whose records are the nested messages.

    Offers the same reading interface as ``RecordBatch`` (``records()``, iteration,
    ``validate()``, ``last_offset``...).
    """

    __slots__ = ("_data", "_pos", "_end", "offset", "magic", "attributes", "timestamp", "key", "value", "crc",
                 "max_decompressed_size")

    is_control = False
    is_transactional = False
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    crc: int

    def __init__(self, data: Data, pos: int = 0, *,
                 max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> None:
        if pos < 0 or len(data) - pos < _LOG_OVERHEAD + 5:
            raise CorruptRecordError("truncated message header", what=_WHAT, offset=pos)
        (self.offset, self.magic, self.attributes, self.timestamp, self.key, self.value, self.crc,
         self._end) = _parse_message(data, pos, len(data), _WHAT, [])
        self._data = data
        self._pos = pos
        self.max_decompressed_size = max_decompressed_size

    @property
    def size_in_bytes(self) -> int:
        return self._end - self._pos

    @property
    def compression(self) -> Compression:
        codec = self.attributes & 0x07
        if codec > 3:
            raise CorruptRecordError(f"compression codec {codec} is not valid in magic {self.magic}", what=_WHAT,
                                     path=["attributes"], offset=self._pos + 17)
        return Compression(codec)

    @property
    def timestamp_type(self) -> TimestampType | None:
        """None for magic 0, which has no timestamps."""
        if self.magic == 0:
            return None
        return TimestampType.LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_BIT else TimestampType.CREATE_TIME

    @property
    def last_offset(self) -> int:
        """The stored offset: for a compressed wrapper, that of its last inner message."""
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """Offset of the first record (decompresses a wrapper to find it)."""
        if not self.attributes & 0x07:
            return self.offset
        records = self.records()
        return records[0].offset if records else self.offset

    @property
    def record_count(self) -> int:
        """Number of records (decompresses a wrapper to count them)."""
        return len(self.records()) if self.attributes & 0x07 else 1

    def __repr__(self) -> str:
        return (f"LegacyRecordBatch(magic={self.magic}, offset={self.offset}, attributes={self.attributes:#x}, "
                f"size={self._end - self._pos})")

    def validate(self, deep: bool = False) -> None:
        """Check the CRC-32 (and with ``deep``, those of a wrapper's inner messages)."""
        computed = zlib.crc32(memoryview(self._data)[self._pos + _MAGIC_OFFSET:self._end])
        if computed != self.crc:
            raise CorruptRecordError(f"CRC-32 mismatch: stored {self.crc:#010x}, computed {computed:#010x}",
                                     what=_WHAT, path=["crc"], offset=self._pos + 12)
        if deep and self.attributes & 0x07:
            inner = self._inner_set()
            pos = 0
            index = 0
            what = f"{_WHAT} at byte {self._pos}, decompressed inner message set"
            while pos < len(inner):
                path = [f"inner[{index}]"]
                *_, crc, entry_end = _parse_message(inner, pos, len(inner), what, path)
                computed = zlib.crc32(memoryview(inner)[pos + _MAGIC_OFFSET:entry_end])
                if computed != crc:
                    raise CorruptRecordError(f"CRC-32 mismatch: stored {crc:#010x}, computed {computed:#010x}",
                                             what=what, path=[*path, "crc"], offset=pos + 12)
                pos = entry_end
                index += 1

    def is_valid(self) -> bool:
        try:
            self.validate()
        except CorruptRecordError:
            return False
        return True

    def _inner_set(self) -> bytes:
        codec = self.compression
        if self.value is None:
            raise CorruptRecordError("compressed wrapper message has a null value", what=_WHAT, path=["value"],
                                     offset=self._pos)
        try:
            return decompress(codec, self.value, max_size=self.max_decompressed_size)
        except DecodeError as exc:
            raise CorruptRecordError(exc.reason, what=_WHAT, path=["value"], offset=self._pos) from None

    def records(self) -> list[Record]:
        """The message itself, or a wrapper's inner messages with absolute offsets."""
        if not self.attributes & 0x07:
            return [Record(self.offset, self.timestamp, self.key, self.value, [])]
        inner = self._inner_set()
        entries: list[_Message] = []
        pos = 0
        end = len(inner)
        # Byte offsets in these errors are within the decompressed inner message set.
        what = f"{_WHAT} at byte {self._pos}, decompressed inner message set"
        while pos < end:
            path = [f"inner[{len(entries)}]"]
            parsed = _parse_message(inner, pos, end, what, path)
            if parsed[2] & 0x07:
                # Java refuses these too: only one level of compression exists.
                raise CorruptRecordError("compressed message inside a compressed wrapper", what=what,
                                         path=[*path, "attributes"], offset=pos + 17)
            entries.append(parsed)
            pos = parsed[7]
        if not entries:
            return []
        shift = 0
        if self.magic >= 1:
            # v1: inner offsets are relative; the wrapper holds the last one's absolute offset.
            # Like Java (and kafka-python), a negative base means the writer did not follow
            # that rule (producers may leave the wrapper offset at 0): keep inner offsets as-is.
            shift = max(self.offset - entries[-1][0], 0)
        append_time = self.timestamp if self.magic >= 1 and self.attributes & _TIMESTAMP_TYPE_BIT else None
        return [Record(e[0] + shift, e[3] if append_time is None else append_time, e[4], e[5], []) for e in entries]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())


class LegacyMessageSetBuilder:
    """Write a v0 or v1 message set: plain messages, or one compressed wrapper if a codec is set.

    Offsets start at ``base_offset``.  With compression, v1 inner offsets are relative and
    the wrapper carries the last absolute offset; v0 inner offsets are absolute.  LZ4 in v0
    uses the Kafka 0.8/0.9 frame header checksum old brokers expect.  zstd is refused: it
    exists only in magic 2.
    """

    __slots__ = ("magic", "compression", "base_offset", "timestamp_type", "log_append_time", "_messages",
                 "_max_ts", "_n")

    def __init__(self, magic: int, *, compression: int = Compression.NONE, base_offset: int = 0,
                 timestamp_type: int = TimestampType.CREATE_TIME, log_append_time: int | None = None) -> None:
        if magic not in (0, 1):
            raise EncodeError(f"legacy message sets have magic 0 or 1, not {magic!r}", what=_WHAT)
        if compression not in (0, 1, 2, 3):
            name = "zstd" if compression == 4 else repr(compression)
            raise EncodeError(f"compression {name} is not valid for magic {magic}", what=_WHAT)
        if timestamp_type not in (0, 1):
            raise EncodeError(f"unknown timestamp type {timestamp_type!r}", what=_WHAT)
        self.magic = magic
        self.compression = Compression(compression)
        self.base_offset = base_offset
        self.timestamp_type = TimestampType(timestamp_type)
        self.log_append_time = log_append_time
        self._messages = bytearray()
        self._max_ts = NO_TIMESTAMP
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def append(self, key: bytes | None, value: bytes | None, timestamp: int | None = None) -> int:
        """Add a message; returns its offset.  ``timestamp`` (v1 only) defaults to now (ms)."""
        index = self._n
        if self.magic and timestamp is None:
            timestamp = int(time.time() * 1000)
        offset = index if (self.compression and self.magic) else self.base_offset + index
        attributes = 0
        if self.magic and not self.compression and self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            # Plain v1 messages carry the timestamp type themselves (wrappers do, when compressed).
            attributes = _TIMESTAMP_TYPE_BIT
            if self.log_append_time is not None:
                timestamp = self.log_append_time
        try:
            message = _encode_message(offset, self.magic, attributes, timestamp, key, value)
        except (TypeError, struct.error) as exc:
            raise EncodeError(f"cannot encode message: {exc}", what=_WHAT, path=[f"messages[{index}]"]) from None
        self._messages += message
        if timestamp is not None and self.magic and timestamp > self._max_ts:  # v1 always has one
            self._max_ts = timestamp
        self._n += 1
        return self.base_offset + index

    def build(self) -> bytes:
        """The message set bytes."""
        n = self._n
        if not self.compression or not n:
            return bytes(self._messages)
        value = compress(self.compression, self._messages, legacy_lz4_checksum=self.magic == 0)
        attributes = int(self.compression)
        timestamp = self._max_ts
        if self.magic and self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= _TIMESTAMP_TYPE_BIT
            if self.log_append_time is not None:
                timestamp = self.log_append_time
        try:
            return _encode_message(self.base_offset + n - 1, self.magic, attributes, timestamp, None, value)
        except struct.error as exc:
            raise EncodeError(f"cannot encode wrapper message: {exc}", what=_WHAT) from None


def _encode_message(offset: int, magic: int, attributes: int, timestamp: int | None, key: Any, value: Any) -> bytes:
    if magic:
        head = struct.pack(">bbq", magic, attributes, timestamp)
    else:
        head = struct.pack(">bb", magic, attributes)
    body = b"".join((head,
                     b"\xff\xff\xff\xff" if key is None else INT32.pack(len(key)), b"" if key is None else key,
                     b"\xff\xff\xff\xff" if value is None else INT32.pack(len(value)), b"" if value is None else value))
    return b"".join((INT64.pack(offset), INT32.pack(len(body) + 4), UINT32.pack(zlib.crc32(body)), body))
