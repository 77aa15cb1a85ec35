"""Readers of the group apis: committing and fetching offsets, finding the coordinator, joining,
syncing, heartbeats, leaving, describing and deleting groups.  (See ``readers`` for what a reader does.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kwire.protocol import ProtocolError

from ..exchange import Exchange, PartitionInfo
from .partitions import _set_partition

if TYPE_CHECKING:
    from .flow import KafkaFlow


def _offset_commit_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.group = req.group_id
    if version >= 1:
        ex.member_id = req.member_id
        ex.generation = req.generation_id_or_member_epoch
    if req.group_instance_id:
        ex.details["group_instance_id"] = req.group_instance_id
    topic_name = flow._topic_name
    for t in req.topics:
        name = t.name or topic_name(t.topic_id)
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(name, p.partition_index, 0, p.committed_offset))


def _commit_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    topic_name = flow._topic_name
    for t in resp.topics:
        name = t.name or topic_name(getattr(t, "topic_id", None))
        for p in t.partitions:
            index = _set_partition(ex, index, name, p.partition_index, error_code=p.error_code)


def _txn_offset_commit_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.group = req.group_id
    d = ex.details
    d["transactional_id"] = req.transactional_id
    d["producer_id"] = req.producer_id
    d["producer_epoch"] = req.producer_epoch
    if version >= 3:
        ex.member_id = req.member_id
        ex.generation = req.generation_id
    for t in req.topics:
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(t.name, p.partition_index, 0, p.committed_offset))


def _offset_fetch_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    topic_name = flow._topic_name
    if version < 8:
        ex.group = req.group_id
        topics = [(t.name, t.partition_indexes) for t in req.topics or ()]
    else:
        groups = req.groups
        if not groups:
            return
        first = groups[0]
        ex.group = first.group_id
        if version >= 9 and first.member_id:
            ex.member_id = first.member_id
        ex.details["groups"] = [g.group_id for g in groups]
        topics = [(t.name or topic_name(t.topic_id), t.partition_indexes) for t in first.topics or ()]
    for name, indexes in topics:
        for i in indexes:
            ex.partitions.append(PartitionInfo(name, i))


def _offset_fetch_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    if version < 8:
        topics = resp.topics
    else:
        group = next((g for g in resp.groups if g.group_id == ex.group), None)
        topics = group.topics if group is not None else ()
    index = None
    topic_name = flow._topic_name
    for t in topics:
        name = t.name or topic_name(getattr(t, "topic_id", None))
        for p in t.partitions:
            index = _set_partition(ex, index, name, p.partition_index, error_code=p.error_code,
                                   offset=p.committed_offset)


def _find_coordinator_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    keys = list(req.coordinator_keys) if version >= 4 else [req.key]
    if not keys:
        return
    if req.key_type == 0:  # 0: a consumer group, 1: a transactional id
        ex.group = keys[0]
    else:
        ex.details["key_type"] = req.key_type
        ex.details["key"] = keys[0]
    if len(keys) > 1:
        ex.details["coordinator_keys"] = keys


def _find_coordinator_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    if version < 4:
        ex.details["coordinator"] = resp.node_id
    elif resp.coordinators:
        ex.details["coordinator"] = resp.coordinators[0].node_id


def _join_group_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.group = req.group_id
    ex.member_id = req.member_id or None
    d = ex.details
    # v0 has no rebalance timeout: the broker then waits up to the session timeout for members.
    d["expected_wait_ms"] = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
    d["session_timeout_ms"] = req.session_timeout_ms
    if req.group_instance_id:
        d["group_instance_id"] = req.group_instance_id
    d["protocols"] = [p.name for p in req.protocols]


def _join_group_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    ex.generation = resp.generation_id
    if not ex.member_id and resp.member_id:
        ex.member_id = resp.member_id
    d = ex.details
    d["protocol_name"] = resp.protocol_name
    d["leader"] = resp.leader
    if resp.members:
        d["members"] = len(resp.members)


def _member_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    """Heartbeat and SyncGroup: the group, generation and member the request names."""
    ex.group = req.group_id
    ex.generation = req.generation_id
    ex.member_id = req.member_id
    if req.group_instance_id:
        ex.details["group_instance_id"] = req.group_instance_id


def _sync_group_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    if resp.protocol_name:
        ex.details["protocol_name"] = resp.protocol_name
    if resp.error_code or not resp.assignment or (resp.protocol_type and resp.protocol_type != "consumer"):
        return
    from kwire.protocol.consumer_protocol import decode_assignment  # the consumer protocol; loaded when needed

    try:
        assignment = decode_assignment(resp.assignment)
    except ProtocolError:  # not the consumer protocol (Connect, streams with custom data...): leave it out
        return
    ex.details["assignment"] = [(tp.topic, tp.partition) for tp in assignment.partitions]


def _leave_group_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.group = req.group_id
    if version < 3:
        ex.member_id = req.member_id
    elif req.members:
        ex.member_id = req.members[0].member_id
        ex.details["members"] = [m.member_id for m in req.members]


def _describe_groups_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    groups = req.groups
    if groups:
        ex.group = groups[0]
        if len(groups) > 1:
            ex.details["groups"] = list(groups)


def _delete_groups_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    groups = req.groups_names
    if groups:
        ex.group = groups[0]
        if len(groups) > 1:
            ex.details["groups"] = list(groups)
