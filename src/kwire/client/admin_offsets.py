"""``Admin``'s calls that move offsets and members rather than read them (kept apart from admin.py,
as admin_cluster.py is): DeleteRecords (a partition's low watermark), OffsetCommit from outside
the group (Kafka's Admin.alterConsumerGroupOffsets), OffsetDelete, LeaveGroup of static members
by the admin (KIP-345's removeMembersFromConsumerGroup), and ListConfigResources (KIP-1142).

Each function takes the ``AsyncAdmin`` and uses its batch plumbing; ``AsyncAdmin`` has a thin
method for each.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from kwire.protocol import messages
from kwire.protocol.configs import ConfigResourceType
from kwire.protocol.errors import ErrorCode
from kwire.protocol.messages import Request, Response

from .types import TopicPartition

if TYPE_CHECKING:
    from .admin import AsyncAdmin

ResponseT = TypeVar("ResponseT", bound=Response)  # the answer to the request a call builds
T = TypeVar("T")  # what a call reads from that answer

__all__ = ["alter_consumer_group_offsets", "delete_consumer_group_offsets", "delete_records",
           "list_config_resources", "remove_group_members"]

DELETE_RECORDS = messages.DeleteRecordsRequest.API_KEY
OFFSET_COMMIT = messages.OffsetCommitRequest.API_KEY
OFFSET_DELETE = messages.OffsetDeleteRequest.API_KEY
LEAVE_GROUP = messages.LeaveGroupRequest.API_KEY
LIST_CONFIG_RESOURCES = messages.ListConfigResourcesRequest.API_KEY
# OffsetCommit v10 names topics by id; an admin commit names them, as Kafka's Admin does up to v9.
_OFFSET_COMMIT_BY_NAME = 9


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
    out: dict[str, list[TopicPartition]] = {}
    for tp in sorted(tps):
        out.setdefault(tp.topic, []).append(tp)
    return out


async def delete_records(admin: AsyncAdmin, before: Mapping[TopicPartition | tuple[str, int], int], *,
                         timeout: float | None) -> dict[TopicPartition, int]:
    """Delete each partition's records before the offset (-1: all, up to the high watermark), on
    its leader; the new low watermark by partition."""
    from .admin import _Batch, _broker_error, _check_partition_known, _partition

    wanted = {TopicPartition(*tp): int(offset) for tp, offset in before.items()}
    batch: _Batch[TopicPartition, int] = _Batch(sorted(wanted), _partition)
    wait_ms = int(admin._timeout(timeout) * 1000)
    R = messages.DeleteRecordsRequest

    async def send(node: int | None, tps: list[TopicPartition]) -> None:
        request = R(timeout_ms=wait_ms, topics=[R.DeleteRecordsTopic(name=topic, partitions=[
            R.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=tp.partition, offset=wanted[tp])
            for tp in group]) for topic, group in _by_topic(tps).items()])
        response = await admin._send(lambda v: request, node, api_key=DELETE_RECORDS)
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    batch.fail(tp, _broker_error(p.error_code, _partition(tp)),
                               final=p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    batch.succeed(tp, p.low_watermark)

    async def round_(tps: list[TopicPartition]) -> None:
        metadata = await admin._cluster.refresh_metadata({tp.topic for tp in tps})
        by_node: dict[int | None, list[TopicPartition]] = {}
        for tp in tps:
            _check_partition_known(batch, metadata, tp)
            if tp in batch.pending:
                by_node.setdefault(metadata.leader(*tp), []).append(tp)
        await admin._per_node(batch, by_node, send)

    return await admin._run(batch, round_, what="DeleteRecords", timeout=timeout, refresh_metadata=True)


async def _group_call(admin: AsyncAdmin, group_id: str, build: Callable[[int], Request[ResponseT]], api_key: int,
                      what: str, read: Callable[[ResponseT], T], *, timeout: float | None, high: int | None = None
                      ) -> T:
    """One request to ``group_id``'s coordinator, retried while the coordinator moves or loads;
    ``read(response)`` returns the result or raises."""
    from .admin import _Batch, _group

    batch: _Batch[str, T] = _Batch([group_id], _group)

    async def send(node: int | None, groups: list[str]) -> None:
        response = await admin._send(build, node, api_key=api_key, high=high)
        code = getattr(response, "error_code", 0)
        if code:
            admin._group_error(batch, group_id, code)
        else:
            batch.succeed(group_id, read(response))

    async def round_(groups: list[str]) -> None:
        await admin._per_node(batch, await admin._coordinators(batch, groups), send)

    return (await admin._run(batch, round_, what=what, timeout=timeout))[group_id]


def _partition_errors(results: list[messages.OffsetCommitResponse.OffsetCommitResponseTopic]
                      | list[messages.OffsetDeleteResponse.OffsetDeleteResponseTopic]) -> dict[TopicPartition, int]:
    return {TopicPartition(t.name, p.partition_index): p.error_code for t in results for p in t.partitions}


def _raise_first(errors: Mapping[TopicPartition, int]) -> None:
    from .admin import _broker_error, _partition

    failed = [(tp, code) for tp, code in sorted(errors.items()) if code]
    if failed:
        tp, code = failed[0]
        more = f" (and {len(failed) - 1} more partitions)" if len(failed) > 1 else ""
        raise _broker_error(code, _partition(tp) + more)


async def alter_consumer_group_offsets(admin: AsyncAdmin, group_id: str,
                                       offsets: Mapping[TopicPartition | tuple[str, int], int], *,
                                       metadata: str = "", timeout: float | None) -> None:
    """Commit ``offsets`` for a group from outside it (generation -1, no member: Kafka accepts it
    while the group has no members; UnknownMemberIdError while it has)."""
    wanted = {TopicPartition(*tp): int(o) for tp, o in offsets.items()}
    R = messages.OffsetCommitRequest

    def build(version: int) -> messages.OffsetCommitRequest:
        return R(group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                 retention_time_ms=-1, topics=[R.OffsetCommitRequestTopic(name=topic, partitions=[
                     R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                         partition_index=tp.partition, committed_offset=wanted[tp], committed_leader_epoch=-1,
                         commit_timestamp=-1, committed_metadata=metadata) for tp in tps])
                     for topic, tps in _by_topic(wanted).items()])

    errors = await _group_call(admin, group_id, build, OFFSET_COMMIT, "OffsetCommit",
                               lambda r: _partition_errors(r.topics), timeout=timeout, high=_OFFSET_COMMIT_BY_NAME)
    _raise_first(errors)


async def delete_consumer_group_offsets(admin: AsyncAdmin, group_id: str,
                                        partitions: Iterable[TopicPartition | tuple[str, int]], *,
                                        timeout: float | None) -> None:
    """Remove the group's committed offsets of these partitions (OffsetDelete); Kafka refuses
    a partition of a topic the group's members are subscribed to (GroupSubscribedToTopicError)."""
    tps = sorted({TopicPartition(*tp) for tp in partitions})
    R = messages.OffsetDeleteRequest
    request = R(group_id=group_id, topics=[R.OffsetDeleteRequestTopic(name=topic, partitions=[
        R.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=tp.partition) for tp in group])
        for topic, group in _by_topic(tps).items()])
    errors = await _group_call(admin, group_id, lambda v: request, OFFSET_DELETE, "OffsetDelete",
                               lambda r: _partition_errors(r.topics), timeout=timeout)
    _raise_first(errors)


