"""The log cleaner's dedupe map: key hash -> offset of the key's latest record (Kafka's
SkimpyOffsetMap), and the two walks over a batch's records that use it.

As Kafka's, the map is one buffer of ``log.cleaner.dedupe.buffer.size`` bytes (per cleaner
thread) of 24-byte slots, a 16-byte MD5 of the key and an 8-byte offset, filled to at most
``log.cleaner.io.buffer.load.factor`` (0.9) with open addressing.  So the setting bounds the
cleaner's memory for real, and a buffer of a given size holds about as many keys as in Kafka (2/3
at worst, see below): when the dirty part of a log has more keys than that, one pass cleans what
fits and the next goes on.
Two keys with the same MD5 would collide (Kafka accepts the same risk).  An all-zero hash marks
an empty slot (a key whose MD5 is all zeros is taken as the hash with its last bit set).

Unlike Kafka's, the table starts small (``INITIAL_SLOTS``) and doubles as keys come, each
growth allocating the new table while the old one still exists, within the buffer size: old
and new together never exceed it, so the last table is about 2/3 of the buffer (the map holds
about 2/3 of the keys Kafka's would, at worst).  A table sized for the keys there are, not for
the buffer, keeps the probes in the processor's caches and TLB: mapping a log of 10,000 keys
took ~890 ns a record (MD5 included) with a 128 MiB table probed at random on the benchmark's
VM, ~400 ns with a table of 16,384 slots; and its memory is what the keys need.

The walks (``OffsetMap.put_records`` for the map, ``OffsetMap.keep_records`` for the copy) use
only what they need of each record (where it lies, its offset and timestamp deltas, its key,
whether its value is null) without building record objects, and read records through the record
layer's one walk (``kwire.protocol.records.walk``), so they accept and refuse the records every
other reader does.  They run in the compiled helper ``kwire.protocol.records._layout``
(``map_put_v2``, ``map_keep_v2``: the walk's compiled step, MD5 and probing in one loop, without
the GIL, so that the broker's event loop is not kept waiting while the cleaner works) when it is
built.  Without it, the Python functions below do the same on the walk's Python fallback
(``record_columns``), with the same results (the tests run both on fuzzed and corrupt batches),
about 10x slower.
"""

from __future__ import annotations

import hashlib
import mmap
import struct

from kwire.protocol.errors import CorruptRecordError
from kwire.protocol.records.walk import record_columns

try:  # the optional compiled helper (setup.py); without it the same walks run in Python
    from kwire.protocol.records import _layout

    if not hasattr(_layout, "map_put_v2"):  # a build older than the cleaner's functions
        _layout = None
except ImportError:
    _layout = None

__all__ = ["OffsetMap", "ENTRY_BYTES", "LOAD_FACTOR", "has_compiled_walk"]

_HASH_BYTES = 16  # MD5, as Kafka's SkimpyOffsetMap
ENTRY_BYTES = _HASH_BYTES + 8
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default
_EMPTY = bytes(_HASH_BYTES)
_OFFSET = struct.Struct(">q")
_SLOT = struct.Struct(">Q")
_NO_TIMESTAMP_DELTA = -(1 << 63)
INITIAL_SLOTS = 1 << 12  # 96 KiB


def has_compiled_walk() -> bool:
    """Whether the compiled walks are there (else their Python stand-ins do the work)."""
    return _layout is not None


