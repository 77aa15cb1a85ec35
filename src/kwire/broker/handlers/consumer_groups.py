"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: KIP-848 consumer groups.

The handlers translate the wire to ``kwire.broker.coordinator.consumer``; the coordinator holds
the logic.  Versions are Kafka 4.3's that the codec knows: ConsumerGroupHeartbeat 0-1 (v1: the
client generates its member id, KIP-1082, and may subscribe by regular expression),
ConsumerGroupDescribe 0-1 (v1: each member's MemberType, KIP-1099).

As Kafka: a heartbeat needs READ on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on each
topic it names (TOPIC_AUTHORIZATION_FAILED), describing needs DESCRIBE on the group; a request for a group whose ``__consumer_offsets`` partition is still loading
gets COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kwire.protocol import messages
from kwire.protocol.admin import GroupMemberType
from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    ErrorCode,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    KafkaError,
    TopicAuthorizationFailedError,
)

from ..auth.acls import AclOperation, ResourceType
from ..coordinator.consumer import HeartbeatRequest
from ..coordinator.group_types import is_share_group, is_streams_group
from .common import error_of
from .groups import kafka_client_host
from .registry import handler

if TYPE_CHECKING:
    from ..context import RequestContext

CONSUMER_GROUP_HEARTBEAT = messages.ConsumerGroupHeartbeatRequest.API_KEY
CONSUMER_GROUP_DESCRIBE = messages.ConsumerGroupDescribeRequest.API_KEY
NO_AUTHORIZED_OPERATIONS = -(2**31)


def consumer_groups(ctx: RequestContext):
    """The broker's ConsumerGroupCoordinator."""
    return ctx.broker.consumer_groups


def _loading(ctx: RequestContext, group_id: str) -> bool:
    loading = getattr(ctx.broker.coordinator, "loading", None)
    return bool(loading is not None and loading(group_id))


@handler(CONSUMER_GROUP_HEARTBEAT, 0, 1)
def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    R = messages.ConsumerGroupHeartbeatResponse
    group_id = request.group_id or ""

    def failed(code: int, message: str | None) -> Any:
        return R(throttle_time_ms=0, error_code=code, error_message=message, member_id=None, member_epoch=-1,
                 heartbeat_interval_ms=0, assignment=None)

    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, group_id):
        return failed(GroupAuthorizationFailedError.code, None)
    if is_share_group(ctx.broker, group_id) or is_streams_group(ctx.broker, group_id):  # one type per id, as Kafka
        return failed(GroupIdNotFoundError.code, f"Group {group_id} is not a consumer group.")
    if _loading(ctx, group_id):
        return failed(CoordinatorLoadInProgressError.code, None)
    # As Kafka's KafkaApis: every subscribed topic named must be DESCRIBE-able.
    denied = sorted({t for t in request.subscribed_topic_names or () if t is not None
                     and not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, t)})
    if denied:
        return failed(TopicAuthorizationFailedError.code, f"The group has subscribed to topics which are not "
                                                          f"authorized: {', '.join(denied)}.")
    owned = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            owned.setdefault(tp.topic_id, []).extend(tp.partitions)
    req = HeartbeatRequest(
        group_id=group_id, member_id=request.member_id or "", member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
        server_assignor=request.server_assignor, owned=owned,
        client_id=ctx.client_id or "", client_host=kafka_client_host(ctx.client_host),
        api_version=ctx.api_version)
    try:
        result = consumer_groups(ctx).heartbeat(req)
    except Exception as exc:  # noqa: BLE001 - every refusal is an error code, the broker goes on
        code, _ = error_of(exc)
        # Kafka sends the bare message ("MemberId can't be empty.").
        return failed(code, exc.message if isinstance(exc, KafkaError) else None)
    resp = R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, member_id=result.member_id,
             member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=None)
    if result.assignment is not None:
        A = R.Assignment
        resp.assignment = A(topic_partitions=[A.TopicPartitions(topic_id=t, partitions=sorted(ps))
                                              for t, ps in sorted(result.assignment.items(), key=lambda x: str(x[0]))])
    return resp


def _member_type(member) -> int:
    """KIP-1099's MemberType as Kafka fills it: 0 for a member that joined with the classic protocol
    (an upgraded group's JoinGroup members), 1 for a consumer-protocol member.  v0 answers drop it."""
    return GroupMemberType.CLASSIC if member.classic is not None else GroupMemberType.CONSUMER


@handler(CONSUMER_GROUP_DESCRIBE, 0, 1)
def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    R = messages.ConsumerGroupDescribeResponse
    G = R.DescribedGroup
    M = G.Member
    A = M.Assignment
    coordinator = consumer_groups(ctx)
    topics = ctx.broker.topics

    def assignment(parts) -> Any:
        rows = []
        for topic_id, ps in sorted(parts.items(), key=lambda x: str(x[0])):
            info = topics.by_id(topic_id)
            rows.append(A.TopicPartitions(topic_id=topic_id, topic_name=info.name if info else "",
                                          partitions=sorted(ps)))
        return A(topic_partitions=rows)

    groups = []
    for group_id in request.group_ids:
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id or ""):
            groups.append(G(error_code=GroupAuthorizationFailedError.code, error_message=None, group_id=group_id,
                            group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[]))
            continue
        if _loading(ctx, group_id or ""):
            groups.append(G(error_code=CoordinatorLoadInProgressError.code, error_message=None, group_id=group_id,
                            group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[]))
            continue
        group = coordinator.group(group_id or "")
        if group is None:
            # Kafka: a group that does not exist, or is not a consumer group, is GROUP_ID_NOT_FOUND.
            why = (f"Group {group_id} is not a consumer group." if ctx.broker.coordinator.group(group_id or "")
                   is not None or is_streams_group(ctx.broker, group_id or "") else f"Group {group_id} not found.")
            groups.append(G(error_code=GroupIdNotFoundError.code, error_message=why, group_id=group_id,
                            group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[]))
            continue
        members = [M(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                     member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                     subscribed_topic_names=list(m.subscribed_topic_names),
                     subscribed_topic_regex=m.subscribed_topic_regex,
                     assignment=assignment(m.assigned), target_assignment=assignment(group.target.get(m.member_id, {})),
                     member_type=_member_type(m))
                   for m in group]
        described = G(error_code=ErrorCode.NONE, error_message=None, group_id=group.group_id, group_state=group.state.value,
                      group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                      assignor_name=coordinator.assignor_of(group), members=members)
        if request.include_authorized_operations:
            described.authorized_operations = sum(1 << op for op in (AclOperation.READ, AclOperation.DELETE,
                                                                     AclOperation.DESCRIBE)
                                                  if ctx.allowed(op, ResourceType.GROUP, group_id or ""))
        else:
            described.authorized_operations = NO_AUTHORIZED_OPERATIONS
        groups.append(described)
    return R(throttle_time_ms=0, groups=groups)