async def remove_group_members(admin: AsyncAdmin, group_id: str, group_instance_ids: Collection[str], *,
                               reason: str | None = None, timeout: float | None) -> None:
    """Remove static members (by group.instance.id) from a classic group (LeaveGroup v3+, KIP-345):
    what a static member that went away for good does not do itself."""
    from .admin import _broker_error

    R = messages.LeaveGroupRequest
    ids = list(dict.fromkeys(group_instance_ids))

    def build(version: int) -> messages.LeaveGroupRequest:
        return R(group_id=group_id, members=[R.MemberIdentity(member_id="", group_instance_id=i, reason=reason)
                                             for i in ids])

    def read(response: messages.LeaveGroupResponse) -> None:
        for m in response.members:
            if m.error_code:
                raise _broker_error(m.error_code, f"member {m.group_instance_id!r} of group {group_id!r}")

    conn = await admin._cluster.any_connection()
    conn.version_for(LEAVE_GROUP, 3)  # UnsupportedApiError before Kafka 2.4: no removal by instance id
    await _group_call(admin, group_id, build, LEAVE_GROUP, "LeaveGroup", read, timeout=timeout)


async def list_config_resources(admin: AsyncAdmin, types: Iterable[ConfigResourceType | int] = (), *,
                                timeout: float | None) -> list[tuple[ConfigResourceType, str]]:
    """The resources that have configs (ListConfigResources v1, KIP-1142): every topic, the
    brokers, the groups with configs set, client-metrics subscriptions..., of ``types`` (default:
    all), sorted by type then name."""
    from .admin import _broker_error
    from .retry import retrying

    wanted = [int(t) for t in types]

    async def attempt() -> list[tuple[ConfigResourceType, str]]:
        R = messages.ListConfigResourcesRequest
        response = await admin._send(lambda v: R(resource_types=wanted), api_key=LIST_CONFIG_RESOURCES, low=1)
        if response.error_code:
            raise _broker_error(response.error_code, "ListConfigResources")
        return sorted((ConfigResourceType(r.resource_type), r.resource_name) for r in response.config_resources)

    return await retrying(attempt, timeout=admin._timeout(timeout), backoff=admin._cluster.retry_backoff,
                          what="ListConfigResources")
