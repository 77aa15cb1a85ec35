"""What the log cleaner keeps of one stored batch (Kafka's MemoryRecords.filterTo with the
cleaner's RecordFilter, and CleanedTransactionMetadata for transactions).

For every batch of the segments being cleaned, ``BatchFilter.filter`` returns the bytes to
write in its place, or None to drop it:

* a data record stays if it is the latest of its key (the dedupe map says so), or lies past
  what the map covers; a record without a key goes; a tombstone (null value) stays until the
  batch's delete horizon (KIP-534) has passed, the horizon being set, as in Kafka 3+, the first
  time a clean keeps the tombstone: ``now + delete.retention.ms`` as the batch's base timestamp
  with the DELETE_HORIZON attributes bit;
* records of aborted transactions go (the aborts come from the ``.txnindex``); the cleaned
  segment's ``.txnindex`` keeps an abort only while its marker stays for data of it (Kafka's
  cleaned index), so an entry never outlives the marker that closes it;
* a commit/abort marker stays while data of its transaction is still in the log; once none is
  left it gets a delete horizon, and goes once that has passed;
* the last batch of every producer still known to the producer state stays, emptied if none
  of its records is kept, so its sequence numbers survive (Kafka's RETAIN_EMPTY); for a producer
  whose last entry is a marker of a new epoch, its markers of that epoch (they fence);
* a batch that keeps all its records (and needs no horizon) is copied as it is; otherwise it is
  rebuilt in its own codec with its base offset, producer id/epoch, base sequence, leader epoch
  and timestamp type.  Unlike Kafka, a rebuilt batch keeps its last offset delta: the batch still
  spans its original offsets, so readers move past the removed ones and the producer's last
  sequence is the one it wrote.  Also unlike Kafka, which takes the first kept record's
  timestamp, it keeps its base timestamp (unless a delete horizon is set now): every kept
  record's offset and timestamp deltas stay right, so the kept records are copied byte for byte
  (headers included) instead of being decoded and encoded again.  Record timestamps are the same.

Which records a batch keeps is found by a walk of its records in offset_map.py (compiled when
the helper is built), which reads keys, deltas and null values only; records are decoded into
objects only for control batches and for a batch getting its delete horizon.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from kwire.protocol.primitives import varint, varlong
from kwire.protocol.records import ControlRecordType, RecordBatch, compress
from kwire.protocol.records.batch_header import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    TRANSACTIONAL_BIT,
    RecordBatchHeader,
    build_batch,
)

from .offset_map import OffsetMap
from .txn_index import AbortedTxn

__all__ = ["BatchFilter", "TransactionTracker", "FilterStats", "encode_batch", "empty_batch"]



class TransactionTracker:
    """Which transactions the batches read so far belong to (Kafka's CleanedTransactionMetadata).

    Fed the aborted transactions of the range being read, in order of first offset, it says of
    each data batch whether it belongs to an aborted transaction, and of each marker whether it
    can go: an abort marker once the pass saw no data of its transaction, a commit marker once
    the pass saw no batch of it.
    """

    def __init__(self, aborted: Sequence[AbortedTxn] = ()):
        self._pending = deque(sorted(aborted, key=lambda t: t.first_offset))
        # producer id -> [its abort, whether data of it was seen]
        self._aborted: dict[int, list] = {}
        self._committed: set[int] = set()
        # The aborts whose markers stay because data of theirs was seen in this pass: the only
        # ones the cleaned segments' .txnindex keep (Kafka's cleanedIndex).  Once its data is
        # gone an abort leaves the index, before its marker goes: an entry never outlives its
        # marker, which is what closes it for the next pass.
        self.kept_aborts: list[AbortedTxn] = []

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            txn = pending.popleft()
            self._aborted[txn.producer_id] = [txn, False]

    def on_batch(self, batch: RecordBatch) -> bool:
        """Whether the data batch belongs to an aborted transaction (its records go)."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        pid = batch.producer_id
        if pid in self._aborted:
            self._aborted[pid][1] = True
            return True
        self._committed.add(pid)
        return False

    def on_marker(self, batch: RecordBatch, kind: int | None) -> bool:
        """Whether the control batch can go (its transaction has no data left)."""
        self._consume_up_to(batch.last_offset)
        pid = batch.producer_id
        if kind == ControlRecordType.ABORT:
            txn, seen = self._aborted.pop(pid, (None, False))
            if seen:
                self.kept_aborts.append(txn)
            return not seen
        if kind == ControlRecordType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return kind is None  # an empty control batch can go; other control records stay


class FilterStats:
    """What a clean did, for the cleaner's log line."""

    __slots__ = ("records_read", "records_removed", "batches_rewritten", "min_delete_horizon")

    def __init__(self) -> None:
        self.records_read = self.records_removed = self.batches_rewritten = 0
        self.min_delete_horizon: int | None = None  # earliest horizon still ahead in what was written

    def horizon(self, ms: int) -> None:
        if self.min_delete_horizon is None or ms < self.min_delete_horizon:
            self.min_delete_horizon = ms


class BatchFilter:
    """Filters the batches of one clean, in log order (the transaction tracking relies on it)."""

    def __init__(self, offset_map: OffsetMap, *, now_ms: int, delete_retention_ms: int,
                 aborted: Sequence[AbortedTxn], last_batch_of_producer: Mapping[int, int],
                 marker_epoch_of_producer: Mapping[int, int] | None = None, stats: FilterStats | None = None):
        self.map = offset_map
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.txns = TransactionTracker(aborted)
        # producer id -> last offset of its last data batch (Kafka's activeProducers lastDataOffset)
        self.last_batch_of_producer = last_batch_of_producer
        # producer id -> epoch of producers whose last entry is a marker (no data batch since)
        self.marker_epoch_of_producer = marker_epoch_of_producer or {}
        self.stats = stats or FilterStats()

    def _keep_record(self, batch: RecordBatch, offset: int, key: bytes | None, value: bytes | None) -> bool:
        # Kafka's Cleaner.shouldRetainRecord.
        if offset > self.map.latest_offset:
            return True  # past what the map covers: not known to be superseded
        if key is None:
            return False
        if offset < self.map.get(key):
            return False  # a later record of the key exists
        if value is not None:
            return True
        horizon = batch.delete_horizon_ms
        return horizon is None or self.now_ms < horizon

    def filter(self, raw: bytes | memoryview, batch: RecordBatch | None = None) -> bytes | memoryview | None:
        """The bytes to keep in place of the stored batch ``raw`` (``raw`` itself when it is
        kept whole), or None to drop it.  ``batch``: ``RecordBatch(raw)`` if the caller has it."""
        if batch is None:
            batch = RecordBatch(raw)
        if batch.is_control:
            return self._filter_control(raw, batch)
        stats = self.stats
        h = batch.header_fields
        count = h[12]
        stats.records_read += count
        discard = self.txns.on_batch(batch)
        horizon = batch.delete_horizon_ms
        # Wholly superseded (every record has a later one of its key): known from the offsets
        # alone, without reading the records.
        if not discard and not self.map.none_latest(h[0], h[0] + h[6]):
            buf, start, end, _ = batch.records_section()
            kept, tombstones, max_ts_delta, spans = self.map.keep_records(
                buf, start, end, count, h[0], horizon is None or self.now_ms < horizon)
        else:
            kept = 0
        if discard or not kept:
            stats.records_removed += count
            if not self._retain_empty(batch):
                return None
            stats.batches_rewritten += 1
            return empty_batch(batch)
        stats.records_removed += count - kept
        if tombstones and horizon is None:
            # The first clean keeping a tombstone sets the batch's delete horizon (KIP-534): the
            # base timestamp becomes the horizon, so every record's timestamp delta changes.
            return self._rebuild_with_horizon(batch)
        if horizon is not None and tombstones:
            stats.horizon(horizon)
        if kept == count:
            return raw  # every record stays: the batch as it is (Kafka copies such batches too)
        # Some records go: the kept ones are copied byte for byte (their deltas are from the
        # batch's base offset and base timestamp, which stay) into a batch of the same codec.
        stats.batches_rewritten += 1
        payload = b"".join([buf[spans[i]:spans[i + 1]] for i in range(0, len(spans), 2)])
        codec = h.compression_codec
        if codec:
            payload = compress(codec, payload)
        # LogAppendTime: every record has the batch's time.
        max_ts = h.max_timestamp if h.is_log_append_time else h.base_timestamp + max_ts_delta
        return _pack(h.base_offset, batch, h.attributes, h.last_offset_delta, h.base_timestamp, max_ts, kept, payload,
                     producer=True)

    def _retain_empty(self, batch: RecordBatch) -> bool:
        """Kafka's isBatchLastRecordOfProducer: the batch holding an active producer's last
        sequence stays, or, when its last entry is a marker, its markers of that epoch."""
        pid = batch.producer_id
        if pid < 0:
            return False
        if pid in self.last_batch_of_producer:
            return self.last_batch_of_producer[pid] == batch.last_offset
        return batch.is_control and self.marker_epoch_of_producer.get(pid) == batch.producer_epoch

    def _filter_control(self, raw: bytes | memoryview, batch: RecordBatch) -> bytes | memoryview | None:
        stats = self.stats
        records = batch.records()
        stats.records_read += len(records)
        horizon = batch.delete_horizon_ms
        kind = records[0].type if records else None
        can_discard = self.txns.on_marker(batch, kind)
        # Kafka: a marker goes only once its delete horizon has passed; until then it gets one.
        if can_discard and horizon is not None and horizon <= self.now_ms:
            stats.records_removed += len(records)
            if not self._retain_empty(batch):
                return None
            stats.batches_rewritten += 1
            return empty_batch(batch)
        if not records:
            if not self._retain_empty(batch):
                return None
            stats.batches_rewritten += 1
            return empty_batch(batch)
        if not (can_discard and horizon is None):
            if horizon is not None:
                stats.horizon(horizon)
            return raw
        horizon = self.now_ms + self.delete_retention_ms
        stats.horizon(horizon)
        stats.batches_rewritten += 1
        return encode_batch(batch, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records],
                            delete_horizon_ms=horizon)

    def _rebuild_with_horizon(self, batch: RecordBatch) -> bytes:
        """The batch with its kept records re-encoded around a new delete horizon (rare: once per
        batch holding tombstones, on the first clean that keeps them)."""
        kept = [r for r in batch.records() if self._keep_record(batch, r.offset, r.key, r.value)]
        horizon = self.now_ms + self.delete_retention_ms
        self.stats.horizon(horizon)
        self.stats.batches_rewritten += 1
        return encode_batch(batch, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kept],
                            delete_horizon_ms=horizon)


