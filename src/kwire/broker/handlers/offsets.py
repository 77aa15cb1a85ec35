"""ListOffsets, DeleteRecords and OffsetForLeaderEpoch: questions about a partition's offsets.

ListOffsets v2+ with isolation level 1 (read_committed) answers "latest" with the last stable
offset, and finds no record at or past it by timestamp (as Kafka)."""

from __future__ import annotations

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    ErrorCode,
    InvalidTopicException,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..storage import EARLIEST_TIMESTAMP, MAX_TIMESTAMP
from ..topics import is_internal
from .common import error_of
from .fetch import LEADER_EPOCH, READ_COMMITTED
from .registry import handler

LIST_OFFSETS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = ApiKey.LIST_OFFSETS, ApiKey.DELETE_RECORDS, ApiKey.OFFSET_FOR_LEADER_EPOCH
EARLIEST_LOCAL_TIMESTAMP = -4    # KIP-405, v8+: no tiered storage, so the log start offset
LATEST_TIERED_TIMESTAMP = -5     # KIP-1005, v9+: nothing is tiered: no offset
EARLIEST_PENDING_UPLOAD = -6     # KIP-1023, v11+: nothing is tiered: no offset


def _authorize(ctx, operation: AclOperation, topic: str) -> None:
    if not ctx.allowed(operation, ResourceType.TOPIC, topic):
        raise TopicAuthorizationFailedError(f"{ctx.principal} may not {operation.name} topic {topic!r}")


def _log(broker, topic: str, partition: int):
    if not broker.topics.partition_exists(topic, partition):
        raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
    return broker.internal_topics.partition_log(topic, partition)  # an internal one opens on first use


def _check_epoch(current: int) -> None:
    if current > LEADER_EPOCH:
        raise UnknownLeaderEpochError(f"leader epoch {current} is newer than this broker's {LEADER_EPOCH}")


@handler(LIST_OFFSETS, 0)
def handle_list_offsets(ctx, request):
    R = messages.ListOffsetsResponse
    T, P = R.ListOffsetsTopicResponse, R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
    v = ctx.api_version
    committed = v >= 2 and request.isolation_level == READ_COMMITTED
    topics = []
    for t in request.topics:
        tr = T(name=t.name, partitions=[])
        for p in t.partitions:
            pr = P(partition_index=p.partition_index, error_code=ErrorCode.NONE, old_style_offsets=[], timestamp=-1, offset=-1,
                   leader_epoch=-1)
            try:
                _authorize(ctx, AclOperation.DESCRIBE, t.name)
                log = _log(ctx.broker, t.name, p.partition_index)
                if v >= 4:
                    _check_epoch(p.current_leader_epoch)
                ts = p.timestamp
                if ts == EARLIEST_LOCAL_TIMESTAMP and v >= 8:
                    ts = EARLIEST_TIMESTAMP
                if ts in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD) and v >= 9:
                    found = None
                elif ts == MAX_TIMESTAMP and v < 7 or ts < MAX_TIMESTAMP:
                    raise OffsetOutOfRangeError(f"timestamp {ts} is not valid at ListOffsets v{v}")
                else:
                    found = log.offset_for_timestamp(ts, committed=committed)
                if found is not None:
                    pr.offset, pr.timestamp = found
                    if v >= 4:
                        pr.leader_epoch = LEADER_EPOCH
                if v == 0:  # v0: a list of offsets (at most max_num_offsets) instead of offset/timestamp
                    pr.old_style_offsets = [pr.offset] if found is not None and p.max_num_offsets > 0 else []
                    pr.offset, pr.timestamp = -1, -1
            except Exception as exc:  # noqa: BLE001 - every failure becomes this partition's error code
                pr.error_code, _ = error_of(exc)
            tr.partitions.append(pr)
        topics.append(tr)
    return R(throttle_time_ms=0, topics=topics)


@handler(DELETE_RECORDS, 0)
def handle_delete_records(ctx, request):
    R = messages.DeleteRecordsResponse
    T, P = R.DeleteRecordsTopicResult, R.DeleteRecordsTopicResult.DeleteRecordsPartitionResult
    topics = []
    for t in request.topics:
        tr = T(name=t.name, partitions=[])
        for p in t.partitions:
            pr = P(partition_index=p.partition_index, low_watermark=-1, error_code=ErrorCode.NONE)
            try:
                _authorize(ctx, AclOperation.DELETE, t.name)
                if is_internal(t.name):
                    # Kafka's ReplicaManager.deleteRecordsOnLocalLog: the coordinators' state stays.
                    raise InvalidTopicException(f"Cannot delete records of internal topic {t.name}")
                log = _log(ctx.broker, t.name, p.partition_index)
                before = log.high_watermark if p.offset == -1 else p.offset
                if before < 0:
                    raise OffsetOutOfRangeError(f"offset {p.offset} is negative")
                pr.low_watermark = log.delete_records(before)
            except Exception as exc:  # noqa: BLE001
                pr.error_code, _ = error_of(exc)
            tr.partitions.append(pr)
        topics.append(tr)
    return R(throttle_time_ms=0, topics=topics)


@handler(OFFSET_FOR_LEADER_EPOCH, 0)
def handle_offset_for_leader_epoch(ctx, request):
    R = messages.OffsetForLeaderEpochResponse
    T, P = R.OffsetForLeaderTopicResult, R.OffsetForLeaderTopicResult.EpochEndOffset
    v = ctx.api_version
    topics = []
    for t in request.topics:
        tr = T(topic=t.topic, partitions=[])
        for p in t.partitions:
            pr = P(error_code=ErrorCode.NONE, partition=p.partition, leader_epoch=-1, end_offset=-1)
            try:
                _authorize(ctx, AclOperation.DESCRIBE, t.topic)
                log = _log(ctx.broker, t.topic, p.partition)
                if v >= 2:
                    _check_epoch(p.current_leader_epoch)
                # The only epoch is 0: it ends at the log end.  A later epoch is unknown (-1, -1),
                # as Kafka answers an epoch newer than its latest.
                if p.leader_epoch == LEADER_EPOCH:
                    pr.end_offset = log.log_end_offset
                    if v >= 1:
                        pr.leader_epoch = LEADER_EPOCH
            except Exception as exc:  # noqa: BLE001
                pr.error_code, _ = error_of(exc)
            tr.partitions.append(pr)
        topics.append(tr)
    return R(throttle_time_ms=0, topics=topics)
