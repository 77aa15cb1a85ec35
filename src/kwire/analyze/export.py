"""Writing what the analysis produced: exchanges as JSON lines, the tables as Parquet datasets.

JSON lines (``JsonLines``): one decoded exchange per line, as its protocol layer renders it
(``kafka.exchange_json`` / ``mongo.exchange_json``), in the order the exchanges completed, and
nothing else - findings and statistics are in the terminal summary, the HTML report and the
Parquet tables, so every line of the stream has the same shape.

Parquet (``ParquetTables``): one dataset per table, ``DIR/<table>/part-0.parquet``, for the tables
``exchanges``, ``offset_commits``, ``group_events``, ``connections`` (``tables.SCHEMAS``) and
``findings`` (``findings.FINDINGS_SCHEMA``).  A directory per table is what Spark, DuckDB and
pandas read as one table (``spark.read.parquet("DIR/exchanges")``).  Rows are buffered and written
in row groups of ``ROW_GROUP_ROWS``, so memory stays bounded whatever the capture size.  Every
table is written, empty ones too (with their schema), so readers never miss a table.

pyarrow is imported only when Parquet is asked for (it is the ``analyze`` extra).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, TextIO

from kwire.protocol.jsonable import to_jsonable

from .exchange import Exchange
from .tables import SCHEMAS

__all__ = [
    "PARQUET_TABLES",
    "ROW_GROUP_ROWS",
    "JsonLines",
    "ParquetTables",
    "ParquetUnavailable",
    "arrow_schema",
    "arrow_type",
    "require_pyarrow",
]

ROW_GROUP_ROWS = 64 * 1024
PARQUET_TABLES = ("exchanges", "offset_commits", "group_events", "connections", "findings")
INSTALL_HINT = "pip install 'kwire[analyze]'"


class ParquetUnavailable(RuntimeError):
    """pyarrow is not installed."""


def require_pyarrow():
    """The pyarrow module (with ``pyarrow.parquet`` loaded), or ParquetUnavailable saying how to get it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401 - loads the submodule onto pyarrow
    except ImportError as e:
        raise ParquetUnavailable(f"writing Parquet needs pyarrow, which is not installed ({INSTALL_HINT})") from e
    return pyarrow


def arrow_type(name: str):
    """The pyarrow type of a type name of ``tables.SCHEMAS`` / ``findings.FINDINGS_SCHEMA``."""
    pa = require_pyarrow()
    scalars = {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64(), "double": pa.float64(),
               "bool": pa.bool_()}
    if name in scalars:
        return scalars[name]
    if name.startswith("list<") and name.endswith(">"):
        return pa.list_(arrow_type(name[5:-1]))
    raise ValueError(f"no Arrow type for the schema type name {name!r}")


def arrow_schema(columns: dict[str, str]):
    """A pyarrow schema from a column -> type name mapping (every column nullable)."""
    pa = require_pyarrow()
    return pa.schema([pa.field(name, arrow_type(type_name)) for name, type_name in columns.items()])


def table_schemas() -> dict[str, dict[str, str]]:
    """Column -> type name of every table written, findings included."""
    from .findings import FINDINGS_SCHEMA  # imported late: findings pulls in its thresholds and rules

    return {**SCHEMAS, "findings": FINDINGS_SCHEMA}


class ParquetTables:
    """Writes the analysis tables under ``directory`` (see the module docstring)::

        tables = ParquetTables("out")
        tables.write("exchanges", exchange_row(ex))
        tables.close()          # flushes, writes the empty tables, closes the files
    """

    def __init__(self, directory: str | os.PathLike, *, row_group_rows: int = ROW_GROUP_ROWS,
                 schemas: dict[str, dict[str, str]] | None = None):
        self._pa = require_pyarrow()
        self.directory = os.fspath(directory)
        self.row_group_rows = row_group_rows
        columns = schemas if schemas is not None else table_schemas()
        self.schemas = {name: arrow_schema(cols) for name, cols in columns.items()}
        self.rows_written: dict[str, int] = dict.fromkeys(self.schemas, 0)
        self._buffers: dict[str, list[dict[str, Any]]] = {name: [] for name in self.schemas}
        self._writers: dict[str, Any] = {}
        os.makedirs(self.directory, exist_ok=True)

    def path(self, table: str) -> str:
        return os.path.join(self.directory, table, "part-0.parquet")

    def write(self, table: str, row: dict[str, Any]) -> None:
        buffer = self._buffers[table]
        buffer.append(row)
        if len(buffer) >= self.row_group_rows:
            self._flush(table)

    def write_many(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self.write(table, row)

    def _writer(self, table: str):
        writer = self._writers.get(table)
        if writer is None:
            path = self.path(table)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            writer = self._writers[table] = self._pa.parquet.ParquetWriter(path, self.schemas[table])
        return writer

    def _flush(self, table: str) -> None:
        rows = self._buffers[table]
        if not rows:
            return
        batch = self._pa.Table.from_pylist(rows, schema=self.schemas[table])
        self._writer(table).write_table(batch, row_group_size=self.row_group_rows)
        self.rows_written[table] += len(rows)
        self._buffers[table] = []

    def close(self) -> None:
        """Write what is buffered, create the tables that got no rows, close every file."""
        try:
            for table in self.schemas:
                self._flush(table)
                self._writer(table)  # an empty table still gets its file, with the schema
        finally:
            for writer in self._writers.values():
                writer.close()
            self._writers.clear()

    def __enter__(self) -> ParquetTables:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class JsonLines:
    """Writes one exchange per line through its protocol's ``exchange_json``."""

    def __init__(self, file: TextIO, *, record_values: bool = False):
        self.file = file
        self.record_values = record_values
        self.lines = 0
        self._renderers: dict[str, Any] = {}

    def _renderer(self, protocol: str):
        render = self._renderers.get(protocol)
        if render is None:
            if protocol == "kafka":
                from .kafka import exchange_json
            elif protocol == "mongodb":
                from .mongo import exchange_json
            else:
                raise ValueError(f"no JSON rendering for protocol {protocol!r}")
            render = self._renderers[protocol] = exchange_json
        return render

    def write(self, ex: Exchange) -> None:
        value = self._renderer(ex.protocol)(ex, self.record_values)
        if not isinstance(value, str):
            value = json.dumps(to_jsonable(value), ensure_ascii=False, separators=(",", ":"), default=str)
        self.file.write(value)
        self.file.write("\n")
        self.lines += 1
