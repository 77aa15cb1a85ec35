"""Per-partition batching of produced records, and the memory they hold.

``send`` appends a record to its partition's open batch; the sender takes batches out when they
are full (``batch.size``), old enough (``linger.ms``), or wanted sooner (flush, close, memory
exhausted).  A partition's batches leave in the order they were made, and a batch that must be
sent again goes back to the front of its partition's queue, so each partition keeps its order.

A batch keeps its records as columns (lists of keys, values and timestamps, and of headers once a
record has some) and is encoded only when it is first sent, when the producer id, epoch and
sequence go into the header.  Columns, not a tuple per record: a batch holds up to
``buffer.memory`` of records, and each tuple was one more object for the cyclic garbage collector
to walk and to be triggered by.  Records without headers are encoded by runs of one timestamp with
the bulk path's compiled encoder (``encode_records``) where it is built; batches with headers,
legacy message sets, and everything when it is not built, by the builders.

The bulk path (``append_many``, behind ``produce_many``) encodes runs of records as they arrive
instead (``kwire.protocol.records.bulk``): such a batch keeps encoded record sections, its tokens
are spans of a bulk call's records, and only its header is written when it is sent.  A batch is
one kind or the other: records of the other kind close it and start the partition's next batch.

Memory: every record counts its estimated encoded size against ``buffer.memory`` from ``send`` until
its batch completes.  ``send`` waits (FIFO, up to ``max.block.ms``) while the budget is spent.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kwire.protocol.records import Compression, LegacyMessageSetBuilder, RecordBatchBuilder
from kwire.protocol.records.bulk import SealedBatch, compiled, encode_records, seal_batch, seal_batch_parts

from .errors import ClientTimeoutError
from .idempotence import wire_sequence
from .types import TopicPartition

if TYPE_CHECKING:
    import asyncio

__all__ = ["ProducerBatch", "RecordAccumulator", "record_size", "BATCH_OVERHEAD"]

BATCH_OVERHEAD = 61  # a v2 batch header
# Without the compiled encoder, RecordBatchBuilder's table-driven loop is the faster Python.
_RUNS = compiled()
# Per record beside key, value and headers: length, attributes, timestamp and offset deltas, key
# and value lengths, header count (varints at their widest that matter here).
_RECORD_OVERHEAD = 21


def record_size(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None) -> int:
    """An upper estimate of a record's encoded size (before compression)."""
    size = _RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if headers:
        for hkey, hvalue in headers:
            size += 10 + len(hkey) + (len(hvalue) if hvalue is not None else 0)
    return size


