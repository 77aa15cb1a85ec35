"""``Admin``'s transaction calls (KIP-664, as Kafka's Admin.listTransactions / describeTransactions /
abortTransaction): the transactions each broker's coordinator knows, the state of named
transactional ids from their coordinator, and the abort of a hanging transaction in a partition.  Kept apart from admin.py, as admin_cluster.py is; ``AsyncAdmin`` has a thin
method for each.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kwire.protocol import messages
from kwire.protocol.errors import ErrorCode

from .types import TopicPartition

if TYPE_CHECKING:
    from .admin import AsyncAdmin

__all__ = ["TransactionDescription", "TransactionListing", "abort_transaction", "describe_transactions",
           "list_transactions"]

LIST_TRANSACTIONS = messages.ListTransactionsRequest.API_KEY
DESCRIBE_TRANSACTIONS = messages.DescribeTransactionsRequest.API_KEY
WRITE_TXN_MARKERS = messages.WriteTxnMarkersRequest.API_KEY
TRANSACTION_COORDINATOR = 1  # FindCoordinator's key type for transactional ids


@dataclass(frozen=True)
class TransactionListing:
    """One transactional id a coordinator knows, with its producer and state (``Ongoing``,
    ``PrepareCommit``, ``CompleteCommit``, ``Empty``...: Kafka's TransactionState names)."""

    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id's state at its coordinator (DescribeTransactions)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1 when no transaction is open
    partitions: tuple[TopicPartition, ...]  # those the open transaction has written to
    coordinator: int


async def list_transactions(admin: AsyncAdmin, *, states: Collection[str] = (), producer_ids: Iterable[int] = (),
                            min_duration_ms: int = -1, pattern: str | None = None,
                            timeout: float | None) -> list[TransactionListing]:
    """The transactions every broker's coordinator knows, filtered by state names, producer ids,
    least running time (ListTransactions v1+) and a regular expression on the id (v2+), sorted
    by transactional id."""
    from .admin import _Batch, _broker_error

    metadata = await admin._metadata([], timeout)
    nodes = sorted(metadata.brokers)
    batch: _Batch[int, list[TransactionListing]] = _Batch(nodes, lambda n: f"broker {n}")
    R = messages.ListTransactionsRequest
    low = 2 if pattern is not None else (1 if min_duration_ms >= 0 else 0)

    def build(version: int) -> messages.ListTransactionsRequest:
        return R(state_filters=list(states), producer_id_filters=list(producer_ids), duration_filter=min_duration_ms,
                 transactional_id_pattern=pattern)

    async def send(node: int | None, keys: list[int]) -> None:
        response = await admin._send(build, node, api_key=LIST_TRANSACTIONS, low=low)
        if response.error_code:
            batch.fail(keys[0], _broker_error(response.error_code, f"broker {node}"))
        else:
            batch.succeed(keys[0], [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state, keys[0])
                                    for t in response.transaction_states])

    async def round_(keys: list[int]) -> None:
        await admin._per_node(batch, {n: [n] for n in keys}, send)

    found = await admin._run(batch, round_, what="ListTransactions", timeout=timeout)
    return sorted((t for listings in found.values() for t in listings), key=lambda t: t.transactional_id)


async def describe_transactions(admin: AsyncAdmin, transactional_ids: Iterable[str], *,
                                timeout: float | None) -> dict[str, TransactionDescription]:
    """The state of each transactional id at its coordinator; TransactionalIdNotFoundError for
    an id the coordinator does not know."""
    from .admin import _COORDINATOR_MOVED, _Batch, _broker_error

    ids = list(dict.fromkeys(transactional_ids))
    batch: _Batch[str, TransactionDescription] = _Batch(ids, lambda t: f"transactional id {t!r}")
    cluster = admin._cluster

    async def send(node: int | None, keys: list[str]) -> None:
        response = await admin._send(lambda v: messages.DescribeTransactionsRequest(transactional_ids=keys), node,
                                     api_key=DESCRIBE_TRANSACTIONS)
        for s in response.transaction_states:
            if s.error_code:
                if s.error_code in _COORDINATOR_MOVED:
                    cluster.forget_coordinator(s.transactional_id, TRANSACTION_COORDINATOR)
                batch.fail(s.transactional_id, _broker_error(s.error_code, batch.describe(s.transactional_id)))
            else:
                batch.succeed(s.transactional_id, TransactionDescription(
                    s.transactional_id, s.transaction_state, s.producer_id, s.producer_epoch,
                    s.transaction_timeout_ms, s.transaction_start_time_ms,
                    tuple(sorted(TopicPartition(t.topic, p) for t in s.topics for p in t.partitions)),
                    -1 if node is None else node))

    async def round_(keys: list[str]) -> None:
        by_node: dict[int | None, list[str]] = {}
        for key in keys:
            try:
                node = await cluster.coordinator(key, TRANSACTION_COORDINATOR, retry=False)  # (the rounds retry)
            except Exception as exc:  # noqa: BLE001 - a failed lookup fails (or retries) only this id
                batch.fail(key, exc)
                continue
            by_node.setdefault(node, []).append(key)
        await admin._per_node(batch, by_node, send)

    return await admin._run(batch, round_, what="DescribeTransactions", timeout=timeout)


async def abort_transaction(admin: AsyncAdmin, partition: TopicPartition | tuple[str, int], producer_id: int,
                            producer_epoch: int, *, coordinator_epoch: int = -1, timeout: float | None) -> None:
    """Write an ABORT marker for the producer's open transaction in ``partition`` on its leader
    (WriteTxnMarkers, as Kafka's Admin.abortTransaction): for a transaction its coordinator lost,
    which holds the partition's last stable offset back.  The producer id and epoch are those
    DescribeProducers shows for the partition."""
    from .admin import _Batch, _broker_error, _check_partition_known, _partition

    tp = TopicPartition(*partition)
    batch: _Batch[TopicPartition, None] = _Batch([tp], _partition)
    R = messages.WriteTxnMarkersRequest
    M = R.WritableTxnMarker
    request = R(markers=[M(producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
                           coordinator_epoch=coordinator_epoch,
                           topics=[M.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])])])

    async def send(node: int | None, tps: list[TopicPartition]) -> None:
        response = await admin._send(lambda v: request, node, api_key=WRITE_TXN_MARKERS, low=1)
        for m in response.markers:
            for t in m.topics:
                for p in t.partitions:
                    if p.error_code:
                        batch.fail(tp, _broker_error(p.error_code, _partition(tp)),
                                   final=p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    else:
                        batch.succeed(tp, None)

    async def round_(tps: list[TopicPartition]) -> None:
        metadata = await admin._cluster.refresh_metadata([tp.topic])
        _check_partition_known(batch, metadata, tp)
        if tp in batch.pending:
            await admin._per_node(batch, {metadata.leader(*tp): [tp]}, send)

    await admin._run(batch, round_, what="WriteTxnMarkers", timeout=timeout, refresh_metadata=True)
