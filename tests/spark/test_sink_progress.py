"""``kwire sink``'s progress and summary without Spark: the steps before the first micro-batch
(a line each into a pipe; on a terminal a status line whose seconds count up), and the
summary's rows read, written and filtered."""

from __future__ import annotations

import io
import time

from kwire.spark.sink_job import WRITTEN_BY, BatchReport, ProgressPrinter, SinkResult


def test_steps_into_a_pipe_are_a_line_each_saying_how_long_the_last_one_took():
    out = io.StringIO()
    progress = ProgressPrinter(out)
    assert not progress.live
    progress.step("starting Spark (local[2])")
    progress.step("starting the query")
    progress.batch(BatchReport(0, 10, 5.0, {("t", 0): 10}, {("t", 0): 12}, written=4, written_by="observed"))
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "kwire sink: starting Spark (local[2])..."
    assert lines[1].startswith("kwire sink: starting the query... (starting Spark (local[2]) took ")
    assert lines[2] == "batch 0: 10 rows, 4 written (5 rows/s); 10 rows in 1 batch; lag 2 [t-0=2]"
    assert len(lines) == 3


def test_a_step_on_a_terminal_is_a_status_line_rewritten_with_its_seconds():
    out = io.StringIO()
    progress = ProgressPrinter(out, live=True, tick_seconds=0.01)
    progress.step("starting Spark (local[2])")
    deadline = time.monotonic() + 10
    while out.getvalue().count("starting Spark (local[2])... 0 s") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    progress.note("SIGINT: stopping")  # a line of its own, under the status line
    progress.close()
    text = out.getvalue()
    assert text.startswith("\rstarting Spark (local[2])...")
    assert text.count("\rstarting Spark (local[2])... 0 s") >= 2  # the ticker rewrote it
    assert "\nkwire sink: SIGINT: stopping\n" in text
    assert "\n" not in text.split("\nkwire sink: SIGINT: stopping\n")[0]  # the status line, in place
    ticks = text.count("\r")
    time.sleep(0.05)
    assert out.getvalue().count("\r") == ticks  # closed: the ticker is gone


def test_the_summary_separates_rows_read_written_and_filtered():
    result = SinkResult(query_name="q", batches=2, rows_read=300, seconds=2.0, end_offsets={("t", 0): 300},
                        log_end_offsets={("t", 0): 310}, rows_written=100, written_by="observed")
    doc = result.to_json()
    assert (doc["rows_read"], doc["rows_written"], doc["rows_filtered"]) == (300, 100, 200)
    assert doc["rows_written_by"] == WRITTEN_BY["observed"] and doc["total_lag"] == 10
    assert "rows" not in doc  # no more "rows" that might be either
    unknown = SinkResult(query_name="q", batches=1, rows_read=5, seconds=1.0, end_offsets={}, log_end_offsets={})
    assert (unknown.to_json()["rows_written"], unknown.to_json()["rows_filtered"]) == (None, None)


def test_rows_written_come_from_the_sink_where_spark_counts_them_else_from_the_observed_metric():
    class Row(dict):  # what progress["observedMetrics"] holds: rows by field name
        pass

    sources = [{"endOffset": {"t": {"0": 7}}, "latestOffset": {"t": {"0": 9}}}]
    console = BatchReport.of({"batchId": 3, "numInputRows": 7, "sources": sources, "sink": {"numOutputRows": 7}})
    files = BatchReport.of({"batchId": 4, "numInputRows": 7, "sources": sources, "sink": {"numOutputRows": -1},
                            "observedMetrics": {"kwire_sink_written": Row(rows=2)}})
    neither = BatchReport.of({"batchId": 5, "numInputRows": 7, "sources": sources, "sink": {"numOutputRows": -1}})
    assert (console.written, console.written_by) == (7, "sink")
    assert (files.written, files.written_by) == (2, "observed")
    assert (neither.written, neither.written_by) == (None, None)
    assert files.lag == {("t", 0): 2}
