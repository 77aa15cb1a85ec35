"""File naming and durable file-system helpers shared by the storage modules."""

from __future__ import annotations

import os
from pathlib import Path

from kwire.protocol.errors import KafkaStorageError

__all__ = [
    "LOG_SUFFIX", "INDEX_SUFFIX", "TIMEINDEX_SUFFIX", "TXNINDEX_SUFFIX", "DELETED_SUFFIX", "CLEANED_SUFFIX",
    "SWAP_SUFFIX", "STRAY_SUFFIXES",
    "segment_path", "offset_from_filename", "fsync_dir", "atomic_write", "pread_exact",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
TXNINDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
# The log cleaner's output, as Kafka names it: written as ``.cleaned``, renamed to ``.swap``
# once complete, then to the final names after the segments it replaces are deleted.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# Leftovers of interrupted work: our temp files and deletions, and a clean that never reached
# its swap.  (``.swap`` files are not strays: the loader completes their swap.)
STRAY_SUFFIXES = (".tmp", DELETED_SUFFIX, CLEANED_SUFFIX)


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    """Kafka's name: the base offset zero-padded to 20 digits, so names sort like offsets."""
    return directory / f"{base_offset:020d}{suffix}"


def offset_from_filename(name: str) -> int | None:
    """The base offset in a segment file name, or None if the stem is not 20 digits."""
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def fsync_dir(directory: Path) -> None:
    """Make a rename/create/unlink in ``directory`` durable (POSIX needs the directory fsynced)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new content.

    Write a temp file, fsync it, rename over the target, fsync the directory.  A crash before
    the rename leaves a ``.tmp`` that the loader removes.  ``mode``: the new file's permissions
    (0o600 for credentials).  ``durable=False`` skips both fsyncs (the broker's fsync "never"
    policy): a killed process still leaves the old or the new content, a power cut may not.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # an older .tmp (or the umask) may have left other bits
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def pread_exact(fd: int, length: int, position: int) -> bytes:
    """``length`` bytes at ``position`` of ``fd`` (pread may return fewer); KafkaStorageError at
    the end of the file."""
    chunks, got = [], 0
    while got < length:
        chunk = os.pread(fd, length - got, position + got)
        if not chunk:
            raise KafkaStorageError(f"short read: {got} of {length} bytes at position {position}")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
