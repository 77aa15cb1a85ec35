"""Kafka's records layer: record batches (magic 2), legacy message sets (magic 0/1), codecs.

Reading a ``records`` field of a Produce request or Fetch response::

    for batch in iter_batches(data):          # RecordBatch or LegacyRecordBatch
        batch.validate()                      # optional CRC check
        for record in batch:                  # Record(offset, timestamp, key, value, headers)
            ...

    for record in iter_records(data): ...     # every data record of every batch

The v2 header on its own (no validation; the broker's storage reads and stamps it)::

    header = read_header(buf, pos)            # RecordBatchHeader: fields, last_offset, is_control...
    rewrite_base_offset(buf, offset, partition_leader_epoch=epoch, pos=pos)
    set_log_append_time(buf, now_ms, pos=pos) # and the CRC it covers

Where every field of a batch's records lies, for readers that build columns rather than a
``Record`` per record (``walk.scan_records``: compiled when ``_layout`` is built, else Python)::

    buf, start, end, _ = batch.records_section()
    walk.scan_records(buf, start, end, batch.record_count, out, 0)   # out: int64 (9, N)

Writing::

    builder = RecordBatchBuilder(compression=Compression.LZ4)
    builder.append(b"key", b"value", timestamp_ms)
    data = builder.build()

All decoding errors are ``kwire.protocol.errors.DecodeError`` subclasses (mostly
``CorruptRecordError``) that name the field and byte offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from ..primitives import INT32
from ..splice import SplicedBytes
from .batch import RecordBatch, RecordBatchBuilder, build_control_batch
from .batch_header import (
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_AT,
    RecordBatchHeader,
    read_header,
    rewrite_base_offset,
    set_log_append_time,
    write_crc,
)
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .legacy import LegacyMessageSetBuilder, LegacyRecordBatch
from .record import NO_TIMESTAMP, ControlRecord, ControlRecordType, Record, TimestampType

if TYPE_CHECKING:
    from .batch_header import Data

__all__ = [
    "Compression",
    "ControlRecord",
    "ControlRecordType",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "DELETE_HORIZON_BIT",
    "HEADER_SIZE",
    "HEADER_STRUCT",
    "LOG_OVERHEAD",
    "LegacyMessageSetBuilder",
    "MAGIC_AT",
    "LegacyRecordBatch",
    "NO_TIMESTAMP",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordBatchHeader",
    "TimestampType",
    "build_control_batch",
    "compress",
    "decompress",
    "iter_batches",
    "iter_records",
    "read_batch",
    "read_header",
    "rewrite_base_offset",
    "set_log_append_time",
    "write_crc",
]

# Every format starts with offset int64, size int32; the magic byte is at 16 in all three
# (after the v2 partition leader epoch, or the v0/v1 message CRC).
_LOG_OVERHEAD = LOG_OVERHEAD
_MAGIC_OFFSET = MAGIC_AT
# Java's ByteBufferLogInputStream refuses entries smaller than a v0 message overhead.
_MIN_ENTRY_SIZE = 14


def read_batch(data: Data, pos: int = 0, *,
               max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> RecordBatch | LegacyRecordBatch:
    """The batch (v2) or legacy message (v0/v1) at ``pos``, chosen by its magic byte."""
    if len(data) - pos < _MAGIC_OFFSET + 1:
        raise CorruptRecordError("truncated batch: no magic byte", what="records", offset=pos)
    magic = data[pos + _MAGIC_OFFSET]
    if magic == 2:
        return RecordBatch(data, pos, max_decompressed_size=max_decompressed_size)
    if magic in (0, 1):
        return LegacyRecordBatch(data, pos, max_decompressed_size=max_decompressed_size)
    raise CorruptRecordError(f"unknown magic {magic}", what="records", path=["magic"], offset=pos + _MAGIC_OFFSET)


def iter_batches(data: Data | SplicedBytes, *, max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
                 ) -> Iterator[RecordBatch | LegacyRecordBatch]:
    """Yield each batch of a records blob (any mix of magic 0, 1 and 2) in order.

    A truncated batch at the end is skipped silently: Fetch responses routinely end with a
    partial batch cut at the fetch size.  Anything else malformed raises ``CorruptRecordError``.
    Batches are lazy views over ``data``; nothing is decoded until you iterate one.
    """
    if isinstance(data, SplicedBytes):  # a message's records field as built for sending
        data = data.read()
    if not isinstance(data, (bytes, bytearray)):
        data = memoryview(data).cast("B")
    end = len(data)
    pos = 0
    unpack_int32 = INT32.unpack_from
    while end - pos >= _LOG_OVERHEAD:
        (size,) = unpack_int32(data, pos + 8)
        if size < _MIN_ENTRY_SIZE:
            raise CorruptRecordError(f"batch size {size} is smaller than the smallest message ({_MIN_ENTRY_SIZE})",
                                     what="records", path=["batch_length"], offset=pos + 8)
        if size > end - pos - _LOG_OVERHEAD:
            return  # trailing partial batch
        magic = data[pos + _MAGIC_OFFSET]
        if magic == 2:
            yield RecordBatch(data, pos, max_decompressed_size=max_decompressed_size)
        elif magic in (0, 1):
            yield LegacyRecordBatch(data, pos, max_decompressed_size=max_decompressed_size)
        else:
            raise CorruptRecordError(f"unknown magic {magic}", what="records", path=["magic"],
                                     offset=pos + _MAGIC_OFFSET)
        pos += _LOG_OVERHEAD + size


def iter_records(data: Data, *, include_control: bool = False,
                 max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> Iterator[Record]:
    """Yield every record of every batch in a records blob.

    Control batches (transaction markers) are skipped unless ``include_control``, as a Kafka
    consumer does.  CRCs are not checked; call ``validate()`` on batches for that.
    """
    for batch in iter_batches(data, max_decompressed_size=max_decompressed_size):
        if batch.is_control and not include_control:
            continue
        yield from batch.records()
