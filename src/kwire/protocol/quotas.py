"""Wire constants of the client quota APIs (DescribeClientQuotas, AlterClientQuotas; KIP-546) and of
quota throttling (KIP-219), with Kafka's names and numbering (``ClientQuotaEntity``,
``ClientQuotaFilterComponent``, ``QuotaConfig``, ``AbstractResponse.shouldClientThrottle``)."""

from __future__ import annotations

from enum import IntEnum

from .configs import ConfigType
from .schema import api_key_for

__all__ = ["CLIENT_ID", "CLIENT_THROTTLE_SINCE", "ENTITY_TYPES", "IP", "QUOTA_KEYS", "QuotaKey", "QuotaMatchType",
           "USER", "client_throttles"]

# Entity types: who a quota is for.  A null name is the type's default entity.
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)


class QuotaMatchType(IntEnum):
    """How a DescribeClientQuotas filter component matches an entity type's name."""

    EXACT = 0  # the name given
    DEFAULT = 1  # the default entity (a null name)
    SPECIFIED = 2  # any entity of the type, default or named


class QuotaKey:
    """The quota keys (Kafka's QuotaConfig) with their value types."""

    PRODUCER_BYTE_RATE = "producer_byte_rate"
    CONSUMER_BYTE_RATE = "consumer_byte_rate"
    REQUEST_PERCENTAGE = "request_percentage"
    CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
    CONNECTION_CREATION_RATE = "connection_creation_rate"


# key -> its value type: user and client-id entities take the first four, ip entities the last.
QUOTA_KEYS: dict[str, ConfigType] = {
    QuotaKey.PRODUCER_BYTE_RATE: ConfigType.LONG,
    QuotaKey.CONSUMER_BYTE_RATE: ConfigType.LONG,
    QuotaKey.REQUEST_PERCENTAGE: ConfigType.DOUBLE,
    QuotaKey.CONTROLLER_MUTATION_RATE: ConfigType.DOUBLE,
    QuotaKey.CONNECTION_CREATION_RATE: ConfigType.INT,
}

# KIP-219: the first version of each api whose client waits out the throttle time itself (the broker
# answers at once and mutes the connection); below it, the broker holds the response back for the
# throttle time.  Apis not listed here came after KIP-219: every version throttles on the client.
CLIENT_THROTTLE_SINCE: dict[int, int] = {api_key_for(name): version for name, version in (
    ("Produce", 6), ("Fetch", 8), ("ListOffsets", 3), ("Metadata", 6), ("OffsetCommit", 4),
    ("OffsetFetch", 4), ("FindCoordinator", 2), ("JoinGroup", 3), ("Heartbeat", 2), ("LeaveGroup", 2),
    ("SyncGroup", 2), ("DescribeGroups", 2), ("ListGroups", 2), ("ApiVersions", 2), ("CreateTopics", 3),
    ("DeleteTopics", 2), ("DeleteRecords", 1), ("InitProducerId", 1), ("AddPartitionsToTxn", 1),
    ("AddOffsetsToTxn", 1), ("EndTxn", 1), ("TxnOffsetCommit", 1), ("DescribeAcls", 1), ("CreateAcls", 1),
    ("DeleteAcls", 1), ("DescribeConfigs", 2), ("AlterConfigs", 1), ("AlterReplicaLogDirs", 1),
    ("DescribeLogDirs", 1), ("CreatePartitions", 1), ("CreateDelegationToken", 1),
    ("RenewDelegationToken", 1), ("ExpireDelegationToken", 1), ("DescribeDelegationToken", 1),
    ("DeleteGroups", 1),
)}


def client_throttles(api_key: int, version: int) -> bool:
    """Whether a client of this api version waits out throttle_time_ms itself (KIP-219)."""
    return version >= CLIENT_THROTTLE_SINCE.get(api_key, 0)


# The first version of each partition-mutating request that knows THROTTLING_QUOTA_EXCEEDED
# (KIP-599): from it on, a topic over the client's controller_mutation_rate is refused; before
# it, the request is done and only throttled (Kafka's strictSinceVersion).
STRICT_MUTATION_QUOTA_SINCE = {api_key_for(name): version for name, version in (
    ("CreateTopics", 6), ("CreatePartitions", 3), ("DeleteTopics", 5),
)}


def mutation_quota_is_strict(api_key: int, version: int) -> bool:
    """Whether a request over its controller_mutation_rate is refused (else only throttled)."""
    return version >= STRICT_MUTATION_QUOTA_SINCE.get(api_key, 1 << 15)
