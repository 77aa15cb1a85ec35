"""The two engines that run the findings' rules (``rules``): DuckDB on one machine, Spark SQL on a cluster.

Each exposes the analyzer's tables as the views of ``rules.INPUT_VIEWS`` and runs SQL text; the
rules and the aggregation are the same text for both (``rules.run_rules``).

* ``DuckDBEngine``: an in-process DuckDB.  ``LocalTables`` loads the rows ``kwire analyze`` makes
  into it (exchanges streamed in batches, only the columns the rules read).  DuckDB and NumPy are
  imported only when an analysis starts (not by ``import kwire.analyze``), and pyarrow (with the
  pandas it loads when installed) not at all.
* ``SparkEngine``: the tables as DataFrames, registered as temporary views of the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from .findings import Finding, Thresholds
from .rules import INPUT_VIEWS, run_rules
from .tables import SCHEMAS

__all__ = ["INSTALL_HINT", "DuckDBEngine", "EngineUnavailable", "LocalTables", "SparkEngine", "local_findings", "spark_findings"]

INSTALL_HINT = "pip install 'kwire[analyze]'"
_BATCH_ROWS = 65_536  # exchange rows gathered before they go into DuckDB
_SQL_TYPES = {"string": "VARCHAR", "int32": "INTEGER", "int64": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN",
              "list<string>": "VARCHAR[]", "list<int64>": "BIGINT[]"}


class EngineUnavailable(RuntimeError):
    """DuckDB or NumPy, which the local findings need, is not installed."""


def _imports():
    try:
        import duckdb
        import numpy
    except ImportError as e:
        raise EngineUnavailable(f"the findings need DuckDB and NumPy ({e.name} is not installed: "
                                f"{INSTALL_HINT})") from e
    return duckdb, numpy


class DuckDBEngine:
    """The rules on one machine: an in-memory DuckDB holding the four tables (``tables.SCHEMAS``'
    names, at least the columns the rules read), seen through the rules' views."""

    def __init__(self, con):
        self._con = con
        for view, (table, columns) in INPUT_VIEWS.items():
            select = ", ".join(f'"{source}" AS {name}' for name, source in columns.items())
            con.execute(f'CREATE OR REPLACE VIEW {view} AS SELECT {select} FROM "{table}"')

    def query(self, sql: str) -> list[dict[str, Any]]:
        cursor = self._con.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def materialize(self, name: str, sql: str) -> None:
        self._con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")


class LocalTables:
    """The rows of one ``kwire analyze`` run, loaded into an in-memory DuckDB for the rules.

    Exchanges come one at a time (``add_exchange``) and go into DuckDB in batches, as columns
    (NumPy object arrays, which DuckDB scans without pyarrow or pandas), holding only the columns
    the rules read; DuckDB keeps them compressed, so memory grows by a few bytes per exchange, not by
    the exchanges.  The smaller tables are passed whole to ``findings``.
    """

    def __init__(self):
        duckdb, self._np = _imports()
        # One thread: the rules' queries take a fraction of a second next to the decoding, and more
        # threads only add their start-up and spinning to a small run.
        self._con = duckdb.connect(":memory:", config={"threads": 1})
        self._columns: dict[str, dict[str, str]] = {}  # table -> column -> SCHEMAS type, the rules' only
        for table, columns in INPUT_VIEWS.values():
            types = {source: SCHEMAS[table][source] for source in columns.values()}
            self._columns[table] = types
            ddl = ", ".join(f'"{c}" {_SQL_TYPES[t]}' for c, t in types.items())
            self._con.execute(f'CREATE TABLE "{table}" ({ddl})')
        self._rows = dict.fromkeys(self._columns, 0)
        self._pending: list[Mapping[str, Any]] = []

    def add_exchange(self, row: Mapping[str, Any]) -> None:
        """Take one ``exchanges`` row (``tables.exchange_row``)."""
        self._pending.append(row)
        if len(self._pending) >= _BATCH_ROWS:
            self._insert("exchanges", self._pending)
            self._pending = []

    def _insert(self, table: str, rows: list[Mapping[str, Any]]) -> None:
        if not rows:
            return
        np = self._np
        types = self._columns[table]
        try:  # rows made by ``tables`` carry every column: picked in C, one tuple per row
            picked = list(map(itemgetter(*types), rows))
        except KeyError:
            picked = [tuple(r.get(c) for c in types) for r in rows]
        arrays = {}
        for (column, kind), values in zip(types.items(), zip(*picked, strict=True), strict=True):
            if kind.startswith("list<"):  # element by element: equal-length lists would make a 2-D array
                array = np.empty(len(values), dtype=object)
                for i, value in enumerate(values):
                    array[i] = value
            else:
                array = np.array(values, dtype=object)
            arrays[column] = array
        self._con.register("incoming", arrays)
        try:
            casts = ", ".join(f'CAST("{c}" AS {_SQL_TYPES[t]})' for c, t in types.items())
            self._con.execute(f'INSERT INTO "{table}" SELECT {casts} FROM incoming')
        finally:
            self._con.unregister("incoming")
        self._rows[table] += len(rows)

    def findings(self, commits: Iterable[Mapping[str, Any]], group_events: Iterable[Mapping[str, Any]],
                 connections: Iterable[Mapping[str, Any]], thresholds: Thresholds | None = None) -> list[Finding]:
        """Every finding of the exchanges taken so far and the three other tables."""
        self._insert("exchanges", self._pending)
        self._pending = []
        self._insert("offset_commits", list(commits))
        self._insert("group_events", list(group_events))
        self._insert("connections", list(connections))
        empty = frozenset(view for view, (table, _) in INPUT_VIEWS.items() if not self._rows[table])
        return run_rules(DuckDBEngine(self._con), thresholds, empty=empty)

    def close(self) -> None:
        self._con.close()


def local_findings(exchanges: Iterable[Mapping[str, Any]] = (), commits: Iterable[Mapping[str, Any]] = (),
                   group_events: Iterable[Mapping[str, Any]] = (), connections: Iterable[Mapping[str, Any]] = (),
                   thresholds: Thresholds | None = None) -> list[Finding]:
    """Every finding of the four tables' rows, computed by DuckDB (what ``kwire analyze`` gives)."""
    tables = LocalTables()
    try:
        for row in exchanges:
            tables.add_exchange(row)
        return tables.findings(commits, group_events, connections, thresholds)
    finally:
        tables.close()


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
            # Computed once and cut from its lineage (the decoding, the renumbering joins): the rules
            # read each view several times, and planning that whole lineage under every read made
            # the evidence query's plan take minutes.
            df = df.localCheckpoint()
            df.createOrReplaceTempView(view)
            self._cached.append(df)
            self._views.append(view)

    def query(self, sql: str) -> list[dict[str, Any]]:
        return [row.asDict() for row in self._spark.sql(sql).collect()]

    def materialize(self, name: str, sql: str) -> None:
        df = self._spark.sql(sql).localCheckpoint()  # computed once, read by three queries
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
