"""Durable transaction coordinator state in ``__transaction_state``, as Kafka writes it.

Each transactional id lives in partition ``abs(javaStringHashCode(id)) % partitions`` of the
internal topic as Kafka's records (kwire.protocol.coordinator_records): ``TransactionLogKey``
(v0) -> ``TransactionLogValue`` with the producer id and epoch, timeout, state (Kafka's
TransactionState ids), the partitions of the transaction (its groups' ``__consumer_offsets``
partitions among them, as Kafka lists them) and its timestamps.  The value's version follows
the cluster's transaction.version as Kafka's TransactionLog does: v1 (flexible, with the tagged
PreviousProducerId, NextProducerId and ClientTransactionVersion) at level 1 and above, v0 at 0
(then v1 only when the producer id was rotated, so a client retrying across that rotation is
still recognised after a restart).  An expired id gets a tombstone.  Loading replays the
partitions on disk; the newest record of an id wins.

``save(txns)`` takes the whole state, as the coordinator hands it, and writes the records of the
ids whose metadata changed since the last save (a new transaction.version alone rewrites nothing) (one batch per partition), before the request that changed
them is answered.  Durability follows the broker's fsync policy: "always" flushes the partition
before ``save`` returns, "interval" leaves it to ``flush()``, "never" to the OS.  A record this
version can't read stops the broker: guessing could reissue a fenced epoch or lose an open
transaction.

A data dir of an earlier kwire kept this state in ``__kwire/transactions.json``: at the first
start it is written into the topic, flushed, and renamed ``transactions.json.migrated`` (a crash
before the rename migrates it again at the next start).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kwire.protocol import messages
from kwire.protocol.coordinator_records import (
    TRANSACTION_STATE_TOPIC,
    CoordinatorRecordError,
    TransactionStatus,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from kwire.protocol.errors import DecodeError
from kwire.protocol.records import RecordBatchBuilder

from ..internal_topics import log_batches
from ..storage._files import fsync_dir
from .state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionMetadata, TxnState
from .version import log_value_version

if TYPE_CHECKING:
    from ..internal_topics import InternalTopics
    from ..storage import PartitionLog

__all__ = ["TransactionStore", "TransactionStoreError", "TRANSACTIONS_FILE"]

logger = logging.getLogger("kwire.broker.transactions")

TRANSACTIONS_FILE = "transactions.json"  # the state file of kwire before __transaction_state
MIGRATED_SUFFIX = ".migrated"
_VERSION = 1
VALUE_VERSION_WITH_PREVIOUS_ID = 1

Value = messages.TransactionLogValue


class TransactionStoreError(ValueError):
    """The stored state can't be read; the message names where."""


def _signature(txn: TransactionMetadata) -> tuple:
    """What the stored record holds of ``txn`` (a save writes the ids whose signature changed)."""
    return (txn.producer_id, txn.last_producer_id, txn.next_producer_id, txn.producer_epoch, txn.timeout_ms,
            txn.state, frozenset(txn.partitions), txn.update_ms, txn.start_ms, txn.client_tv)


def _value(txn: TransactionMetadata, level: int) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    partitions = None if txn.state is TxnState.EMPTY else [
        Value.PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()]
    value = Value(producer_id=txn.producer_id, previous_producer_id=txn.last_producer_id,
                  producer_epoch=txn.producer_epoch, transaction_timeout_ms=txn.timeout_ms,
                  transaction_status=TransactionStatus[txn.state.name], transaction_partitions=partitions,
                  transaction_last_update_timestamp_ms=txn.update_ms, transaction_start_timestamp_ms=txn.start_ms,
                  next_producer_id=txn.next_producer_id, client_transaction_version=txn.client_tv)
    version = log_value_version(level)
    if txn.last_producer_id != NO_PRODUCER_ID:
        version = max(version, VALUE_VERSION_WITH_PREVIOUS_ID)
    if version < 1:  # v0 has none of the tagged fields
        value.next_producer_id, value.client_transaction_version = NO_PRODUCER_ID, 0
    return encode_value(value, version)


