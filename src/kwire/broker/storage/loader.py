"""Opening a partition directory at startup (Kafka's LogLoader).

* A log cleaner's swap interrupted by a crash is completed (Kafka's LogLoader): a
  ``<base>.log.swap`` is a cleaned segment whose old segments were being replaced; the old
  segments it covers (bases in ``[base, its end)``) are deleted and the ``.swap`` files take
  the final names.  A clean that never reached its ``.log.swap`` left ``.cleaned`` files: removed.
* Stray files of interrupted work (``.tmp``, ``.deleted``, ``.cleaned``, index ``.swap`` files
  without their ``.log.swap``) and index files without a ``.log`` are removed.
* Every segment is opened; a missing or corrupt index (or a torn tail) gets the segment
  recovered, which rebuilds its indexes.
* Recovery does not cap a batch's size by max.message.bytes (Kafka does): lowering that
  setting must not make older, valid batches look corrupt.  The CRC catches bad lengths.
* Without a clean shutdown, every segment from the one holding the recovery point on is
  recovered (each batch's length and CRC checked).  The first segment that had to be cut
  ends the log: later segments are deleted, as Kafka does, since their offsets would follow
  a hole.
* The log start offset comes from the checkpoint (never below the first segment).
* The directory is listed once (Kafka's LogLoader lists it once too) and that listing serves
  every step, the producer state's snapshots included; only completing a swap lists it again.
  After a clean shutdown an open is then: the listing, the checkpoint, each segment's files
  opened with a look at its tail, and the newest producer snapshot.

Everything changed is returned as human-readable findings and logged at WARNING.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ._files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    STRAY_SUFFIXES,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    fsync_dir,
    offset_from_filename,
    segment_path,
)
from .checkpoint import CorruptCheckpointError, PartitionCheckpoint, read_checkpoint, write_checkpoint
from .config import LogConfig
from .segment import LogSegment

__all__ = ["LoadedLog", "load_partition"]

logger = logging.getLogger("kwire.broker.storage")


@dataclass
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    findings: list[str] = field(default_factory=list)
    # The directory's file names as the loader listed them, for the producer state's snapshots
    # (which loading never touches), so that opening the log lists the directory once.  Segment
    # files that recovery deleted afterwards may still be named here.
    file_names: frozenset[str] = frozenset()


def load_partition(directory: Path, config: LogConfig, *, clean_shutdown: bool) -> LoadedLog:
    """Load (and if needed recover) the partition in ``directory``; creates it if missing."""
    directory = Path(directory)
    try:
        files = _list_files(directory)
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        files = {}
    findings: list[str] = []

    def report(message: str) -> None:
        findings.append(message)
        logger.warning("%s: %s", directory.name, message)

    if any(name.endswith(LOG_SUFFIX + SWAP_SUFFIX) for name in files):
        _complete_swaps(directory, config, report, files)
        files = _list_files(directory)  # renamed and deleted files: the one case listed again
    files = _remove_strays(directory, report, files)

    try:
        checkpoint = read_checkpoint(directory)
    except CorruptCheckpointError as exc:
        report(f"checkpoint unreadable ({exc}); recovering every segment")
        checkpoint = None
        clean_shutdown = False  # without a recovery point nothing can be trusted
    recovery_point = checkpoint.recovery_point if checkpoint else 0

    segments: list[LogSegment] = []
    try:
        bases = sorted(b for name in files if name.endswith(LOG_SUFFIX) and (b := offset_from_filename(name)) is not None)
        # Segments that recovery will rebuild anyway need no separate index check.
        first_unflushed = _first_unflushed(bases, recovery_point) if not clean_shutdown else len(bases)
        for i, base in enumerate(bases):
            segment = LogSegment(directory, base, index_interval_bytes=config.index_interval_bytes)
            segments.append(segment)
            if i >= first_unflushed:
                continue
            problem = segment.load()
            if problem:
                truncated = segment.recover()
                report(f"segment {base}: {problem}; rebuilt its indexes"
                       + (f", truncating {truncated} bytes ({segment.recovery_problem})" if truncated else ""))

        if not clean_shutdown:
            _recover_unflushed(segments, first_unflushed, report)
    except BaseException:
        for segment in segments:
            segment.close()
        raise

    log_start = checkpoint.log_start_offset if checkpoint else 0
    if segments:
        log_start = max(log_start, segments[0].base_offset)
        log_end = segments[-1].next_offset
        if log_end < log_start:
            # Kafka's rule: the log would end before it starts (files lost); start over empty.
            report(f"log end offset {log_end} is below the log start offset {log_start}; deleting all segments")
            for segment in segments:
                segment.delete()
            segments = []
            files = _list_files(directory)
    if not segments:
        segments.append(LogSegment(directory, log_start, index_interval_bytes=config.index_interval_bytes))
    log_end = segments[-1].next_offset
    # After a clean shutdown everything was flushed; otherwise keep the old point (recovery
    # flushed what it rebuilt, but only a flush of the log moves the point, as in Kafka).
    recovery_point = log_end if clean_shutdown else min(recovery_point, log_end)
    loaded = PartitionCheckpoint(log_start, recovery_point)
    if loaded != checkpoint:
        # Only a change is written: after a clean shutdown the file already says this, and its
        # two fsyncs per partition were most of a restart's time with many partitions open.
        write_checkpoint(directory, loaded)
    return LoadedLog(segments, log_start, recovery_point, findings, frozenset(files))


def _list_files(directory: Path) -> dict[str, bool]:
    """The directory's entries: name -> whether it is a regular file (from the listing itself,
    no stat per entry on the file systems that say so)."""
    with os.scandir(directory) as entries:
        return {entry.name: entry.is_file() for entry in entries}


def _first_unflushed(bases: list[int], recovery_point: int) -> int:
    """Index of the segment holding ``recovery_point`` (the first that may hold unsynced data)."""
    first = 0
    for i, base in enumerate(bases):
        if base <= recovery_point:
            first = i
    return first


def _recover_unflushed(segments: list[LogSegment], first: int, report) -> None:
    for i in range(first, len(segments)):
        segment = segments[i]
        truncated = segment.recover()
        if truncated:
            report(f"segment {segment.base_offset}: truncated {truncated} bytes at offset {segment.next_offset} "
                   f"({segment.recovery_problem})")
            later = segments[i + 1:]
            if later:
                report(f"deleting {len(later)} segment(s) after the corruption: "
                       + ", ".join(str(s.base_offset) for s in later))
                for s in later:
                    s.delete()
                del segments[i + 1:]
            return


_SEGMENT_SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, LOG_SUFFIX)


def _complete_swaps(directory: Path, config: LogConfig, report, files: dict[str, bool]) -> None:
    """Finish the cleaner's swaps a crash interrupted (see ``PartitionLog.replace_segments``).

    The ``.log.swap`` rename is the clean's commit point: its indexes were renamed to ``.swap``
    before it.  Past it, the old segments may be partly deleted and some ``.swap`` files may
    already have their final names.  The swap segment is validated and its offset and time
    indexes rebuilt; it ends where the old segments it replaces ended (the cleaner makes sure),
    so every ``.log`` whose base is in ``[base, end)`` is an old one."""
    swaps = sorted(b for name in files
                   if name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and (b := offset_from_filename(name)) is not None)
    for base in swaps:
        had_swap = {suffix: segment_path(directory, base, suffix + SWAP_SUFFIX).exists() for suffix in _SEGMENT_SUFFIXES}
        swap = LogSegment(directory, base, index_interval_bytes=config.index_interval_bytes, file_suffix=SWAP_SUFFIX)
        try:
            swap.recover()
            end = swap.next_offset
        finally:
            swap.close()
        if end == base:
            # Not one batch: not the cleaner's (its swaps always hold one); the old segments stay.
            for suffix in _SEGMENT_SUFFIXES:
                segment_path(directory, base, suffix + SWAP_SUFFIX).unlink(missing_ok=True)
            report(f"removed {base:020d}.log.swap: it holds no batch")
            continue
        replaced = sorted(b for p in directory.iterdir()
                          if p.name.endswith(LOG_SUFFIX) and (b := offset_from_filename(p.name)) is not None and base <= b < end)
        for old in replaced:
            for suffix in _SEGMENT_SUFFIXES:
                if old == base and suffix == TXNINDEX_SUFFIX and not had_swap[suffix]:
                    continue  # already renamed: the final name is the cleaned segment's
                segment_path(directory, old, suffix).unlink(missing_ok=True)
        fsync_dir(directory)
        for suffix in _SEGMENT_SUFFIXES:  # indexes first, the .log last
            swapped = segment_path(directory, base, suffix + SWAP_SUFFIX)
            if suffix == TXNINDEX_SUFFIX and not had_swap[suffix]:
                swapped.unlink()  # made empty by opening the segment; the renamed one is kept
            else:
                os.replace(swapped, segment_path(directory, base, suffix))
        fsync_dir(directory)
        report(f"completed the log cleaner's swap of segment {base} (offsets {base}-{end - 1}), replacing "
               f"{len(replaced)} old segment(s)")


def _remove_strays(directory: Path, report, files: dict[str, bool]) -> dict[str, bool]:
    """Remove what interrupted work left (see the module's doc); returns ``files`` without it."""
    removed = []
    logs = {name[:-len(LOG_SUFFIX)] for name in files if name.endswith(LOG_SUFFIX)}
    for name in sorted(files):
        if not files[name]:
            continue
        if name.endswith(STRAY_SUFFIXES + (SWAP_SUFFIX,)):  # swaps are complete by now
            report(f"removed leftover file {name}")
        elif (suffix := os.path.splitext(name)[1]) in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX) \
                and offset_from_filename(name) is not None and name[:-len(suffix)] not in logs:
            report(f"removed orphaned index {name} (no .log file)")
        else:
            continue
        os.unlink(directory / name)
        removed.append(name)
    if not removed:
        return files
    fsync_dir(directory)
    return {name: is_file for name, is_file in files.items() if name not in removed}
