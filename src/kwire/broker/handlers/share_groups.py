"""KIP-932 share groups: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge and
the share-group offsets APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets).

The state lives in ``broker.share`` (kwire.broker.share.manager).  Versions are Kafka 4.3's:
ShareGroupHeartbeat and ShareGroupDescribe v1, ShareFetch and ShareAcknowledge v1-2 (v0 was
Kafka 4.0's early access, removed in 4.1), the offsets APIs v0 and DescribeShareGroupOffsets v1
(its lag, KIP-1226).

ShareFetch follows Kafka's SharePartitionManager: the share session epoch is checked first (an
error there answers the whole request), then the acknowledgements are applied (their errors go in
each partition's AcknowledgeErrorCode), then records are acquired from the session's partitions;
with none to hand out it waits, like Fetch, for an append to one of them, a release, or an
acquisition lock running out, up to MaxWaitMs.  The final epoch (-1) only acknowledges and closes
the session, releasing what the member still holds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid

from kwire.protocol import messages
from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    ErrorCode,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidShareSessionEpochError,
    KafkaError,
    KafkaStorageError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..share import ShareManager
from ..share.groups import ASSIGNOR_NAME
from ..share.sessions import FINAL_EPOCH, INITIAL_EPOCH
from .common import error_of
from .fetch import LEADER_EPOCH
from .registry import handler

HB = messages.ShareGroupHeartbeatResponse
DESC = messages.ShareGroupDescribeResponse
SF = messages.ShareFetchResponse
SA = messages.ShareAcknowledgeResponse
RENEW_VERSION = 2  # RENEW acknowledgements (KIP-1222)
RECORD_LIMIT = 1  # ShareFetch v2 ShareAcquireMode (KIP-1206): at most MaxRecords, batches split
_ZERO_UUID = uuid.UUID(int=0)  # an unknown topic's id in the offsets responses


def share_of(broker) -> ShareManager:
    """The broker's share groups (created on first use)."""
    mgr = getattr(broker, "share", None)
    if mgr is None:
        mgr = broker.share = ShareManager(broker)
    return mgr


def _loading(ctx, group_id: str) -> bool:
    """The group's ``__consumer_offsets`` partition still loads after a restart: Kafka answers
    COORDINATOR_LOAD_IN_PROGRESS meanwhile (clients retry)."""
    loading = getattr(getattr(ctx.broker, "coordinator", None), "loading", None)
    return bool(loading is not None and loading(group_id))


def answer_durably(ctx, mgr: ShareManager, resp, on_failure):
    """``resp``, or with fsync "always" an awaitable of it once the share state written for the
    request is on disk (a group commit off the event loop, as Produce's acks=all).  If the fsync
    fails, ``on_failure(resp, exc)`` says so in the answer: the state may not be durable."""
    logs = mgr.persister.written_logs()
    if not logs or getattr(ctx.broker.config, "fsync", "never") != "always":
        return resp
    synced = ctx.broker.durability.request(logs)

    async def when_synced():
        try:
            await (asyncio.wrap_future(synced) if isinstance(synced, concurrent.futures.Future) else synced)
        except OSError as exc:
            on_failure(resp, KafkaStorageError(f"the share-group state may not be on disk: {exc}"))
        return resp
    return when_synced()


def _whole_failed(resp, exc: KafkaError) -> None:
    resp.error_code, resp.error_message = exc.code, exc.message


