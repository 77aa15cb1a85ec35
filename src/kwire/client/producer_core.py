"""What both producers do to records before the sender takes them, without I/O: checking keys,
values and headers, a topic's route (its partitions, from the metadata), the bulk path's runs
of records per partition and the step that encodes one run into its partition's batch, and a
bulk batch's outcome to its calls' ``BulkDelivery``.

``AsyncProducer`` (asyncio) and ``BlockingProducer`` (``kwire produce``'s blocking socket) run
these; they differ only in how they wait (for metadata, for room in ``buffer.memory``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kwire.protocol.errors import KafkaError
from kwire.protocol.records import Compression
from kwire.protocol.records.bulk import DelimitedValues, encode_records

from .accumulator import BATCH_OVERHEAD, ProducerBatch, RecordAccumulator
from .errors import ClientTimeoutError, is_retriable
from .producer_errors import RecordTooLargeError
from .types import TopicPartition

if TYPE_CHECKING:
    from .backoff import Backoff
    from .config import ProducerConfig
    from .metadata import ClusterMetadata
    from .partitioner import Partitioner
    from .producer_bulk import BulkDelivery
    from .transactions import TransactionManager

__all__ = ["CODECS", "TopicRoute", "accumulator_for", "append_run_step", "bulk_groups", "bulk_keys", "bytes_column", "checked_timestamp",
           "complete_bulk", "record_fields", "too_large", "topic_metadata_error", "values_column",
           "TopicWait"]

CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
           "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
def _as_bytes(data: Any, what: str) -> bytes:
    """A key, value or header value as bytes: bytes-like as is, str as UTF-8, nothing else."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    raise TypeError(f"{what} must be bytes or str (or None), not {type(data).__name__}")


def record_fields(key: Any, value: Any, headers: Any, legacy: bool
                   ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]:
    """A record's key, value and headers as the batch builders take them (both producers' check)."""
    if value is not None and type(value) is not bytes:
        value = _as_bytes(value, "value")
    if key is not None and type(key) is not bytes:
        key = _as_bytes(key, "key")
    if not headers:
        return key, value, None
    if legacy:
        raise ValueError("headers need Produce v3+ (record batches); the broker only speaks Produce v0-2")
    return key, value, _headers(headers)


def _headers(headers: Any) -> list[tuple[str, bytes | None]]:
    """Headers as Kafka keeps them: a list of (str, bytes or None), from such a list or a dict."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    result = []
    try:
        for name, value in items:
            if not isinstance(name, str):
                raise TypeError(f"header names must be str, not {type(name).__name__}")
            result.append((name, None if value is None else _as_bytes(value, f"header {name!r}")))
    except (TypeError, ValueError) as exc:
        if "header" in str(exc):
            raise
        raise TypeError(f"headers must be a dict or a list of (name, value) pairs, not {headers!r}") from None
    return result


def bytes_column(column: Any, what: str) -> list[bytes | None] | tuple[bytes | None, ...]:
    """A bulk call's values or keys as a list or tuple of bytes or None (str as UTF-8)."""
    items = column if isinstance(column, (list, tuple)) else list(column)
    if all(type(item) is bytes or item is None for item in items):
        return items
    return [item if item is None or type(item) is bytes else _as_bytes(item, f"{what} {i}")
            for i, item in enumerate(items)]


def values_column(values: Sequence[bytes | str | None]) -> Sequence[bytes | str | None]:
    """A bulk call's values as the encoder takes them: a list or tuple, or a ``DelimitedValues``
    (values read in place from one buffer: ``kwire produce``'s input); anything else as a list."""
    if type(values) is DelimitedValues or isinstance(values, (list, tuple)):
        return values
    return list(values)


def bulk_keys(values: Sequence[object], keys: Any, key: Any
               ) -> list[bytes | None] | tuple[bytes | None, ...] | bytes | None:
    """The keys of a bulk call: a list as long as ``values``, or one key (or None) for all."""
    if keys is None:
        return key if key is None or type(key) is bytes else _as_bytes(key, "key")
    if key is not None:
        raise ValueError("give keys (one per record) or key (the same for every record), not both")
    column = bytes_column(keys, "key")
    if len(column) != len(values):
        raise ValueError(f"{len(column)} keys for {len(values)} values")
    return column


