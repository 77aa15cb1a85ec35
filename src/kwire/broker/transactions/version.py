"""Transaction versions (Kafka's ``transaction.version`` feature, KIP-890): what a level means
and which version a client's request speaks.

* The cluster's finalized level picks the format of the ``__transaction_state`` values (level
  1+: TransactionLogValue v1, flexible, with the tagged fields) and how the coordinator ends a
  transaction on its own (a timeout, InitProducerId fencing an open one): at level 2 that abort
  bumps the epoch once more, as Kafka's coordinator does with the server's version.
* What a client's request does follows its own version, whatever the cluster's level, as
  Kafka's ``TransactionVersion.transactionVersionForEndTxn`` / ``...ForAddPartitionsToTxn``:
  EndTxn v5+ and AddPartitionsToTxn v4+ speak transactions v2 (the epoch is bumped at every
  EndTxn, partitions and groups join implicitly with Produce v12+ and TxnOffsetCommit v5+),
  older versions transactions v1.  So an older client works unchanged on a level 2 cluster, and
  clients that read the finalized level (Java's TransactionManager, kwire's) choose v2 at 2.
"""

from __future__ import annotations

__all__ = ["FEATURE", "DEFAULT_LEVEL", "TV_0", "TV_2", "end_txn_version", "add_partitions_version",
           "produce_adds_partitions", "txn_offset_commit_adds_group", "log_value_version", "supports_epoch_bump"]

FEATURE = "transaction.version"
DEFAULT_LEVEL = 2  # Kafka 4.3 formats a new cluster at transaction.version 2
TV_0, TV_2 = 0, 2  # what a client's request speaks (Kafka records TV_0 for every pre-v2 client)


def end_txn_version(api_version: int) -> int:
    return TV_2 if api_version > 4 else TV_0


def add_partitions_version(api_version: int) -> int:
    return TV_2 if api_version > 3 else TV_0


def produce_adds_partitions(api_version: int) -> bool:
    """Produce v12+ adds its partition to the producer's transaction (KIP-890 part 2); older
    versions only verify that the client added it (part 1)."""
    return api_version > 11


def txn_offset_commit_adds_group(api_version: int) -> bool:
    """TxnOffsetCommit v5+ adds the group to the transaction (no AddOffsetsToTxn)."""
    return api_version > 4


def log_value_version(level: int) -> int:
    """The TransactionLogValue version Kafka writes at this level (TransactionVersion.transactionLogValueVersion)."""
    return 1 if level >= 1 else 0


def supports_epoch_bump(level: int) -> bool:
    return level >= 2