# -- ShareGroupHeartbeat ------------------------------------------------------------------------------
@handler(messages.ShareGroupHeartbeatRequest.API_KEY, 1)
def handle_share_group_heartbeat(ctx, request):
    mgr = share_of(ctx.broker)
    resp = HB(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, member_id=request.member_id,
              member_epoch=request.member_epoch, heartbeat_interval_ms=0, assignment=None)
    try:
        if not request.group_id:
            raise InvalidGroupIdError("GroupId can't be empty.")
        if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
            raise GroupAuthorizationFailedError(f"not authorized to read group {request.group_id}")
        if _loading(ctx, request.group_id):
            raise CoordinatorLoadInProgressError(f"the coordinator of group {request.group_id} is loading")
        member, send = mgr.heartbeat(request.group_id, request.member_id, request.member_epoch,
                                     request.subscribed_topic_names, request.rack_id,
                                     client_id=ctx.client_id or "", client_host="/" + ctx.client_host.rsplit(":", 1)[0])
        mgr.persist(request.group_id)
        resp.heartbeat_interval_ms = mgr.config(request.group_id).share_heartbeat_interval_ms
        if member is None:
            resp.member_epoch = FINAL_EPOCH
            return resp
        resp.member_epoch = member.member_epoch
        if send:
            tps = []
            for topic, parts in sorted(member.assignment.items()):
                tid = mgr.topic_id(topic)
                if tid is not None:
                    tps.append(HB.Assignment.TopicPartitions(topic_id=tid, partitions=list(parts)))
            resp.assignment = HB.Assignment(topic_partitions=tps)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the response's error
        resp.error_code, resp.error_message = error_of(exc)
        resp.member_id, resp.member_epoch = None, -1
    return answer_durably(ctx, mgr, resp, _whole_failed)


# -- ShareGroupDescribe -----------------------------------------------------------------------------
@handler(messages.ShareGroupDescribeRequest.API_KEY, 1)
def handle_share_group_describe(ctx, request):
    mgr = share_of(ctx.broker)
    mgr.expire()
    out = []
    for gid in request.group_ids:
        g = DESC.DescribedGroup(error_code=ErrorCode.NONE, error_message=None, group_id=gid, group_state="Dead", group_epoch=-1,
                                assignment_epoch=-1, assignor_name="", members=[],
                                authorized_operations=-(2**31))
        group = mgr.groups.group(gid)
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            g.error_code, g.error_message = GroupAuthorizationFailedError.code, "Group authorization failed."
        elif _loading(ctx, gid):
            g.error_code, g.error_message = CoordinatorLoadInProgressError.code, "The coordinator is loading."
        elif group is None:
            g.error_code, g.error_message = GroupIdNotFoundError.code, f"Group {gid} not found."
        else:
            g.group_state, g.group_epoch, g.assignment_epoch = group.state, group.group_epoch, group.assignment_epoch
            g.assignor_name = ASSIGNOR_NAME
            for m in group.members.values():
                tps = [DESC.DescribedGroup.Member.Assignment.TopicPartitions(
                    topic_id=mgr.topic_id(t), topic_name=t, partitions=list(ps))
                    for t, ps in sorted(m.assignment.items()) if mgr.topic_id(t) is not None]
                g.members.append(DESC.DescribedGroup.Member(
                    member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                    client_host=m.client_host, subscribed_topic_names=list(m.subscribed),
                    assignment=DESC.DescribedGroup.Member.Assignment(topic_partitions=tps)))
        out.append(g)
    return DESC(throttle_time_ms=0, groups=out)


# -- ShareFetch / ShareAcknowledge ------------------------------------------------------------------
def _leader(ctx, R):
    return R.LeaderIdAndEpoch(leader_id=ctx.broker.config.node_id, leader_epoch=LEADER_EPOCH)


def _topic_name(ctx, topic_id) -> str:
    info = ctx.broker.topics.by_id(topic_id)
    if info is None or info.internal:
        raise UnknownTopicIdError(f"unknown topic id {topic_id}")
    if not ctx.allowed(AclOperation.READ, ResourceType.TOPIC, info.name):
        raise TopicAuthorizationFailedError(f"not authorized to read topic {info.name}")
    return info.name


