"""Transactional requests: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, and the
admin DescribeTransactions and ListTransactions.

Each turns its request into a call on the broker's ``TransactionCoordinator`` (and, for
TxnOffsetCommit, the group coordinator, which stages the offsets) and answers with what the
version knows.  Versions served: Kafka 4.3's, transactions v1 and v2 (KIP-890); which one a
request speaks is its version's, whatever the cluster's transaction.version (as Kafka's
TransactionVersion.transactionVersionFor*):

* AddPartitionsToTxn v0-3 (clients, transactions v1) and v4-5, the batch form a partition leader
  sends its coordinator (KIP-890): CLUSTER_ACTION, several transactions, ``verify_only``, a
  top-level error; v4+ adds as transactions v2.  v4 predates TRANSACTION_ABORTABLE
  (INVALID_TXN_STATE instead).
* AddOffsetsToTxn v0-4 (transactions v1 only: a v2 client's TxnOffsetCommit adds its group).
* EndTxn v0-4 end a transaction at the epoch the client has; v5 bumps the epoch and answers the
  producer id and epoch to go on with.
* TxnOffsetCommit v0-5: v5 adds the group to the transaction (transactions v2); v4+ answers a
  group not in the transaction with TRANSACTION_ABORTABLE, older ones with INVALID_TXN_STATE.
* PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to versions before 2, which predate it
  (as Kafka does).

With an authorizer, as Kafka: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
AddPartitionsToTxn also WRITE on each topic (TOPIC_AUTHORIZATION_FAILED, the other partitions
OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn and TxnOffsetCommit READ on the group, TxnOffsetCommit
READ on each topic; DescribeTransactions and ListTransactions DESCRIBE on each transactional id
(ListTransactions leaves the others out); AddPartitionsToTxn v4+ CLUSTER_ACTION on the cluster
(CLUSTER_AUTHORIZATION_FAILED) and no per-topic check, as from a broker.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    CoordinatorLoadInProgressError,
    ErrorCode,
    GroupAuthorizationFailedError,
    InvalidProducerEpochError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    InvalidTxnStateError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..coordinator import OffsetCommitEntry
from ..topics import is_internal
from ..transactions import EndTxnResult, TxnState
from ..transactions.version import add_partitions_version, end_txn_version, txn_offset_commit_adds_group
from .groups import answer_when_synced
from .registry import handler

if TYPE_CHECKING:
    from ..context import RequestContext

ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS

_TXN_DENIED = TransactionalIdAuthorizationFailedError.code


def for_version(code: int, version: int, fenced_since: int = 2, abortable_since: int = 4) -> int:
    """PRODUCER_FENCED for clients that know it, INVALID_PRODUCER_EPOCH (same handling) before;
    TRANSACTION_ABORTABLE (KIP-890) likewise, INVALID_TXN_STATE before (Kafka's
    AddPartitionsToTxnManager does the same for older requests)."""
    if code == ProducerFencedError.code and version < fenced_since:
        return InvalidProducerEpochError.code
    if code == TransactionAbortableError.code and version < abortable_since:
        return InvalidTxnStateError.code
    return code


def _txn_allowed(ctx: RequestContext, operation: AclOperation, transactional_id: str | None) -> bool:
    return ctx.allowed(operation, ResourceType.TRANSACTIONAL_ID, transactional_id or "")


# ---------------------------------------------------------------- AddPartitionsToTxn


@handler(ADD_PARTITIONS_TO_TXN, 0, 5)
def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    R = messages.AddPartitionsToTxnResponse
    v = ctx.api_version
    if v < 4:
        tid = request.v3_and_below_transactional_id
        results = _add_partitions(ctx, tid, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                                  request.v3_and_below_topics, verify_only=False)
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=results)
    # v4+: a partition leader's batch for its coordinator (Kafka's handleAddPartitionsToTxnRequest).
    if not ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code, results_by_transaction=[])
    if any(not t.transactional_id for t in request.transactions):
        return R(throttle_time_ms=0, error_code=InvalidRequestError.code, results_by_transaction=[])
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=[
        R.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=_add_partitions(
            ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, verify_only=t.verify_only))
        for t in request.transactions])


def _add_partitions(ctx: RequestContext, tid: str | None, producer_id: int, producer_epoch: int, topics: list,
                    *, verify_only: bool) -> list:
    """The per-topic results of one transaction's AddPartitionsToTxn (every version)."""
    T = messages.AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    P = T.AddPartitionsToTxnPartitionResult
    v = ctx.api_version
    broker = ctx.broker
    wanted = [(t.name, list(t.partitions)) for t in topics]
    everything = [(t, p) for t, parts in wanted for p in parts]
    codes: dict[tuple[str, int], int] = {}
    if v < 4 and not _txn_allowed(ctx, AclOperation.WRITE, tid):
        codes = dict.fromkeys(everything, _TXN_DENIED)
    elif not tid:
        codes = dict.fromkeys(everything, InvalidRequestError.code)
    else:
        refused: dict[tuple[str, int], int] = {}
        for topic, parts in wanted:
            # A broker's request (v4+) was authorized by the client's Produce already.  A client's
            # may not add an internal topic: Kafka leaves those out of the topics it authorizes
            # (KafkaApis.handleAddPartitionsToTxnRequest), so they are TOPIC_AUTHORIZATION_FAILED.
            may_write = v >= 4 or (not is_internal(topic)
                                   and ctx.allowed(AclOperation.WRITE, ResourceType.TOPIC, topic))
            for p in parts:
                if not may_write:
                    refused[(topic, p)] = TopicAuthorizationFailedError.code
                elif not broker.topics.partition_exists(topic, p):
                    refused[(topic, p)] = UnknownTopicOrPartitionError.code
        if refused:
            # As Kafka: any refused partition fails the transaction; the others were not added.
            codes = {tp: refused.get(tp, OperationNotAttemptedError.code) for tp in everything}
        elif verify_only:
            codes = {tp: for_version(broker.transactions.verify_produce(tid, producer_id, producer_epoch, *tp), v, 2, 5)
                     for tp in everything}
        else:
            code = broker.transactions.add_partitions(tid, producer_id, producer_epoch, everything,
                                                      add_partitions_version(v))
            codes = dict.fromkeys(everything, for_version(code, v, 2, 5))
    results: dict[str, list] = {}
    for topic, parts in wanted:
        results.setdefault(topic, []).extend(P(partition_index=p, partition_error_code=codes[(topic, p)])
                                             for p in parts)
    return [T(name=name, results_by_partition=parts) for name, parts in results.items()]


