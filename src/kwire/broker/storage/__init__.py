"""Durable storage for the kwire broker: partition logs of segment files, Kafka's layout.

* ``LogManager(data_dir, config)`` owns a data directory of ``<topic>-<n>`` partition logs.
* ``PartitionLog``: append / read (``FileSlice`` ranges for sendfile) / offsets / retention.
* ``LogSegment``: one ``.log`` file with its ``.index`` and ``.timeindex``.
* ``load_partition``: startup loading and crash recovery.
* ``LogCleaner`` / ``Cleaner``: log compaction of partitions with cleanup.policy=compact.
* ``ProducerStateManager``: producers' sequences and open transactions per partition
  (``PartitionLog.producer_state``); ``TransactionIndex``: a segment's aborted transactions.

Errors are ``kwire.protocol.errors`` Kafka errors (``OffsetOutOfRangeError``,
``CorruptMessageError``, ``UnknownTopicOrPartitionError``...), so handlers map them to codes.
"""

from .cleaner import Cleaner, CleanerConfig, CleanResult, LogCleaner
from .config import CREATE_TIME, LOG_APPEND_TIME, LogConfig
from .loader import LoadedLog, load_partition
from .log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, PartitionLog
from .manager import CLEAN_SHUTDOWN_FILE, LogManager, validate_topic_name
from .producer_state import ProducerEntry, ProducerStateManager
from .segment import FileSlice, LogSegment
from .txn_index import AbortedTxn, TransactionIndex

__all__ = [
    "AbortedTxn",
    "CLEAN_SHUTDOWN_FILE",
    "CleanResult",
    "Cleaner",
    "CleanerConfig",
    "LogCleaner",
    "CREATE_TIME",
    "EARLIEST_TIMESTAMP",
    "FileSlice",
    "LATEST_TIMESTAMP",
    "LOG_APPEND_TIME",
    "LoadedLog",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "MAX_TIMESTAMP",
    "PartitionLog",
    "ProducerEntry",
    "ProducerStateManager",
    "TransactionIndex",
    "load_partition",
    "validate_topic_name",
]
