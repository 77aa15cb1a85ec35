"""The consumer: ``AsyncConsumer`` (asyncio) and ``Consumer`` (its synchronous facade).

Configuration as for kwire's producer and admin client: a dict with Kafka's dotted names first,
and/or keywords with underscores.  ``topics=`` subscribes at once::

    async with AsyncConsumer({"bootstrap.servers": "localhost:9092", "group.id": "billing"},
                             topics=["orders"]) as c:
        async for record in c:                       # one record at a time
            ...
        records = await c.getmany(timeout_ms=500)    # a batch: list[ConsumerRecord]
        await c.commit()

    with Consumer(bootstrap_servers="localhost:9092", group_id="billing", topics=["orders"]) as c:
        for record in c.poll(timeout=1.0):           # a batch: list[ConsumerRecord], maybe empty
            ...

Like Java's consumer, group work happens inside poll: a rebalance (revoking, joining, the
listener's callbacks) runs during ``getmany()``/``poll()``, never while the application is
processing what the previous poll returned.  Heartbeats run in the background.  Auto commit
(``enable.auto.commit``) commits, at the start of a poll, the positions reached by earlier polls
(records already handed out), every ``auto.commit.interval.ms``; and before partitions are
revoked, and on close.

Commits go through the stale-commit guard (``kwire.client.offsets``): offsets for partitions this
consumer does not own right now are refused with ``StaleCommitError``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import math
import queue
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from kwire.protocol.errors import ErrorCode, KafkaError, StaleMemberEpochError

from .assignors import COOPERATIVE, GroupProtocols
from .cluster import Cluster
from .config import ConsumerConfig
from .consumer_errors import CommitFailedError, FatalGroupError, NoOffsetForPartitionError, StaleCommitError
from .errors import ClientTimeoutError, IllegalStateError
from .facade import SyncFacade, blocking, mirrors, on_loop
from .fetcher import Fetcher, isolation_level_code
from .log_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OffsetAndTimestamp, list_offsets
from .loop_thread import LoopThread
from .membership import STABLE, UNJOINED, GroupMembership, JoinResult
from .membership_kip848 import ConsumerProtocolMembership
from .offsets import GroupIdentity, GroupOffsets
from .subscription import EARLIEST, LATEST, NONE_RESET, PartitionState, SubscriptionState
from .transactions import ConsumerGroupMetadata
from .types import ConsumerRecord, FetchedBatch, OffsetAndMetadata, TopicPartition

__all__ = [
    "AsyncConsumer",
    "CommitFailedError",
    "Consumer",
    "FatalGroupError",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "RebalanceListener",
    "StaleCommitError",
]

logger = logging.getLogger("kwire.client.consumer")

_ILLEGAL_GENERATION, _UNKNOWN_MEMBER_ID, _FENCED_INSTANCE_ID = ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID
# Commits sent again after STALE_MEMBER_EPOCH (KIP-848: a heartbeat moved the member epoch meanwhile).
_STALE_EPOCH_RETRIES = 3

Offsets = Mapping[TopicPartition, "int | OffsetAndMetadata"]
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], "BaseException | None"], Any]
# A rebalance listener's callback: called with the partitions, its result awaited if awaitable.
ListenerCallback = Callable[[list[TopicPartition]], Any]
# A consumer's group membership: the classic protocol's or KIP-848's.
Membership = GroupMembership | ConsumerProtocolMembership
# What a poll hands out: ConsumerRecords (getmany) or FetchedBatches (getbatches).
T = TypeVar("T")


class RebalanceListener:
    """Callbacks on assignment changes.  Override what you need; with ``AsyncConsumer`` they may
    be coroutines.  They run inside the consumer's poll (the sync ``Consumer``: in the thread
    that called ``poll``), so they may commit or seek.

    * ``on_partitions_revoked``: partitions about to be taken away, still owned: commit them here.
    * ``on_partitions_assigned``: partitions just assigned (called after every rebalance, maybe
      with an empty list).
    * ``on_partitions_lost``: the group dropped this member (session or poll timeout); other
      members may own the partitions already, so commits for them are refused.  Defaults to
      ``on_partitions_revoked``, as in Java.
    """

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> Any:
        """``revoked`` are about to be taken from this consumer and are still its own: commit
        what was processed of them here.  Does nothing unless overridden."""

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> Any:
        """``assigned`` were just given to this consumer (after every rebalance, maybe an empty
        list); seek here to start somewhere else than the committed offsets.  Does nothing unless
        overridden."""

    def on_partitions_lost(self, lost: list[TopicPartition]) -> Any:
        """``lost`` were taken from this consumer without a revocation (its session expired):
        another member may own them already, so commits for them are refused.  Calls
        ``on_partitions_revoked`` unless overridden, as Java's listener does."""
        return self.on_partitions_revoked(lost)


def _partitions(partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | TopicPartition
                ) -> list[TopicPartition]:
    """TopicPartition, or an iterable of them (or of (topic, partition) pairs) -> a list."""
    if isinstance(partitions, TopicPartition):
        return [partitions]
    return [TopicPartition(*tp) for tp in partitions]


def _error_of(future: asyncio.Future[Any]) -> BaseException | None:
    return asyncio.CancelledError() if future.cancelled() else future.exception()


