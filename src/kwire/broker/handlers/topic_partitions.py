"""DescribeTopicPartitions (KIP-966): topics and partitions a page at a time, with a cursor.

Follows Kafka's DescribeTopicPartitionsRequestHandler and KRaftMetadataCache.describeTopicResponse:
the topics (all that the principal may describe when the request names none) in name order from
the cursor's topic, at most ``min(ResponsePartitionLimit, max.request.partition.size.limit)``
partitions in the answer; when the limit stops the page, NextCursor names the first partition left
out (the next topic's partition 0 when a topic ended exactly at the limit).  This broker leads every
partition, alone in its replica set and ISR; there are no eligible leader replicas to report.
"""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.errors import InvalidRequestError, TopicAuthorizationFailedError, UnknownTopicOrPartitionError

from ..auth.acls import AclOperation, ResourceType
from .authorized_ops import authorized_operations
from .registry import handler

# Kafka's max.request.partition.size.limit default: the most partitions one answer carries.
MAX_PARTITIONS_PER_RESPONSE = 2000


@handler(messages.DescribeTopicPartitionsRequest.API_KEY, 0)
def handle_describe_topic_partitions(ctx, request):
    R = messages.DescribeTopicPartitionsResponse
    Topic = R.DescribeTopicPartitionsResponseTopic
    broker = ctx.broker
    node = broker.config.node_id
    cursor = request.cursor
    if cursor is not None and cursor.partition_index < 0:
        # Kafka refuses the whole request (INVALID_REQUEST); the answer has no top-level code, so
        # the cursor's topic carries it.
        return R(throttle_time_ms=0, topics=[Topic(error_code=InvalidRequestError.code, name=cursor.topic_name,
                                                   is_internal=False, partitions=[],
                                                   topic_authorized_operations=0)], next_cursor=None)
    limit = MAX_PARTITIONS_PER_RESPONSE
    if request.response_partition_limit > 0:
        limit = min(limit, request.response_partition_limit)
    if request.topics:
        names = sorted({t.name for t in request.topics})
        listing_all = False
    else:
        names = [n for n in broker.topics.names(internal=True)
                 if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, n)]
        names.sort()
        listing_all = True
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    topics = []
    next_cursor = None
    remaining = limit
    for name in names:
        if not listing_all and not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            topics.append(Topic(error_code=TopicAuthorizationFailedError.code, name=name, is_internal=False,
                                partitions=[], topic_authorized_operations=0))
            continue
        info = broker.topics.get(name)
        if info is None:
            topics.append(Topic(error_code=UnknownTopicOrPartitionError.code, name=name, is_internal=False,
                                partitions=[], topic_authorized_operations=0))
            continue
        if remaining == 0:  # the page ended exactly with the previous topic
            next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(info.partitions, start + remaining)
        partitions = [Topic.DescribeTopicPartitionsResponsePartition(
            error_code=0, partition_index=p, leader_id=node, leader_epoch=0, replica_nodes=[node], isr_nodes=[node],
            eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[]) for p in range(start, end)]
        topics.append(Topic(error_code=0, name=name, topic_id=info.topic_id, is_internal=info.internal,
                            partitions=partitions,
                            topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, name)))
        remaining -= max(end - start, 0)
        if end < info.partitions:
            next_cursor = R.Cursor(topic_name=name, partition_index=end)
            break
    return R(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
