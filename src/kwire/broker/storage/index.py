"""Kafka's sparse segment indexes: ``.index`` (offset -> file position) and ``.timeindex``.

Both are append-only files of fixed-size big-endian entries, mirrored in memory as lists so
lookups are a bisect.  Kafka mmaps preallocated files instead; plain appends keep this simple
and the entries are sparse (one per ``index_interval_bytes`` of log), so the lists stay small.

Offsets are stored relative to the segment's base offset (int32), as in Kafka; that is why a
segment must roll before its offsets span more than 2^31-1.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path

__all__ = ["OffsetIndex", "TimeIndex", "INT32_MAX"]

INT32_MAX = 0x7FFFFFFF


class _IndexFile:
    """An append-only file of fixed-size entries with an in-memory copy."""

    _ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        # O_APPEND: entries only ever go at the end; truncation uses ftruncate.  Opened without
        # O_CREAT first, which tells whether it existed (no stat of its own).
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND)
            self.existed = True
        except FileNotFoundError:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self.existed = False
        raw = _read_all(self._fd)
        # A torn trailing entry is ignored here and reported by sanity_check().
        self._torn_bytes = len(raw) % self._ENTRY.size
        self._entries = [e for e in self._ENTRY.iter_unpack(raw[:len(raw) - self._torn_bytes])]

    def __len__(self) -> int:
        return len(self._entries)

    def _write(self, entry: tuple) -> None:
        os.write(self._fd, self._ENTRY.pack(*entry))
        self._entries.append(entry)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        os.ftruncate(self._fd, 0)
        self._entries.clear()
        self._torn_bytes = 0

    def _truncate_entries(self, keep: int) -> None:
        if keep < len(self._entries):
            del self._entries[keep:]
            os.ftruncate(self._fd, keep * self._ENTRY.size)

    def _truncate_from(self, field: int, limit: int) -> None:
        """Drop the last entries whose ``field`` is ``limit`` or more (every index keeps its
        entries in ascending order of the field its truncations go by)."""
        entries = self._entries
        keep = len(entries)
        while keep and entries[keep - 1][field] >= limit:
            keep -= 1
        self._truncate_entries(keep)

    def flush(self) -> None:
        os.fsync(self._fd)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def sanity_check(self) -> str | None:
        """A description of what is wrong with the loaded entries, or None."""
        if self._torn_bytes:
            return f"{self.path.name}: {self._torn_bytes} trailing bytes do not make a whole entry"
        return None


class OffsetIndex(_IndexFile):
    """Entries ``(relative offset int32, position int32)``: the batch whose base offset is
    ``base_offset + relative offset`` starts at ``position`` in the ``.log`` file."""

    _ENTRY = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        self._write((offset - self.base_offset, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below ``offset``; (base, 0) if none.

        The batch holding ``offset`` starts at or after that position.
        """
        i = bisect.bisect_right(self._entries, (offset - self.base_offset, INT32_MAX)) - 1
        if i < 0:
            return self.base_offset, 0
        rel, pos = self._entries[i]
        return self.base_offset + rel, pos

    @property
    def last_position(self) -> int:
        return self._entries[-1][1] if self._entries else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past ``position`` (the log was cut there)."""
        self._truncate_from(1, position)

    def sanity_check(self, log_size: int | None = None) -> str | None:
        problem = super().sanity_check()
        if problem:
            return problem
        prev_rel = prev_pos = -1
        for rel, pos in self._entries:
            if rel <= prev_rel or pos <= prev_pos or rel < 0:
                return f"{self.path.name}: entry ({rel}, {pos}) does not increase after ({prev_rel}, {prev_pos})"
            if log_size is not None and pos >= log_size:
                return f"{self.path.name}: entry ({rel}, {pos}) points past the {log_size}-byte log"
            prev_rel, prev_pos = rel, pos
        return None


class TimeIndex(_IndexFile):
    """Entries ``(timestamp int64, relative offset int32)``: every record up to (and in) the
    batch at ``base_offset + relative offset`` has a timestamp <= ``timestamp``, which is the
    largest seen so far.  An entry is only added when the maximum grows."""

    _ENTRY = struct.Struct(">qi")

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp < 0:
            return
        if self._entries and timestamp <= self._entries[-1][0]:
            return
        self._write((timestamp, offset - self.base_offset))

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry."""
        if not self._entries:
            return None
        ts, rel = self._entries[-1]
        return ts, self.base_offset + rel

    def lookup_before(self, timestamp: int) -> int | None:
        """Offset of the last entry with a timestamp strictly below ``timestamp``, or None.

        Every record at or before that entry's batch is older than ``timestamp``, so a search
        for the first record at or after ``timestamp`` can start from that batch.
        """
        i = bisect.bisect_left(self._entries, (timestamp, -1)) - 1
        return None if i < 0 else self.base_offset + self._entries[i][1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries naming ``offset`` or later."""
        self._truncate_from(1, offset - self.base_offset)

    def sanity_check(self, next_offset: int | None = None) -> str | None:
        problem = super().sanity_check()
        if problem:
            return problem
        prev_ts, prev_rel = -1, -1
        for ts, rel in self._entries:
            if ts <= prev_ts or rel < prev_rel or rel < 0:
                return f"{self.path.name}: entry ({ts}, {rel}) does not increase after ({prev_ts}, {prev_rel})"
            if next_offset is not None and self.base_offset + rel >= next_offset:
                return f"{self.path.name}: entry ({ts}, {rel}) names an offset past the log end {next_offset}"
            prev_ts, prev_rel = ts, rel
        return None


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks, pos = [], 0
    while pos < size:
        chunk = os.pread(fd, size - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)