def _encode_headers(headers) -> bytes:
    if not headers:
        return b"\x00"
    parts = [varint(len(headers))]
    for key, value in headers:
        kb = key.encode("utf-8") if isinstance(key, str) else key
        parts += (varint(len(kb)), kb)
        parts += (varint(-1),) if value is None else (varint(len(value)), value)
    return b"".join(parts)


def encode_batch(original: RecordBatch, records: Sequence[tuple], *, delete_horizon_ms: int | None) -> bytes:
    """``original`` with only ``records`` ((offset, timestamp, key, value, headers), in order),
    in its own codec.  With a delete horizon the base timestamp is the horizon and the
    DELETE_HORIZON bit is set (KIP-534); record timestamps are deltas from the base either way."""
    base_offset = original.base_offset
    attributes = original.attributes & ~DELETE_HORIZON_BIT
    base_ts = records[0][1] if delete_horizon_ms is None else delete_horizon_ms
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
    body = []
    max_ts = -1
    for offset, timestamp, key, value, headers in records:
        rec = b"".join((b"\x00", varlong(timestamp - base_ts), varint(offset - base_offset),
                        varint(-1) if key is None else varint(len(key)), key or b"",
                        varint(-1) if value is None else varint(len(value)), value or b"",
                        _encode_headers(headers)))
        body += (varint(len(rec)), rec)
        max_ts = max(max_ts, timestamp)
    payload = b"".join(body)
    codec = original.attributes & COMPRESSION_MASK
    if codec:
        payload = compress(codec, payload)
    if original.timestamp_type == 1:  # LogAppendTime: every record has the batch's time
        max_ts = original.max_timestamp
    return _pack(base_offset, original, attributes, original.last_offset_delta, base_ts, max_ts, len(records),
                 payload, producer=True)


def empty_batch(original: RecordBatch, *, keep_producer: bool = True) -> bytes:
    """A batch with ``original``'s offsets and no record (Kafka's writeEmptyHeader): what stays of
    a producer's last batch, or fills the end of a cleaned segment.  ``keep_producer=False``
    drops the producer fields and the transactional/control bits (a filler owned by nobody)."""
    attributes = original.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_BIT)
    if not keep_producer:
        attributes &= ~(TRANSACTIONAL_BIT | CONTROL_BIT)
    ts = original.max_timestamp
    return _pack(original.base_offset, original, attributes, original.last_offset_delta, ts, ts, 0, b"",
                 producer=keep_producer)


def _pack(base_offset: int, original: RecordBatch, attributes: int, last_offset_delta: int, base_ts: int,
          max_ts: int, count: int, payload: bytes, *, producer: bool) -> bytes:
    pid, epoch, seq = (original.producer_id, original.producer_epoch, original.base_sequence) if producer \
        else (-1, -1, -1)
    return bytes(build_batch(RecordBatchHeader(base_offset, 0, original.partition_leader_epoch, 2, 0, attributes,
                                               last_offset_delta, base_ts, max_ts, pid, epoch, seq, count), payload))
