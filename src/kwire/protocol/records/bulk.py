"""Many records into v2 record batches at once: the producer's bulk path (``produce_many``).

``RecordBatchBuilder`` takes records one call (or one tuple) each, which costs a few
microseconds a record in Python.  Here the records are columns (a list of values, a list of keys
or one key for all, one set of headers for all) and ``encode_records`` writes a run of them as
the records section of a batch in one call; ``seal_batch`` puts the v2 header (with its CRC-32C)
in front of one or more such sections.  Every record of one call has the same timestamp delta
and consecutive offset deltas, which is what a producer gives records handed over together.

The work is done by the optional compiled helper (``_layout.encode_v2``, about 30 ns a 100 B
record) when it is built, else by ``encode_records_py`` here, which writes the same bytes (the
tests compare them, and both with ``RecordBatchBuilder``).

Layout of a record (Kafka's DefaultRecord): length varint, attributes int8, timestampDelta
varlong, offsetDelta varint, keyLength varint, key, valueLength varint, value, headerCount
varint, headers; varints zigzag-encoded, a null key or value has length -1.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..errors import EncodeError
from ..primitives import UINT32
from ..splice import SplicedBytes
from . import HEADER_SIZE, HEADER_STRUCT, Compression, compress
from .crc import crc32c

try:
    from . import _layout

    _encode_v2 = getattr(_layout, "encode_v2", None)  # None: a build older than the bulk path
    _murmur2_partitions = getattr(_layout, "murmur2_partitions", None)
    _encode_v2_spans = getattr(_layout, "encode_v2_spans", None)  # None: a build older than DelimitedValues
    _delimited_starts = getattr(_layout, "delimited_starts", None)
except ImportError:  # not built (no compiler): the Python versions below
    _encode_v2 = _murmur2_partitions = _encode_v2_spans = _delimited_starts = None

__all__ = ["DelimitedValues", "SealedBatch", "compiled", "delimited_values", "encode_headers", "encode_records",
           "encode_records_py", "murmur2_partitions", "seal_batch", "seal_batch_parts"]


class DelimitedValues(Sequence[bytes]):
    """The values of records that each end with a delimiter, left where they are in one buffer:
    ``kwire produce``'s input (a megabyte read at a time) as a bulk call's values column.

    A list of ``bytes`` costs an object per record (~100-170 ns each, more than encoding the
    record); here ``encode_records`` reads each value from the buffer (``_layout.encode_v2_spans``)
    and no per-record object is made.  Indexing gives a value as ``bytes`` (the Python paths: the
    encoder's fallback, a partitioner that looks at values, the asyncio producer's ``list()``).
    Made by ``delimited_values``; the buffer must not change while the values are in use.
    """

    __slots__ = ("data", "gap", "starts")

    def __init__(self, data: bytes | bytearray, starts: bytes, gap: int) -> None:
        self.data = data      # the records, each followed by the delimiter
        self.starts = starts  # native int64s: where each record starts, then the end of the last delimiter
        self.gap = gap        # the delimiter's length

    def __len__(self) -> int:
        return len(self.starts) // 8 - 1

    def _span(self, i: int) -> bytes:
        at, end = _INT64_PAIR.unpack_from(self.starts, i * 8)
        return bytes(self.data[at:end - self.gap])

    def __getitem__(self, index: Any) -> Any:
        count = len(self)
        if isinstance(index, slice):
            return [self._span(i) for i in range(*index.indices(count))]
        i = index + count if index < 0 else index
        if not 0 <= i < count:
            raise IndexError("record index out of range")
        return self._span(i)

    def __iter__(self) -> Iterator[bytes]:
        return (self._span(i) for i in range(len(self)))


_INT64_PAIR = struct.Struct("=qq")
_INT64 = struct.Struct("=q")


def delimited_values(data: bytes | bytearray, size: int, delimiter: bytes) -> tuple[Sequence[bytes], int]:
    """The records of ``data[:size]`` that end with ``delimiter`` (found from the left, as
    ``bytes.split`` finds them), and where the rest (a record not yet ended) starts: the values
    as a ``DelimitedValues`` where the compiled helper is built, else as a list."""
    if _delimited_starts is None or _encode_v2_spans is None:
        *records, rest = bytes(data[:size]).split(delimiter)
        return records, size - len(rest)
    starts = _delimited_starts(data, size, delimiter)
    return DelimitedValues(data, starts, len(delimiter)), _INT64.unpack_from(starts, len(starts) - 8)[0]

# Kafka's DefaultRecordBatch attributes: the codec in bits 0-2, bit 4 a transactional batch.
_TRANSACTIONAL_BIT = 0x10
_CRC_AT = 17         # the CRC field; it covers the bytes from the attributes (at 21) to the end
_ATTRIBUTES_AT = 21
_MIN_BATCH_LENGTH = HEADER_SIZE - 12  # batchLength counts the bytes after itself


def compiled() -> bool:
    """Whether the compiled encoder is in use."""
    return _encode_v2 is not None


def _zigzag(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def encode_headers(headers: Iterable[tuple[str | bytes, bytes | None]] | None) -> bytes:
    """The header count and headers every record of a run carries (``b"\\x00"``: none)."""
    items = list(headers or ())
    parts = [_zigzag(len(items))]
    for name, value in items:
        name = name.encode("utf-8") if isinstance(name, str) else bytes(name)
        parts += (_zigzag(len(name)), name)
        parts += (b"\x01",) if value is None else (_zigzag(len(value)), bytes(value))
    return b"".join(parts)


def encode_records_py(values: Sequence[bytes | None], keys: Sequence[bytes | None] | bytes | None, headers: bytes,
                      start: int, stop: int, first_delta: int, ts_delta: int, max_bytes: int, max_count: int,
                      max_record: int) -> tuple[bytes, int]:
    """``encode_records`` in Python (the same bytes, the same stopping rule)."""
    if not 0 <= start <= stop <= len(values):
        raise ValueError(f"records {start}..{stop} of {len(values)}")
    key_list: Sequence[bytes | None] | None = None
    single: bytes | None = None
    if isinstance(keys, (list, tuple)):
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        key_list = keys
    elif keys is None or type(keys) is bytes:
        single = keys
    else:
        raise TypeError(f"key 0 is {type(keys).__name__}, not bytes or None")
    parts: list[bytes] = []
    total = 0
    ts = _zigzag(ts_delta)
    i = start
    delta = first_delta
    while i < stop and i - start < max_count:
        value = values[i]
        key = single if key_list is None else key_list[i]
        for what, item in (("value", value), ("key", key)):
            if item is not None and type(item) is not bytes:
                raise TypeError(f"{what} {i} is {type(item).__name__}, not bytes or None")
        body = b"".join((b"\x00", ts, _zigzag(delta),
                         b"\x01" if key is None else _zigzag(len(key)), key or b"",
                         b"\x01" if value is None else _zigzag(len(value)), value or b"", headers))
        record = _zigzag(len(body)) + body
        if len(record) > max_record or (total + len(record) > max_bytes and not (i == start and first_delta == 0)):
            break
        parts.append(record)
        total += len(record)
        i += 1
        delta += 1
    return b"".join(parts), i


def encode_records(values: Sequence[bytes | None], keys: Sequence[bytes | None] | bytes | None, headers: bytes,
                   start: int, stop: int, first_delta: int, ts_delta: int, max_bytes: int, max_count: int,
                   max_record: int) -> tuple[bytes, int]:
    """Records ``values[start:stop]`` as v2 records one after the other; ``(bytes, next)``.

    ``values``: a list or tuple of bytes or None (a null value); ``keys``: a list or tuple of the
    same length, or one key (bytes or None) for every record; ``headers``: ``encode_headers``'s
    bytes, carried by every record.  Offset deltas count from ``first_delta``; every timestamp
    delta is ``ts_delta``.  It stops before the record that would take the bytes past
    ``max_bytes`` (the first record goes in anyway when ``first_delta`` is 0: a record larger
    than a batch goes alone), after ``max_count`` records, and before a record whose encoding
    is larger than ``max_record``.  ``next`` is the index of the first record not taken.
    ``TypeError`` names the first key or value that is not bytes or None.
    """
    if type(values) is DelimitedValues:  # (made only where _encode_v2_spans is built)
        spans: tuple[bytes, int] = _encode_v2_spans(values.data, values.starts, values.gap, keys,  # type: ignore[misc]
                                                    headers, start, stop, first_delta, ts_delta, max_bytes, max_count,
                                                    max_record)
        return spans
    if _encode_v2 is not None:
        encoded: tuple[bytes, int] = _encode_v2(values, keys, headers, start, stop, first_delta, ts_delta, max_bytes,
                                                max_count, max_record)
        return encoded
    return encode_records_py(values, keys, headers, start, stop, first_delta, ts_delta, max_bytes, max_count,
                             max_record)


class SealedBatch(SplicedBytes):
    """A sealed v2 batch left in its pieces (the header around its CRC, then the record
    sections): a transport that gather-writes (``kwire produce``'s ``socket.sendmsg``) sends them
    by reference instead of a joined copy of every record byte (~0.5-0.7 ms a megabyte, most of
    it the fresh pages of the copy).  ``read()`` joins them, for every other reader."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts
        self.size = sum(map(len, parts))

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        return b"".join(self.parts)

    def pieces(self) -> list[bytes]:
        return self.parts


def seal_batch(sections: Sequence[bytes], count: int, base_timestamp: int, max_timestamp: int, *,
               compression: int = Compression.NONE, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, transactional: bool = False) -> bytes:
    """A v2 batch of ``count`` records whose encodings are ``sections`` (joined in order; their
    offset deltas 0..count-1), compressed with ``compression``, with its header and CRC-32C.
    Base offset 0 and partition leader epoch -1: the broker sets them."""
    return seal_batch_parts(sections, count, base_timestamp, max_timestamp, compression=compression,
                            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                            transactional=transactional).read()


def seal_batch_parts(sections: Sequence[bytes], count: int, base_timestamp: int, max_timestamp: int, *,
                     compression: int = Compression.NONE, producer_id: int = -1, producer_epoch: int = -1,
                     base_sequence: int = -1, transactional: bool = False) -> SealedBatch:
    """``seal_batch``'s batch in its pieces (``SealedBatch``): the same bytes, not joined."""
    if count < 1:
        raise EncodeError("a batch of the bulk path has at least one record", what="record batch v2")
    if compression:
        sections = [compress(compression, sections[0] if len(sections) == 1 else b"".join(sections))]
    attributes = compression | (_TRANSACTIONAL_BIT if transactional else 0)
    try:
        header = HEADER_STRUCT.pack(0, _MIN_BATCH_LENGTH + sum(map(len, sections)), -1, 2, 0, attributes, count - 1,
                                    base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count)
    except Exception as exc:  # struct.error: a field out of range
        raise EncodeError(f"batch header field out of range: {exc}", what="record batch v2") from None
    # The CRC runs over the sections where they are (each record byte is read once here).
    crc = crc32c(header[_ATTRIBUTES_AT:])
    for section in sections:
        crc = crc32c(section, crc)
    return SealedBatch([header[:_CRC_AT], UINT32.pack(crc), header[_ATTRIBUTES_AT:], *sections])


def murmur2_partitions(keys: Sequence[bytes | None], partitions: int) -> list[int] | None:
    """Each key's partition as Java's default partitioner gives it (``(murmur2(key) &
    0x7fffffff) % partitions``), compiled; None when the compiled helper is not built or a key is
    not bytes (the caller then asks the partitioner key by key)."""
    if _murmur2_partitions is None:
        return None
    partitioned: list[int] | None = _murmur2_partitions(keys, partitions)
    return partitioned
