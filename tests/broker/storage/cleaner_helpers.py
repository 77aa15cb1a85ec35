"""Builders and readers for the log cleaner's tests."""

from __future__ import annotations

from pathlib import Path

from kwire.broker.storage import Cleaner, CleanerConfig, LogConfig, PartitionLog
from kwire.protocol.records import RecordBatch, RecordBatchBuilder, iter_batches

# Small segments, every batch indexed, compaction on, nothing held back by ratio or lag.
COMPACT = LogConfig(segment_bytes=1024, index_interval_bytes=64, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.0, delete_retention_ms=1_000)
NOW = 10_000  # batches carry timestamps near 1_000; the injected clock starts here


def kv(pairs, *, ts: int = 1_000, compression: int = 0, pid: int = -1, epoch: int = -1, seq: int = -1,
       transactional: bool = False) -> bytes:
    """One batch of ``(key, value)`` pairs (str or None), timestamps ts, ts+1, ..."""
    b = RecordBatchBuilder(compression=compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           transactional=transactional)
    for i, (k, v) in enumerate(pairs):
        b.append(None if k is None else k.encode(), None if v is None else v.encode(), ts + i)
    return b.build()


def put(log: PartitionLog, pairs, **kw) -> tuple[int, int]:
    return log.append(kv(pairs, **kw), now_ms=kw.get("ts", 1_000))


def batches(log: PartitionLog) -> list[RecordBatch]:
    data = b"".join(s.read() for s in log.read(log.log_start_offset, 1 << 30))
    return list(iter_batches(data))


def records(log: PartitionLog) -> list[tuple[int, str | None, str | None]]:
    """Every data record the log holds: (offset, key, value)."""
    out = []
    for batch in batches(log):
        if batch.is_control:
            continue
        for r in batch.records():
            if r.offset >= log.log_start_offset:
                out.append((r.offset, r.key and r.key.decode(), r.value and r.value.decode()))
    return out


def latest(recs) -> dict[str, tuple[int, str | None]]:
    """key -> (offset, value) of each key's last record."""
    out: dict[str, tuple[int, str | None]] = {}
    for offset, key, value in recs:
        out[key] = (offset, value)
    return out


def clean(log: PartitionLog, now_ms: int = NOW, **config):
    """One clean of ``log`` as the cleaner thread would do it, whatever its dirty ratio."""
    return Cleaner(CleanerConfig(**config)).clean(log, now_ms=now_ms)


def file_names(directory: Path) -> list[str]:
    return sorted(p.name for p in Path(directory).iterdir())
