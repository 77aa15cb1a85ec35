"""Fetching records: Fetch requests to each partition's leader, and records out to the consumer.

One Fetch is in flight per leader at a time, for the assigned partitions it leads that are not
paused and have a position.  A response is kept raw (the records bytes per partition, with the
batch headers walked to know where the next fetch starts) and decoded a slice of a batch at a
time as the application takes records, so decoding never runs ahead of use (and records are
built just before use, so they die young: little work for the garbage collector).

Prefetch with bounded memory: a partition is fetched again while the application consumes its
previous answer, but at most two answers per partition wait in the buffer, and no new Fetch is
sent while the buffered bytes exceed ``fetch.max.bytes``.

Sessionless full fetches (KIP-227 session id 0, epoch -1).  Fetch v13+ names topics by id
(from the metadata); a topic whose id is unknown makes that request use v12 or older.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import ErrorCode, KafkaError, error_name
from kwire.protocol.records import iter_batches
from kwire.protocol.records.batch import RecordBatch, RecordReader
from kwire.protocol.records.legacy import LegacyRecordBatch
from kwire.protocol.records.record import ControlRecord

from .cluster import Cluster
from .errors import AuthenticationError, ClientError, SecurityProtocolMismatchError, is_retriable
from .metadata import NO_TOPIC_ID
from .subscription import NONE_RESET, PartitionState, SubscriptionState
from .types import ConsumerRecord, FetchedBatch, TopicPartition

if TYPE_CHECKING:
    from .config import ConsumerConfig

__all__ = ["Fetcher", "READ_COMMITTED", "READ_UNCOMMITTED", "isolation_level_code"]

# What a drain hands out: ConsumerRecords (drain) or FetchedBatches (drain_batches).
T = TypeVar("T")

logger = logging.getLogger("kwire.client.consumer")

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
_MAX_CHUNKS_PER_PARTITION = 2
_ABORT = 0  # control record type of an abort marker
_MIN_DECODE = 64  # records decoded at least per slice of a batch


def isolation_level_code(name: str) -> int:
    try:
        return {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}[name]
    except KeyError:
        raise ValueError(f"isolation.level must be read_uncommitted or read_committed, not {name!r}") from None


class _Chunk:
    """The records of one partition from one Fetch response: its batches, taken in order."""

    __slots__ = ("batches", "index", "aborted", "nbytes")

    def __init__(self, batches: list[RecordBatch | LegacyRecordBatch], aborted: list[tuple[int, int]],
                 nbytes: int) -> None:
        self.batches = batches
        self.index = 0
        self.aborted = aborted  # heap of (first offset, producer id) of aborted transactions
        self.nbytes = nbytes


class _PartitionBuffer:
    """Fetched, not yet consumed data of one partition.

    ``pending`` holds decoded records of the batch being consumed (from ``pending_pos``),
    ``reader`` the rest of that batch (v2) not decoded yet; ``chunks`` the raw answers after it.  ``fetch_offset`` is where the next fetch starts.
    """

    __slots__ = ("tp", "seek_epoch", "chunks", "pending", "pending_pos", "pending_next", "pending_epoch",
                 "reader", "fetch_offset", "aborted_pids")

    def __init__(self, tp: TopicPartition, seek_epoch: int, fetch_offset: int) -> None:
        self.tp = tp
        self.seek_epoch = seek_epoch
        self.chunks: deque[_Chunk] = deque()
        self.pending: list[ConsumerRecord] | None = None
        self.pending_pos = 0
        self.pending_next = 0
        self.pending_epoch = -1
        self.reader: RecordReader | None = None  # the rest of the batch being consumed, not decoded yet
        self.fetch_offset = fetch_offset
        self.aborted_pids: set[int] = set()

    @property
    def empty(self) -> bool:
        return self.pending is None and self.reader is None and not self.chunks


class Fetcher:
    """Fetches for one consumer; ``drain()`` hands out records, ``maybe_fetch()`` keeps fetches going."""

    def __init__(self, cluster: Cluster, config: ConsumerConfig, subscriptions: SubscriptionState,
                 wakeup: Callable[[], None]) -> None:
        self._cluster = cluster
        self._sub = subscriptions
        self._wakeup = wakeup
        self._min_bytes = config.fetch_min_bytes
        self._max_bytes = config.fetch_max_bytes
        self._max_wait_ms = config.fetch_max_wait_ms
        self._partition_max_bytes = config.max_partition_fetch_bytes
        self._isolation = isolation_level_code(config.isolation_level)
        self._check_crcs = config.check_crcs
        self._rack = config.client_rack or ""
        self._reset_strategy = config.auto_offset_reset
        self._buffers: dict[TopicPartition, _PartitionBuffer] = {}
        self._buffered_bytes = 0
        self._fetching_nodes: dict[int, asyncio.Task[None]] = {}
        self._fetching: set[TopicPartition] = set()
        self._node_retry_at: dict[int, float] = {}
        self._partition_retry_at: dict[TopicPartition, float] = {}
        self._errors: list[BaseException] = []
        self._refresh: asyncio.Task[None] | None = None
        self._refresh_wanted = False
        self._refresh_failures = 0
        self._refresh_not_before = 0.0
        self._closed = False
        # The newest Fetch version to use (None: the newest both sides speak), for brokers that
        # misbehave in newer versions and for tests of the older ones.
        self.max_version: int | None = None

    # -- handing out records ----------------------------------------------------------------------
    def drain(self, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` buffered records, partition by partition, advancing positions.

        Raises an error a fetch stored for the application (once), after any records already
        taken in an earlier call were handed out.
        """
        return self._drain(max_records, self._take)

    def _drain(self, max_records: int, take: Callable[[_PartitionBuffer, PartitionState, int, list[T]], int]
               ) -> list[T]:
        """What ``take(buf, state, need, out)`` puts in ``out`` for each partition in turn,
        until it counted ``max_records`` records."""
        if self._errors:
            raise self._errors.pop(0)
        out: list[T] = []
        if not self._buffers:
            return out
        assignment = self._sub.assignment
        need = max_records
        for tp in list(self._buffers):
            buf = self._buffers[tp]
            state = assignment.get(tp)
            if state is None or state.seek_epoch != buf.seek_epoch:
                self._drop(tp)
                continue
            if state.paused:
                continue
            try:
                need -= take(buf, state, need, out)
            except Exception as exc:
                if not out:
                    raise
                self._errors.append(exc)  # hand out what was read; the error comes next
                break
            # Fairness: a partition that still has data goes to the back of the line.
            del self._buffers[tp]
            if buf.empty:
                continue
            self._buffers[tp] = buf
            if need <= 0:
                break
        return out

    def _take(self, buf: _PartitionBuffer, state: PartitionState, need: int, out: list[ConsumerRecord]) -> int:
        got = 0
        while got < need:
            pending = buf.pending
            if pending is not None:
                pos = buf.pending_pos
                left = len(pending) - pos
                if left <= need - got:
                    out += pending if pos == 0 else pending[pos:]
                    got += left
                    buf.pending = None
                    state.position = buf.pending_next if buf.reader is None else pending[-1][2] + 1
                else:
                    end = pos + need - got
                    out += pending[pos:end]
                    buf.pending_pos = end
                    state.position = pending[end - 1][2] + 1
                    got = need
                state.leader_epoch = buf.pending_epoch
                continue
            if buf.reader is not None:
                self._read_more(buf, state, need - got)
                continue
            if not self._decode_next_batch(buf, state):
                break
        return got

    @staticmethod
    def _read_more(buf: _PartitionBuffer, state: PartitionState, n: int) -> None:
        """Decode the next records of the batch being consumed into ``buf.pending``: about as
        many as the application takes now, so records are built just before use and die young
        (cheap for the garbage collector) instead of waiting in a whole decoded batch."""
        # Called only while the batch being consumed has records not decoded yet (a reader).
        reader: RecordReader = buf.reader  # type: ignore[assignment]
        records = reader.take(max(n, _MIN_DECODE))  # a corrupt record raises here, again at every poll
        if reader.done:
            buf.reader = None
        # A partition with buffered data has a position: a seek or reset drops its buffer.
        position: int = state.position  # type: ignore[assignment]
        if records and records[0][2] < position:
            # A batch that starts before the position (a seek into it, a compressed batch).
            records = [r for r in records if r[2] >= position]
        if records:
            buf.pending = records
            buf.pending_pos = 0
        elif buf.reader is None:
            state.position = buf.pending_next

    def _decode_next_batch(self, buf: _PartitionBuffer, state: PartitionState) -> bool:
        """Open the next batch that has records for the application (``buf.reader``, or decoded
        into ``buf.pending`` for a legacy message set).  False when the buffer has no batch left."""
        while True:
            batch = self._next_batch(buf, state)
            if batch is None:
                return False
            tp = buf.tp
            chunk = buf.chunks[0]
            try:
                if isinstance(batch, RecordBatch):  # magic 2 (iter_batches gives legacy sets their own class)
                    # The decoder builds the ConsumerRecords itself (one tuple per record), a
                    # slice at a time as the application takes them (_read_more).
                    buf.reader = batch.reader((ConsumerRecord, tp[0], tp[1]))
                    buf.pending_next = batch.next_offset
                    buf.pending_epoch = batch.partition_leader_epoch
                    return True
                pending = self._legacy_records(batch, tp)
            except Exception:
                chunk.index -= 1  # the application sees the error again until it seeks past the batch
                raise
            if self._hand_out_legacy(buf, state, batch, pending):
                return True

    def _next_batch(self, buf: _PartitionBuffer, state: PartitionState) -> RecordBatch | LegacyRecordBatch | None:
        """The next batch of the buffer that may hold records for the application, taken from
        its chunk; control batches and aborted transactions (read_committed) are stepped over.
        None when the buffer has no batch left."""
        while buf.chunks:
            chunk = buf.chunks[0]
            if chunk.index >= len(chunk.batches):
                buf.chunks.popleft()
                self._buffered_bytes -= chunk.nbytes
                continue
            batch = chunk.batches[chunk.index]
            if self._check_crcs:
                batch.validate()
            chunk.index += 1
            next_offset = batch.next_offset
            if self._isolation == READ_COMMITTED and batch.producer_id >= 0:
                aborted, pids = chunk.aborted, buf.aborted_pids
                last = batch.last_offset
                while aborted and aborted[0][0] <= last:
                    pids.add(heapq.heappop(aborted)[1])
                if batch.is_control:
                    marker = batch.records()[:1]  # a control batch holds one ControlRecord
                    if marker and isinstance(marker[0], ControlRecord) and marker[0].type == _ABORT:
                        pids.discard(batch.producer_id)
                    state.position = next_offset
                    continue
                if batch.is_transactional and batch.producer_id in pids:
                    state.position = next_offset
                    continue
            # A partition with buffered data has a position: a seek or reset drops its buffer.
            position: int = state.position  # type: ignore[assignment]
            if batch.is_control or next_offset <= position:
                state.position = max(position, next_offset)
                continue
            return batch
        return None

    @staticmethod
    def _hand_out_legacy(buf: _PartitionBuffer, state: PartitionState, batch: LegacyRecordBatch,
                         pending: list[ConsumerRecord]) -> bool:
        """Put the records of a legacy message set at or after the position in ``buf.pending``;
        False (and the position past the set) when none are."""
        position: int = state.position  # type: ignore[assignment]  # buffered data: a position
        if pending and pending[0][2] < position:
            # A batch that starts before the position (a seek into it, a compressed batch).
            pending = [r for r in pending if r[2] >= position]
        if not pending:
            state.position = batch.next_offset
            return False
        buf.pending = pending
        buf.pending_pos = 0
        buf.pending_next = batch.next_offset
        buf.pending_epoch = -1
        return True

    # -- handing out whole batches ----------------------------------------------------------------
    def drain_batches(self, max_records: int) -> list[FetchedBatch]:
        """Buffered data as whole batches, for consumers that decode records themselves (a
        columnar reader): ``FetchedBatch`` items, partition by partition, advancing positions
        past each.  A v2 batch comes undecoded (its records before ``start`` are not the
        application's: a seek into the batch); a legacy message set, or the rest of a batch that
        ``drain()`` began, comes as decoded records.  At least one batch per call when any is
        buffered, then whole batches while their records fit in ``max_records``.  Errors as in
        ``drain()``."""
        return self._drain(max_records, self._take_batches)

    def _take_batches(self, buf: _PartitionBuffer, state: PartitionState, need: int, out: list[FetchedBatch]
                      ) -> int:
        tp = buf.tp
        got = 0
        if buf.pending is not None or buf.reader is not None:
            got += self._rest_of_batch(buf, state, out)
        while got < need or not out:
            batch = self._next_batch(buf, state)
            if batch is None:
                break
            if not isinstance(batch, RecordBatch):  # a legacy message set (magic 0 or 1)
                try:
                    pending = self._legacy_records(batch, tp)
                except Exception:
                    buf.chunks[0].index -= 1
                    raise
                if self._hand_out_legacy(buf, state, batch, pending):
                    got += self._rest_of_batch(buf, state, out)
                continue
            start: int = state.position  # type: ignore[assignment]  # buffered data: a position (see _read_more)
            state.position = batch.next_offset
            state.leader_epoch = batch.partition_leader_epoch
            out.append(FetchedBatch(tp, batch, start, None))
            got += batch.record_count
        return got

    @staticmethod
    def _rest_of_batch(buf: _PartitionBuffer, state: PartitionState, out: list[FetchedBatch]) -> int:
        """The records of the batch being consumed not handed out yet, as one ``FetchedBatch``."""
        records = [] if buf.pending is None else buf.pending[buf.pending_pos:]
        if buf.reader is not None:
            records += buf.reader.take(1 << 62)  # a corrupt record raises here, as in drain()
            buf.reader = None
            position: int = state.position  # type: ignore[assignment]  # buffered data: a position
            if records and records[0][2] < position:
                records = [r for r in records if r[2] >= position]
        buf.pending = None
        state.position = buf.pending_next
        state.leader_epoch = buf.pending_epoch
        if records:
            out.append(FetchedBatch(buf.tp, None, records[0][2], records))
        return len(records)

    @staticmethod
    def _legacy_records(batch: LegacyRecordBatch, tp: TopicPartition) -> list[ConsumerRecord]:
        """The records of a magic 0/1 message set as ConsumerRecords (headers: none, as ())."""
        ts = batch.timestamp_type  # None in magic 0, which has no timestamps
        ts_type = -1 if ts is None else int(ts)
        new = tuple.__new__
        cr = ConsumerRecord
        topic, partition = tp
        return [new(cr, (topic, partition, o, t, ts_type, k, v, tuple(h), -1)) for o, t, k, v, h in batch.records()]

    def _drop(self, tp: TopicPartition) -> None:
        buf = self._buffers.pop(tp, None)
        if buf is not None:
            self._buffered_bytes -= sum(c.nbytes for c in buf.chunks)

    def has_buffered(self, tp: TopicPartition) -> bool:
        return tp in self._buffers

    def on_assignment_change(self) -> None:
        """Drop buffered data of partitions no longer assigned (or seeked since they were fetched)."""
        assignment = self._sub.assignment
        for tp, buf in list(self._buffers.items()):
            state = assignment.get(tp)
            if state is None or state.seek_epoch != buf.seek_epoch:
                self._drop(tp)

    # -- sending fetches --------------------------------------------------------------------------
    def maybe_fetch(self) -> None:
        """Send a Fetch to each leader with fetchable partitions and none in flight."""
        if self._closed or self._buffered_bytes >= self._max_bytes:
            return
        metadata = self._cluster.metadata
        now = time.monotonic()
        by_node: dict[int, list[tuple[PartitionState, int]]] = {}
        # Nodes that lead a partition whose prefetch buffer is full: it will want a fetch soon.
        busy_nodes: set[int] = set()
        # Per node: whether every partition its fetch would name is caught up (at the high
        # watermark, or the last stable offset with read_committed, as last seen).
        caught_up: dict[int, bool] = {}
        committed = self._isolation == READ_COMMITTED
        for state in self._sub.fetchable():
            tp = state.tp
            if tp in self._fetching:
                continue
            buf = self._buffers.get(tp)
            if buf is not None and buf.seek_epoch != state.seek_epoch:
                self._drop(tp)
                buf = None
            if buf is not None and len(buf.chunks) >= _MAX_CHUNKS_PER_PARTITION:
                leader = metadata.leader(*tp)
                if leader is not None:
                    busy_nodes.add(leader)
                continue
            retry_at = self._partition_retry_at.get(tp)
            if retry_at is not None:
                if retry_at > now:
                    continue
                del self._partition_retry_at[tp]
            leader = metadata.leader(*tp)
            if leader is None:
                self._refresh_wanted = True
                continue
            if leader in self._fetching_nodes or self._node_retry_at.get(leader, 0.0) > now:
                continue
            # fetchable(): the position is known.
            offset: int = state.position if buf is None else buf.fetch_offset  # type: ignore[assignment]
            end = state.last_stable_offset if committed else state.high_watermark
            by_node.setdefault(leader, []).append((state, offset))
            caught_up[leader] = caught_up.get(leader, True) and 0 <= end <= offset
        for node in busy_nodes:
            if caught_up.get(node):
                # A fetch naming only caught-up partitions waits fetch.max.wait.ms at the broker,
                # and holds the node's one fetch slot meanwhile: the partitions whose buffers are
                # full now could not be refilled as they drain, and the application would starve.
                # The caught-up partitions go with the next fetch those partitions need.
                del by_node[node]
        for node, parts in by_node.items():
            for state, _ in parts:
                self._fetching.add(state.tp)
            self._fetching_nodes[node] = asyncio.ensure_future(self._fetch(node, parts))
        if self._refresh_wanted:
            self._start_metadata_refresh()

    def _start_metadata_refresh(self) -> None:
        if self._refresh is not None or self._closed:
            return
        wait = self._refresh_not_before - time.monotonic()
        self._refresh = asyncio.ensure_future(self._refresh_metadata(max(wait, 0.0)))

    async def _refresh_metadata(self, wait: float) -> None:
        try:
            if wait:
                await asyncio.sleep(wait)
            self._refresh_wanted = False
            topics = {tp.topic for tp in self._sub.assignment}
            if topics:
                metadata = await self._cluster.refresh_metadata(topics)
            # Leaders still missing (a topic not created yet, an election going on) count as a
            # failure too: the refreshes back off exponentially until they appear.
            if topics and any(metadata.leader(*tp) is None for tp in self._sub.assignment):
                self._refresh_failures += 1
            else:
                self._refresh_failures = 0
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._refresh_failures += 1
            logger.info("metadata refresh for fetching failed: %s", exc)
            self._hand_out_security_error(exc)
        finally:
            self._refresh = None
            # Do not ask again before the backoff, however often leaders turn out missing.
            self._refresh_not_before = time.monotonic() + self._cluster.retry_backoff.delay(self._refresh_failures)
        if not self._closed:
            self.maybe_fetch()
            self._wakeup()

    def _hand_out_security_error(self, exc: BaseException) -> None:
        """A refused login or TLS handshake reaches the application from poll (as in Java), not just
        the log: retrying cannot fix it.  One at a time, however many fetches failed with it."""
        if isinstance(exc, (AuthenticationError, SecurityProtocolMismatchError)) and not any(
                isinstance(e, (AuthenticationError, SecurityProtocolMismatchError)) for e in self._errors):
            self._errors.append(exc)

    def _build_request(self, parts: list[tuple[PartitionState, int]], with_ids: bool) -> messages.FetchRequest:
        metadata = self._cluster.metadata
        topics: dict[str, list[messages.FetchRequest.FetchTopic.FetchPartition]] = {}
        for state, offset in parts:
            topics.setdefault(state.tp.topic, []).append(messages.FetchRequest.FetchTopic.FetchPartition(
                partition=state.tp.partition, current_leader_epoch=metadata.leader_epoch(*state.tp),
                fetch_offset=offset, partition_max_bytes=self._partition_max_bytes))
        request = messages.FetchRequest(
            replica_id=-1, max_wait_ms=self._max_wait_ms, min_bytes=self._min_bytes, max_bytes=self._max_bytes,
            isolation_level=self._isolation, session_id=0, session_epoch=-1, rack_id=self._rack,
            topics=[messages.FetchRequest.FetchTopic(
                topic=name, topic_id=metadata.topic_id(name) if with_ids else NO_TOPIC_ID, partitions=ps)
                for name, ps in topics.items()])
        return request

    async def _fetch(self, node: int, parts: list[tuple[PartitionState, int]]) -> None:
        sent = {state.tp: (state.seek_epoch, offset) for state, offset in parts}
        try:
            conn = await self._cluster.connection(node)
            low = 4 if self._isolation == READ_COMMITTED else 0
            metadata = self._cluster.metadata
            ids = {metadata.topic_id(tp.topic): tp.topic for tp in sent}
            # v13+ names topics by id: a topic without a known id has to go by name (v12).
            high = None if NO_TOPIC_ID not in ids else 12
            if self.max_version is not None:
                high = self.max_version if high is None else min(high, self.max_version)
            version = conn.version_for(ApiKey.FETCH, low, high)
            request = self._build_request(parts, with_ids=version >= 13)
            response = await conn.send(request, version=version,
                                       timeout=self._cluster.request_timeout + self._max_wait_ms / 1000)
            self._handle_response(node, response, version, sent, ids)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not is_retriable(exc) and not isinstance(exc, ClientError):
                logger.warning("fetch from node %d failed: %r", node, exc)
            else:
                logger.info("fetch from node %d failed: %s", node, exc)
            self._hand_out_security_error(exc)
            self._node_retry_at[node] = time.monotonic() + self._cluster.retry_backoff.delay(0)
            self._refresh_wanted = True
        finally:
            self._fetching.difference_update(sent)
            if self._fetching_nodes.get(node) is asyncio.current_task():
                del self._fetching_nodes[node]
        if not self._closed:
            self.maybe_fetch()
            self._wakeup()

    def _handle_response(self, node: int, response: messages.FetchResponse, version: int,
                         sent: dict[TopicPartition, tuple[int, int]], ids: dict[uuid.UUID, str]) -> None:
        if response.error_code:
            logger.info("fetch from node %d refused: %s", node, error_name(response.error_code))
            self._node_retry_at[node] = time.monotonic() + self._cluster.retry_backoff.delay(0)
            self._refresh_wanted = True
            return
        assignment = self._sub.assignment
        for topic in response.responses:
            name = ids.get(topic.topic_id) if version >= 13 else topic.topic
            if name is None:
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                asked = sent.get(tp)
                state = assignment.get(tp)
                if asked is None or state is None or state.seek_epoch != asked[0]:
                    continue  # not ours any more, or the application moved the position since
                buf = self._buffers.get(tp)
                expected = state.position if buf is None else buf.fetch_offset
                if expected != asked[1]:
                    continue
                if p.error_code:
                    self._partition_error(tp, state, p.error_code, asked[1], node)
                    continue
                state.high_watermark = p.high_watermark
                state.last_stable_offset = p.last_stable_offset
                state.log_start_offset = p.log_start_offset
                records = p.records
                if not records:
                    continue
                batches = list(iter_batches(records))
                if not batches:
                    # Only a broker older than KIP-74 (Fetch v3) cuts a batch larger than the limit.
                    logger.warning("%s: the fetch at offset %d returned %d bytes holding no whole batch; "
                                   "raise max.partition.fetch.bytes", tp, asked[1], len(records))
                    self._partition_retry_at[tp] = time.monotonic() + self._cluster.retry_backoff.delay(0)
                    continue
                aborted = []
                if self._isolation == READ_COMMITTED and p.aborted_transactions:
                    aborted = [(a.first_offset, a.producer_id) for a in p.aborted_transactions]
                    heapq.heapify(aborted)
                if buf is None:
                    buf = self._buffers[tp] = _PartitionBuffer(tp, state.seek_epoch, asked[1])
                buf.chunks.append(_Chunk(batches, aborted, len(records)))
                buf.fetch_offset = batches[-1].next_offset
                self._buffered_bytes += len(records)

    def _partition_error(self, tp: TopicPartition, state: PartitionState, code: int, offset: int, node: int) -> None:
        error = KafkaError.for_code(code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            reason = (f"fetch offset {offset} is out of range (log start {state.log_start_offset}, "
                      f"high watermark {state.high_watermark} as last seen)")
            self._drop(tp)
            strategy = self._reset_strategy
            if strategy == NONE_RESET:
                state.request_reset(NONE_RESET, reason)  # the consumer raises NoOffsetForPartitionError
            else:
                logger.info("%s: %s; resetting to %s", tp, reason, strategy)
                state.request_reset(strategy, reason)
            return
        self._partition_retry_at[tp] = time.monotonic() + self._cluster.retry_backoff.delay(0)
        if error.retriable:
            logger.info("fetch of %s from node %d: %s; refreshing metadata", tp, node, error.name)
            self._refresh_wanted = True
        else:
            self._errors.append(error(f"fetching {tp} from node {node}"))

    # -- closing ----------------------------------------------------------------------------------
    async def close(self) -> None:
        self._closed = True
        tasks = [*self._fetching_nodes.values(), *([self._refresh] if self._refresh else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._buffers.clear()
        self._buffered_bytes = 0
