"""Produce: validate and append record batches, answer per partition (acks 0, 1 and all).

The records are never decoded: the log checks batch headers and CRCs and assigns offsets.
acks=0 gets no response; acks=all with ``fsync = "always"`` is answered after group commit.

A request's ``records`` are the handler's to consume: served by ``dispatch``, they are views
into the request frame the connection received, and the log writes the offsets into them and
stores them from there instead of copying them (a read-only buffer, such as bytes, is copied).

Transactional batches (their headers say so; the records are still not read) are checked with
the transaction coordinator before anything is stored, as Kafka 3.6+ does (KIP-890 part 1): the
producer's transaction must be open with this partition added, else TRANSACTION_ABORTABLE
(INVALID_TXN_STATE before v11, which predates it; a fenced epoch: INVALID_PRODUCER_EPOCH; an
unknown producer id: INVALID_PRODUCER_ID_MAPPING; a transaction being completed:
NOT_ENOUGH_REPLICAS, which every client retries).  From v12 (transactions v2, KIP-890 part 2) the
partition is added to the producer's transaction instead, opening it if needed, as Kafka's
partition leader asks its coordinator to.  Transactional batches in a
request without a transactional id are TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as in Kafka.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    ConcurrentTransactionsError,
    ErrorCode,
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTopicException,
    KafkaStorageError,
    NotEnoughReplicasError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from kwire.protocol.records import batch_header as v2

from ..auth.acls import AclOperation, ResourceType
from ..storage.log import parse_partition_dir
from ..topics import is_internal
from ..transactions.version import produce_adds_partitions
from .common import error_of, storage_error
from .registry import handler
from .transactions import for_version

R = messages.ProduceResponse
TopicResponse = R.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse


def transactional_producers(records) -> set[tuple[int, int]]:
    """(producer id, epoch) of the transactional batches in a Produce request's records; a
    malformed tail is left to the log's validation, which refuses it."""
    found: set[tuple[int, int]] = set()
    if records is None:
        return found
    pos, end = 0, len(records)
    while end - pos >= v2.HEADER_SIZE:
        length = v2.read_prefix(records, pos)[1]
        if length < v2.MIN_BATCH_LENGTH or records[pos + v2.MAGIC_AT] != 2:
            break
        if v2.read_attributes(records, pos) & (v2.TRANSACTIONAL_BIT | v2.CONTROL_BIT) == v2.TRANSACTIONAL_BIT:
            found.add(v2.read_producer(records, pos))
        pos += v2.LOG_OVERHEAD + length
    return found


def _transaction_error(broker, transactional_id: str | None, name: str, index: int, records,
                       version: int) -> tuple[int, str]:
    """(0, "") if the partition may take these batches as far as transactions go, else the error
    code and why."""
    producers = transactional_producers(records)
    if not producers:
        return 0, ""
    if transactional_id is None:
        return TransactionalIdAuthorizationFailedError.code, "transactional batches need the transactional id"
    for pid, epoch in sorted(producers):
        code = for_version(broker.transactions.verify_produce(transactional_id, pid, epoch, name, index,
                                                              add=produce_adds_partitions(version)),
                           version, fenced_since=0, abortable_since=11)
        if code == ConcurrentTransactionsError.code:
            return NotEnoughReplicasError.code, f"the transaction of {transactional_id!r} is being completed"
        if code:
            return code, (f"transactional batch of producer {pid} epoch {epoch} refused for {name}-{index} "
                          f"(transactional id {transactional_id!r})")
    return 0, ""


def _refused(index: int, code: int, message: str | None = None) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                             log_start_offset=-1, record_errors=[], error_message=message)


def _append(broker, name: str, index: int, records, v: int) -> tuple[PartitionResponse, object | None]:
    resp = PartitionResponse(index=index, error_code=ErrorCode.NONE, base_offset=-1, log_append_time_ms=-1,
                             log_start_offset=-1, record_errors=[], error_message=None)
    log = None
    try:
        if not broker.topics.partition_exists(name, index):
            raise UnknownTopicOrPartitionError(f"{name}-{index} does not exist")
        if is_internal(name):
            # Kafka's ReplicaManager.appendToLocalLog: only the coordinators write internal topics.
            raise InvalidTopicException(f"Cannot append to internal topic {name}")
        log = broker.logs.get(name, index)
        if records is None:
            raise InvalidRecordError("the partition's records are null")
        now = time.time_ns() // 1_000_000
        base, _last = log.append(records, now_ms=now, reuse_buffer=True)
        resp.base_offset = base
        if log.config.log_append_time:
            resp.log_append_time_ms = now
        if v >= 5:
            resp.log_start_offset = log.log_start_offset
        broker.waiters.notify((name, index))
    except Exception as exc:  # noqa: BLE001 - every failure becomes this partition's error code
        if isinstance(exc, OSError):
            exc = storage_error(exc, f"appending to {name}-{index}", log.dir if log is not None else None)
        resp.error_code, resp.error_message = error_of(exc)
        if log is not None and v >= 5:
            resp.log_start_offset = log.log_start_offset
        log = None
    return resp, log


