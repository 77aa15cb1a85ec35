"""DescribeProducers: the idempotent and transactional producers each partition knows.

Follows Kafka's KafkaApis.handleDescribeProducersRequest and ReplicaManager.activeProducerState:
per topic, an invalid name is INVALID_TOPIC_EXCEPTION, READ is required (else
TOPIC_AUTHORIZATION_FAILED), an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION; each
producer is reported from the partition's producer state: epoch, last sequence, the time of its
last append (the broker's clock at the append: kwire keeps no batch timestamp there, where Kafka
reports the batch's), no coordinator epoch (-1), and the first offset of its open transaction
(-1 when none).
"""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.errors import ErrorCode, KafkaError, TopicAuthorizationFailedError, UnknownTopicOrPartitionError

from ..auth.acls import AclOperation, ResourceType
from ..storage import validate_topic_name
from .registry import handler


@handler(messages.DescribeProducersRequest.API_KEY, 0)
def handle_describe_producers(ctx, request):
    R = messages.DescribeProducersResponse
    Topic = R.TopicResponse
    Partition = Topic.PartitionResponse
    broker = ctx.broker
    topics = []
    for t in request.topics:
        try:  # the topic's error, for all its partitions: name, then READ, then existence
            validate_topic_name(t.name)
            if not ctx.allowed(AclOperation.READ, ResourceType.TOPIC, t.name):
                raise TopicAuthorizationFailedError(None)
            info = broker.topics.get(t.name)
            if info is None:
                raise UnknownTopicOrPartitionError(None)
            topic_error = None
        except KafkaError as exc:
            topic_error, info = exc, None
        parts = []
        for p in t.partition_indexes:
            if topic_error is not None:
                parts.append(Partition(partition_index=p, error_code=topic_error.code, error_message=None,
                                       active_producers=[]))
                continue
            if not 0 <= p < info.partitions:
                parts.append(Partition(partition_index=p, error_code=UnknownTopicOrPartitionError.code,
                                       error_message=None, active_producers=[]))
                continue
            try:
                entries = sorted(broker.logs.get(t.name, p).producer_state.producers.items())
            except UnknownTopicOrPartitionError:
                entries = []  # an internal topic's partition not used yet: no log, no producers
            producers = [Partition.ProducerState(
                producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                last_timestamp=e.last_update_ms, coordinator_epoch=-1, current_txn_start_offset=e.txn_first_offset)
                for _, e in entries]
            parts.append(Partition(partition_index=p, error_code=ErrorCode.NONE, error_message=None, active_producers=producers))
        topics.append(Topic(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
