"""Record batch v2 (magic 2): a lazy reader, in-place offset rewriting, and a builder.

The 61-byte header (its layout, the view ``RecordBatchHeader`` and the broker's in-place writes)
is ``batch_header``'s.  With compression, the records (not the header) are compressed as one
payload.

Each record::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    [headerKeyLength varint | headerKey utf-8 | headerValueLength varint | headerValue]...

Records are read by the record layer's one walk (``walk.record_columns``: the compiled
accelerator where built, the Python fallback otherwise), which finds every field of every
record; ``_decode_records`` only builds the record objects from those fields (and parses
headers, which the walk leaves to it).  The builder's hot loops (``RecordBatchBuilder.append``/
``extend``) inline Kafka's varints instead of calling ``kwire.protocol.primitives``: a Python
call per varint costs more than encoding the rest of a small record.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from .batch_header import Data

from ..errors import CorruptRecordError, DecodeError, EncodeError
from ..primitives import (
    UINT32,
    read_varint,
    read_varlong,
    uvarint,
    varint,
    varlong,
)
from .batch_header import (
    ATTRIBUTES_AT,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_AT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    HEADER_STRUCT,
    LENGTH_AT,
    MAGIC_AT,
    MIN_BATCH_LENGTH,
    RECORD_COUNT_AT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    RecordBatchHeader,
    last_sequence,
    rewrite_base_offset,
)
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .crc import crc32c
from .record import ControlRecord, ControlRecordType, Record, TimestampType, control_key, end_txn_marker_value
from .walk import MIN_RECORD_SIZE, record_columns

# ``into``: (the consumer's record type, topic, partition); ``wide``: (topic, partition,
# timestamp type, leader epoch) for building such records.
Into = tuple[type, str, int]
_Wide = tuple[str, int, int, int]

__all__ = [
    "RecordBatch",
    "RecordReader",
    "RecordBatchBuilder",
    "rewrite_base_offset",
    "build_control_batch",
    "read_headers",
    "HEADER_SIZE",
    "HEADER_STRUCT",
    "DELETE_HORIZON_BIT",
]

_WHAT = "record batch v2"

_new_header = tuple.__new__
# The header's layout and attribute bits are batch_header's (the one view of it).
_HEADER = HEADER_STRUCT
_MIN_BATCH_LENGTH = MIN_BATCH_LENGTH
_LENGTH_OFFSET = LENGTH_AT
_MAGIC_OFFSET = MAGIC_AT
_CRC_OFFSET = CRC_AT
_ATTRIBUTES_OFFSET = ATTRIBUTES_AT
_COUNT_OFFSET = RECORD_COUNT_AT
_COMPRESSION_MASK = COMPRESSION_MASK
_TIMESTAMP_TYPE_BIT = TIMESTAMP_TYPE_BIT
_TRANSACTIONAL_BIT = TRANSACTIONAL_BIT
_CONTROL_BIT = CONTROL_BIT
_DELETE_HORIZON_BIT = DELETE_HORIZON_BIT

# The smallest record (the walk's): bounds a forged record count.
_MIN_RECORD_SIZE = MIN_RECORD_SIZE

# Zigzag varint encodings of 0..16383 (lengths and deltas; most records need nothing else).
# The hot loops write the bound as the literal 16384 (a constant load is cheaper than a global).
# Filled by the first builder (_fill_zz), not at import: building it took 5-15 ms of every
# command line's start-up, most of which never build a batch in Python.
_ZN = 1 << 14
_ZZ: list[bytes] = []


def _fill_zz() -> None:
    _ZZ[:] = [bytes((2 * n,)) if n < 64 else
              bytes(((2 * n) & 0x7F | 0x80, (2 * n) >> 7)) if n < 8192 else
              bytes(((2 * n) & 0x7F | 0x80, ((2 * n) >> 7) & 0x7F | 0x80, (2 * n) >> 14))
              for n in range(_ZN)]

# Which record walk the decoder uses: None for the compiled accelerator where it is built (else
# the Python fallback); the tests set False to hold the fallback to the same records and errors.
_COMPILED_WALK: bool | None = None


def _record_path(index: int, field: str | None = None) -> list[str]:
    return [f"records[{index}]"] if field is None else [f"records[{index}]", field]


# ----------------------------------------------------------------------------------------
# Reading

class RecordBatch:
    """A lazy view of one v2 record batch at ``pos`` in ``data`` (bytes, bytearray or memoryview).

    Construction reads only the 61-byte header; records are decoded (and decompressed) when
    iterated.  ``validate()`` checks the CRC.  If ``data`` is writable, ``set_base_offset()``
    rewrites the base offset / leader epoch in place.
    """

    __slots__ = ("_data", "_pos", "_end", "_header", "max_decompressed_size")

    magic = 2

    _header: tuple[int, ...]

    def __init__(self, data: Data, pos: int = 0, *,
                 max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> None:
        available = len(data) - pos
        if pos < 0 or available < HEADER_SIZE:
            raise CorruptRecordError(f"truncated batch header: {HEADER_SIZE} bytes needed, {max(available, 0)} left",
                                     what=_WHAT, offset=pos)
        # A plain tuple: the named view costs a step per batch that the fetch path does not
        # need; ``header_fields`` makes it when asked.
        header = _HEADER.unpack_from(data, pos)
        if header[3] != 2:
            raise CorruptRecordError(f"magic is {header[3]}, not 2", what=_WHAT, path=["magic"],
                                     offset=pos + _MAGIC_OFFSET)
        length = header[1]
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {length} is smaller than the {_MIN_BATCH_LENGTH}-byte header",
                                     what=_WHAT, path=["batch_length"], offset=pos + _LENGTH_OFFSET)
        if length > available - 12:
            raise CorruptRecordError(f"batch length {length} exceeds the {available - 12} bytes left",
                                     what=_WHAT, path=["batch_length"], offset=pos + _LENGTH_OFFSET)
        self._data = data
        self._pos = pos
        self._end = pos + 12 + length
        self._header = header
        self.max_decompressed_size = max_decompressed_size

    @property
    def buffer(self) -> Data:
        """The buffer this batch is a view of (batches of one Fetch answer share it)."""
        return self._data

    # -- header fields ------------------------------------------------------------------
    @property
    def base_offset(self) -> int:
        return self._header[0]

    @property
    def batch_length(self) -> int:
        """The stored batchLength: bytes after the length field."""
        return self._header[1]

    @property
    def size_in_bytes(self) -> int:
        """Total bytes of this batch, header included."""
        return self._header[1] + 12

    @property
    def partition_leader_epoch(self) -> int:
        return self._header[2]

    @property
    def crc(self) -> int:
        return self._header[4]

    @property
    def attributes(self) -> int:
        return self._header[5]

    @property
    def compression(self) -> Compression:
        codec = self._header[5] & _COMPRESSION_MASK
        try:
            return Compression(codec)
        except ValueError:
            raise CorruptRecordError(f"unknown compression codec {codec}", what=_WHAT, path=["attributes"],
                                     offset=self._pos + _ATTRIBUTES_OFFSET) from None

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self._header[5] & _TIMESTAMP_TYPE_BIT else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self._header[5] & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self._header[5] & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._header[5] & _DELETE_HORIZON_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        """With the delete-horizon bit set, base_timestamp is the horizon (set by the log cleaner)."""
        return self._header[7] if self._header[5] & _DELETE_HORIZON_BIT else None

    @property
    def last_offset_delta(self) -> int:
        return self._header[6]

    @property
    def last_offset(self) -> int:
        return self._header[0] + self._header[6]

    @property
    def next_offset(self) -> int:
        return self._header[0] + self._header[6] + 1

    @property
    def base_timestamp(self) -> int:
        return self._header[7]

    @property
    def max_timestamp(self) -> int:
        return self._header[8]

    @property
    def producer_id(self) -> int:
        return self._header[9]

    @property
    def producer_epoch(self) -> int:
        return self._header[10]

    @property
    def base_sequence(self) -> int:
        return self._header[11]

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping at int32 max like Kafka), or -1 without sequences."""
        return last_sequence(self._header[11], self._header[6])

    @property
    def record_count(self) -> int:
        return self._header[12]

    @property
    def header_fields(self) -> RecordBatchHeader:
        """The header as read (``batch_header.RecordBatchHeader``: the fields in layout order,
        with names)."""
        return _new_header(RecordBatchHeader, self._header)

    def header(self) -> dict[str, int]:
        """All header fields by name (handy for logging and analysis)."""
        return dict(zip(RecordBatchHeader._fields, self._header, strict=True))

    def __repr__(self) -> str:
        h = self._header
        return (f"RecordBatch(base_offset={h[0]}, records={h[12]}, last_offset_delta={h[6]}, "
                f"compression={h[5] & 7}, attributes={h[5]:#x}, producer_id={h[9]}, producer_epoch={h[10]}, "
                f"base_sequence={h[11]}, size={h[1] + 12})")

    # -- integrity ----------------------------------------------------------------------
    def validate(self) -> None:
        """Check the CRC-32C and the header's consistency; raise ``CorruptRecordError`` if wrong.

        The length was already checked against the available bytes when the view was made.
        """
        data, pos = self._data, self._pos
        (stored,) = UINT32.unpack_from(data, pos + _CRC_OFFSET)
        computed = crc32c(memoryview(data)[pos + _ATTRIBUTES_OFFSET:self._end])
        if stored != computed:
            raise CorruptRecordError(f"CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}",
                                     what=_WHAT, path=["crc"], offset=pos + _CRC_OFFSET)
        h = self._header
        if h[5] & _COMPRESSION_MASK > 4:
            raise CorruptRecordError(f"unknown compression codec {h[5] & 7}", what=_WHAT, path=["attributes"],
                                     offset=pos + _ATTRIBUTES_OFFSET)
        if h[12] < 0:
            raise CorruptRecordError(f"negative record count {h[12]}", what=_WHAT, path=["record_count"],
                                     offset=pos + _COUNT_OFFSET)

    def is_valid(self) -> bool:
        """``validate()`` as a bool."""
        try:
            self.validate()
        except CorruptRecordError:
            return False
        return True

    # -- in-place rewrite ---------------------------------------------------------------
    def set_base_offset(self, base_offset: int, partition_leader_epoch: int | None = None) -> None:
        """Rewrite base offset (and optionally partition leader epoch) in the underlying buffer.

        Neither field is covered by the CRC, so the batch stays valid.  The buffer must be
        writable (a bytearray or a writable memoryview).
        """
        rewrite_base_offset(self._data, base_offset, partition_leader_epoch=partition_leader_epoch, pos=self._pos)
        h = list(self._header)
        h[0] = base_offset
        if partition_leader_epoch is not None:
            h[2] = partition_leader_epoch
        self._header = tuple(h)

    # -- records ------------------------------------------------------------------------
    def raw_records(self) -> bytes:
        """The records section as stored (compressed if the batch is)."""
        return bytes(memoryview(self._data)[self._pos + HEADER_SIZE:self._end])

    def records(self, into: Into | None = None) -> list[Any]:
        """Decode (decompressing if needed) every record of the batch.

        By default each record is a ``Record`` (a ``ControlRecord`` in a control batch).  With
        ``into=(cls, topic, partition)`` (not for control batches), each record is instead built
        directly as the consumer's 9-field tuple type ``cls``: ``(topic, partition, offset,
        timestamp, timestamp_type, key, value, headers, leader_epoch)``, with the batch's
        timestamp type (0/1) and partition leader epoch, and headers as a tuple of
        ``(key, value)`` pairs (``()`` when none): one tuple per record instead of two, and no
        list per record for the garbage collector to track.
        """
        cls, wide = self._record_type(into)
        buf, pos, end, where, append_time = self._records_buffer()
        h = self._header
        return _decode_records(buf, pos, end, h[12], h[0], h[7], append_time, cls, where, self._pos + _COUNT_OFFSET,
                               wide)

    def reader(self, into: Into) -> RecordReader:
        """A reader handing out the records of ``records(into)`` a slice at a time
        (``RecordReader.take``), decoding each slice only when asked: records built just before
        use are freed young, which keeps the garbage collector's work small."""
        cls, wide = self._record_type(into)
        buf, pos, end, where, append_time = self._records_buffer()
        h = self._header
        return RecordReader((buf, end, h[12], h[0], h[7], append_time, cls, where, self._pos + _COUNT_OFFSET, wide),
                            pos)

    def records_section(self) -> tuple[Data, int, int, int | None]:
        """``(buf, start, end, append_time)``: the records of the batch are ``buf[start:end]``,
        decompressed if the batch is compressed, else the batch's own buffer (no copy); and
        ``append_time`` the batch's max timestamp with LogAppendTime (every record's timestamp
        then), else None.  For decoders of their own (a columnar one); nothing is validated."""
        h = self._header
        start, end = self._pos + HEADER_SIZE, self._end
        append_time = h[8] if h[5] & _TIMESTAMP_TYPE_BIT else None
        codec = h[5] & _COMPRESSION_MASK
        if not codec:
            return self._data, start, end, append_time
        try:
            buf = decompress(codec, memoryview(self._data)[start:end], max_size=self.max_decompressed_size)
        except DecodeError as exc:
            raise CorruptRecordError(exc.reason, what=_WHAT, path=["records"],
                                     offset=start if exc.offset is None else start + exc.offset) from None
        return buf, 0, len(buf), append_time

    def _record_type(self, into: Into | None) -> tuple[type, _Wide | None]:
        h = self._header
        if into is None:
            return (ControlRecord if h[5] & _CONTROL_BIT else Record), None
        if h[5] & _CONTROL_BIT:
            raise ValueError("a control batch decodes only to ControlRecord")
        cls, topic, partition = into
        return cls, (topic, partition, 1 if h[5] & _TIMESTAMP_TYPE_BIT else 0, h[2])

    def _records_buffer(self) -> tuple[Any, int, int, int | str | None, int | None]:
        """(buf, pos, end, where, append_time) of the records section, decompressed if needed."""
        buf, start, end, append_time = self.records_section()
        if buf is not self._data:
            return buf, 0, end, "decompressed", append_time
        if type(buf) is bytes:
            # Slice keys and values straight out of the caller's bytes: no copy of the batch.
            return buf, start, end, None, append_time
        # bytearray/memoryview slices are not bytes; one copy makes every key/value slice a
        # plain bytes object (cheaper than 2 bytes() conversions per record).
        return bytes(memoryview(buf)[start:end]), 0, end - start, start, append_time

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())


