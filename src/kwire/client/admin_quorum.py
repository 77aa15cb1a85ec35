"""``Admin``'s calls about the cluster's metadata quorum, its membership and its feature levels,
as Kafka's Admin.describeMetadataQuorum (KIP-595/KIP-836), addRaftVoter / removeRaftVoter
(KIP-853), unregisterBroker (KIP-631) and updateFeatures (KIP-584): the KRaft quorum's leader,
voters and observers, changes to its voters and to the registered brokers, and changes to
finalized feature levels (kept apart from admin.py, as admin_cluster.py is; ``AsyncAdmin`` has a
thin method for each).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from kwire.protocol import messages

if TYPE_CHECKING:
    from .admin import AsyncAdmin

__all__ = [
    "FeatureUpgrade",
    "QuorumInfo",
    "RaftVoterEndpoint",
    "ReplicaState",
    "add_raft_voter",
    "describe_metadata_quorum",
    "remove_raft_voter",
    "unregister_broker",
    "update_features",
]

DESCRIBE_QUORUM = messages.DescribeQuorumRequest.API_KEY
UPDATE_FEATURES = messages.UpdateFeaturesRequest.API_KEY
UNREGISTER_BROKER = messages.UnregisterBrokerRequest.API_KEY
ADD_RAFT_VOTER = messages.AddRaftVoterRequest.API_KEY
REMOVE_RAFT_VOTER = messages.RemoveRaftVoterRequest.API_KEY
METADATA_TOPIC = "__cluster_metadata"  # the KRaft quorum's log (one partition)


@dataclass(frozen=True)
class ReplicaState:
    """A voter or observer of the quorum: how far its copy of the metadata log is."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int  # ms; -1 when unknown
    last_caught_up_timestamp: int


