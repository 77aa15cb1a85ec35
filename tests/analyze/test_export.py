"""Exports: Parquet tables read back equal to the rows written, JSON lines one per exchange."""

from __future__ import annotations

import io
import json
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest

from kwire.analyze.analyzer import AnalyzeOptions
from kwire.analyze.exchange import PartitionInfo
from kwire.analyze.export import (
    PARQUET_TABLES,
    ParquetTables,
    ParquetUnavailable,
    arrow_schema,
    arrow_type,
    require_pyarrow,
)
from kwire.analyze.findings import FINDINGS_SCHEMA, Finding
from kwire.analyze.session import analyze_captures
from kwire.analyze.tables import SCHEMAS, commit_rows, exchange_row, group_event_row

from .helpers import DEEPFLOW, TS0
from .test_summary import exchange

KAFKA = sorted((DEEPFLOW / "kafka").glob("*.pcap"))
MONGO = sorted((DEEPFLOW / "mongo").glob("*.pcap"))


def read_rows(directory, table: str) -> list[dict]:
    return pq.read_table(directory / table / "part-0.parquet").to_pylist()


def sample_exchanges():
    return [
        exchange("Produce", ts_ns=TS0, client_id="app", request_bytes=120, response_bytes=40,
                 partitions=[PartitionInfo("orders", 0, offset=41, records=3, bytes=90)]),
        exchange("OffsetCommit", ts_ns=TS0 + 5, latency_ms=None, group="g1", member_id="m-1", generation=4,
                 details={"unanswered_by": "connection_end"},
                 partitions=[PartitionInfo("orders", 0, offset=44), PartitionInfo("orders", 1, offset=7)]),
        exchange("SyncGroup", ts_ns=TS0 + 9, group="g1", member_id="m-1", generation=4,
                 details={"assignment": [("orders", 1), ("orders", 0)], "expected_wait_ms": 0}),
        exchange("Fetch", ts_ns=TS0 + 11, error_code=3, error="UNKNOWN_TOPIC_OR_PARTITION",
                 errors=Counter({"UNKNOWN_TOPIC_OR_PARTITION": 2}), details={"expected_wait_ms": 500}),
        exchange("find", protocol="mongodb", ts_ns=TS0 + 13, database="shop", collection="carts",
                 api_version=-1, client_id="<script>x</script>"),
    ]


def test_parquet_tables_read_back_equal_to_the_rows(tmp_path):
    exchanges = sample_exchanges() * 3  # 15 rows in row groups of 4: several row groups
    rows = [exchange_row(ex) for ex in exchanges]
    commits = [r for ex in exchanges for r in commit_rows(ex)]
    events = [r for ex in exchanges if (r := group_event_row(ex)) is not None]
    finding = Finding(kind="unanswered", severity="warning", protocol="kafka", message="1 OffsetCommit unanswered",
                      api="OffsetCommit", count=1, first_ts_ns=TS0, last_ts_ns=TS0 + 5,
                      frames=[("t.pcap", 1), ("u.pcap", 7)])
    with ParquetTables(tmp_path, row_group_rows=4) as tables:
        tables.write_many("exchanges", rows)
        tables.write_many("offset_commits", commits)
        tables.write_many("group_events", events)
        tables.write("findings", finding.to_row())
    assert read_rows(tmp_path, "exchanges") == rows
    assert read_rows(tmp_path, "offset_commits") == commits and len(commits) == 6
    assert read_rows(tmp_path, "group_events") == events
    assert events[0]["assignment"] == ["orders:0", "orders:1"]
    assert read_rows(tmp_path, "findings") == [finding.to_row()]
    assert pq.ParquetFile(tmp_path / "exchanges" / "part-0.parquet").metadata.num_row_groups == 4
    assert tables.rows_written["exchanges"] == 15


def test_every_table_is_written_with_its_schema_even_when_empty(tmp_path):
    ParquetTables(tmp_path).close()
    schemas = {**SCHEMAS, "findings": FINDINGS_SCHEMA}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(PARQUET_TABLES)
    for table in PARQUET_TABLES:
        written = pq.read_schema(tmp_path / table / "part-0.parquet")
        assert written.names == list(schemas[table])
        assert written.equals(arrow_schema(schemas[table]))
        assert pq.read_table(tmp_path / table / "part-0.parquet").num_rows == 0


def test_schema_type_names_map_to_arrow_types():
    import pyarrow as pa

    assert arrow_type("list<int64>") == pa.list_(pa.int64())
    assert arrow_type("double") == pa.float64()
    with pytest.raises(ValueError, match="map<string,int>"):
        arrow_type("map<string,int>")


def test_missing_pyarrow_says_how_to_install_it(monkeypatch, tmp_path):
    # A None entry in sys.modules makes the import fail as if the package were absent.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ParquetUnavailable, match=r"pip install 'kwire\[analyze\]'"):
        require_pyarrow()
    with pytest.raises(ParquetUnavailable):
        ParquetTables(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_json_lines_are_one_exchange_each():
    out = io.StringIO()
    analysis = analyze_captures(KAFKA + MONGO, AnalyzeOptions(), json_out=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == analysis.exchanges > 0
    objects = [json.loads(line) for line in lines]
    assert all(isinstance(o, dict) for o in objects)
    # Every API the summary counted shows up in the lines, as often.
    summary_counts = Counter({key: stats.count for key, stats in analysis.summary.apis.items()})
    assert Counter((o["protocol"], o["api"]) for o in objects) == summary_counts


def test_analysis_parquet_matches_the_analysis(tmp_path):
    analysis = analyze_captures(KAFKA + MONGO, AnalyzeOptions(), parquet_dir=tmp_path)
    exchanges = read_rows(tmp_path, "exchanges")
    assert len(exchanges) == analysis.exchanges
    assert Counter((r["protocol"], r["api"]) for r in exchanges) == Counter(
        {key: stats.count for key, stats in analysis.summary.apis.items()})
    assert read_rows(tmp_path, "offset_commits") == analysis.commits
    assert read_rows(tmp_path, "group_events") == analysis.group_events
    assert read_rows(tmp_path, "connections") == analysis.connections
    assert read_rows(tmp_path, "findings") == [f.to_row() for f in analysis.findings]