def complete_bulk(batch: ProducerBatch, base_offset: int, error: BaseException | None) -> None:
    """A bulk batch's outcome to the ``BulkDelivery`` of each call it holds records of."""
    partition = batch.tp.partition
    for (delivery, group), first_delta, start, stop in batch.tokens:
        delivery._complete(partition, base_offset + first_delta if base_offset >= 0 else -1, group, start, stop, error)


def checked_timestamp(timestamp_ms: Any) -> int:
    if timestamp_ms is None:
        return int(time.time() * 1000)
    if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
        raise TypeError(f"timestamp must be an int of milliseconds since the epoch, not {type(timestamp_ms).__name__}")
    if timestamp_ms < 0:
        raise ValueError(f"timestamp must not be negative, got {timestamp_ms}")
    return timestamp_ms


class TopicRoute:
    """What ``send`` needs of a topic's metadata, computed once per metadata snapshot."""

    __slots__ = ("count", "available", "partitions")

    def __init__(self, topic: str, count: int, available: list[int]):
        self.count = count
        self.available = available
        self.partitions = [TopicPartition(topic, p) for p in range(count)]




def accumulator_for(config: ProducerConfig) -> RecordAccumulator:
    """The accumulator a producer with ``config`` batches into (batch.size, linger.ms,
    delivery.timeout.ms, buffer.memory, compression.type, batch.num.messages)."""
    assert config.delivery_timeout_ms is not None  # ProducerConfig derives it when not set
    return RecordAccumulator(
        batch_size=max(1, config.batch_size), linger=config.linger_ms / 1000,
        delivery_timeout=config.delivery_timeout_ms / 1000, buffer_memory=config.buffer_memory,
        compression=CODECS[config.compression_type], batch_records=config.batch_num_messages)


def too_large(size: int, max_request_size: int, buffer_memory: int) -> RecordTooLargeError:
    """The error of a record of ``size`` encoded bytes that can never be sent."""
    if size > max_request_size:
        return RecordTooLargeError(f"the record is {size} bytes when encoded, more than max.request.size "
                                   f"({max_request_size})")
    return RecordTooLargeError(f"the record is {size} bytes when encoded, more than buffer.memory "
                               f"({buffer_memory})")


def topic_metadata_error(metadata: ClusterMetadata, topic: str) -> KafkaError | None:
    """The error the metadata gives for ``topic`` (retriable or not), None when it gives none."""
    info = metadata.topics.get(topic)
    if info is not None and info.error_code:
        return KafkaError.for_code(info.error_code)(f"metadata of topic {topic!r}")
    return None


