"""The record walk: where every field of the records of a v2 batch lies, in one pass.

A v2 record says where the next one starts only through its own length prefix, so finding the
records of a batch is a sequential walk.  ``scan_records`` does it and reads every record's
fields on the way (timestamp and offset deltas, where the key, value and headers lie and their
lengths, where the record ends) into columns, for readers that build their own output from
positions rather than a Python object per record (the Spark source's Arrow columns).

Two implementations with one contract: the compiled accelerator ``_layout.scan_v2`` (setup.py;
about 20 ns a record) beside this module, and ``scan_records_python`` here, the fallback when
the accelerator is not built (no C compiler at install, kwire imported from a zip).  The tests
hold both to identical results on fuzzed batches, corrupt ones included.  Without the
accelerator the walk warns once (``RecordWalkWarning``) and ``kwire --version`` says so.

Layout of a record (Kafka's v2 message format, DefaultRecord): length varint, attributes int8,
timestamp delta varlong, offset delta varint, key length varint, key, value length varint,
value, header count varint, headers.  Varints are zigzag-encoded; a negative key or value length
is a null key or value.  Headers are not parsed: a record with headers is checked to hold them
within its length, and the caller parses them (``headers_at`` to ``end``).
"""

from __future__ import annotations

import warnings
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Buffer

# numpy (kwire's spark extra) lets the fallback read fields for all records at once.  It is
# imported the first time the fallback could use it, not with this module: every command line
# imports the record layer, and numpy's import takes longer than a one-record produce.
_np: Any = None  # numpy, once imported (untyped here: an optional extra)
_numpy_tried = False


def _numpy() -> Any:
    """numpy, or None where it is not installed (imported once, on first use)."""
    global _np, _numpy_tried
    if not _numpy_tried:
        _numpy_tried = True
        try:
            import numpy
        except ImportError:
            return None
        _np = numpy
    return _np


try:  # the optional compiled accelerator (setup.py)
    from . import _layout
except ImportError:  # not built, or kwire imported from a zip
    _layout = None  # type: ignore[assignment]  # (the checks below read it as optional)

__all__ = [
    "FIELDS",
    "MIN_RECORD_SIZE",
    "RecordWalkWarning",
    "accelerated",
    "accelerator_status",
    "record_columns",
    "scan_records",
    "scan_records_python",
    "scan_sections",
]

#: The rows of ``out``, one int64 per record in each (positions are in the scanned buffer).
FIELDS = ("timestamp_delta", "offset_delta", "key_at", "key_length", "value_at", "value_length",
          "header_count", "headers_at", "end")
_N_FIELDS = len(FIELDS)

#: The smallest record: a one-byte length and six one-byte fields (attributes, timestamp delta,
#: offset delta, key length, value length, header count).  Bounds a forged record count.
MIN_RECORD_SIZE = 7

_MASK64 = (1 << 64) - 1
# zigzag value of a one-byte varint, by that byte
_D1 = [(n >> 1) ^ -(n & 1) for n in range(128)]


class RecordWalkWarning(RuntimeWarning):
    """The compiled record walk is not built: records are walked in Python (slower, same results)."""


def accelerated() -> bool:
    """Whether the compiled accelerator of the walk is built and in use."""
    return _layout is not None


def accelerator_status() -> str:
    """One line on the record walk's accelerator, for ``kwire --version``."""
    if _layout is not None:
        return "record walk: compiled (kwire.protocol.records._layout)"
    return ("record walk: pure Python (kwire.protocol.records._layout is not built; "
            "reinstall with a C compiler and Python's headers to build it)")


_warned = False


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn("kwire.protocol.records._layout (the compiled record walk) is not built: records are "
                      "walked in Python, several times slower; reinstall kwire with a C compiler and Python's "
                      "headers to build it", RecordWalkWarning, stacklevel=3)


