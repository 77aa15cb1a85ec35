"""Metadata: this broker, the cluster id and the topics (auto-creating requested ones).

Internal topics (``__consumer_offsets``, ``__transaction_state``) are listed with is_internal;
a name Kafka reserves for one is never auto-created as a plain topic.

With an authorizer, topics the principal may not DESCRIBE are left out of "all topics" answers and
get TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs CREATE on the cluster or the topic
(without it a missing topic is UNKNOWN_TOPIC_OR_PARTITION, as in Kafka).
"""

from __future__ import annotations

import uuid

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    ErrorCode,
    InvalidTopicException,
    KafkaError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..storage import validate_topic_name
from ..topics import is_internal
from .authorized_ops import authorized_operations
from .common import NO_AUTHORIZED_OPERATIONS
from .registry import CloseConnection, handler
from .topic_admin import create_topic

Response = messages.MetadataResponse
_ZERO_UUID = uuid.UUID(int=0)


def _check_no_topic_ids(request, version: int) -> None:
    """Versions 10 and 11 carry topic ids in the request but cannot answer by id (the answer's
    name is not nullable before v12): as Kafka, such a request is invalid, and with no error
    code at the request's level, the connection closes."""
    for wanted in request.topics:
        if wanted.name is None:
            raise CloseConnection(f"Metadata v{version}: a topic without a name (by id) needs v12 or later")
        if wanted.topic_id.int:
            raise CloseConnection(f"Metadata v{version}: topic ids in requests need v12 or later "
                                  f"(topic {wanted.name!r} came with one)")


def _topic(ctx, name: str, topic_id: uuid.UUID | None = None, error: int = 0) -> Response.MetadataResponseTopic:
    broker = ctx.broker
    v = ctx.api_version
    info = broker.topics.get(name) if name is not None and error != TopicAuthorizationFailedError.code else None
    node = broker.config.node_id
    partitions = []
    if info is not None and not error:
        partitions = [Response.MetadataResponseTopic.MetadataResponsePartition(
            error_code=ErrorCode.NONE, partition_index=p, leader_id=node, leader_epoch=0 if v >= 7 else -1, replica_nodes=[node],
            isr_nodes=[node], offline_replicas=[]) for p in range(info.partitions)]
    tid = info.topic_id if info is not None else (topic_id or _ZERO_UUID)
    return Response.MetadataResponseTopic(
        error_code=error, name=name, topic_id=tid if v >= 10 else _ZERO_UUID,
        is_internal=info is not None and info.internal, partitions=partitions, topic_authorized_operations=NO_AUTHORIZED_OPERATIONS)


@handler(ApiKey.METADATA, 0)
def handle_metadata(ctx, request) -> Response:
    broker = ctx.broker
    host, port = ctx.advertised
    node = broker.config.node_id
    v = ctx.api_version
    topics = []
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    if request.topics is None or (v == 0 and not request.topics):
        topics = [_topic(ctx, name) for name in broker.topics.names(internal=True)
                  if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name)]
    else:
        allow_create = request.allow_auto_topic_creation if v >= 4 else True
        if 10 <= v < 12:
            _check_no_topic_ids(request, v)
        for wanted in request.topics:
            name = wanted.name
            if v >= 12 and (name is None or (not name and wanted.topic_id.int)):  # v12+: by topic id
                info = broker.topics.by_id(wanted.topic_id)
                if info is None:
                    topics.append(_topic(ctx, None, wanted.topic_id, UnknownTopicIdError.code))
                elif not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
                    # as Kafka: the id's name is not revealed
                    topics.append(_topic(ctx, None, wanted.topic_id, TopicAuthorizationFailedError.code))
                else:
                    topics.append(_topic(ctx, info.name))
                continue
            try:
                validate_topic_name(name)
            except InvalidTopicException:
                topics.append(_topic(ctx, name, error=InvalidTopicException.code))
                continue
            if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(_topic(ctx, name, error=TopicAuthorizationFailedError.code))
                continue
            if name not in broker.topics:
                if is_internal(name):
                    # A reserved name is never auto-created as a plain topic (kwire has no share
                    # coordinator to create __share_group_state for).
                    topics.append(_topic(ctx, name, error=UnknownTopicOrPartitionError.code))
                    continue
                may_create = (ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER)
                              or ctx.allowed(AclOperation.CREATE, ResourceType.TOPIC, name))
                if not (allow_create and broker.config.auto_create_topics and may_create):
                    topics.append(_topic(ctx, name, error=UnknownTopicOrPartitionError.code))
                    continue
                try:
                    create_topic(broker, name, broker.config.default_partitions, {})
                except KafkaError as exc:
                    topics.append(_topic(ctx, name, error=exc.code))
                    continue
            topics.append(_topic(ctx, name))
    # KIP-430, as Kafka's KafkaApis: asked-for topic operations are computed for each topic the
    # answer names without an error; cluster operations only where the version still has them
    # (v8-v10; Kafka 4 moved them to DescribeCluster).
    if v >= 8 and request.include_topic_authorized_operations:
        for topic in topics:
            if topic.error_code == ErrorCode.NONE and topic.name is not None:
                topic.topic_authorized_operations = authorized_operations(ctx, ResourceType.TOPIC, topic.name)
    cluster_ops = NO_AUTHORIZED_OPERATIONS
    if 8 <= v <= 10 and request.include_cluster_authorized_operations:
        cluster_ops = authorized_operations(ctx, ResourceType.CLUSTER)
    return Response(
        throttle_time_ms=0,
        brokers=[Response.MetadataResponseBroker(node_id=node, host=host, port=port, rack=None)],
        cluster_id=broker.cluster_id, controller_id=node, topics=topics,
        cluster_authorized_operations=cluster_ops, error_code=ErrorCode.NONE)