def _open_or_continue(mgr: ShareManager, ctx, request, *, acknowledging: bool):
    """The request's share session (opened, continued or to be closed), or the KafkaError that
    answers the whole request."""
    if not request.group_id:
        raise InvalidGroupIdError("GroupId can't be empty.")
    if not request.member_id:
        raise InvalidRequestError("MemberId can't be empty.")
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        raise GroupAuthorizationFailedError(f"not authorized to read group {request.group_id}")
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        if acknowledging:
            # A new session has nothing acquired yet; Kafka refuses acknowledgements that open one.
            raise InvalidShareSessionEpochError("acknowledgements can't open a share session (epoch 0)")
        session, _ = mgr.sessions.open(request.group_id, request.member_id, ctx.connection_id)
        return session
    session = mgr.sessions.check(request.group_id, request.member_id, epoch)
    if epoch != FINAL_EPOCH:
        mgr.sessions.advance(session)
    return session


@handler(messages.ShareFetchRequest.API_KEY, 1)
async def handle_share_fetch(ctx, request):
    mgr = share_of(ctx.broker)
    v = ctx.api_version
    mgr.expire()
    resp = SF(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, acquisition_lock_timeout_ms=0, responses=[],
              node_endpoints=[])
    has_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    try:
        session = _open_or_continue(mgr, ctx, request, acknowledging=has_acks and request.share_session_epoch == 0)
    except Exception as exc:  # noqa: BLE001 - the whole request's answer
        resp.error_code, resp.error_message = error_of(exc)
        return resp
    group, member = request.group_id, request.member_id
    cfg = mgr.config(group)
    resp.acquisition_lock_timeout_ms = cfg.share_record_lock_duration_ms
    answers: dict[tuple, SF.ShareFetchableTopicResponse.PartitionData] = {}
    ids: dict[str, object] = {}

    def answer(topic_id, p: int):
        pd = answers.get((topic_id, p))
        if pd is None:
            pd = answers[(topic_id, p)] = SF.ShareFetchableTopicResponse.PartitionData(
                partition_index=p, error_code=ErrorCode.NONE, error_message=None, acknowledge_error_code=ErrorCode.NONE,
                acknowledge_error_message=None, current_leader=_leader(ctx, SF.ShareFetchableTopicResponse.PartitionData),
                # Empty, not null: Kafka sends MemoryRecords.EMPTY, and librdkafka refuses a null here.
                records=b"", acquired_records=[])
        return pd

    # The session's partitions: forgotten ones leave (the member's records there are released, as
    # the partition moved to other members), the request's join; acknowledgements apply.
    for ft in request.forgotten_topics_data:
        info = ctx.broker.topics.by_id(ft.topic_id)
        if info is not None:
            for p in ft.partitions:
                session.partitions.pop((info.name, p), None)
                mgr.release_member(group, member, (info.name, p))
    for ft in request.topics:
        try:
            name = _topic_name(ctx, ft.topic_id)
        except KafkaError as exc:
            for p in ft.partitions:
                pd = answer(ft.topic_id, p.partition_index)
                pd.error_code, pd.error_message = exc.code, exc.message
            continue
        ids[name] = ft.topic_id
        for p in ft.partitions:
            if request.share_session_epoch != FINAL_EPOCH:
                session.partitions[(name, p.partition_index)] = None
            if p.acknowledgement_batches:
                pd = answer(ft.topic_id, p.partition_index)
                try:
                    mgr.acknowledge(group, member, name, p.partition_index, p.acknowledgement_batches,
                                    renew_allowed=v >= RENEW_VERSION and cfg.share_renew_acknowledge_enable)
                except Exception as exc:  # noqa: BLE001 - this partition's acknowledge error
                    pd.acknowledge_error_code, pd.acknowledge_error_message = error_of(exc)
    if request.share_session_epoch == FINAL_EPOCH:
        mgr.end_session(group, member)
        mgr.persist(group)
        resp.responses = _group_by_topic(answers, SF.ShareFetchableTopicResponse)
        return await _durable(ctx, mgr, resp)

    committed = cfg.share_read_committed
    max_records = request.max_records if request.max_records > 0 else 500
    keys = list(session.partitions)
    strict = v >= 2 and request.share_acquire_mode == RECORD_LIMIT
    got = _acquire(ctx, mgr, group, member, keys, max_records, request.max_bytes, committed, answer, ids, strict)
    mgr.persist(group)
    if not got and request.max_wait_ms > 0 and keys:
        got = await _wait_and_acquire(ctx, mgr, group, member, keys, max_records, request, committed, answer, ids,
                                      strict)
    resp.responses = _group_by_topic(answers, SF.ShareFetchableTopicResponse)
    return await _durable(ctx, mgr, resp)


