"""Reading one offset range on an executor: kwire's consumer, records out as Arrow batches.

The worker's consumer (``worker_clients``) is assigned the range's partition and moved to its
start; whole fetched batches come out of ``poll_batches`` until the position reaches the end,
and become Arrow batches column-wise (``columns``) with no Python object per record.  The consumer does
what a Kafka consumer does with the log: control batches (transaction markers) and, with
``kafka.isolation.level=read_committed``, aborted transactions never come out, and their
offsets are stepped over.  So the range ends when the *position* reaches its end, not when a
record with the last offset arrives (the last offsets may be markers).

Records deleted before they were read (retention, a deleted topic) make the fetch fail with
an out-of-range offset; the consumer runs with ``auto.offset.reset=none`` so that it says so
instead of jumping.  Then ``failOnDataLoss`` decides: fail the task with a message naming the
topic, partition and lost offsets, or log a warning and go on from the log start.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator

import pyarrow as pa

from kwire.client import FetchedBatch, NoOffsetForPartitionError, TopicPartition
from kwire.protocol.errors import KafkaError

from . import worker_clients
from .columns import batches_to_arrow, has_compiled_reader
from .options import SourceOptions
from .planning import OffsetRange
from .schema import records_to_batch

__all__ = ["DataLossError", "read_range", "report_data_loss"]

logger = logging.getLogger("kwire.spark")

# Rows per Arrow batch handed to Spark: large enough that per-batch costs vanish, small enough
# to keep a batch of big records in modest memory.
BATCH_ROWS = 8192


class DataLossError(RuntimeError):
    """Records the query should have read are gone (failOnDataLoss=true)."""


def report_data_loss(options: SourceOptions, what: str) -> None:
    """Fail (failOnDataLoss=true, the default) or warn that data was lost, as Spark does."""
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{what}. Some data may have been lost because it is not available in Kafka any more: "
            "it aged out (retention) or the topic was deleted before the query read it. "
            "To skip lost data with a warning instead of failing, set the source option failOnDataLoss to false.")
    logger.warning("%s; skipping it (failOnDataLoss=false)", what)


_said_stand_in: list[int] = []  # the pids that said so, once each (Spark forks workers)


def read_range(task: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The records of ``task`` as Arrow batches of Spark's Kafka schema."""
    if task.size <= 0:
        return
    if not has_compiled_reader() and os.getpid() not in _said_stand_in:
        _said_stand_in.append(os.getpid())
        logger.info("kwire's compiled record reader (kwire.protocol.records._layout) is not available in this "
                    "worker (kwire shipped as a zip, or installed without a C compiler): reading with its "
                    "slower Python stand-in; install kwire on the workers to use it")
    consumer = worker_clients.consumer(options.consumer_settings())
    tp = task.tp
    try:
        consumer.assign([tp])
        consumer.seek(tp, task.start)
        yield from _poll_range(consumer, tp, task, options)
        worker_clients.task_done()
    except (GeneratorExit, DataLossError):
        raise
    except BaseException:
        # A consumer that failed mid-read may hold state from it (positions, buffered answers):
        # the next task gets a fresh one.
        worker_clients.discard(consumer)
        raise


def _poll_range(consumer, tp: TopicPartition, task: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    position = task.start
    end = task.end
    rows = _RowBuilder(task, options.include_headers)
    patience = options.poll_timeout_ms / 1000
    last_progress = time.monotonic()
    while position < end:
        try:
            fetched = consumer.poll_batches(timeout=min(patience, 1.0), max_records=BATCH_ROWS)
        except NoOffsetForPartitionError:
            position = _after_out_of_range(consumer, tp, position, end, options)
            last_progress = time.monotonic()
            continue
        for item in fetched:
            if item.start >= end:
                break
            yield from rows.add(item)
        now_at = consumer.position(tp)
        if now_at != position:
            position = now_at
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > patience:
            raise TimeoutError(
                f"no records came from {tp} at offset {position} within kafkaConsumer.pollTimeoutMs "
                f"({options.poll_timeout_ms} ms); the task reads offsets {task.start} to {end - 1}")
    # Done with the partition: no prefetching while Spark takes the last batch or the worker idles.
    consumer.assign([])
    last = rows.flush()
    if last is not None:
        yield last


class _RowBuilder:
    """Collects fetched batches of one range until they hold about ``BATCH_ROWS`` records, then
    turns them into one Arrow batch: v2 batches column-wise (``columns``), already decoded
    records (legacy message sets) through ``records_to_batch``."""

    def __init__(self, task: OffsetRange, include_headers: bool):
        self.task = task
        self.include_headers = include_headers
        self.batches: list = []
        self.start = 0
        self.count = 0

    def add(self, item: FetchedBatch) -> list[pa.RecordBatch]:
        """The Arrow batches ready once ``item`` is added (usually none)."""
        if item.batch is None:
            # Decoded records keep their place in offset order: what was collected goes first.
            done = self.flush()
            task = self.task
            records = [r for r in item.records if r[2] < task.end]
            decoded = records_to_batch(records, task.topic, task.partition, self.include_headers)
            return [decoded] if done is None else [done, decoded]
        batch = item.batch
        # Uncompressed batches of one Fetch answer are turned into columns straight from its
        # buffer; batches of two answers would be copied into one first: the rows collected so
        # far go out when the answer changes (compressed batches are copied when decompressed).
        ready = [self.flush()] if self.batches and batch.buffer is not self.batches[-1].buffer \
            and not batch.compression else []
        if not self.batches:
            self.start = item.start
        self.batches.append(batch)
        self.count += batch.record_count
        if self.count >= BATCH_ROWS:
            ready.append(self.flush())
        return ready

    def flush(self) -> pa.RecordBatch | None:
        if not self.batches:
            return None
        task = self.task
        # The batches came from this reader's consumer and are not read again: their values may
        # be laid out in the fetch answer's own buffer.
        out = batches_to_arrow(self.batches, task.topic, task.partition, self.include_headers,
                               start=self.start, end=task.end, in_place=True)
        self.batches = []
        self.count = 0
        return out


def _after_out_of_range(consumer, tp: TopicPartition, position: int, end: int, options: SourceOptions) -> int:
    """The position to go on from after the broker said ``position`` is out of range."""
    try:
        earliest = consumer.beginning_offsets([tp]).get(tp)
        latest = consumer.end_offsets([tp]).get(tp)
    except KafkaError as exc:  # the partition itself is gone (a deleted topic)
        report_data_loss(options, f"topic {tp.topic} partition {tp.partition}: offsets {position} to {end - 1} "
                                  f"cannot be read: {exc}")
        return end
    if earliest is not None and position < earliest:
        lost_until = min(earliest, end)
        report_data_loss(options, f"topic {tp.topic} partition {tp.partition}: offsets {position} to "
                                  f"{lost_until - 1} were deleted before they were read (the log now starts "
                                  f"at offset {earliest})")
        resume = lost_until
    else:
        # Past the log end: the topic was deleted and created again, or its log truncated.
        report_data_loss(options, f"topic {tp.topic} partition {tp.partition}: offsets {position} to {end - 1} "
                                  f"are beyond the log end ({latest}); the log lost them")
        resume = end
    if resume < end:
        consumer.seek(tp, resume)
    return resume
