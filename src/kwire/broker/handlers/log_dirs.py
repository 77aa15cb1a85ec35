"""DescribeLogDirs and AlterReplicaLogDirs: the broker's one log directory, its data dir.

Follows Kafka's ReplicaManager.describeLogDirs / alterReplicaLogDirs on a broker with a single
``log.dirs`` entry: every partition is in that directory, none is moving (no future replicas).
"""

from __future__ import annotations

import os

from kwire.protocol import messages
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    InvalidTopicException,
    KafkaStorageError,
    LogDirNotFoundError,
    ReplicaNotAvailableError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from .registry import handler

__all__ = ["log_dir_path"]

MAX_TOPIC_NAME = 249  # Kafka refuses to move a partition of a longer (unrepresentable) topic name


def log_dir_path(broker) -> str:
    """The log directory as Kafka names it: the absolute path (symlinks kept), no trailing slash."""
    return os.path.abspath(broker.data_dir)


def _disk(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding path (Java's FileStore getTotalSpace and
    getUsableSpace: usable is what an unprivileged writer may use, statvfs's f_bavail)."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@handler(messages.DescribeLogDirsRequest.API_KEY, 1, 5)
def handle_describe_log_dirs(ctx, request):
    R = messages.DescribeLogDirsResponse
    Result = R.DescribeLogDirsResult
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        # Kafka: v3+ say it at the top level; older versions get an empty answer.
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code, results=[])
    broker = ctx.broker
    wanted = None
    if request.topics is not None:  # null: every partition
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    by_topic: dict[str, list] = {}
    for topic, partition in broker.logs.partitions():
        if wanted is not None and (topic, partition) not in wanted:
            continue
        try:
            log = broker.logs.get(topic, partition)
        except UnknownTopicOrPartitionError:
            continue  # deleted meanwhile
        # Kafka's offset lag of a current (not future) replica: high watermark minus log end, at
        # least 0; here the one replica's high watermark is its log end, so 0.
        lag = max(log.high_watermark - log.log_end_offset, 0)
        by_topic.setdefault(topic, []).append(Result.DescribeLogDirsTopic.DescribeLogDirsPartition(
            partition_index=partition, partition_size=log.size_in_bytes, offset_lag=lag, is_future_key=False))
    path = log_dir_path(broker)
    result = Result(error_code=ErrorCode.NONE, log_dir=path, topics=[
        Result.DescribeLogDirsTopic(name=t, partitions=ps) for t, ps in sorted(by_topic.items())])
    try:
        result.total_bytes, result.usable_bytes = _disk(path)
    except OSError:  # Kafka: an offline log dir is KAFKA_STORAGE_ERROR with no topics
        result = Result(error_code=KafkaStorageError.code, log_dir=path, topics=[], total_bytes=-1,
                        usable_bytes=-1)
    result.is_cordoned = False  # v5 (KIP-1066): kwire cannot cordon its one directory
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results=[result])


@handler(messages.AlterReplicaLogDirsRequest.API_KEY, 1, 2)
def handle_alter_replica_log_dirs(ctx, request):
    """Kafka's answers with one log dir: a destination other than it is LOG_DIR_NOT_FOUND; the
    partition already there (it always is) is NONE with nothing to move; a partition this broker
    does not host is REPLICA_NOT_AVAILABLE (Kafka keeps that code for compatibility where it
    would say NOT_LEADER_OR_FOLLOWER)."""
    R = messages.AlterReplicaLogDirsResponse
    broker = ctx.broker
    authorized = ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER)
    here = log_dir_path(broker)
    hosted = set(broker.logs.partitions())
    results: dict[str, list] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                if not authorized:
                    code = ClusterAuthorizationFailedError.code
                elif len(t.name) > MAX_TOPIC_NAME:
                    code = InvalidTopicException.code
                elif d.path != here:  # Kafka matches the absolute path exactly
                    code = LogDirNotFoundError.code
                elif (t.name, p) not in hosted:
                    code = ReplicaNotAvailableError.code
                else:
                    code = 0
                results.setdefault(t.name, []).append(
                    R.AlterReplicaLogDirTopicResult.AlterReplicaLogDirPartitionResult(partition_index=p,
                                                                                       error_code=code))
    return R(throttle_time_ms=0, results=[R.AlterReplicaLogDirTopicResult(topic_name=n, partitions=ps)
                                          for n, ps in results.items()])
