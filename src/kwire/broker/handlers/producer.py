"""InitProducerId: producer ids for idempotent producers, and transactional producers' ids and
epochs from the transaction coordinator.

* No transactional id: a new producer id with epoch 0.  From v3 a client may send the id and
  epoch it has (KIP-360) to have the epoch bumped; at the end of the epoch range it gets a new
  id instead.  The transaction timeout (v2+) means nothing without a transactional id: ignored.
* A transactional id: ``TransactionCoordinator.init_producer_id`` (fencing the id's previous
  producer, aborting its open transaction).  PRODUCER_FENCED is answered as
  INVALID_PRODUCER_EPOCH before v4, which predates it (as Kafka does).  v6's two-phase commit
  (KIP-939: Enable2Pc, KeepPreparedTxn) is not supported: such a request is INVALID_REQUEST.

With an authorizer (as Kafka 3+): a transactional id needs WRITE on it; an idempotent producer needs
IDEMPOTENT_WRITE on the cluster or WRITE on at least one topic, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    TransactionalIdAuthorizationFailedError,
)

from ..auth.acls import AclOperation, ResourceType
from ..transactions import InitResult
from .registry import handler
from .transactions import for_version

R = messages.InitProducerIdResponse

logger = logging.getLogger("kwire.broker.handlers")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka's TransactionMetadata.isEpochExhausted: from this epoch on, a bump gives a new id.
_EPOCH_EXHAUSTED = 2**15 - 2


def _error(code: int) -> R:
    return R(throttle_time_ms=0, error_code=code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)


@handler(ApiKey.INIT_PRODUCER_ID, 0, 6)
def handle_init_producer_id(ctx, request) -> R:
    if request.transactional_id is not None:
        if request.transactional_id == "":
            return _error(InvalidRequestError.code)  # as Kafka's coordinator, before anything else
        if not ctx.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return _error(TransactionalIdAuthorizationFailedError.code)
        return _init_transactional(ctx, request)
    if not (ctx.allowed(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
            or ctx.allowed_any(AclOperation.WRITE, ResourceType.TOPIC)):
        return _error(ClusterAuthorizationFailedError.code)
    ids = ctx.broker.producer_ids
    pid, epoch = (request.producer_id, request.producer_epoch) if ctx.api_version >= 3 \
        else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    try:
        if (pid, epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH):
            return _granted(ids.allocate(), 0)
        if pid < 0 or epoch < 0:
            return _error(InvalidRequestError.code)  # as Kafka: id and epoch come together
        if not ids.was_allocated(pid):
            # Never handed out here: bumping would bless an id a later producer may be given.
            # A new id is what Kafka gives every idempotent producer anyway.
            logger.info("InitProducerId: producer id %d was never allocated; allocating a new one", pid)
            return _granted(ids.allocate(), 0)
        if epoch >= _EPOCH_EXHAUSTED:
            return _granted(ids.allocate(), 0)
        # Partitions fence the old epoch and expect sequence 0 from the new one; the broker need
        # not remember the epoch (the client's id and epoch are what it proves).
        return _granted(pid, epoch + 1)
    except KafkaError as exc:
        return _error(exc.code)


def _granted(pid: int, epoch: int) -> R:
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=epoch)


def _init_transactional(ctx, request):
    v = ctx.api_version
    if v >= 6 and (request.enable2_pc or request.keep_prepared_txn):
        return _error(InvalidRequestError.code)
    pid, epoch = (request.producer_id, request.producer_epoch) if v >= 3 else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    if (pid, epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH):
        expected = None
    elif pid < 0 or epoch < 0:
        return _error(InvalidRequestError.code)  # as Kafka: id and epoch come together
    else:
        expected = (pid, epoch)
    result = ctx.broker.transactions.init_producer_id(request.transactional_id, request.transaction_timeout_ms,
                                                      expected)
    if isinstance(result, InitResult):
        return _answer(result, v)
    return _answer_later(result, v)


def _answer(result: InitResult, v: int) -> R:
    if result.error:
        return _error(for_version(result.error, v, fenced_since=4))
    return _granted(result.producer_id, result.producer_epoch)


async def _answer_later(pending, v: int) -> R:
    return _answer(await pending, v)
