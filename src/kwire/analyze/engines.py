"""The two engines that run the findings' rules (``rules``): DuckDB on one machine, Spark SQL on a cluster.

Each exposes the analyzer's tables as the views of ``rules.INPUT_VIEWS`` and runs SQL text; the
rules and the aggregation are the same text for both (``rules.run_rules``).

* ``DuckDBEngine``: an in-process DuckDB over Arrow tables.  ``LocalTables`` gathers the rows
  ``kwire analyze`` makes (exchanges streamed into Arrow batches of the columns the rules read,
  so memory holds a few columns per exchange, not the exchanges) and hands them to it.  DuckDB
  and pyarrow are imported only when the findings are computed.
* ``SparkEngine``: the tables as DataFrames, registered as temporary views of the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .findings import Finding, Thresholds
from .rules import INPUT_VIEWS, run_rules
from .tables import SCHEMAS

__all__ = ["INSTALL_HINT", "DuckDBEngine", "EngineUnavailable", "LocalTables", "SparkEngine", "local_findings", "spark_findings"]

INSTALL_HINT = "pip install 'kwire[analyze]'"
_BATCH_ROWS = 65_536  # exchange rows per Arrow batch


class EngineUnavailable(RuntimeError):
    """DuckDB or pyarrow, which the local findings need, is not installed."""


def _imports():
    try:
        import duckdb
        import pyarrow
    except ImportError as e:
        raise EngineUnavailable(f"the findings need DuckDB and pyarrow ({e.name} is not installed: "
                                f"{INSTALL_HINT})") from e
    return duckdb, pyarrow


def _arrow_schema(pa, view: str):
    """The Arrow schema of a view's columns, named as the table names them."""
    from .export import arrow_type

    table, columns = INPUT_VIEWS[view]
    return pa.schema([(source, arrow_type(SCHEMAS[table][source])) for source in columns.values()])


class DuckDBEngine:
    """The rules on one machine: the four tables as Arrow tables, queried by an in-memory DuckDB."""

    def __init__(self, tables: Mapping[str, Any]):
        """``tables``: table name (``tables.SCHEMAS``) -> pyarrow Table holding at least the columns
        the rules read."""
        duckdb, _ = _imports()
        self._con = duckdb.connect(":memory:")
        for view, (table, columns) in INPUT_VIEWS.items():
            self._con.register(f"{view}_source", tables[table])
            select = ", ".join(f'"{source}" AS {name}' for name, source in columns.items())
            self._con.execute(f"CREATE VIEW {view} AS SELECT {select} FROM {view}_source")

    def query(self, sql: str) -> list[dict[str, Any]]:
        cursor = self._con.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def materialize(self, name: str, sql: str) -> None:
        self._con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")

    def close(self) -> None:
        self._con.close()


class LocalTables:
    """The rows of one ``kwire analyze`` run, gathered for ``DuckDBEngine``.

    Exchanges come one at a time (``add_exchange``) and are kept as Arrow batches of the columns
    the rules read; the smaller tables are passed whole to ``findings``.
    """

    def __init__(self):
        self._duckdb, self._pa = _imports()
        self._schemas = {view: _arrow_schema(self._pa, view) for view in INPUT_VIEWS}
        self._exchange_columns = list(INPUT_VIEWS["kw_exchanges"][1].values())
        self._pending: list[Mapping[str, Any]] = []
        self._batches: list = []

    def add_exchange(self, row: Mapping[str, Any]) -> None:
        """Take one ``exchanges`` row (``tables.exchange_row``)."""
        self._pending.append(row)
        if len(self._pending) >= _BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            schema = self._schemas["kw_exchanges"]
            self._batches.append(self._pa.RecordBatch.from_pylist(self._pending, schema=schema))
            self._pending = []

    def _table(self, view: str, rows: Iterable[Mapping[str, Any]]):
        return self._pa.Table.from_pylist(list(rows), schema=self._schemas[view])

    def findings(self, commits: Iterable[Mapping[str, Any]], group_events: Iterable[Mapping[str, Any]],
                 connections: Iterable[Mapping[str, Any]], thresholds: Thresholds | None = None) -> list[Finding]:
        """Every finding of the exchanges taken so far and the three other tables."""
        self._flush()
        exchanges = self._pa.Table.from_batches(self._batches, schema=self._schemas["kw_exchanges"])
        tables = {
            "exchanges": exchanges, "offset_commits": self._table("kw_commits", commits),
            "group_events": self._table("kw_group_events", group_events),
            "connections": self._table("kw_connections", connections),
        }
        empty = frozenset(view for view, (table, _) in INPUT_VIEWS.items() if not tables[table].num_rows)
        engine = DuckDBEngine(tables)
        try:
            return run_rules(engine, thresholds, empty=empty)
        finally:
            engine.close()


def local_findings(exchanges: Iterable[Mapping[str, Any]] = (), commits: Iterable[Mapping[str, Any]] = (),
                   group_events: Iterable[Mapping[str, Any]] = (), connections: Iterable[Mapping[str, Any]] = (),
                   thresholds: Thresholds | None = None) -> list[Finding]:
    """Every finding of the four tables' rows, computed by DuckDB (what ``kwire analyze`` gives)."""
    tables = LocalTables()
    for row in exchanges:
        tables.add_exchange(row)
    return tables.findings(commits, group_events, connections, thresholds)


class SparkEngine:
    """The rules on Spark: the four tables as DataFrames, registered as the session's temporary views."""

    def __init__(self, spark, tables: Mapping[str, Any]):
        """``tables``: table name -> DataFrame with the columns of ``tables.SCHEMAS``."""
        from pyspark.sql import functions as F

        self._spark = spark
        self._cached: list = []
        self._views: list[str] = []
        for view, (table, columns) in INPUT_VIEWS.items():
            df = tables[table].select(*[F.col(source).alias(name) for name, source in columns.items()])
            df.createOrReplaceTempView(view)
            self._views.append(view)

    def query(self, sql: str) -> list[dict[str, Any]]:
        return [row.asDict() for row in self._spark.sql(sql).collect()]

    def materialize(self, name: str, sql: str) -> None:
        df = self._spark.sql(sql).cache()  # read by three queries
        self._cached.append(df)
        df.createOrReplaceTempView(name)
        self._views.append(name)

    def close(self) -> None:
        for df in self._cached:
            df.unpersist()
        for view in self._views:
            self._spark.catalog.dropTempView(view)


def spark_findings(spark, tables: Mapping[str, Any], thresholds: Thresholds | None = None) -> list[Finding]:
    """Every finding of the four table DataFrames (``kwire analyze --spark``)."""
    engine = SparkEngine(spark, tables)
    try:
        return run_rules(engine, thresholds)
    finally:
        engine.close()
