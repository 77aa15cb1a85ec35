"""Storing batches in the topic's codec: compression.type other than ``producer``.

Kafka's LogValidator rebuilds a batch whose codec differs from the topic's (``uncompressed``
stores it uncompressed).  A v2 batch's records are encoded the same whether compressed or not,
so the records section is decompressed and compressed again as a whole: every header field
(producer id, epoch, base sequence, timestamps, offset deltas, record count) stays as sent, only
the codec bits, the length and the CRC change.  Control batches (transaction markers) are never
compressed and stay as they are.
"""

from __future__ import annotations

from kwire.protocol.errors import CorruptMessageError, CorruptRecordError, MessageTooLargeError
from kwire.protocol.records import HEADER_SIZE, Compression, compress, decompress
from kwire.protocol.records.batch_header import COMPRESSION_MASK, build_batch, read_attributes, read_header

from .batch_header import BatchHeader

__all__ = ["CODECS", "recompress", "target_codec"]

# compression.type -> the codec batches are stored in (Kafka's BrokerCompressionType); "producer"
# is absent: batches stay as the producer sent them.
CODECS: dict[str, Compression] = {
    "uncompressed": Compression.NONE, "none": Compression.NONE, "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
}



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
    if all(h.is_control or read_attributes(data, h.position) & COMPRESSION_MASK == codec for h in headers):
        return None
    view = memoryview(data)
    out = bytearray()
    rebuilt: list[BatchHeader] = []
    for h in headers:
        start, end = h.position, h.position + h.size
        fields = read_header(view, start)
        current = fields.compression_codec
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
        at = len(out)
        out += build_batch(fields._replace(attributes=(fields.attributes & ~COMPRESSION_MASK) | codec), section)
        rebuilt.append(h._replace(position=at, size=size))
    return out, rebuilt
