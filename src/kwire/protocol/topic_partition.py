"""``TopicPartition``: a topic's partition, the (topic, partition index) pair the wire carries.

On its own so that what only needs the pair (the producer, ``kwire produce``) does not load the
consumer protocol's codec with it; ``kwire.protocol.consumer_protocol`` and
``kwire.client.types`` (the client's public ``kwire.TopicPartition``) re-export it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    """A topic's partition: the (topic, partition index) pair the consumer protocol lists."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
