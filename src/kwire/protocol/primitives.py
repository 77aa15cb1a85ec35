"""Kafka's variable-length integers and other primitive helpers shared by the codec and records.

Reading functions take ``(buf, pos)`` and return ``(value, new_pos)``; they raise
``DecodeError`` on truncated or over-long input, never ``IndexError``.
"""

from __future__ import annotations

import struct

from .errors import DecodeError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

# What the readers take: bytes, a bytearray or a memoryview of bytes (indexing gives an int).
Buffer = bytes | bytearray | memoryview


def _read_unsigned(buf: Buffer, pos: int, max_shift: int, what: str) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise DecodeError(f"truncated {what}", offset=pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > max_shift:
            raise DecodeError(f"{what} longer than {max_shift // 7 + 1} bytes", offset=pos)


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 varint of at most 5 bytes (Kafka's UNSIGNED_VARINT, 32 bits)."""
    return _read_unsigned(buf, pos, 28, "varint")


def read_uvarlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 varint of at most 10 bytes (64 bits)."""
    return _read_unsigned(buf, pos, 63, "varlong")


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed varint (VARINT)."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n, pos = read_uvarint(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed varlong (VARLONG)."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n, pos = read_uvarlong(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


# One-byte encodings (0..127: most of what Kafka writes, lengths and deltas).  Only these are a
# table: one of all two-byte values (16k entries) took 10-25 ms to build at import, paid by every
# command line, while a two-byte encoding is cheap to make when it is wanted.
_UVARINT_1 = [bytes((n,)) for n in range(128)]


def uvarint(n: int) -> bytes:
    """Encode an unsigned varint."""
    if n < 128:
        if n < 0:
            raise ValueError(f"unsigned varint cannot hold {n}")
        return _UVARINT_1[n]
    if n < 16384:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n: int) -> bytes:
    """Encode a zigzag signed varint (32-bit range)."""
    if not -0x80000000 <= n <= 0x7FFFFFFF:
        raise ValueError(f"varint out of range: {n}")
    return uvarint((n << 1) ^ (n >> 31))


def varlong(n: int) -> bytes:
    """Encode a zigzag signed varlong (64-bit range)."""
    if not -0x8000000000000000 <= n <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of range: {n}")
    return uvarint((n << 1) ^ (n >> 63))


def varint_size(n: int) -> int:
    """Bytes ``varint(n)`` takes (zigzag)."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size