class OffsetMap:
    """Latest offset per key hash in a fixed buffer of ``buffer_bytes``, like Kafka's map.
    ``compiled``: use the compiled walks (default: when built), False for the Python ones."""

    def __init__(self, buffer_bytes: int, *, load_factor: float = LOAD_FACTOR, compiled: bool | None = None):
        self.buffer_bytes = buffer_bytes
        self.max_slots = max(1, buffer_bytes // ENTRY_BYTES)
        self.load_factor = load_factor
        self._size = 0
        self._buf = self._table(min(self.max_slots, INITIAL_SLOTS))
        # The last offset taken into the map (Kafka's latestOffset): records after it were not
        # looked at, so the cleaner keeps them whatever their key.
        self.latest_offset = -1
        # Which offsets of [_bits_from, latest_offset] the map holds (``mark_dirty``): for the
        # copy, a record there is the latest of its key iff its offset is one of them, so its
        # key needs no hashing (Kafka hashes every key again).  b"": none (look keys up).
        self._bits: bytes | bytearray = b""
        self._bits_from = 0
        # Whether the compiled walks release the GIL (see kwire.broker.storage.cleaner).
        self.release_gil = True
        if compiled and _layout is None:
            raise RuntimeError("the compiled helper kwire.protocol.records._layout is not built")
        self.compiled = _layout is not None if compiled is None else compiled

    def _table(self, slots: int) -> mmap.mmap:
        """An empty table of ``slots`` slots, made the current one's size."""
        self.slots = slots
        self.capacity = max(1, int(slots * self.load_factor))
        # An anonymous mapping: zero pages from the kernel (a bytearray would write all of it
        # up front); ``close()`` gives it back.
        return mmap.mmap(-1, slots * ENTRY_BYTES)

    def _grow(self) -> bool:
        """Move the entries into a table twice as big, or as big as the buffer allows with the
        current one beside it; False if it cannot grow."""
        old, old_slots = self._buf, self.slots
        new_slots = min(2 * old_slots, self.max_slots - old_slots)
        if new_slots <= old_slots:
            return False
        new = self._table(new_slots)
        if self.compiled:
            _layout.map_rehash(old, old_slots, new, new_slots)
        else:
            self._buf = new
            for pos in range(0, old_slots * ENTRY_BYTES, ENTRY_BYTES):
                digest = old[pos:pos + _HASH_BYTES]
                if digest != _EMPTY:
                    at, _ = self._find(digest)
                    new[at:at + ENTRY_BYTES] = old[pos:pos + ENTRY_BYTES]
        self._buf = new
        old.close()
        return True

    def mark_dirty(self, start: int) -> bool:
        """Once the map is built from the records of ``[start, latest_offset]``, note which of
        those offsets it holds, for ``keep_records``: one bit per offset, if that bitmap fits in
        the buffer beside the table (else keys are looked up).  Whether it did."""
        n = self.latest_offset - start + 1
        size = (n + 7) // 8
        if n <= 0 or size + self.slots * ENTRY_BYTES > self.buffer_bytes:
            self._bits = b""
            return False
        bits = bytearray(size)
        if self.compiled:
            _layout.map_bitmap(self._buf, self.slots, start, bits)
        else:
            buf, span = self._buf, 8 * size
            for pos in range(0, self.slots * ENTRY_BYTES, ENTRY_BYTES):
                if buf[pos:pos + _HASH_BYTES] != _EMPTY:
                    bit = _OFFSET.unpack_from(buf, pos + _HASH_BYTES)[0] - start
                    if 0 <= bit < span:
                        bits[bit >> 3] |= 1 << (bit & 7)
        self._bits, self._bits_from = bits, start
        return True

    def none_latest(self, first: int, last: int) -> bool:
        """Whether ``mark_dirty`` showed that no offset of ``[first, last]`` is the latest of its
        key: then a batch spanning them keeps none of its records (they are all superseded),
        which the cleaner knows without reading (or decompressing) them."""
        bits, bits_from = self._bits, self._bits_from
        if not bits or first < bits_from or last > self.latest_offset or last < first:
            return False
        a, b = first - bits_from, last - bits_from
        window = int.from_bytes(bits[a >> 3:(b >> 3) + 1], "little") >> (a & 7)
        return not window & ((1 << (b - a + 1)) - 1)

    @staticmethod
    def hash_key(key: bytes) -> bytes:
        digest = hashlib.md5(key, usedforsecurity=False).digest()
        return digest if digest != _EMPTY else digest[:-1] + b"\x01"

    def __len__(self) -> int:
        return self._size

    @property
    def free(self) -> int:
        """How many more keys fit in the table as it is now (it may grow)."""
        return self.capacity - self._size

    def _find(self, digest: bytes) -> tuple[int, bool]:
        """(byte position of the slot holding ``digest`` or of the empty slot where it goes,
        whether it is there; -1 if neither: a full map without it).  Linear probing from the
        hash's first 8 bytes."""
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
        return -1, False

    def put(self, key: bytes, offset: int) -> None:
        if self._size >= self.capacity:
            self._grow()
        digest = self.hash_key(key)
        pos, found = self._find(digest)
        if not found:
            if pos < 0 or self._size >= self.slots:
                raise OverflowError("offset map is full")
            self._buf[pos:pos + _HASH_BYTES] = digest
            self._size += 1
        _OFFSET.pack_into(self._buf, pos + _HASH_BYTES, offset)

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 if it is not in the map."""
        pos, found = self._find(self.hash_key(key))
        return _OFFSET.unpack_from(self._buf, pos + _HASH_BYTES)[0] if found else -1

    def put_records(self, buf, pos: int, stop: int, count: int, base_offset: int, start: int) -> int:
        """Map the keys of the ``count`` v2 records in ``buf[pos:stop]`` (a batch's records section,
        decompressed) whose offsets are at least ``start``, in order, until the map is full
        (Kafka's rule: it holds ``capacity`` keys when the next keyed record comes, and it cannot
        grow).  Returns -1 when all were taken, else the index of the record that found the map
        full (the keys before it stay)."""
        skip = 0
        while True:
            if self.compiled:
                stopped, self._size = _layout.map_put_v2(buf, pos, stop, count, base_offset, start, self._buf,
                                                        self.slots, self.capacity, self._size, skip,
                                                        self.release_gil)
            else:
                stopped = self._put_records_py(buf, pos, stop, count, base_offset, start, skip)
            if stopped < 0 or not self._grow():
                break
            skip = stopped
        if stopped < -1:
            raise CorruptRecordError(f"record {-stopped - 2} of the batch at offset {base_offset} is malformed",
                                     what="record batch v2", path=["records"])
        return stopped

    def keep_records(self, buf, pos: int, stop: int, count: int, base_offset: int,
                     keep_tombstones: bool) -> tuple[int, int, int, list[int]]:
        """Which of the ``count`` v2 records in ``buf[pos:stop]`` a clean keeps (Kafka's
        shouldRetainRecord): a record past ``latest_offset``; else one with a key whose latest
        offset is not after it, a tombstone only if ``keep_tombstones``.  Returns (records kept,
        tombstones among them, the largest timestamp delta among them (-2**63 if none), the
        kept records' byte spans in ``buf`` as a flat list start, end, start, end, ... with
        adjacent records in one span)."""
        if self.compiled:
            result = _layout.map_keep_v2(buf, pos, stop, count, base_offset, self.latest_offset, keep_tombstones,
                                         self._buf, self.slots, self._bits, self._bits_from, self.release_gil)
        else:
            result = self._keep_records_py(buf, pos, stop, count, base_offset, keep_tombstones)
        if result[0] < 0:
            raise CorruptRecordError(f"record {-result[0] - 1} of the batch at offset {base_offset} is malformed",
                                     what="record batch v2", path=["records"])
        return result

    # -- the walks in Python (the compiled helper's stand-ins: same results) ---------------------
    # Both read records through the record layer's walk (its Python fallback, which the compiled
    # walks' step is held to), not a walk of their own.
    def _put_records_py(self, buf, pos: int, stop: int, count: int, base_offset: int, start: int,
                        skip: int) -> int:
        # -1 all taken | index of the record that found the map full | -2 - index of a bad record
        columns, bad = record_columns(buf, pos, stop, count, compiled=False)
        good = count if bad < 0 else bad
        view = memoryview(buf)
        offset_deltas, key_ats, key_lengths = columns[1], columns[2], columns[3]
        for i in range(skip, good):
            key_len = key_lengths[i]
            offset = base_offset + offset_deltas[i]
            if key_len < 0 or offset < start:
                continue
            if self._size >= self.capacity:
                return i
            key_at = key_ats[i]
            self.put(bytes(view[key_at:key_at + key_len]), offset)
        return -1 if bad < 0 else -2 - bad

    def _keep_records_py(self, buf, pos: int, stop: int, count: int, base_offset: int,
                         keep_tombstones: bool) -> tuple[int, int, int, list[int]]:
        columns, bad = record_columns(buf, pos, stop, count, compiled=False)
        if bad >= 0:
            return -1 - bad, 0, 0, []
        latest = self.latest_offset
        bits, bits_from = self._bits, self._bits_from
        bits_end = bits_from + 8 * len(bits)
        kept = tombstones = 0
        max_ts = _NO_TIMESTAMP_DELTA
        spans: list[int] = []
        view = memoryview(buf)
        rec = pos  # where the record starts: where the one before it ends
        for ts_delta, off_delta, key_at, key_len, _, value_len, _, _, end in zip(*columns, strict=True):
            start, rec = rec, end
            offset = base_offset + off_delta
            if offset <= latest:
                if key_len < 0:
                    continue
                if bits_from <= offset < bits_end:
                    bit = offset - bits_from
                    if not bits[bit >> 3] & (1 << (bit & 7)):
                        continue
                elif offset < self.get(bytes(view[key_at:key_at + key_len])):
                    continue
                if value_len < 0 and not keep_tombstones:
                    continue
            kept += 1
            if value_len < 0:
                tombstones += 1
            if ts_delta > max_ts:
                max_ts = ts_delta
            if spans and spans[-1] == start:
                spans[-1] = end
            else:
                spans += (start, end)
        return kept, tombstones, max_ts, spans

    def close(self) -> None:
        self._buf.close()

    def __enter__(self) -> OffsetMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