async def _durable(ctx, mgr, resp):
    out = answer_durably(ctx, mgr, resp, _whole_failed)
    return await out if out is not resp else resp


def _acquire(ctx, mgr, group, member, keys, max_records, max_bytes, committed, answer, ids, strict=False) -> int:
    """Acquire records from the session's partitions in turn, until max_records; how many."""
    total = 0
    budget = max_bytes if max_bytes > 0 else 2**31 - 1
    for name, p in keys:
        if total >= max_records or budget <= 0:
            break
        tid = ids.get(name) or mgr.topic_id(name)
        if tid is None:
            continue
        try:
            fetched = mgr.fetch(group, member, name, p, max_records - total, budget, committed, strict=strict)
        except Exception as exc:  # noqa: BLE001 - this partition's fetch error
            pd = answer(tid, p)
            pd.error_code, pd.error_message = error_of(exc)
            continue
        if fetched.acquired:
            pd = answer(tid, p)
            pd.records = fetched.records
            pd.acquired_records = [SF.ShareFetchableTopicResponse.PartitionData.AcquiredRecords(
                first_offset=a.first_offset, last_offset=a.last_offset, delivery_count=a.delivery_count)
                for a in fetched.acquired]
            total += sum(a.last_offset - a.first_offset + 1 for a in fetched.acquired)
            budget -= len(fetched.records)
    return total


