"""Offsets in partition logs by timestamp (ListOffsets): the earliest, the latest, or the first
record at or after a time.

A partition's offsets live on its leader, so the lookup is one request per leader.  Partitions
whose leader moved (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH...) or has none yet are asked
again after a metadata refresh, until the timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import NamedTuple

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import KafkaError, LeaderNotAvailableError

from .cluster import Cluster
from .errors import is_retriable
from .retry import retrying
from .types import TopicPartition

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "OffsetAndTimestamp", "list_offsets"]

LATEST_TIMESTAMP = -1    # Kafka's ListOffsetsRequest.LATEST_TIMESTAMP: the log end (or LSO)
EARLIEST_TIMESTAMP = -2  # the log start offset
READ_COMMITTED = 1


class OffsetAndTimestamp(NamedTuple):
    """The first offset whose record has a timestamp at or after the one asked for."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


async def list_offsets(cluster: Cluster, timestamps: Mapping[TopicPartition, int], *, isolation_level: int = 0,
                       timeout: float | None = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """For each partition, the offset for its timestamp (or EARLIEST/LATEST_TIMESTAMP).

    None for a partition with no record at or after the timestamp.
    """
    found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    left = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
    topics = {tp.topic for tp in left}

    async def attempt() -> None:
        metadata = await cluster.metadata_for({tp.topic for tp in left})
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        retriable: BaseException | None = None
        for tp, ts in left.items():
            leader = metadata.leader(*tp)
            if leader is None:
                retriable = LeaderNotAvailableError(f"{tp} has no leader in the metadata")
            else:
                by_leader.setdefault(leader, {})[tp] = ts
        answers = await asyncio.gather(*(_ask_leader(cluster, node, parts, isolation_level)
                                         for node, parts in by_leader.items()), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                if not is_retriable(answer):
                    raise answer
                retriable = answer
                continue
            for tp, result in answer.items():
                if isinstance(result, KafkaError):
                    if not result.retriable:
                        raise result
                    retriable = result
                else:
                    found[tp] = result
                    del left[tp]
        if left:
            raise retriable or LeaderNotAvailableError("ListOffsets left partitions unanswered")

    async def refresh(_exc: BaseException) -> None:
        await cluster.refresh_metadata(topics)

    await retrying(attempt, timeout=cluster.request_timeout if timeout is None else timeout,
                   backoff=cluster.retry_backoff, what="ListOffsets for " + ", ".join(map(str, sorted(left))),
                   before_retry=refresh)
    return found


async def _ask_leader(cluster: Cluster, node: int, parts: dict[TopicPartition, int], isolation_level: int
                      ) -> dict[TopicPartition, OffsetAndTimestamp | None | KafkaError]:
    conn = await cluster.connection(node)
    # v1 gives one offset per partition (v0 a list); v2 adds the isolation level.
    version = conn.version_for(ApiKey.LIST_OFFSETS, low=2 if isolation_level == READ_COMMITTED else 1)
    metadata = cluster.metadata
    by_topic: dict[str, list[messages.ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition]] = {}
    for tp, ts in parts.items():
        part = messages.ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=tp.partition, timestamp=ts)
        if version >= 4:
            part.current_leader_epoch = metadata.leader_epoch(*tp)
        by_topic.setdefault(tp.topic, []).append(part)
    request = messages.ListOffsetsRequest(
        replica_id=-1, topics=[messages.ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps)
                               for t, ps in by_topic.items()])
    if version >= 2:
        request.isolation_level = isolation_level
    if version >= 10:
        request.timeout_ms = int(cluster.request_timeout * 1000)
    response = await conn.send(request, version=version)
    out: dict[TopicPartition, OffsetAndTimestamp | None | KafkaError] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if tp not in parts:
                continue
            if p.error_code:
                out[tp] = KafkaError.for_code(p.error_code)(f"ListOffsets for {tp} on node {node}")
            elif p.offset < 0:
                out[tp] = None
            else:
                out[tp] = OffsetAndTimestamp(p.offset, p.timestamp, p.leader_epoch if version >= 4 else -1)
    return out