class TopicWait:
    """A topic's metadata awaited until max.block.ms, as both producers wait for it (Java's
    ``KafkaProducer.waitOnMetadata``): each ask lets the broker create the topic; an answer with
    the topic's route ends the wait, a retriable error (raised by the ask, or the topic's own in
    the answer) is asked again after the retry backoff, any other is raised, and at the deadline
    ``timed_out()`` names the last error.  Without I/O: each producer asks and sleeps its own way
    (a blocking socket, asyncio); ``now`` is the clock (``time.monotonic``)."""

    def __init__(self, topic: str, max_block_ms: int, backoff: Backoff,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.max_block_ms = max_block_ms
        self.deadline = now() + max_block_ms / 1000
        self.last: BaseException | None = None
        self._backoff = backoff
        self._now = now
        self._attempt = 0

    def left(self) -> float:
        """Seconds until max.block.ms is over (0 or less: it is)."""
        return self.deadline - self._now()

    def failed(self, exc: Exception) -> None:
        """The ask raised ``exc``: asked again if it is retriable, raised if not."""
        if not is_retriable(exc):
            raise exc
        self.last = exc

    def answered(self, metadata: ClusterMetadata, route: TopicRoute | None) -> TopicRoute | None:
        """The metadata after an answer, and the topic's route in it (None: not there): the
        route, or None to ask again (the topic's error raised if it is not retriable)."""
        if route is not None:
            return route
        error = topic_metadata_error(metadata, self.topic)
        if error is not None:
            if not error.retriable:
                raise error
            self.last = error
        return None

    def pause(self) -> float:
        """Seconds to wait before the next ask (the retry backoff, at most until the deadline)."""
        pause = min(self._backoff.delay(self._attempt), self.left())
        self._attempt += 1
        return pause

    def timed_out(self) -> ClientTimeoutError:
        return ClientTimeoutError(f"topic {self.topic!r} not present in metadata after max.block.ms "
                                  f"({self.max_block_ms} ms)" + (f"; last error: {self.last}" if self.last else ""))


# A bulk call's run of records for one partition (None: sticky, a partition per batch): the
# records' indexes in the call (None: all of it, in order), their values and keys.
BulkGroup = tuple["int | None", "list[int] | None", Sequence["bytes | str | None"], Any]


def bulk_groups(partitioner: Partitioner, topic: str, values: Sequence[bytes | str | None], key_column: Any,
                partition: int | None, route: TopicRoute) -> list[BulkGroup]:
    """The runs of a bulk call's records by partition: ``partition`` for all, where their keys
    go, or one sticky run of keyless records."""
    count = len(values)
    if partition is not None:
        return [(partition, None, values, key_column)]
    parts = partitioner.partition_many(topic, key_column if isinstance(key_column, (list, tuple)) else
                                       None if key_column is None else [key_column] * count,
                                       count, route.count, route.available)
    if parts is None:
        return [(None, None, values, key_column)]  # keyless and sticky: a partition per batch
    if parts.count(parts[0]) == count:
        return [(parts[0], None, values, key_column)]
    # A stable sort keeps each partition's records in the order given.
    order = sorted(range(count), key=parts.__getitem__)
    groups: list[BulkGroup] = []
    for part, run in itertools.groupby(order, key=parts.__getitem__):
        indexes = list(run)
        groups.append((part, indexes, [values[i] for i in indexes],
                       [key_column[i] for i in indexes] if isinstance(key_column, (list, tuple)) else key_column))
    return groups


def append_run_step(acc: RecordAccumulator, partitioner: Partitioner, topic: str, route: TopicRoute,
                    partition: int | None, group: Sequence[int] | None, values: Sequence[bytes | str | None],
                    keys: Any, hdr: bytes, start: int, timestamp: int, delivery: BulkDelivery,
                    max_record: int, refuse: Callable[[int], RecordTooLargeError],
                    txn: TransactionManager | None) -> tuple[int, bool, Sequence[bytes | str | None]]:
    """Encode records ``values[start:]`` of a run (records ``group`` of the call) into their
    partition's open batch while they fit: ``(next, closed, values)``, ``values`` as bytes when
    they were str.  A record too large to ever send fails in the delivery (``refuse(size)``).
    The caller makes room in ``buffer.memory`` first, and lets the sender run when ``closed``."""
    count = len(values)
    p = partitioner.partition(topic, None, route.count, route.available) if partition is None else partition
    tp = route.partitions[p]
    token = (delivery, group)
    try:
        # str values make the encoder raise TypeError, and are encoded as UTF-8 then (below):
        # no pass over every value first on the produce path.
        end, closed = acc.append_many(tp, values, keys, hdr, start, count, timestamp,  # type: ignore[arg-type]
                                      token, max_record)
    except TypeError:
        values = bytes_column(values, "value")  # str values: as UTF-8 (or a clear TypeError)
        end, closed = acc.append_many(tp, values, keys, hdr, start, count, timestamp, token, max_record)
    if end == start and not closed:
        # (record start passed the encoder in append_many above: bytes or None)
        record = encode_records(values, keys, hdr, start, start + 1, 0, 0, 1 << 62, 1,  # type: ignore[arg-type]
                                1 << 62)[0]
        error = refuse(len(record) + BATCH_OVERHEAD)
        if txn is not None:
            txn.fail(error)
        delivery._fail(group, start, start + 1, error, p)
        end = start + 1
    elif end > start and txn is not None:
        txn.add_partition(tp)
    if closed and partition is None:
        partitioner.on_new_batch(topic, p)
    return end, closed, values
