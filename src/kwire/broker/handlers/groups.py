"""Consumer-group requests: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups and OffsetDelete.

Each handler turns its request, whatever the version, into a call on the broker's
``GroupCoordinator`` and builds the response with only the fields that version has.  The
coordinator holds the logic; this module only knows the wire.  Every api is served from v0 to
the newest version the codec knows:

* OffsetCommit v10 / OffsetFetch v10 name topics by id (KIP-848); the topic registry resolves
  them, and unknown ids get UNKNOWN_TOPIC_ID.  Their KIP-848 member epochs only concern
  "consumer"-protocol groups, which this broker doesn't have; classic members use generations.
* FindCoordinator answers this broker for groups and for transactional ids (its transaction
  coordinator, ``kwire.broker.transactions``).  Share groups (key type 2, v6) are not supported:
  INVALID_REQUEST, like a Kafka broker with share groups disabled.
* OffsetFetch v7+ with require_stable: a partition whose offset an open transaction staged
  (TxnOffsetCommit) answers UNSTABLE_OFFSET_COMMIT (KIP-447), which the client retries.

With an authorizer, as Kafka: joining, syncing, heartbeats, leaving and committing need READ on the
group (GROUP_AUTHORIZATION_FAILED), committing also READ on each topic (TOPIC_AUTHORIZATION_FAILED);
describing a group, fetching its offsets and finding its coordinator need DESCRIBE (DESCRIBE on the
transactional id for a transaction coordinator); deleting it (or its offsets) DELETE. ListGroups lists every group with DESCRIBE on the cluster, else those the
principal may DESCRIBE.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Any

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicIdError,
    UnstableOffsetCommitError,
)

from ..auth.acls import AclOperation, ResourceType
from ..coordinator import GROUP_TYPE, JoinRequest, OffsetCommitEntry
from ..coordinator.group_types import is_share_group, is_streams_group
from .registry import handler
from .share_groups import share_of

if TYPE_CHECKING:
    from ..context import RequestContext

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE = 0, 1, 2
# Without an authorizer every operation on a group is allowed: READ, DELETE and DESCRIBE (AclOperation bits 3, 6, 8).
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
NO_AUTHORIZED_OPERATIONS = -(2**31)  # Kafka's "not requested" sentinel


def _group_allowed(ctx: RequestContext, operation: AclOperation, group_id: str | None) -> bool:
    return ctx.allowed(operation, ResourceType.GROUP, group_id or "")


def _topic_allowed(ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
    return ctx.allowed(operation, ResourceType.TOPIC, topic)


_GROUP_DENIED = GroupAuthorizationFailedError.code
_LOADING = CoordinatorLoadInProgressError.code  # the group's partition is still being loaded


def kafka_client_host(client_host: str) -> str:
    """Kafka reports a member's host as Java prints an address: "/127.0.0.1", without the port.

    ``client_host`` is the connection's "host:port" (IPv6 hosts unbracketed, as the network
    layer writes them, or bracketed).
    """
    host = client_host
    if host.startswith("["):
        host = host[1:host.find("]")] if "]" in host else host[1:]
    elif ":" in host:
        head, _, port = host.rpartition(":")
        if port.isdigit() and head:
            host = head
    return host if host.startswith("/") else "/" + host


# ---------------------------------------------------------------- FindCoordinator


@handler(FIND_COORDINATOR, 0, 6)
def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    R = messages.FindCoordinatorResponse
    v = ctx.api_version
    key_type = request.key_type if v >= 1 else KEY_TYPE_GROUP
    host, port = ctx.advertised
    node_id = ctx.broker.config.node_id

    def locate(key: str) -> tuple[int, str | None, int, str, int]:
        """(error, message, node id, host, port) for one key."""
        if key_type == KEY_TYPE_GROUP:
            if not _group_allowed(ctx, AclOperation.DESCRIBE, key):
                return _GROUP_DENIED, f"{ctx.principal} may not DESCRIBE group {key!r}", -1, "", -1
            return 0, None, node_id, host, port
        if key_type == KEY_TYPE_TRANSACTION:
            if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key or ""):
                return (TransactionalIdAuthorizationFailedError.code,
                        f"{ctx.principal} may not DESCRIBE transactional id {key!r}", -1, "", -1)
            return 0, None, node_id, host, port
        return InvalidRequestError.code, f"coordinator key type {key_type} is not supported", -1, "", -1

    if v >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node, h, p = locate(key)
            coordinators.append(R.Coordinator(key=key, node_id=node, host=h, port=p, error_code=error,
                                              error_message=message))
        return R(throttle_time_ms=0, coordinators=coordinators)
    error, message, node, h, p = locate(request.key)
    resp = R(throttle_time_ms=0, error_code=error, node_id=node, host=h, port=p)
    if v >= 1:
        resp.error_message = message
    return resp


# ---------------------------------------------------------------- JoinGroup / SyncGroup


@handler(JOIN_GROUP, 0, 9)
async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    R = messages.JoinGroupResponse
    v = ctx.api_version
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        resp = R(throttle_time_ms=0, error_code=_GROUP_DENIED, generation_id=-1,
                 protocol_name=None if v >= 7 else "", leader="", skip_assignment=False,
                 member_id=request.member_id or "", members=[])
        if v >= 7:
            resp.protocol_type = None
        return resp
    if is_share_group(ctx.broker, request.group_id or "") or is_streams_group(ctx.broker, request.group_id or ""):
        # Kafka's classicGroupJoin: a group id held by a share or streams group is not joined
        # with the classic protocol (INCONSISTENT_GROUP_PROTOCOL, no member id).
        resp = R(throttle_time_ms=0, error_code=InconsistentGroupProtocolError.code, generation_id=-1,
                 protocol_name=None if v >= 7 else "", leader="", skip_assignment=False, member_id="", members=[])
        if v >= 7:
            resp.protocol_type = None
        return resp
    session = request.session_timeout_ms
    # v0 has no rebalance timeout: Kafka uses the session timeout (also for v1+'s -1 placeholder).
    rebalance = request.rebalance_timeout_ms if v >= 1 and request.rebalance_timeout_ms >= 0 else session
    join = JoinRequest(
        member_id=request.member_id or "",
        group_instance_id=request.group_instance_id if v >= 5 else None,
        client_id=ctx.client_id or "",
        client_host=kafka_client_host(ctx.client_host),
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type=request.protocol_type or "",
        protocols=tuple((p.name, bytes(p.metadata or b"")) for p in request.protocols),
        require_known_member_id=v >= 4,
        reason=request.reason if v >= 8 else None,
    )
    consumer_groups = ctx.broker.consumer_groups
    if consumer_groups.takes_classic_requests(request.group_id or ""):
        # A classic member of a KIP-848 group (Kafka 4's upgrade path): that coordinator answers.
        result = consumer_groups.classic_join(request.group_id or "", join)
    else:
        result = await ctx.broker.coordinator.join_group(request.group_id or "", join)
    resp = R(
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation_id,
        # Before v7 the name may not be null; errors carry "" there, null from v7 (as Kafka does).
        protocol_name=result.protocol_name if result.protocol_name is not None or v >= 7 else "",
        leader=result.leader_id,
        skip_assignment=False,
        member_id=result.member_id,
        members=[R.JoinGroupResponseMember(member_id=m.member_id,
                                           group_instance_id=m.group_instance_id if v >= 5 else None,
                                           metadata=m.metadata) for m in result.members],
    )
    if v >= 7:
        resp.protocol_type = result.protocol_type
    return resp


@handler(SYNC_GROUP, 0, 5)
async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    R = messages.SyncGroupResponse
    v = ctx.api_version
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return R(throttle_time_ms=0, error_code=_GROUP_DENIED, assignment=b"")
    assignments: dict[str, bytes] = {}
    for a in request.assignments:
        assignments[a.member_id] = bytes(a.assignment or b"")
    if ctx.broker.consumer_groups.has_group(request.group_id or ""):
        result = ctx.broker.consumer_groups.classic_sync(
            request.group_id or "", request.generation_id, request.member_id or "",
            request.protocol_type if v >= 5 else None, request.protocol_name if v >= 5 else None)
    else:
        result = await ctx.broker.coordinator.sync_group(
            request.group_id or "", request.generation_id, request.member_id or "",
            request.group_instance_id if v >= 3 else None,
            request.protocol_type if v >= 5 else None,
            request.protocol_name if v >= 5 else None,
            assignments)
    resp = R(throttle_time_ms=0, error_code=result.error, assignment=result.assignment)
    if v >= 5:
        resp.protocol_type, resp.protocol_name = result.protocol_type, result.protocol_name
    return resp


# ---------------------------------------------------------------- Heartbeat / LeaveGroup


@handler(HEARTBEAT, 0, 4)
def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return messages.HeartbeatResponse(throttle_time_ms=0, error_code=_GROUP_DENIED)
    if ctx.broker.consumer_groups.has_group(request.group_id or ""):
        error = ctx.broker.consumer_groups.classic_heartbeat(request.group_id or "", request.generation_id,
                                                             request.member_id or "")
    else:
        error = ctx.broker.coordinator.heartbeat(request.group_id or "", request.generation_id,
                                                 request.member_id or "", request.group_instance_id if v >= 3 else None)
    return messages.HeartbeatResponse(throttle_time_ms=0, error_code=error)


@handler(LEAVE_GROUP, 0, 5)
def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    R = messages.LeaveGroupResponse
    v = ctx.api_version
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return R(throttle_time_ms=0, error_code=_GROUP_DENIED, members=[]) if v >= 3 \
            else R(throttle_time_ms=0, error_code=_GROUP_DENIED)
    if v >= 3:
        leaving = [(m.member_id or "", m.group_instance_id) for m in request.members]
        reasons = {m.reason for m in request.members if v >= 5 and m.reason}
        reason = "; ".join(sorted(reasons)) or None
    else:
        leaving, reason = [(request.member_id or "", None)], None
    if ctx.broker.consumer_groups.has_group(request.group_id or ""):
        error, member_errors = ctx.broker.consumer_groups.classic_leave(request.group_id or "", leaving)
    else:
        error, member_errors = ctx.broker.coordinator.leave_group(request.group_id or "", leaving, reason)
    if v >= 3:
        # A group-level error (INVALID_GROUP_ID ...) comes without member results.
        members = [] if error else [R.MemberResponse(member_id=mid, group_instance_id=iid, error_code=code)
                                    for (mid, iid), code in zip(leaving, member_errors, strict=True)]
        return R(throttle_time_ms=0, error_code=error, members=members)
    # v0-2 answer for their one member in the top-level error.
    if not error and member_errors:
        error = member_errors[0]
    return R(throttle_time_ms=0, error_code=error)


# ---------------------------------------------------------------- OffsetCommit / OffsetFetch


@handler(OFFSET_COMMIT, 0, 10)
def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    R = messages.OffsetCommitResponse
    T, P = R.OffsetCommitResponseTopic, R.OffsetCommitResponseTopic.OffsetCommitResponsePartition
    v = ctx.api_version
    broker = ctx.broker
    group_denied = not _group_allowed(ctx, AclOperation.READ, request.group_id)
    entries: list[OffsetCommitEntry] = []
    # Where each request partition's answer comes from: an index into entries, or a fixed error.
    plan: list[tuple[Any, list[tuple[int, int, bool]]]] = []
    for t in request.topics:
        if v >= 10:
            info = broker.topics.by_id(t.topic_id)
            name = info.name if info is not None else None
        else:
            name = t.name
        parts = []
        topic_denied = name is not None and not group_denied and not _topic_allowed(ctx, AclOperation.READ, name)
        for p in t.partitions:
            if group_denied:
                parts.append((p.partition_index, _GROUP_DENIED, False))
                continue
            if name is None:
                parts.append((p.partition_index, UnknownTopicIdError.code, False))
                continue
            if topic_denied:
                parts.append((p.partition_index, TopicAuthorizationFailedError.code, False))
                continue
            parts.append((p.partition_index, len(entries), True))
            entries.append(OffsetCommitEntry(
                topic=name, partition=p.partition_index, offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if v >= 6 else -1,
                metadata=p.committed_metadata,
                commit_timestamp_ms=p.commit_timestamp if v == 1 else -1))
        plan.append((t, parts))
    # A KIP-848 group checks the member epoch; its offsets are then stored as any group's.
    consumer_error = None if group_denied else broker.consumer_groups.check_offset_commit(
        request.group_id or "", (request.member_id or "") if v >= 1 else "",
        request.generation_id_or_member_epoch if v >= 1 else -1, api_version=v,
        partitions=[(e.topic, e.partition) for e in entries])
    if not group_denied and is_share_group(broker, request.group_id or ""):
        consumer_error = GroupIdNotFoundError.code  # Kafka: a share group has no committed offsets
    if not group_denied and consumer_error is None:
        # A KIP-1071 streams group checks its member epochs the same way (StreamsGroup.validateOffsetCommit).
        consumer_error = broker.streams_groups.check_offset_commit(
            request.group_id or "", (request.member_id or "") if v >= 1 else "",
            request.generation_id_or_member_epoch if v >= 1 else -1, api_version=v,
            partitions=[(e.topic, e.partition) for e in entries])
    if group_denied:
        errors = []
    elif consumer_error:
        errors = [consumer_error] * len(entries)
    else:
        errors = broker.coordinator.commit_offsets(
            request.group_id or "",
            -1 if consumer_error is not None else request.generation_id_or_member_epoch if v >= 1 else -1,
            "" if consumer_error is not None else (request.member_id or "") if v >= 1 else "",
            request.group_instance_id if v >= 7 else None,
            entries,
            retention_ms=request.retention_time_ms if 2 <= v <= 4 else -1,
            api_version=v, defer_fsync=True)
    topics = []
    for t, parts in plan:
        rt = T(partitions=[P(partition_index=index, error_code=errors[ref] if is_entry else ref)
                           for index, ref, is_entry in parts])
        if v >= 10:
            rt.topic_id = t.topic_id
        else:
            rt.name = t.name
        topics.append(rt)
    response = R(throttle_time_ms=0, topics=topics)
    synced = broker.coordinator.journal_synced() if any(e == 0 for e in errors) else None
    if synced is None:
        return response
    return answer_when_synced(synced, response)


async def answer_when_synced(synced, response):
    """Answer an OffsetCommit (or TxnOffsetCommit) once the journal's fsync covers it (off the
    event loop)."""
    try:
        await asyncio.wrap_future(synced) if isinstance(synced, concurrent.futures.Future) else await synced
    except OSError:
        # As for a failed write: the commit may not be on disk, so it is not acknowledged.
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE:
                    p.error_code = CoordinatorNotAvailableError.code
    return response


def _fetch_group(ctx: RequestContext, group_id: str, wanted: list[tuple[str, list[int]]] | None,
                 require_stable: bool = False):
    """[(topic, [(partition, offset, leader epoch, metadata, error)])] for one group.

    Topics the principal may not DESCRIBE: left out of "all topics", TOPIC_AUTHORIZATION_FAILED when named.
    ``require_stable``: partitions with offsets an open transaction staged are UNSTABLE_OFFSET_COMMIT.
    """
    broker = ctx.broker
    denied: set[str] = set()
    if wanted is not None:
        denied = {t for t, _ in wanted if not _topic_allowed(ctx, AclOperation.DESCRIBE, t)}
    pairs = None if wanted is None else [(t, p) for t, parts in wanted for p in parts if t not in denied]
    found = broker.coordinator.fetch_offsets(group_id, pairs) if pairs is None or pairs else []
    by_topic: dict[str, list] = {}
    for t, parts in wanted or ():
        if t in denied:
            by_topic[t] = [(p, -1, -1, "", TopicAuthorizationFailedError.code) for p in parts]
    unstable = broker.coordinator.pending_txn_partitions(group_id) if require_stable else set()
    for topic, partition, committed in found:
        if wanted is None and not _topic_allowed(ctx, AclOperation.DESCRIBE, topic):
            continue
        if (topic, partition) in unstable:
            row = (partition, -1, -1, "", UnstableOffsetCommitError.code)
        elif committed is None:
            row = (partition, -1, -1, "", 0)
        else:
            row = (partition, committed.offset, committed.leader_epoch, committed.metadata, 0)
        by_topic.setdefault(topic, []).append(row)
    if wanted is not None:
        # Keep the request's topic order, topics without partitions included.
        return [(t, by_topic.get(t, [])) for t in dict.fromkeys(t for t, _ in wanted)]
    return list(by_topic.items())


@handler(OFFSET_FETCH, 0, 10)
def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    R = messages.OffsetFetchResponse
    v = ctx.api_version
    if v < 8:
        T, P = R.OffsetFetchResponseTopic, R.OffsetFetchResponseTopic.OffsetFetchResponsePartition
        wanted = (None if request.topics is None
                  else [(t.name, list(t.partition_indexes)) for t in request.topics])
        error = (_GROUP_DENIED if not _group_allowed(ctx, AclOperation.DESCRIBE, request.group_id)
                 else _LOADING if ctx.broker.coordinator.loading(request.group_id or "") else 0)
        if error:
            if v >= 2:
                return R(throttle_time_ms=0, topics=[], error_code=error)
            # v0-1 have no top-level error: each requested partition carries it
            return R(throttle_time_ms=0, topics=[T(name=t, partitions=[
                P(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                  error_code=error) for p in parts]) for t, parts in wanted or ()])
        rows = _fetch_group(ctx, request.group_id or "", wanted, require_stable=v >= 7 and request.require_stable)
        topics = [T(name=topic, partitions=[
            P(partition_index=p, committed_offset=off, committed_leader_epoch=epoch if v >= 5 else -1,
              metadata=md, error_code=err) for p, off, epoch, md, err in parts]) for topic, parts in rows]
        resp = R(throttle_time_ms=0, topics=topics)
        if v >= 2:
            resp.error_code = 0
        return resp
    G = R.OffsetFetchResponseGroup
    T, P = G.OffsetFetchResponseTopics, G.OffsetFetchResponseTopics.OffsetFetchResponsePartitions
    topics_registry = ctx.broker.topics
    groups = []
    for g in request.groups:
        if not _group_allowed(ctx, AclOperation.DESCRIBE, g.group_id):
            groups.append(G(group_id=g.group_id, topics=[], error_code=_GROUP_DENIED))
            continue
        # v9+: a member of a KIP-848 group fetches with its current member epoch.
        stale = (ctx.broker.consumer_groups.check_offset_fetch(g.group_id or "", g.member_id, g.member_epoch)
                 or ctx.broker.streams_groups.check_offset_fetch(g.group_id or "", g.member_id, g.member_epoch)) \
            if v >= 9 else 0
        if stale:
            groups.append(G(group_id=g.group_id, topics=[], error_code=stale))
            continue
        if ctx.broker.coordinator.loading(g.group_id or ""):
            groups.append(G(group_id=g.group_id, topics=[], error_code=_LOADING))
            continue
        unknown_ids: list = []
        if g.topics is None:
            wanted = None
        elif v >= 10:
            wanted = []
            for t in g.topics:
                info = topics_registry.by_id(t.topic_id)
                if info is None:
                    unknown_ids.append(t)
                else:
                    wanted.append((info.name, list(t.partition_indexes)))
        else:
            wanted = [(t.name, list(t.partition_indexes)) for t in g.topics]
        rows = _fetch_group(ctx, g.group_id or "", wanted, require_stable=request.require_stable)
        topics = []
        for topic, parts in rows:
            rt = T(partitions=[P(partition_index=p, committed_offset=off, committed_leader_epoch=epoch,
                                 metadata=md, error_code=err) for p, off, epoch, md, err in parts])
            if v >= 10:
                info = topics_registry.get(topic)
                if info is None:
                    continue  # offsets of a deleted topic: it has no id to name it by
                rt.topic_id = info.topic_id
            else:
                rt.name = topic
            topics.append(rt)
        for t in unknown_ids:
            topics.append(T(topic_id=t.topic_id, partitions=[
                P(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                  error_code=UnknownTopicIdError.code) for p in t.partition_indexes]))
        groups.append(G(group_id=g.group_id, topics=topics, error_code=ErrorCode.NONE))
    return R(throttle_time_ms=0, groups=groups)


# ---------------------------------------------------------------- admin: describe, list, delete


@handler(DESCRIBE_GROUPS, 0, 6)
def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    R = messages.DescribeGroupsResponse
    G, M = R.DescribedGroup, R.DescribedGroup.DescribedGroupMember
    v = ctx.api_version
    include_ops = v >= 3 and request.include_authorized_operations
    groups = []
    for group_id in request.groups:
        if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
            denied = G(error_code=_GROUP_DENIED, group_id=group_id, group_state="", protocol_type="",
                       protocol_data="", members=[])
            if v >= 6:
                denied.error_message = f"{ctx.principal} may not DESCRIBE group {group_id!r}"
            groups.append(denied)
            continue
        if ctx.broker.coordinator.loading(group_id or ""):
            groups.append(G(error_code=_LOADING, group_id=group_id, group_state="", protocol_type="",
                            protocol_data="", members=[]))
            continue
        if is_streams_group(ctx.broker, group_id or ""):
            # Kafka's describeGroups: a streams group is no classic group; v6+ says so, older
            # versions describe it as Dead without an error.
            dead = G(error_code=ErrorCode.NONE, group_id=group_id, group_state="Dead", protocol_type="",
                     protocol_data="", members=[])
            if v >= 6:
                dead.error_code = GroupIdNotFoundError.code
                dead.error_message = f"Group {group_id} is not a classic group."
            groups.append(dead)
            continue
        desc = ctx.broker.consumer_groups.describe_group(group_id or "") \
            or ctx.broker.coordinator.describe_group(group_id or "")
        if desc is None:
            if v >= 6:  # KIP-1043
                groups.append(G(error_code=GroupIdNotFoundError.code, error_message=f"Group {group_id} not found.",
                                group_id=group_id))
            else:
                # Before v6 Kafka describes a group it doesn't know as Dead, without an error.
                groups.append(G(error_code=ErrorCode.NONE, group_id=group_id, group_state="Dead", protocol_type="",
                                protocol_data=""))
            continue
        members = [M(member_id=m.member_id, group_instance_id=m.group_instance_id if v >= 4 else None,
                     client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                     member_assignment=m.assignment) for m in desc.members]
        group = G(error_code=ErrorCode.NONE, group_id=desc.group_id, group_state=desc.state, protocol_type=desc.protocol_type,
                  protocol_data=desc.protocol_data, members=members)
        if include_ops:
            group.authorized_operations = sum(1 << op for op in (AclOperation.READ, AclOperation.DELETE,
                                                                 AclOperation.DESCRIBE)
                                              if _group_allowed(ctx, op, group_id))
        groups.append(group)
    return R(throttle_time_ms=0, groups=groups)


@handler(LIST_GROUPS, 0, 5)
def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    R = messages.ListGroupsResponse
    v = ctx.api_version
    states = request.states_filter if v >= 4 else []
    types = request.types_filter if v >= 5 else []
    if ctx.broker.coordinator.loading():
        # Kafka lists every coordinator partition: one still loading fails the whole list.
        return R(throttle_time_ms=0, error_code=_LOADING, groups=[])
    groups = []
    everything = ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER)
    consumer_groups, streams_groups = ctx.broker.consumer_groups, ctx.broker.streams_groups
    listings = [(listing, GROUP_TYPE) for listing in ctx.broker.coordinator.list_groups(states, types)
                if not consumer_groups.has_group(listing.group_id) and not streams_groups.has_group(listing.group_id)]
    listings += [(listing, consumer_groups.GROUP_TYPE) for listing in consumer_groups.list_groups(states, types)]
    listings += [(listing, streams_groups.GROUP_TYPE) for listing in streams_groups.list_groups(states, types)]
    listings += [(listing, "share") for listing in share_of(ctx.broker).list_groups(states, types)]
    for listing, group_type in sorted(listings, key=lambda x: x[0].group_id):
        if not everything and not _group_allowed(ctx, AclOperation.DESCRIBE, listing.group_id):
            continue
        g = R.ListedGroup(group_id=listing.group_id, protocol_type=listing.protocol_type)
        if v >= 4:
            g.group_state = listing.state
        if v >= 5:
            g.group_type = group_type
        groups.append(g)
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, groups=groups)


@handler(DELETE_GROUPS, 0, 2)
def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    R = messages.DeleteGroupsResponse
    names = [g or "" for g in request.groups_names]
    denied = {g for g in names if not _group_allowed(ctx, AclOperation.DELETE, g)}
    consumer = {g: ctx.broker.consumer_groups.delete_group(g) for g in names
                if g not in denied and ctx.broker.consumer_groups.has_group(g)}
    share = share_of(ctx.broker)  # KIP-932: an empty share group goes with its share state
    consumer.update({g: share.delete_group(g) for g in names if g not in denied and share.is_share_group(g)})
    streams = ctx.broker.streams_groups  # KIP-1071: an empty streams group goes with its offsets
    consumer.update({g: streams.delete_group(g) for g in names if g not in denied and streams.has_group(g)})
    results = ctx.broker.coordinator.delete_groups(g for g in names if g not in denied and consumer.get(g, 0) == 0)
    for g, code in consumer.items():
        # A deleted consumer group without offsets is unknown to the classic coordinator.
        results[g] = code or (0 if results.get(g) == GroupIdNotFoundError.code else results[g])
    codes = {g: _GROUP_DENIED if g in denied else results[g] for g in names}
    return R(throttle_time_ms=0, results=[R.DeletableGroupResult(group_id=g, error_code=code)
                                          for g, code in codes.items()])


@handler(OFFSET_DELETE, 0, 0)
def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    R = messages.OffsetDeleteResponse
    T, P = R.OffsetDeleteResponseTopic, R.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition
    if not _group_allowed(ctx, AclOperation.DELETE, request.group_id):
        return R(error_code=_GROUP_DENIED, throttle_time_ms=0, topics=[])
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    denied = {t for t, _ in wanted if not _topic_allowed(ctx, AclOperation.READ, t)}
    error, results = ctx.broker.coordinator.delete_offsets(request.group_id or "",
                                                           [w for w in wanted if w[0] not in denied])
    results = {**results, **{w: TopicAuthorizationFailedError.code for w in wanted if w[0] in denied}}
    if error:
        return R(error_code=error, throttle_time_ms=0, topics=[])
    topics: dict[str, list] = {}
    for topic, partition in wanted:
        topics.setdefault(topic, []).append(P(partition_index=partition, error_code=results[(topic, partition)]))
    return R(error_code=ErrorCode.NONE, throttle_time_ms=0, topics=[T(name=name, partitions=parts) for name, parts in topics.items()])
