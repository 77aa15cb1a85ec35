"""The log cleaner's dedupe map: key hash -> offset of the key's latest record (Kafka's
SkimpyOffsetMap).

As Kafka's, the map is one buffer of ``log.cleaner.dedupe.buffer.size`` bytes (per cleaner
thread) of 24-byte slots, a 16-byte MD5 of the key and an 8-byte offset, filled to at most
``log.cleaner.io.buffer.load.factor`` (0.9) with open addressing.  So the setting bounds the
cleaner's memory for real, and a buffer of a given size holds as many keys as in Kafka: when the
dirty part of a log has more keys than that, one pass cleans what fits and the next goes on.
Two keys with the same MD5 would collide (Kafka accepts the same risk).  An all-zero hash marks
an empty slot (a key whose MD5 is all zeros is taken as the hash with its last bit set).
"""

from __future__ import annotations

import hashlib
import mmap
import struct

__all__ = ["OffsetMap", "ENTRY_BYTES", "LOAD_FACTOR"]

_HASH_BYTES = 16  # MD5, as Kafka's SkimpyOffsetMap
ENTRY_BYTES = _HASH_BYTES + 8
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default
_EMPTY = bytes(_HASH_BYTES)
_OFFSET = struct.Struct(">q")
_SLOT = struct.Struct(">Q")


class OffsetMap:
    """Latest offset per key hash in a fixed buffer of ``buffer_bytes``, like Kafka's map."""

    def __init__(self, buffer_bytes: int, *, load_factor: float = LOAD_FACTOR):
        self.slots = max(1, buffer_bytes // ENTRY_BYTES)
        self.capacity = max(1, int(self.slots * load_factor))
        # An anonymous mapping: zero pages from the kernel, backed by memory only as keys land
        # on them (a bytearray would write all of it up front); ``close()`` gives it back.
        self._buf = mmap.mmap(-1, self.slots * ENTRY_BYTES)
        self._size = 0
        # The last offset taken into the map (Kafka's latestOffset): records after it were not
        # looked at, so the cleaner keeps them whatever their key.
        self.latest_offset = -1

    @staticmethod
    def hash_key(key: bytes) -> bytes:
        digest = hashlib.md5(key, usedforsecurity=False).digest()
        return digest if digest != _EMPTY else digest[:-1] + b"\x01"

    def __len__(self) -> int:
        return self._size

    @property
    def free(self) -> int:
        """How many more keys fit."""
        return self.capacity - self._size

    def _find(self, digest: bytes) -> tuple[int, bool]:
        """(byte position of the slot holding ``digest`` or of the empty slot where it goes,
        whether it is there).  Linear probing from the hash's first 8 bytes."""
        buf, slots = self._buf, self.slots
        slot = _SLOT.unpack_from(digest)[0] % slots
        for _ in range(slots):
            pos = slot * ENTRY_BYTES
            stored = buf[pos:pos + _HASH_BYTES]
            if stored == digest:
                return pos, True
            if stored == _EMPTY:
                return pos, False
            slot = slot + 1 if slot + 1 < slots else 0
        raise OverflowError("offset map is full")  # never: put() stops at the load factor

    def put(self, key: bytes, offset: int) -> None:
        digest = self.hash_key(key)
        pos, found = self._find(digest)
        if not found:
            if self._size >= self.slots:
                raise OverflowError("offset map is full")
            self._buf[pos:pos + _HASH_BYTES] = digest
            self._size += 1
        _OFFSET.pack_into(self._buf, pos + _HASH_BYTES, offset)

    def close(self) -> None:
        self._buf.close()

    def __enter__(self) -> OffsetMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 if it is not in the map."""
        pos, found = self._find(self.hash_key(key))
        return _OFFSET.unpack_from(self._buf, pos + _HASH_BYTES)[0] if found else -1
