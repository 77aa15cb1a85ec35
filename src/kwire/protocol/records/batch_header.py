"""The v2 record batch header: where its fields lie, one view to read them, and the writes a
broker makes to it.  The one place outside the C accelerator that knows these byte offsets.

Layout (Kafka's DefaultRecordBatch, all big-endian)::

    at  0 baseOffset int64 | at  8 batchLength int32 | at 12 partitionLeaderEpoch int32 |
    at 16 magic int8 | at 17 crc uint32 | at 21 attributes int16 | at 23 lastOffsetDelta int32 |
    at 27 baseTimestamp int64 | at 35 maxTimestamp int64 | at 43 producerId int64 |
    at 51 producerEpoch int16 | at 53 baseSequence int32 | at 57 recordCount int32 | at 61 records

batchLength counts the bytes after itself.  The CRC-32C covers attributes..end, so a broker
assigns baseOffset and partitionLeaderEpoch without recomputing it, but must recompute it after
setting LogAppendTime (attributes and maxTimestamp are covered).  Every message format (magic 0,
1 and 2) starts with offset int64, size int32 and has its magic byte at 16.

Reading: ``read_header(buf, pos)`` gives a ``RecordBatchHeader`` (a tuple of the thirteen fields
in layout order, with names and the derived values); hot loops that need one field read it with
the ``read_*`` functions and ``batch_size``.  Building: ``build_batch`` puts a header (its length
and CRC computed) before a records section.  Nothing here validates a batch: ``RecordBatch`` does (length, magic,
CRC), on top of this view.  Writing: ``rewrite_base_offset``, ``set_log_append_time``,
``write_crc``.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from mmap import mmap
    from typing import TypeAlias

    # What a batch is read from (a Fetch answer, a segment's bytes or its mapping), and the
    # writable ones the broker's in-place writes take.
    Data: TypeAlias = bytes | bytearray | memoryview | mmap
    Writable: TypeAlias = bytearray | memoryview | mmap

from ..errors import CorruptRecordError, EncodeError
from .crc import crc32c

__all__ = [
    "ATTRIBUTES_AT",
    "COMPRESSION_MASK",
    "CONTROL_BIT",
    "CRC_AT",
    "DELETE_HORIZON_BIT",
    "HEADER_SIZE",
    "HEADER_STRUCT",
    "LAST_OFFSET_DELTA_AT",
    "LENGTH_AT",
    "LOG_OVERHEAD",
    "MAGIC_AT",
    "MAX_TIMESTAMP_AT",
    "MIN_BATCH_LENGTH",
    "RECORD_COUNT_AT",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "RecordBatchHeader",
    "compute_crc",
    "last_sequence",
    "read_attributes",
    "read_last_offset_delta",
    "read_max_timestamp",
    "read_prefix",
    "read_producer",
    "read_header",
    "rewrite_base_offset",
    "set_log_append_time",
    "write_crc",
]

_WHAT = "record batch v2"

# One struct for the whole fixed header: a single unpack/pack instead of thirteen.
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER_STRUCT.size  # 61
#: baseOffset and batchLength (or a legacy message's offset and size): what every format starts with.
LOG_OVERHEAD = 12
#: The smallest valid batchLength: the header's bytes after the length field.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21  # start of the CRC-covered bytes
LAST_OFFSET_DELTA_AT = 23
MAX_TIMESTAMP_AT = 35
PRODUCER_AT = 43  # producer id int64, then producer epoch int16
RECORD_COUNT_AT = 57

# Attributes bits (Kafka's DefaultRecordBatch).
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
# KIP-534: a log cleaner that keeps tombstones or transaction markers sets this attributes bit
# and stores the time they may be removed (the delete horizon) as the batch's base timestamp.
DELETE_HORIZON_BIT = 0x40

_INT32_MAX = 0x7FFFFFFF
_PREFIX = struct.Struct(">qi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_PRODUCER = struct.Struct(">qh")


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Sequence of a batch's last record, or -1 for a batch without sequences.  Sequences wrap
    at int32 max like Kafka's (a batch may run from near max through 0)."""
    if base_sequence < 0:
        return -1
    if base_sequence > _INT32_MAX - last_offset_delta:
        return last_offset_delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


# A tuple, so that a reader creates it with one C-level ``tuple.__new__`` and indexes it as fast
# as the plain tuple ``struct`` returns.
class RecordBatchHeader(NamedTuple):
    """The thirteen fields of a v2 batch header, in layout order, as stored."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self[1] + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self[0] + self[6]

    @property
    def next_offset(self) -> int:
        return self[0] + self[6] + 1

    @property
    def compression_codec(self) -> int:
        """The attributes' codec number (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd; others invalid)."""
        return self[5] & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self[5] & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self[5] & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self[5] & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self[5] & DELETE_HORIZON_BIT)

    @property
    def last_sequence(self) -> int:
        return last_sequence(self[11], self[6])


_new = tuple.__new__
_unpack_header = HEADER_STRUCT.unpack_from


def read_header(buf: Data, pos: int = 0) -> RecordBatchHeader:
    """The header of the v2 batch at ``pos``, as stored (nothing is checked; ``struct.error``
    if fewer than 61 bytes are there)."""
    return _new(RecordBatchHeader, _unpack_header(buf, pos))


