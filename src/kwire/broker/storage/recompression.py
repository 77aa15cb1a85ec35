"""Storing batches in the topic's codec: compression.type other than ``producer``.

Kafka's LogValidator rebuilds a batch whose codec differs from the topic's (``uncompressed``
stores it uncompressed).  A v2 batch's records are encoded the same whether compressed or not,
so the records section is decompressed and compressed again as a whole: every header field
(producer id, epoch, base sequence, timestamps, offset deltas, record count) stays as sent, only
the codec bits, the length and the CRC change.  Control batches (transaction markers) are never
compressed and stay as they are.
"""

from __future__ import annotations

from crc32c import crc32c

from kwire.protocol.errors import CorruptMessageError, CorruptRecordError, MessageTooLargeError
from kwire.protocol.records import HEADER_SIZE, HEADER_STRUCT, Compression, compress, decompress

from .batch_header import BatchHeader

__all__ = ["CODECS", "recompress", "target_codec"]

# compression.type -> the codec batches are stored in (Kafka's BrokerCompressionType); "producer"
# is absent: batches stay as the producer sent them.
CODECS: dict[str, Compression] = {
    "uncompressed": Compression.NONE, "none": Compression.NONE, "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
}

_CODEC_MASK = 0x07
_CRC_AT, _ATTRIBUTES_AT = 17, 21  # the CRC covers from the attributes to the end
_LENGTH_BEFORE = 12  # base offset and length: not counted in the batch length
_CRC_FIELD, _LENGTH_FIELD, _ATTRIBUTES_FIELD = 4, 1, 5


def target_codec(compression_type: str) -> Compression | None:
    """The codec a topic stores batches in, None for ``producer`` (keep the producer's)."""
    return CODECS.get(compression_type)


def recompress(data: bytes | bytearray | memoryview, headers: list[BatchHeader], codec: Compression, *,
               max_message_bytes: int, level: int | None = None) -> tuple[bytearray, list[BatchHeader]] | None:
    """``data``'s batches (validated, described by ``headers``) with every data batch in
    ``codec``, and their headers with the new positions and sizes; None when every batch is in
    ``codec`` already (nothing to copy).

    Raises CorruptMessageError for records that do not decompress, MessageTooLargeError for a
    rebuilt batch over max.message.bytes (Kafka checks the batch as stored too)."""
    if all(h.is_control or data[h.position + _ATTRIBUTES_AT + 1] & _CODEC_MASK == codec for h in headers):
        return None
    view = memoryview(data)
    out = bytearray()
    rebuilt: list[BatchHeader] = []
    for h in headers:
        start, end = h.position, h.position + h.size
        fields = list(HEADER_STRUCT.unpack_from(view, start))
        current = fields[_ATTRIBUTES_FIELD] & _CODEC_MASK
        if h.is_control or current == codec:
            rebuilt.append(h._replace(position=len(out)))
            out += view[start:end]
            continue
        try:
            records = decompress(current, view[start + HEADER_SIZE:end])
        except CorruptRecordError as exc:
            raise CorruptMessageError(f"batch at position {start}: {exc}") from None
        section = compress(codec, records, level=level)  # compression.<codec>.level
        size = HEADER_SIZE + len(section)
        if size > max_message_bytes:
            raise MessageTooLargeError(f"batch at position {start} is {size} bytes stored in {codec.name.lower()}, "
                                       f"over max.message.bytes {max_message_bytes}")
        fields[_LENGTH_FIELD] = size - _LENGTH_BEFORE
        fields[_ATTRIBUTES_FIELD] = (fields[_ATTRIBUTES_FIELD] & ~_CODEC_MASK) | codec
        fields[_CRC_FIELD] = 0
        at = len(out)
        out += HEADER_STRUCT.pack(*fields)
        out += section
        crc = crc32c(memoryview(out)[at + _ATTRIBUTES_AT:])
        out[at + _CRC_AT:at + _ATTRIBUTES_AT] = crc.to_bytes(4, "big")
        rebuilt.append(h._replace(position=at, size=size))
    return out, rebuilt
