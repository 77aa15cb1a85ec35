"""The admin client: topics, configs, consumer groups, offsets and lag, for scripts and the CLI.

``AsyncAdmin`` runs inside your event loop; ``Admin`` is its synchronous twin (each call runs on
the shared client loop thread).  Both take the settings ``kwire.client.config.AdminConfig`` takes:
a dict of Kafka's dotted names, keywords with underscores, or an ``AdminConfig``::

    async with AsyncAdmin({"bootstrap.servers": "localhost:9092"}) as admin:
        await admin.create_topics([NewTopic("orders", num_partitions=6)])
        lag = await admin.consumer_group_lag("billing")

    with Admin(bootstrap_servers=["localhost:9092"]) as admin:
        print(admin.list_groups())

Every request goes out at the highest version both sides speak.  Calls that name several
topics, groups or partitions send them together and wait for all: items that fail with a
retriable error code (NOT_CONTROLLER, NOT_COORDINATOR, NOT_LEADER_OR_FOLLOWER...) are sent again,
after a backoff and a metadata refresh, until ``timeout`` (seconds; ``request.timeout.ms`` when
not given) runs out, which raises ``ClientTimeoutError``.
Any other error code is raised as its ``KafkaError`` subclass naming the topic, group or
partition (the first one, in the order asked, with the others counted in its message) once the
rest of the batch is done.

ACLs (``create_acls``, ``describe_acls``, ``delete_acls``) take and return the model the broker
uses, ``kwire.security.acl``'s ``AclBinding`` and ``AclFilter``, and report failures the same way:
SECURITY_DISABLED from a broker without an authorizer, CLUSTER_AUTHORIZATION_FAILED for a
principal that may not ALTER (create, delete) or DESCRIBE the cluster, INVALID_REQUEST for a
binding or filter the broker refuses.

Not found means not found at once: an unknown topic or group is not retried, although Kafka
marks UNKNOWN_TOPIC_OR_PARTITION retriable (it is, for a producer waiting on a new topic; for an
operator who mistyped a name, waiting a minute helps nobody).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from kwire.protocol import ApiKey, messages
from kwire.protocol.configs import AlterConfigOp, ConfigResourceType, ConfigSource
from kwire.protocol.consumer_protocol import decode_assignment, decode_subscription
from kwire.protocol.errors import DecodeError, ErrorCode, KafkaError
from kwire.protocol.messages import Request, Response
from kwire.security.acl import AclBinding, AclFilter

from . import admin_acls as acls
from . import admin_cluster as cluster_admin
from . import admin_offsets as offsets_admin
from . import admin_quorum as quorum_admin
from . import admin_quotas as quotas
from . import admin_replicas as replicas_admin
from . import admin_transactions as txn_admin
from .admin_cluster import (
    FeatureVersions,
    LogDirDescription,
    ProducerStateInfo,
    ReplicaInfo,
    ScramCredentialInfo,
    ScramDeletion,
    ScramUpsertion,
)
from .admin_quotas import QuotaAlteration, QuotaEntity, QuotaFilter
from .cluster import Cluster
from .errors import ClientError, UnsupportedApiError, is_retriable
from .facade import SyncFacade, blocking, mirrors
from .loop_thread import LoopThread
from .metadata import NO_TOPIC_ID, BrokerInfo, ClusterMetadata, TopicInfo
from .retry import retrying
from .types import OffsetAndMetadata, TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_TIMESTAMP",
    "Admin",
    "AsyncAdmin",
    "AlterConfigOp",
    "ClusterDescription",
    "ConfigChange",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ConfigSynonym",
    "CreatedTopic",
    "FeatureVersions",
    "GroupDescription",
    "GroupLag",
    "GroupListing",
    "ListedOffset",
    "LogDirDescription",
    "MemberDescription",
    "NewTopic",
    "PartitionLag",
    "ProducerStateInfo",
    "QuotaAlteration",
    "QuotaEntity",
    "QuotaFilter",
    "ReplicaInfo",
    "ResourceType",
    "ScramCredentialInfo",
    "ScramDeletion",
    "ScramUpsertion",
]

logger = logging.getLogger("kwire.client.admin")

K = TypeVar("K")
V = TypeVar("V")
ResponseT = TypeVar("ResponseT", bound=Response)  # the response of the request _send is given
# An OffsetFetch answer's partition: v8+ (per group) and v0-7 have a class each, with the same fields.
_FetchedPartitionV8 = messages.OffsetFetchResponse.OffsetFetchResponseGroup.OffsetFetchResponseTopics.OffsetFetchResponsePartitions
_FetchedPartition = messages.OffsetFetchResponse.OffsetFetchResponseTopic.OffsetFetchResponsePartition
T = TypeVar("T")

# Api keys.
LIST_OFFSETS, METADATA, OFFSET_FETCH = ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.OFFSET_FETCH
DESCRIBE_GROUPS, LIST_GROUPS = ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS
CREATE_TOPICS, DELETE_TOPICS = ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS
DESCRIBE_CONFIGS, CREATE_PARTITIONS, DELETE_GROUPS, DESCRIBE_CLUSTER = ApiKey.DESCRIBE_CONFIGS, ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_GROUPS, ApiKey.DESCRIBE_CLUSTER
ALTER_CONFIGS = messages.AlterConfigsRequest.API_KEY
INCREMENTAL_ALTER_CONFIGS = messages.IncrementalAlterConfigsRequest.API_KEY

# Error codes the admin client treats specially.
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR
_COORDINATOR_MOVED = {COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}

# ListOffsets' special timestamps.
LATEST = -1          # the log end offset: the offset the next record will get
EARLIEST = -2        # the log start offset
MAX_TIMESTAMP = -3   # the record with the largest timestamp (ListOffsets v7+, KIP-734)

_OFFSET_SPECS = {"latest": LATEST, "earliest": EARLIEST, "max_timestamp": MAX_TIMESTAMP}
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


# -- what the calls take and return -----------------------------------------------------------------
@dataclass(frozen=True)
class NewTopic:
    """A topic for ``create_topics``.  -1 leaves partitions / replication to the broker's default
    (CreateTopics v4+); ``replica_assignment`` (partition -> broker ids) replaces both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True)
class CreatedTopic:
    """What the broker says it created; -1, None and {} where its version does not say
    (the partition count, replication factor and configs from CreateTopics v5, the id from v7)."""

    name: str
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterDescription:
    """What DescribeCluster says: the cluster id, the controller (-1 when the broker does not
    say) and the brokers."""

    cluster_id: str | None
    controller_id: int          # -1 when the broker does not say
    brokers: tuple[BrokerInfo, ...]


# DescribeConfigs' resource types and value sources, Kafka's numbering (wire constants).
ResourceType = ConfigResourceType


class ConfigResource(NamedTuple):
    """A topic (by name), a broker (by node id as a string; "" for the cluster-wide defaults) or a
    group (by group id) whose configs to describe or alter."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | str) -> ConfigResource:
        return cls(ResourceType.BROKER, str(node_id))

    @classmethod
    def group(cls, group_id: str) -> ConfigResource:
        """A group's configs (consumer.*, share.*), which a group may have before it exists."""
        return cls(ResourceType.GROUP, group_id)


@dataclass(frozen=True)
class ConfigSynonym:
    """One place a config's value may come from (DescribeConfigs with synonyms): the setting's
    name there, its value, and which source it is (a topic's own config, a broker default...).
    A ConfigEntry lists them in Kafka's order, the one in force first."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One config value as DescribeConfigs gives it.  ``value`` is None for sensitive ones.

    ``source`` is UNKNOWN from a v0 broker, which gives only ``is_default``; from v1 on
    ``is_default`` is derived from the source.  ``config_type`` (0 unknown) and
    ``documentation`` come from v3 when asked for.
    """

    name: str
    value: str | None
    source: ConfigSource
    is_default: bool
    read_only: bool
    sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: int = 0
    documentation: str | None = None


@dataclass(frozen=True)
class ConfigChange:
    """One operation of ``incremental_alter_configs`` (Kafka's AlterConfigOp): SET a value,
    DELETE an override (back to the default), APPEND to or SUBTRACT from a list config
    (``cleanup.policy``), comma-separated values for several items."""

    name: str
    value: str | None = None
    op: AlterConfigOp = AlterConfigOp.SET

    @classmethod
    def set(cls, name: str, value: str) -> ConfigChange:
        return cls(name, value, AlterConfigOp.SET)

    @classmethod
    def delete(cls, name: str) -> ConfigChange:
        return cls(name, None, AlterConfigOp.DELETE)

    @classmethod
    def append(cls, name: str, value: str) -> ConfigChange:
        return cls(name, value, AlterConfigOp.APPEND)

    @classmethod
    def subtract(cls, name: str, value: str) -> ConfigChange:
        return cls(name, value, AlterConfigOp.SUBTRACT)