class RecordReader:
    """The records of one batch, decoded a slice at a time (``RecordBatch.reader``).

    ``take(n)`` decodes and returns up to ``n`` more records; ``done`` once all were taken.  A
    corrupt record raises from the ``take`` that reaches it, and again from every later one.
    """

    __slots__ = ("_args", "_state")

    def __init__(self, args: tuple[Any, ...], pos: int) -> None:
        self._args = args
        self._state = [0, pos]  # index of the next record, its position

    @property
    def done(self) -> bool:
        return bool(self._state[0] >= self._args[2])

    def take(self, n: int) -> list[Any]:
        state = self._state
        buf, end, count, base_offset, base_timestamp, append_time, cls, where, count_at, wide = self._args
        stop = min(count, state[0] + max(n, 1))
        return _decode_records(buf, state[1], end, count, base_offset, base_timestamp, append_time, cls, where,
                               count_at, wide, state, stop)


def _decode_records(buf: bytes, pos: int, end: int, count: int, base_offset: int, base_timestamp: int,
                    append_time: int | None, cls: type, where: int | str | None, count_at: int,
                    wide: _Wide | None = None, state: list[int] | None = None,
                    stop: int | None = None) -> list[Any]:
    """Decode ``count`` records from ``buf[pos:end]``: the record walk (``walk.record_columns``,
    compiled where built) finds every field, then each record is built from its fields.

    ``where`` says how to report byte offsets: an int to add to them, None if ``pos`` is
    already absolute, or "decompressed" for offsets within the decompressed records.
    ``wide`` (topic, partition, timestamp type, leader epoch) builds the consumer's 9-field
    records (``RecordBatch.records(into=...)``), with tuple headers, instead of 5-field ones.
    ``state`` ([index of the first record to decode, ``pos`` of it], updated on success) and
    ``stop`` decode only the records ``index..stop-1``, for a ``RecordReader``.
    """
    first = 0 if state is None else state[0]
    if stop is None:
        stop = count
    if count < 0 or count - first > (end - pos) // _MIN_RECORD_SIZE:
        raise CorruptRecordError(f"record count {count} does not fit in the {end - pos} bytes of records",
                                 what=_WHAT, path=["record_count"], offset=count_at)
    n = stop - first
    columns, bad = record_columns(buf, pos, end, n, compiled=_COMPILED_WALK)
    ends = columns[8]
    if bad == n and stop < count:
        bad = -1  # a slice of the records (a RecordReader's): they end before the section does
    good = n if bad < 0 else bad
    if good < n:
        columns = [column[:good] for column in columns]
    if append_time is not None:
        # Kafka: with LogAppendTime every record's timestamp is the batch's max timestamp.
        base_timestamp = append_time
        columns[0] = [0] * good
    out: list[Any] = []
    append = out.append
    new = tuple.__new__
    try:
        if wide is None:
            for ts, od, ka, kl, va, vl, hc, ha, re in zip(*columns, strict=True):
                append(new(cls, (base_offset + od, base_timestamp + ts, buf[ka:ka + kl] if kl >= 0 else None,
                                 buf[va:va + vl] if vl >= 0 else None,
                                 read_headers(buf, ha, re, hc) if hc else [])))
        else:
            topic, partition, ts_type, epoch = wide
            for ts, od, ka, kl, va, vl, hc, ha, re in zip(*columns, strict=True):
                # () is a shared, untracked constant: no per-record object for the GC.
                append(new(cls, (topic, partition, base_offset + od, base_timestamp + ts, ts_type,
                                 buf[ka:ka + kl] if kl >= 0 else None, buf[va:va + vl] if vl >= 0 else None,
                                 tuple(read_headers(buf, ha, re, hc)) if hc else (), epoch)))
    except (IndexError, ValueError, DecodeError):  # headers that do not parse
        bad = len(out)
    if bad >= 0:
        start = ends[bad - 1] if bad else pos
        if bad < n:
            _diagnose(buf, start, end, first + bad, count, where)
        raise CorruptRecordError(f"{end - start} bytes left after the last of {count} records", what=_WHAT,
                                 path=["records"], offset=_report(start, where))
    if state is not None:
        state[0] = stop
        state[1] = ends[-1] if n else pos
    if cls is ControlRecord:
        for index, record in enumerate(out):
            if record.key is None or len(record.key) < 4:
                raise CorruptRecordError("control record key shorter than 4 bytes", what=_WHAT,
                                         path=_record_path(index, "key"))
    return out


