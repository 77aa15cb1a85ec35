"""WriteTxnMarkers from outside the broker: what Kafka's Admin.abortTransaction (kafka-transactions.sh
abort, kafka-python's abort_transaction) sends to a partition's leader to end a hanging
transaction, and what a transaction coordinator sends in a cluster.  kwire's own coordinator
writes its markers directly (transactions/markers.py); this is for the admins.

As Kafka's KafkaApis.handleWriteTxnMarkersRequest: CLUSTER_ACTION on the cluster, else every
partition fails with CLUSTER_AUTHORIZATION_FAILED; an unknown partition is
UNKNOWN_TOPIC_OR_PARTITION; the marker goes through the log's append path (an older producer
epoch than the partition knows is INVALID_PRODUCER_EPOCH; a negative producer id or epoch,
which names no producer, INVALID_REQUEST); a marker in ``__consumer_offsets``
also ends the producer's transactional offset commits of the groups stored there; with fsync
"always" the answer waits for the markers to be on disk.
"""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    KafkaError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..internal_topics import OFFSETS_TOPIC
from .registry import handler


@handler(messages.WriteTxnMarkersRequest.API_KEY, 1, 2)
async def handle_write_txn_markers(ctx, request):
    R = messages.WriteTxnMarkersResponse
    Result = R.WritableTxnMarkerResult
    TopicResult = Result.WritableTxnMarkerTopicResult
    PartitionResult = TopicResult.WritableTxnMarkerPartitionResult
    broker = ctx.broker
    allowed = ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    written = []
    results = []
    for marker in request.markers:
        topics = []
        for t in marker.topics:
            partitions = []
            for p in t.partition_indexes:
                code = 0
                if not allowed:
                    code = ClusterAuthorizationFailedError.code
                elif not broker.topics.partition_exists(t.name, p):
                    code = UnknownTopicOrPartitionError.code
                elif marker.producer_id < 0 or marker.producer_epoch < 0:
                    code = InvalidRequestError.code  # no producer a marker could end (kwire's answer)
                else:
                    try:
                        log = broker.logs.get(t.name, p)
                        log.append_marker(marker.producer_id, marker.producer_epoch, marker.transaction_result,
                                          coordinator_epoch=max(marker.coordinator_epoch, 0))
                        written.append(log)
                        broker.waiters.notify((t.name, p))
                        if t.name == OFFSETS_TOPIC:
                            _end_group_offsets(broker, p, marker.producer_id, marker.transaction_result)
                    except KafkaError as exc:
                        code = exc.code
                    except OSError:
                        code = KafkaStorageError.code
                partitions.append(PartitionResult(partition_index=p, error_code=code))
            topics.append(TopicResult(name=t.name, partitions=partitions))
        results.append(Result(producer_id=marker.producer_id, topics=topics))
    if written and broker.config.fsync == "always":
        durable = broker.durability.request(written)
        if not hasattr(durable, "get_loop"):  # no event loop: flushed already
            durable.result()
        else:
            await durable
    return R(markers=results)


def _end_group_offsets(broker, partition: int, producer_id: int, commit: bool) -> None:
    """The producer's staged offset commits of the groups in this ``__consumer_offsets`` partition
    become committed (or are dropped), as Kafka's GroupCoordinator.onTransactionCompleted."""
    groups = broker.coordinator
    for group_id in groups.groups_with_staged_offsets(producer_id):
        if groups.store.partition_of(group_id) == partition:
            groups.end_txn_offsets(group_id, producer_id, commit)