@dataclass(frozen=True)
class GroupListing:
    """A group as ListGroups names it; ``state`` from v4, ``type`` from v5, None before."""

    group_id: str
    protocol_type: str
    state: str | None
    type: str | None
    coordinator: int


@dataclass(frozen=True)
class MemberDescription:
    """One member of a group.  For the "consumer" protocol type, ``assignment`` and
    ``subscription`` are decoded from the member's bytes (None when they cannot be read, or
    before the group's first assignment); ``metadata`` and ``raw_assignment`` keep the bytes."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...] | None
    subscription: tuple[str, ...] | None
    metadata: bytes = b""
    raw_assignment: bytes = b""


@dataclass(frozen=True)
class GroupDescription:
    """A group as DescribeGroups describes it.  ``protocol`` is the assignor of a consumer group.

    The classic protocol does not tell who the leader is, so neither can this.
    """

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: int

    def assigned(self) -> dict[TopicPartition, MemberDescription]:
        """Which member holds each assigned partition."""
        return {tp: m for m in self.members for tp in (m.assignment or ())}


@dataclass(frozen=True)
class ListedOffset:
    """A ListOffsets answer: the offset (-1 when no record matches a timestamp), the timestamp
    of the record found (-1 for earliest / latest), and its leader epoch (-1 unknown)."""

    offset: int
    timestamp: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True)
class PartitionLag:
    """How far a group is behind on one partition.  ``committed`` is None where the group has
    no commit (then ``lag`` is None too); ``log_end_offset`` is None for a topic that is gone.
    The member fields name the member assigned the partition, if any."""

    topic: str
    partition: int
    committed: int | None
    log_end_offset: int | None
    lag: int | None
    member_id: str | None = None
    client_id: str | None = None
    host: str | None = None


@dataclass(frozen=True)
class GroupLag:
    """A group's lag by partition; ``state`` is None where the broker cannot describe groups."""

    group_id: str
    state: str | None
    partitions: tuple[PartitionLag, ...]

    @property
    def total(self) -> int:
        """The sum of the known lags (partitions without a commit count for nothing)."""
        return sum(p.lag for p in self.partitions if p.lag is not None)


# -- the batch bookkeeping every multi-item call shares ----------------------------------------------
def _broker_error(code: int, subject: str, message: str | None = None) -> KafkaError:
    """The typed error for ``code``, its message naming ``subject`` ("topic 'orders'")."""
    cls = KafkaError.for_code(code)
    if message:
        # kwire's broker sends str(exc) as the message: drop the "[Error n] NAME: " it repeats.
        prefix = f"[Error {code}] {cls.name}: "
        message = message[len(prefix):] if message.startswith(prefix) else message
    if not message:
        return cls(subject)
    name = subject.split(" ", 1)[-1]
    # Kafka's own messages usually name the thing already ("Topic 'x' already exists.").
    return cls(message if name in message else f"{subject}: {message}")


class _Batch(Generic[K, V]):
    """One admin call over several keys: results as they come, keys still to (re)send, failures.

    A round sends every pending key; each key then ``succeed``s or ``fail``s.  A retriable
    failure keeps the key pending and ``end_round`` raises it so ``retrying`` backs off and runs
    another round; other failures are kept and raised by ``outcome`` after the batch is done.
    """

    def __init__(self, keys: Iterable[K], describe: Callable[[K], str]):
        self.order = list(dict.fromkeys(keys))
        self.pending: dict[K, None] = dict.fromkeys(self.order)
        self.results: dict[K, V] = {}
        self.errors: dict[K, BaseException] = {}
        self.describe = describe
        self._retry: BaseException | None = None

    def succeed(self, key: K, value: V) -> None:
        if key in self.pending:
            del self.pending[key]
            self.results[key] = value

    def fail(self, key: K, exc: BaseException, *, final: bool = False) -> None:
        if key not in self.pending:
            return
        if is_retriable(exc) and not final:
            self._retry = exc
            return
        del self.pending[key]
        self.errors[key] = exc

    def end_round(self) -> None:
        if not self.pending:
            return
        exc, self._retry = self._retry, None
        if exc is None:
            missing = ", ".join(self.describe(k) for k in self.pending)
            raise ClientError(f"the broker's answer left out {missing}")
        raise exc

    def outcome(self) -> dict[K, V]:
        if self.errors:
            failed = [k for k in self.order if k in self.errors]
            first = self.errors[failed[0]]
            if len(failed) > 1:
                others = ", ".join(f"{self.describe(k)} ({_error_name(self.errors[k])})" for k in failed[1:])
                first.args = (f"{first.args[0] if first.args else first}; also failed: {others}",)
                if isinstance(first, KafkaError):
                    first.message = first.args[0]
            raise first
        return {k: self.results[k] for k in self.order if k in self.results}


def _error_name(exc: BaseException) -> str:
    return exc.name if isinstance(exc, KafkaError) else type(exc).__name__


def _topic(name: str) -> str:
    return f"topic {name!r}"


def _group(group_id: str) -> str:
    return f"group {group_id!r}"


def _partition(tp: TopicPartition) -> str:
    return f"partition {tp.topic}-{tp.partition}"


def _make_config(conf: Any, settings: dict[str, Any]) -> Any:
    """An AdminConfig from a dict of Kafka's names and keywords; a ready config object is kept."""
    if conf is not None and not isinstance(conf, Mapping):
        if settings:
            raise TypeError("give either an AdminConfig or settings, not both")
        return conf
    from .config import AdminConfig

    return AdminConfig.from_settings(conf, **settings)


