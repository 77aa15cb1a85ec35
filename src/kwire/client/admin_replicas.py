"""``Admin``'s replica calls, as Kafka's Admin.electLeaders / listPartitionReassignments /
alterPartitionReassignments: leader elections and reassignments of partitions, all answered by the
controller (kept apart from admin.py, as admin_cluster.py is; ``AsyncAdmin`` has a thin method
for each).  On a one-node cluster there is nothing to move: elections are not needed and a
reassignment can only name the node that holds the partition, which Kafka completes at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, TypeVar

from kwire.protocol import messages
from kwire.protocol.errors import KafkaError
from kwire.protocol.messages import Request, Response

from .types import TopicPartition

if TYPE_CHECKING:
    from .admin import AsyncAdmin

ResponseT = TypeVar("ResponseT", bound=Response)  # the answer to the request a call builds
T = TypeVar("T")  # what a call reads from that answer

__all__ = ["ElectionType", "PartitionReassignment", "alter_partition_reassignments", "elect_leaders",
           "list_partition_reassignments"]

ELECT_LEADERS = messages.ElectLeadersRequest.API_KEY
LIST_REASSIGNMENTS = messages.ListPartitionReassignmentsRequest.API_KEY
ALTER_REASSIGNMENTS = messages.AlterPartitionReassignmentsRequest.API_KEY


class ElectionType(IntEnum):
    """ElectLeaders' ``ElectionType`` (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment under way: the replicas now, those being added and those being removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(tps):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


async def _controller_call(admin: AsyncAdmin, build: Callable[[int], Request[ResponseT]], api_key: int, what: str,
                           read: Callable[[ResponseT], T], *, timeout: float | None, low: int = 0) -> T:
    """One request to the controller, retried while it is retriable; ``read(response)`` the result."""
    from .admin import _broker_error
    from .retry import retrying

    async def attempt() -> T:
        response = await admin._send(build, await admin._controller(), api_key=api_key, low=low)
        code = getattr(response, "error_code", 0)
        if code:
            raise _broker_error(code, what, getattr(response, "error_message", None))
        return read(response)

    return await retrying(attempt, timeout=admin._timeout(timeout), backoff=admin._cluster.retry_backoff, what=what)


async def elect_leaders(admin: AsyncAdmin, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None, *,
                        election: ElectionType = ElectionType.PREFERRED,
                        timeout: float | None) -> dict[TopicPartition, KafkaError | None]:
    """Elect the leaders of ``partitions`` (None: every partition), as Java's electLeaders: the
    outcome by partition, None where a leader was elected, else the error
    (ElectionNotNeededError when the leader is already the preferred one)."""
    from .admin import _broker_error, _partition

    wanted = None if partitions is None else sorted({TopicPartition(*tp) for tp in partitions})
    R = messages.ElectLeadersRequest
    wait_ms = int(admin._timeout(timeout) * 1000)

    def build(version: int) -> messages.ElectLeadersRequest:
        topics = None if wanted is None else [R.TopicPartitions(topic=t, partitions=ps)
                                              for t, ps in _by_topic(wanted).items()]
        return R(election_type=int(election), topic_partitions=topics, timeout_ms=wait_ms)

    def read(response: messages.ElectLeadersResponse) -> dict[TopicPartition, KafkaError | None]:
        out: dict[TopicPartition, KafkaError | None] = {}
        for t in response.replica_election_results:
            for p in t.partition_result:
                tp = TopicPartition(t.topic, p.partition_id)
                out[tp] = _broker_error(p.error_code, _partition(tp), p.error_message) if p.error_code else None
        return dict(sorted(out.items()))

    low = 1 if election != ElectionType.PREFERRED else 0
    return await _controller_call(admin, build, ELECT_LEADERS, "ElectLeaders", read, timeout=timeout, low=low)


async def list_partition_reassignments(admin: AsyncAdmin,
                                       partitions: Iterable[TopicPartition | tuple[str, int]] | None = None, *,
                                       timeout: float | None) -> dict[TopicPartition, PartitionReassignment]:
    """The reassignments under way, of ``partitions`` (None: all)."""
    wanted = None if partitions is None else sorted({TopicPartition(*tp) for tp in partitions})
    R = messages.ListPartitionReassignmentsRequest
    wait_ms = int(admin._timeout(timeout) * 1000)

    def build(version: int) -> messages.ListPartitionReassignmentsRequest:
        topics = None if wanted is None else [R.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
                                              for t, ps in _by_topic(wanted).items()]
        return R(timeout_ms=wait_ms, topics=topics)

    def read(response: messages.ListPartitionReassignmentsResponse) -> dict[TopicPartition, PartitionReassignment]:
        return dict(sorted((TopicPartition(t.name, p.partition_index),
                            PartitionReassignment(tuple(p.replicas), tuple(p.adding_replicas),
                                                  tuple(p.removing_replicas)))
                           for t in response.topics for p in t.partitions))

    return await _controller_call(admin, build, LIST_REASSIGNMENTS, "ListPartitionReassignments", read,
                                  timeout=timeout)


async def alter_partition_reassignments(admin: AsyncAdmin,
                                        targets: Mapping[TopicPartition | tuple[str, int], Sequence[int] | None], *,
                                        timeout: float | None) -> None:
    """Move each partition to the replicas given (None: cancel its reassignment under way); raises
    the first partition's error (InvalidReplicaAssignmentError, NoReassignmentInProgressError...)."""
    from .admin import _broker_error, _partition

    wanted = {TopicPartition(*tp): (None if r is None else list(r)) for tp, r in targets.items()}
    R = messages.AlterPartitionReassignmentsRequest
    wait_ms = int(admin._timeout(timeout) * 1000)

    def build(version: int) -> messages.AlterPartitionReassignmentsRequest:
        by_topic: dict[str, list[messages.AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition]] = {}
        for tp in sorted(wanted):
            by_topic.setdefault(tp.topic, []).append(R.ReassignableTopic.ReassignablePartition(
                partition_index=tp.partition, replicas=wanted[tp]))
        return R(timeout_ms=wait_ms, allow_replication_factor_change=True,
                 topics=[R.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

    def read(response: messages.AlterPartitionReassignmentsResponse) -> None:
        failed = sorted((TopicPartition(t.name, p.partition_index), p.error_code, p.error_message)
                        for t in response.responses for p in t.partitions if p.error_code)
        if failed:
            tp, code, message = failed[0]
            more = f" (and {len(failed) - 1} more partitions)" if len(failed) > 1 else ""
            raise _broker_error(code, _partition(tp) + more, message)

    await _controller_call(admin, build, ALTER_REASSIGNMENTS, "AlterPartitionReassignments", read, timeout=timeout)
