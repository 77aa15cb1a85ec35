"""The group journal of kwire before ``__consumer_offsets``, and the records the coordinator stores.

The coordinator now keeps its state in ``__consumer_offsets`` (see ``offsets_topic``); this
journal is read once, to migrate a data dir an earlier kwire wrote (see ``migration``).
``GroupRecord``, ``MemberRecord`` and ``StoredGroup`` are what both stores hold.

It was an append-only journal of JSON lines, replayed on open, compacted by rewrite:
``<data dir>/__kwire/groups/journal.log``; each line is::

    <crc32 of the JSON, 8 hex digits> <JSON object>\\n

with one of these objects (the coordinator writes each before it answers the request)::

    {"t": "offsets", "g": group, "o": [[topic, partition, offset, leader epoch, metadata,
                                        commit ms, expire ms or null], ...]}
    {"t": "offsets_deleted", "g": group, "p": [[topic, partition], ...]}
    {"t": "group", "g": group, "type": protocol type, "gen": generation, "proto": protocol name,
     "leader": member id, "state": state name, "ts": ms the group entered it,
     "members": [{"id", "instance", "client", "host", "rebalance_ms", "session_ms",
                  "metadata" (base64), "assignment" (base64)}, ...]}
    {"t": "group_deleted", "g": group}
    {"t": "txn_offsets", "g": group, "pid": producer id, "o": [offsets as above]}
    {"t": "txn_end", "g": group, "pid": producer id, "o": [the offsets it committed, as above]}

"txn_offsets" stages a transactional producer's offsets (TxnOffsetCommit); "txn_end" ends its
transaction for the group: the staged offsets are dropped and those listed (none for an abort)
become committed, so a replay never has to decide again which staged offsets won.

A line is one request's worth of changes, so a crash never leaves half a commit.  A last line
without its newline (a crash mid-write) and lines whose checksum fails are skipped with a
warning, and the file is then rewritten clean.  A line with a valid checksum that we can't
understand (a newer kwire wrote it) stops the open: dropping it would lose data silently.

Compaction writes the live state (one "group" and one "offsets" line per group) to a temp file
and renames it over the journal once the journal holds ``compact_ratio`` times more entries than
the live state (and at least ``compact_min_entries``).

Durability follows the broker's ``fsync`` policy: "always" fsyncs each write before returning,
"interval" leaves it to ``flush()`` (the broker calls it periodically, from a worker thread),
"never" leaves it to the OS (``close()`` still fsyncs).  ``put_offsets(..., fsync=False)`` lets
a caller under "always" take the fsync off the event loop: the write returns at once and the
caller answers only after a ``flush()`` (in a worker thread) that started after it returned.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..storage._files import atomic_write, fsync_dir
from .offsets import CommittedOffset

__all__ = ["GroupRecord", "GroupStore", "GroupStoreError", "MemberRecord", "StoredGroup", "JOURNAL_NAME"]

logger = logging.getLogger("kwire.broker.coordinator.store")

JOURNAL_NAME = "journal.log"
_CRC_WIDTH = 8


class GroupStoreError(ValueError):
    """The journal holds a record this version cannot apply; the message names file and line."""


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    metadata: bytes       # of the group's selected protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """What the coordinator persists about a group besides its offsets."""

    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state: str
    state_timestamp_ms: int
    members: tuple[MemberRecord, ...] = ()


@dataclass
class StoredGroup:
    """A group as the journal knows it: its last group record (if any), its offsets and the
    offsets transactions staged (by producer id)."""

    record: GroupRecord | None = None
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    pending: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    # A KIP-848 consumer group's newest ConsumerGroup* records: key bytes -> (key, value)
    # decoded (see coordinator.consumer.records); only __consumer_offsets holds them.
    consumer: dict[bytes, tuple[Any, Any]] = field(default_factory=dict)
    # A KIP-932 share group's newest ShareGroup* records, the same way (see kwire.broker.share.records).
    share: dict[bytes, tuple[Any, Any]] = field(default_factory=dict)
    # A KIP-1071 streams group's newest StreamsGroup* records, the same way (see coordinator.streams.records).
    streams: dict[bytes, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def entries(self) -> int:
        return (len(self.offsets) + sum(len(p) for p in self.pending.values())
                + (1 + len(self.record.members) if self.record is not None else 0))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _group_json(rec: GroupRecord) -> dict[str, Any]:
    return {"t": "group", "g": rec.group_id, "type": rec.protocol_type, "gen": rec.generation_id,
            "proto": rec.protocol_name, "leader": rec.leader_id, "state": rec.state, "ts": rec.state_timestamp_ms,
            "members": [{"id": m.member_id, "instance": m.group_instance_id, "client": m.client_id,
                         "host": m.client_host, "rebalance_ms": m.rebalance_timeout_ms,
                         "session_ms": m.session_timeout_ms, "metadata": _b64(m.metadata),
                         "assignment": _b64(m.assignment)} for m in rec.members]}


def _group_from_json(obj: dict[str, Any]) -> GroupRecord:
    members = tuple(MemberRecord(m["id"], m["instance"], m["client"], m["host"], int(m["rebalance_ms"]),
                                 int(m["session_ms"]), _unb64(m["metadata"]), _unb64(m["assignment"]))
                    for m in obj["members"])
    return GroupRecord(obj["g"], obj["type"], int(obj["gen"]), obj["proto"], obj["leader"], obj["state"],
                       int(obj["ts"]), members)


def _offset_rows(offsets: Mapping[tuple[str, int], CommittedOffset]) -> list[list[Any]]:
    return [[t, p, c.offset, c.leader_epoch, c.metadata, c.commit_timestamp_ms, c.expire_timestamp_ms]
            for (t, p), c in offsets.items()]


def _offsets_from_rows(rows: list[list[Any]]) -> dict[tuple[str, int], CommittedOffset]:
    return {(t, int(p)): CommittedOffset(int(offset), int(epoch), metadata, int(commit_ms),
                                         None if expire_ms is None else int(expire_ms))
            for t, p, offset, epoch, metadata, commit_ms, expire_ms in rows}


def _offsets_json(group_id: str, offsets: Mapping[tuple[str, int], CommittedOffset]) -> dict[str, Any]:
    return {"t": "offsets", "g": group_id, "o": _offset_rows(offsets)}


def _txn_offsets_json(group_id: str, producer_id: int,
                      offsets: Mapping[tuple[str, int], CommittedOffset]) -> dict[str, Any]:
    return {"t": "txn_offsets", "g": group_id, "pid": producer_id, "o": _offset_rows(offsets)}


def _encode_line(obj: dict[str, Any]) -> bytes:
    payload = json.dumps(obj, separators=(",", ":")).encode("ascii")
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


class GroupStore:
    """The journal of one broker's groups.  Opening it replays the journal into ``groups``."""

    def __init__(self, directory: Path, *, fsync: str = "never", compact_min_entries: int = 10_000,
                 compact_ratio: int = 4):
        self.directory = Path(directory)
        self.path = self.directory / JOURNAL_NAME
        self._fsync_always = fsync == "always"
        self._compact_min = compact_min_entries
        self._compact_ratio = compact_ratio
        self._lock = threading.Lock()  # flush() runs in a worker thread
        self._fd: int | None = None
        self._size = 0
        self._dirty = False
        # Entries (offsets, groups, members) written since the last compaction: the file's size in units.
        self._written = 0
        self.fsyncs = 0  # journal fsyncs done, for tests and stats
        self.groups: dict[str, StoredGroup] = {}
        # What the replay found wrong (torn tail, bad checksums), for the log and for tests.
        self.findings: list[str] = []
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_temp()
        self._replay()
        if self.findings:
            self.compact()
        else:
            self._open()

    # --- reading

    def _remove_temp(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        if tmp.exists():
            logger.warning("%s: removing the leftover of an interrupted compaction", tmp)
            tmp.unlink()

    def _replay(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        for lineno, line in enumerate(lines, 1):
            obj = self._parse(line)
            if obj is None:
                self.findings.append(f"line {lineno}: bad checksum or format ({len(line)} bytes), skipped")
                continue
            try:
                self._apply(obj)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise GroupStoreError(f"{self.path} line {lineno}: cannot apply {obj.get('t')!r} record: "
                                      f"{exc!r}") from None
        if tail:
            self.findings.append(f"torn last record ({len(tail)} bytes without a newline), ignored")
        for finding in self.findings:
            logger.warning("%s: %s", self.path, finding)

    @staticmethod
    def _parse(line: bytes) -> dict[str, Any] | None:
        if len(line) < _CRC_WIDTH + 2 or line[_CRC_WIDTH:_CRC_WIDTH + 1] != b" ":
            return None
        payload = line[_CRC_WIDTH + 1:]
        try:
            crc = int(line[:_CRC_WIDTH], 16)
        except ValueError:
            return None
        if zlib.crc32(payload) != crc:
            return None
        try:
            obj = json.loads(payload)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    def _apply(self, obj: dict[str, Any]) -> None:
        kind, group_id = obj["t"], obj["g"]
        if not isinstance(group_id, str):
            raise ValueError("group id is not a string")
        if kind == "offsets":
            stored = self.groups.setdefault(group_id, StoredGroup())
            stored.offsets.update(_offsets_from_rows(obj["o"]))
            self._written += len(obj["o"])
        elif kind == "txn_offsets":
            stored = self.groups.setdefault(group_id, StoredGroup())
            stored.pending.setdefault(int(obj["pid"]), {}).update(_offsets_from_rows(obj["o"]))
            self._written += len(obj["o"])
        elif kind == "txn_end":
            stored = self.groups.setdefault(group_id, StoredGroup())
            stored.pending.pop(int(obj["pid"]), None)
            stored.offsets.update(_offsets_from_rows(obj["o"]))
            self._drop_if_empty(group_id)
            self._written += 1 + len(obj["o"])
        elif kind == "offsets_deleted":
            stored = self.groups.get(group_id)
            if stored is not None:
                for t, p in obj["p"]:
                    stored.offsets.pop((t, int(p)), None)
                self._drop_if_empty(group_id)
            self._written += len(obj["p"])
        elif kind == "group":
            record = _group_from_json(obj)
            self.groups.setdefault(group_id, StoredGroup()).record = record
            self._written += 1 + len(record.members)
        elif kind == "group_deleted":
            self.groups.pop(group_id, None)
            self._written += 1
        else:
            raise ValueError(f"unknown record type {kind!r}")

    def _drop_if_empty(self, group_id: str) -> None:
        stored = self.groups.get(group_id)
        if stored is not None and stored.record is None and not stored.offsets and not stored.pending:
            del self.groups[group_id]

    # --- writing

    def _open(self) -> None:
        existed = self.path.exists()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        if not existed:
            fsync_dir(self.directory)

    def _append(self, obj: dict[str, Any], entries: int, fsync: bool = True) -> None:
        line = _encode_line(obj)
        sync = fsync and self._fsync_always
        with self._lock:
            if self._fd is None:
                raise RuntimeError(f"{self.path} is closed")
            start = self._size
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(self._fd, view):]
                if sync:
                    os.fsync(self._fd)
                    self.fsyncs += 1
            except OSError:
                # Don't leave half a line for the next record to be glued to.
                try:
                    os.ftruncate(self._fd, start)
                except OSError:
                    logger.exception("%s: could not truncate a failed write", self.path)
                raise
            self._size = start + len(line)
            self._dirty = not sync  # an fsync covers every earlier write too
            self._written += entries
        self._maybe_compact()

    def put_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], CommittedOffset], *,
                    fsync: bool = True) -> None:
        """Record committed offsets (durably, per the fsync policy) before the commit is answered.

        ``fsync=False``: not even with fsync "always"; the caller answers after a later ``flush()``.
        """
        if not offsets:
            return
        self._append(_offsets_json(group_id, offsets), len(offsets), fsync)
        self.groups.setdefault(group_id, StoredGroup()).offsets.update(offsets)

    def put_txn_offsets(self, group_id: str, producer_id: int, offsets: Mapping[tuple[str, int], CommittedOffset],
                        *, fsync: bool = True) -> None:
        """Record offsets a transaction staged (durably, per the fsync policy, as ``put_offsets``)."""
        if not offsets:
            return
        self._append(_txn_offsets_json(group_id, producer_id, offsets), len(offsets), fsync)
        self.groups.setdefault(group_id, StoredGroup()).pending.setdefault(producer_id, {}).update(offsets)

    def end_txn(self, group_id: str, producer_id: int, committed: Mapping[tuple[str, int], CommittedOffset]) -> None:
        """A transaction ended: drop what it staged, make ``committed`` (empty for an abort) the group's."""
        stored = self.groups.get(group_id)
        if stored is None or producer_id not in stored.pending:
            return
        self._append({"t": "txn_end", "g": group_id, "pid": producer_id, "o": _offset_rows(committed)},
                     1 + len(committed))
        del stored.pending[producer_id]
        stored.offsets.update(committed)
        self._drop_if_empty(group_id)

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        stored = self.groups.get(group_id)
        gone = [tp for tp in partitions if stored is not None and tp in stored.offsets]
        if not gone:
            return
        self._append({"t": "offsets_deleted", "g": group_id, "p": [list(tp) for tp in gone]}, len(gone))
        for tp in gone:
            del stored.offsets[tp]
        self._drop_if_empty(group_id)

    def put_group(self, record: GroupRecord) -> None:
        self._append(_group_json(record), 1 + len(record.members))
        self.groups.setdefault(record.group_id, StoredGroup()).record = record

    def delete_group(self, group_id: str) -> None:
        if group_id not in self.groups:
            return
        self._append({"t": "group_deleted", "g": group_id}, 1)
        del self.groups[group_id]

    # --- maintenance

    @property
    def live_entries(self) -> int:
        return sum(g.entries for g in self.groups.values())

    def _maybe_compact(self) -> None:
        if self._written >= max(self._compact_min, self._compact_ratio * self.live_entries):
            self.compact()

    def compact(self) -> None:
        """Rewrite the journal as the live state alone (atomically: old or new survives a crash)."""
        parts = []
        for group_id, stored in self.groups.items():
            if stored.record is not None:
                parts.append(_encode_line(_group_json(stored.record)))
            if stored.offsets:
                parts.append(_encode_line(_offsets_json(group_id, stored.offsets)))
            for producer_id, staged in stored.pending.items():
                parts.append(_encode_line(_txn_offsets_json(group_id, producer_id, staged)))
        data = b"".join(parts)
        with self._lock:
            atomic_write(self.path, data)
            if self._fd is not None:
                os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            self._size = len(data)
            self._dirty = False
            self._written = self.live_entries
        logger.debug("%s: compacted to %d bytes", self.path, len(data))

    def flush(self) -> None:
        """fsync what was written since the last flush.  Safe to call from another thread."""
        with self._lock:
            if not self._dirty or self._fd is None:
                return
            fd = os.dup(self._fd)  # a compaction may close ours meanwhile; the dup stays valid
            self._dirty = False
        try:
            os.fsync(fd)
            self.fsyncs += 1
        except OSError:
            with self._lock:
                self._dirty = True
            raise
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            try:
                if self._dirty:
                    os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None
                self._dirty = False

    @property
    def fsyncs_every_write(self) -> bool:
        """fsync "always": writes are durable before they are answered."""
        return self._fsync_always

    @property
    def dirty(self) -> bool:
        """Written but not fsynced yet (fsync = "interval" or "never")."""
        return self._dirty

    @property
    def closed(self) -> bool:
        return self._fd is None