# -- the async client -----------------------------------------------------------------------------
class AsyncAdmin:
    """Kafka's admin operations over one ``Cluster``.  Use it inside a running event loop."""

    def __init__(self, conf: Mapping[str, Any] | Any = None, /, **settings: Any):
        self.config = _make_config(conf, settings)
        self._cluster = Cluster(self.config)
        #: Seconds a call may take when it is given no ``timeout`` (Java's default.api.timeout.ms,
        #: which kwire's configs do not have yet): request.timeout.ms.
        self.default_timeout: float = self.config.request_timeout_ms / 1000

    @property
    def cluster(self) -> Cluster:
        """The connections and metadata this admin client uses (shared by its calls)."""
        return self._cluster

    async def close(self) -> None:
        """Close the connections to the brokers; the client can't be used afterwards."""
        await self._cluster.close()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------------------------------
    def _timeout(self, timeout: float | None) -> float:
        return self.default_timeout if timeout is None else timeout

    async def _send(self, build: Callable[[int], Request[ResponseT]], node_id: int | None = None, *, api_key: int,
                    low: int = 0, high: int | None = None, timeout: float | None = None) -> ResponseT:
        """Build the request for the version the node will get, and send it there."""
        cluster = self._cluster
        conn = await (cluster.any_connection() if node_id is None else cluster.connection(node_id))
        version = conn.version_for(api_key, low, high)
        return await conn.send(build(version), version=version, timeout=timeout)

    async def _run(self, batch: _Batch[K, V], round_: Callable[[list[K]], Awaitable[None]], *, what: str,
                   timeout: float | None, refresh_metadata: bool = False) -> dict[K, V]:
        """Rounds of ``round_`` over the batch's pending keys until none is left or time runs out."""
        async def attempt() -> None:
            await round_(list(batch.pending))
            batch.end_round()

        async def before_retry(exc: BaseException) -> None:
            if refresh_metadata:
                try:
                    await self._cluster.refresh_metadata(None)
                except Exception as refresh_error:  # the next round fails the same way, or not
                    if not is_retriable(refresh_error):
                        raise

        if batch.pending:
            await retrying(attempt, timeout=self._timeout(timeout), backoff=self._cluster.retry_backoff, what=what,
                           before_retry=before_retry)
        return batch.outcome()

    async def _per_node(self, batch: _Batch[K, Any], by_node: Mapping[int | None, list[K]],
                        send: Callable[[int | None, list[K]], Awaitable[None]]) -> None:
        """``send`` to each node concurrently; a node that cannot be reached fails only its keys."""
        nodes = list(by_node)
        outcomes = await asyncio.gather(*(send(n, by_node[n]) for n in nodes), return_exceptions=True)
        for node, result in zip(nodes, outcomes, strict=True):
            if isinstance(result, BaseException):
                if not is_retriable(result):
                    raise result
                for key in by_node[node]:
                    batch.fail(key, result)

    async def _controller(self) -> int | None:
        """The controller's node id (None: any broker; KRaft brokers forward to the controller)."""
        metadata = self._cluster.metadata
        if not metadata.fetched_at:
            metadata = await self._cluster.refresh_metadata([])
        return metadata.controller_id if metadata.controller_id in metadata.brokers else None

    async def _coordinators(self, batch: _Batch[str, Any], groups: list[str]) -> dict[int | None, list[str]]:
        """The pending groups by coordinator node; a group whose lookup failed retriably waits."""
        # One lookup each: a retriable failure is retried by the call's rounds, within its timeout.
        found = await asyncio.gather(*(self._cluster.coordinator(g, retry=False) for g in groups),
                                     return_exceptions=True)
        by_node: dict[int | None, list[str]] = {}
        for group_id, node in zip(groups, found, strict=True):
            if isinstance(node, BaseException):
                if not isinstance(node, (KafkaError, ClientError)):
                    raise node
                batch.fail(group_id, node)
            else:
                by_node.setdefault(node, []).append(group_id)
        return by_node

    def _group_error(self, batch: _Batch[str, Any], group_id: str, code: int, message: str | None = None) -> None:
        if code in _COORDINATOR_MOVED:
            self._cluster.forget_coordinator(group_id)
        batch.fail(group_id, _broker_error(code, _group(group_id), message), final=code == ErrorCode.GROUP_ID_NOT_FOUND)

    # -- topics -----------------------------------------------------------------------------------
    async def create_topics(self, topics: Iterable[NewTopic | str], *, validate_only: bool = False,
                            timeout: float | None = None) -> dict[str, CreatedTopic]:
        """Create topics (names alone take the broker's defaults); ``validate_only`` checks only."""
        specs = {t.name: t for t in (NewTopic(t) if isinstance(t, str) else t for t in topics)}
        batch: _Batch[str, CreatedTopic] = _Batch(specs, _topic)
        # Before v4 the broker needs explicit counts; before v1 it cannot validate only.
        low = 4 if any(s.replica_assignment is None and -1 in (s.num_partitions, s.replication_factor)
                       for s in specs.values()) else (1 if validate_only else 0)
        wait_ms = int(self._timeout(timeout) * 1000)
        R = messages.CreateTopicsRequest

        def build(version: int) -> messages.CreateTopicsRequest:
            request = R(timeout_ms=wait_ms, topics=[R.CreatableTopic(
                name=s.name,
                num_partitions=-1 if s.replica_assignment else s.num_partitions,
                replication_factor=-1 if s.replica_assignment else s.replication_factor,
                assignments=[R.CreatableTopic.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
                             for p, b in sorted((s.replica_assignment or {}).items())],
                configs=[R.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in s.configs.items()],
            ) for s in (specs[n] for n in batch.pending)])
            if version >= 1:
                request.validate_only = validate_only
            return request

        async def round_(names: list[str]) -> None:
            response = await self._send(build, await self._controller(), api_key=CREATE_TOPICS, low=low)
            for t in response.topics:
                if t.error_code:
                    batch.fail(t.name, _broker_error(t.error_code, _topic(t.name), t.error_message))
                    continue
                configs = {c.name: c.value for c in (t.configs or [])}
                topic_id = t.topic_id if t.topic_id != NO_TOPIC_ID else None
                batch.succeed(t.name, CreatedTopic(t.name, topic_id, t.num_partitions, t.replication_factor, configs))

        return await self._run(batch, round_, what="CreateTopics", timeout=timeout, refresh_metadata=True)

    async def delete_topics(self, names: Iterable[str], *, timeout: float | None = None) -> None:
        """Delete topics by name; UnknownTopicOrPartitionError names a topic that does not exist."""
        batch: _Batch[str, None] = _Batch(names, _topic)
        wait_ms = int(self._timeout(timeout) * 1000)
        R = messages.DeleteTopicsRequest

        def build(version: int) -> messages.DeleteTopicsRequest:
            if version >= 6:
                return R(timeout_ms=wait_ms, topics=[R.DeleteTopicState(name=n) for n in batch.pending])
            return R(timeout_ms=wait_ms, topic_names=list(batch.pending))

        async def round_(names: list[str]) -> None:
            response = await self._send(build, await self._controller(), api_key=DELETE_TOPICS)
            for t in response.responses:
                name = t.name if t.name is not None else self._cluster.metadata.topic_name(t.topic_id)
                if name is None:  # an id the metadata cannot name: not a topic this call asked for
                    continue
                if t.error_code:
                    batch.fail(name, _broker_error(t.error_code, _topic(name), getattr(t, "error_message", None)),
                               final=t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    batch.succeed(name, None)

        await self._run(batch, round_, what="DeleteTopics", timeout=timeout, refresh_metadata=True)

    async def create_partitions(self, new_totals: Mapping[str, int], *, validate_only: bool = False,
                                timeout: float | None = None) -> None:
        """Grow topics to the given total partition counts (the broker places the new ones)."""
        batch: _Batch[str, None] = _Batch(new_totals, _topic)
        wait_ms = int(self._timeout(timeout) * 1000)
        R = messages.CreatePartitionsRequest

        def build(version: int) -> messages.CreatePartitionsRequest:
            return R(timeout_ms=wait_ms, validate_only=validate_only, topics=[
                R.CreatePartitionsTopic(name=n, count=new_totals[n], assignments=None) for n in batch.pending])

        async def round_(names: list[str]) -> None:
            response = await self._send(build, await self._controller(), api_key=CREATE_PARTITIONS)
            for t in response.results:
                if t.error_code:
                    batch.fail(t.name, _broker_error(t.error_code, _topic(t.name), t.error_message),
                               final=t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    batch.succeed(t.name, None)

        await self._run(batch, round_, what="CreatePartitions", timeout=timeout, refresh_metadata=True)

    async def list_topics(self, *, include_internal: bool = False,
                          timeout: float | None = None) -> dict[str, TopicInfo]:
        """Every topic with its partitions (leader, replicas, isr), id and internal flag, by name."""
        metadata = await self._metadata(None, timeout)
        return {name: info for name, info in sorted(metadata.topics.items())
                if not info.error_code and (include_internal or not info.is_internal)}

    async def describe_topics(self, names: Iterable[str], *, timeout: float | None = None) -> dict[str, TopicInfo]:
        """The named topics' partitions (leader, replicas, isr), ids and internal flags."""
        batch: _Batch[str, TopicInfo] = _Batch(names, _topic)

        async def round_(wanted: list[str]) -> None:
            metadata = await self._cluster.refresh_metadata(wanted)
            for name in wanted:
                info = metadata.topics.get(name)
                if info is None:
                    continue  # left out: end_round says so
                if info.error_code:
                    batch.fail(name, _broker_error(info.error_code, _topic(name)),
                               final=info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    batch.succeed(name, info)

        return await self._run(batch, round_, what="Metadata", timeout=timeout)

    async def metadata(self, topics: Iterable[str] | None = None, *,
                       timeout: float | None = None) -> ClusterMetadata:
        """A fresh Metadata answer: brokers, controller, cluster id, and ``topics`` (all when
        None), topics the broker does not know included with their error code."""
        if topics is None:
            return await self._metadata(None, timeout)
        wanted = sorted(set(topics))
        metadata = await self._metadata(wanted, timeout)
        return metadata._replace(topics={n: metadata.topics[n] for n in wanted if n in metadata.topics})

    async def _metadata(self, topics: list[str] | None, timeout: float | None) -> ClusterMetadata:
        # refresh_metadata retries on its own, within request.timeout.ms.
        if timeout is None or timeout <= self._cluster.request_timeout:
            return await self._cluster.refresh_metadata(topics)
        return await retrying(lambda: self._cluster.refresh_metadata(topics), timeout=timeout,
                              backoff=self._cluster.retry_backoff, what="Metadata")

    # -- cluster and configs ----------------------------------------------------------------------
    async def describe_cluster(self, *, timeout: float | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers: DescribeCluster where the broker has it, else Metadata."""
        async def attempt() -> ClusterDescription:
            conn = await self._cluster.any_connection()
            if not conn.supports(DESCRIBE_CLUSTER):
                metadata = await self._cluster.refresh_metadata([])
                return ClusterDescription(metadata.cluster_id, metadata.controller_id,
                                          tuple(metadata.brokers[n] for n in sorted(metadata.brokers)))
            version = conn.version_for(DESCRIBE_CLUSTER)
            response = await conn.send(messages.DescribeClusterRequest(), version=version)
            if response.error_code:
                raise _broker_error(response.error_code, "DescribeCluster", response.error_message)
            brokers = sorted((BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in response.brokers),
                             key=lambda b: b.node_id)
            return ClusterDescription(response.cluster_id, response.controller_id, tuple(brokers))

        return await retrying(attempt, timeout=self._timeout(timeout), backoff=self._cluster.retry_backoff,
                              what="DescribeCluster")

    async def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = False,
                               include_documentation: bool = False,
                               timeout: float | None = None) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Config entries of topics and brokers, by resource, then by config name.

        A broker's configs are asked of that broker; topics' of any broker.
        """
        wanted = [ConfigResource(ResourceType(r.type), str(r.name)) for r in resources]
        batch: _Batch[ConfigResource, dict[str, ConfigEntry]] = _Batch(
            wanted, lambda r: f"{r.type.name.lower()} {r.name!r}")
        R = messages.DescribeConfigsRequest

        async def send(node: int | None, keys: list[ConfigResource]) -> None:
            def build(version: int) -> messages.DescribeConfigsRequest:
                request = R(resources=[R.DescribeConfigsResource(resource_type=int(r.type), resource_name=r.name,
                                                                 configuration_keys=None) for r in keys])
                if version >= 1:
                    request.include_synonyms = include_synonyms
                if version >= 3:
                    request.include_documentation = include_documentation
                return request

            response = await self._send(build, node, api_key=DESCRIBE_CONFIGS)
            for result in response.results:
                key = ConfigResource(ResourceType(result.resource_type), result.resource_name)
                if result.error_code:
                    batch.fail(key, _broker_error(result.error_code, batch.describe(key), result.error_message),
                               final=result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    batch.succeed(key, {c.name: _config_entry(c) for c in result.configs})

        async def round_(keys: list[ConfigResource]) -> None:
            by_node: dict[int | None, list[ConfigResource]] = {}
            for r in keys:
                node = int(r.name) if r.type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER) and r.name else None
                by_node.setdefault(node, []).append(r)
            if any(n is not None for n in by_node) and not self._cluster.metadata.fetched_at:
                await self._cluster.refresh_metadata([])  # broker ids must be known to connect to them
            await self._per_node(batch, by_node, send)

        return await self._run(batch, round_, what="DescribeConfigs", timeout=timeout)

    def _config_node(self, resource: ConfigResource) -> int | None:
        """Where a config request for ``resource`` goes: a broker's to that broker, the rest
        (topics, the cluster-wide default "") to any (KRaft brokers forward to the controller)."""
        return int(resource.name) if resource.type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER) \
            and resource.name else None

    async def _alter_configs(self, resources: list[ConfigResource],
                             build_resources: Callable[[int, list[ConfigResource]],
                                                       messages.AlterConfigsRequest | messages.IncrementalAlterConfigsRequest],
                             *, api_key: int, what: str, timeout: float | None) -> None:
        """Send an alter request per node and raise the first resource's error (the others counted)."""
        batch: _Batch[ConfigResource, None] = _Batch(resources, lambda r: f"{r.type.name.lower()} {r.name!r}")

        async def send(node: int | None, keys: list[ConfigResource]) -> None:
            response: messages.AlterConfigsResponse | messages.IncrementalAlterConfigsResponse = await self._send(
                lambda version: build_resources(version, keys), node, api_key=api_key)
            for result in response.responses:
                key = ConfigResource(ResourceType(result.resource_type), result.resource_name)
                if result.error_code:
                    # A refused config stays refused; an unknown topic is not waited for either.
                    batch.fail(key, _broker_error(result.error_code, batch.describe(key), result.error_message),
                               final=result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    batch.succeed(key, None)

        async def round_(keys: list[ConfigResource]) -> None:
            by_node: dict[int | None, list[ConfigResource]] = {}
            for r in keys:
                by_node.setdefault(self._config_node(r), []).append(r)
            if any(n is not None for n in by_node) and not self._cluster.metadata.fetched_at:
                await self._cluster.refresh_metadata([])
            await self._per_node(batch, by_node, send)

        await self._run(batch, round_, what=what, timeout=timeout)

    async def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, str]], *,
                            validate_only: bool = False, timeout: float | None = None) -> None:
        """Replace every dynamic config of each resource by the given set (AlterConfigs: a
        config left out goes back to its default); ``validate_only`` checks only.

        Each resource is changed wholly or not at all; a refused one raises its error
        (InvalidConfigError for a bad topic config, InvalidRequestError for a broker config
        that cannot be changed dynamically...) once the others are done.
        """
        wanted = {ConfigResource(ResourceType(r.type), str(r.name)): dict(v) for r, v in configs.items()}
        R = messages.AlterConfigsRequest

        def build(version: int, keys: list[ConfigResource]) -> messages.AlterConfigsRequest:
            return R(validate_only=validate_only, resources=[R.AlterConfigsResource(
                resource_type=int(r.type), resource_name=r.name,
                configs=[R.AlterConfigsResource.AlterableConfig(name=k, value=v) for k, v in wanted[r].items()])
                for r in keys])

        await self._alter_configs(list(wanted), build, api_key=ALTER_CONFIGS, what="AlterConfigs", timeout=timeout)

    async def incremental_alter_configs(self, changes: Mapping[ConfigResource, Iterable[ConfigChange]], *,
                                        validate_only: bool = False, timeout: float | None = None) -> None:
        """Apply ``ConfigChange`` operations to each resource's configs (IncrementalAlterConfigs:
        configs not named keep their values); ``validate_only`` checks only.

        Errors as for ``alter_configs``; APPEND or SUBTRACT on a config that is not a list is
        InvalidConfigError.
        """
        wanted = {ConfigResource(ResourceType(r.type), str(r.name)): list(v) for r, v in changes.items()}
        R = messages.IncrementalAlterConfigsRequest

        def build(version: int, keys: list[ConfigResource]) -> messages.IncrementalAlterConfigsRequest:
            return R(validate_only=validate_only, resources=[R.AlterConfigsResource(
                resource_type=int(r.type), resource_name=r.name,
                configs=[R.AlterConfigsResource.AlterableConfig(name=c.name, config_operation=int(c.op), value=c.value)
                         for c in wanted[r]])
                for r in keys])

        await self._alter_configs(list(wanted), build, api_key=INCREMENTAL_ALTER_CONFIGS,
                                  what="IncrementalAlterConfigs", timeout=timeout)

    # -- ACLs -------------------------------------------------------------------------------------
    # Any broker answers them (Kafka's own admin client sends them to the least loaded node).
    async def create_acls(self, bindings: Iterable[AclBinding], *, timeout: float | None = None) -> None:
        """Create ACL bindings (CreateAcls, all in one request).  As for ``create_topics``, a binding
        the broker refuses raises once the others are done, the first one in the order given naming
        the others: SecurityDisabledError (no authorizer), ClusterAuthorizationFailedError (the
        principal may not ALTER the cluster), InvalidRequestError (a binding it will not store).
        Creating a binding that exists already is no error."""
        batch: _Batch[AclBinding, None] = _Batch(bindings, acls.binding_text)
        low = acls.min_binding_version(batch.order)

        async def round_(pending: list[AclBinding]) -> None:
            response = await self._send(lambda v: acls.create_request(pending, v), api_key=acls.CREATE_ACLS, low=low)
            # Results come in the order of the creations, naming nothing: one left out stays
            # pending, and end_round says so.
            for binding, result in zip(pending, response.results, strict=False):
                if result.error_code:
                    batch.fail(binding, _broker_error(result.error_code, acls.binding_text(binding),
                                                      result.error_message))
                else:
                    batch.succeed(binding, None)

        await self._run(batch, round_, what="CreateAcls", timeout=timeout)

    async def describe_acls(self, acl_filter: AclFilter | None = None, *,
                            timeout: float | None = None) -> list[AclBinding]:
        """The ACL bindings matching ``acl_filter`` (every one without it), sorted.  Raises
        SecurityDisabledError, ClusterAuthorizationFailedError (the principal may not DESCRIBE the
        cluster) or InvalidRequestError (a filter that can match nothing, such as UNKNOWN values)."""
        wanted = AclFilter() if acl_filter is None else acl_filter
        low = acls.min_filter_version([wanted])

        async def attempt() -> list[AclBinding]:
            response = await self._send(lambda v: acls.describe_request(wanted, v), api_key=acls.DESCRIBE_ACLS,
                                        low=low)
            if response.error_code:
                raise _broker_error(response.error_code, acls.filter_text(wanted), response.error_message)
            return acls.described_bindings(response)

        return await retrying(attempt, timeout=self._timeout(timeout), backoff=self._cluster.retry_backoff,
                              what="DescribeAcls")

    async def delete_acls(self, filters: Iterable[AclFilter], *,
                          timeout: float | None = None) -> dict[AclFilter, list[AclBinding]]:
        """Delete the ACL bindings matching each filter (DeleteAcls, all in one request); the
        bindings each filter removed, by filter in the order given (a binding two filters match is
        listed under both or either, as the broker says).  Failures raise as for ``create_acls``."""
        batch: _Batch[AclFilter, list[AclBinding]] = _Batch(filters, acls.filter_text)
        low = acls.min_filter_version(batch.order)

        async def round_(pending: list[AclFilter]) -> None:
            response = await self._send(lambda v: acls.delete_request(pending, v), api_key=acls.DELETE_ACLS, low=low)
            for f, result in zip(pending, response.filter_results, strict=False):  # in order, as for create_acls
                failed = next((m for m in result.matching_acls if m.error_code), None)
                if result.error_code:
                    batch.fail(f, _broker_error(result.error_code, acls.filter_text(f), result.error_message))
                elif failed is not None:
                    # Kafka may fail single bindings of a filter (e.g. one it could not delete).
                    batch.fail(f, _broker_error(failed.error_code, acls.filter_text(f), failed.error_message))
                else:
                    batch.succeed(f, acls.matched_bindings(result))

        return await self._run(batch, round_, what="DeleteAcls", timeout=timeout)

    # -- client quotas (KIP-546) ---------------------------------------------------------------------
    async def describe_client_quotas(self, filters: Iterable[QuotaFilter] = (), *, strict: bool = False,
                                     timeout: float | None = None) -> dict[QuotaEntity, dict[str, float]]:
        """The client quotas of the entities ``filters`` match (every entity without filters), by
        entity: key -> value.  ``strict``: only entities with exactly the filtered entity types.
        Raises InvalidRequestError for a filter the broker refuses (naming why),
        ClusterAuthorizationFailedError for a principal that may not DESCRIBE_CONFIGS the cluster."""
        wanted = list(filters)

        async def attempt() -> dict[QuotaEntity, dict[str, float]]:
            response = await self._send(lambda v: quotas.describe_request(wanted, strict),
                                        api_key=quotas.DESCRIBE_CLIENT_QUOTAS)
            if response.error_code:
                raise _broker_error(response.error_code, "DescribeClientQuotas", response.error_message)
            return quotas.described_quotas(response)

        return await retrying(attempt, timeout=self._timeout(timeout), backoff=self._cluster.retry_backoff,
                              what="DescribeClientQuotas")

    async def alter_client_quotas(self, alterations: Iterable[QuotaAlteration], *, validate_only: bool = False,
                                  timeout: float | None = None) -> None:
        """Set (a value) or remove (None) client quotas, each entity's changes all or none.  As for
        ``create_acls``, an entity the broker refuses raises once the others are done:
        InvalidRequestError (an unknown key or entity type, a bad value), ClusterAuthorizationFailedError."""
        todo = {a.entity: a for a in alterations}
        batch: _Batch[QuotaEntity, None] = _Batch(todo, lambda e: f"client quota entity ({e})")

        async def round_(pending: list[QuotaEntity]) -> None:
            response = await self._send(lambda v: quotas.alter_request([todo[e] for e in pending], validate_only),
                                        api_key=quotas.ALTER_CLIENT_QUOTAS)
            for entry in response.entries:
                entity = quotas.answered_entity(entry)
                if entry.error_code:
                    batch.fail(entity, _broker_error(entry.error_code, batch.describe(entity), entry.error_message))
                else:
                    batch.succeed(entity, None)

        await self._run(batch, round_, what="AlterClientQuotas", timeout=timeout)

    # -- groups -----------------------------------------------------------------------------------
    async def list_groups(self, *, states: Collection[str] = (), types: Collection[str] = (),
                          timeout: float | None = None) -> list[GroupListing]:
        """The groups every broker coordinates, sorted by id; ``states`` / ``types`` filter them
        (in the request where the version has the filter, else here when the answer says)."""
        states_wanted = {s.lower() for s in states}
        types_wanted = {t.lower() for t in types}
        metadata = await self._metadata([], timeout)
        batch: _Batch[int, list[GroupListing]] = _Batch(sorted(metadata.brokers), lambda n: f"broker {n}")

        async def send(node: int | None, keys: list[int]) -> None:
            def build(version: int) -> messages.ListGroupsRequest:
                request = messages.ListGroupsRequest()
                if version >= 4:
                    request.states_filter = sorted(states)
                if version >= 5:
                    request.types_filter = sorted(types)
                return request

            response = await self._send(build, node, api_key=LIST_GROUPS)
            [broker] = keys  # one broker per send (round_), the node it goes to
            if response.error_code:
                batch.fail(broker, _broker_error(response.error_code, f"broker {broker}"))
                return
            listings = [GroupListing(g.group_id, g.protocol_type, g.group_state or None, g.group_type or None, broker)
                        for g in response.groups]
            batch.succeed(broker, [g for g in listings
                                 if (not states_wanted or (g.state or "").lower() in states_wanted)
                                 and (not types_wanted or (g.type or "").lower() in types_wanted)])

        async def round_(nodes: list[int]) -> None:
            await self._per_node(batch, {n: [n] for n in nodes}, send)

        found = await self._run(batch, round_, what="ListGroups", timeout=timeout)
        return sorted((g for listing in found.values() for g in listing), key=lambda g: g.group_id)

    async def describe_groups(self, group_ids: Iterable[str], *,
                              timeout: float | None = None) -> dict[str, GroupDescription]:
        """State, protocol, assignor and members (with decoded assignments) of each group.

        A group that does not exist raises GroupIdNotFoundError (Kafka before DescribeGroups v6
        describes it as "Dead" instead; this treats both alike).
        """
        batch: _Batch[str, GroupDescription] = _Batch(group_ids, _group)

        async def send(node: int | None, groups: list[str]) -> None:
            def build(version: int) -> messages.DescribeGroupsRequest:
                return messages.DescribeGroupsRequest(groups=groups)

            response = await self._send(build, node, api_key=DESCRIBE_GROUPS)
            for g in response.groups:
                if g.error_code:
                    self._group_error(batch, g.group_id, g.error_code, getattr(g, "error_message", None))
                elif g.group_state == "Dead" and not g.members:
                    batch.fail(g.group_id, _broker_error(ErrorCode.GROUP_ID_NOT_FOUND, _group(g.group_id),
                                                         f"group {g.group_id!r} does not exist"), final=True)
                else:
                    batch.succeed(g.group_id, _group_description(g, node))

        async def round_(groups: list[str]) -> None:
            await self._per_node(batch, await self._coordinators(batch, groups), send)

        return await self._run(batch, round_, what="DescribeGroups", timeout=timeout)

    async def delete_groups(self, group_ids: Iterable[str], *, timeout: float | None = None) -> None:
        """Delete groups with their committed offsets; a group with members cannot be deleted
        (NonEmptyGroupError)."""
        batch: _Batch[str, None] = _Batch(group_ids, _group)

        async def send(node: int | None, groups: list[str]) -> None:
            response = await self._send(lambda v: messages.DeleteGroupsRequest(groups_names=groups), node,
                                        api_key=DELETE_GROUPS)
            for r in response.results:
                if r.error_code:
                    self._group_error(batch, r.group_id, r.error_code)
                else:
                    batch.succeed(r.group_id, None)

        async def round_(groups: list[str]) -> None:
            await self._per_node(batch, await self._coordinators(batch, groups), send)

        await self._run(batch, round_, what="DeleteGroups", timeout=timeout)

    # -- offsets ----------------------------------------------------------------------------------
    async def list_offsets(self, specs: Mapping[TopicPartition, int | str], *,
                           isolation_level: str = "read_uncommitted",
                           timeout: float | None = None) -> dict[TopicPartition, ListedOffset]:
        """Offsets by partition, each asked of its leader.  A spec is "earliest", "latest",
        "max_timestamp", EARLIEST / LATEST / MAX_TIMESTAMP, or a timestamp in ms (the first
        offset whose record's timestamp is at or after it; -1 when there is none)."""
        try:
            isolation = _ISOLATION[isolation_level]
        except KeyError:
            raise ValueError(f"isolation_level {isolation_level!r} is not one of {sorted(_ISOLATION)}") from None
        wanted = {TopicPartition(*tp): _offset_spec(spec) for tp, spec in specs.items()}
        batch: _Batch[TopicPartition, ListedOffset] = _Batch(wanted, _partition)
        low = 7 if MAX_TIMESTAMP in wanted.values() else 1  # v0 answers in another layout; kwire needs >= 1
        wait_ms = int(self._timeout(timeout) * 1000)
        R = messages.ListOffsetsRequest

        async def send(node: int | None, tps: list[TopicPartition]) -> None:
            def build(version: int) -> messages.ListOffsetsRequest:
                by_topic: dict[str, list[messages.ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition]] = {}
                for tp in tps:
                    by_topic.setdefault(tp.topic, []).append(R.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=tp.partition, timestamp=wanted[tp],
                        current_leader_epoch=self._cluster.metadata.leader_epoch(*tp) if version >= 4 else -1))
                request = R(replica_id=-1, topics=[R.ListOffsetsTopic(name=t, partitions=ps)
                                                   for t, ps in by_topic.items()], timeout_ms=wait_ms)
                if version >= 2:
                    request.isolation_level = isolation
                return request

            response = await self._send(build, node, api_key=LIST_OFFSETS, low=low)
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        batch.fail(tp, _broker_error(p.error_code, _partition(tp)))
                    else:
                        batch.succeed(tp, ListedOffset(p.offset, p.timestamp, p.leader_epoch))

        async def round_(tps: list[TopicPartition]) -> None:
            topics = {tp.topic for tp in tps}
            metadata = await self._cluster.metadata_for(topics)
            if any(tp.partition not in (metadata.partitions_for(tp.topic) or ()) for tp in tps):
                metadata = await self._cluster.refresh_metadata(topics)  # grown since, or really unknown
            by_node: dict[int | None, list[TopicPartition]] = {}
            for tp in tps:
                _check_partition_known(batch, metadata, tp)
                leader = metadata.leader(*tp)
                if leader is not None:
                    by_node.setdefault(leader, []).append(tp)
                elif tp in batch.pending:
                    batch.fail(tp, _broker_error(5, _partition(tp), "no leader right now"))
            await self._per_node(batch, by_node, send)

        return await self._run(batch, round_, what="ListOffsets", timeout=timeout, refresh_metadata=True)

    async def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None,
                                          *, timeout: float | None = None
                                          ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """A group's committed offsets (OffsetFetch), sorted.  With ``partitions``, those
        partitions, None for the ones without a commit; without, every partition committed."""
        wanted = None if partitions is None else sorted({TopicPartition(*tp) for tp in partitions})

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata | None]:
            node = await self._cluster.coordinator(group_id, retry=False)  # (retried by this call's retrying)
            try:
                return await self._offset_fetch(node, group_id, wanted)
            except KafkaError as exc:
                if exc.code in _COORDINATOR_MOVED:
                    self._cluster.forget_coordinator(group_id)
                raise

        return await retrying(attempt, timeout=self._timeout(timeout), backoff=self._cluster.retry_backoff,
                              what=f"OffsetFetch for {_group(group_id)}")

    async def _offset_fetch(self, node: int, group_id: str, wanted: list[TopicPartition] | None
                            ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        cluster = self._cluster
        by_topic: dict[str, list[int]] = {}
        for tp in wanted or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        high = None
        if by_topic:
            # v10 names topics by id: only when every topic asked for has one.
            metadata = await cluster.metadata_for(by_topic)
            if any(metadata.topic_id(t) == NO_TOPIC_ID for t in by_topic):
                high = 9
        R = messages.OffsetFetchRequest
        G = R.OffsetFetchRequestGroup

        def build(version: int) -> messages.OffsetFetchRequest:
            if version < 8:
                return R(group_id=group_id, topics=None if wanted is None else [
                    R.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])
            topics = None if wanted is None else [
                G.OffsetFetchRequestTopics(partition_indexes=ps, **(
                    {"topic_id": cluster.metadata.topic_id(t)} if version >= 10 else {"name": t}))
                for t, ps in by_topic.items()]
            return R(groups=[G(group_id=group_id, topics=topics)])

        response = await self._send(build, node, api_key=OFFSET_FETCH, low=1 if wanted is not None else 2, high=high)
        # v8+ answers per group (one here; v10 names topics by id), v0-7 at the top level.
        named: list[tuple[str | None, list[_FetchedPartitionV8] | list[_FetchedPartition]]]
        if response.groups:
            answer = response.groups[0]
            error = answer.error_code
            names = await self._topic_names({t.topic_id for t in answer.topics if not t.name})
            named = [(t.name or names.get(t.topic_id), t.partitions) for t in answer.topics]
        else:
            error = response.error_code  # 0 in the versions that lack it
            named = [(t.name, t.partitions) for t in response.topics]
        if error:
            raise _broker_error(error, _group(group_id))
        found: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for name, partitions in named:
            if name is None:
                continue  # committed offsets of a topic that is gone: nothing names it any more
            for p in partitions:
                tp = TopicPartition(name, p.partition_index)
                if p.error_code:
                    if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or p.error_code == ErrorCode.UNKNOWN_TOPIC_ID:
                        found[tp] = None
                        continue
                    raise _broker_error(p.error_code, _partition(tp) + f" of {_group(group_id)}")
                found[tp] = (OffsetAndMetadata(p.committed_offset, p.metadata or "", p.committed_leader_epoch)
                             if p.committed_offset >= 0 else None)
        for tp in wanted or ():
            found.setdefault(tp, None)
        return dict(sorted(found.items()))

    async def _topic_names(self, ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
        """Names for the topic ids an OffsetFetch v10 answer uses, refreshing metadata for new ones."""
        metadata = self._cluster.metadata
        if any(metadata.topic_name(i) is None for i in ids):
            metadata = await self._cluster.refresh_metadata(None)
        return {i: name for i in ids if (name := metadata.topic_name(i)) is not None}

    async def consumer_group_lag(self, group_id: str, *, topics: Iterable[str] | None = None,
                                 timeout: float | None = None) -> GroupLag:
        """Committed offset, log end offset and lag by partition, sorted.

        The partitions are those of ``topics`` when given, else every partition the group has
        committed or has assigned to a member.  A partition without a commit has no lag.
        GroupIdNotFoundError when the group does not exist.
        """
        try:
            description: GroupDescription | None = (await self.describe_groups([group_id], timeout=timeout))[group_id]
        except UnsupportedApiError:
            description = None  # a broker without DescribeGroups (librdkafka's mock): no members to show
        owners = description.assigned() if description is not None else {}
        if topics is not None:
            described = await self.describe_topics(topics, timeout=timeout)
            partitions = sorted(TopicPartition(t, p) for t, info in described.items() for p in info.partitions)
            committed = await self.list_consumer_group_offsets(group_id, partitions, timeout=timeout)
        else:
            committed = await self.list_consumer_group_offsets(group_id, timeout=timeout)
            partitions = sorted(set(committed) | set(owners))
        metadata = await self._cluster.refresh_metadata({tp.topic for tp in partitions})
        live = [tp for tp in partitions if tp.partition in (metadata.partitions_for(tp.topic) or ())]
        ends = await self.list_offsets({tp: LATEST for tp in live}, timeout=timeout) if live else {}
        rows = []
        for tp in partitions:
            commit = committed.get(tp)
            end = ends[tp].offset if tp in ends else None
            member = owners.get(tp)
            rows.append(PartitionLag(
                tp.topic, tp.partition, commit.offset if commit else None, end,
                end - commit.offset if commit is not None and end is not None else None,
                member.member_id if member else None, member.client_id if member else None,
                member.host if member else None))
        return GroupLag(group_id, description.state if description else None, tuple(rows))

    # -- log directories, producers, SCRAM credentials, features ----------------------------------
    async def describe_log_dirs(self, topics: Mapping[str, Iterable[int]] | None = None, *,
                                brokers: Iterable[int] | None = None,
                                timeout: float | None = None) -> dict[int, list[LogDirDescription]]:
        """Each broker's log directories (DescribeLogDirs): path, disk space, and the size and lag
        of the replicas in it, by node id.  ``topics`` ({topic: partitions}) limits the replicas
        listed (default: all); ``brokers`` the brokers asked (default: every one).  Raises
        ClusterAuthorizationFailedError for a principal that may not DESCRIBE the cluster."""
        metadata = await self._metadata([], timeout)
        nodes = sorted(metadata.brokers) if brokers is None else sorted(set(brokers))
        wanted = None if topics is None else {t: sorted(set(ps)) for t, ps in topics.items()}
        batch: _Batch[int, list[LogDirDescription]] = _Batch(nodes, lambda n: f"broker {n}")

        async def send(node: int | None, keys: list[int]) -> None:
            response = await self._send(lambda v: cluster_admin.describe_log_dirs_request(wanted), node,
                                        api_key=cluster_admin.DESCRIBE_LOG_DIRS, low=1)
            if getattr(response, "error_code", 0):
                batch.fail(keys[0], _broker_error(response.error_code, f"broker {node}"), final=True)
            else:
                batch.succeed(keys[0], cluster_admin.log_dirs(response))

        async def round_(keys: list[int]) -> None:
            await self._per_node(batch, {n: [n] for n in keys}, send)

        return await self._run(batch, round_, what="DescribeLogDirs", timeout=timeout)

    async def describe_producers(self, partitions: Iterable[TopicPartition | tuple[str, int]], *,
                                 timeout: float | None = None) -> dict[TopicPartition, list[ProducerStateInfo]]:
        """The idempotent and transactional producers each partition's leader knows
        (DescribeProducers): id, epoch, last sequence and timestamp, open transaction's first
        offset.  Raises UnknownTopicOrPartitionError, TopicAuthorizationFailedError (no READ)..."""
        wanted = sorted({TopicPartition(*tp) for tp in partitions})
        batch: _Batch[TopicPartition, list[ProducerStateInfo]] = _Batch(wanted, _partition)

        async def send(node: int | None, tps: list[TopicPartition]) -> None:
            response = await self._send(lambda v: cluster_admin.describe_producers_request(tps), node,
                                        api_key=cluster_admin.DESCRIBE_PRODUCERS)
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        batch.fail(tp, _broker_error(p.error_code, _partition(tp), p.error_message),
                                   final=p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    else:
                        batch.succeed(tp, cluster_admin.producer_states(p))

        async def round_(tps: list[TopicPartition]) -> None:
            metadata = await self._cluster.refresh_metadata({tp.topic for tp in tps})
            by_node: dict[int | None, list[TopicPartition]] = {}
            for tp in tps:
                _check_partition_known(batch, metadata, tp)
                if tp in batch.pending:
                    by_node.setdefault(metadata.leader(*tp), []).append(tp)
            await self._per_node(batch, by_node, send)

        return await self._run(batch, round_, what="DescribeProducers", timeout=timeout, refresh_metadata=True)

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None, *,
                                              timeout: float | None = None) -> dict[str, list[ScramCredentialInfo]]:
        """The SCRAM credentials (mechanism and iteration count, never secrets) of ``users``, or of
        every user that has one.  Raises ResourceNotFoundError for a named user without any,
        ClusterAuthorizationFailedError for a principal that may not DESCRIBE the cluster."""
        names = None if users is None else list(dict.fromkeys(users))

        async def attempt() -> dict[str, list[ScramCredentialInfo]]:
            response = await self._send(lambda v: cluster_admin.describe_scram_request(names),
                                        api_key=cluster_admin.DESCRIBE_SCRAM)
            if response.error_code:
                raise _broker_error(response.error_code, "DescribeUserScramCredentials", response.error_message)
            batch: _Batch[str, list[ScramCredentialInfo]] = _Batch(
                names if names is not None else [r.user for r in response.results], lambda u: f"user {u!r}")
            for r in response.results:
                if r.error_code:
                    batch.fail(r.user, _broker_error(r.error_code, f"user {r.user!r}", r.error_message), final=True)
                else:
                    batch.succeed(r.user, cluster_admin.scram_infos(r))
            batch.end_round()
            return batch.outcome()

        return await retrying(attempt, timeout=self._timeout(timeout), backoff=self._cluster.retry_backoff,
                              what="DescribeUserScramCredentials")

    async def alter_user_scram_credentials(self, changes: Iterable[ScramUpsertion | ScramDeletion], *,
                                           timeout: float | None = None) -> None:
        """Create, replace (``ScramUpsertion``, the password salted and hashed here) or remove
        (``ScramDeletion``) users' SCRAM credentials; the broker allows one change per user and
        request.  The next SASL login checks the new credential.  Raises the first failure:
        ResourceNotFoundError (nothing to remove), UnacceptableCredentialError (iterations outside
        4096-16384), DuplicateResourceError (a user changed twice)..."""
        todo = list(changes)
        request = cluster_admin.alter_scram_request(todo)  # hashed once: the same salt for every retry
        users = list(dict.fromkeys(c.user for c in todo))
        batch: _Batch[str, None] = _Batch(users, lambda u: f"user {u!r}")

        async def round_(pending: list[str]) -> None:
            response = await self._send(lambda v: request, await self._controller(),
                                        api_key=cluster_admin.ALTER_SCRAM)
            for r in response.results:
                if r.error_code:
                    batch.fail(r.user, _broker_error(r.error_code, f"user {r.user!r}", r.error_message))
                else:
                    batch.succeed(r.user, None)

        await self._run(batch, round_, what="AlterUserScramCredentials", timeout=timeout)

    async def describe_features(self, *, timeout: float | None = None) -> FeatureVersions:
        """The feature versions (KIP-584) a broker supports and the cluster finalized, from
        ApiVersions v3+: e.g. ``finalized["metadata.version"]``."""
        async def attempt() -> FeatureVersions:
            response = await self._send(
                lambda v: messages.ApiVersionsRequest(client_software_name="kwire", client_software_version="0"),
                api_key=cluster_admin.API_VERSIONS, low=cluster_admin.FIRST_VERSION_WITH_FEATURES)
            if response.error_code:
                raise _broker_error(response.error_code, "ApiVersions")
            return cluster_admin.feature_versions(response)

        return await retrying(attempt, timeout=self._timeout(timeout), backoff=self._cluster.retry_backoff,
                              what="ApiVersions")

    # -- records, group offsets and members, config resources, transactions (admin_offsets.py,
    # admin_transactions.py) -------------------------------------------------------------------
    async def delete_records(self, before: Mapping[TopicPartition | tuple[str, int], int], *,
                             timeout: float | None = None) -> dict[TopicPartition, int]:
        """Delete each partition's records before the offset (-1: all); the new low watermarks."""
        return await offsets_admin.delete_records(self, before, timeout=timeout)

    async def alter_consumer_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition | tuple[str, int], int],
                                           *, metadata: str = "", timeout: float | None = None) -> None:
        """Commit offsets for a group that has no members (UnknownMemberIdError while it has)."""
        await offsets_admin.alter_consumer_group_offsets(self, group_id, offsets, metadata=metadata, timeout=timeout)

    async def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition | tuple[str, int]],
                                            *, timeout: float | None = None) -> None:
        """Remove a group's committed offsets of these partitions (OffsetDelete)."""
        await offsets_admin.delete_consumer_group_offsets(self, group_id, partitions, timeout=timeout)

    async def remove_group_members(self, group_id: str, group_instance_ids: Collection[str], *,
                                   reason: str | None = None, timeout: float | None = None) -> None:
        """Remove static members (by group.instance.id) from a classic group (KIP-345)."""
        await offsets_admin.remove_group_members(self, group_id, group_instance_ids, reason=reason, timeout=timeout)

    async def list_config_resources(self, types: Iterable[ResourceType | int] = (), *,
                                    timeout: float | None = None) -> list[tuple[ResourceType, str]]:
        """The resources that have configs, of ``types`` (default: all), sorted (KIP-1142)."""
        return await offsets_admin.list_config_resources(self, types, timeout=timeout)

    async def list_transactions(self, *, states: Collection[str] = (), producer_ids: Iterable[int] = (),
                                min_duration_ms: int = -1, pattern: str | None = None,
                                timeout: float | None = None) -> list[txn_admin.TransactionListing]:
        """The transactions the brokers' coordinators know, filtered (KIP-664, KIP-994, KIP-1152)."""
        return await txn_admin.list_transactions(self, states=states, producer_ids=producer_ids,
                                                 min_duration_ms=min_duration_ms, pattern=pattern, timeout=timeout)

    async def describe_transactions(self, transactional_ids: Iterable[str], *,
                                    timeout: float | None = None) -> dict[str, txn_admin.TransactionDescription]:
        """Each transactional id's state at its coordinator (KIP-664)."""
        return await txn_admin.describe_transactions(self, transactional_ids, timeout=timeout)

    async def abort_transaction(self, partition: TopicPartition | tuple[str, int], producer_id: int,
                                producer_epoch: int, *, coordinator_epoch: int = -1,
                                timeout: float | None = None) -> None:
        """Abort a hanging transaction in one partition (an ABORT marker on its leader, KIP-664)."""
        await txn_admin.abort_transaction(self, partition, producer_id, producer_epoch,
                                          coordinator_epoch=coordinator_epoch, timeout=timeout)

    # -- leader elections and reassignments (admin_replicas.py) -----------------------------------
    async def elect_leaders(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None, *,
                            election: replicas_admin.ElectionType = replicas_admin.ElectionType.PREFERRED,
                            timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Elect partitions' leaders (None: all): None per partition elected, else its error."""
        return await replicas_admin.elect_leaders(self, partitions, election=election, timeout=timeout)

    async def list_partition_reassignments(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None,
                                           *, timeout: float | None = None
                                           ) -> dict[TopicPartition, replicas_admin.PartitionReassignment]:
        """The reassignments under way (of ``partitions``, default all)."""
        return await replicas_admin.list_partition_reassignments(self, partitions, timeout=timeout)

    async def alter_partition_reassignments(self, targets: Mapping[TopicPartition | tuple[str, int],
                                                                   Sequence[int] | None], *,
                                            timeout: float | None = None) -> None:
        """Move partitions to the replicas given (None: cancel the reassignment under way)."""
        await replicas_admin.alter_partition_reassignments(self, targets, timeout=timeout)

    # -- the metadata quorum and feature levels (admin_quorum.py) ----------------------------------
    async def describe_metadata_quorum(self, *, timeout: float | None = None) -> quorum_admin.QuorumInfo:
        """The KRaft metadata quorum: leader, epoch, high watermark, voters, observers (KIP-595)."""
        return await quorum_admin.describe_metadata_quorum(self, timeout=timeout)

    async def update_features(self, levels: Mapping[str, int], *,
                              upgrade: quorum_admin.FeatureUpgrade = quorum_admin.FeatureUpgrade.UPGRADE,
                              validate_only: bool = False, timeout: float | None = None) -> None:
        """Set finalized feature levels (``{"transaction.version": 2}``) on the controller (KIP-584)."""
        await quorum_admin.update_features(self, levels, upgrade=upgrade, validate_only=validate_only,
                                           timeout=timeout)

    async def unregister_broker(self, broker_id: int, *, timeout: float | None = None) -> None:
        """Remove a (decommissioned) broker's registration from the controller (KIP-631)."""
        await quorum_admin.unregister_broker(self, broker_id, timeout=timeout)

    async def add_raft_voter(self, voter_id: int, voter_directory_id: uuid.UUID,
                             endpoints: Iterable[quorum_admin.RaftVoterEndpoint], *, cluster_id: str | None = None,
                             timeout: float | None = None) -> None:
        """Add a controller to the metadata quorum's voters (KIP-853; the cluster needs kraft.version 1)."""
        await quorum_admin.add_raft_voter(self, voter_id, voter_directory_id, endpoints, cluster_id=cluster_id,
                                          timeout=timeout)

    async def remove_raft_voter(self, voter_id: int, voter_directory_id: uuid.UUID, *,
                                cluster_id: str | None = None, timeout: float | None = None) -> None:
        """Remove a voter from the metadata quorum (KIP-853; the cluster needs kraft.version 1)."""
        await quorum_admin.remove_raft_voter(self, voter_id, voter_directory_id, cluster_id=cluster_id,
                                             timeout=timeout)


# -- decoding helpers -------------------------------------------------------------------------------
def _offset_spec(spec: int | str) -> int:
    if isinstance(spec, str):
        try:
            return _OFFSET_SPECS[spec.lower()]
        except KeyError:
            raise ValueError(f"offset spec {spec!r} is not one of {sorted(_OFFSET_SPECS)} or a timestamp") from None
    if spec < MAX_TIMESTAMP:
        raise ValueError(f"offset spec {spec} is neither a timestamp (>= 0) nor EARLIEST/LATEST/MAX_TIMESTAMP")
    return int(spec)


def _check_partition_known(batch: _Batch[TopicPartition, Any], metadata: ClusterMetadata,
                           tp: TopicPartition) -> None:
    """Fail a partition at once when the fresh metadata says its topic or number does not exist."""
    info = metadata.topics.get(tp.topic)
    if info is not None and info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        batch.fail(tp, _broker_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _partition(tp),
                                     f"topic {tp.topic!r} does not exist"), final=True)
    elif info is not None and not info.error_code and info.partitions and tp.partition not in info.partitions:
        batch.fail(tp, _broker_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _partition(tp),
                                     f"topic {tp.topic!r} has {len(info.partitions)} partitions"), final=True)


