"""Readers of the apis that name topic-partitions: Produce, Fetch, ListOffsets, DeleteRecords,
OffsetForLeaderEpoch; and Metadata, whose topic ids name the topics of later requests.
(See ``readers`` for what a reader does.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..exchange import Exchange, PartitionInfo
from .records import _RecordStats

if TYPE_CHECKING:
    from .flow import KafkaFlow


def _set_partition(ex: Exchange, index: dict | None, topic: str, partition: int, **changes) -> dict:
    """Update (or add) the PartitionInfo of topic/partition; returns the (topic, partition) index."""
    parts = ex.partitions
    if index is None:
        index = {(p.topic, p.partition): i for i, p in enumerate(parts)}
    i = index.get((topic, partition))
    if i is None:
        index[(topic, partition)] = len(parts)
        parts.append(PartitionInfo(topic, partition, **changes))
    else:
        parts[i] = parts[i]._replace(**changes)
    return index


def _produce_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    d = ex.details
    d["acks"] = req.acks
    d["timeout_ms"] = req.timeout_ms
    if req.transactional_id:
        d["transactional_id"] = req.transactional_id
    stats = _RecordStats()
    parts = ex.partitions
    topic_name = flow._topic_name
    for t in req.topic_data:
        name = t.name or topic_name(t.topic_id)
        for p in t.partition_data:
            n, size = stats.add(p.records)
            parts.append(PartitionInfo(name, p.index, 0, -1, n, size))
    stats.store(flow, ex, frame, "request")


def _produce_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    topic_name = flow._topic_name
    for t in resp.responses:
        name = t.name or topic_name(t.topic_id)
        for p in t.partition_responses:
            index = _set_partition(ex, index, name, p.index, error_code=p.error_code, offset=p.base_offset)


def _fetch_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.details["expected_wait_ms"] = req.max_wait_ms
    if req.isolation_level:
        ex.details["isolation_level"] = req.isolation_level
    parts = ex.partitions
    topic_name = flow._topic_name
    for t in req.topics:
        name = t.topic or topic_name(t.topic_id)
        for p in t.partitions:
            parts.append(PartitionInfo(name, p.partition, 0, p.fetch_offset))


def _fetch_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    # The response lists the partitions it has something to say about (with fetch sessions,
    # fewer than the request named): those replace the request's, keeping its fetch offsets.
    asked = {(p.topic, p.partition): p.offset for p in ex.partitions}
    parts = []
    stats = _RecordStats()
    topic_name = flow._topic_name
    for t in resp.responses:
        name = t.topic or topic_name(t.topic_id)
        for p in t.partitions:
            n, size = stats.add(p.records)
            parts.append(PartitionInfo(name, p.partition_index, p.error_code, asked.get((name, p.partition_index), -1),
                                       n, size, p.high_watermark))
    ex.partitions = parts
    stats.store(flow, ex, frame, "response")


def _list_offsets_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    for t in req.topics:
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(t.name, p.partition_index))


def _list_offsets_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    for t in resp.topics:
        for p in t.partitions:
            offset = p.offset if version >= 1 else (p.old_style_offsets[0] if p.old_style_offsets else -1)
            index = _set_partition(ex, index, t.name, p.partition_index, error_code=p.error_code, offset=offset)


def _metadata_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    if version >= 10:  # topic ids: Fetch v13+, Produce v13+ and OffsetCommit v10+ name topics by them
        names = flow._topic_names
        for t in resp.topics:
            if t.name and t.topic_id is not None and t.topic_id.int:
                names[t.topic_id] = t.name


def _delete_records_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.details["timeout_ms"] = req.timeout_ms
    for t in req.topics:
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(t.name, p.partition_index, 0, p.offset))


def _delete_records_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    for t in resp.topics:
        for p in t.partitions:
            index = _set_partition(ex, index, t.name, p.partition_index, error_code=p.error_code,
                                   offset=p.low_watermark)


def _leader_epoch_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    for t in req.topics:
        for p in t.partitions:
            ex.partitions.append(PartitionInfo(t.topic, p.partition))


def _leader_epoch_response(flow: KafkaFlow, ex: Exchange, resp, version: int, aux, frame: int) -> None:
    index = None
    for t in resp.topics:
        for p in t.partitions:
            index = _set_partition(ex, index, t.topic, p.partition, error_code=p.error_code, offset=p.end_offset)
