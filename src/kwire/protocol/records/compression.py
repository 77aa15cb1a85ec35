"""Compression codecs used by Kafka record batches and legacy message sets.

Codec ids are the ones stored in the low three bits of batch/message attributes.
Every decoder here is bounded: before handing bytes to cramjam/zlib it works out (from the
format's own framing) how large the output can possibly be, and refuses anything above
``max_size`` with ``CorruptRecordError``.  Library exceptions never escape: they are turned
into ``CorruptRecordError`` naming the codec.
"""

from __future__ import annotations

import threading
import warnings
import zlib
from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeAlias

    # A payload: bytes, or a view of a batch's bytes (a Fetch answer, a segment's mapping).
    Bytes: TypeAlias = bytes | bytearray | memoryview

from ..errors import CorruptRecordError, DecodeError, EncodeError
from ..primitives import INT32, read_uvarint

# cramjam and zstandard are imported by the functions that use them, not with this module: every
# command line imports the record layer, most never compress (the two cost its start-up ~5 ms).

__all__ = [
    "Compression",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "compress",
    "decompress",
    "xxh32",
]


class Compression(IntEnum):
    """Kafka compression codec ids (attributes bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


#: Largest decompressed payload accepted by default (per batch / wrapper message).  Kafka's
#: own limits are on the compressed size (message.max.bytes, default ~1 MiB); 256 MiB leaves
#: room for very compressible data while still refusing decompression bombs.
DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

_WHAT = "compressed records"

# ----------------------------------------------------------------------------------------
# xxh32, needed only for the 1-byte LZ4 frame header checksum (inputs of 2..18 bytes), so a
# plain Python version is fast enough and avoids a runtime dependency on xxhash.

_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (pure Python; meant for short inputs such as LZ4 frame descriptors)."""
    data = bytes(data)
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        limit = n - 16
        while pos <= limit:
            a, b, c, d = int.from_bytes(data[pos:pos + 4], "little"), int.from_bytes(data[pos + 4:pos + 8], "little"), \
                int.from_bytes(data[pos + 8:pos + 12], "little"), int.from_bytes(data[pos + 12:pos + 16], "little")
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + n) & _M32
    while pos + 4 <= n:
        word = int.from_bytes(data[pos:pos + 4], "little")
        acc = (_rotl((acc + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        acc = (_rotl((acc + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


# ----------------------------------------------------------------------------------------
# gzip

def _gzip_compress(data: Bytes, level: int | None = None) -> bytes:
    # Level 6 is Java's Deflater default, which Kafka producers use unless configured; Kafka's
    # compression.gzip.level -1 means that default too.
    c = zlib.compressobj(6 if level is None or level < 0 else level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _gzip_decompress(data: Bytes, max_size: int) -> bytes:
    out = []
    total = 0
    rest = bytes(data)
    if not rest:
        raise CorruptRecordError("gzip: empty payload", what=_WHAT)
    try:
        while True:
            d = zlib.decompressobj(31)
            # max_length bounds the allocation: zlib stops once max_size + 1 bytes are produced.
            chunk = d.decompress(rest, max_size + 1 - total)
            total += len(chunk)
            if total > max_size or d.unconsumed_tail:
                raise CorruptRecordError(f"gzip: decompressed size exceeds the maximum of {max_size} bytes",
                                         what=_WHAT)
            if not d.eof:
                raise CorruptRecordError("gzip: truncated stream", what=_WHAT)
            out.append(chunk)
            rest = d.unused_data
            # Java's GZIPInputStream reads concatenated members and ignores anything after the
            # last one that does not start with the gzip magic; do the same.
            if not rest.startswith(b"\x1f\x8b"):
                break
    except zlib.error as exc:
        raise CorruptRecordError(f"gzip: {exc}", what=_WHAT) from None
    return out[0] if len(out) == 1 else b"".join(out)


# ----------------------------------------------------------------------------------------
# snappy: raw blocks, or the xerial framing that Java's snappy-java writes

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + INT32.pack(1) + INT32.pack(1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
# A snappy copy element of 3 bytes yields at most 64 bytes, literals yield 1 byte per byte, so
# no valid raw block expands by more than 64/3 < 22 times.
_SNAPPY_MAX_RATIO = 22


def _snappy_compress(data: Bytes) -> bytes:
    import cramjam

    data = bytes(data)
    parts = [_XERIAL_HEADER]
    raw = cramjam.snappy.compress_raw
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(raw(data[i:i + _XERIAL_BLOCK]))
        parts.append(INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw_len(block: bytes, offset: int) -> int:
    try:
        n, _ = read_uvarint(block, 0)
    except DecodeError:
        raise CorruptRecordError("snappy: bad length preamble", what=_WHAT, offset=offset) from None
    if n > len(block) * _SNAPPY_MAX_RATIO:
        raise CorruptRecordError(f"snappy: length preamble {n} is more than {len(block)} compressed bytes can hold",
                                 what=_WHAT, offset=offset)
    return n


def _snappy_decompress(data: Bytes, max_size: int) -> bytes:
    import cramjam

    data = bytes(data)
    try:
        if len(data) >= 16 and data.startswith(_XERIAL_MAGIC):
            # xerial framing: magic, int32 version, int32 min-compatible version (both ignored,
            # some writers get their byte order wrong), then int32-length-prefixed raw blocks.
            pos = 16
            end = len(data)
            total = 0
            blocks = []
            while pos < end:
                if end - pos < 4:
                    raise CorruptRecordError("snappy: truncated xerial block length", what=_WHAT, offset=pos)
                (size,) = INT32.unpack_from(data, pos)
                pos += 4
                if size < 0 or size > end - pos:
                    raise CorruptRecordError(f"snappy: xerial block length {size} exceeds the {end - pos} bytes left",
                                             what=_WHAT, offset=pos - 4)
                block = data[pos:pos + size]
                total += _snappy_raw_len(block, pos)
                if total > max_size:
                    raise CorruptRecordError(f"snappy: decompressed size exceeds the maximum of {max_size} bytes",
                                             what=_WHAT, offset=pos)
                blocks.append(block)
                pos += size
            raw = cramjam.snappy.decompress_raw
            return b"".join([bytes(raw(b)) for b in blocks])
        n = _snappy_raw_len(data, 0)
        if n > max_size:
            raise CorruptRecordError(f"snappy: decompressed size {n} exceeds the maximum of {max_size} bytes",
                                     what=_WHAT)
        return bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"snappy: {exc}", what=_WHAT) from None


# ----------------------------------------------------------------------------------------
# LZ4 frame format.  We write frames ourselves (independent 64 KiB blocks, no checksums, no
# content size) because that is exactly what Java's KafkaLZ4BlockOutputStream writes and what
# every Kafka version reads.  Magic-v0 messages use the "broken" header checksum of Kafka
# 0.8/0.9, which hashed the 4 magic bytes together with the frame descriptor.

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60  # version 01, independent blocks
_LZ4_BD = 0x40  # 64 KiB maximum block size
_LZ4_BLOCK = 64 * 1024
_LZ4_HEADER = _LZ4_MAGIC + bytes([_LZ4_FLG, _LZ4_BD, (xxh32(bytes([_LZ4_FLG, _LZ4_BD])) >> 8) & 0xFF])
_LZ4_HEADER_LEGACY = _LZ4_MAGIC + bytes([_LZ4_FLG, _LZ4_BD, (xxh32(_LZ4_MAGIC + bytes([_LZ4_FLG, _LZ4_BD])) >> 8) & 0xFF])
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
# An LZ4 sequence of k+3 input bytes can produce at most 19 + 255k output bytes, and literals
# one byte per byte: no block expands more than 255 times.
_LZ4_MAX_RATIO = 255


# Kafka's compression.lz4.level default: at it Kafka uses lz4's fast compressor, at any other level
# the high-compression one with that level (Lz4BlockOutputStream).
LZ4_DEFAULT_LEVEL = 9


def _lz4_compress(data: Bytes, legacy_checksum: bool, level: int | None = None) -> bytes:
    import cramjam

    data = bytes(data)
    parts = [_LZ4_HEADER_LEGACY if legacy_checksum else _LZ4_HEADER]
    high = _lz4_high_compressor(level) if level is not None and level != LZ4_DEFAULT_LEVEL else None
    if high is None:
        def block_compress(chunk: bytes) -> Any:
            return cramjam.lz4.compress_block(chunk, store_size=False)
    else:
        def block_compress(chunk: bytes) -> Any:
            return high(chunk, mode="high_compression", compression=level, store_size=False)
    for i in range(0, len(data), _LZ4_BLOCK):
        chunk = data[i:i + _LZ4_BLOCK]
        block = bytes(block_compress(chunk))
        if len(block) >= len(chunk):
            # Incompressible: store as-is, flagged by the high bit of the block size.
            parts.append((len(chunk) | 0x80000000).to_bytes(4, "little"))
            parts.append(chunk)
        else:
            parts.append(len(block).to_bytes(4, "little"))
            parts.append(block)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_high_compressor(level: int) -> Callable[..., bytes] | None:
    """lz4's high-compression block compressor (the ``lz4`` package: cramjam's block API has no
    such mode), or None with a warning, once, where that package is missing."""
    try:
        import lz4.block  # type: ignore[import-untyped]  # (no type information shipped)
    except ImportError:
        if not _lz4_warned:
            _lz4_warned.append(level)
            warnings.warn(f"lz4 level {level} needs the 'lz4' package (pip install lz4); compressing with lz4's "
                          "fast mode instead", RuntimeWarning, stacklevel=3)
        return None
    compressor: Callable[..., bytes] = lz4.block.compress
    return compressor


_lz4_warned: list[int] = []


def _lz4_decompress(data: Bytes, max_size: int) -> bytes:
    import cramjam

    data = bytes(data)
    end = len(data)
    pos = 0
    total_bound = 0
    frames = []
    while True:
        start = pos
        if end - pos < 7:
            raise CorruptRecordError("lz4: truncated frame header", what=_WHAT, offset=pos)
        if data[pos:pos + 4] != _LZ4_MAGIC:
            raise CorruptRecordError("lz4: bad frame magic", what=_WHAT, offset=pos)
        flg = data[pos + 4]
        bd = data[pos + 5]
        if flg >> 6 != 1 or flg & 0x02 or bd & 0x8F:
            raise CorruptRecordError(f"lz4: unsupported frame descriptor FLG={flg:#04x} BD={bd:#04x}",
                                     what=_WHAT, offset=pos + 4)
        if flg & 0x01:
            raise CorruptRecordError("lz4: frames with a dictionary id are not supported", what=_WHAT, offset=pos + 4)
        block_checksum = bool(flg & 0x10)
        has_content_size = bool(flg & 0x08)
        content_checksum = bool(flg & 0x04)
        block_max = _LZ4_BLOCK_MAX.get(bd >> 4)
        if block_max is None:
            raise CorruptRecordError(f"lz4: invalid block maximum size code {bd >> 4}", what=_WHAT, offset=pos + 5)
        desc_end = pos + 6 + (8 if has_content_size else 0)
        if desc_end + 1 > end:
            raise CorruptRecordError("lz4: truncated frame header", what=_WHAT, offset=pos)
        hc = data[desc_end]
        good_hc = (xxh32(data[pos + 4:desc_end]) >> 8) & 0xFF
        legacy = False
        if hc != good_hc:
            if hc != (xxh32(data[pos:desc_end]) >> 8) & 0xFF:
                raise CorruptRecordError("lz4: frame header checksum mismatch", what=_WHAT, offset=desc_end)
            # Kafka 0.8/0.9 (magic v0) checksum, computed over the magic too: accept it and
            # patch the byte so the standard decoder accepts the frame.
            legacy = True
        content_size = int.from_bytes(data[pos + 6:desc_end], "little") if has_content_size else None
        pos = desc_end + 1
        bound = 0
        while True:
            if end - pos < 4:
                raise CorruptRecordError("lz4: truncated block size (no end mark)", what=_WHAT, offset=pos)
            size = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
            if size == 0:
                break
            stored = size & 0x80000000
            size &= 0x7FFFFFFF
            if size > block_max:
                raise CorruptRecordError(f"lz4: block of {size} bytes exceeds the frame's {block_max}-byte maximum",
                                         what=_WHAT, offset=pos - 4)
            pos += size + (4 if block_checksum else 0)
            if pos > end:
                raise CorruptRecordError("lz4: truncated block", what=_WHAT, offset=pos - size)
            bound += size if stored else min(block_max, size * _LZ4_MAX_RATIO)
        if content_checksum:
            pos += 4
            if pos > end:
                raise CorruptRecordError("lz4: truncated content checksum", what=_WHAT, offset=pos - 4)
        if content_size is not None:
            if content_size > bound:
                raise CorruptRecordError(f"lz4: content size {content_size} is more than the blocks can hold",
                                         what=_WHAT, offset=start + 6)
            bound = content_size
        total_bound += bound
        if total_bound > max_size:
            raise CorruptRecordError(f"lz4: decompressed size exceeds the maximum of {max_size} bytes",
                                     what=_WHAT, offset=start)
        frame = data if start == 0 and pos == end else data[start:pos]  # no copy for the usual single frame
        if legacy:
            frame = frame[:desc_end - start] + bytes([good_hc]) + frame[desc_end - start + 1:]
        frames.append(frame)
        if pos == end:
            break
    try:
        return b"".join([bytes(cramjam.lz4.decompress(f)) for f in frames])
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"lz4: {exc}", what=_WHAT) from None


# ----------------------------------------------------------------------------------------
# zstd.  The decoder is preceded by a walk over frame and block headers that bounds the
# output: raw and RLE blocks state their size, compressed blocks produce at most 128 KiB.

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 * 1024


# Compression goes through the zstandard package: measured 6% faster than cramjam's zstd on
# Kafka-sized batches, and compression is over half of the encode time of a zstd batch
# (benchmarks/RESULTS.md).  Compressor objects must not be shared between threads.
_zstd_local = threading.local()


def _zstd_compress(data: Bytes, level: int | None = None) -> bytes:
    import zstandard

    if level is not None and level != 3:
        return zstandard.ZstdCompressor(level=level).compress(data)
    compressor = getattr(_zstd_local, "compressor", None)
    if compressor is None:
        # Level 3 is zstd's and Kafka's default.
        compressor = _zstd_local.compressor = zstandard.ZstdCompressor(level=3)
    return compressor.compress(data)


def _zstd_bound(data: bytes, max_size: int) -> int:
    end = len(data)
    pos = 0
    total = 0
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("zstd: truncated frame", what=_WHAT, offset=pos)
        magic = int.from_bytes(data[pos:pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame: magic, uint32 size, content
            if end - pos < 8:
                raise CorruptRecordError("zstd: truncated skippable frame", what=_WHAT, offset=pos)
            size = int.from_bytes(data[pos + 4:pos + 8], "little")
            if size > end - pos - 8:
                raise CorruptRecordError("zstd: truncated skippable frame", what=_WHAT, offset=pos)
            pos += 8 + size
            continue
        if data[pos:pos + 4] != _ZSTD_MAGIC:
            raise CorruptRecordError("zstd: bad frame magic", what=_WHAT, offset=pos)
        if end - pos < 6:
            raise CorruptRecordError("zstd: truncated frame header", what=_WHAT, offset=pos)
        # Frame header: descriptor byte, [window descriptor], [dictionary id], [content size].
        fhd = data[pos + 4]
        pos += 5
        fcs_flag = fhd >> 6
        single_segment = fhd & 0x20
        if fhd & 0x08:
            raise CorruptRecordError("zstd: reserved frame header bit set", what=_WHAT, offset=pos - 1)
        window = None
        if not single_segment:
            wd = data[pos]
            pos += 1
            base = 1 << (10 + (wd >> 3))
            window = base + (base >> 3) * (wd & 7)
        pos += (0, 1, 2, 4)[fhd & 3]  # dictionary id
        fcs_len = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        if pos + fcs_len > end:
            raise CorruptRecordError("zstd: truncated frame header", what=_WHAT, offset=pos)
        fcs = None
        if fcs_len:
            fcs = int.from_bytes(data[pos:pos + fcs_len], "little") + (256 if fcs_len == 2 else 0)
            pos += fcs_len
        if window is None:  # a single-segment frame: its content size (always there) is its window
            window = fcs if fcs is not None else 0
        # The decoder allocates a window-sized buffer: a forged window must not exceed the limit.
        if window > max_size and (fcs is None or fcs > max_size):
            raise CorruptRecordError(f"zstd: window of {window} bytes exceeds the maximum of {max_size} bytes",
                                     what=_WHAT, offset=pos)
        block_max = min(window, _ZSTD_BLOCK_MAX)
        bound = 0
        while True:
            if end - pos < 3:
                raise CorruptRecordError("zstd: truncated block header", what=_WHAT, offset=pos)
            header = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            pos += 3
            block_type = (header >> 1) & 3
            size = header >> 3
            if block_type == 0:  # raw
                bound += size
                pos += size
            elif block_type == 1:  # RLE: one byte repeated `size` times
                bound += size
                pos += 1
            elif block_type == 2:  # compressed: at most min(window, 128 KiB) out
                if size > _ZSTD_BLOCK_MAX:
                    raise CorruptRecordError("zstd: compressed block larger than 128 KiB", what=_WHAT,
                                             offset=pos - 3)
                bound += block_max
                pos += size
            else:
                raise CorruptRecordError("zstd: reserved block type", what=_WHAT, offset=pos - 3)
            if pos > end:
                raise CorruptRecordError("zstd: truncated block", what=_WHAT, offset=pos)
            if header & 1:
                break
        if fhd & 0x04:  # content checksum
            pos += 4
            if pos > end:
                raise CorruptRecordError("zstd: truncated content checksum", what=_WHAT, offset=pos - 4)
        if fcs is not None:
            if fcs > bound:
                raise CorruptRecordError(f"zstd: frame content size {fcs} is more than its blocks can hold",
                                         what=_WHAT, offset=pos)
            bound = fcs
        total += bound
        if total > max_size:
            raise CorruptRecordError(f"zstd: decompressed size exceeds the maximum of {max_size} bytes",
                                     what=_WHAT, offset=pos)
    return total


def _zstd_decompress(data: Bytes, max_size: int) -> bytes:
    import cramjam

    data = bytes(data)
    if not data:
        raise CorruptRecordError("zstd: empty payload", what=_WHAT)
    _zstd_bound(data, max_size)
    try:
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"zstd: {exc}", what=_WHAT) from None


# ----------------------------------------------------------------------------------------

def compress(codec: int, data: Bytes, *, legacy_lz4_checksum: bool = False, level: int | None = None) -> bytes:
    """Compress ``data`` as Kafka stores it for ``codec``.

    Snappy is written in the xerial framing Java uses; LZ4 as a frame with independent 64 KiB
    blocks.  ``legacy_lz4_checksum`` writes the Kafka 0.8/0.9 header checksum required in
    magic-v0 messages.  ``level``: the codec's level as Kafka's compression.<codec>.level
    settings give it (None: Kafka's default; snappy has none).
    """
    if codec == 0:
        return bytes(data)
    if codec == 1:
        return _gzip_compress(data, level)
    if codec == 2:
        return _snappy_compress(data)
    if codec == 3:
        return _lz4_compress(data, legacy_lz4_checksum, level)
    if codec == 4:
        return _zstd_compress(data, level)
    raise EncodeError(f"unknown compression codec {codec!r}", what=_WHAT)


def decompress(codec: int, data: Bytes, *, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress a Kafka-compressed payload, refusing output larger than ``max_size`` bytes.

    Raises ``CorruptRecordError`` for any malformed, truncated or oversized payload.  LZ4 frames
    with either the standard or the Kafka 0.8/0.9 header checksum are accepted; snappy may be
    raw or xerial-framed.
    """
    if codec == 0:
        return bytes(data)
    if codec == 1:
        return _gzip_decompress(data, max_size)
    if codec == 2:
        return _snappy_decompress(data, max_size)
    if codec == 3:
        return _lz4_decompress(data, max_size)
    if codec == 4:
        return _zstd_decompress(data, max_size)
    raise CorruptRecordError(f"unknown compression codec {codec!r}", what=_WHAT)
