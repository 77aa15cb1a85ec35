"""DescribeProducers: the idempotent and transactional producers each partition knows.

Follows Kafka's KafkaApis.handleDescribeProducersRequest and ReplicaManager.activeProducerState:
READ on the topic is required (else TOPIC_AUTHORIZATION_FAILED for its partitions), a partition not
hosted is UNKNOWN_TOPIC_OR_PARTITION, and each producer is reported from the partition's producer
state: epoch, last sequence, the time of its last append, and the first offset of its open
transaction (-1 when none).
"""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError

from ..auth.acls import AclOperation, ResourceType
from .registry import handler


@handler(messages.DescribeProducersRequest.API_KEY, 0)
def handle_describe_producers(ctx, request):
    R = messages.DescribeProducersResponse
    Topic = R.TopicResponse
    Partition = Topic.PartitionResponse
    broker = ctx.broker
    topics = []
    for t in request.topics:
        allowed = ctx.allowed(AclOperation.READ, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partition_indexes:
            if not allowed:
                parts.append(Partition(partition_index=p, error_code=TopicAuthorizationFailedError.code,
                                       error_message=None, active_producers=[]))
                continue
            try:
                log = broker.logs.get(t.name, p)
            except UnknownTopicOrPartitionError as exc:
                parts.append(Partition(partition_index=p, error_code=exc.code,
                                       error_message=f"This server does not host this topic-partition {t.name}-{p}.",
                                       active_producers=[]))
                continue
            producers = [Partition.ProducerState(
                producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                last_timestamp=e.last_update_ms, coordinator_epoch=-1, current_txn_start_offset=e.txn_first_offset)
                for _, e in sorted(log.producer_state.producers.items())]
            parts.append(Partition(partition_index=p, error_code=0, error_message=None, active_producers=producers))
        topics.append(Topic(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