@dataclass(frozen=True)
class QuorumInfo:
    """The metadata quorum (Java's QuorumInfo): leader, its epoch and high watermark, voters,
    observers, and the nodes' listeners (``{node id: [(listener, host, port)]}``, DescribeQuorum v2+)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]
    nodes: dict[int, list[tuple[str, str, int]]]


@dataclass(frozen=True)
class RaftVoterEndpoint:
    """Where a new voter listens (Java's RaftVoterEndpoint): a listener name, host and port; the
    quorum's leader needs the one of its default (controller) listener."""

    name: str
    host: str
    port: int

    def __post_init__(self) -> None:
        # Java's RaftVoterEndpoint refuses these too, before anything is sent.
        if not self.name or not self.host:
            raise ValueError(f"{self}: the listener name and host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"{self}: port {self.port} is outside 0-65535")


class FeatureUpgrade(IntEnum):
    """UpdateFeatures' ``UpgradeType`` (v1+): how a level may change."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def _replicas(states: list[messages.DescribeQuorumResponse.TopicData.PartitionData.ReplicaState]
              ) -> tuple[ReplicaState, ...]:
    return tuple(ReplicaState(s.replica_id, s.log_end_offset, getattr(s, "last_fetch_timestamp", -1),
                              getattr(s, "last_caught_up_timestamp", -1)) for s in states)


async def describe_metadata_quorum(admin: AsyncAdmin, *, timeout: float | None) -> QuorumInfo:
    """The KRaft metadata quorum as the broker (or controller) asked describes it."""
    from .admin import _broker_error
    from .retry import retrying

    R = messages.DescribeQuorumRequest
    request = R(topics=[R.TopicData(topic_name=METADATA_TOPIC, partitions=[R.TopicData.PartitionData(
        partition_index=0)])])

    async def attempt() -> QuorumInfo:
        response = await admin._send(lambda v: request, api_key=DESCRIBE_QUORUM)
        if response.error_code:
            raise _broker_error(response.error_code, "DescribeQuorum", getattr(response, "error_message", None))
        [topic] = response.topics
        [p] = topic.partitions
        if p.error_code:
            raise _broker_error(p.error_code, f"partition {METADATA_TOPIC}-0", getattr(p, "error_message", None))
        nodes = {n.node_id: [(li.name, li.host, li.port) for li in n.listeners] for n in getattr(response, "nodes", [])}
        return QuorumInfo(p.leader_id, p.leader_epoch, p.high_watermark, _replicas(p.current_voters),
                          _replicas(p.observers), nodes)

    return await retrying(attempt, timeout=admin._timeout(timeout), backoff=admin._cluster.retry_backoff,
                          what="DescribeQuorum")


async def update_features(admin: AsyncAdmin, levels: Mapping[str, int], *,
                          upgrade: FeatureUpgrade = FeatureUpgrade.UPGRADE, validate_only: bool = False,
                          timeout: float | None) -> None:
    """Set finalized feature levels (``{"transaction.version": 2}``; 0 removes a feature) on the
    controller; raises the first feature's error (InvalidUpdateVersionError...)."""
    from .admin import _broker_error
    from .retry import retrying

    R = messages.UpdateFeaturesRequest
    wait_ms = int(admin._timeout(timeout) * 1000)
    low = 1 if validate_only or upgrade != FeatureUpgrade.UPGRADE else 0

    def build(version: int) -> messages.UpdateFeaturesRequest:
        # v0 says a downgrade with AllowDowngrade, v1+ with UpgradeType (the other field is not in it).
        return R(timeout_ms=wait_ms, validate_only=validate_only, feature_updates=[R.FeatureUpdateKey(
            feature=name, max_version_level=level,
            allow_downgrade=upgrade != FeatureUpgrade.UPGRADE if version == 0 else False,
            upgrade_type=int(upgrade)) for name, level in levels.items()])

    async def attempt() -> None:
        response = await admin._send(build, await admin._controller(), api_key=UPDATE_FEATURES, low=low)
        if response.error_code:
            raise _broker_error(response.error_code, "UpdateFeatures", response.error_message)
        for r in getattr(response, "results", None) or []:
            if r.error_code:
                raise _broker_error(r.error_code, f"feature {r.feature!r}", r.error_message)

    await retrying(attempt, timeout=admin._timeout(timeout), backoff=admin._cluster.retry_backoff,
                   what="UpdateFeatures")


async def unregister_broker(admin: AsyncAdmin, broker_id: int, *, timeout: float | None) -> None:
    """Remove a broker's registration from the controller (a decommissioned broker); raises
    BrokerIdNotRegisteredError for an id the cluster does not know."""
    from .admin import _broker_error
    from .retry import retrying

    async def attempt() -> None:
        response = await admin._send(lambda v: messages.UnregisterBrokerRequest(broker_id=broker_id),
                                     await admin._controller(), api_key=UNREGISTER_BROKER)
        if response.error_code:
            raise _broker_error(response.error_code, f"broker {broker_id}", response.error_message)

    await retrying(attempt, timeout=admin._timeout(timeout), backoff=admin._cluster.retry_backoff,
                   what="UnregisterBroker")


async def add_raft_voter(admin: AsyncAdmin, voter_id: int, voter_directory_id: uuid.UUID,
                         endpoints: Iterable[RaftVoterEndpoint], *, cluster_id: str | None,
                         timeout: float | None) -> None:
    """Add a controller (id and metadata log directory id) to the quorum's voters (KIP-853);
    ``cluster_id`` None: not checked.  Answered once the new voter set is committed (AddRaftVoter
    v1's ack_when_committed, which Java's Admin leaves at its default, true)."""
    from .admin import _broker_error
    from .retry import retrying

    R = messages.AddRaftVoterRequest
    listeners = [R.Listener(name=e.name, host=e.host, port=e.port) for e in endpoints]
    wait_ms = int(admin._timeout(timeout) * 1000)

    async def attempt() -> None:
        request = R(cluster_id=cluster_id, timeout_ms=wait_ms, voter_id=voter_id,
                    voter_directory_id=voter_directory_id, listeners=listeners)
        response = await admin._send(lambda v: request, await admin._controller(), api_key=ADD_RAFT_VOTER)
        if response.error_code:
            raise _broker_error(response.error_code, f"voter {voter_id}", response.error_message)

    await retrying(attempt, timeout=admin._timeout(timeout), backoff=admin._cluster.retry_backoff,
                   what="AddRaftVoter")


async def remove_raft_voter(admin: AsyncAdmin, voter_id: int, voter_directory_id: uuid.UUID, *,
                            cluster_id: str | None, timeout: float | None) -> None:
    """Remove a voter (id and metadata log directory id) from the quorum (KIP-853)."""
    from .admin import _broker_error
    from .retry import retrying

    request = messages.RemoveRaftVoterRequest(cluster_id=cluster_id, voter_id=voter_id,
                                              voter_directory_id=voter_directory_id)

    async def attempt() -> None:
        response = await admin._send(lambda v: request, await admin._controller(), api_key=REMOVE_RAFT_VOTER)
        if response.error_code:
            raise _broker_error(response.error_code, f"voter {voter_id}", response.error_message)

    await retrying(attempt, timeout=admin._timeout(timeout), backoff=admin._cluster.retry_backoff,
                   what="RemoveRaftVoter")