def read_headers(buf: bytes, pos: int, rec_end: int, count: int) -> list[tuple[str, bytes | None]]:
    """The ``count`` headers of a record at ``pos`` (the walk's ``headers_at``, past the count),
    which must end at ``rec_end`` (the record's end): ``(key, value)`` pairs, a null value as None.

    The one reader of record headers: the decoder's records and the Spark source's headers
    column.  Headers that do not parse raise ValueError (UnicodeDecodeError for a key that is not
    UTF-8), IndexError or DecodeError (a bad varint)."""
    # Each header takes at least 2 bytes (two 1-byte lengths): bounds a forged count.
    if count < 0 or count > (rec_end - pos) // 2:
        raise ValueError("header count")
    headers = []
    for _ in range(count):
        n, pos = read_varint(buf, pos)
        if n < 0 or pos + n > rec_end:
            raise ValueError("header key")
        hkey = buf[pos:pos + n].decode("utf-8")
        pos += n
        n, pos = read_varint(buf, pos)
        if n < 0:
            hvalue = None
        else:
            if pos + n > rec_end:
                raise ValueError("header value")
            hvalue = buf[pos:pos + n]
            pos += n
        headers.append((hkey, hvalue))
    if pos != rec_end:
        raise ValueError("headers end before the record")
    return headers


