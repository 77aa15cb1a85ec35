"""Stored batches as a Fetch response's records value, sent with sendfile (see kwire.protocol.splice)."""

from __future__ import annotations

from kwire.protocol.splice import SplicedBytes

from .segment import FileSlice

__all__ = ["FileRecords"]


class FileRecords(SplicedBytes):
    """Consecutive ranges of segment files (a read may cross a segment boundary)."""

    __slots__ = ("slices", "_size")

    def __init__(self, slices: list[FileSlice]):
        self.slices = slices
        self._size = sum(s.length for s in slices)

    def __len__(self) -> int:
        return self._size

    def read(self) -> bytes:
        return b"".join(s.read() for s in self.slices)

    def __repr__(self) -> str:
        return f"FileRecords({len(self.slices)} slices, {self._size} bytes)"