class ProducerBatch:
    """Records for one partition, sent together in one Produce request."""

    __slots__ = ("tp", "keys", "values", "timestamps", "headers", "tokens", "size", "created", "deadline", "open", "attempts", "retry_at",
                 "producer_id", "epoch", "sequence", "data", "data_magic", "sent", "ambiguous", "last_error",
                 "waiter", "completed", "sections", "count", "base_ts", "max_ts")

    def __init__(self, tp: TopicPartition, created: float, deadline: float):
        self.tp = tp
        # Per record (single-record batches): key, value, timestamp; headers stays None until a
        # record with headers comes (then None for those without).
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[Any] | None = None
        self.tokens: list[Any] = []      # per record, what the producer completes (a future...)
        self.size = BATCH_OVERHEAD       # estimated encoded bytes, counted against buffer.memory
        self.created = created
        self.deadline = deadline         # created + delivery.timeout.ms
        self.open = True                 # still taking records
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_id = -1
        self.epoch = -1
        self.sequence = -1
        self.data: bytes | SealedBatch | None = None   # encoded, kept for resends
        self.data_magic = -1
        self.sent = False                # handed to a connection at least once under its stamp
        self.ambiguous = False           # an attempt ended without an answer: maybe written
        self.last_error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None  # made on demand by flush()
        self.completed = False
        # A bulk batch (append_many): encoded record sections instead of records, ``count``
        # records in them, their first and greatest timestamps; tokens are spans of bulk calls.
        self.sections: list[bytes] | None = None
        self.count = 0
        self.base_ts = self.max_ts = -1

    def __repr__(self) -> str:
        return f"<ProducerBatch {self.tp} {self.record_count} records seq {self.sequence}>"

    @property
    def record_count(self) -> int:
        return self.count if self.sections is not None else len(self.values)

    def add(self, key: bytes | None, value: bytes | None, timestamp: int, headers: Any, token: Any) -> None:
        """Append one record to the columns."""
        self.keys.append(key)
        self.values.append(value)
        self.timestamps.append(timestamp)
        if headers is not None or self.headers is not None:
            if self.headers is None:
                self.headers = [None] * (len(self.values) - 1)
            self.headers.append(headers)
        self.tokens.append(token)

    def records(self) -> Iterator[tuple[bytes | None, bytes | None, int, Any]]:
        """The records as ``(key, value, timestamp, headers)``."""
        headers = self.headers if self.headers is not None else [None] * len(self.values)
        return zip(self.keys, self.values, self.timestamps, headers, strict=True)

    def set_producer_state(self, producer_id: int, epoch: int, sequence: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.sequence = sequence
        self.data = None
        self.sent = False
        self.ambiguous = False  # (of this numbering: it has not been sent yet)

    def encode(self, compression: int, magic: int, *, transactional: bool = False,
               gathered: bool = False) -> bytes | SealedBatch:
        """The batch's bytes (built once, and again after the producer state changed).
        ``transactional``: a transactional producer's batch (v2 only; the attribute bit set).
        ``gathered``: a bulk batch may come in its pieces (a ``SealedBatch``), for a sender that
        gather-writes them (the blocking producer's ``socket.sendmsg``)."""
        if self.data is not None and self.data_magic == magic:
            data = self.data
            return data if gathered or isinstance(data, bytes) else data.read()
        self.data_magic = magic
        base_sequence = wire_sequence(self.sequence) if self.sequence >= 0 else -1
        if self.sections is not None:
            if magic != 2:
                raise ValueError("bulk batches are record batches (magic 2)")
            sealed = seal_batch_parts(self.sections, self.count, self.base_ts, self.max_ts,
                                      compression=compression, producer_id=self.producer_id,
                                      producer_epoch=self.epoch, base_sequence=base_sequence,
                                      transactional=transactional)
            self.data = sealed if gathered else sealed.read()
            return self.data
        if magic == 2 and self.headers is None and _RUNS:
            timestamps = self.timestamps
            self.data = seal_batch(_timestamp_runs(self.values, self.keys, timestamps), len(timestamps),
                                   timestamps[0], max(timestamps), compression=compression,
                                   producer_id=self.producer_id, producer_epoch=self.epoch,
                                   base_sequence=base_sequence,
                                   transactional=transactional)
            return self.data
        builder: RecordBatchBuilder | LegacyMessageSetBuilder
        if magic == 2:
            builder = RecordBatchBuilder(compression=compression, producer_id=self.producer_id,
                                         producer_epoch=self.epoch,
                                         base_sequence=base_sequence,
                                         transactional=transactional)
            builder.extend(self.records())
        else:
            builder = LegacyMessageSetBuilder(magic, compression=compression)
            for key, value, timestamp in zip(self.keys, self.values, self.timestamps, strict=True):
                builder.append(key, value, timestamp if magic else None)
        self.data = builder.build()
        return self.data

    def done(self) -> asyncio.Future[None]:
        """A future resolved when the batch completes (for flush)."""
        if self.waiter is None:
            import asyncio  # here: the blocking producer (no event loop) never waits on a batch

            self.waiter = asyncio.get_running_loop().create_future()
            if self.completed:
                self.waiter.set_result(None)
        return self.waiter


class RecordAccumulator:
    """The producer's queued batches per partition, and its memory budget.  Event loop only."""

    def __init__(self, *, batch_size: int, linger: float, delivery_timeout: float, buffer_memory: int,
                 compression: int = Compression.NONE, wakeup: Callable[[], None] = lambda: None,
                 batch_records: int | None = None) -> None:
        self.batch_size = batch_size
        # librdkafka's batch.num.messages: a batch is full at this many records too (Java has no such bound).
        self.batch_records = batch_records
        self.linger = linger
        self.delivery_timeout = delivery_timeout
        self.buffer_memory = buffer_memory
        self.compression = compression
        self.wakeup = wakeup               # tells the sender that something became sendable
        self.queues: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.buffered = 0                  # estimated bytes of records not yet completed
        self.record_count = 0              # records not yet completed
        self._memory_waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    # -- appending --------------------------------------------------------------------------------
    def append(self, tp: TopicPartition, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
               token: Any, size: int, *, new_batch: bool = True) -> bool:
        """Add a record (key, value, timestamp, headers) with its ``token`` to ``tp``'s open batch.

        Returns False, adding nothing, when a new batch would be needed and ``new_batch`` is False
        (the sticky partitioner then picks another partition first).
        """
        queue = self.queues.get(tp)
        if queue:
            batch = queue[-1]
            if batch.open:
                if batch.size + size <= self.batch_size and batch.sections is None:
                    if headers is None and batch.headers is None:
                        # batch.add's common case, inline: this runs once per record.
                        batch.keys.append(key)
                        batch.values.append(value)
                        batch.timestamps.append(timestamp)
                        batch.tokens.append(token)
                    else:
                        batch.add(key, value, timestamp, headers, token)
                    batch.size += size
                    self.buffered += size
                    self.record_count += 1
                    if self.batch_records is not None and len(batch.values) >= self.batch_records:
                        batch.open = False
                        self.wakeup()
                    return True
                batch.open = False
                self.wakeup()  # a full batch is ready at once
        if not new_batch:
            return False
        now = time.monotonic()
        batch = ProducerBatch(tp, now, now + self.delivery_timeout)
        batch.add(key, value, timestamp, headers, token)
        batch.size += size
        if batch.size >= self.batch_size or self.batch_records == 1:
            batch.open = False  # one record as big as a batch goes alone
        if queue is None:
            queue = self.queues[tp] = collections.deque()
        queue.append(batch)
        self.incomplete.add(batch)
        self.buffered += batch.size
        self.record_count += 1
        self.wakeup()  # the sender (re)schedules its linger timer
        return True

    def append_many(self, tp: TopicPartition, values: Sequence[bytes | None], keys: Sequence[bytes | None] | bytes | None,
                    headers: bytes, start: int, stop: int, timestamp: int,
                    token: Any, max_record: int) -> tuple[int, bool]:
        """Encode records ``values[start:stop]`` (keys: a list, or one key for all; headers: the
        encoded headers of every record) into ``tp``'s open bulk batch, or a new one, while they fit.

        Returns ``(next, closed)``: the index of the first record not taken, and whether the batch
        was closed (full by ``batch.size`` or ``batch.num.messages``).  ``next == start`` and not
        closed: record ``start`` alone is larger than ``max_record`` (the caller fails it).  The
        batch's tokens get ``(token, first offset delta, start, next)``.
        """
        queue = self.queues.get(tp)
        batch = queue[-1] if queue else None
        if batch is not None and (not batch.open or batch.sections is None):
            if batch.open:
                batch.open = False  # a batch of single records: the bulk records go in the next one
                self.wakeup()
            batch = None
        limit = self.batch_records or 1 << 31
        if batch is None:
            first_delta, room, count_room, ts_delta = 0, self.batch_size - BATCH_OVERHEAD, limit, 0
        else:
            first_delta, room, count_room = batch.count, self.batch_size - batch.size, limit - batch.count
            ts_delta = timestamp - batch.base_ts
        section, end = encode_records(values, keys, headers, start, stop, first_delta, ts_delta, room, count_room,
                                      max_record)
        if end == start:
            if batch is None:
                return start, False  # too large to send at all
            batch.open = False       # full: the next call starts a new batch
            self.wakeup()
            return start, True
        taken = end - start
        if batch is None:
            now = time.monotonic()
            batch = ProducerBatch(tp, now, now + self.delivery_timeout)
            batch.sections = []
            batch.base_ts = batch.max_ts = timestamp
            if queue is None:
                queue = self.queues[tp] = collections.deque()
            queue.append(batch)
            self.incomplete.add(batch)
            self.buffered += BATCH_OVERHEAD
        # A bulk batch (made above, or open with its sections: checked at the top); no check here
        # on the produce path just for mypy.
        batch.sections.append(section)  # type: ignore[union-attr]
        batch.tokens.append((token, batch.count, start, end))
        batch.count += taken
        batch.size += len(section)
        if timestamp > batch.max_ts:
            batch.max_ts = timestamp
        self.buffered += len(section)
        self.record_count += taken
        closed = end < stop or batch.size >= self.batch_size or batch.count >= limit
        if closed:
            batch.open = False
        self.wakeup()
        return end, closed

    # -- taking out and putting back --------------------------------------------------------------
    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch to be sent again back in its partition's queue, before every newer batch."""
        queue = self.queues.setdefault(batch.tp, collections.deque())
        batch.open = False
        # Batches to resend sit at the front, oldest (lowest sequence, or creation) first.
        i = 0
        for i, queued in enumerate(queue):  # noqa: B007 - the index is the answer
            if queued.attempts == 0 or _before(batch, queued):
                break
        else:
            i = len(queue)
        queue.insert(i, batch)

    def complete(self, batch: ProducerBatch) -> None:
        """Release a finished batch's memory (its records' outcomes are the caller's business)."""
        if batch.completed:
            return
        batch.completed = True
        self.incomplete.discard(batch)
        self.buffered -= batch.size
        self.record_count -= batch.record_count
        if batch.waiter is not None and not batch.waiter.done():
            batch.waiter.set_result(None)
        if self._memory_waiters:
            self._wake_memory_waiters()

    def expired(self, now: float) -> list[ProducerBatch]:
        """Take out the queued (not in flight) batches whose delivery timeout has passed."""
        gone = []
        for queue in self.queues.values():
            # Deadlines grow from the front (a resent batch is older than those behind it).
            while queue and queue[0].deadline <= now:
                gone.append(queue.popleft())
        return gone

    def abort_all(self) -> list[ProducerBatch]:
        """Take out every queued batch (closing without waiting)."""
        gone = [b for queue in self.queues.values() for b in queue]
        self.queues.clear()
        return gone

    # -- memory -----------------------------------------------------------------------------------
    @property
    def memory_exhausted(self) -> bool:
        """Someone waits for memory: everything queued should go out now, linger or not."""
        return bool(self._memory_waiters)

    def has_room(self, size: int) -> bool:
        return not self._memory_waiters and self.buffered + size <= self.buffer_memory

    async def wait_for_room(self, size: int, timeout: float) -> None:
        """Wait (first come, first served) until ``size`` bytes fit in buffer.memory."""
        if self.has_room(size):
            return
        import asyncio  # here: the blocking producer sends until there is room instead

        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        entry = (size, waiter)
        self._memory_waiters.append(entry)
        self.wakeup()  # everything queued goes out now: that is what frees memory
        timer = loop.call_later(timeout, _time_out, waiter)
        try:
            await waiter
        except asyncio.TimeoutError:
            raise ClientTimeoutError(
                f"buffer.memory ({self.buffer_memory} bytes) stayed full for max.block.ms "
                f"({timeout * 1000:g} ms): {self.buffered} bytes of records are waiting to be delivered") from None
        finally:
            timer.cancel()
            if not waiter.done() or waiter.cancelled() or waiter.exception() is not None:
                # Gave up (timed out or cancelled): leave the line, and let the next one try.
                try:
                    self._memory_waiters.remove(entry)
                except ValueError:
                    pass
                if self._memory_waiters:
                    self._wake_memory_waiters()

    def _wake_memory_waiters(self) -> None:
        """Let waiters in, in order, while their records fit (the first one always, once the
        buffer is empty)."""
        waiters = self._memory_waiters
        room = self.buffer_memory - self.buffered
        while waiters:
            size, waiter = waiters[0]
            if waiter.done():
                waiters.popleft()
                continue
            if size > room and room < self.buffer_memory:
                break
            waiters.popleft()
            waiter.set_result(None)
            room -= size


def _timestamp_runs(values: list[bytes | None], keys: list[bytes | None], timestamps: list[int]) -> list[bytes]:
    """A batch's records section (records without headers) as ``encode_records`` sections, one
    per run of records with the same timestamp (its timestamp delta is the run's)."""
    sections = []
    base = timestamps[0]
    start = 0
    whole = 1 << 62  # no limits: the batch was sized when its records were added
    for timestamp, run in itertools.groupby(timestamps):
        stop = start + len(list(run))
        section, end = encode_records(values, keys, b"\x00", start, stop, start, timestamp - base, whole, whole, whole)
        if end != stop:  # (cannot happen without limits; a wrong batch must not go out)
            raise AssertionError(f"encoded records {start}..{end} of {start}..{stop}")
        sections.append(section)
        start = stop
    return sections


def _time_out(waiter: asyncio.Future[None]) -> None:
    import asyncio  # (loaded: the waiter is an asyncio future)

    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())


def _before(a: ProducerBatch, b: ProducerBatch) -> bool:
    if a.producer_id >= 0 and (a.producer_id, a.epoch) == (b.producer_id, b.epoch):
        return a.sequence < b.sequence
    return a.created < b.created
