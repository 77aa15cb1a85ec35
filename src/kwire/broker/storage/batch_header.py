"""What the log keeps of a v2 batch header, read once per append.

An append reads each batch header when it validates the batch (``validation.prepare_append``);
the producer state (sequences, transactions) and the segment (indexes, max timestamp) then take
the fields from that one reading instead of walking the batches again.  Loading reads stored
headers the same way (``read_header``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from kwire.protocol.records import HEADER_STRUCT

from .index import INT32_MAX

__all__ = ["BatchHeader", "header_from_fields", "iter_headers", "read_header"]

_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


class BatchHeader(NamedTuple):
    """One batch of an append or of the log, as the producer state and the segment need it."""

    base_offset: int
    last_offset: int
    size: int  # of the whole batch, header included
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool
    is_control: bool
    position: int = 0  # where the batch starts in the buffer it was read from
    max_timestamp: int = -1


def header_from_fields(fields: tuple, position: int, base_offset: int | None = None) -> BatchHeader:
    """A ``BatchHeader`` from the unpacked v2 header fields (``HEADER_STRUCT``, in layout order:
    base offset, length, leader epoch, magic, crc, attributes, last offset delta, base/max
    timestamp, producer id/epoch, base sequence, record count) of the batch at ``position``.
    ``base_offset`` replaces the one in the header (offsets decided but not yet written)."""
    (base, length, _epoch, _magic, _crc, attributes, delta, _base_ts, max_ts,
     producer_id, producer_epoch, base_seq, _count) = fields
    if base_offset is not None:
        base = base_offset
    # Sequences wrap at int32 max like Kafka's (a batch may run from near max through 0).
    last_seq = -1 if base_seq < 0 else (base_seq + delta) if base_seq <= INT32_MAX - delta \
        else delta - (INT32_MAX - base_seq) - 1
    return BatchHeader(base, base + delta, length + 12, producer_id, producer_epoch, base_seq, last_seq,
                       bool(attributes & _TRANSACTIONAL_BIT), bool(attributes & _CONTROL_BIT), position, max_ts)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0, *, base_offset: int | None = None) -> BatchHeader:
    """Parse the v2 header at ``pos`` (the caller has validated the batch)."""
    return header_from_fields(HEADER_STRUCT.unpack_from(buf, pos), pos, base_offset)


def iter_headers(data: bytes | bytearray | memoryview, *, first_offset: int | None = None) -> Iterator[BatchHeader]:
    """Headers of consecutive, already validated batches.  With ``first_offset``, the batches
    are taken to hold consecutive offsets from it, whatever their headers say."""
    pos, end = 0, len(data)
    while pos < end:
        header = read_header(data, pos, base_offset=first_offset)
        yield header
        pos += header.size
        if first_offset is not None:
            first_offset = header.last_offset + 1