#: ``read_prefix(buf, pos=0)``: (base offset, batch length) of the batch at ``pos``, the two
#: fields every format starts with.  The struct's own method: walks over many batches call it
#: once a batch, with no Python frame.
read_prefix = _PREFIX.unpack_from


def batch_size(buf: Data, pos: int = 0) -> int:
    """Bytes of the whole batch at ``pos`` (any magic: offset and size lead every format), from
    its length prefix alone."""
    length: int = _PREFIX.unpack_from(buf, pos)[1]
    return length + LOG_OVERHEAD


def build_batch(header: RecordBatchHeader, records: Data) -> bytearray:
    """A whole v2 batch: ``header``'s fields and the records section ``records`` after it.  The
    header's batch_length and crc are not used: they are computed from ``records``."""
    out = bytearray(HEADER_STRUCT.pack(header[0], HEADER_SIZE - LOG_OVERHEAD + len(records), header[2], header[3], 0,
                                       *header[5:]))
    out += records
    _UINT32.pack_into(out, CRC_AT, crc32c(memoryview(out)[ATTRIBUTES_AT:]))
    return out


def read_last_offset_delta(buf: Data, pos: int = 0) -> int:
    delta: int = _INT32.unpack_from(buf, pos + LAST_OFFSET_DELTA_AT)[0]
    return delta


def read_max_timestamp(buf: Data, pos: int = 0) -> int:
    timestamp: int = _INT64.unpack_from(buf, pos + MAX_TIMESTAMP_AT)[0]
    return timestamp


def read_attributes(buf: Data, pos: int = 0) -> int:
    attributes: int = _INT16.unpack_from(buf, pos + ATTRIBUTES_AT)[0]
    return attributes


def read_producer(buf: Data, pos: int = 0) -> tuple[int, int]:
    """(producer id, producer epoch) of the batch at ``pos``."""
    return _PRODUCER.unpack_from(buf, pos + PRODUCER_AT)


def compute_crc(buf: Data, pos: int = 0, end: int | None = None) -> int:
    """The CRC-32C the batch at ``pos`` should hold: over attributes..end (``end`` defaults to
    where its batchLength says the batch ends)."""
    if end is None:
        end = pos + LOG_OVERHEAD + _INT32.unpack_from(buf, pos + LENGTH_AT)[0]
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_AT:end])


def _check_v2(buf: Data, pos: int) -> None:
    if len(buf) - pos < HEADER_SIZE or buf[pos + MAGIC_AT] != 2:
        raise CorruptRecordError("not a v2 record batch", what=_WHAT, offset=pos)


def write_crc(buf: Writable, pos: int = 0) -> None:
    """Recompute and store the CRC of the v2 batch at ``pos`` in a writable buffer, after a
    change to CRC-covered bytes."""
    _check_v2(buf, pos)
    end = pos + LOG_OVERHEAD + _INT32.unpack_from(buf, pos + LENGTH_AT)[0]
    if end > len(buf):
        raise CorruptRecordError("batch length runs past the buffer", what=_WHAT, offset=pos + LENGTH_AT)
    _UINT32.pack_into(buf, pos + CRC_AT, crc32c(memoryview(buf)[pos + ATTRIBUTES_AT:end]))


def rewrite_base_offset(buf: Data, base_offset: int, *, partition_leader_epoch: int | None = None, pos: int = 0) -> None:
    """Set the base offset (and optionally partition leader epoch) of the v2 batch at ``pos`` in
    a writable buffer, without decoding records or touching the CRC (which does not cover them)."""
    _check_v2(buf, pos)
    try:
        _INT64.pack_into(buf, pos, base_offset)
        if partition_leader_epoch is not None:
            _INT32.pack_into(buf, pos + LEADER_EPOCH_AT, partition_leader_epoch)
    except TypeError:
        raise TypeError("rewriting a batch in place needs a writable buffer (bytearray or writable memoryview)") \
            from None
    except struct.error as exc:
        raise EncodeError(f"cannot store base offset/leader epoch: {exc}", what=_WHAT) from None


def set_log_append_time(buf: Writable, timestamp: int, *, pos: int = 0) -> None:
    """Mark the v2 batch at ``pos`` in a writable buffer as LogAppendTime with max timestamp
    ``timestamp``, as a broker does on append (Kafka's LogValidator).  Both fields are
    CRC-covered (unlike the base offset), so the CRC is recomputed; records are not decoded."""
    _check_v2(buf, pos)
    end = pos + LOG_OVERHEAD + _INT32.unpack_from(buf, pos + LENGTH_AT)[0]
    if end > len(buf):
        raise CorruptRecordError("batch length runs past the buffer", what=_WHAT, offset=pos + LENGTH_AT)
    buf[pos + ATTRIBUTES_AT + 1] |= TIMESTAMP_TYPE_BIT  # low byte of the int16 attributes
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_AT, timestamp)
    _UINT32.pack_into(buf, pos + CRC_AT, crc32c(memoryview(buf)[pos + ATTRIBUTES_AT:end]))
