"""Records of an exchange: record batches are decompressed to count records and uncompressed bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kwire.protocol import ProtocolError
from kwire.protocol.records import HEADER_SIZE, decompress, iter_batches
from kwire.protocol.records.batch_header import COMPRESSION_MASK
from kwire.protocol.records.walk import MIN_RECORD_SIZE

from ..exchange import Exchange

if TYPE_CHECKING:
    from .flow import KafkaFlow

_CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


def _summarize_records(data) -> tuple[int, int, int, str | None]:
    """(data records, uncompressed bytes, bitmask of codecs, error) of a records blob.

    Compressed batches are decompressed: their uncompressed size is only known that way, and a
    payload that does not decompress is a corrupt batch.  Control batches (transaction markers)
    count no records, as a consumer sees none.  On a corrupt batch the counts cover the batches
    before it and ``error`` says what was wrong.
    """
    records = raw = mask = 0
    try:
        for batch in iter_batches(data):
            codec = batch.attributes & COMPRESSION_MASK  # the same bits in every format
            mask |= 1 << codec
            if batch.magic == 2:
                count = batch.record_count
                _, start, end, _ = batch.records_section()  # decompressed if the batch is
                payload = end - start
                if count < 0 or count * MIN_RECORD_SIZE > payload:
                    return records, raw, mask, f"batch at offset {batch.base_offset} claims {count} records " \
                                               f"in {payload} bytes"
                raw += HEADER_SIZE + payload
                if not batch.is_control:
                    records += count
            elif codec:  # a legacy wrapper message: its value is the compressed inner message set
                # (records() decompresses it again; magic 0/1 traffic is rare enough not to matter)
                inner = decompress(codec, batch.value or b"")
                records += len(batch.records())
                raw += batch.size_in_bytes - len(batch.value or b"") + len(inner)
            else:
                records += 1
                raw += batch.size_in_bytes
    except ProtocolError as e:
        return records, raw, mask, str(e)
    return records, raw, mask, None


class _RecordStats:
    """Records, bytes and codecs summed over the partitions of one exchange."""

    __slots__ = ("mask", "uncompressed", "errors")

    def __init__(self):
        self.mask = 0
        self.uncompressed = 0
        self.errors: list[str] = []

    def add(self, data) -> tuple[int, int]:
        """(records, wire bytes) of one partition's records blob."""
        if not data:
            return 0, 0
        n, raw, mask, error = _summarize_records(data)
        self.mask |= mask
        self.uncompressed += raw
        if error is not None:
            self.errors.append(error)
        return n, len(data)

    def store(self, flow: KafkaFlow, ex: Exchange, frame: int, side: str) -> None:
        if self.mask:
            ex.details["codecs"] = [_CODEC_NAMES[c] for c in range(5) if self.mask >> c & 1]
            ex.details["uncompressed_bytes"] = self.uncompressed
        for error in self.errors:
            flow._warn(frame, "corrupt_records", f"{ex.api} {side} (correlation id {ex.correlation_id}): {error}")