async def _wait_and_acquire(ctx, mgr, group, member, keys, max_records, request, committed, answer, ids,
                            strict) -> int:
    """Long poll: wait for an append to (or a release in) one of ``keys``, or for the group's next
    acquisition lock to run out, then try again, until MaxWaitMs."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + request.max_wait_ms / 1000
    waiters = ctx.broker.waiters
    wait_keys = list(dict.fromkeys((name, p) for name, p in keys))
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return 0
        lock = mgr.next_deadline(group)
        if lock is not None:
            remaining = min(remaining, max(lock - mgr.now_ms(), 0) / 1000 + 0.001)
        fut = loop.create_future()
        for key in wait_keys:
            waiters.add(key, fut)
        try:
            await asyncio.wait_for(fut, remaining)
        except asyncio.TimeoutError:
            pass
        finally:
            for key in wait_keys:
                waiters.discard(key, fut)
        session = mgr.sessions.get(group, member)
        if session is None:  # closed meanwhile (the member left)
            return 0
        mgr.expire()
        got = _acquire(ctx, mgr, group, member, list(session.partitions), max_records, request.max_bytes,
                       committed, answer, ids, strict)
        mgr.persist(group)
        if got:
            return got


def _group_by_topic(answers: dict, T) -> list:
    out: dict = {}
    for (tid, _p), pd in answers.items():
        out.setdefault(tid, T(topic_id=tid, partitions=[])).partitions.append(pd)
    return list(out.values())


@handler(messages.ShareAcknowledgeRequest.API_KEY, 1)
def handle_share_acknowledge(ctx, request):
    mgr = share_of(ctx.broker)
    v = ctx.api_version
    mgr.expire()
    resp = SA(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, responses=[], node_endpoints=[])
    if v >= 2:
        resp.acquisition_lock_timeout_ms = 0
    try:
        _open_or_continue(mgr, ctx, request, acknowledging=request.share_session_epoch == INITIAL_EPOCH)
    except Exception as exc:  # noqa: BLE001 - the whole request's answer
        resp.error_code, resp.error_message = error_of(exc)
        return resp
    group, member = request.group_id, request.member_id
    cfg = mgr.config(group)
    if v >= 2:
        resp.acquisition_lock_timeout_ms = cfg.share_record_lock_duration_ms
    answers: dict = {}
    for t in request.topics:
        for p in t.partitions:
            pd = answers[(t.topic_id, p.partition_index)] = SA.ShareAcknowledgeTopicResponse.PartitionData(
                partition_index=p.partition_index, error_code=ErrorCode.NONE, error_message=None,
                current_leader=_leader(ctx, SA.ShareAcknowledgeTopicResponse.PartitionData))
            try:
                name = _topic_name(ctx, t.topic_id)
                mgr.acknowledge(group, member, name, p.partition_index, p.acknowledgement_batches,
                                renew_allowed=v >= RENEW_VERSION and cfg.share_renew_acknowledge_enable)
            except Exception as exc:  # noqa: BLE001 - this partition's error
                pd.error_code, pd.error_message = error_of(exc)
    if request.share_session_epoch == FINAL_EPOCH:
        mgr.end_session(group, member)
    mgr.persist(group)
    resp.responses = _group_by_topic(answers, SA.ShareAcknowledgeTopicResponse)
    return answer_durably(ctx, mgr, resp, _whole_failed)


# -- share-group offsets --------------------------------------------------------------------------
def _check_group(ctx, mgr: ShareManager, group_id: str, operation: AclOperation) -> None:
    if not group_id:
        raise InvalidGroupIdError("GroupId can't be empty.")
    if not ctx.allowed(operation, ResourceType.GROUP, group_id):
        raise GroupAuthorizationFailedError("Group authorization failed.")
    if mgr.group_type_taken(group_id):
        raise GroupIdNotFoundError(f"Group {group_id} is not a share group.")


@handler(messages.DescribeShareGroupOffsetsRequest.API_KEY, 0)
def handle_describe_share_group_offsets(ctx, request):
    """The share-partition start offsets (Kafka's GroupCoordinatorService.describeShareGroupOffsets):
    all the group's initialized share partitions for null Topics, else those asked for, -1 for one
    not initialized.  v1 (KIP-1226) adds each one's lag, -1 where there is none."""
    R = messages.DescribeShareGroupOffsetsResponse
    G, T, P = R.DescribeShareGroupOffsetsResponseGroup, R.DescribeShareGroupOffsetsResponseGroup.\
        DescribeShareGroupOffsetsResponseTopic, R.DescribeShareGroupOffsetsResponseGroup.\
        DescribeShareGroupOffsetsResponseTopic.DescribeShareGroupOffsetsResponsePartition
    mgr = share_of(ctx.broker)
    groups = []
    for rg in request.groups:
        g = G(group_id=rg.group_id, topics=[], error_code=ErrorCode.NONE, error_message=None)
        groups.append(g)
        try:
            _check_group(ctx, mgr, rg.group_id, AclOperation.DESCRIBE)
            if _loading(ctx, rg.group_id):
                raise CoordinatorLoadInProgressError("The coordinator is loading.")
            if not mgr.is_share_group(rg.group_id):
                raise GroupIdNotFoundError(f"Group {rg.group_id} not found.")
        except KafkaError as exc:
            g.error_code, g.error_message = exc.code, exc.message
            continue
        offsets = mgr.start_offsets(rg.group_id)
        lags = mgr.lags(rg.group_id)
        if rg.topics is None:
            wanted: dict[str, list[int]] = {}
            for (t, p) in sorted(offsets):
                wanted.setdefault(t, []).append(p)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in rg.topics}
        for name, parts in wanted.items():
            info = ctx.broker.topics.get(name)
            t = T(topic_name=name, topic_id=info.topic_id if info else _ZERO_UUID, partitions=[])
            g.topics.append(t)
            for p in parts:
                pr = P(partition_index=p, start_offset=-1, leader_epoch=-1, error_code=ErrorCode.NONE, error_message=None)
                pr.lag = -1
                if info is None or not ctx.broker.topics.partition_exists(name, p):
                    pr.error_code, pr.error_message = UnknownTopicOrPartitionError.code, \
                        "This server does not host this topic-partition."
                elif not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    pr.error_code, pr.error_message = TopicAuthorizationFailedError.code, "Topic authorization failed."
                elif (name, p) in offsets:
                    pr.start_offset, pr.leader_epoch = offsets[(name, p)], LEADER_EPOCH
                    pr.lag = lags.get((name, p), -1)
                t.partitions.append(pr)
    return R(throttle_time_ms=0, groups=groups)


