"""Aborted transactions of one segment: Kafka's ``.txnindex`` file.

A read_committed consumer needs, with every fetch, the producer id and first offset of each
aborted transaction whose records the fetched range may hold, so that it can drop them.  The
broker never decodes records to find them: when an abort marker completes a transaction that
wrote data to the partition, the transaction is appended to the index of the segment holding
the marker, and a fetch collects the entries that overlap its range.

Entries are Kafka's ``AbortedTxn`` layout, 34 bytes big-endian::

    version int16 (0) | producer id int64 | first offset int64 | last offset int64 |
    last stable offset int64

``last offset`` is the marker's offset; ``last stable offset`` is the partition's LSO right
after the abort (the first offset of the oldest transaction still open, else the offset after
the marker).  A search for the transactions overlapping ``[start, end)`` can stop at the first
entry whose LSO is at or past ``end``: every later abort belongs to a transaction that started
after ``end``.

Like Kafka's, the file is rebuilt from the log when it is missing or unreadable, and entries
past the offset loading replays from are dropped and re-made (see ``ProducerStateManager.load``).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ._files import TXNINDEX_SUFFIX
from .index import _IndexFile

__all__ = ["AbortedTxn", "TransactionIndex", "TXNINDEX_SUFFIX"]

_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex(_IndexFile):
    """The aborted transactions whose markers are in one segment, in marker order."""

    _ENTRY = struct.Struct(">hqqqq")

    @property
    def entries(self) -> list[AbortedTxn]:
        return [AbortedTxn(*e[1:]) for e in self._entries]

    def append(self, txn: AbortedTxn) -> None:
        """Record an abort; markers come in offset order, so entries do too (Kafka refuses otherwise)."""
        if self._entries and txn.last_offset <= self._entries[-1][3]:
            raise ValueError(f"{self.path.name}: aborted transaction ending at {txn.last_offset} does not follow "
                             f"the last one, ending at {self._entries[-1][3]}")
        self._write((_VERSION, *txn))

    def collect(self, start_offset: int, end_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions that may hold records in ``[start_offset, end_offset)``, and
        whether the search is complete (an entry showed no later segment can add one)."""
        found = []
        for _, pid, first, last, lso in self._entries:
            if last >= start_offset and first < end_offset:
                found.append(AbortedTxn(pid, first, last, lso))
            if lso >= end_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at ``offset`` or later (the log was cut there, or they are
        about to be rebuilt from it)."""
        self._truncate_from(3, offset)  # an entry's last offset: its abort marker

    def sanity_check(self, next_offset: int | None = None) -> str | None:
        problem = super().sanity_check()
        if problem:
            return problem
        prev_last = -1
        for version, pid, first, last, lso in self._entries:
            if version != _VERSION:
                return f"{self.path.name}: entry of producer {pid} has unknown version {version}"
            if not first <= last or last <= prev_last or pid < 0:
                return f"{self.path.name}: entry ({pid}, {first}, {last}) is out of order"
            if last < self.base_offset or (next_offset is not None and last >= next_offset):
                return f"{self.path.name}: entry ({pid}, {first}, {last}) names a marker outside the segment"
            if not 0 <= lso <= last + 1:  # the LSO right after the abort can't be past its marker
                return f"{self.path.name}: entry ({pid}, {first}, {last}) has last stable offset {lso}"
            prev_last = last
        return None
