"""Batch builders and file-poking helpers for the storage tests."""

from __future__ import annotations

from pathlib import Path

from kwire.broker.storage import LogConfig, PartitionLog
from kwire.protocol.records import RecordBatchBuilder, iter_batches, rewrite_base_offset

SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=256, flush_on_roll=True)


def make_batch(n: int = 3, *, ts: int = 1_000, tag: str = "x", value_size: int = 20, ts_step: int = 1) -> bytes:
    """A v2 batch of ``n`` records with distinct values and timestamps ts, ts+step, ..."""
    b = RecordBatchBuilder()
    for i in range(n):
        value = f"{tag}-{i}-".encode().ljust(value_size, b".")
        b.append(f"k{i}".encode(), value, ts + i * ts_step)
    return b.build()


def stored_form(batch: bytes, base_offset: int, leader_epoch: int = 0) -> bytes:
    """What the log must hold for ``batch`` appended at ``base_offset``."""
    buf = bytearray(batch)
    rewrite_base_offset(buf, base_offset, partition_leader_epoch=leader_epoch)
    return bytes(buf)


def read_all(log: PartitionLog, offset: int | None = None, max_bytes: int = 1 << 30) -> bytes:
    start = log.log_start_offset if offset is None else offset
    return b"".join(s.read() for s in log.read(start, max_bytes))


def fill(log: PartitionLog, count: int, *, records: int = 3, ts0: int = 1_000, ts_step: int = 10,
         value_size: int = 20) -> list[tuple[int, int, bytes]]:
    """Append ``count`` batches; returns (base, last, input bytes) of each."""
    out = []
    for i in range(count):
        batch = make_batch(records, ts=ts0 + i * ts_step, tag=f"b{i}", value_size=value_size)
        base, last = log.append(batch, now_ms=ts0 + i * ts_step)
        out.append((base, last, batch))
    return out


def log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    return [(b.base_offset, b.base_offset + b.last_offset_delta) for b in iter_batches(data)]
