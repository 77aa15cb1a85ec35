"""Durable transaction coordinator state: one small JSON file, replaced atomically on each change.

Kafka keeps this in the ``__transaction_state`` topic; one broker needs only a file:
``<data dir>/__kwire/transactions.json``::

    {"version": 1, "transactions": [{"id", "pid", "epoch", "last_pid", "last_epoch", "timeout_ms",
                                     "state", "partitions": [[topic, partition], ...], "groups",
                                     "start_ms", "update_ms"}, ...]}

It holds one entry per transactional id (ids expire after ``transactional_id_expiration_ms``
idle, as in Kafka), so rewriting it whole on every transition stays cheap, and a crash leaves
the old or the new file, never half of one (``atomic_write``).  The file is written before the
request that changed it is answered.  Durability follows the broker's fsync policy like the
group journal: "always" fsyncs each write; "interval" leaves it to ``flush()`` (called by the
broker's periodic flush); "never" to the OS (``close()`` still fsyncs).  A file this version
can't read stops the broker: guessing could reissue a fenced epoch or lose an open transaction.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from ..storage._files import atomic_write, fsync_dir
from .state import TransactionMetadata

__all__ = ["TransactionStore", "TransactionStoreError", "TRANSACTIONS_FILE"]

logger = logging.getLogger("kwire.broker.transactions")

TRANSACTIONS_FILE = "transactions.json"
_VERSION = 1


class TransactionStoreError(ValueError):
    """The state file can't be read; the message names it."""


class TransactionStore:
    def __init__(self, directory: Path, *, fsync: str = "never"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / TRANSACTIONS_FILE
        self._fsync_always = fsync == "always"
        self._lock = threading.Lock()  # flush() runs in a worker thread
        self._dirty = False
        self.writes = 0  # for tests and stats

    def load(self) -> dict[str, TransactionMetadata]:
        """Every stored transactional id's metadata (empty if there is no file yet)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        if tmp.exists():
            logger.warning("%s: removing the leftover of an interrupted write", tmp)
            tmp.unlink()
        try:
            doc = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise TransactionStoreError(f"{self.path}: unreadable transaction state: {exc}") from None
        if not isinstance(doc, dict) or doc.get("version") != _VERSION:
            raise TransactionStoreError(f"{self.path}: unknown version {doc.get('version') if isinstance(doc, dict) else doc!r}")
        try:
            txns = [TransactionMetadata.from_json(obj) for obj in doc["transactions"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise TransactionStoreError(f"{self.path}: cannot read a transaction: {exc!r}") from None
        return {t.transactional_id: t for t in txns}

    def save(self, txns: Iterable[TransactionMetadata]) -> None:
        """Replace the file with ``txns`` (the whole state).  ``OSError`` if it can't be written."""
        doc = {"version": _VERSION, "transactions": [t.to_json() for t in sorted(txns, key=lambda t: t.transactional_id)]}
        data = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        with self._lock:
            atomic_write(self.path, data, durable=self._fsync_always)
            self._dirty = not self._fsync_always
            self.writes += 1

    def flush(self) -> None:
        """fsync the file (and its directory entry) if written since the last flush."""
        # The fsyncs run without the lock, so a save() on the event loop never waits for the disk;
        # a save made meanwhile replaces the file and marks it dirty again for the next flush.
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
        try:
            os.fsync(fd)
            fsync_dir(self.directory)
        except OSError:
            with self._lock:
                self._dirty = True
            raise
        finally:
            os.close(fd)

    def close(self) -> None:
        self.flush()