@handler(ApiKey.PRODUCE, 3)  # v0-2 carry message format v0/v1, which this broker does not store (KIP-896 too)
def handle_produce(ctx, request):
    broker = ctx.broker
    acks = request.acks
    topics = []
    written = []  # the logs appended to, and their partitions' answers
    answers = []
    # Authorization (with an authorizer): WRITE on each topic; a transactional producer also needs
    # WRITE on its transactional id. Nothing of a refused topic is stored.
    txn_denied = request.transactional_id is not None and not ctx.allowed(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    for td in request.topic_data:
        name = td.name
        tresp = TopicResponse(name=name, partition_responses=[])
        if ctx.api_version >= 13:
            tresp.topic_id = td.topic_id
            info = broker.topics.by_id(td.topic_id)
            name = info.name if info is not None else None
        denied = None
        if txn_denied:
            denied = TransactionalIdAuthorizationFailedError
        elif name is not None and not ctx.allowed(AclOperation.WRITE, ResourceType.TOPIC, name):
            denied = TopicAuthorizationFailedError
        for pd in td.partition_data:
            if denied is not None:
                presp = PartitionResponse(index=pd.index, error_code=denied.code, base_offset=-1,
                                          log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                                          error_message=f"{ctx.principal} may not write to {name!r}")
            elif acks not in (0, 1, -1):
                presp = PartitionResponse(index=pd.index, error_code=InvalidRequiredAcksError.code,
                                          base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
                                          record_errors=[], error_message=f"acks must be 0, 1 or -1, got {acks}")
            elif name is None:
                presp = PartitionResponse(index=pd.index, error_code=UnknownTopicIdError.code, base_offset=-1,
                                          log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                                          error_message=f"no topic with id {td.topic_id}")
            else:
                txn_error, why = _transaction_error(broker, request.transactional_id, name, pd.index, pd.records,
                                                    ctx.api_version) \
                    if broker.topics.partition_exists(name, pd.index) else (0, "")
                if txn_error:
                    presp = _refused(pd.index, txn_error, why)
                else:
                    presp, log = _append(broker, name, pd.index, pd.records, ctx.api_version)
                    if log is not None:
                        written.append(log)
                        answers.append(presp)
            tresp.partition_responses.append(presp)
        topics.append(tresp)
    always = written and broker.config.fsync == "always"
    if always and acks != -1:
        # fsync always: every append is flushed (in the next group commit); only acks=all waits for it.
        broker.durability.request(written).add_done_callback(_ignore_result)
    if acks == 0:
        return None
    response = R(responses=topics, throttle_time_ms=0)
    if always and acks == -1:
        # Asked now, at append time, so requests arriving together share one fsync round.
        return _after_fsync(broker, broker.durability.request(written), response, written, answers)
    return response


def _ignore_result(fut) -> None:
    if not fut.cancelled():
        fut.exception()  # a failed fsync was logged by the group commit; nobody waits for this one


async def _after_fsync(broker, durable, response, logs, answers):
    try:
        await asyncio.wrap_future(durable) if isinstance(durable, concurrent.futures.Future) else await durable
    except OSError as exc:  # the data may not be on disk: say so instead of acknowledging it
        for t in response.responses:
            for p in t.partition_responses:
                if p.error_code == ErrorCode.NONE:
                    p.error_code, p.error_message = KafkaStorageError.code, f"fsync failed: {exc}"
    for log, answer in zip(logs, answers, strict=True):
        if log.dropped and answer.error_code == ErrorCode.NONE:
            # Closed unflushed while the records waited for the disk: the topic was deleted
            # (they are gone with it; Kafka answers so when a partition goes away in purgatory).
            answer.base_offset = -1
            if broker.topics.partition_exists(*parse_partition_dir(log.name)):
                answer.error_code = KafkaStorageError.code
                answer.error_message = f"{log.name} was closed before its records were on disk"
            else:
                answer.error_code = UnknownTopicOrPartitionError.code
                answer.error_message = f"{log.name} was deleted before its records were on disk"
    return response
