"""DescribeQuorum: the KRaft quorum of a one-node cluster, this node being its only voter.

Follows KafkaRaftClient.handleDescribeQuorumRequest on the leader of a single-voter quorum: the
metadata partition ``__cluster_metadata``-0 led by this node, the leader's own replica state at the
high watermark with fetch and caught-up times of now (as Kafka reports the leader), no observers.
A request naming anything but exactly that one partition gets UNKNOWN_TOPIC_OR_PARTITION for every
partition it names (KafkaRaftClient's hasValidTopicPartition).  kwire keeps no metadata log; its
offsets count what a KRaft log would hold for the topics, partitions and feature changes here, so
they grow as the metadata changes.
"""

from __future__ import annotations

import time
import uuid

from kwire.protocol import messages
from kwire.protocol.admin import METADATA_TOPIC
from kwire.protocol.errors import ClusterAuthorizationFailedError, ErrorCode, UnknownTopicOrPartitionError

from ..auth.acls import AclOperation, ResourceType
from .features import features_of
from .registry import handler

LEADER_EPOCH = 1  # a single voter elects itself once per start of the quorum; kwire's never restarts
_ZERO_UUID = uuid.UUID(int=0)


def metadata_offset(broker) -> int:
    """What the metadata log's end offset would be: a record per topic and partition, plus one
    per feature change."""
    topics = [broker.topics.get(n) for n in broker.topics.names(internal=True)]
    return features_of(broker).current().epoch + sum(1 + t.partitions for t in topics if t is not None)


@handler(messages.DescribeQuorumRequest.API_KEY, 0)
def handle_describe_quorum(ctx, request):
    R = messages.DescribeQuorumResponse
    Topic = R.TopicData
    Partition = Topic.PartitionData
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return R(error_code=ClusterAuthorizationFailedError.code, error_message="Cluster authorization failed.",
                 topics=[], nodes=[])
    broker = ctx.broker
    node = broker.config.node_id
    v = ctx.api_version
    now = int(time.time() * 1000)
    offset = metadata_offset(broker)
    valid = (len(request.topics) == 1 and request.topics[0].topic_name == METADATA_TOPIC
             and [p.partition_index for p in request.topics[0].partitions] == [0])
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if valid:
                me = Partition.ReplicaState(replica_id=node, replica_directory_id=_ZERO_UUID, log_end_offset=offset,
                                            last_fetch_timestamp=now, last_caught_up_timestamp=now)
                parts.append(Partition(partition_index=0, error_code=ErrorCode.NONE, error_message=None, leader_id=node,
                                       leader_epoch=LEADER_EPOCH, high_watermark=offset, current_voters=[me],
                                       observers=[]))
            else:
                parts.append(Partition(partition_index=p.partition_index, error_code=UnknownTopicOrPartitionError.code,
                                       error_message=None, leader_id=-1, leader_epoch=-1, high_watermark=-1,
                                       current_voters=[], observers=[]))
        topics.append(Topic(topic_name=t.topic_name, partitions=parts))
    resp = R(error_code=ErrorCode.NONE, error_message=None, topics=topics)
    if v >= 2:
        resp.nodes = [R.Node(node_id=node, listeners=[R.Node.Listener(name=n, host=h, port=port)
                                                      for n, h, port in voter_endpoints(ctx)])]
    return resp


def voter_endpoints(ctx) -> list[tuple[str, str, int]]:
    """The only voter's endpoints, (listener, host, port): kwire's node has no separate controller
    listener, so its own listeners; the first is the quorum's default listener (Kafka's first
    ``controller.listener.names`` entry)."""
    return [(lst.name, *lst.advertised) for lst in ctx.broker.listeners] or [("PLAINTEXT", *ctx.advertised)]
