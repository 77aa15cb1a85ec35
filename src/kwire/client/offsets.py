"""A group's committed offsets: reading them (OffsetFetch), writing them (OffsetCommit), and the
stale-commit guard.

The guard is the reason this module exists.  A consumer that processes a batch while its group
rebalances can lose the batch's partitions to another member; if it then commits the batch's
offsets, the broker accepts them whenever the consumer has already rejoined (its generation is
current again) and the other member's progress moves backwards: records are read twice.  So a
commit is checked before it is sent:

* partitions the consumer does not own right now are refused (``StaleCommitError`` naming
  them and the generation in which the consumer lost them);
* an offset below the last committed offset this consumer knows for a partition (from its own
  commits and from OffsetFetch) is committed, but logged as a WARNING naming the partition and
  both offsets.

Commits also carry the generation and member id, so the coordinator refuses those of a member
that has been rebalanced out (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID -> ``CommitFailedError``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import ErrorCode, KafkaError

from .cluster import Cluster
from .consumer_errors import CommitFailedError, StaleCommitError
from .metadata import NO_TOPIC_ID
from .retry import retrying
from .types import OffsetAndMetadata, TopicPartition

__all__ = ["GroupOffsets", "GroupIdentity"]

logger = logging.getLogger("kwire.client.consumer")

# Errors after which the coordinator has to be looked up again.
_COORDINATOR_MOVED = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
# The group moved on without this member: its generation or member id is not current.
_REBALANCED = {ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
               ErrorCode.FENCED_INSTANCE_ID}

_CommitPartition = messages.OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
# An OffsetFetch answer's partition: v8+ (per group) and v0-7 have a class each, with the same fields.
_FetchedPartitionV8 = messages.OffsetFetchResponse.OffsetFetchResponseGroup.OffsetFetchResponseTopics.OffsetFetchResponsePartitions
_FetchedPartition = messages.OffsetFetchResponse.OffsetFetchResponseTopic.OffsetFetchResponsePartition


@dataclass(frozen=True)
class GroupIdentity:
    """Who commits: the generation and member id the coordinator checks (-1 / "" when not a member)."""

    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class GroupOffsets:
    """Committed offsets of one group, as one consumer reads and writes them."""

    def __init__(self, cluster: Cluster, group_id: str):
        self._cluster = cluster
        self.group_id = group_id
        # The last committed offset this consumer knows per partition (its commits, OffsetFetch).
        self.known: dict[TopicPartition, int] = {}

    # -- the guard --------------------------------------------------------------------------------
    def check_owned(self, partitions: Collection[TopicPartition], owned: Collection[TopicPartition],
                    lost: Mapping[TopicPartition, int], generation_id: int) -> None:
        """Refuse a commit that names partitions outside ``owned`` (``lost``: partition -> the
        generation in which this consumer last owned it)."""
        foreign = [tp for tp in partitions if tp not in owned]
        if not foreign:
            return
        foreign.sort()
        were_ours = [tp for tp in foreign if tp in lost]
        never = [tp for tp in foreign if tp not in lost]
        parts = []
        if were_ours:
            generations = sorted({lost[tp] for tp in were_ours})
            now = (f"the group is now in generation {generation_id}" if generation_id >= 0
                   else "it has not rejoined the group yet")
            parts.append(
                f"{', '.join(map(str, were_ours))}: the consumer lost them in a rebalance "
                f"(it owned them in generation {', '.join(map(str, generations))}; {now}). Another member "
                "may have consumed past these offsets, and committing them would move its progress "
                "backwards. Commit before partitions are taken away (in on_partitions_revoked), and "
                "only for partitions in assignment()")
        if never:
            parts.append(f"{', '.join(map(str, never))}: not assigned to this consumer")
        raise StaleCommitError("commit refused, nothing was committed: " + "; ".join(parts), foreign)

    def warn_backwards(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        for tp, om in offsets.items():
            known = self.known.get(tp)
            if known is not None and om.offset < known:
                logger.warning("commit moves %s backwards: its committed offset is %d, this commit sets %d "
                               "(records %d..%d will be read again)", tp, known, om.offset, om.offset, known - 1)

    # -- OffsetFetch ------------------------------------------------------------------------------
    async def fetch(self, partitions: Collection[TopicPartition], *, timeout: float | None = None,
                    require_stable: bool = True) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None where there is none)."""
        wanted = sorted({TopicPartition(*tp) for tp in partitions})
        if not wanted:
            return {}
        result = await retrying(lambda: self._fetch_once(wanted, require_stable),
                                timeout=self._cluster.request_timeout if timeout is None else timeout,
                                backoff=self._cluster.retry_backoff, what=f"OffsetFetch for group {self.group_id!r}")
        for tp, om in result.items():
            if om is not None:
                self.known[tp] = om.offset
        return result

    async def _fetch_once(self, wanted: list[TopicPartition], require_stable: bool
                          ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        node = await self._cluster.coordinator(self.group_id)
        conn = await self._cluster.connection(node)
        by_topic: dict[str, list[int]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        metadata = self._cluster.metadata
        ids = {metadata.topic_id(t): t for t in by_topic}
        version = conn.version_for(ApiKey.OFFSET_FETCH, 1, None if NO_TOPIC_ID not in ids else 9)
        request = messages.OffsetFetchRequest()
        if version >= 8:
            asked = messages.OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id=self.group_id, topics=[messages.OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                    name=t, topic_id=metadata.topic_id(t) if version >= 10 else NO_TOPIC_ID, partition_indexes=ps)
                    for t, ps in by_topic.items()])
            request.groups = [asked]
        else:
            request.group_id = self.group_id
            request.topics = [messages.OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                              for t, ps in by_topic.items()]
        if version >= 7:
            request.require_stable = require_stable
        response = await conn.send(request, version=version)
        # v8+ answers per group (one here), v0-7 at the top level (error_code 0 where a version lacks it).
        topics: list[tuple[str | None, list[_FetchedPartitionV8] | list[_FetchedPartition]]]
        if version >= 8:
            group = response.groups[0]
            top_error = group.error_code
            topics = [(ids.get(t.topic_id) if version >= 10 else t.name, t.partitions) for t in group.topics]
        else:
            top_error = response.error_code
            topics = [(t.name, t.partitions) for t in response.topics]
        if top_error:
            self._raise(top_error, "OffsetFetch")
        result: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
        for name, partitions in topics:
            if name is None:  # a topic id we did not ask for: nothing of ours to read
                continue
            for p in partitions:
                tp = TopicPartition(name, p.partition_index)
                if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # nothing committed there
                    continue
                if p.error_code:
                    self._raise(p.error_code, f"OffsetFetch for {tp}")
                if p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch if version >= 5 else -1
                    result[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "", epoch)
        return result

    def _raise(self, code: int, what: str) -> None:
        if code in _COORDINATOR_MOVED:
            self._cluster.forget_coordinator(self.group_id)
        raise KafkaError.for_code(code)(f"{what} for group {self.group_id!r}")

    # -- OffsetCommit -----------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], identity: GroupIdentity, *,
                     timeout: float | None = None) -> None:
        """Commit ``offsets`` (already checked by the guard) as ``identity``.

        Raises ``CommitFailedError`` when the coordinator says the group rebalanced without this
        member, the broker's error for any other refusal.
        """
        if not offsets:
            return
        offsets = {TopicPartition(*tp): om for tp, om in offsets.items()}
        await retrying(lambda: self._commit_once(offsets, identity),
                       timeout=self._cluster.request_timeout if timeout is None else timeout,
                       backoff=self._cluster.retry_backoff, what=f"OffsetCommit for group {self.group_id!r}")
        for tp, om in offsets.items():
            self.known[tp] = om.offset

    async def _commit_once(self, offsets: dict[TopicPartition, OffsetAndMetadata], identity: GroupIdentity) -> None:
        node = await self._cluster.coordinator(self.group_id)
        conn = await self._cluster.connection(node)
        metadata = self._cluster.metadata
        by_topic: dict[str, list[_CommitPartition]] = {}
        for tp, om in offsets.items():
            by_topic.setdefault(tp.topic, []).append(_CommitPartition(
                partition_index=tp.partition, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
                committed_metadata=om.metadata))
        ids = {metadata.topic_id(t): t for t in by_topic}
        # v10 names topics by id; v1 is the first with generation and member id.
        version = conn.version_for(ApiKey.OFFSET_COMMIT, 1 if identity.generation_id >= 0 else 0,
                                   None if NO_TOPIC_ID not in ids else 9)
        request = messages.OffsetCommitRequest(
            group_id=self.group_id, generation_id_or_member_epoch=identity.generation_id,
            member_id=identity.member_id,
            topics=[messages.OffsetCommitRequest.OffsetCommitRequestTopic(
                name=t, topic_id=metadata.topic_id(t) if version >= 10 else NO_TOPIC_ID, partitions=ps)
                for t, ps in by_topic.items()])
        if version >= 7:
            request.group_instance_id = identity.group_instance_id
        response = await conn.send(request, version=version)
        failed: dict[int, list[TopicPartition]] = {}
        for topic in response.topics:
            name = ids.get(topic.topic_id) if version >= 10 else topic.name
            if name is None:  # a topic id we did not commit to: nothing of ours failed there
                continue
            for p in topic.partitions:
                if p.error_code:
                    failed.setdefault(p.error_code, []).append(TopicPartition(name, p.partition_index))
        if not failed:
            return
        codes = set(failed)
        rebalanced = codes & _REBALANCED
        if rebalanced:
            code = min(rebalanced)
            refused = ", ".join(map(str, sorted(tp for c in rebalanced for tp in failed[c])))
            if code == ErrorCode.FENCED_INSTANCE_ID:
                raise CommitFailedError(
                    f"the group coordinator refused the commit of {refused} with FENCED_INSTANCE_ID: another "
                    f"consumer joined group {self.group_id!r} with this consumer's group.instance.id "
                    f"{identity.group_instance_id!r} and owns its partitions now", code)
            raise CommitFailedError(
                f"the group coordinator refused the commit of {refused} with {KafkaError.for_code(code).name}: "
                f"the group rebalanced and generation {identity.generation_id} (member "
                f"{identity.member_id!r}) is no longer current, so these partitions may belong to another "
                "member now. Poll to rejoin the group, then commit what the new assignment covers", code)
        if codes & _COORDINATOR_MOVED:
            self._cluster.forget_coordinator(self.group_id)
        # Retriable errors (coordinator moved or loading) are retried by the caller's loop;
        # the commit is sent whole again, which is harmless (an offset commit is idempotent).
        code = max(codes, key=lambda c: not KafkaError.for_code(c).retriable)
        names = ", ".join(map(str, sorted(failed[code])))
        raise KafkaError.for_code(code)(f"OffsetCommit of {names} for group {self.group_id!r}")
