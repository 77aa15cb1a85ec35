"""What the client knows of the cluster: brokers, topics, partitions and their leaders.

A ``ClusterMetadata`` is an immutable snapshot built from a Metadata response; the client swaps
in a new one after each refresh, so a reader never sees half an update.

The four types are NamedTuples, as the client's other value types (kwire.client.types) and as
kafka-python's BrokerMetadata and PartitionMetadata: immutable, ``_replace`` for a changed copy.
They were frozen dataclasses, whose generated methods took ~5 ms of every client command line's
start-up (issue 24).  No ``from __future__ import annotations`` either: NamedTuple would compile
each text annotation into a ForwardRef.
"""

import time
import uuid
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from kwire.protocol.messages import MetadataRequest, MetadataResponse

__all__ = ["BrokerInfo", "ClusterMetadata", "PartitionInfo", "TopicInfo", "metadata_request"]

NO_TOPIC_ID = uuid.UUID(int=0)
_NONE: Mapping[Any, Any] = MappingProxyType({})  # the empty snapshot's brokers and topics (shared, read-only)


class BrokerInfo(NamedTuple):
    """A broker as a Metadata answer names it: node id, host, port and rack (None: none)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class PartitionInfo(NamedTuple):
    """A partition as a Metadata answer describes it (leader -1: none right now)."""

    topic: str
    partition: int
    leader: int                      # -1 while the partition has no leader
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


class TopicInfo(NamedTuple):
    """A topic as a Metadata answer describes it: its partitions by number."""

    name: str
    partitions: Mapping[int, PartitionInfo]
    topic_id: uuid.UUID = NO_TOPIC_ID
    is_internal: bool = False
    error_code: int = 0


class ClusterMetadata(NamedTuple):
    """A snapshot of the cluster (see the module's docstring): brokers by node id, topics by
    name, the cluster id, the controller, and when it was answered."""

    brokers: Mapping[int, BrokerInfo] = _NONE
    topics: Mapping[str, TopicInfo] = _NONE
    cluster_id: str | None = None
    controller_id: int = -1
    fetched_at: float = 0.0  # time.monotonic() of the response; 0 before the first

    @classmethod
    def from_response(cls, response: "MetadataResponse") -> "ClusterMetadata":
        """A snapshot of everything a MetadataResponse (any version) says."""
        brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, getattr(b, "rack", None))
                   for b in response.brokers}
        topics = {}
        for t in response.topics:
            if t.name is None:  # v12+: a topic asked for by id that the broker does not know
                continue
            parts = {p.partition_index: PartitionInfo(
                t.name, p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
                tuple(p.isr_nodes), tuple(p.offline_replicas), p.error_code) for p in t.partitions}
            topics[t.name] = TopicInfo(t.name, parts, t.topic_id, t.is_internal, t.error_code)
        return cls(brokers, topics, response.cluster_id, response.controller_id, time.monotonic())

    def merged(self, newer: "ClusterMetadata", asked: Iterable[str] | None) -> "ClusterMetadata":
        """``newer`` (from a refresh of the ``asked`` topics, or of all topics when None) over self."""
        if asked is None:
            return newer
        topics = dict(self.topics)
        for name in asked:
            topics.pop(name, None)
        topics.update(newer.topics)
        return ClusterMetadata(newer.brokers, topics, newer.cluster_id, newer.controller_id, newer.fetched_at)

    # -- lookups ----------------------------------------------------------------------------------
    def age(self) -> float:
        return time.monotonic() - self.fetched_at if self.fetched_at else float("inf")

    def partitions_for(self, topic: str) -> list[int] | None:
        """The topic's partition numbers, sorted; None when the topic is not (yet) known."""
        info = self.topics.get(topic)
        if info is None or info.error_code or not info.partitions:
            return None
        return sorted(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions that have a leader right now."""
        info = self.topics.get(topic)
        if info is None:
            return []
        return sorted(p for p, part in info.partitions.items() if part.leader >= 0)

    def leader(self, topic: str, partition: int) -> int | None:
        info = self.topics.get(topic)
        part = info.partitions.get(partition) if info is not None else None
        return part.leader if part is not None and part.leader >= 0 else None

    def leader_epoch(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        part = info.partitions.get(partition) if info is not None else None
        return part.leader_epoch if part is not None else -1

    def topic_id(self, topic: str) -> uuid.UUID:
        info = self.topics.get(topic)
        return info.topic_id if info is not None else NO_TOPIC_ID

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for info in self.topics.values():
            if info.topic_id == topic_id:
                return info.name
        return None


def metadata_request(version: int, topics: Iterable[str] | None, allow_auto_create: bool) -> "MetadataRequest":
    """A Metadata request for ``topics`` (all topics when None) at ``version``; ``allow_auto_create``
    (v4+) lets the broker create a missing topic, as a producer asks (auto.create.topics.enable)."""
    from kwire.protocol import messages  # loaded already by whoever sends it

    request = messages.MetadataRequest()
    if topics is None:
        request.topics = [] if version == 0 else None  # v0: empty means all; v1+: null means all
    else:
        request.topics = [messages.MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    if version >= 4:
        request.allow_auto_topic_creation = allow_auto_create
    return request