def _report(pos: int, where: int | str | None) -> int:
    return pos + where if isinstance(where, int) else pos  # None: absolute; "decompressed": as is


def _diagnose(buf: bytes, pos: int, end: int, index: int, count: int, where: int | str | None) -> None:
    """Re-read the record at ``pos`` carefully and raise an error naming the bad field.

    Only called after the fast decoder failed, so its cost does not matter.
    """
    suffix = " (offset within the decompressed records)" if where == "decompressed" else ""

    def fail(field: str | None, reason: str, at: int) -> NoReturn:
        raise CorruptRecordError(reason + suffix, what=_WHAT, path=_record_path(index, field),
                                 offset=_report(at, where))

    def varint_field(field: str, at: int,
                     reader: Callable[[bytes, int], tuple[int, int]] = read_varint) -> tuple[int, int]:
        if at >= end:
            fail(field, "record ends before this field", at)
        try:
            value, nxt = reader(buf, at)
        except DecodeError as exc:
            fail(field, f"bad varint: {exc.reason}", at)
        if nxt > end:
            fail(field, "truncated varint", at)
        return value, nxt

    if pos >= end:
        fail(None, f"the records end after {index} of the {count} the batch header declares", pos)
    length, p = varint_field("length", pos)
    if length < 6:
        fail("length", f"record length {length} is smaller than the 6-byte minimum", pos)
    rec_end = p + length
    if rec_end > end:
        fail("length", f"record length {length} exceeds the {end - p} bytes left", pos)
    end = rec_end  # fields may not run past their record
    if p >= end:
        fail("attributes", "record ends before this field", p)
    p += 1
    _, p = varint_field("timestamp_delta", p, read_varlong)
    _, p = varint_field("offset_delta", p)
    for field in ("key", "value"):
        n, q = varint_field(field, p)
        if n > end - q:
            fail(field, f"{field} length {n} exceeds the {end - q} bytes left in the record", p)
        p = q + max(n, 0)
    count, q = varint_field("headers", p)
    if count < 0 or count > (end - q) // 2:
        fail("headers", f"header count {count} does not fit in the {end - q} bytes left in the record", p)
    p = q
    for i in range(count):
        field = f"headers[{i}]"
        n, q = varint_field(field + ".key", p)
        if n < 0 or n > end - q:
            fail(field + ".key", f"header key length {n} is negative or exceeds the {end - q} bytes left", p)
        try:
            buf[q:q + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            fail(field + ".key", f"header key is not UTF-8: {exc.reason}", q)
        p = q + n
        n, q = varint_field(field + ".value", p)
        if n > end - q:
            fail(field + ".value", f"header value length {n} exceeds the {end - q} bytes left", p)
        p = q + max(n, 0)
    if p != end:
        fail(None, f"record length says {length} bytes but its fields take {p - (rec_end - length)}", pos)
    fail(None, "malformed record", pos)  # unreachable unless the fast path disagrees with this one


# ----------------------------------------------------------------------------------------
# Building

def _now_ms() -> int:
    return int(time.time() * 1000)


def _encode_headers(headers: Sequence[tuple[str | bytes, bytes | None]]) -> bytes:
    parts = [varint(len(headers))]
    for hkey, hvalue in headers:
        if isinstance(hkey, str):
            hkey = hkey.encode("utf-8")
        parts.append(uvarint(len(hkey) << 1))
        parts.append(hkey)
        if hvalue is None:
            parts.append(b"\x01")
        else:
            parts.append(uvarint(len(hvalue) << 1))
            parts.append(hvalue)
    return b"".join(parts)


def _encode_body(timestamp: Any, base: int, delta: int, key: Any, value: Any, headers: Any, index: int) -> bytes:
    """A record without its length prefix, for any input; raises EncodeError for bad values.

    The general path behind the builder's fast paths (null values, lengths of 16 KiB or more,
    big or negative deltas, and bad input).
    """
    try:
        return b"".join((b"\x00", varlong(timestamp - base), varint(delta),
                         b"\x01" if key is None else uvarint(len(key) << 1), b"" if key is None else key,
                         b"\x01" if value is None else uvarint(len(value) << 1), b"" if value is None else value,
                         _encode_headers(headers) if headers else b"\x00"))
    except (TypeError, ValueError, AttributeError) as exc:
        raise EncodeError(f"cannot encode record: {exc}", what=_WHAT, path=_record_path(index)) from None


class RecordBatchBuilder:
    """Accumulate records and write one v2 batch with ``build()``.

    Offsets are assigned from 0 (offset delta = position) unless ``offset_delta`` is given;
    the first record's timestamp becomes the base timestamp.  Header fields the broker sets
    (base offset, partition leader epoch) default to 0 / -1 and can also be rewritten later
    with ``rewrite_base_offset``.  ``build()`` may be called again after more appends.
    """

    # Records are kept as a list of encoded pieces (length prefix, body) joined once by
    # build(): appending to a list is cheaper than growing a bytearray, and the record count
    # is len(_parts) // 2.
    __slots__ = ("_parts", "_next_delta", "_base_ts", "_max_ts", "_sized", "_size", "compression",
                 "base_offset", "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence",
                 "transactional", "control", "timestamp_type", "log_append_time")

    def __init__(self, *, compression: int = Compression.NONE, base_offset: int = 0,
                 partition_leader_epoch: int = -1, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, transactional: bool = False, control: bool = False,
                 timestamp_type: int = TimestampType.CREATE_TIME, log_append_time: int | None = None):
        if compression not in (0, 1, 2, 3, 4):
            raise EncodeError(f"unknown compression codec {compression!r}", what=_WHAT)
        if transactional and producer_id < 0:
            raise EncodeError("a transactional batch needs a producer id", what=_WHAT, path=["producer_id"])
        if timestamp_type not in (0, 1):
            raise EncodeError(f"unknown timestamp type {timestamp_type!r}", what=_WHAT)
        self.compression = Compression(compression)
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        self.control = control
        self.timestamp_type = TimestampType(timestamp_type)
        self.log_append_time = log_append_time
        self._parts: list[bytes] = []
        self._next_delta = 0
        self._base_ts: int | None = None
        self._max_ts = -1
        self._sized = 0  # parts already summed into _size
        self._size = HEADER_SIZE
        if not _ZZ:
            _fill_zz()  # the encoding table append and extend read

    def __len__(self) -> int:
        """Number of records appended."""
        return len(self._parts) >> 1

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the batch if built now without compression (amortized O(1))."""
        parts = self._parts
        if self._sized < len(parts):
            self._size += sum(map(len, parts[self._sized:]))
            self._sized = len(parts)
        return self._size

    def append(self, key: bytes | None, value: bytes | None, timestamp: int | None = None,
               headers: Sequence[tuple[str, bytes | None]] | None = None, *, offset_delta: int | None = None) -> int:
        """Add one record; returns its offset delta.  ``timestamp`` defaults to now (ms)."""
        if timestamp is None:
            timestamp = _now_ms()
        if offset_delta is None:
            delta = self._next_delta
        else:
            delta = offset_delta
            if delta < self._next_delta:
                raise EncodeError(f"offset delta {delta} is not above the previous one", what=_WHAT,
                                  path=["offset_delta"])
        base = self._base_ts
        if base is None:
            # Any base works as long as the header stores the one the deltas are relative to,
            # so it is kept even if this first record then fails to encode.
            base = self._base_ts = timestamp
        zz = _ZZ
        try:
            # Fast path, everything from the table.  A length of 16 KiB or more makes a lookup
            # raise IndexError, a null value or a non-bytes key/value TypeError: those (and big
            # or negative deltas) take the general path.
            td = timestamp - base
            if 0 <= td < 16384 and delta < 16384:
                if key is None:
                    body = b"".join((b"\x00", zz[td], zz[delta], b"\x01", zz[len(value)], value,  # type: ignore[arg-type]  # None: TypeError, the general path
                                     _encode_headers(headers) if headers else b"\x00"))
                else:
                    body = b"".join((b"\x00", zz[td], zz[delta], zz[len(key)], key, zz[len(value)], value,  # type: ignore[arg-type]  # None: TypeError, the general path
                                     _encode_headers(headers) if headers else b"\x00"))
            else:
                body = _encode_body(timestamp, base, delta, key, value, headers, len(self))
        except (IndexError, TypeError, ValueError, AttributeError):
            body = _encode_body(timestamp, base, delta, key, value, headers, len(self))
        n = len(body)
        parts = self._parts
        parts.append(zz[n] if n < 16384 else uvarint(n << 1))
        parts.append(body)
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        self._next_delta = delta + 1
        return delta

    def extend(self, records: Iterable[tuple[bytes | None, bytes | None, int | None,
                                             Sequence[tuple[str, bytes | None]] | None]]) -> None:
        """Add many ``(key, value, timestamp, headers)`` records (timestamp None = now) in one loop.

        Equivalent to calling ``append`` for each, but without a method call per record.
        """
        now = None
        parts = self._parts
        append = parts.append
        zz = _ZZ
        join = b"".join
        delta = self._next_delta
        base = self._base_ts
        max_ts = self._max_ts
        try:
            for key, value, timestamp, headers in records:
                if timestamp is None:
                    if now is None:
                        now = _now_ms()
                    timestamp = now
                if base is None:
                    base = timestamp
                # same fast path as append()
                try:
                    td = timestamp - base
                    if 0 <= td < 16384 and delta < 16384:
                        if key is None:
                            body = join((b"\x00", zz[td], zz[delta], b"\x01", zz[len(value)], value,  # type: ignore[arg-type]  # None: TypeError, the general path
                                         _encode_headers(headers) if headers else b"\x00"))
                        else:
                            body = join((b"\x00", zz[td], zz[delta], zz[len(key)], key, zz[len(value)], value,  # type: ignore[arg-type]  # None: TypeError, the general path
                                         _encode_headers(headers) if headers else b"\x00"))
                    else:
                        body = _encode_body(timestamp, base, delta, key, value, headers, len(parts) >> 1)
                except (IndexError, TypeError, ValueError, AttributeError):
                    body = _encode_body(timestamp, base, delta, key, value, headers, len(parts) >> 1)
                n = len(body)
                append(zz[n] if n < 16384 else uvarint(n << 1))
                append(body)
                if timestamp > max_ts:
                    max_ts = timestamp
                delta += 1
        except (TypeError, ValueError) as exc:  # not a 4-tuple, or a bad timestamp
            raise EncodeError(f"cannot encode record: {exc}", what=_WHAT, path=_record_path(len(self))) from None
        finally:
            # Records written before an error stay consistent with the counters.
            if delta != self._next_delta:
                self._base_ts = base
            self._next_delta = delta
            self._max_ts = max_ts

    def append_control(self, control_type: int, value: bytes | None = None, timestamp: int | None = None,
                       version: int = 0) -> int:
        """Add a control record (the builder must have ``control=True``)."""
        if not self.control:
            raise EncodeError("control records go in a control batch (control=True)", what=_WHAT)
        try:
            key = control_key(control_type, version)
        except struct.error as exc:
            raise EncodeError(f"bad control record key: {exc}", what=_WHAT) from None
        return self.append(key, value, timestamp)

    def build(self) -> bytes:
        """The batch bytes, records compressed with the builder's codec and the CRC computed."""
        records = b"".join(self._parts)
        count = len(self._parts) >> 1
        codec = self.compression
        if codec:
            records = compress(codec, records)
        attributes = codec | (self.timestamp_type << 3) | (_TRANSACTIONAL_BIT if self.transactional else 0) \
            | (_CONTROL_BIT if self.control else 0)
        if count:
            base_ts = self._base_ts
            max_ts = self._max_ts
        else:
            base_ts = max_ts = -1  # Kafka's NO_TIMESTAMP for an empty batch
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME and self.log_append_time is not None:
            max_ts = self.log_append_time
        try:
            header = _HEADER.pack(self.base_offset, _MIN_BATCH_LENGTH + len(records), self.partition_leader_epoch, 2,
                                  0, attributes, max(self._next_delta - 1, 0), base_ts, max_ts, self.producer_id,
                                  self.producer_epoch, self.base_sequence, count)
        except struct.error as exc:
            raise EncodeError(f"batch header field out of range: {exc}", what=_WHAT) from None
        # The CRC covers attributes..end: header tail, then records, computed incrementally so
        # the records are copied only once (into the result).
        crc = crc32c(records, crc32c(header[_ATTRIBUTES_OFFSET:]))
        return b"".join((header[:_CRC_OFFSET], UINT32.pack(crc), header[_ATTRIBUTES_OFFSET:], records))


def build_control_batch(control_type: int, *, producer_id: int, producer_epoch: int, coordinator_epoch: int = 0,
                        base_offset: int = 0, partition_leader_epoch: int = -1, timestamp: int | None = None) -> bytes:
    """A transaction marker batch (ControlRecordType.ABORT or COMMIT), as a transaction coordinator writes it."""
    builder = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                                 producer_id=producer_id, producer_epoch=producer_epoch, transactional=True,
                                 control=True)
    builder.append_control(control_type, end_txn_marker_value(coordinator_epoch), timestamp)
    return builder.build()


_ = ControlRecordType  # re-exported through the package
