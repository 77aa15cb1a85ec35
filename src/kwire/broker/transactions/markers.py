"""Writing a transaction's markers: one control batch per partition the transaction touched.

Kafka's coordinator sends WriteTxnMarkers to each partition leader; here every partition is
local, so a marker is an append to the partition's log through the same path as produced
batches (``PartitionLog.append_marker``: validation, offset assignment, indexes, producer state),
and fetches waiting on the partition are woken (the LSO may have moved).  The caller makes the
markers durable as the broker's fsync policy says (see ``TransactionCoordinator``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kwire.protocol.errors import InvalidProducerEpochError, KafkaError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from ..state import PartitionWaiters
    from ..storage import LogManager, PartitionLog
    from ..topics import TopicRegistry

__all__ = ["MarkerWriter", "MarkerResult"]

logger = logging.getLogger("kwire.broker.transactions")


@dataclass
class MarkerResult:
    written: list[PartitionLog] = field(default_factory=list)  # logs to make durable
    failed: set[tuple[str, int]] = field(default_factory=set)  # to try again


class MarkerWriter:
    def __init__(self, logs: LogManager, topics: TopicRegistry, waiters: PartitionWaiters):
        self._logs = logs
        self._topics = topics
        self._waiters = waiters

    def write(self, producer_id: int, producer_epoch: int, commit: bool,
              partitions: Iterable[tuple[str, int]]) -> MarkerResult:
        """A COMMIT or ABORT marker of the producer in each partition.

        A partition deleted meanwhile needs none.  One where the producer already wrote with a
        newer epoch needs none either (its transaction of this epoch was ended by a fence).
        A storage failure leaves the partition in ``failed``."""
        result = MarkerResult()
        for topic, partition in partitions:
            if not self._topics.partition_exists(topic, partition):
                continue
            try:
                log = self._logs.get(topic, partition)
                log.append_marker(producer_id, producer_epoch, commit)
            except UnknownTopicOrPartitionError:
                continue
            except InvalidProducerEpochError as exc:
                logger.warning("no %s marker for producer %d in %s-%d: %s", "commit" if commit else "abort",
                               producer_id, topic, partition, exc)
                continue
            except (KafkaError, OSError) as exc:
                logger.error("could not write the %s marker of producer %d to %s-%d: %s",
                             "commit" if commit else "abort", producer_id, topic, partition, exc)
                result.failed.add((topic, partition))
                continue
            result.written.append(log)
            self._waiters.notify((topic, partition))
        return result