def _config_entry(c: messages.DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
                  ) -> ConfigEntry:
    source = ConfigSource(c.config_source) if c.config_source in ConfigSource._value2member_map_ \
        else ConfigSource.UNKNOWN
    is_default = c.is_default if c.config_source == -1 else source == ConfigSource.DEFAULT_CONFIG
    synonyms = tuple(ConfigSynonym(s.name, s.value, ConfigSource(s.source)
                                   if s.source in ConfigSource._value2member_map_ else ConfigSource.UNKNOWN)
                     for s in (c.synonyms or ()))
    return ConfigEntry(c.name, c.value, source, bool(is_default), c.read_only, c.is_sensitive, synonyms,
                       c.config_type, c.documentation)


def _group_description(g: messages.DescribeGroupsResponse.DescribedGroup, coordinator: int | None) -> GroupDescription:
    consumer = g.protocol_type == "consumer"
    members = []
    for m in g.members:
        assignment = subscription = None
        if consumer:
            try:
                if m.member_assignment:
                    assignment = tuple(decode_assignment(m.member_assignment).partitions)
                if m.member_metadata:
                    subscription = tuple(decode_subscription(m.member_metadata).topics)
            except DecodeError as exc:
                logger.info("member %s of group %r: undecodable consumer protocol bytes: %s", m.member_id,
                            g.group_id, exc)
        members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment,
                                         subscription, bytes(m.member_metadata or b""),
                                         bytes(m.member_assignment or b"")))
    return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members),
                            -1 if coordinator is None else coordinator)


