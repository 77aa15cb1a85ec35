"""Which partition a produced record goes to, as the Java client and librdkafka choose it.

A keyed record must land where a Java or librdkafka producer would put it, or consumers that rely
on "same key, same partition" break when producers are mixed.  The hash functions:

* ``murmur2`` is the Java client's ``Utils.murmur2`` (MurmurHash2, seed 0x9747b28c, signed 32-bit
  result); the Java default partitioner and librdkafka's ``murmur2*`` take
  ``(murmur2(key) & 0x7fffffff) % partitions`` (``java_partition``).
* ``consistent`` is librdkafka's CRC-32 partitioner: ``crc32(key) % partitions``.

``Partitioner`` applies the configured strategy (the producer's ``partitioner`` setting, named as
in librdkafka):

=====================  ===========================  =====================================================
name                   keyed record                 key None (and, for consistent_random, an empty key)
=====================  ===========================  =====================================================
``murmur2_random``     murmur2 (Java's default)     sticky partition (KIP-480)
``consistent_random``  crc32 (librdkafka's default)  sticky partition
``murmur2``            murmur2                      murmur2 of the empty key, as librdkafka
``consistent``         crc32                        crc32 of the empty key = partition 0, as librdkafka
``random``             a random partition           a random partition
=====================  ===========================  =====================================================

Sticky partitioning: keyless records of a topic all go to one partition until the producer calls
``on_new_batch(topic, partition)`` because that partition's batch was closed (full or sent); the
next keyless record then picks another partition at random among the available ones.  Batches get
bigger than when spreading records one by one, at no cost in balance over time.  The Java producer
does this (KIP-480); librdkafka switches its sticky partition every ``sticky.partitioning.linger.ms``
(10 ms) instead, which the producer's batching makes nearly equivalent.  ``murmur2_random``
hashes an empty (not None) key like Java and librdkafka; ``consistent_random`` treats it as
keyless like librdkafka.

A record whose caller chose a partition never reaches the partitioner: the producer sends it
there as is.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import ProducerConfig

__all__ = ["PARTITIONERS", "Partitioner", "consistent", "java_partition", "murmur2"]

PARTITIONERS = ("murmur2_random", "consistent_random", "murmur2", "consistent", "random")

# struct's "<nI" unpackers for keys of up to 32 words (128 bytes), built once: a key is hashed
# per record, and one C call unpacking all its words beats indexing bytes in Python.
_UNPACK = [struct.Struct(f"<{n}I").unpack_from for n in range(33)]


def _murmur2_u32(data: bytes) -> int:
    """Java's ``Utils.murmur2`` as an unsigned 32-bit int.

    Python ints do not wrap, so each product is masked back to 32 bits; the constants are
    literals (seed 0x9747b28c, m 0x5bd1e995, r 24) because a literal is cheaper than a global
    in this loop.
    """
    n = len(data)
    h = 0x9747B28C ^ n
    words = n >> 2
    for k in _UNPACK[words](data) if words <= 32 else struct.unpack_from(f"<{words}I", data):
        k = k * 0x5BD1E995 & 0xFFFFFFFF
        h = (h * 0x5BD1E995 ^ (k ^ k >> 24) * 0x5BD1E995) & 0xFFFFFFFF
    if n & 3:
        # The 1-3 trailing bytes, little-endian, as Java's fall-through switch xors them in.
        h = (h ^ int.from_bytes(data[n & ~3:], "little")) * 0x5BD1E995 & 0xFFFFFFFF
    h ^= h >> 13
    h = h * 0x5BD1E995 & 0xFFFFFFFF
    return h ^ h >> 15


def murmur2(data: bytes) -> int:
    """The Java client's ``Utils.murmur2(data)``: a signed 32-bit int, bit for bit."""
    h = _murmur2_u32(data)
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def java_partition(key: bytes, num_partitions: int) -> int:
    """The partition the Java client (and librdkafka's murmur2 partitioners) give ``key``."""
    return (_murmur2_u32(key) & 0x7FFFFFFF) % num_partitions


def consistent(key: bytes, num_partitions: int) -> int:
    """librdkafka's ``consistent`` partitioner: CRC-32 (zlib's) of the key, modulo the partitions."""
    return zlib.crc32(key) % num_partitions


def _compiled_java_partition() -> Callable[[bytes, int], int]:
    """``java_partition`` through the compiled helper (``murmur2_partitions``) if it is built,
    else ``java_partition`` itself."""
    from kwire.protocol.records.bulk import murmur2_partitions

    if murmur2_partitions((b"",), 1) is None:
        return java_partition

    def partition(key: bytes, num_partitions: int) -> int:
        got = murmur2_partitions((key,), num_partitions)
        return java_partition(key, num_partitions) if got is None else got[0]  # None: a key not bytes

    return partition


