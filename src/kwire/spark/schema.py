"""Spark's Kafka schema: the rows the source produces and the columns the sink takes.

Read rows, exactly as Spark's connector (every field nullable)::

    key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
    timestampType int [, headers array<struct<key: string, value: binary>>]   (includeHeaders)

``headers`` is null for a record without headers, as in Spark.  ``timestamp`` is the record's
milliseconds as a Spark timestamp; ``timestampType`` 0 is CreateTime, 1 LogAppendTime.

Rows reach Spark as Arrow record batches built a column at a time from the records kwire's
consumer decodes (``records_to_batch``).  Their Arrow schema is derived from the Spark schema
by PySpark's own conversion, the one Spark checks the batches against.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kwire.settings import ConfigError

__all__ = ["HEADERS_TYPE", "SinkColumns", "arrow_schema", "records_to_batch", "sink_columns", "source_schema"]

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

_BASE = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
)


def source_schema(include_headers: bool) -> StructType:
    return StructType([*_BASE, StructField("headers", HEADERS_TYPE)] if include_headers else list(_BASE))


@cache
def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects of the source's batches (timestamps in UTC microseconds)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


# Fields of kwire's ConsumerRecord tuples, by position.
_TOPIC, _PARTITION, _OFFSET, _TIMESTAMP, _TIMESTAMP_TYPE, _KEY, _VALUE, _HEADERS = range(8)


def records_to_batch(records: Sequence[tuple], topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch from kwire ``ConsumerRecord`` tuples of one partition.

    The records are transposed into columns in one C-level pass (``zip``), and each column
    becomes an Arrow array in one call; topic and partition are constants.
    """
    schema = arrow_schema(include_headers)
    n = len(records)
    columns = list(zip(*records, strict=True)) if n else [()] * 9
    millis = pa.array(columns[_TIMESTAMP], pa.int64())
    arrays = [
        pa.array(columns[_KEY], pa.binary()),
        pa.array(columns[_VALUE], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(columns[_OFFSET], pa.int64()),
        pc.multiply(millis, 1000).cast(schema.field("timestamp").type),
        pa.array(columns[_TIMESTAMP_TYPE], pa.int32()),
    ]
    if include_headers:
        # () (no headers) is null, as in Spark's connector.
        arrays.append(pa.array([h or None for h in columns[_HEADERS]], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# -- the sink's input ---------------------------------------------------------------------------------
class SinkColumns:
    """Where the sink finds each of its columns in the DataFrame written (index or None)."""

    def __init__(self, names: dict[str, int]):
        self.value: int = names["value"]
        self.key: int | None = names.get("key")
        self.topic: int | None = names.get("topic")
        self.partition: int | None = names.get("partition")
        self.headers: int | None = names.get("headers")


def _type_name(data_type: DataType) -> str:
    return data_type.simpleString()


def sink_columns(schema: StructType, topic_option: str | None) -> SinkColumns:
    """Check the written DataFrame's columns as Spark's Kafka sink does; other columns are ignored.

    ``value`` is required (string or binary); ``key`` string or binary; ``topic`` string, needed
    unless the topic option is given (which then wins); ``partition`` int; ``headers``
    array<struct<key: string, value: binary>>.
    """
    found = {f.name: (i, f.dataType) for i, f in enumerate(schema.fields)}
    allowed: dict[str, tuple[tuple[type, ...], str]] = {
        "value": ((StringType, BinaryType), "string or binary"),
        "key": ((StringType, BinaryType), "string or binary"),
        "topic": ((StringType,), "string"),
        "partition": ((IntegerType,), "int"),
    }
    if "value" not in found:
        raise ConfigError("the DataFrame written to Kafka needs a 'value' column (string or binary); "
                          f"it has {', '.join(found) or 'no columns'}")
    if "topic" not in found and topic_option is None:
        raise ConfigError("no topic to write to: give the topic option, or a 'topic' column (string)")
    for name, (types, words) in allowed.items():
        if name in found and not isinstance(found[name][1], types):
            raise ConfigError(f"the '{name}' column must be {words}, not {_type_name(found[name][1])}")
    if "headers" in found and not _headers_type(found["headers"][1]):
        raise ConfigError("the 'headers' column must be array<struct<key: string, value: binary>>, "
                          f"not {_type_name(found['headers'][1])}")
    return SinkColumns({name: index for name, (index, _) in found.items()})


def _headers_type(data_type: Any) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = [(f.name, type(f.dataType)) for f in data_type.elementType.fields]
    return fields == [("key", StringType), ("value", BinaryType)]
