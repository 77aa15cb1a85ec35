"""One log segment: a ``.log`` file of v2 record batches plus its sparse indexes.

Modelled on Kafka's LogSegment: batches are stored exactly as appended (offsets already
assigned), so a read is just a (file, position, length) range that can go to a socket with
``os.sendfile``.  Finding a batch never decodes records: the offset index gives a nearby
position and a short walk over the 12-byte ``baseOffset int64 | batchLength int32`` prefixes
finds the batch.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kwire.protocol.errors import CorruptRecordError, KafkaStorageError
from kwire.protocol.records import HEADER_SIZE, RecordBatch
from kwire.protocol.records import batch_header as v2

from ._files import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    pread_exact,
    segment_path,
)
from .batch_header import BatchHeader, iter_headers
from .index import INT32_MAX, OffsetIndex, TimeIndex
from .txn_index import TransactionIndex

__all__ = ["FileSlice", "LogSegment"]

# Every batch starts with baseOffset int64 | batchLength int32 (batchLength counts what follows);
# the other v2 header fields are read through the protocol's view (v2.read_*), without building
# a RecordBatch.
_read_prefix = v2.read_prefix
_PREFIX_SIZE = v2.LOG_OVERHEAD
_MIN_BATCH_SIZE = HEADER_SIZE
# Header walks read this much at a time: one pread covers many small batches.
_WALK_CHUNK = 64 * 1024
# ... but only this much first, and after a batch of a quarter chunk or more, whose successor is
# likely as big: a chunk read there would copy record bytes nobody looks at (serving 1 MiB
# batches, the walks read 64 KiB per batch header: 8% of the broker's CPU).
_HEADER_READ = 256


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _SharedFile:
    """The segment's ``.log`` file descriptor, shared with the FileSlices read from it.

    A deleted segment drops its reference instead of closing, so a slice still being sent
    keeps the (unlinked) file readable and its fd can't be reused for another file under it;
    the fd closes when the last holder goes away.
    """

    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


@dataclass(frozen=True)
class FileSlice:
    """``length`` bytes at ``position`` of a segment file: whole batches, ready for sendfile."""

    path: Path
    file: _SharedFile
    position: int
    length: int
    # The offset after the slice's last batch (-1: not known); a read_committed fetch looks up
    # the aborted transactions up to it.
    next_offset: int = -1

    def fileno(self) -> int:
        return self.file.fd

    def read(self) -> bytes:
        """The bytes (for tests, or transports that can't sendfile)."""
        return pread_exact(self.file.fd, self.length, self.position)

    def send_to(self, out_fd: int) -> int:
        """Copy the slice to ``out_fd`` (a blocking socket or file) with ``os.sendfile``."""
        sent = 0
        while sent < self.length:
            n = os.sendfile(out_fd, self.file.fd, self.position + sent, self.length - sent)
            if n == 0:
                raise KafkaStorageError(f"{self.path}: sendfile hit end of file at {self.position + sent}")
            sent += n
        return sent


class LogSegment:
    """Files ``<base offset:020d>.log/.index/.timeindex/.txnindex`` in a partition directory.

    Open one with ``LogSegment(dir, base_offset)``: it creates missing files.  An existing
    segment must then be ``load()``-ed (cheap: index sanity check + scan after the last index
    entry) or ``recover()``-ed (full validation) before use.
    """

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096,
                 file_suffix: str = ""):
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        # ``file_suffix``: the log cleaner writes its output as ``<base>.log.cleaned`` etc. and
        # renames it into place (``change_file_suffixes``), as Kafka's cleaner does.
        self.log_path = segment_path(self.dir, base_offset, LOG_SUFFIX + file_suffix)
        self.index_path = segment_path(self.dir, base_offset, INDEX_SUFFIX + file_suffix)
        self.timeindex_path = segment_path(self.dir, base_offset, TIMEINDEX_SUFFIX + file_suffix)
        self.txnindex_path = segment_path(self.dir, base_offset, TXNINDEX_SUFFIX + file_suffix)
        # Not O_APPEND: appends pwrite at our own size, so a failed write can be cut off again.
        self._file: _SharedFile | None = _SharedFile(os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644))
        self.offset_index = OffsetIndex(self.index_path, base_offset)
        self.time_index = TimeIndex(self.timeindex_path, base_offset)
        # Unlike Kafka's (created on the first abort), created with the segment: a missing one
        # then means lost, and loading rebuilds it from the log.
        self.txn_index = TransactionIndex(self.txnindex_path, base_offset)
        self._size = os.fstat(self._file.fd).st_size
        # A .txnindex missing beside data that was already there is lost (one made with a new
        # segment is simply new).
        self._txn_index_lost = self._size > 0 and not self.txn_index.existed
        self._next_offset = base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index_entry = 0
        # Kafka rolls by the age of the first batch's timestamp (survives restarts); None when
        # empty or if the first batch has no timestamp (then the creation time is used).
        self._rolling_timestamp: int | None = None
        self.created_at_ms = _now_ms()
        self.recovery_problem: str | None = None  # what the last recover() stopped at
        # The page cache limit's bookkeeping (page_cache.py), when the log has one.
        self.cache_run = None

    # -- properties -----------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    @property
    def next_offset(self) -> int:
        """One past the last offset stored (the base offset when empty)."""
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch max timestamp, -1 if none."""
        return self._max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """For time retention, as Kafka: the max timestamp, else the file's modification time."""
        if self._max_timestamp >= 0:
            return self._max_timestamp
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    @property
    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp, -1 if unknown (the cleaner's max.compaction.lag.ms
        measures a segment's age by it, as Kafka's getFirstBatchTimestamp)."""
        return -1 if self._rolling_timestamp is None else self._rolling_timestamp

    def roll_age_ms(self, now_ms: int, timestamp: int = -1) -> int:
        """How long this segment has been filling, for ``segment_ms``.

        As Kafka: with timestamps, the incoming batch's ``timestamp`` minus the first batch's
        (so the age survives restarts and never mixes the producer's clock with ours);
        otherwise the wall-clock time since the segment was created or opened.
        """
        if self._rolling_timestamp is not None and self._rolling_timestamp >= 0 and timestamp >= 0:
            return timestamp - self._rolling_timestamp
        return now_ms - self.created_at_ms

    def _fd(self) -> int:
        if self._file is None or self._file.fd < 0:
            raise KafkaStorageError(f"{self.log_path} is closed")
        return self._file.fd

    def log_fd(self) -> int:
        """The ``.log`` file's descriptor (KafkaStorageError once closed or deleted)."""
        return self._fd()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, next_offset={self._next_offset}, size={self._size})"

    # -- loading --------------------------------------------------------------------------
    def load(self) -> str | None:
        """Trust the files: sanity-check the indexes and scan the batches after the last
        offset-index entry to learn the next offset and max timestamp.

        Returns a description of a problem that calls for ``recover()`` (missing or corrupt
        index, torn tail), or None.
        """
        if not (self.offset_index.existed and self.time_index.existed) and self._size > 0:
            missing = [p.name for p, idx in ((self.index_path, self.offset_index),
                                             (self.timeindex_path, self.time_index)) if not idx.existed]
            return f"index file(s) {', '.join(missing)} missing"
        problem = self.offset_index.sanity_check(self._size)
        if problem:
            return problem
        last = self.time_index.last_entry()
        if last is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last
        problem = self._scan_tail()
        if problem:
            return problem
        problem = self.time_index.sanity_check(self._next_offset)
        if problem:
            return problem
        self._bytes_since_index_entry = self._size - self.offset_index.last_position
        self._load_rolling_timestamp()
        return None

    def txn_index_problem(self) -> str | None:
        """What is wrong with the ``.txnindex`` (missing beside a non-empty log, torn, out of
        order), or None.  The producer state's load rebuilds it from the log."""
        if self._txn_index_lost:
            return f"{self.txnindex_path.name} missing"
        return self.txn_index.sanity_check(self._next_offset)

    def txn_index_rebuilt(self) -> None:
        """Empty the ``.txnindex`` for a rebuild (the producer state's load fills it again)."""
        self.txn_index.reset()
        self._txn_index_lost = False

    def _scan_tail(self) -> str | None:
        """Walk headers from the last offset-index entry to the end of the file.  Read in chunks
        as ``_scan`` does (after a clean shutdown the tail is at most index.interval.bytes and a
        batch: usually one read), not one read per header."""
        fd = self._fd()
        pos = self.offset_index.last_position
        next_offset = self.base_offset
        buf, buf_start, chunk = b"", pos, _HEADER_READ
        while pos < self._size:
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf, buf_start, off = os.pread(fd, min(max(chunk, HEADER_SIZE), self._size - pos), pos), pos, 0
                if len(buf) < HEADER_SIZE:
                    return f"{self.log_path.name}: {self._size - pos} bytes at position {pos} are not a whole batch"
            base, length = _read_prefix(buf, off)
            size = length + _PREFIX_SIZE
            if size < _MIN_BATCH_SIZE or size > self._size - pos or base < next_offset or buf[off + v2.MAGIC_AT] != 2:
                return f"{self.log_path.name}: bad batch header at position {pos} (offset {base}, length {length})"
            next_offset = base + v2.read_last_offset_delta(buf, off) + 1
            max_ts = v2.read_max_timestamp(buf, off)
            if max_ts > self._max_timestamp:
                self._max_timestamp, self._offset_of_max_timestamp = max_ts, base
            pos += size
            chunk = _WALK_CHUNK if size < _WALK_CHUNK // 4 else _HEADER_READ
        if self._size:
            self._next_offset = next_offset
        return None

    def _load_rolling_timestamp(self) -> None:
        self._rolling_timestamp = None
        if self._size >= HEADER_SIZE:
            ts = v2.read_max_timestamp(os.pread(self._fd(), HEADER_SIZE, 0))
            self._rolling_timestamp = ts if ts >= 0 else None

    def recover(self, max_bytes: int | None = None) -> int:
        """Validate every batch from the start (length, magic, CRC, increasing offsets), cut the
        file after the last good one, and rebuild both indexes.  Returns the bytes cut.

        ``max_bytes`` bounds one batch's size (Kafka passes max.message.bytes); a bigger one is
        treated as corruption.  ``self.recovery_problem`` says what stopped the scan.
        """
        fd = self._fd()
        self.offset_index.reset()
        self.time_index.reset()
        self._next_offset = self.base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_index_entry = 0
        self._rolling_timestamp = None
        self.recovery_problem = None
        file_size = os.fstat(fd).st_size
        pos = 0
        if file_size:
            # mmap: RecordBatch and the CRC read straight from the page cache, no copy per batch.
            mm = mmap.mmap(fd, file_size, access=mmap.ACCESS_READ)
            try:
                pos, self.recovery_problem = self._validate_all(mm, file_size, max_bytes)
            finally:
                mm.close()
        truncated = file_size - pos
        if truncated:
            os.ftruncate(fd, pos)
        self._size = pos
        self._load_rolling_timestamp()
        self.flush()  # the rebuilt state must be durable before the recovery point moves past it
        return truncated

    def _validate_all(self, mm: mmap.mmap, file_size: int, max_bytes: int | None) -> tuple[int, str | None]:
        pos = 0
        name = self.log_path.name
        while pos < file_size:
            left = file_size - pos
            if left < _MIN_BATCH_SIZE:
                return pos, f"{name}: {left} trailing bytes at position {pos} are less than a batch header"
            base, length = _read_prefix(mm, pos)
            size = length + _PREFIX_SIZE
            where = f"{name}: batch at position {pos} (offset {base})"
            if size < _MIN_BATCH_SIZE:
                return pos, f"{where} has impossible length {length}"
            if max_bytes is not None and size > max_bytes:
                return pos, f"{where} is {size} bytes, more than the {max_bytes} allowed"
            if size > left:
                return pos, f"{where} is torn: {size} bytes declared, {left} present"
            try:
                batch = RecordBatch(mm, pos)
                batch.validate()
            except CorruptRecordError as exc:
                return pos, f"{where} is corrupt: {exc}"
            if base < self._next_offset:
                return pos, f"{where} goes backwards (expected offset >= {self._next_offset})"
            last = batch.last_offset
            if batch.last_offset_delta < 0 or last - self.base_offset > INT32_MAX:
                return pos, f"{where} has an impossible last offset {last}"
            self._index_batch(pos, base, last, batch.max_timestamp, size)
            del batch  # no view of the mmap may outlive it
            pos += size
        return pos, None

    # -- writing --------------------------------------------------------------------------
    def _index_batch(self, position: int, base: int, last: int, max_timestamp: int, size: int) -> None:
        """Account for one stored batch: next offset, max timestamp, sparse index entries."""
        if max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, base
        if self._rolling_timestamp is None and max_timestamp >= 0 and self._next_offset == self.base_offset:
            self._rolling_timestamp = max_timestamp
        # As Kafka: index a batch once more than index_interval_bytes were written since the
        # last entry; the first batch needs none (a lookup with no entry starts at 0).
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(base, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self._next_offset = last + 1

    def append(self, batch_bytes: bytes | bytearray | memoryview, base_offset: int, last_offset: int,
               max_timestamp: int, headers: Sequence[BatchHeader] | None = None) -> None:
        """Write already-validated batches whose offsets run ``base_offset..last_offset``.

        Indexes are updated per batch in the blob, from ``headers`` when the caller has read
        them (``validation.prepare_append`` does), else from the stored bytes.  On an I/O error
        the file is cut back to its previous size so nothing half-written stays behind the next
        append.
        """
        if base_offset < self._next_offset:
            raise ValueError(f"offset {base_offset} is below the segment's next offset {self._next_offset}")
        if last_offset - self.base_offset > INT32_MAX:
            raise ValueError(f"offset {last_offset} does not fit segment {self.base_offset}'s int32 relative offsets")
        fd = self._fd()
        start = self._size
        view = memoryview(batch_bytes)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(fd, view[written:], start + written)
        except OSError as exc:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise KafkaStorageError(f"{self.log_path}: append failed: {exc}") from exc
        self._size = start + written
        for header in iter_headers(batch_bytes) if headers is None else headers:
            self._index_batch(start + header.position, header.base_offset, header.last_offset,
                              header.max_timestamp, header.size)
        if self._next_offset != last_offset + 1:
            raise KafkaStorageError(f"{self.log_path}: batches end at {self._next_offset - 1}, "
                                    f"the caller said {last_offset}")

    def on_become_inactive(self) -> None:
        """When rolled: record the final max timestamp so a reload knows it from the time index."""
        self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)

    def flush(self) -> None:
        """fsync the data, then the indexes (an index never points at unsynced data)."""
        os.fsync(self._fd())
        self.on_become_inactive()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def sync_descriptors(self) -> list[int]:
        """For a flush that fsyncs without the partition lock: duplicates of the data and index
        descriptors, in the order to fsync them (data first), after recording the max timestamp
        in the time index as ``flush`` does.  Duplicates, because a close or delete may run
        meanwhile and a closed descriptor's number may be reused by another file.  The caller
        closes them."""
        self.on_become_inactive()
        fds: list[int] = []
        try:
            for fd in (self._fd(), self.offset_index.fileno(), self.time_index.fileno(), self.txn_index.fileno()):
                fds.append(os.dup(fd))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    # -- reading --------------------------------------------------------------------------
    def _scan(self, position: int, header_size: int) -> Iterator[tuple[int, int, int, bytes | bytearray, int]]:
        """Yield ``(position, base offset, size, buf, off)`` of each batch from ``position`` on,
        with at least ``header_size`` bytes of its header at ``buf[off:]``.

        Reads the file in chunks, so a long scan costs a few syscalls per chunk, not per batch.
        """
        fd = self._fd()
        end = self._size
        buf = b""
        buf_start = pos = position
        chunk = _HEADER_READ  # the first batch's size is not known yet
        while end - pos >= header_size:
            off = pos - buf_start
            if off + header_size > len(buf):
                buf = os.pread(fd, min(max(chunk, header_size), end - pos), pos)
                buf_start, off = pos, 0
                if len(buf) < header_size:
                    raise KafkaStorageError(f"{self.log_path}: short read of the batch header at position {pos}")
            base, length = _read_prefix(buf, off)
            size = length + _PREFIX_SIZE
            if size < _MIN_BATCH_SIZE or size > end - pos:
                raise KafkaStorageError(f"{self.log_path}: bad batch length {length} at position {pos}")
            yield pos, base, size, buf, off
            pos += size
            chunk = _WALK_CHUNK if size < _WALK_CHUNK // 4 else _HEADER_READ

    def _walk(self, position: int) -> Iterator[tuple[int, int, int]]:
        """Yield ``(position, base offset, size)`` of each batch from ``position`` on."""
        for pos, base, size, _, _ in self._scan(position, _PREFIX_SIZE):
            yield pos, base, size

    def batch_headers(self, start_offset: int) -> Iterator[bytes]:
        """The 61-byte v2 header of every batch whose last offset is >= ``start_offset``, in
        order (for rebuilding producer state: data records are never read).  A control batch
        (a transaction marker, one small record) comes whole: its record says commit or abort."""
        _, position = self.offset_index.lookup(start_offset)
        for pos, base, size, buf, off in self._scan(position, HEADER_SIZE):
            if base + v2.read_last_offset_delta(buf, off) >= start_offset:
                if v2.read_attributes(buf, off) & v2.CONTROL_BIT:
                    yield pread_exact(self._fd(), size, pos)
                else:
                    yield bytes(buf[off:off + HEADER_SIZE])

    def _walk_from(self, offset: int) -> Iterator[tuple[int, int, int]]:
        """``_walk`` from the batch holding ``offset`` (the last batch whose base offset is <=
        ``offset``, or the first batch if all start above it) to the end of the segment: one walk
        finds the batch and goes on from it."""
        _, start = self.offset_index.lookup(offset)
        walk = self._walk(start)
        found = next(walk, None)
        if found is None:
            return
        if found[1] <= offset:
            for batch in walk:  # a later batch that also starts at or before offset holds it
                if batch[1] > offset:
                    yield found
                    found = batch
                    break
                found = batch
        yield found
        yield from walk

    def _locate(self, offset: int) -> tuple[int, int] | None:
        """(position, size) of the batch holding ``offset`` (see ``_walk_from``); None if the
        segment is empty."""
        found = next(self._walk_from(offset), None)
        return None if found is None else (found[0], found[2])

    def read(self, start_offset: int, max_bytes: int, *, min_one_batch: bool = True,
             max_offset: int | None = None) -> FileSlice | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_bytes`` in total
        unless the first batch alone is bigger and ``min_one_batch`` (Kafka's rule, so a
        consumer can always make progress), none starting at or after ``max_offset``.  None if
        there is nothing to return."""
        limit = self._next_offset if max_offset is None else min(max_offset, self._next_offset)
        if start_offset >= limit:
            return None
        first_pos = end = -1
        next_offset = self._next_offset
        oversized = False
        for pos, base, size in self._walk_from(start_offset):
            if first_pos < 0:
                first_pos = end = pos
            if base >= limit or oversized:
                next_offset = base
                break
            if pos + size - first_pos > max_bytes:
                if pos == first_pos and min_one_batch:
                    end, oversized = pos + size, True  # the first batch alone, however big
                    continue
                next_offset = base
                break
            end = pos + size
        if end == first_pos:
            return None
        assert self._file is not None
        return FileSlice(self.log_path, self._file, first_pos, end - first_pos, next_offset)

    def find_offset_by_timestamp(self, timestamp: int, min_offset: int = 0) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``min_offset`` whose timestamp is
        >= ``timestamp``, or None.  Only the one matching batch is decoded."""
        if self._max_timestamp < timestamp:
            return None
        start_offset = self.time_index.lookup_before(timestamp)
        start_offset = max(start_offset if start_offset is not None else self.base_offset, min_offset)
        _, start = self.offset_index.lookup(start_offset)
        fd = self._fd()
        for pos, base, size in self._walk(start):
            header = pread_exact(fd, HEADER_SIZE, pos)
            max_ts = v2.read_max_timestamp(header)
            last = base + v2.read_last_offset_delta(header)
            if max_ts < timestamp or last < min_offset:
                continue
            for record in RecordBatch(pread_exact(fd, size, pos)).records():
                if record.timestamp >= timestamp and record.offset >= min_offset:
                    return record.offset, record.timestamp
        return None

    # -- truncation and deletion ----------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset`` (a batch holding ``offset`` goes
        whole, as in Kafka).  Returns the bytes removed."""
        if offset >= self._next_offset:
            return 0
        fd = self._fd()
        cut, cut_offset = 0, self.base_offset
        if offset > self.base_offset:
            found = self._locate(offset)
            if found is not None:
                pos, size = found
                header = pread_exact(fd, HEADER_SIZE, pos)
                base = _read_prefix(header)[0]
                last = base + v2.read_last_offset_delta(header)
                # The located batch holds offset (or starts after it): it goes.  If it ends
                # before offset the segment has a gap there and the batch stays.
                cut, cut_offset = (pos + size, offset) if last < offset else (pos, base)
        removed = self._size - cut
        os.ftruncate(fd, cut)
        self._size = cut
        self.offset_index.truncate_to_position(cut)
        self.time_index.truncate_to_offset(cut_offset)
        self.txn_index.truncate_to(offset)
        self._next_offset = self.base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        last_ts = self.time_index.last_entry()
        if last_ts is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last_ts
        problem = self._scan_tail()
        if problem:
            raise KafkaStorageError(problem)
        self._bytes_since_index_entry = self._size - self.offset_index.last_position
        self._load_rolling_timestamp()
        return removed

    @property
    def files(self) -> tuple[Path, Path, Path, Path]:
        """The segment's four files: the indexes first, the ``.log`` last (the cleaner's swap
        renames them in this order, so a ``.log.swap`` means its indexes were renamed before it)."""
        return self.index_path, self.timeindex_path, self.txnindex_path, self.log_path

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the four files from ``<name><old>`` to ``<name><new>`` (Kafka's
        LogSegment.changeFileSuffixes), in ``files`` order.  Open descriptors stay valid."""
        renamed = []
        for path in self.files:
            if not path.name.endswith(old):
                raise ValueError(f"{path.name} does not end with {old!r}")
            target = path.with_name(path.name[:len(path.name) - len(old)] + new)
            os.replace(path, target)
            renamed.append(target)
        self.index_path, self.timeindex_path, self.txnindex_path, self.log_path = renamed
        self.offset_index.path, self.time_index.path, self.txn_index.path = renamed[:3]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> None:
        """Remove the files now (``mark_deleted`` then ``remove_deleted_files``)."""
        self.mark_deleted()
        self.remove_deleted_files()

    def mark_deleted(self) -> None:
        """The first half of a deletion (Kafka's deleteSegmentFiles with asyncDelete): close the
        indexes and rename the four files to ``.deleted`` (the ``.log`` first, so a crash part-way
        leaves orphaned indexes, which the loader removes, never a log without its index).  The
        files stay on disk until ``remove_deleted_files``: a caller holding the partition lock
        renames here and unlinks after releasing it, as unlinking a large file is slow.  The
        loader removes ``.deleted`` files left by a crash."""
        # Drop (don't close) the shared log fd: FileSlices still being sent keep it alive.
        self._file = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        for path in (self.log_path, self.index_path, self.timeindex_path, self.txnindex_path):
            try:
                os.replace(path, path.with_name(path.name + DELETED_SUFFIX))
            except FileNotFoundError:
                pass

    def remove_deleted_files(self) -> None:
        """Unlink the files ``mark_deleted`` renamed (missing ones are skipped)."""
        for path in (self.log_path, self.index_path, self.timeindex_path, self.txnindex_path):
            try:
                os.unlink(path.with_name(path.name + DELETED_SUFFIX))
            except FileNotFoundError:
                pass
