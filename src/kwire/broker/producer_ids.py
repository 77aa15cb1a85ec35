"""Producer id allocation for InitProducerId: unique for the life of the data directory.

Ids are handed out from blocks (as Kafka's controller hands blocks to brokers).  Before the
first id of a block is given out, the block's upper bound is written (atomically, fsynced) to
``<data_dir>/__kwire/producer_ids``; a restart continues from the stored bound.  So a crash
at any point can waste the rest of a block but never hand out an id twice.  A clean
``close()`` stores the next unused id instead, so clean restarts waste nothing.

File format (text, like the partition checkpoints)::

    0                   <- version
    <next id that was never handed out>
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from kwire.protocol.errors import CoordinatorLoadInProgressError, KafkaError, KafkaStorageError

from .storage._files import atomic_write
from .topics import META_DIR

__all__ = ["ProducerIdManager", "BLOCK_SIZE", "FIRST_PRODUCER_ID", "PRODUCER_IDS_FILE"]

logger = logging.getLogger("kwire.broker")

PRODUCER_IDS_FILE = "producer_ids"
BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock size
FIRST_PRODUCER_ID = 0  # as Kafka
_INT64_MAX = 2**63 - 1
_VERSION = "0"


class ProducerIdManager:
    """Allocates producer ids for the broker whose data directory is ``data_dir``.  Thread-safe."""

    def __init__(self, data_dir: Path, *, block_size: int = BLOCK_SIZE):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.path = Path(data_dir) / META_DIR / PRODUCER_IDS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = self._read()
        self._reserved_until = self._next  # nothing of the stored range is reserved by this run yet
        self._closed = False

    def _read(self) -> int:
        try:
            text = self.path.read_text("ascii")
        except FileNotFoundError:
            return FIRST_PRODUCER_ID
        except (OSError, UnicodeDecodeError) as exc:
            raise KafkaStorageError(f"{self.path}: {exc}") from None
        lines = text.split("\n")
        try:
            if len(lines) != 3 or lines[0] != _VERSION or lines[2]:
                raise ValueError
            value = int(lines[1])
        except ValueError:
            # Guessing could hand out ids that producers already use: refuse to start.
            raise KafkaStorageError(f"{self.path}: cannot parse {text[:80]!r}") from None
        if not FIRST_PRODUCER_ID <= value <= _INT64_MAX:
            raise KafkaStorageError(f"{self.path}: producer id {value} out of range")
        return value

    def _write(self, value: int) -> None:
        atomic_write(self.path, f"{_VERSION}\n{value}\n".encode("ascii"))

    @property
    def next_id(self) -> int:
        """Every id below this has been handed out (or skipped for good after a crash)."""
        with self._lock:
            return self._next

    def was_allocated(self, producer_id: int) -> bool:
        """Whether ``producer_id`` can belong to a producer: handed out (or skipped) before.

        An id at or above ``next_id`` may be given to a new producer later, so no client may
        claim it yet."""
        return FIRST_PRODUCER_ID <= producer_id < self.next_id

    def allocate(self) -> int:
        """A producer id never handed out before in this data directory."""
        with self._lock:
            if self._closed:
                raise KafkaStorageError("the producer id manager is closed")
            if self._next >= self._reserved_until:
                self._reserve_block()
            pid = self._next
            self._next += 1
            return pid

    def _reserve_block(self) -> None:
        if self._next >= _INT64_MAX:
            raise KafkaError("producer ids are exhausted")
        bound = min(self._next + self.block_size, _INT64_MAX)
        try:
            self._write(bound)
        except OSError as exc:
            # Kafka's answer when its producer id block can't be had yet: retriable, the client
            # retries InitProducerId.
            logger.error("cannot reserve producer ids in %s: %s", self.path, exc)
            raise CoordinatorLoadInProgressError(f"cannot reserve producer ids: {exc}") from exc
        self._reserved_until = bound

    def close(self) -> None:
        """Give the unused rest of the block back (store the next id).  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._reserved_until != self._next:
                self._write(self._next)