# ---------------------------------------------------------------- AddOffsetsToTxn


@handler(ADD_OFFSETS_TO_TXN, 0, 4)
def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    R = messages.AddOffsetsToTxnResponse
    if not _txn_allowed(ctx, AclOperation.WRITE, request.transactional_id):
        return R(throttle_time_ms=0, error_code=_TXN_DENIED)
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id or ""):
        return R(throttle_time_ms=0, error_code=GroupAuthorizationFailedError.code)
    if not request.transactional_id or not request.group_id:
        return R(throttle_time_ms=0, error_code=InvalidRequestError.code)
    code = ctx.broker.transactions.add_offsets(request.transactional_id, request.producer_id,
                                               request.producer_epoch, request.group_id)
    return R(throttle_time_ms=0, error_code=for_version(code, ctx.api_version))


# ---------------------------------------------------------------- EndTxn


@handler(END_TXN, 0, 5)
def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    R = messages.EndTxnResponse
    v = ctx.api_version
    if not _txn_allowed(ctx, AclOperation.WRITE, request.transactional_id):
        return R(throttle_time_ms=0, error_code=_TXN_DENIED)
    if not request.transactional_id:
        return R(throttle_time_ms=0, error_code=InvalidRequestError.code)
    result = ctx.broker.transactions.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                             bool(request.committed), end_txn_version(v))
    if isinstance(result, EndTxnResult):
        return _end_txn_response(result, v)
    return _end_txn_later(result, v)


def _end_txn_response(result, v: int) -> Any:
    resp = messages.EndTxnResponse(throttle_time_ms=0, error_code=for_version(result.error, v))
    if v >= 5:  # the id and epoch of the client's next transaction (-1 with an error)
        resp.producer_id, resp.producer_epoch = result.producer_id, result.producer_epoch
    return resp


async def _end_txn_later(pending, v: int):
    return _end_txn_response(await pending, v)


# ---------------------------------------------------------------- TxnOffsetCommit