# -- the synchronous twin ---------------------------------------------------------------------------
class Admin(SyncFacade):
    """The admin client for code without an event loop; every method blocks until its answer.

    Same methods, arguments and results as ``AsyncAdmin``, which runs on kwire's client loop
    thread.  Close it (or use ``with``) to drop its connections.
    """

    def __init__(self, conf: Mapping[str, Any] | Any = None, /, **settings: Any):
        self._loop = LoopThread.get()
        self._admin = AsyncAdmin(conf, **settings)

    @property
    def config(self) -> Any:
        """The admin client's settings, parsed and checked (read-only)."""
        return self._admin.config

    @property
    def _twin(self) -> AsyncAdmin:
        return self._admin

    def _wait(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        # The async call keeps its own deadline; this outer one only guards against a hang.
        limit = (self._admin.default_timeout if timeout is None else timeout) * 2 + self._admin.cluster.request_timeout
        return self._loop.run(coro, limit)

    @mirrors(AsyncAdmin.close, blocking=True)
    def close(self) -> None:
        self._loop.run(self._admin.close(), self._admin.cluster.request_timeout)

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    create_topics = blocking(AsyncAdmin.create_topics)
    delete_topics = blocking(AsyncAdmin.delete_topics)
    create_partitions = blocking(AsyncAdmin.create_partitions)
    list_topics = blocking(AsyncAdmin.list_topics)
    metadata = blocking(AsyncAdmin.metadata)
    describe_topics = blocking(AsyncAdmin.describe_topics)
    describe_cluster = blocking(AsyncAdmin.describe_cluster)
    describe_configs = blocking(AsyncAdmin.describe_configs)
    alter_configs = blocking(AsyncAdmin.alter_configs)
    incremental_alter_configs = blocking(AsyncAdmin.incremental_alter_configs)
    list_groups = blocking(AsyncAdmin.list_groups)
    describe_groups = blocking(AsyncAdmin.describe_groups)
    delete_groups = blocking(AsyncAdmin.delete_groups)
    list_offsets = blocking(AsyncAdmin.list_offsets)
    list_consumer_group_offsets = blocking(AsyncAdmin.list_consumer_group_offsets)
    consumer_group_lag = blocking(AsyncAdmin.consumer_group_lag)
    create_acls = blocking(AsyncAdmin.create_acls)
    describe_acls = blocking(AsyncAdmin.describe_acls)
    delete_acls = blocking(AsyncAdmin.delete_acls)
    describe_log_dirs = blocking(AsyncAdmin.describe_log_dirs)
    describe_producers = blocking(AsyncAdmin.describe_producers)
    describe_user_scram_credentials = blocking(AsyncAdmin.describe_user_scram_credentials)
    alter_user_scram_credentials = blocking(AsyncAdmin.alter_user_scram_credentials)
    describe_client_quotas = blocking(AsyncAdmin.describe_client_quotas)
    alter_client_quotas = blocking(AsyncAdmin.alter_client_quotas)
    describe_features = blocking(AsyncAdmin.describe_features)
    delete_records = blocking(AsyncAdmin.delete_records)
    alter_consumer_group_offsets = blocking(AsyncAdmin.alter_consumer_group_offsets)
    delete_consumer_group_offsets = blocking(AsyncAdmin.delete_consumer_group_offsets)
    remove_group_members = blocking(AsyncAdmin.remove_group_members)
    list_config_resources = blocking(AsyncAdmin.list_config_resources)
    list_transactions = blocking(AsyncAdmin.list_transactions)
    describe_transactions = blocking(AsyncAdmin.describe_transactions)
    abort_transaction = blocking(AsyncAdmin.abort_transaction)
    elect_leaders = blocking(AsyncAdmin.elect_leaders)
    list_partition_reassignments = blocking(AsyncAdmin.list_partition_reassignments)
    alter_partition_reassignments = blocking(AsyncAdmin.alter_partition_reassignments)
    describe_metadata_quorum = blocking(AsyncAdmin.describe_metadata_quorum)
    update_features = blocking(AsyncAdmin.update_features)
    unregister_broker = blocking(AsyncAdmin.unregister_broker)
    add_raft_voter = blocking(AsyncAdmin.add_raft_voter)
    remove_raft_voter = blocking(AsyncAdmin.remove_raft_voter)
