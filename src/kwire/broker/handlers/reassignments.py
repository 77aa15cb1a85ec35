"""ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments on a one-broker cluster.

Follows Kafka's controller (ReplicationControlManager.electLeaders / alterPartitionReassignments /
listPartitionReassignments) with one registered broker: the only replica already leads, so no
election is ever needed, the only valid assignment is the one there is, and no reassignment is
ever in progress.
"""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.admin import ElectionType
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    ElectionNotNeededError,
    ErrorCode,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    KafkaError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from .registry import handler


def _check_partition(broker, topic: str, partition: int, *, reassigning: bool = False) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION in the words of Kafka's ElectLeaders or reassignment."""
    info = broker.topics.get(topic)
    if info is None:
        raise UnknownTopicOrPartitionError(f"Unable to find a topic named {topic}." if reassigning
                                           else f"No such topic as {topic}")
    if not 0 <= partition < info.partitions:
        raise UnknownTopicOrPartitionError(f"Unable to find partition {topic}:{partition}." if reassigning
                                           else f"No such partition as {topic}-{partition}")


@handler(messages.ElectLeadersRequest.API_KEY, 0)
def handle_elect_leaders(ctx, request):
    """Per named partition: ELECTION_NOT_NEEDED (the preferred and only replica leads, which also
    leaves nothing for an unclean election), UNKNOWN_TOPIC_OR_PARTITION if it does not exist.
    With no partitions named (all of them) Kafka answers every topic, leaving the not-needed
    partitions out: each topic with an empty list."""
    R = messages.ElectLeadersResponse
    Result = R.ReplicaElectionResult
    broker = ctx.broker
    results = []
    top = 0
    election_type = request.election_type if ctx.api_version >= 1 else ElectionType.PREFERRED
    authorized = ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER)
    if not authorized:
        top = ClusterAuthorizationFailedError.code
    elif election_type not in tuple(ElectionType):
        top = InvalidRequestError.code
    if request.topic_partitions is None:
        if not top:
            results = [Result(topic=n, partition_result=[]) for n in broker.topics.names(internal=True)]
        return R(throttle_time_ms=0, error_code=top, replica_election_results=results)
    for t in request.topic_partitions:
        parts = []
        for p in t.partitions:
            if top:
                code, msg = top, None
            else:
                try:
                    _check_partition(broker, t.topic, p)
                    code, msg = ElectionNotNeededError.code, "Leader election not needed for topic partition."
                except KafkaError as exc:
                    code, msg = exc.code, exc.message  # Kafka sends the bare message
            parts.append(Result.PartitionResult(partition_id=p, error_code=code, error_message=msg))
        results.append(Result(topic=t.topic, partition_result=parts))
    return R(throttle_time_ms=0, error_code=top, replica_election_results=results)


@handler(messages.AlterPartitionReassignmentsRequest.API_KEY, 0)
def handle_alter_partition_reassignments(ctx, request):
    """Per partition, as Kafka's controller with one broker: unknown partitions
    UNKNOWN_TOPIC_OR_PARTITION; a cancellation (null replicas) NO_REASSIGNMENT_IN_PROGRESS; an
    empty list, a duplicate or a broker other than this one INVALID_REPLICA_ASSIGNMENT; [this
    broker] is the assignment there is: NONE, nothing moves."""
    R = messages.AlterPartitionReassignmentsResponse
    Topic = R.ReassignableTopicResponse
    broker = ctx.broker
    node = broker.config.node_id
    allow_rf_change = request.allow_replication_factor_change if ctx.api_version >= 1 else True
    top = 0 if ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER) else ClusterAuthorizationFailedError.code
    responses = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code, msg = top, None
            if not top:
                try:
                    _check_partition(broker, t.name, p.partition_index, reassigning=True)
                    replicas = p.replicas
                    if replicas is None:
                        raise NoReassignmentInProgressError("No reassignment is in progress for the given partition.")
                    if not replicas:
                        raise InvalidReplicaAssignmentError("The manual partition assignment includes an empty "
                                                            "replica list.")
                    previous = None
                    for b in sorted(replicas):  # Kafka's order of checks: registered, then once only
                        if b != node:
                            raise InvalidReplicaAssignmentError(f"The manual partition assignment includes broker "
                                                                f"{b}, but no such broker is registered.")
                        if b == previous:
                            raise InvalidReplicaAssignmentError(f"The manual partition assignment includes the "
                                                                f"broker {b} more than once.")
                        previous = b
                    if not allow_rf_change and len(replicas) != 1:
                        raise InvalidReplicationFactorError("The replication factor is changed from 1 to "
                                                            f"{len(replicas)}")
                except KafkaError as exc:
                    code, msg = exc.code, exc.message
            parts.append(Topic.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code,
                                                             error_message=msg))
        responses.append(Topic(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, allow_replication_factor_change=allow_rf_change, error_code=top,
             error_message=None, responses=responses)


@handler(messages.ListPartitionReassignmentsRequest.API_KEY, 0)
def handle_list_partition_reassignments(ctx, request):
    """Nothing is ever being reassigned: an empty list, for all topics or named ones (Kafka lists
    only partitions with a reassignment in progress, and skips unknown ones)."""
    R = messages.ListPartitionReassignmentsResponse
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code, error_message=None, topics=[])
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=[])
