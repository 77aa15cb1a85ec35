"""What the log keeps of a v2 batch header, read once per append.

An append reads each batch header when it validates the batch (``validation.prepare_append``);
the producer state (sequences, transactions) and the segment (indexes, max timestamp) then take
the fields from that one reading instead of walking the batches again.  Loading reads stored
headers the same way (``read_header``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from kwire.protocol.records import batch_header as v2

__all__ = ["BatchHeader", "header_from_fields", "iter_headers", "read_header"]


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


def header_from_fields(fields: v2.RecordBatchHeader, position: int, base_offset: int | None = None) -> BatchHeader:
    """A ``BatchHeader`` from the protocol's view of the v2 header (``RecordBatchHeader``, as
    ``RecordBatch.header_fields`` gives it) of the batch at ``position``.  ``base_offset``
    replaces the one in the header (offsets decided but not yet written)."""
    # Unpacked rather than read by name: one step on every append's hot path.
    (base, length, _epoch, _magic, _crc, attributes, delta, _base_ts, max_ts,
     producer_id, producer_epoch, base_seq, _count) = fields
    if base_offset is not None:
        base = base_offset
    return BatchHeader(base, base + delta, length + v2.LOG_OVERHEAD, producer_id, producer_epoch, base_seq,
                       v2.last_sequence(base_seq, delta), bool(attributes & v2.TRANSACTIONAL_BIT),
                       bool(attributes & v2.CONTROL_BIT), position, max_ts)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0, *, base_offset: int | None = None) -> BatchHeader:
    """Parse the v2 header at ``pos`` (the caller has validated the batch)."""
    return header_from_fields(v2.read_header(buf, pos), pos, base_offset)


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
