"""DescribeTopicPartitions (KIP-966): topics and partitions a page at a time, with a cursor.

Follows Kafka's DescribeTopicPartitionsRequestHandler and KRaftMetadataCache's
getTopicMetadataForDescribeTopicResponse: the topics (all that the principal may describe when
the request names none) from the cursor's topic on, in name order, with at most
``min(max.request.partition.size.limit, ResponsePartitionLimit)`` partitions; when the limit stops
the page, NextCursor names the first partition left out (the next topic's partition 0 when a topic
ended exactly at the limit).  A named topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION (or
INVALID_TOPIC_EXCEPTION for an invalid name) where the page has room; one the principal may not
describe is TOPIC_AUTHORIZATION_FAILED, listed after the others.  A cursor whose topic is not among
the named ones makes the request invalid.  This broker leads every partition, alone in its replica
set and ISR; the ELR lists are empty.
"""

from __future__ import annotations

import uuid

from kwire.protocol import messages
from kwire.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    InvalidTopicException,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..storage import validate_topic_name
from ..topics import is_internal
from .authorized_ops import authorized_operations
from .common import NO_AUTHORIZED_OPERATIONS
from .registry import handler

# Kafka's max.request.partition.size.limit default: the most partitions one answer carries.
MAX_PARTITIONS_PER_RESPONSE = 2000
_ZERO_UUID = uuid.UUID(int=0)


def _error_topic(Topic, name: str, code: int, operations: int = NO_AUTHORIZED_OPERATIONS):
    return Topic(error_code=code, name=name, topic_id=_ZERO_UUID, is_internal=is_internal(name), partitions=[],
                 topic_authorized_operations=operations)


@handler(messages.DescribeTopicPartitionsRequest.API_KEY, 0)
def handle_describe_topic_partitions(ctx, request):
    R = messages.DescribeTopicPartitionsResponse
    Topic = R.DescribeTopicPartitionsResponseTopic
    broker = ctx.broker
    node = broker.config.node_id
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    listing_all = not request.topics
    if listing_all:
        names = [n for n in broker.topics.names(internal=True) if n >= after]
    else:
        names = list(dict.fromkeys(t.name for t in request.topics if t.name >= after))
        if cursor is not None and cursor.topic_name not in names:
            # Kafka refuses the request (INVALID_REQUEST) for every topic named in it.
            return R(throttle_time_ms=0, next_cursor=None, topics=[
                _error_topic(Topic, t.name, InvalidRequestError.code) for t in request.topics])
    denied = []
    allowed = []
    for name in sorted(names):
        if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            allowed.append(name)
        elif not listing_all:
            denied.append(_error_topic(Topic, name, TopicAuthorizationFailedError.code))
    remaining = min(MAX_PARTITIONS_PER_RESPONSE, request.response_partition_limit)
    topics = []
    next_cursor = None
    for name in allowed:
        if remaining == 0:  # the page ended exactly with the previous topic
            next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        if remaining < 0:
            break
        operations = authorized_operations(ctx, ResourceType.TOPIC, name)
        info = broker.topics.get(name)
        if info is None:
            if not listing_all:
                try:
                    validate_topic_name(name)
                    code = UnknownTopicOrPartitionError.code
                except InvalidTopicException:
                    code = InvalidTopicException.code
                topics.append(_error_topic(Topic, name, code, operations))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        start = max(start, 0)
        end = min(info.partitions, start + remaining)
        partitions = [Topic.DescribeTopicPartitionsResponsePartition(
            error_code=ErrorCode.NONE, partition_index=p, leader_id=node, leader_epoch=0, replica_nodes=[node], isr_nodes=[node],
            eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[]) for p in range(start, end)]
        topics.append(Topic(error_code=ErrorCode.NONE, name=name, topic_id=info.topic_id, is_internal=info.internal,
                            partitions=partitions, topic_authorized_operations=operations))
        if end < info.partitions:
            next_cursor = R.Cursor(topic_name=name, partition_index=end)
            break
        remaining -= len(partitions)
    return R(throttle_time_ms=0, topics=topics + denied, next_cursor=next_cursor)
