"""OP_COMPRESSED: the original message unpacked (snappy, zlib, zstd), bounded by uncompressedSize."""

from __future__ import annotations

import zlib

import cramjam
import zstandard

from .message import Message, _Malformed
from .wire import _COMPRESSED_FIELDS, _HEADER, COMPRESSORS, OP_COMPRESSED


def _uncompress(data: bytes, msg: Message, max_size: int) -> bytes:
    """The original message inside an OP_COMPRESSED: its header rebuilt, its body unpacked."""
    if len(data) < 25:
        raise _Malformed("OP_COMPRESSED shorter than its fixed fields")
    original, size, compressor_id = _COMPRESSED_FIELDS.unpack_from(data, 16)
    msg.opcode = original
    msg.compressor = COMPRESSORS.get(compressor_id, f"unknown ({compressor_id})")
    if original == OP_COMPRESSED:
        raise _Malformed("OP_COMPRESSED inside OP_COMPRESSED")
    if compressor_id not in COMPRESSORS:
        raise _Malformed(f"unknown compressorId {compressor_id}")
    if not 0 <= size <= max_size - 16:
        raise _Malformed(f"uncompressedSize {size} is out of bounds (0..{max_size - 16})")
    payload = memoryview(data)[25:]
    try:
        body = _UNCOMPRESS[compressor_id](payload, size)
    except _Malformed:
        raise
    except Exception as e:  # each codec has its own error type
        raise _Malformed(f"{msg.compressor} data does not decompress: {e}") from e
    if len(body) > size:
        raise _Malformed(f"{msg.compressor} data unpacks to more than uncompressedSize {size}")
    if len(body) < size:
        msg.problems.append(("compression", f"{msg.compressor} data unpacks to {len(body)} bytes, "
                                            f"uncompressedSize says {size}"))
    return _HEADER.pack(16 + len(body), msg.request_id, msg.response_to, original) + body


def _snappy_declared_size(payload) -> int:
    """A raw snappy block starts with its uncompressed length as a varint."""
    result = shift = 0
    for byte in bytes(payload[:5]):
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
    raise _Malformed("snappy block has no valid length")


def _unsnappy(payload, size: int) -> bytes:
    declared = _snappy_declared_size(payload)
    if declared > size:  # checked first: the decoder allocates what the block declares
        raise _Malformed(f"snappy block declares {declared} bytes, more than uncompressedSize {size}")
    return bytes(cramjam.snappy.decompress_raw(bytes(payload)))


def _unzlib(payload, size: int) -> bytes:
    return zlib.decompressobj().decompress(payload, size + 1)  # one byte more tells an overrun


def _unzstd(payload, size: int) -> bytes:
    # A forged frame header must not make the decoder set aside a huge window: allow what a
    # one-shot compression of ``size`` bytes uses, and at least a streaming compressor's default.
    window = max(1 << 23, 1 << max(size - 1, 1).bit_length())
    reader = zstandard.ZstdDecompressor(max_window_size=window).stream_reader(bytes(payload))
    parts = []
    total = 0
    while total <= size:
        part = reader.read(size + 1 - total)
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


_UNCOMPRESS = {0: lambda payload, size: bytes(payload[:size + 1]), 1: _unsnappy, 2: _unzlib, 3: _unzstd}