@handler(TXN_OFFSET_COMMIT, 0, 5)
def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    R = messages.TxnOffsetCommitResponse
    T, P = R.TxnOffsetCommitResponseTopic, R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition
    v = ctx.api_version
    broker = ctx.broker
    group_id = request.group_id or ""
    wanted = [(t.name, list(t.partitions)) for t in request.topics]

    def answer(code_of) -> Any:
        return R(throttle_time_ms=0, topics=[
            T(name=topic, partitions=[P(partition_index=p.partition_index, error_code=code_of(topic, p))
                                      for p in parts]) for topic, parts in wanted])

    if not _txn_allowed(ctx, AclOperation.WRITE, request.transactional_id):
        return answer(lambda t, p: _TXN_DENIED)
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, group_id):
        return answer(lambda t, p: GroupAuthorizationFailedError.code)
    fixed: dict[tuple[str, int], int] = {}
    entries: list[OffsetCommitEntry] = []
    errors: list[int] = []
    for topic, parts in wanted:
        may_read = ctx.allowed(AclOperation.READ, ResourceType.TOPIC, topic)
        for p in parts:
            if not may_read:
                fixed[(topic, p.partition_index)] = TopicAuthorizationFailedError.code
            elif not broker.topics.partition_exists(topic, p.partition_index):
                fixed[(topic, p.partition_index)] = UnknownTopicOrPartitionError.code
            else:
                entries.append(OffsetCommitEntry(topic=topic, partition=p.partition_index, offset=p.committed_offset,
                                                 leader_epoch=p.committed_leader_epoch if v >= 2 else -1,
                                                 metadata=p.committed_metadata))
    if entries:
        code = for_version(broker.transactions.check_txn_offset_commit(
            request.transactional_id or "", request.producer_id, request.producer_epoch, group_id,
            add=txn_offset_commit_adds_group(v)), v, fenced_since=0)
        # A KIP-848 group checks the member epoch; its offsets are then staged as any group's.
        consumer_code = None if code else broker.consumer_groups.check_offset_commit(
            group_id, (request.member_id or "") if v >= 3 else "", request.generation_id if v >= 3 else -1,
            transactional=True, partitions=[(e.topic, e.partition) for e in entries])
        if not code and consumer_code is None:  # a KIP-1071 streams group (exactly-once Streams) likewise
            consumer_code = broker.streams_groups.check_offset_commit(
                group_id, (request.member_id or "") if v >= 3 else "", request.generation_id if v >= 3 else -1,
                transactional=True, partitions=[(e.topic, e.partition) for e in entries])
        if code or consumer_code:
            errors = [code or consumer_code] * len(entries)
        elif consumer_code is not None:
            errors = broker.coordinator.commit_txn_offsets(group_id, request.producer_id, -1, "", None, entries,
                                                           defer_fsync=True, producer_epoch=request.producer_epoch)
        else:
            errors = broker.coordinator.commit_txn_offsets(
                group_id, request.producer_id, request.generation_id if v >= 3 else -1,
                (request.member_id or "") if v >= 3 else "", request.group_instance_id if v >= 3 else None,
                entries, defer_fsync=True, producer_epoch=request.producer_epoch)
        for entry, code in zip(entries, errors, strict=True):
            fixed[(entry.topic, entry.partition)] = code
    response = answer(lambda t, p: fixed[(t, p.partition_index)])
    synced = broker.coordinator.journal_synced() if any(e == 0 for e in errors) else None
    if synced is None:
        return response
    return answer_when_synced(synced, response)  # as OffsetCommit


# ---------------------------------------------------------------- DescribeTransactions / ListTransactions


@handler(DESCRIBE_TRANSACTIONS, 0, 0)
def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    R = messages.DescribeTransactionsResponse
    S = R.TransactionState
    states = []
    for tid in request.transactional_ids:
        out = S(error_code=ErrorCode.NONE, transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])
        txn = ctx.broker.transactions.describe(tid or "")
        if not _txn_allowed(ctx, AclOperation.DESCRIBE, tid):
            out.error_code = _TXN_DENIED
        elif ctx.broker.transactions.loading():
            out.error_code = CoordinatorLoadInProgressError.code
        elif txn is None or txn.state is TxnState.DEAD:
            out.error_code = TransactionalIdNotFoundError.code
        else:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(txn.partitions):
                by_topic.setdefault(topic, []).append(partition)
            out.transaction_state = txn.state.value
            out.transaction_timeout_ms = txn.timeout_ms
            out.transaction_start_time_ms = txn.start_ms
            out.producer_id, out.producer_epoch = txn.producer_id, txn.producer_epoch
            # As Kafka: only the topics the principal may describe.
            out.topics = [S.TopicData(topic=topic, partitions=parts) for topic, parts in by_topic.items()
                          if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)]
        states.append(out)
    return R(throttle_time_ms=0, transaction_states=states)


_KNOWN_STATES = frozenset(s.value for s in TxnState)


@handler(LIST_TRANSACTIONS, 0, 2)
def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    R = messages.ListTransactionsResponse
    v = ctx.api_version
    states = list(request.state_filters)
    unknown = [s for s in states if s not in _KNOWN_STATES]
    pattern = None
    if v >= 2 and request.transactional_id_pattern:
        try:
            pattern = re.compile(request.transactional_id_pattern)
        except re.error:
            return R(throttle_time_ms=0, error_code=InvalidRegularExpressionError.code, unknown_state_filters=[],
                     transaction_states=[])
    if ctx.broker.transactions.loading():  # as Kafka's TransactionStateManager.listTransactionStates
        return R(throttle_time_ms=0, error_code=CoordinatorLoadInProgressError.code, unknown_state_filters=[],
                 transaction_states=[])
    found = ctx.broker.transactions.list_transactions(
        states, set(request.producer_id_filters), request.duration_filter if v >= 1 else -1, pattern)
    listed = [R.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                 transaction_state=t.state.value)
              for t in found if _txn_allowed(ctx, AclOperation.DESCRIBE, t.transactional_id)]
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, unknown_state_filters=unknown, transaction_states=listed)