def scan_records(buf: Buffer, pos: int, stop: int, count: int, out: Buffer, row: int) -> int:
    """Read the fields of the ``count`` v2 records in ``buf[pos:stop]`` into columns
    ``row..row+count-1`` of ``out``, a C-contiguous int64 array of shape (9, N) (rows:
    ``FIELDS``).  Returns -1 if every record parses and they fill ``buf[pos:stop]`` exactly,
    else the index of the first record that does not (``count``: they end short); the columns
    of the records before it are filled.  ``ValueError`` for arguments that do not fit."""
    if _layout is not None:
        return _layout.scan_v2(buf, pos, stop, count, out, row)
    _warn_once()
    return scan_records_python(buf, pos, stop, count, out, row)


def record_columns(buf: Buffer, pos: int, stop: int, count: int, *,
                   compiled: bool | None = None) -> tuple[list[list[int]], int]:
    """The walk's fields of the ``count`` v2 records in ``buf[pos:stop]`` as nine lists
    (``FIELDS``: element ``i`` of each is record ``i``'s), and what ``scan_records`` returns
    (-1 if every record parses and they fill ``buf[pos:stop]`` exactly, else the index of the
    first that does not; ``count``: they end short).  Entries from a bad record on are
    unspecified (and the lists may be shorter than ``count`` when it is more than the bytes can
    hold).  For readers that turn the fields into Python objects (the per-record decoder
    of ``batch``, the log cleaner's offset map).  ``compiled``: False walks in Python even where
    the accelerator is built (the tests hold both to the same results)."""
    if count <= 0:
        return [[] for _ in FIELDS], (-1 if pos == stop else 0)
    # A forged count (a corrupt batch header says up to 2**31 - 1) must not size the columns:
    # more records than the bytes can hold fail by the one after the most that fit, so that is
    # as far as the walk needs to go to return the same index.
    if stop >= pos:
        count = min(count, (stop - pos) // MIN_RECORD_SIZE + 1)
    if compiled is None:
        compiled = _layout is not None
    elif compiled and _layout is None:
        raise RuntimeError("the record walk's accelerator kwire.protocol.records._layout is not built")
    if compiled:
        cells = array("q", bytes(8 * _N_FIELDS * count))
        bad = _layout.scan_v2(buf, pos, stop, count, cells, 0)
        flat = cells.tolist()
    else:
        if _layout is None:
            _warn_once()
        if not isinstance(buf, (bytes, bytearray)):
            buf = memoryview(buf).cast("B")
        if pos < 0 or stop < pos or stop > len(buf):
            raise ValueError(f"records at {pos}..{stop} are outside a buffer of {len(buf)} bytes")
        np = _numpy() if count >= _VECTOR_MIN else None
        if np is not None:  # numpy reads the fields of all records at once (scan_records_python)
            out = np.empty((_N_FIELDS, count), dtype=np.int64)
            if _scan_vectorized(buf, [(pos, stop, count)], memoryview(out), count, 0):
                return out.tolist(), -1
        flat = [0] * (_N_FIELDS * count)
        bad = _scan_exact(buf, pos, stop, count, flat, count, 0)
    return [flat[k * count:(k + 1) * count] for k in range(_N_FIELDS)], bad


def scan_sections(buf: Buffer, sections: Sequence[tuple[int, int, int]], out: Buffer) -> tuple[int, int] | None:
    """``scan_records`` over the record sections of many batches of one buffer: ``sections``
    holds ``(pos, stop, count)`` per batch, whose records fill the next ``count`` columns of
    ``out`` (from column 0).  None if every record parses; else ``(k, index)``: section ``k``
    is the first with a bad record and ``index`` what ``scan_records`` says of it.  The Python
    fallback reads the fields of all sections in one pass (with numpy)."""
    if _layout is None:
        _warn_once()
        if _numpy() is not None and sum(count for _, _, count in sections) >= _VECTOR_MIN:
            view = memoryview(out)
            if not view.readonly and view.itemsize == 8 and view.nbytes % (_N_FIELDS * 8) == 0:
                stride = view.nbytes // (_N_FIELDS * 8)
                if not isinstance(buf, (bytes, bytearray)):
                    buf = memoryview(buf).cast("B")
                fits = all(0 <= pos <= stop <= len(buf) and count >= 0 for pos, stop, count in sections)
                if fits and sum(count for _, _, count in sections) <= stride \
                        and _scan_vectorized(buf, sections, view, stride, 0):
                    return None
        scan = scan_records_python
    else:
        scan = _layout.scan_v2
    row = 0
    for k, (pos, stop, count) in enumerate(sections):
        bad = scan(buf, pos, stop, count, out, row)
        if bad >= 0:
            return k, bad
        row += count
    return None


def _varint(buf: Any, p: int, end: int, width: int) -> tuple[int, int] | None:
    """A zigzag varint of at most ``width`` bytes at ``p``, all before ``end``: (value, position
    after it), or None.  Values are those of C's 64-bit arithmetic (bits past 64 dropped)."""
    raw = shift = 0
    for i in range(width):
        if p + i >= end:
            return None
        b = buf[p + i]
        raw |= (b & 0x7F) << shift
        if b < 128:
            raw &= _MASK64
            return (raw >> 1) ^ -(raw & 1), p + i + 1
        shift += 7
    return None


def scan_records_python(buf: Buffer, pos: int, stop: int, count: int, out: Buffer, row: int) -> int:
    """``scan_records`` in Python: the fallback, and the reference the accelerator is tested
    against (same arguments, same checks, same results).

    With numpy and enough records, a Python pass over the length prefixes (the only field that
    says where the next record starts) then numpy reading every other field for all records at
    once (``_scan_vectorized``, several times faster); it only ever accepts records the
    record-by-record walk accepts, and anything it does not accept is walked record by record,
    which finds the first bad one."""
    if not isinstance(buf, (bytes, bytearray)):
        buf = memoryview(buf).cast("B")
    view = memoryview(out)
    if view.itemsize != 8 or view.nbytes % (_N_FIELDS * 8):
        raise ValueError("out must be an int64 array of shape (9, N)")
    if view.readonly:
        raise TypeError("out must be writable")
    stride = view.nbytes // (_N_FIELDS * 8)
    if pos < 0 or stop < pos or stop > len(buf):
        raise ValueError(f"records at {pos}..{stop} are outside a buffer of {len(buf)} bytes")
    if count < 0 or row < 0 or row > stride - count:
        raise ValueError(f"{count} records from column {row} do not fit in {stride} columns")
    if not stride:
        return -1 if pos == stop else 0  # no columns, so no records (count is 0): as the accelerator
    if count >= _VECTOR_MIN and _numpy() is not None and _scan_vectorized(buf, [(pos, stop, count)], view, stride,
                                                                           row):
        return -1
    return _scan_exact(buf, pos, stop, count, view.cast("B").cast("q"), stride, row)


def _fill_d2() -> None:
    """The two-byte zigzag table of ``_scan_exact`` (filled on first use, not at import: the
    fallback runs only where the accelerator is not built)."""
    _D2[:] = [0] * 128 + [(n >> 1) ^ -(n & 1) for n in range(16384)]


# zigzag value of a two-byte varint (b, c) (b >= 128, c < 128) at index b + 128 * c: lengths
# and deltas from 64 to 8191, most of the rest
_D2: list[int] = []


def _scan_exact(buf: Any, pos: int, stop: int, count: int, cells: Any, stride: int, row: int) -> int:
    """The record-by-record walk (``cells``: ``out`` as a flat int64 view, or a list)."""
    if not _D2:
        _fill_d2()
    d1 = _D1
    d2 = _D2
    varint = _varint
    limit = stop
    p = pos
    o1, o2, o3, o4, o5, o6, o7, o8 = (k * stride for k in range(1, 9))
    # Every varint takes the one- or two-byte path inline (table lookups: most lengths and
    # deltas of records), longer ones or ones at the end of the bytes through ``_varint``.
    for i in range(count):
        # record length: must fit in what is left of the section
        b = buf[p] if p < limit else 128
        if b < 128:
            length, p = d1[b], p + 1
        elif p + 1 < limit and (c := buf[p + 1]) < 128:
            length, p = d2[b + 128 * c], p + 2
        else:
            got = varint(buf, p, limit, 5)
            if got is None:
                return i
            length, p = got
        if length <= 0 or length > limit - p:  # a record holds at least its attributes
            return i
        end = p + length
        p += 1  # attributes: unused since Kafka 0.11
        b = buf[p] if p < end else 128  # timestamp delta: a varlong
        if b < 128:
            ts_delta, p = d1[b], p + 1
        elif p + 1 < end and (c := buf[p + 1]) < 128:
            ts_delta, p = d2[b + 128 * c], p + 2
        else:
            got = varint(buf, p, end, 10)
            if got is None:
                return i
            ts_delta, p = got
        b = buf[p] if p < end else 128
        if b < 128:
            off_delta, p = d1[b], p + 1
        elif p + 1 < end and (c := buf[p + 1]) < 128:
            off_delta, p = d2[b + 128 * c], p + 2
        else:
            got = varint(buf, p, end, 5)
            if got is None:
                return i
            off_delta, p = got
        b = buf[p] if p < end else 128  # key: length (negative: null), then its bytes
        if b < 128:
            key_length, key_at = d1[b], p + 1
        elif p + 1 < end and (c := buf[p + 1]) < 128:
            key_length, key_at = d2[b + 128 * c], p + 2
        else:
            got = varint(buf, p, end, 5)
            if got is None:
                return i
            key_length, key_at = got
        if key_length > end - key_at:
            return i
        p = key_at + key_length if key_length > 0 else key_at
        b = buf[p] if p < end else 128  # value
        if b < 128:
            value_length, value_at = d1[b], p + 1
        elif p + 1 < end and (c := buf[p + 1]) < 128:
            value_length, value_at = d2[b + 128 * c], p + 2
        else:
            got = varint(buf, p, end, 5)
            if got is None:
                return i
            value_length, value_at = got
        if value_length > end - value_at:
            return i
        p = value_at + value_length if value_length > 0 else value_at
        b = buf[p] if p < end else 128
        if b < 128:
            header_count, p = d1[b], p + 1
        else:
            got = varint(buf, p, end, 5)
            if got is None:
                return i
            header_count, p = got
        # A record without headers ends right here; one with headers has them parsed by the
        # caller, which checks that they end where the record does.
        if header_count < 0 or (header_count == 0 and p != end):
            return i
        at = row + i
        cells[at] = ts_delta
        cells[o1 + at] = off_delta
        cells[o2 + at] = key_at
        cells[o3 + at] = key_length
        cells[o4 + at] = value_at
        cells[o5 + at] = value_length
        cells[o6 + at] = header_count
        cells[o7 + at] = p
        cells[o8 + at] = end
        p = end
    return -1 if p == limit else count


# Below this many records the record-by-record walk is as fast as numpy's fixed costs.
_VECTOR_MIN = 16
# A record's length prefix and body in bytes, by the prefix's first byte (1-byte prefixes) or by
# its two bytes (``b + 128 * c``, 2-byte prefixes: records up to 8 KiB).  A length that is not
# positive (corrupt: a record holds at least its attributes) is made one no buffer holds.
_BAD_LENGTH = 1 << 40
_STEP_1 = [1 + v if v > 0 else _BAD_LENGTH for v in _D1]
# The 2-byte table (16k entries) is made by the first vectorized walk, not at import: every
# command line paid 5-10 ms for it, and only numpy's path reads it.
_STEP_2: list[int] = []


def _step_2() -> list[int]:
    if not _STEP_2:
        _STEP_2[:] = [0] * 128 + [2 + v if v > 0 else _BAD_LENGTH
                                  for v in ((n >> 1) ^ -(n & 1) for n in range(16384))]
    return _STEP_2


def _scan_vectorized(buf: Any, sections: Sequence[tuple[int, int, int]], view: memoryview, stride: int,
                     row: int) -> bool:
    """Fill the columns of the records of ``sections`` (``(pos, stop, count)`` each, their
    records in consecutive columns from ``row``) if every one parses; False (columns
    unspecified) if one may not, for the record-by-record walk to find it.  One numpy pass for
    all sections: its fixed costs are paid once, not per batch."""
    np = _np
    starts: list[int] = []  # where each record's length prefix is
    add = starts.append
    step_1, step_2 = _STEP_1, _step_2()
    total = 0
    for pos, stop, count in sections:
        end = pos
        try:
            for _ in range(count):
                add(end)
                b = buf[end]
                if b < 128:
                    end += step_1[b]
                    continue
                c = buf[end + 1]
                if c < 128:
                    end += step_2[b + 128 * c]
                    continue
                got = _varint(buf, end, stop, 5)
                if got is None or got[0] <= 0:
                    return False
                end = got[1] + got[0]
        except IndexError:
            return False
        if end != stop:  # a length ran past the section or ended short of it
            return False
        total += count
    if not total:
        return True
    u8 = np.frombuffer(buf, dtype=np.uint8)
    starts_a = np.array(starts, dtype=np.int64)
    # A record ends where the next one starts, the last of each section where the section does.
    ends = np.empty(total, dtype=np.int64)
    ends[:-1] = starts_a[1:]
    counts = [count for _, _, count in sections if count]
    ends[np.cumsum(counts) - 1] = [stop for _, stop, count in sections if count]
    prefixes = _varints(u8, starts_a, 5)  # the length prefixes the walk checked: never None
    if prefixes is None:
        return False
    firsts = prefixes[1]
    fields = _fields(u8, firsts + 1, total)  # + 1: the attributes byte, unused since Kafka 0.11
    if fields is None or not _consistent(fields, ends):
        return False
    columns = np.frombuffer(view.cast("B"), dtype=np.int64).reshape(len(FIELDS), stride)
    columns[:, row:row + total] = (*fields, ends)
    return True


def _varints(u8: Any, at: Any, width: int) -> tuple[Any, Any] | None:
    """The zigzag varints at positions ``at`` (at most ``width`` bytes each): (values, positions
    after them); None if one is longer or runs off the buffer.  64-bit arithmetic, as C's."""
    np = _np
    last = len(u8) - 1
    one = u8[np.minimum(at, last)].astype(np.int64)
    more = one >= 0x80
    if not more.any():  # every varint is one byte: the common case for small fields
        return (one >> 1) ^ -(one & 1), at + 1
    two = u8[np.minimum(at + 1, last)].astype(np.int64)
    if not (more & (two >= 0x80)).any():  # none longer than two bytes (up to 8191)
        raw = np.where(more, (one & 0x7F) | (two << 7), one)
        return (raw >> 1) ^ -(raw & 1), at + 1 + more
    idx = at[:, None] + np.arange(width)
    if int(at.max()) > last:
        return None
    np.minimum(idx, last, out=idx)
    b = u8[idx]
    stops = b < 0x80
    if not stops.any(axis=1).all():
        return None
    length = stops.argmax(axis=1) + 1
    if int((at + length).max()) > last + 1:
        return None
    keep = np.arange(width) < length[:, None]
    shifts = np.arange(0, 7 * width, 7, dtype=np.uint64)
    raw = np.where(keep, (b & 0x7F).astype(np.uint64) << shifts, np.uint64(0)).sum(axis=1, dtype=np.uint64)
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, at + length


def _fields(u8: Any, at: Any, n: int) -> tuple[Any, ...] | None:
    """Every field after the length prefixes (``at``: where the timestamp deltas are)."""
    np = _np
    got = _varints(u8, at, 10)  # timestamp delta: a varlong
    if got is None:
        return None
    ts_delta, at = got
    got = _varints(u8, at, 5)
    if got is None:
        return None
    off_delta, at = got
    got = _varints(u8, at, 5)
    if got is None:
        return None
    key_len, key_at = got
    got = _varints(u8, key_at + np.maximum(key_len, 0), 5)
    if got is None:
        return None
    value_len, value_at = got
    got = _varints(u8, value_at + np.maximum(value_len, 0), 5)
    if got is None:
        return None
    header_count, header_at = got
    return ts_delta, off_delta, key_at, key_len, value_at, value_len, header_count, header_at


def _consistent(fields: tuple[Any, ...], ends: Any) -> bool:
    """Whether every record's fields end where its length says (exactly, for a record without
    headers; within it for one with headers, which the caller parses).  The fields follow each
    other, so the last one ending within the record puts every one within it."""
    header_count, header_at = fields[6], fields[7]
    if (header_count < 0).any():
        return False
    no_headers = header_count == 0
    if not _np.array_equal(header_at[no_headers], ends[no_headers]):
        return False
    return bool((header_at[~no_headers] <= ends[~no_headers]).all())
