"""StreamsGroupHeartbeat and StreamsGroupDescribe: KIP-1071 streams groups (Kafka 4.2+ GA).

The handlers translate the wire to ``kwire.broker.coordinator.streams``; the coordinator holds
the logic.  Versions are Kafka 4.3's: both v0.

As Kafka's KafkaApis: a heartbeat needs READ on the group (GROUP_AUTHORIZATION_FAILED) and, when
it carries a topology, DESCRIBE on the topics it names (TOPIC_AUTHORIZATION_FAILED); the internal
topics the group lacks are created when the client may CREATE them (on the cluster or each
topic), else the MISSING_INTERNAL_TOPICS status says it may not.  Describing needs DESCRIBE on
the group.  A group whose ``__consumer_offsets`` partition is loading gets COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kwire.protocol import messages
from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    ErrorCode,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    KafkaError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..coordinator.group_types import group_type
from ..coordinator.streams import StatusCode, StreamsHeartbeat
from ..coordinator.streams.coordinator import owned_tasks
from ..coordinator.streams.member import ACTIVE, STANDBY, WARMUP, by_kind
from .authorized_ops import authorized_operations
from .common import NO_AUTHORIZED_OPERATIONS, error_of
from .features import features_of
from .groups import kafka_client_host
from .registry import handler

if TYPE_CHECKING:
    from ..context import RequestContext

__all__ = ["handle_streams_group_describe", "handle_streams_group_heartbeat"]

logger = logging.getLogger("kwire.broker.coordinator.streams")


def _streams_enabled(ctx: RequestContext) -> bool:
    """Whether the finalized streams.version enables streams groups (Kafka 4.3 answers both
    requests UNSUPPORTED_VERSION at level 0, e.g. after an admin lowered it)."""
    return features_of(ctx.broker).current().levels.get("streams.version", 0) >= 1


def _loading(ctx: RequestContext, group_id: str) -> bool:
    loading = getattr(ctx.broker.coordinator, "loading", None)
    return bool(loading is not None and loading(group_id))


def _tasks(rows) -> dict[str, list[int]] | None:
    if rows is None:
        return None
    out: dict[str, list[int]] = {}
    for r in rows:
        out.setdefault(r.subtopology_id or "", []).extend(r.partitions or ())
    return out


def _topology_topics(topology) -> set[str]:
    names: set[str] = set()
    for s in topology.subtopologies or ():
        names.update(t for t in s.source_topics or () if t)
        names.update(t for t in s.repartition_sink_topics or () if t)
        names.update(t.name for t in s.repartition_source_topics or () if t.name)
        names.update(t.name for t in s.state_changelog_topics or () if t.name)
    return names


@handler(messages.StreamsGroupHeartbeatRequest.API_KEY, 0, 0)
def handle_streams_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    R = messages.StreamsGroupHeartbeatResponse
    group_id = request.group_id or ""

    def failed(code: int, message: str | None) -> Any:
        # Kafka answers a refusal with the error alone: every other field keeps its default.
        return R(throttle_time_ms=0, error_code=code, error_message=message, member_id="",
                 member_epoch=0, heartbeat_interval_ms=0, acceptable_recovery_lag=0, task_offset_interval_ms=0,
                 status=None, active_tasks=None, standby_tasks=None, warmup_tasks=None,
                 endpoint_information_epoch=0, partitions_by_user_endpoint=None)

    if not _streams_enabled(ctx):
        return failed(UnsupportedVersionError.code, None)
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, group_id):
        return failed(GroupAuthorizationFailedError.code, None)
    if _loading(ctx, group_id):
        return failed(CoordinatorLoadInProgressError.code, None)
    if request.topology is not None:
        denied = sorted(t for t in _topology_topics(request.topology)
                        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, t))
        if denied:
            return failed(TopicAuthorizationFailedError.code,
                          f"Unauthorized to DESCRIBE on topics {', '.join(denied)}.")
    active, standby, warmup = _tasks(request.active_tasks), _tasks(request.standby_tasks), _tasks(request.warmup_tasks)
    endpoint = request.user_endpoint
    req = StreamsHeartbeat(
        group_id=group_id, member_id=request.member_id or "", member_epoch=request.member_epoch,
        endpoint_information_epoch=request.endpoint_information_epoch, instance_id=request.instance_id,
        rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms, topology=request.topology,
        owned=owned_tasks(active, standby, warmup),
        owned_lists_sent=(active is not None, standby is not None, warmup is not None),
        process_id=request.process_id,
        user_endpoint=(endpoint.host or "", endpoint.port) if endpoint is not None else None,
        client_tags=tuple((kv.key or "", kv.value or "") for kv in request.client_tags)
        if request.client_tags is not None else None,
        task_offsets=tuple((o.subtopology_id or "", o.partition, o.offset) for o in request.task_offsets)
        if request.task_offsets is not None else None,
        task_end_offsets=tuple((o.subtopology_id or "", o.partition, o.offset) for o in request.task_end_offsets)
        if request.task_end_offsets is not None else None,
        shutdown_application=bool(request.shutdown_application),
        client_id=ctx.client_id or "", client_host=kafka_client_host(ctx.client_host))
    try:
        result = ctx.broker.streams_groups.heartbeat(req)
    except Exception as exc:  # noqa: BLE001 - every refusal is an error code, the broker goes on
        code, _ = error_of(exc)
        return failed(code, exc.message if isinstance(exc, KafkaError) else None)
    statuses = list(result.statuses)
    if result.to_create:
        problems = _create_internal_topics(ctx, result.to_create)
        if problems:
            statuses = [(c, f"{d} {problems}" if c is StatusCode.MISSING_INTERNAL_TOPICS else d) for c, d in statuses]
    T = R.TaskIds
    resp = R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, member_id=result.member_id,
             member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
             # Kafka Streams' acceptable.recovery.lag and the coordinator's task offset interval defaults.
             acceptable_recovery_lag=10_000, task_offset_interval_ms=60_000,
             status=[R.Status(status_code=int(c), status_detail=d) for c, d in statuses] or None,
             active_tasks=None, standby_tasks=None, warmup_tasks=None,
             endpoint_information_epoch=result.endpoint_epoch, partitions_by_user_endpoint=None)
    if result.assignment is not None:
        resp.active_tasks, resp.standby_tasks, resp.warmup_tasks = (
            [T(subtopology_id=sid, partitions=sorted(ps)) for sid, ps in sorted(by_kind(result.assignment, k).items())]
            for k in (ACTIVE, STANDBY, WARMUP))
    if result.partitions_by_endpoint is not None:
        E = R.EndpointToPartitions
        TP = E.TopicPartition
        resp.partitions_by_user_endpoint = [
            E(user_endpoint=E.Endpoint(host=host, port=port),
              active_partitions=[TP(topic=t, partitions=sorted(ps)) for t, ps in sorted(act.items())],
              standby_partitions=[TP(topic=t, partitions=sorted(ps)) for t, ps in sorted(stb.items())])
            for (host, port), (act, stb) in sorted(result.partitions_by_endpoint.items())]
    return resp


def _create_internal_topics(ctx: RequestContext, topics) -> str:
    """Create the group's missing internal topics, as Kafka 4.2's broker does after the
    coordinator named them; what went wrong, for the MISSING_INTERNAL_TOPICS status ('' if nothing).
    As Kafka's KafkaApis: CREATE on the cluster, else on every one of the topics, is checked for
    the whole set first; one refused topic holds them all back."""
    from .topic_admin import create_topic

    missing = [t for t in topics if t.name not in ctx.broker.topics]  # some may exist meanwhile
    if not ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER):
        denied = [t.name for t in missing if not ctx.allowed(AclOperation.CREATE, ResourceType.TOPIC, t.name)]
        if denied:
            return f"Unauthorized to CREATE on topics {', '.join(denied)}."
    problems = []
    for t in missing:
        if t.replication_factor > 1:  # one broker: Kafka's CreateTopics fails the same way
            problems.append(f"Creating topic {t.name} failed: replication factor {t.replication_factor} is larger "
                            "than the 1 available broker.")
            continue
        try:
            create_topic(ctx.broker, t.name, t.partitions, dict(t.configs))
            logger.info("streams group: created internal topic %s with %d partition(s)", t.name, t.partitions)
        except KafkaError as exc:
            problems.append(f"Creating topic {t.name} failed: {exc.message}")
            logger.warning("streams group: could not create internal topic %s: %s", t.name, exc.message)
    return " ".join(problems)


@handler(messages.StreamsGroupDescribeRequest.API_KEY, 0, 0)
def handle_streams_group_describe(ctx: RequestContext, request: Any) -> Any:
    R = messages.StreamsGroupDescribeResponse
    G = R.DescribedGroup
    coordinator = ctx.broker.streams_groups

    def error(group_id: str, code: int, message: str | None) -> Any:
        return G(error_code=code, error_message=message, group_id=group_id, group_state="", group_epoch=-1,
                 assignment_epoch=-1, topology=None, members=[], authorized_operations=NO_AUTHORIZED_OPERATIONS)

    groups = []
    enabled = _streams_enabled(ctx)
    for group_id in request.group_ids:
        gid = group_id or ""
        if not enabled:
            groups.append(error(group_id, UnsupportedVersionError.code, None))
            continue
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            groups.append(error(group_id, GroupAuthorizationFailedError.code, None))
            continue
        if _loading(ctx, gid):
            groups.append(error(group_id, CoordinatorLoadInProgressError.code, None))
            continue
        group = coordinator.group(gid)
        if group is None:
            # Kafka's streamsGroupDescribe: a missing group, or one of another type, is GROUP_ID_NOT_FOUND.
            other = group_type(ctx.broker, gid)
            groups.append(error(group_id, GroupIdNotFoundError.code,
                                f"Group {gid} is not a streams group." if other else f"Group {gid} not found."))
            continue
        described = G(error_code=ErrorCode.NONE, error_message=None, group_id=gid, group_state=group.state.value,
                      group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                      topology=_described_topology(R, group), members=[_described_member(R, group, m) for m in group],
                      authorized_operations=authorized_operations(ctx, ResourceType.GROUP, gid)
                      if request.include_authorized_operations else NO_AUTHORIZED_OPERATIONS)
        groups.append(described)
    return R(throttle_time_ms=0, groups=groups)


def _described_topology(R, group) -> Any:
    topology = group.topology
    if topology is None:
        return None
    configured = group.configured
    T = R.DescribedGroup.Topology
    counts = configured.partition_counts if configured is not None else {}
    # Kafka: the configured subtopologies (partition counts resolved), null while source topics
    # are missing or topics are wrongly partitioned.
    if not counts:
        return T(epoch=topology.epoch, subtopologies=None)
    S = T.Subtopology
    KV = S.TopicInfo.KeyValue

    def info(t) -> Any:
        return S.TopicInfo(name=t.name, partitions=counts.get(t.name, t.partitions),
                           replication_factor=t.replication_factor,
                           topic_configs=[KV(key=k, value=v) for k, v in t.configs])

    return T(epoch=topology.epoch, subtopologies=[
        S(subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
          repartition_sink_topics=list(s.repartition_sink_topics),
          state_changelog_topics=[info(t) for t in s.state_changelog_topics],
          repartition_source_topics=[info(t) for t in s.repartition_source_topics])
        for s in topology.subtopologies])


def _described_member(R, group, m) -> Any:
    M = R.DescribedGroup.Member
    A = M.Assignment

    def assignment(tasks) -> Any:
        return A(**{f"{k}_tasks": [A.TaskIds(subtopology_id=sid, partitions=sorted(ps))
                                   for sid, ps in sorted(by_kind(tasks, k).items())]
                    for k in (ACTIVE, STANDBY, WARMUP)})

    Off = M.TaskOffset
    return M(member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, rack_id=m.rack_id,
             client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch,
             process_id=m.process_id,
             user_endpoint=M.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]) if m.user_endpoint else None,
             client_tags=[M.KeyValue(key=k, value=v) for k, v in m.client_tags],
             task_offsets=[Off(subtopology_id=s, partition=p, offset=o) for s, p, o in m.task_offsets],
             task_end_offsets=[Off(subtopology_id=s, partition=p, offset=o) for s, p, o in m.task_end_offsets],
             assignment=assignment(m.assigned), target_assignment=assignment(group.target.get(m.member_id, {})),
             is_classic=False)
