"""``Partitioner.partition_many``, the bulk path's partitioning: the same partitions as
``partition`` record by record, and None (a partition per batch) where keyless records stick."""

from __future__ import annotations

import random

import pytest

from kwire.client.partitioner import PARTITIONERS, Partitioner


@pytest.mark.parametrize("name", PARTITIONERS)
@pytest.mark.parametrize("ignore_keys", [False, True])
def test_partition_many_is_partition_record_by_record(name, ignore_keys):
    rng = random.Random(5)
    keys = [None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 20)) for _ in range(500)]
    bulk = Partitioner(name, ignore_keys=ignore_keys, rng=random.Random(1))
    single = Partitioner(name, ignore_keys=ignore_keys, rng=random.Random(1))
    got = bulk.partition_many("t", keys, len(keys), 7)
    if ignore_keys and name.endswith("_random"):
        assert got is None  # every record keyless and sticky: the caller picks a partition per batch
        return
    assert got == [single.partition("t", key, 7) for key in keys]


@pytest.mark.parametrize("name", PARTITIONERS)
def test_keyless_records(name):
    got = Partitioner(name).partition_many("t", None, 50, 5)
    if name.endswith("_random"):
        assert got is None
    elif name == "random":
        assert len(got) == 50 and set(got) <= set(range(5))
    else:  # murmur2 / consistent: the empty key's partition, as librdkafka
        assert got == [Partitioner(name).partition("t", None, 5)] * 50
