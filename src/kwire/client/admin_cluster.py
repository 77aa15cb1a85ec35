"""What ``Admin``'s cluster calls take and return: log directories, producers, SCRAM credentials
and feature versions, and the requests and answers behind them (kept apart from admin.py's
topic and group calls, as admin_acls.py is).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

from kwire.protocol import messages
from kwire.protocol.admin import ScramMechanism
from kwire.security.scram import MECHANISMS, MIN_ITERATIONS

from .types import TopicPartition

__all__ = [
    "FeatureVersions",
    "LogDirDescription",
    "ProducerStateInfo",
    "ReplicaInfo",
    "ScramCredentialInfo",
    "ScramDeletion",
    "ScramUpsertion",
]

DESCRIBE_LOG_DIRS = messages.DescribeLogDirsRequest.API_KEY
DESCRIBE_PRODUCERS = messages.DescribeProducersRequest.API_KEY
DESCRIBE_SCRAM = messages.DescribeUserScramCredentialsRequest.API_KEY
ALTER_SCRAM = messages.AlterUserScramCredentialsRequest.API_KEY
API_VERSIONS = messages.ApiVersionsRequest.API_KEY
FIRST_VERSION_WITH_FEATURES = 3  # ApiVersions v3 (KIP-511, KIP-584)


@dataclass(frozen=True)
class ReplicaInfo:
    """One partition's replica in a log directory."""

    size: int  # bytes of its log segments
    offset_lag: int  # how far it is behind the high watermark (a future replica: behind the current one)
    is_future: bool  # a replica being moved into this directory (AlterReplicaLogDirs)


@dataclass(frozen=True)
class LogDirDescription:
    """A broker's log directory: its path, its disk's space, the replicas in it."""

    path: str
    error: int  # 0, or KAFKA_STORAGE_ERROR for an offline directory
    total_bytes: int  # -1 when the broker does not say (DescribeLogDirs before v4)
    usable_bytes: int
    replicas: dict[TopicPartition, ReplicaInfo] = field(default_factory=dict)


@dataclass(frozen=True)
class ProducerStateInfo:
    """An idempotent or transactional producer a partition knows (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int  # ms
    coordinator_epoch: int  # -1 when unknown
    current_txn_start_offset: int  # -1 when no transaction is open in the partition


@dataclass(frozen=True)
class ScramCredentialInfo:
    """A user's credential for one mechanism, as the broker describes it (never the secret)."""

    mechanism: str  # "SCRAM-SHA-256" or "SCRAM-SHA-512"
    iterations: int


@dataclass(frozen=True)
class ScramUpsertion:
    """Create or replace ``user``'s credential for ``mechanism``.  The password is salted and
    hashed here; only the salted password travels (KIP-554)."""

    user: str
    password: str
    mechanism: str = "SCRAM-SHA-512"
    iterations: int = MIN_ITERATIONS
    salt: bytes | None = None  # None: 32 random bytes


@dataclass(frozen=True)
class ScramDeletion:
    """Remove ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str = "SCRAM-SHA-512"


@dataclass(frozen=True)
class FeatureVersions:
    """A broker's feature versions (KIP-584): what it supports and what the cluster finalized."""

    supported: dict[str, tuple[int, int]]
    finalized: dict[str, int]
    finalized_epoch: int  # -1 when the broker reports none


def mechanism_code(name: str) -> int:
    try:
        return ScramMechanism[name.replace("-", "_")]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {name!r} (known: {', '.join(MECHANISMS)})") from None


def mechanism_name(code: int) -> str:
    try:
        return ScramMechanism(code).sasl_name
    except ValueError:
        return ScramMechanism.UNKNOWN.sasl_name


def describe_log_dirs_request(topics: dict[str, list[int]] | None) -> messages.DescribeLogDirsRequest:
    R = messages.DescribeLogDirsRequest
    if topics is None:
        return R(topics=None)
    return R(topics=[R.DescribableLogDirTopic(topic=t, partitions=list(ps)) for t, ps in sorted(topics.items())])


def log_dirs(response: messages.DescribeLogDirsResponse) -> list[LogDirDescription]:
    out = []
    for d in response.results:
        replicas = {TopicPartition(t.name, p.partition_index): ReplicaInfo(p.partition_size, p.offset_lag,
                                                                           p.is_future_key)
                    for t in d.topics for p in t.partitions}
        out.append(LogDirDescription(d.log_dir, d.error_code, getattr(d, "total_bytes", -1),
                                     getattr(d, "usable_bytes", -1), replicas))
    return out


def describe_producers_request(partitions: list[TopicPartition]) -> messages.DescribeProducersRequest:
    R = messages.DescribeProducersRequest
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return R(topics=[R.TopicRequest(name=t, partition_indexes=ps) for t, ps in by_topic.items()])


def producer_states(partition: messages.DescribeProducersResponse.TopicResponse.PartitionResponse
                    ) -> list[ProducerStateInfo]:
    return [ProducerStateInfo(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
                              p.current_txn_start_offset) for p in partition.active_producers]


def describe_scram_request(users: list[str] | None) -> messages.DescribeUserScramCredentialsRequest:
    R = messages.DescribeUserScramCredentialsRequest
    return R(users=None if users is None else [R.UserName(name=u) for u in users])


def scram_infos(result: messages.DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
                ) -> list[ScramCredentialInfo]:
    return sorted((ScramCredentialInfo(mechanism_name(c.mechanism), c.iterations) for c in result.credential_infos),
                  key=lambda c: c.mechanism)


def alter_scram_request(changes: list[ScramUpsertion | ScramDeletion]) -> messages.AlterUserScramCredentialsRequest:
    R = messages.AlterUserScramCredentialsRequest
    deletions, upsertions = [], []
    for change in changes:
        code = mechanism_code(change.mechanism)
        if isinstance(change, ScramDeletion):
            deletions.append(R.ScramCredentialDeletion(name=change.user, mechanism=code))
            continue
        salt = secrets.token_bytes(32) if change.salt is None else bytes(change.salt)
        salted = hashlib.pbkdf2_hmac(MECHANISMS[change.mechanism], change.password.encode("utf-8"), salt,
                                     change.iterations)
        upsertions.append(R.ScramCredentialUpsertion(name=change.user, mechanism=code, iterations=change.iterations,
                                                     salt=salt, salted_password=salted))
    return R(deletions=deletions, upsertions=upsertions)


def feature_versions(response: messages.ApiVersionsResponse) -> FeatureVersions:
    return FeatureVersions({f.name: (f.min_version, f.max_version) for f in response.supported_features or ()},
                           {f.name: f.max_version_level for f in response.finalized_features or ()},
                           response.finalized_features_epoch)