def _metadata(transactional_id: str, value) -> TransactionMetadata:
    previous = getattr(value, "previous_producer_id", NO_PRODUCER_ID)
    following = getattr(value, "next_producer_id", NO_PRODUCER_ID)
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=value.producer_id, producer_epoch=value.producer_epoch,
        timeout_ms=value.transaction_timeout_ms, state=TxnState[TransactionStatus(value.transaction_status).name],
        last_producer_id=previous if previous is not None else NO_PRODUCER_ID,
        last_producer_epoch=NO_PRODUCER_EPOCH,  # not in Kafka's record either
        partitions={(p.topic, i) for p in (value.transaction_partitions or []) for i in p.partition_ids},
        start_ms=value.transaction_start_timestamp_ms, update_ms=value.transaction_last_update_timestamp_ms,
        next_producer_id=following if following is not None else NO_PRODUCER_ID,
        client_tv=getattr(value, "client_transaction_version", 0) or 0)


class TransactionStore:
    def __init__(self, topics: InternalTopics, directory: Path, *, fsync: str = "never",
                 notify: Callable[[tuple[str, int]], None] | None = None,
                 transaction_version: Callable[[], int] = lambda: 2):
        self._topics = topics
        self.directory = Path(directory)  # where transactions.json of an earlier kwire may be
        self.path = self.directory / TRANSACTIONS_FILE
        self._fsync_always = fsync == "always"
        self._notify = notify
        self._lock = threading.Lock()  # flush() runs in a worker thread
        self._unflushed: dict[int, PartitionLog] = {}
        self._level = transaction_version  # the cluster's transaction.version (picks the value version)
        self._written: dict[str, tuple] = {}  # transactional id -> the signature of its stored value
        self.writes = 0  # for tests and stats

    # --- reading

    def load(self) -> dict[str, TransactionMetadata]:
        """Every stored transactional id's metadata: the topic's, then (once) the legacy file's."""
        return self.install(self.read_all())

    def state_on_disk(self) -> bool:
        """Whether a partition of the topic has a log (else ``read_all`` has nothing to read)."""
        return bool(self._topics.existing_partitions(TRANSACTION_STATE_TOPIC))

    def read_all(self) -> dict[str, TransactionMetadata]:
        """Replay the topic's partitions: every transactional id's metadata.  Reads only the
        logs, so the loader runs it off the event loop; ``install`` makes it the store's."""
        txns: dict[str, TransactionMetadata] = {}
        for partition in self._topics.existing_partitions(TRANSACTION_STATE_TOPIC):
            log = self._topics.existing_log(TRANSACTION_STATE_TOPIC, partition)
            if log is not None:
                self._replay(partition, log, txns)
        return txns

    def install(self, txns: dict[str, TransactionMetadata]) -> dict[str, TransactionMetadata]:
        """Take a replay's result as what is stored, then migrate (once) the legacy file into it;
        returns every transactional id's metadata."""
        self._written = {tid: _signature(t) for tid, t in txns.items()}
        legacy = self._load_legacy()
        if legacy is not None:
            txns.update(legacy)
            self.save(txns.values())
            self.flush()  # on disk before the file goes, whatever the fsync policy
            os.replace(self.path, self.path.with_name(self.path.name + MIGRATED_SUFFIX))
            fsync_dir(self.directory)
            logger.info("migrated %s to %s: %d transactional id(s); the file is now %s", self.path,
                        TRANSACTION_STATE_TOPIC, len(legacy), self.path.name + MIGRATED_SUFFIX)
        return txns

    def _replay(self, partition: int, log: PartitionLog, txns: dict[str, TransactionMetadata]) -> None:
        start = log.log_start_offset
        for batch in log_batches(log):
            if batch.is_control:
                continue
            try:
                records = batch.records()
            except DecodeError as exc:
                raise TransactionStoreError(f"{TRANSACTION_STATE_TOPIC}-{partition} offset {batch.base_offset}: "
                                            f"unreadable batch: {exc}") from None
            for record in records:
                if record.offset < start:  # the part of a first batch below the log start
                    continue
                try:
                    key = decode_key(record.key, TRANSACTION_STATE_TOPIC)
                    value = decode_value(key, record.value)
                    if value is None:
                        txns.pop(key.transactional_id, None)
                    else:
                        txns[key.transactional_id] = _metadata(key.transactional_id, value)
                except (CoordinatorRecordError, KeyError, ValueError) as exc:
                    raise TransactionStoreError(f"{TRANSACTION_STATE_TOPIC}-{partition} offset {record.offset}: "
                                                f"cannot read a transaction record: {exc!r}") from None

    def _load_legacy(self) -> dict[str, TransactionMetadata] | None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        if tmp.exists():
            logger.warning("%s: removing the leftover of an interrupted write", tmp)
            tmp.unlink()
        try:
            doc = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise TransactionStoreError(f"{self.path}: unreadable transaction state: {exc}") from None
        if not isinstance(doc, dict) or doc.get("version") != _VERSION:
            raise TransactionStoreError(f"{self.path}: unknown version {doc.get('version') if isinstance(doc, dict) else doc!r}")
        try:
            txns = [TransactionMetadata.from_json(obj) for obj in doc["transactions"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise TransactionStoreError(f"{self.path}: cannot read a transaction: {exc!r}") from None
        return {t.transactional_id: t for t in txns}

    # --- writing

    def save(self, txns: Iterable[TransactionMetadata]) -> None:
        """Store ``txns`` (the whole state): a record for each id changed since the last save, a
        tombstone for each id gone.  ``OSError`` if it can't be written."""
        current = {t.transactional_id: (t, _signature(t)) for t in txns}
        changed: dict[str, tuple | None] = {tid: sig for tid, (_, sig) in current.items()
                                            if self._written.get(tid) != sig}
        changed.update({tid: None for tid in self._written if tid not in current})
        if not changed:
            return
        level = self._level()
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for tid, sig in sorted(changed.items()):
            key = encode_key(messages.TransactionLogKey(transactional_id=tid))
            value = None if sig is None else _value(current[tid][0], level)
            by_partition.setdefault(self._topics.partition_of(TRANSACTION_STATE_TOPIC, tid), []).append((key, value))
        now = time.time_ns() // 1_000_000
        for partition, records in sorted(by_partition.items()):
            log = self._topics.partition_log(TRANSACTION_STATE_TOPIC, partition)
            builder = RecordBatchBuilder()
            for key, value in records:
                builder.append(key, value, now)
            try:
                log.append(builder.build(), now_ms=now)
            except Exception as exc:
                if isinstance(exc, OSError):
                    raise
                raise OSError(f"{TRANSACTION_STATE_TOPIC}-{partition}: {exc}") from exc
            if self._notify is not None:
                self._notify((TRANSACTION_STATE_TOPIC, partition))
            if self._fsync_always:
                log.flush()
            else:
                with self._lock:
                    self._unflushed[id(log)] = log
        for tid, value in changed.items():
            if value is None:
                self._written.pop(tid, None)
            else:
                self._written[tid] = value
        self.writes += 1

    def flush(self) -> None:
        """Flush the partitions written since the last flush.  Safe to call from another thread."""
        with self._lock:
            logs = list(self._unflushed.values())
            self._unflushed.clear()
        done = 0
        try:
            for log in logs:
                log.flush()
                done += 1
        except OSError:
            with self._lock:
                for log in logs[done:]:
                    self._unflushed.setdefault(id(log), log)
            raise

    def close(self) -> None:
        self.flush()
