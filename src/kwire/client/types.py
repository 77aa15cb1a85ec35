"""Small value types shared by the producer, the consumer, the admin client and the assignors.

No ``from __future__ import annotations`` here: NamedTuple compiles each annotation given as text
(one ForwardRef per field, ~1 ms of every client command line's start-up for these four classes),
and these annotations are all plain types at run time."""

from typing import Any, NamedTuple

# The (topic, partition) pair is the protocol layer's (the consumer protocol's); re-exported here
# as the client's public type.
from kwire.protocol.topic_partition import TopicPartition

__all__ = ["ConsumerRecord", "OffsetAndMetadata", "RecordMetadata", "TopicPartition"]


class OffsetAndMetadata(NamedTuple):
    """A committed position: the offset of the next record to read, and optional metadata."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class RecordMetadata(NamedTuple):
    """Where a produced record was written.  ``offset`` is -1 with acks=0 (nobody told us)."""

    topic: str
    partition: int
    offset: int
    timestamp: int          # CreateTime given or chosen by the producer, or the broker's LogAppendTime
    serialized_key_size: int = -1
    serialized_value_size: int = -1


class ConsumerRecord(NamedTuple):
    """One consumed record.  ``headers`` is a tuple of ``(key, value)`` pairs, ``()`` when the
    record has none (a tuple rather than a list: immutable, and one GC-tracked object less
    per record; compare with ``tuple(...)`` or iterate, do not mutate)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int     # 0 CreateTime, 1 LogAppendTime (Kafka's numbering)
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int = -1


class FetchedBatch(NamedTuple):
    """Fetched data of one partition handed out whole (``Consumer.poll_batches``), for readers
    that decode records themselves.  Either ``batch``, an undecoded v2 ``RecordBatch`` (a data
    batch: control batches and aborted transactions never come out) whose records from offset
    ``start`` on are the application's, or ``records``, already decoded ``ConsumerRecord``s (a
    legacy message set, or the rest of a batch ``poll()`` began)."""

    tp: TopicPartition
    batch: Any
    start: int
    records: list[ConsumerRecord] | None
