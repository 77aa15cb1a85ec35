"""``KwireDataSource``: the PySpark data source registered under the format name ``kwire``.

Spark creates it with the query's options, asks ``schema()`` when the DataFrame is defined
(``load()``), then ``reader``/``streamReader``/``writer``/``streamWriter`` while it plans.  All
option checks run in those calls, so a bad option fails before any task runs.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .options import ConfigError, SourceOptions, check_batch, check_stream, parse_sink_options, parse_source_options
from .reader import KwireBatchReader, KwireStreamReader
from .schema import source_schema
from .writer import KwireBatchWriter, KwireStreamWriter

__all__ = ["KwireDataSource"]


class KwireDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kwire"

    def _source_options(self, schema: StructType | None = None) -> SourceOptions:
        options = parse_source_options(self.options)
        if schema is not None and schema != source_schema(options.include_headers):
            raise ConfigError("the kwire source has Kafka's fixed schema and takes no user-specified schema "
                              f"(got {schema.simpleString()}); leave out .schema(...)")
        return options

    def schema(self) -> StructType:
        return source_schema(self._source_options().include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._source_options(schema)
        check_batch(options)
        return KwireBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        options = self._source_options(schema)
        check_stream(options)
        return KwireStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ConfigError("a Kafka topic cannot be overwritten: write with mode('append')")
        return KwireBatchWriter(schema, parse_sink_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        # As Spark's Kafka sink: every output mode appends (complete mode writes the whole
        # result each micro-batch); a topic is never truncated.
        return KwireStreamWriter(schema, parse_sink_options(self.options))
