"""Fetch: stored batches straight from the segment files, with long polling.

The response's records are ``FileRecords`` (file ranges): the network layer sends them with
sendfile, so the broker never copies or decodes them.  Without enough data (min_bytes) the
request waits, up to max_wait_ms, for an append to one of its partitions.

Fetch sessions (KIP-227) are not kept: every response has session id 0, which tells clients to
send full fetch requests, as Kafka does when its session cache is full.

Transactions: every answer carries the partition's last stable offset (LSO).  A read_committed
fetch (isolation level 1) gets only batches below the LSO, and the aborted transactions (producer
id, first offset) that may hold records of the range it got, from the segments' ``.txnindex``;
the consumer drops their records.  Still no record is decoded here.
"""

from __future__ import annotations

import asyncio
import time

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    FetchSessionIdNotFoundError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..storage.file_records import FileRecords
from .common import error_of
from .registry import handler

LEADER_EPOCH = 0  # one node that never changes leader: every batch carries epoch 0
R = messages.FetchResponse
TopicResponse = R.FetchableTopicResponse
PartitionData = TopicResponse.PartitionData
AbortedTransaction = PartitionData.AbortedTransaction
READ_COMMITTED = 1


def _read_partition(broker, name: str | None, p, budget: int, first: bool, v: int,
                    committed: bool = False) -> tuple[PartitionData, int]:
    """One partition's answer and the bytes of records in it (``committed``: read_committed)."""
    out = PartitionData(partition_index=p.partition, error_code=ErrorCode.NONE, high_watermark=-1, last_stable_offset=-1,
                        log_start_offset=-1, aborted_transactions=[] if v >= 4 else None,
                        preferred_read_replica=-1, records=b"")
    try:
        if name is None:
            raise UnknownTopicIdError("unknown topic id")
        if not broker.topics.partition_exists(name, p.partition):
            raise UnknownTopicOrPartitionError(f"{name}-{p.partition} does not exist")
        if v >= 9 and p.current_leader_epoch >= 0:
            if p.current_leader_epoch > LEADER_EPOCH:
                raise UnknownLeaderEpochError(f"leader epoch {p.current_leader_epoch} is newer than {LEADER_EPOCH}")
            if p.current_leader_epoch < LEADER_EPOCH:  # pragma: no cover - epoch is 0, the smallest
                raise FencedLeaderEpochError(f"leader epoch {p.current_leader_epoch} is fenced")
        log = broker.internal_topics.partition_log(name, p.partition)  # an internal one opens on first read
        out.high_watermark = log.high_watermark
        out.last_stable_offset = lso = log.last_stable_offset
        out.log_start_offset = log.log_start_offset
        limit = min(p.partition_max_bytes, budget)
        if limit <= 0 and not first:
            return out, 0
        slices = log.read(p.fetch_offset, max(limit, 0), min_one_batch=first, max_offset=lso if committed else None)
        if slices:
            records = FileRecords(slices)
            out.records = records
            if committed:
                out.aborted_transactions = [
                    AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                    for t in log.aborted_transactions(p.fetch_offset, slices[-1].next_offset)]
            return out, len(records)
    except OffsetOutOfRangeError as exc:
        out.error_code = exc.code
        try:
            log = broker.logs.get(name, p.partition)
            out.high_watermark, out.last_stable_offset = log.high_watermark, log.last_stable_offset
            out.log_start_offset = log.log_start_offset
        except Exception:  # noqa: BLE001 - deleted meanwhile: the error code says enough
            pass
    except Exception as exc:  # noqa: BLE001 - every failure becomes this partition's error code
        out.error_code = error_of(exc)[0]
    return out, 0


def _build(broker, request, v: int, denied: frozenset[str] = frozenset()) -> tuple[R, int, bool, list[tuple[str, int]]]:
    """The response now, its record bytes, whether any partition has an error, the partitions.
    Topics in ``denied`` (no READ permission) get TOPIC_AUTHORIZATION_FAILED."""
    budget = request.max_bytes if v >= 3 else 2**31 - 1
    committed = v >= 4 and request.isolation_level == READ_COMMITTED
    total = 0
    errors = False
    keys = []
    topics = []
    for ft in request.topics:
        if v >= 13:
            info = broker.topics.by_id(ft.topic_id)
            name = info.name if info is not None else None
            tr = TopicResponse(topic_id=ft.topic_id, partitions=[])
        else:
            name = ft.topic
            tr = TopicResponse(topic=name, partitions=[])
        for p in ft.partitions:
            if name in denied:
                pd = PartitionData(partition_index=p.partition, error_code=TopicAuthorizationFailedError.code,
                                   high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                   aborted_transactions=[] if v >= 4 else None, preferred_read_replica=-1, records=b"")
                errors = True
                tr.partitions.append(pd)
                continue
            pd, n = _read_partition(broker, name, p, budget - total, first=total == 0, v=v, committed=committed)
            total += n
            errors = errors or pd.error_code != ErrorCode.NONE
            if name is not None:
                keys.append((name, p.partition))
            tr.partitions.append(pd)
        topics.append(tr)
    resp = R(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=topics)
    return resp, total, errors, keys


@handler(ApiKey.FETCH, 4)  # v0-3 need message format v0/v1 (down-conversion), gone since Kafka 4.0 (KIP-896)
def handle_fetch(ctx, request):
    v = ctx.api_version
    if v >= 7 and request.session_id != 0:
        # We never hand out a session id, so a client naming one is confused: tell it to start over.
        return R(throttle_time_ms=0, error_code=FetchSessionIdNotFoundError.code, session_id=0, responses=[])
    denied = frozenset(_denied_topics(ctx, request, v))
    resp, total, errors, keys = _build(ctx.broker, request, v, denied)
    if total >= request.min_bytes or errors or request.max_wait_ms <= 0 or not keys:
        return resp
    return _long_poll(ctx.broker, request, v, keys, denied)


def _denied_topics(ctx, request, v: int):
    """Names of the requested topics this principal may not READ (nothing without an authorizer)."""
    if ctx.session is None or ctx.broker.security.authorizer is None:
        return
    for ft in request.topics:
        if v >= 13:
            info = ctx.broker.topics.by_id(ft.topic_id)
            name = info.name if info is not None else None
        else:
            name = ft.topic
        if name is not None and not ctx.allowed(AclOperation.READ, ResourceType.TOPIC, name):
            yield name


async def _long_poll(broker, request, v: int, keys, denied: frozenset[str]) -> R:
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + request.max_wait_ms / 1000
    while True:
        fut = loop.create_future()
        for key in keys:
            broker.waiters.add(key, fut)
        try:
            await asyncio.wait_for(fut, max(deadline - time.monotonic(), 0))
        except asyncio.TimeoutError:
            pass
        finally:
            for key in keys:
                broker.waiters.discard(key, fut)
        resp, total, errors, _ = _build(broker, request, v, denied)
        if total >= request.min_bytes or errors or time.monotonic() >= deadline:
            return resp