async def _wait(task: asyncio.Future[Any], deadline: float) -> bool:
    """Wait for ``task`` until ``deadline`` (monotonic) without cancelling it; True if done."""
    if not task.done():
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await asyncio.wait([task], timeout=remaining)
    return task.done()


class AsyncConsumer:
    """A Kafka consumer for asyncio.  Not safe to share between tasks that poll concurrently."""

    def __init__(self, conf: Mapping[str, Any] | None = None, /, *, topics: Iterable[str] | None = None,
                 listener: RebalanceListener | None = None, **settings: Any) -> None:
        if isinstance(conf, str):
            raise TypeError("AsyncConsumer's first argument is the configuration dict; "
                            f"pass topics=[{conf!r}] to subscribe")
        self.config = ConsumerConfig.from_settings(conf, **settings)
        config = self.config
        self._cluster = Cluster(config)
        self._sub = SubscriptionState()
        self._wakeup_event = asyncio.Event()
        self._fetcher = Fetcher(self._cluster, config, self._sub, self._wake)
        self._listener = listener
        self._group_id: str | None = config.group_id or None
        self._offsets = GroupOffsets(self._cluster, self._group_id) if self._group_id else None
        self._membership: Membership | None = None
        if self._group_id and config.group_protocol == "consumer":
            # KIP-848: the broker assigns; the same consumer logic applies its (cooperative) changes.
            self._membership = ConsumerProtocolMembership(self._cluster, config, self._wake)
        elif self._group_id:
            protocols = GroupProtocols(config.partition_assignment_strategy)
            self._membership = GroupMembership(self._cluster, config, protocols, self._wake)
        self._auto_commit = bool(config.enable_auto_commit and self._group_id)
        self._auto_commit_interval = config.auto_commit_interval_ms / 1000
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval
        self._auto_commit_task: asyncio.Task[None] | None = None
        # Partitions this consumer lost -> the generation in which it last owned them (for the guard).
        self._lost: dict[TopicPartition, int] = {}
        self._owned_generation = -1
        self._join_task: asyncio.Task[JoinResult] | None = None
        self._positions_task: asyncio.Task[None] | None = None
        self._pattern_task: asyncio.Task[None] | None = None
        self._next_metadata_check = 0.0
        self._pattern_known = True  # False from subscribe(pattern=) until the first metadata check
        self._listener_error: BaseException | None = None
        self._iter_buffer: list[ConsumerRecord] = []
        self._iter_pos = 0
        self._closed = False
        # How listener callbacks are run; the synchronous Consumer routes them to its caller's thread.
        self._run_callback: Callable[[ListenerCallback, list[TopicPartition]], Awaitable[Any]] = self._run_here
        if topics:
            self.subscribe(topics)

    # -- subscription -----------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str | None = None, *, pattern: str | re.Pattern[str] | None = None,
                  listener: RebalanceListener | None = None) -> None:
        """Subscribe to topics, or to every topic whose whole name matches ``pattern``; the group
        assigns the partitions at the next poll.  Needs ``group.id``."""
        self._check_open()
        if not self._group_id:
            raise IllegalStateError("subscribe() needs group.id: the group assigns partitions "
                                    "(use assign() to read partitions without a group)")
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes topics or pattern=, one of them")
        if listener is not None:
            self._listener = listener
        if pattern is not None:
            self._sub.subscribe_pattern(pattern)
            self._next_metadata_check = 0.0
            self._pattern_known = False
        else:
            # (pattern is None here, so topics is not: checked above)
            changed = self._sub.subscribe([topics] if isinstance(topics, str) else topics)  # type: ignore[arg-type]
            m = self._membership  # made with group.id, checked above
            if changed and m is not None and m.state != UNJOINED:
                m.request_rejoin("the subscription changed")
        self._wake()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions, without group membership (commits still go to group.id)."""
        self._check_open()
        self._sub.assign(_partitions(partitions))
        for tp in self._sub.assignment:
            self._lost.pop(tp, None)
        self._fetcher.on_assignment_change()
        self._wake()

    async def unsubscribe(self) -> None:
        """Stop reading: revoke the partitions (listener, auto commit) and leave the group."""
        self._check_open()
        if self._sub.group_managed and self._membership is not None:
            await self._leave_group(self._membership, "the consumer unsubscribed")
        self._sub.unsubscribe()
        self._fetcher.on_assignment_change()

    def subscription(self) -> set[str]:
        """The topics subscribed to (those matched so far, for a pattern); empty when assigned
        partitions by ``assign`` or not subscribed."""
        return set(self._sub.topics)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now: the group's assignment, or those given to
        ``assign``."""
        return set(self._sub.assignment)

    # -- polling ----------------------------------------------------------------------------------
    async def getmany(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions: up to ``max_records`` (``max.poll.records``),
        waiting up to ``timeout_ms`` for some (None: until there are).  Rebalances and auto
        commits happen here."""
        return await self._poll_with(self._fetcher.drain, timeout_ms, max_records)

    async def getbatches(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[FetchedBatch]:
        """As ``getmany``, but the fetched data comes out as whole batches (``FetchedBatch``),
        undecoded where possible, for readers that decode records their own way (kwire's Spark
        source builds Arrow columns from them).  ``max_records`` bounds the records handed out
        as in ``getmany``, except that batches are never split: the first one comes out
        whatever its size.  Positions, commits and rebalances are as with ``getmany``."""
        return await self._poll_with(self._fetcher.drain_batches, timeout_ms, max_records)

    async def _poll_with(self, drain: Callable[[int], list[T]], timeout_ms: float | None, max_records: int | None
                         ) -> list[T]:
        self._check_open()
        if self._sub.mode == SubscriptionState.NONE:
            raise IllegalStateError("the consumer is neither subscribed nor assigned: call subscribe() or assign()")
        max_records = max_records or self.config.max_poll_records
        deadline = math.inf if timeout_ms is None else time.monotonic() + max(timeout_ms, 0) / 1000
        m = self._membership
        if m is None:
            return await self._poll(deadline, max_records, drain)
        m.polling += 1  # an application blocked in poll is alive as far as max.poll.interval.ms goes
        try:
            return await self._poll(deadline, max_records, drain)
        finally:
            m.polling -= 1
            m.polled()

    async def _poll(self, deadline: float, max_records: int, drain: Callable[[int], list[T]]) -> list[T]:
        self._maybe_auto_commit()
        while True:
            self._wakeup_event.clear()
            await self._coordinate()
            self._update_positions()
            records = drain(max_records)
            self._fetcher.maybe_fetch()
            if records:
                # Let the loop run once: an application that polls in a tight loop would otherwise
                # never let prefetched responses be read off the socket until the buffer ran dry.
                await asyncio.sleep(0)
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return records
            try:
                await asyncio.wait_for(self._wakeup_event.wait(), None if remaining == math.inf else remaining)
            except asyncio.TimeoutError:
                pass

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """One record at a time, polling in batches underneath (ends when the consumer closes)."""
        while self._iter_pos >= len(self._iter_buffer):
            if self._closed:
                raise StopAsyncIteration
            self._iter_buffer = await self.getmany(timeout_ms=1000)
            self._iter_pos = 0
        record = self._iter_buffer[self._iter_pos]
        self._iter_pos += 1
        return record

    def _wake(self) -> None:
        self._wakeup_event.set()

    # -- group coordination (inside poll) ---------------------------------------------------------
    async def _coordinate(self) -> None:
        if self._listener_error is not None:
            error, self._listener_error = self._listener_error, None
            raise error
        m = self._membership
        if m is None or not self._sub.group_managed:
            return
        if m.fatal is not None:
            raise m.fatal
        if m.lost_reason is not None and self._join_task is None:
            await self._partitions_lost(m.lost_reason)
            m.lost_reason = None
        self._maybe_check_metadata(m)
        # A pattern subscription joins once it knows which topics match.
        if self._join_task is None and m.needs_join and self._pattern_known:
            await self._prepare_join()
            self._join_task = asyncio.ensure_future(m.join(self._sub.topics, self._owned_for_join()))
            self._join_task.add_done_callback(lambda _: self._wake())
        if self._join_task is not None and self._join_task.done():
            task, self._join_task = self._join_task, None
            try:
                result = task.result()
            except FatalGroupError as exc:
                m.set_fatal(exc)
                raise
            await self._apply_assignment(m, result)
        if self._listener_error is not None:
            error, self._listener_error = self._listener_error, None
            raise error

    @property
    def _cooperative(self) -> bool:
        return self._membership is not None and self._membership.protocols.rebalance_protocol == COOPERATIVE

    def _owned_for_join(self) -> list[TopicPartition]:
        return list(self._sub.assignment) if self._cooperative else []

    async def _prepare_join(self) -> None:
        """Before JoinGroup: commit (auto commit) and revoke what the protocol gives up."""
        owned = list(self._sub.assignment)
        if not owned:
            return
        if self._cooperative:
            # Only partitions of topics no longer subscribed are given up before joining.
            revoked = [tp for tp in owned if tp.topic not in self._sub.topics]
        else:
            revoked = owned
        if not revoked:
            return
        if self._auto_commit:
            await self._commit_quietly(revoked, "before revoking partitions")
        await self._call_listener("on_partitions_revoked", revoked)
        self._disown(revoked)

    async def _apply_assignment(self, m: Membership, result: JoinResult) -> None:
        new = [tp for tp in result.assignment.partitions]
        owned = set(self._sub.assignment)
        new_set = set(new)
        previous_generation = self._owned_generation
        self._owned_generation = result.generation_id
        revoked = [tp for tp in self._sub.assignment if tp not in new_set]
        if revoked:  # cooperative: partitions that move to another member
            if self._auto_commit:
                await self._commit_quietly(revoked, "before revoking partitions")
            await self._call_listener("on_partitions_revoked", revoked)
            self._disown(revoked, previous_generation)
            m.request_rejoin("partitions were revoked; rejoining so they can be reassigned")
        added = [tp for tp in new if tp not in owned]
        self._sub.set_assignment([tp for tp in self._sub.assignment if tp in new_set] + added)
        for tp in new:
            self._lost.pop(tp, None)
        self._fetcher.on_assignment_change()
        unsubscribed = sorted({tp.topic for tp in new} - set(self._sub.topics))
        if unsubscribed:
            m.request_rejoin(f"assigned topics {unsubscribed} that are not subscribed")
        await self._call_listener("on_partitions_assigned", added, always=True)

    async def _partitions_lost(self, reason: str) -> None:
        lost = list(self._sub.assignment)
        generation = self._owned_generation
        if lost:
            logger.warning("partitions lost (%s): %s", reason, ", ".join(map(str, lost)))
            # Disown first: another member may own them already, so commits in the callback are refused.
            self._disown(lost, generation)
            await self._call_listener("on_partitions_lost", lost)

    def _disown(self, partitions: list[TopicPartition], generation: int | None = None) -> None:
        generation = self._owned_generation if generation is None else generation
        for tp in partitions:
            self._lost[tp] = generation
        self._sub.remove(partitions)
        self._fetcher.on_assignment_change()

    async def _call_listener(self, name: str, partitions: list[TopicPartition], *, always: bool = False) -> None:
        listener = self._listener
        if listener is None or not (partitions or always):
            return
        callback = getattr(listener, name, None)
        if callback is None and name == "on_partitions_lost":
            callback = getattr(listener, "on_partitions_revoked", None)
        if callback is None:
            return
        try:
            await self._run_callback(callback, sorted(partitions))
        except Exception as exc:
            # As Java: the rebalance goes on; the error reaches the application from this poll.
            logger.error("rebalance listener %s(%s) failed: %r", name, ", ".join(map(str, partitions)), exc)
            if self._listener_error is None:
                self._listener_error = exc

    @staticmethod
    async def _run_here(callback: ListenerCallback, partitions: list[TopicPartition]) -> Any:
        result = callback(partitions)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _maybe_check_metadata(self, m: Membership) -> None:
        """Every metadata.max.age.ms: a pattern subscription looks for new or deleted matching
        topics; a leader for changed partition counts.  Either triggers a rejoin."""
        pattern = self._sub.mode == SubscriptionState.PATTERN
        if not pattern and m.group_partition_counts is None:
            return
        if self._pattern_task is not None or time.monotonic() < self._next_metadata_check:
            return
        self._next_metadata_check = time.monotonic() + self.config.metadata_max_age_ms / 1000
        self._pattern_task = asyncio.ensure_future(self._check_metadata(m, pattern))
        self._pattern_task.add_done_callback(lambda _: self._wake())

    async def _check_metadata(self, m: Membership, pattern: bool) -> None:
        try:
            if pattern:
                metadata = await self._cluster.refresh_metadata(None)
                names = [t.name for t in metadata.topics.values()
                         if not t.error_code and not (t.is_internal and self.config.exclude_internal_topics)]
                if self._sub.mode == SubscriptionState.PATTERN:
                    if self._sub.match_topics(names) and m.state != UNJOINED:
                        m.request_rejoin(f"the topics matching the pattern are now {sorted(self._sub.topics)}")
                    self._pattern_known = True
            counts = m.group_partition_counts
            if counts:
                metadata = await self._cluster.refresh_metadata(counts)
                now = {t: len(metadata.partitions_for(t) or ()) for t in counts}
                if now != counts and m.group_partition_counts is counts:
                    m.group_partition_counts = now
                    m.request_rejoin("the partition count of a subscribed topic changed")
        except Exception as exc:
            logger.info("metadata check for the subscription failed: %s", exc)
        finally:
            self._pattern_task = None

    # -- positions --------------------------------------------------------------------------------
    def _update_positions(self) -> None:
        """Give every assigned partition a position (committed offset, else auto.offset.reset):
        start the lookup, or take its outcome when it is done.  Never waits."""
        task = self._positions_task
        if task is not None:
            if not task.done():
                return
            self._positions_task = None
            task.result()
        missing = self._sub.missing_positions()
        if not missing:
            return
        stuck = [s for s in missing if s.reset == NONE_RESET]
        if stuck:
            raise NoOffsetForPartitionError([s.tp for s in stuck], stuck[0].reset_reason or "no position")
        self._positions_task = asyncio.ensure_future(self._resolve_positions())
        self._positions_task.add_done_callback(lambda _: self._wake())

    async def _resolve_positions(self) -> None:
        states = [s for s in self._sub.missing_positions() if s.reset != NONE_RESET]
        epochs = {s.tp: s.seek_epoch for s in states}
        resets: dict[TopicPartition, str] = {tp: s.reset for tp, s in ((s.tp, s) for s in states) if s.reset}
        need_committed = [s.tp for s in states if s.reset is None]
        no_offset: list[TopicPartition] = []

        def current(tp: TopicPartition) -> PartitionState | None:
            state = self._sub.assignment.get(tp)
            return state if state is not None and state.seek_epoch == epochs[tp] else None

        if need_committed:
            committed = await self._offsets.fetch(need_committed) if self._offsets is not None else {}
            for tp in need_committed:
                state = current(tp)
                if state is None:
                    continue
                found = committed.get(tp)
                if found is not None:
                    state.seek(found.offset, found.leader_epoch)
                elif self.config.auto_offset_reset == NONE_RESET:
                    state.request_reset(NONE_RESET, "no committed offset")
                    no_offset.append(tp)
                else:
                    resets[tp] = self.config.auto_offset_reset
                    epochs[tp] = state.seek_epoch
        if resets:
            timestamps = {tp: EARLIEST_TIMESTAMP if how == EARLIEST else LATEST_TIMESTAMP for tp, how in resets.items()}
            reset_to = await list_offsets(self._cluster, timestamps, isolation_level=self._isolation)
            for tp, answer in reset_to.items():
                state = current(tp)
                if state is not None and answer is not None:
                    logger.info("%s: reset to the %s offset %d", tp, resets[tp], answer.offset)
                    state.seek(answer.offset)
        if no_offset:
            raise NoOffsetForPartitionError(no_offset, "no committed offset")

    @property
    def _isolation(self) -> int:
        return isolation_level_code(self.config.isolation_level)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """The next record read from ``partition`` will be the one at ``offset``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        self._sub.state(TopicPartition(*partition)).seek(offset)
        self._wake()

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | TopicPartition | None = None) -> None:
        """Read from the start of the log (all assigned partitions when None); resolved at the next poll."""
        for tp in self._assigned_or(partitions):
            self._sub.state(tp).request_reset(EARLIEST)
        self._wake()

    def seek_to_end(self, partitions: Iterable[TopicPartition] | TopicPartition | None = None) -> None:
        """Read only records written from now on (all assigned partitions when None)."""
        for tp in self._assigned_or(partitions):
            self._sub.state(tp).request_reset(LATEST)
        self._wake()

    async def seek_to_timestamp(self, timestamp_ms: int,
                                partitions: Iterable[TopicPartition] | TopicPartition | None = None) -> None:
        """Move each partition to its first record with a timestamp >= ``timestamp_ms`` (the log end
        if there is none)."""
        tps = self._assigned_or(partitions)
        found = await self.offsets_for_times({tp: timestamp_ms for tp in tps})
        ends = [tp for tp, answer in found.items() if answer is None]
        for tp, answer in found.items():
            if answer is not None:
                self._sub.state(tp).seek(answer.offset, answer.leader_epoch)
        if ends:
            self.seek_to_end(ends)
        self._wake()

    def _assigned_or(self, partitions: Iterable[TopicPartition] | TopicPartition | None) -> list[TopicPartition]:
        return list(self._sub.assignment) if partitions is None else _partitions(partitions)

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record this consumer will hand out for ``partition``."""
        tp = TopicPartition(*partition)
        state = self._sub.state(tp)
        deadline = time.monotonic() + (self._cluster.request_timeout if timeout is None else timeout)
        while not state.has_position:
            self._update_positions()
            if self._positions_task is not None:
                await _wait(self._positions_task, deadline)
            state = self._sub.state(tp)
            if not state.has_position and time.monotonic() >= deadline:
                raise ClientTimeoutError(f"the position of {tp} was not known within the timeout")
        position = state.position
        assert position is not None  # has_position
        return position

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is >= the given one (ms), or None."""
        return await list_offsets(self._cluster, {TopicPartition(*tp): ts for tp, ts in timestamps.items()},
                                  isolation_level=self._isolation)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's log start offset, asked of its leader now (ListOffsets, earliest).

        Raises the broker's error for a partition it refuses (``UnknownTopicOrPartitionError``...)
        and ``ClientTimeoutError`` past ``default.api.timeout.ms``."""
        found = await list_offsets(self._cluster, {tp: EARLIEST_TIMESTAMP for tp in _partitions(partitions)})
        return {tp: answer.offset for tp, answer in found.items() if answer is not None}

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition numbers from fresh metadata (asking never creates the topic).

        A topic the broker reports with an error raises it (``UnknownTopicOrPartitionError``...).
        """
        self._check_open()
        metadata = await self._cluster.refresh_metadata([topic])
        info = metadata.topics.get(topic)
        if info is None or info.error_code:
            code = 3 if info is None else info.error_code  # UNKNOWN_TOPIC_OR_PARTITION when not named
            raise KafkaError.for_code(code)(f"topic {topic!r}")
        return sorted(info.partitions)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's end offset, asked of its leader now: the high watermark, or the last
        stable offset for ``isolation.level=read_committed``.

        Raises as ``beginning_offsets``."""
        found = await list_offsets(self._cluster, {tp: LATEST_TIMESTAMP for tp in _partitions(partitions)},
                                   isolation_level=self._isolation)
        return {tp: answer.offset for tp, answer in found.items() if answer is not None}

    def pause(self, partitions: Iterable[TopicPartition] | TopicPartition) -> None:
        """Stop handing out records of these partitions (and fetching them) until resume()."""
        self._sub.pause(_partitions(partitions))

    def resume(self, partitions: Iterable[TopicPartition] | TopicPartition) -> None:
        """Hand out records of these paused partitions again, from where they stopped."""
        self._sub.resume(_partitions(partitions))
        self._wake()

    def paused(self) -> set[TopicPartition]:
        """The partitions paused by ``pause`` (and still assigned)."""
        return self._sub.paused()

    def highwater(self, partition: TopicPartition) -> int:
        """The partition's high watermark as of the last fetch (-1 before one)."""
        return self._sub.state(TopicPartition(*partition)).high_watermark

    # -- commits ----------------------------------------------------------------------------------
    def _require_group(self) -> GroupOffsets:
        if self._offsets is None:
            raise IllegalStateError("committing or reading committed offsets needs group.id")
        return self._offsets

    async def committed(self, partitions: Iterable[TopicPartition] | TopicPartition,
                        timeout: float | None = None) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        self._check_open()
        return await self._require_group().fetch(_partitions(partitions), timeout=timeout)

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """This member of the group, for a transactional producer's send_offsets_to_transaction
        (KIP-447): the group's coordinator refuses the offsets if the group has rebalanced since."""
        self._check_open()
        group = self._require_group().group_id
        identity = self._identity()
        return ConsumerGroupMetadata(group, identity.generation_id, identity.member_id,
                                     self.config.group_instance_id if identity.group_instance_id is None
                                     else identity.group_instance_id)

    def _identity(self) -> GroupIdentity:
        m = self._membership
        if m is not None and self._sub.group_managed:
            return GroupIdentity(m.generation_id, m.member_id, m.instance_id)
        return GroupIdentity()

    def _prepare_commit(self, offsets: Offsets | None) -> dict[TopicPartition, OffsetAndMetadata]:
        """The offsets to commit (the positions when None), checked by the stale-commit guard."""
        group = self._require_group()
        if offsets is None:
            chosen = {tp: OffsetAndMetadata(pos, "", epoch) for tp, (pos, epoch) in self._sub.consumed_offsets().items()}
        else:
            chosen = {}
            for tp, value in offsets.items():
                om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
                if om.offset < 0:
                    raise ValueError(f"cannot commit offset {om.offset} for {TopicPartition(*tp)}")
                chosen[TopicPartition(*tp)] = om
        m = self._membership
        owned, lost = self._sub.assignment, self._lost
        generation = -1
        if m is not None and self._sub.group_managed:
            generation = m.generation_id
            if m.lost_reason is not None:
                # The group dropped this member (session or poll timeout); the next poll tells the
                # listener, but the partitions are not this consumer's to commit any more.
                lost = {**lost, **dict.fromkeys(owned, self._owned_generation)}
                owned = {}
        group.check_owned(chosen, owned, lost, generation)
        group.warn_backwards(chosen)
        return chosen

    async def commit(self, offsets: Offsets | None = None, timeout: float | None = None) -> None:
        """Commit ``offsets`` (partition -> next offset to read), or the current positions of all
        assigned partitions; returns when the coordinator has stored them."""
        self._check_open()
        chosen = self._prepare_commit(offsets)
        await self._send_commit(chosen, timeout)

    async def _send_commit(self, chosen: dict[TopicPartition, OffsetAndMetadata], timeout: float | None) -> None:
        for attempt in range(_STALE_EPOCH_RETRIES + 1):
            try:
                await self._require_group().commit(chosen, self._identity(), timeout=timeout)
                return
            except StaleMemberEpochError:
                # KIP-848: a heartbeat in flight moved this member to a new epoch; as Java's consumer,
                # commit again with the epoch its answer brings.
                if attempt == _STALE_EPOCH_RETRIES:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
            except CommitFailedError as exc:
                self._after_commit_failed(exc)
                raise

    def _after_commit_failed(self, exc: CommitFailedError) -> None:
        m = self._membership
        if m is None or not self._sub.group_managed:
            return
        code = getattr(exc, "error_code", None)
        if code == _UNKNOWN_MEMBER_ID:
            m.member_lost("a commit was refused with UNKNOWN_MEMBER_ID", forget_member_id=True)
        elif code == _ILLEGAL_GENERATION:
            m.member_lost("a commit was refused with ILLEGAL_GENERATION", forget_member_id=False)
        elif code == _FENCED_INSTANCE_ID:
            m.set_fatal(FatalGroupError(str(exc)))
        else:
            m.request_rejoin("a commit found the group rebalancing")

    def commit_async(self, offsets: Offsets | None = None, callback: CommitCallback | None = None
                     ) -> asyncio.Future[None]:
        """Start a commit; a future of its completion.  ``callback(offsets, error_or_None)`` runs
        when it completes.  A commit the guard refuses fails the future (and calls back) at once."""
        self._check_open()
        loop = asyncio.get_running_loop()
        try:
            chosen = self._prepare_commit(offsets)
        except Exception as exc:
            future: asyncio.Future[None] = loop.create_future()
            future.set_exception(exc)
            chosen = {}
        else:
            future = asyncio.ensure_future(self._send_commit(chosen, None))
        if callback is not None:
            future.add_done_callback(lambda f: callback(chosen, _error_of(f)))
        else:
            future.add_done_callback(_error_of)  # marks the exception retrieved: no "never retrieved" noise
        return future

    def _maybe_auto_commit(self) -> None:
        if not self._auto_commit or time.monotonic() < self._next_auto_commit:
            return
        if self._auto_commit_task is not None and not self._auto_commit_task.done():
            return
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval
        changed = self._changed_positions()
        if changed and (self._membership is None or not self._sub.group_managed
                        or not self._membership.needs_join):
            self._auto_commit_task = asyncio.ensure_future(self._commit_quietly(changed, "auto commit"))

    def _changed_positions(self, partitions: Iterable[TopicPartition] | None = None) -> list[TopicPartition]:
        consumed = self._sub.consumed_offsets()
        known = self._require_group().known
        wanted = consumed if partitions is None else [tp for tp in partitions if tp in consumed]
        return [tp for tp in wanted if known.get(tp) != consumed[tp][0]]

    async def _commit_quietly(self, partitions: Iterable[TopicPartition], why: str) -> None:
        """Auto commit of the positions of ``partitions``: failures are logged, not raised."""
        consumed = self._sub.consumed_offsets()
        offsets = {tp: OffsetAndMetadata(consumed[tp][0], "", consumed[tp][1])
                   for tp in self._changed_positions(partitions)}
        if not offsets:
            return
        try:
            await self._send_commit(offsets, None)
            logger.debug("%s committed %s", why, offsets)
        except Exception as exc:
            logger.warning("%s of %s failed: %s", why, ", ".join(map(str, sorted(offsets))), exc)

    # -- closing ----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    async def _leave_group(self, m: Membership, reason: str) -> None:
        if self._join_task is not None:
            self._join_task.cancel()
            await asyncio.gather(self._join_task, return_exceptions=True)
            self._join_task = None
        owned = list(self._sub.assignment)
        if owned and m.state == STABLE and m.lost_reason is None:
            if self._auto_commit:
                await self._commit_quietly(owned, "commit before leaving")
            await self._call_listener("on_partitions_revoked", owned)
        elif owned:
            await self._call_listener("on_partitions_lost", owned)
        self._disown(owned)
        await m.leave(reason)

    async def close(self) -> None:
        """Commit (with auto commit), revoke, leave the group (dynamic members) and disconnect."""
        if self._closed:
            return
        try:
            if self._sub.group_managed and self._membership is not None:
                await self._leave_group(self._membership, "the consumer is closing")
            elif self._auto_commit and self._sub.assignment:
                await self._commit_quietly(list(self._sub.assignment), "commit on close")
        finally:
            self._closed = True
            tasks = [t for t in (self._join_task, self._positions_task, self._pattern_task, self._auto_commit_task)
                     if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._fetcher.close()
            if self._membership is not None:
                await self._membership.close()
            await self._cluster.close()
            self._wake()

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called; a closed consumer raises ``IllegalStateError`` when used."""
        return self._closed

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


# A listener call carried to the caller's thread: (callback, partitions, the loop's future of its result).
_CallbackCall = tuple[ListenerCallback, list[TopicPartition], "asyncio.Future[Any]"]


class _CallerThreadCallbacks:
    """Carries listener calls from the loop thread to the thread blocked in a ``Consumer`` call.

    The facade's blocking calls that may rebalance (poll, close, unsubscribe) wait on a queue
    instead of a bare future: the loop puts each callback there, the caller's thread runs it
    and sends the result back, and the loop goes on.  So callbacks run in the application's
    thread and may call the consumer (commit, seek) as Java allows.
    """

    def __init__(self, loop_thread: LoopThread) -> None:
        self._loop_thread = loop_thread
        self._channel: queue.SimpleQueue[_CallbackCall | None] | None = None

    async def run(self, callback: ListenerCallback, partitions: list[TopicPartition]) -> Any:
        channel = self._channel
        if channel is None:  # not inside a blocking facade call: nothing to hand it to
            raise IllegalStateError("a rebalance callback came outside poll(); it cannot run in the caller's thread")
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        channel.put((callback, partitions, reply))
        return await reply

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop, serving callbacks in this thread until it completes."""
        channel: queue.SimpleQueue[_CallbackCall | None] = queue.SimpleQueue()
        previous, self._channel = self._channel, channel
        loop = self._loop_thread.loop
        future = self._loop_thread.submit(coro)
        future.add_done_callback(lambda _: channel.put(None))
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                wait = None if deadline is None else max(deadline - time.monotonic(), 0)
                try:
                    item = channel.get(timeout=wait)
                except queue.Empty:
                    future.cancel()
                    raise ClientTimeoutError(f"operation did not finish within {timeout:g} s") from None
                if item is None:
                    break
                callback, partitions, reply = item
                try:
                    result, error = callback(partitions), None
                except BaseException as exc:  # handed to the loop, which logs it and raises it from poll
                    result, error = None, exc
                loop.call_soon_threadsafe(_settle, reply, result, error)
        except KeyboardInterrupt:
            future.cancel()
            raise
        finally:
            self._channel = previous
        return future.result()


def _settle(reply: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if reply.done():
        return
    if error is not None:
        reply.set_exception(error)
    else:
        reply.set_result(result)


class Consumer(SyncFacade):
    """The synchronous consumer: ``AsyncConsumer`` run on kwire's background loop thread.

    ``poll(timeout)`` returns a batch, ``list[ConsumerRecord]`` (empty when nothing came within
    ``timeout`` seconds).  Rebalance listener callbacks run in the thread that called
    ``poll`` (or ``close``/``unsubscribe``), during that call.  Commit callbacks
    (``commit_async``) run in the caller's thread too, at its next call of poll, commit or close.
    One thread at a time may use a Consumer.
    """

    def __init__(self, conf: Mapping[str, Any] | None = None, /, *, topics: Iterable[str] | None = None,
                 listener: RebalanceListener | None = None, **settings: Any) -> None:
        if isinstance(conf, str):
            raise TypeError(f"Consumer's first argument is the configuration dict; pass topics=[{conf!r}] to subscribe")
        self._loop = LoopThread.get()
        self._callbacks = _CallerThreadCallbacks(self._loop)
        # (callback, offsets, error) of commit_async completions, run at the caller's next call
        self._commit_callbacks: queue.SimpleQueue[
            tuple[CommitCallback, dict[TopicPartition, OffsetAndMetadata], BaseException | None]] = queue.SimpleQueue()

        async def make() -> AsyncConsumer:
            return AsyncConsumer(conf, listener=listener, **settings)

        self._consumer = self._loop.run(make())
        self._consumer._run_callback = self._callbacks.run
        if topics:
            self.subscribe(topics)

    @property
    def config(self) -> ConsumerConfig:
        """The consumer's settings, parsed and checked (read-only)."""
        return self._consumer.config

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self._loop.run(coro, timeout)

    @property
    def _twin(self) -> AsyncConsumer:
        return self._consumer

    def _run_commit_callbacks(self) -> None:
        while True:
            try:
                callback, offsets, error = self._commit_callbacks.get_nowait()
            except queue.Empty:
                return
            callback(offsets, error)

    # -- subscription -----------------------------------------------------------------------------
    subscribe = on_loop(AsyncConsumer.subscribe)

    @mirrors(AsyncConsumer.assign)
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._on_loop(self._consumer.assign, _partitions(partitions))

    @mirrors(AsyncConsumer.unsubscribe, blocking=True)
    def unsubscribe(self) -> None:
        self._callbacks.call(self._consumer.unsubscribe())

    subscription = on_loop(AsyncConsumer.subscription)
    assignment = on_loop(AsyncConsumer.assignment)

    # -- polling ----------------------------------------------------------------------------------
    def poll(self, timeout: float | None = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """A batch of records (up to ``max_records``, default ``max.poll.records``), waiting up to
        ``timeout`` seconds (None: no limit) for the first; an empty list when none came."""
        self._run_commit_callbacks()
        return self._callbacks.call(self._consumer.getmany(None if timeout is None else timeout * 1000, max_records))

    def poll_batches(self, timeout: float | None = 1.0, max_records: int | None = None) -> list[FetchedBatch]:
        """As ``poll``, with the data as whole batches (``FetchedBatch``): see
        ``AsyncConsumer.getbatches``."""
        self._run_commit_callbacks()
        return self._callbacks.call(
            self._consumer.getbatches(None if timeout is None else timeout * 1000, max_records))

    # -- positions --------------------------------------------------------------------------------
    seek = on_loop(AsyncConsumer.seek)
    seek_to_beginning = on_loop(AsyncConsumer.seek_to_beginning)
    seek_to_end = on_loop(AsyncConsumer.seek_to_end)
    seek_to_timestamp = blocking(AsyncConsumer.seek_to_timestamp)
    position = blocking(AsyncConsumer.position)
    offsets_for_times = blocking(AsyncConsumer.offsets_for_times)
    beginning_offsets = blocking(AsyncConsumer.beginning_offsets)
    end_offsets = blocking(AsyncConsumer.end_offsets)
    partitions_for = blocking(AsyncConsumer.partitions_for)
    pause = on_loop(AsyncConsumer.pause)
    resume = on_loop(AsyncConsumer.resume)
    paused = on_loop(AsyncConsumer.paused)
    highwater = on_loop(AsyncConsumer.highwater)

    # -- commits ----------------------------------------------------------------------------------
    committed = blocking(AsyncConsumer.committed)
    consumer_group_metadata = on_loop(AsyncConsumer.consumer_group_metadata)

    def commit(self, offsets: Offsets | None = None, timeout: float | None = None) -> None:
        """Commit and wait (the current positions when ``offsets`` is None)."""
        self._run_commit_callbacks()
        self._run(self._consumer.commit(offsets, timeout))

    def commit_async(self, offsets: Offsets | None = None,
                     callback: CommitCallback | None = None) -> concurrent.futures.Future[None]:
        """Start a commit; a ``concurrent.futures.Future`` of its completion.  ``callback(offsets,
        error_or_None)`` runs in this thread at the next poll/commit/close after it completes."""
        result: concurrent.futures.Future[None] = concurrent.futures.Future()

        def settle(chosen: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None) -> None:
            if callback is not None:
                self._commit_callbacks.put((callback, chosen, error))
            if error is None:
                result.set_result(None)
            else:
                result.set_exception(error)

        async def start() -> None:
            self._consumer.commit_async(offsets, settle)

        self._run(start())
        return result

    # -- closing ----------------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Commit (auto commit), revoke, leave the group and disconnect."""
        if self._consumer.closed:
            return
        try:
            self._callbacks.call(self._consumer.close(), timeout)
        finally:
            self._run_commit_callbacks()

    @property
    @mirrors(AsyncConsumer.closed)
    def closed(self) -> bool:
        return self._consumer.closed

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
