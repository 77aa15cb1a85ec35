"""The log cleaner's dedupe map: key hash -> offset of the key's latest record (Kafka's
SkimpyOffsetMap).

Kafka stores a 16-byte MD5 of each key and an 8-byte offset in a fixed buffer of
``log.cleaner.dedupe.buffer.size`` bytes, filled to at most ``log.cleaner.io.buffer.load.factor``
(0.9).  kwire keeps the same accounting (24 bytes an entry, the same load factor) over a dict,
so a buffer of a given size holds as many keys here as in Kafka: when the dirty part of a log
has more keys than that, one pass cleans what fits and the next pass goes on from there.
Two keys with the same hash would collide (Kafka accepts the same risk with MD5).
"""

from __future__ import annotations

import hashlib

__all__ = ["OffsetMap", "ENTRY_BYTES", "LOAD_FACTOR"]

_HASH_BYTES = 16  # MD5, as Kafka's SkimpyOffsetMap
ENTRY_BYTES = _HASH_BYTES + 8
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default


class OffsetMap:
    """Latest offset per key hash, bounded by ``buffer_bytes`` like Kafka's map."""

    def __init__(self, buffer_bytes: int, *, load_factor: float = LOAD_FACTOR):
        slots = buffer_bytes // ENTRY_BYTES
        self.capacity = max(1, int(slots * load_factor))
        self._offsets: dict[bytes, int] = {}
        # The last offset taken into the map (Kafka's latestOffset): records after it were not
        # looked at, so the cleaner keeps them whatever their key.
        self.latest_offset = -1

    @staticmethod
    def hash_key(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def free(self) -> int:
        """How many more keys fit."""
        return self.capacity - len(self._offsets)

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[self.hash_key(key)] = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 if it is not in the map."""
        return self._offsets.get(self.hash_key(key), -1)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1