@handler(messages.AlterShareGroupOffsetsRequest.API_KEY, 0)
def handle_alter_share_group_offsets(ctx, request):
    """Set share-partition start offsets of an empty share group (NON_EMPTY_GROUP otherwise)."""
    R = messages.AlterShareGroupOffsetsResponse
    T, P = R.AlterShareGroupOffsetsResponseTopic, R.AlterShareGroupOffsetsResponseTopic.\
        AlterShareGroupOffsetsResponsePartition
    mgr = share_of(ctx.broker)
    resp = R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, responses=[])
    try:
        _check_group(ctx, mgr, request.group_id, AclOperation.READ)
        mgr.require_empty(request.group_id)
    except Exception as exc:  # noqa: BLE001 - the whole request's answer
        resp.error_code, resp.error_message = error_of(exc)
        return resp
    for rt in request.topics:
        info = ctx.broker.topics.get(rt.topic_name)
        t = T(topic_name=rt.topic_name, topic_id=info.topic_id if info else _ZERO_UUID, partitions=[])
        resp.responses.append(t)
        for rp in rt.partitions:
            pr = P(partition_index=rp.partition_index, error_code=ErrorCode.NONE, error_message=None)
            try:
                if info is None or info.internal or not ctx.broker.topics.partition_exists(rt.topic_name,
                                                                                         rp.partition_index):
                    raise UnknownTopicOrPartitionError(f"{rt.topic_name}-{rp.partition_index} does not exist")
                if not ctx.allowed(AclOperation.READ, ResourceType.TOPIC, rt.topic_name):
                    raise TopicAuthorizationFailedError("Topic authorization failed.")
                if rp.start_offset < 0:
                    raise InvalidRequestError(f"start offset {rp.start_offset} is negative")
                mgr.alter_start_offset(request.group_id, rt.topic_name, rp.partition_index, rp.start_offset)
            except Exception as exc:  # noqa: BLE001 - this partition's error
                pr.error_code, pr.error_message = error_of(exc)
            t.partitions.append(pr)
    return answer_durably(ctx, mgr, resp, _whole_failed)


@handler(messages.DeleteShareGroupOffsetsRequest.API_KEY, 0)
def handle_delete_share_group_offsets(ctx, request):
    """Forget the share state of whole topics of an empty share group."""
    R = messages.DeleteShareGroupOffsetsResponse
    T = R.DeleteShareGroupOffsetsResponseTopic
    mgr = share_of(ctx.broker)
    resp = R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, responses=[])
    try:
        _check_group(ctx, mgr, request.group_id, AclOperation.DELETE)
        if not mgr.is_share_group(request.group_id):
            raise GroupIdNotFoundError(f"Group {request.group_id} not found.")
        mgr.require_empty(request.group_id)
    except Exception as exc:  # noqa: BLE001 - the whole request's answer
        resp.error_code, resp.error_message = error_of(exc)
        return resp
    for rt in request.topics:
        info = ctx.broker.topics.get(rt.topic_name)
        t = T(topic_name=rt.topic_name, topic_id=info.topic_id if info else _ZERO_UUID, error_code=ErrorCode.NONE,
              error_message=None)
        resp.responses.append(t)
        try:
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {rt.topic_name} does not exist")
            if not ctx.allowed(AclOperation.READ, ResourceType.TOPIC, rt.topic_name):
                raise TopicAuthorizationFailedError("Topic authorization failed.")
            if not mgr.delete_topic_state(request.group_id, rt.topic_name):
                raise UnknownTopicOrPartitionError(f"group {request.group_id} has no state for topic {rt.topic_name}")
        except Exception as exc:  # noqa: BLE001 - this topic's error
            t.error_code, t.error_message = error_of(exc)
    return answer_durably(ctx, mgr, resp, _whole_failed)
