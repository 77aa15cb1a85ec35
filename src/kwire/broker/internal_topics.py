"""Kafka's internal topics in kwire's broker: ``__consumer_offsets``, ``__transaction_state`` and
``__share_group_state`` (KIP-932 share-partition state, kwire.broker.share.persister).

The group and transaction coordinators keep their state there as Kafka's own records (see
kwire.protocol.coordinator_records), so tools that read those topics (lag monitors such as
Burrow) see what they see on Kafka.  Both are compacted topics (Kafka's offsetsTopicConfigs and
TransactionLog's configs: cleanup.policy=compact, 100 MiB segments), listed as internal in
Metadata, readable by consumers and written only by the broker.

Start-up stays cheap: the topics are registered at their configured partition counts
(``offsets_topic_num_partitions``, ``transaction_state_log_num_partitions``, default 50 each) but
a partition's log directory is created only when it is first used (``partition_log``), so a new
broker does not create 100 directories.  After a clean shutdown their existing logs are opened
on first use too (``LAZY_TOPICS``, given to the LogManager), and the coordinators load them in
the background after the broker listens (``kwire.broker.coordinator.loader``), as Kafka's
coordinators load their partitions after election.  The topic list records them at that first use too (a
fresh broker writes nothing): until a record is written their partition count may still change
with the settings, and nothing depends on it.

A key's partition is Kafka's ``Utils.abs(key.hashCode()) % partitions`` with Java's String
hashCode (GroupCoordinator.partitionFor, TransactionStateManager.partitionFor).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kwire.protocol.coordinator_records import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from kwire.protocol.errors import UnknownTopicOrPartitionError
from kwire.protocol.records import RecordBatch, iter_batches

from .topics import INTERNAL_TOPICS, TopicRegistry, is_internal

if TYPE_CHECKING:
    from .config import BrokerConfig
    from .storage import LogConfig, LogManager, PartitionLog

__all__ = ["InternalTopics", "OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC", "INTERNAL_TOPICS", "is_internal",
           "java_string_hash", "log_batches", "partition_for", "INTERNAL_TOPIC_CONFIGS", "LAZY_TOPICS"]

logger = logging.getLogger("kwire.broker.internal_topics")

# offsets.topic.segment.bytes and transaction.state.log.segment.bytes (Kafka's defaults).
_SEGMENT_BYTES = str(100 * 1024 * 1024)
INTERNAL_TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    # GroupCoordinator.groupMetadataTopicConfigs
    OFFSETS_TOPIC: {"cleanup.policy": "compact", "segment.bytes": _SEGMENT_BYTES, "compression.type": "producer"},
    # TransactionStateManager.transactionTopicConfigs
    TRANSACTION_STATE_TOPIC: {"cleanup.policy": "compact", "segment.bytes": _SEGMENT_BYTES},
    # ShareCoordinatorConfig: share.coordinator.state.topic.segment.bytes (100 MiB), compacted.
    SHARE_GROUP_STATE_TOPIC: {"cleanup.policy": "compact", "segment.bytes": _SEGMENT_BYTES},
}

# The internal topics whose partitions the log manager opens on first use after a clean
# shutdown (the coordinators' loader opens them in the background).
LAZY_TOPICS: frozenset[str] = frozenset(INTERNAL_TOPIC_CONFIGS)

_INT32 = 1 << 32


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... + s[n-1] over the UTF-16 code units, in
    int32 arithmetic (a character outside the BMP counts as its two surrogates)."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) % _INT32
    return h - _INT32 if h >= 1 << 31 else h


# How much of a log a coordinator's replay reads at a time.
_READ_CHUNK = 1 << 20


def log_batches(log: PartitionLog) -> Iterator[RecordBatch]:
    """The batches of an internal topic's partition log in offset order, from its log start to
    its end, read a chunk at a time: what a coordinator replays at load.  The first batch may
    begin before the log start (a log started mid-batch); a log that stops making progress ends
    the walk instead of looping."""
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        slices = log.read(offset, _READ_CHUNK)
        if not slices:
            return
        next_offset = offset
        for batch in iter_batches(b"".join(s.read() for s in slices)):
            if batch.next_offset <= offset:
                continue
            next_offset = batch.next_offset
            yield batch
        offset = next_offset if next_offset > offset else end


def partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode()) % partitions``; Utils.abs maps Integer.MIN_VALUE to 0
    (Math.abs would leave it negative)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class InternalTopics:
    """The internal topics of one broker: registers them, and opens their partitions' logs on
    first use."""

    def __init__(self, topics: TopicRegistry, config: BrokerConfig):
        self._topics = topics
        self._logs: LogManager | None = None
        self._log_config = None
        wanted = {OFFSETS_TOPIC: (config.offsets_topic_num_partitions, INTERNAL_TOPIC_CONFIGS[OFFSETS_TOPIC]),
                  TRANSACTION_STATE_TOPIC: (config.transaction_state_log_num_partitions,
                                            INTERNAL_TOPIC_CONFIGS[TRANSACTION_STATE_TOPIC])}
        # __share_group_state appears when the first share group needs it, as in Kafka (whose
        # share coordinator creates it on first use); once there it is kept like the others.
        self._share_state = (config.share_coordinator_state_topic_num_partitions,
                             INTERNAL_TOPIC_CONFIGS[SHARE_GROUP_STATE_TOPIC])
        if topics.get(SHARE_GROUP_STATE_TOPIC) is not None:
            wanted[SHARE_GROUP_STATE_TOPIC] = self._share_state
        for name in topics.ensure(wanted, save=False):
            logger.debug("internal topic %s: %d partitions", name, wanted[name][0])

    def ensure_share_state_topic(self) -> None:
        """Create ``__share_group_state`` if it does not exist yet (share groups call this before
        they write their first state)."""
        if self._topics.get(SHARE_GROUP_STATE_TOPIC) is None:
            self._topics.ensure({SHARE_GROUP_STATE_TOPIC: self._share_state})
            logger.info("created internal topic %s (%d partitions)", SHARE_GROUP_STATE_TOPIC, self._share_state[0])

    def attach(self, logs: LogManager, log_config) -> None:
        """The log manager, and ``log_config(info) -> LogConfig`` (BrokerState.log_config_for)."""
        self._logs = logs
        self._log_config = log_config

    def partitions(self, topic: str) -> int:
        """The partition count of an internal topic (fixed when it was created)."""
        info = self._topics.get(topic)
        if info is None:
            raise UnknownTopicOrPartitionError(f"internal topic {topic} does not exist")
        return info.partitions

    def partition_of(self, topic: str, key: str) -> int:
        """The partition of ``topic`` holding the state of ``key`` (a group or transactional id)."""
        return partition_for(key, self.partitions(topic))

    def partition_log(self, topic: str, partition: int) -> PartitionLog:
        """The log of a partition; an internal topic's partition gets its log on first use (a
        never-written one reads as an empty partition).  UnknownTopicOrPartitionError for a
        partition that does not exist."""
        assert self._logs is not None, "attach() the log manager first"
        try:
            return self._logs.get(topic, partition)
        except UnknownTopicOrPartitionError:
            info = self._topics.get(topic)
            if info is None or not info.internal or not 0 <= partition < info.partitions:
                raise
            # The topic list first: the partition count placing keys is fixed from the first record on.
            self._topics.save_pending()
            return self._logs.create_partition(topic, partition, self._log_config(info), exist_ok=True)

    def existing_partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` that have a log on disk, in order, without opening them
        (the log manager opens an internal partition on first use after a clean shutdown)."""
        assert self._logs is not None, "attach() the log manager first"
        return [p for t, p in self._logs.partitions() if t == topic]

    def existing_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log if it has one on disk (opened now if it was not), else None."""
        assert self._logs is not None, "attach() the log manager first"
        try:
            return self._logs.get(topic, partition)
        except UnknownTopicOrPartitionError:
            return None

    def log_config(self, topic: str) -> LogConfig:
        return self._log_config(self._topics.get(topic))