class Partitioner:
    """Chooses the partition of each record that has none; one per producer.

    Not thread-safe: the producer calls it from its event loop.  ``rng`` is for tests.
    """

    def __init__(self, name: str = "murmur2_random", *, ignore_keys: bool = False,
                 rng: random.Random | None = None) -> None:
        if name not in PARTITIONERS:
            raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}, got {name!r}")
        self.name = name
        # partitioner.ignore.keys: every record is keyless; keyless records then follow the rule
        # of the partitioner (sticky, random, or the empty key's hash for murmur2/consistent).
        self.ignore_keys = ignore_keys
        self._rng = rng or random.Random()
        self._hash: Callable[[bytes, int], int] | None = (
            java_partition if name.startswith("murmur2") else consistent if name.startswith("consistent") else None)
        # One keyed record's partition: murmur2 from the compiled helper where it is built (a
        # tenth of the Python hash's time, which was the largest per-record cost of a keyed
        # producer), the same function otherwise.
        self._hash_one = _compiled_java_partition() if self._hash is java_partition else self._hash
        self._hash_none = name in ("murmur2", "consistent")      # a None key hashes as b""
        self._empty_is_keyless = name == "consistent_random"    # librdkafka: keylen 0 counts as no key
        self._sticky_keyless = name.endswith("_random")
        self._sticky: dict[str, int] = {}   # topic -> its current sticky partition
        self._closed: dict[str, int] = {}   # topic -> the partition whose batch just closed: not picked next

    @classmethod
    def from_config(cls, config: ProducerConfig) -> Partitioner:
        return cls(config.partitioner, ignore_keys=config.partitioner_ignore_keys)

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  available: Sequence[int] | None = None) -> int:
        """The partition of a record with ``key`` for ``topic``, which has ``num_partitions``.

        ``available``: the partitions that have a leader now (None: all).  Keyless and random
        choices keep to them (to all partitions when none is available); a keyed record goes to
        its key's partition whatever its state, so that the key keeps its partition.
        """
        if num_partitions < 1:
            raise ValueError(f"{topic!r} has no partitions to choose from")
        hash_ = self._hash
        if hash_ is not None:
            if key is not None and not self.ignore_keys:
                if key or not self._empty_is_keyless:
                    return self._hash_one(key, num_partitions)  # type: ignore[misc]  # set where _hash is
            elif self._hash_none:
                return hash_(b"", num_partitions)
        if self._sticky_keyless:
            current = self._sticky.get(topic)
            if current is not None and current < num_partitions and (available is None or current in available):
                return current
            # First record, a closed batch, or the sticky partition went away: choose again.
            current = self._pick(num_partitions, available, avoid=self._closed.pop(topic, current))
            self._sticky[topic] = current
            return current
        return self._pick(num_partitions, available)

    def partition_many(self, topic: str, keys: Sequence[bytes | None] | None, count: int, num_partitions: int,
                       available: Sequence[int] | None = None) -> list[int] | None:
        """Each of ``count`` records' partitions for a bulk call, by the same rules as
        ``partition``; ``keys`` their keys, or None for keyless records.  None when the records are keyless and the
        strategy is sticky: the caller then asks ``partition(topic, None, ...)`` once per batch
        and reports each closed batch with ``on_new_batch``, as the per-record path does."""
        if keys is None or self.ignore_keys:
            if self._sticky_keyless:
                return None
            keys = [None] * count
        elif self._hash is java_partition and not self.ignore_keys and num_partitions >= 1:
            from kwire.protocol.records.bulk import murmur2_partitions

            compiled = murmur2_partitions(keys, num_partitions)  # None: not built, or a key not bytes
            if compiled is not None:
                return compiled
        return [self.partition(topic, key, num_partitions, available) for key in keys]

    def on_new_batch(self, topic: str, partition: int) -> None:
        """The producer closed the batch of ``topic``/``partition``: if that is the sticky
        partition, the next keyless record of the topic goes elsewhere (Java's onNewBatch)."""
        if self._sticky.get(topic) == partition:
            del self._sticky[topic]
            self._closed[topic] = partition

    def _pick(self, num_partitions: int, available: Sequence[int] | None, avoid: int | None = None) -> int:
        """A random partition among ``available`` (all when None or empty), other than ``avoid``
        when there is a choice."""
        candidates: Sequence[int] = available if available else range(num_partitions)
        count = len(candidates)
        if avoid is None or count < 2 or avoid not in candidates:
            return candidates[self._rng.randrange(count)]
        # Uniform over the others: draw among count - 1 slots and step over avoid's index.
        i = self._rng.randrange(count - 1)
        return candidates[i + 1 if i >= candidates.index(avoid) else i]
