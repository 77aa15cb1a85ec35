"""compression.<codec>.level (KIP-390): when compression.type makes the broker rebuild batches, it
compresses them at the topic's level, and consumers read the same records whatever the level."""

from __future__ import annotations

import pytest

from kwire.broker.storage import LogConfig, PartitionLog
from kwire.protocol.records import RecordBatch, RecordBatchBuilder

from .helpers import read_all

NOW = 1_700_000_000_000


def _batch() -> bytes:
    b = RecordBatchBuilder()  # uncompressed, compressible: the levels differ in what they find
    for i in range(400):
        b.append(f"key-{i % 37}".encode(), (f"order {i} for customer {i * 7919 % 1000} " * 6).encode(), NOW + i)
    return b.build()


def _stored(tmp_path, name: str, **settings) -> RecordBatch:
    log = PartitionLog(tmp_path / name, LogConfig(**settings))
    try:
        log.append(_batch(), now_ms=NOW)
        return RecordBatch(read_all(log))
    finally:
        log.close()


@pytest.mark.parametrize("codec, low, high", [("gzip", 1, 9), ("zstd", 1, 19), ("lz4", 9, 17)])
def test_the_topic_level_decides_how_hard_the_broker_compresses(tmp_path, codec, low, high):
    field = f"compression_{codec}_level"
    fast = _stored(tmp_path, "fast", compression_type=codec, **{field: low})
    hard = _stored(tmp_path, "hard", compression_type=codec, **{field: high})
    assert fast.compression.name.lower() == hard.compression.name.lower() == codec
    assert hard.size_in_bytes < fast.size_in_bytes
    original = [(r.offset, r.key, r.value, r.timestamp) for r in RecordBatch(_batch()).records()]
    for batch in (fast, hard):
        assert [(r.offset, r.key, r.value, r.timestamp) for r in batch.records()] == original


def test_kafkas_default_levels(tmp_path):
    config = LogConfig()
    assert (config.compression_gzip_level, config.compression_lz4_level, config.compression_zstd_level) == (-1, 9, 3)
    assert config.compression_level("snappy") is None
