"""Kafka's unsigned varints as ``kwire.protocol.primitives`` writes them: LEB128, 7 bits a byte,
least significant first (Kafka's ByteUtils.writeUnsignedVarint)."""

from __future__ import annotations

import pytest

from kwire.protocol.primitives import read_uvarint, read_uvarlong, uvarint, varint, varlong


def _leb128(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@pytest.mark.parametrize("n", [0, 1, 127, 128, 129, 255, 300, 8191, 8192, 16383, 16384, 16385,
                               2**21 - 1, 2**21, 2**28 - 1, 2**31 - 1, 2**32 - 1])
def test_uvarint_at_the_byte_boundaries(n):
    encoded = uvarint(n)
    assert encoded == _leb128(n)
    assert read_uvarint(encoded, 0) == (n, len(encoded))


def test_every_value_of_one_and_two_bytes():
    # The one-byte values come from a table and the two-byte ones are made on demand: both
    # must be exactly what the loop writes.
    for n in range(1 << 15):
        assert uvarint(n) == _leb128(n), n
    assert len(uvarint(127)) == 1 and len(uvarint(128)) == 2 and len(uvarint(16384)) == 3


def test_long_values_and_zigzag():
    assert read_uvarlong(uvarint(2**63 - 1), 0) == (2**63 - 1, 9)
    assert varint(-1) == b"\x01" and varint(1) == b"\x02" and varint(-65) == b"\x81\x01"
    assert varlong(-(2**63)) == _leb128(2**64 - 1)


def test_negative_is_refused():
    with pytest.raises(ValueError, match="cannot hold -1"):
        uvarint(-1)
