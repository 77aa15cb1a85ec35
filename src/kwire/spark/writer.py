"""The sink: each task produces its rows with the worker's kwire producer.

Columns as Spark's Kafka sink takes them (``schema.sink_columns``): ``value`` required, ``key``,
``headers``, ``partition`` (null: the producer's partitioner decides), ``topic`` unless the
topic option is given, which overrides the column.  Other columns are ignored.

A task flushes before it reports success, and fails if any record failed.  Kafka writes are
at-least-once, as with Spark's connector: a task retried after a failure, or a micro-batch
replayed after a crash, writes its rows again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from . import worker_clients
from .options import SinkOptions
from .schema import SinkColumns, sink_columns

__all__ = ["KwireBatchWriter", "KwireStreamWriter", "WrittenRows"]


@dataclass
class WrittenRows(WriterCommitMessage):
    rows: int


class _Delivery:
    """Keeps the first delivery error of a task (delivery callbacks run in the task's thread)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def __call__(self, error: BaseException | None, _metadata) -> None:
        if error is not None and self.error is None:
            self.error = error


def write_batches(batches: Iterator[pa.RecordBatch], columns: SinkColumns, options: SinkOptions) -> WrittenRows:
    """Produce every row of ``batches``; returns once all are acknowledged (or raises)."""
    producer = worker_clients.producer(options.producer_settings())
    produce = producer.produce
    delivery = _Delivery()
    rows = 0
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        values = batch.column(columns.value).to_pylist()
        keys = _column(batch, columns.key, n)
        partitions = _column(batch, columns.partition, n)
        headers = _headers(batch, columns.headers, n)
        if options.topic is not None:
            topics = [options.topic] * n
        else:
            topics = batch.column(columns.topic).to_pylist()
            if None in topics:
                raise ValueError("a row has a null topic; give the topic option or a topic in every row")
        for topic, value, key, partition, header in zip(topics, values, keys, partitions, headers, strict=True):
            produce(topic, value, key, partition=partition, headers=header, on_delivery=delivery)
        rows += n
        if delivery.error is not None:
            break
    left = producer.flush()
    if delivery.error is None and left:
        raise RuntimeError(f"writing to Kafka failed: {left} records were not acknowledged")
    if delivery.error is not None:
        raise RuntimeError(f"writing to Kafka failed: {delivery.error}") from delivery.error
    worker_clients.task_done()
    return WrittenRows(rows)


def _column(batch: pa.RecordBatch, index: int | None, n: int) -> list:
    return [None] * n if index is None else batch.column(index).to_pylist()


def _headers(batch: pa.RecordBatch, index: int | None, n: int) -> list:
    if index is None:
        return [None] * n
    return [None if h is None else [(pair["key"], pair["value"]) for pair in h]
            for h in batch.column(index).to_pylist()]


class KwireBatchWriter(DataSourceArrowWriter):
    def __init__(self, schema: StructType, options: SinkOptions):
        self.options = options
        self.columns = sink_columns(schema, options.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRows:
        return write_batches(iterator, self.columns, self.options)


class KwireStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch's tasks produce their rows; nothing to do at commit (at-least-once)."""

    def __init__(self, schema: StructType, options: SinkOptions):
        self.options = options
        self.columns = sink_columns(schema, options.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRows:
        return write_batches(iterator, self.columns, self.options)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        pass

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        pass
