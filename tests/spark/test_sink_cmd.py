"""``kwire sink`` as users run it: a subprocess into Parquet (--sql, --group, then ``kwire lag``)
and JSON (--transform, on the embedded broker it starts itself), arguments it refuses with exit
status 2 and the flag named, and records deleted by retention under a streaming query
(failOnDataLoss true fails naming the topic, partition and offsets; false skips with a warning)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kwire.broker import EmbeddedBroker
from kwire.cli.main import main
from kwire.spark.sink_job import SinkJob, run

from .conftest import SPARK_SMALL, create_topic, parquet_rows, produce, sink_command, sink_env


def sink(*args: str, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(sink_command(*args, *SPARK_SMALL), capture_output=True, text=True, cwd=cwd,
                          env=sink_env(), timeout=timeout)


def test_parquet_through_sql_with_a_commit_group_then_kwire_lag_shows_no_lag(spark, broker, tmp_path):
    create_topic(broker.bootstrap, "orders")
    written = produce(broker.bootstrap, "orders",
                      [(b"user-%d" % (i % 7), b'{"id": %d}' % i, None) for i in range(300)])
    result = sink("--topic", "orders", "--bootstrap", broker.bootstrap, "--to", f"parquet:{tmp_path / 'out'}",
                  "--checkpoint", str(tmp_path / "ck"), "--trigger", "availableNow", "--max-offsets-per-trigger", "120",
                  "--sql", "SELECT CAST(key AS STRING) AS k, CAST(value AS STRING) AS v, partition, offset FROM events",
                  "--group", "sinkers", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["rows_read"] == summary["rows_written"] == 300 and summary["total_lag"] == 0 and summary["error"] is None
    assert summary["batches"] >= 3  # 300 records, at most 120 a batch
    ends = {(p["topic"], p["partition"]): p["end_offset"] for p in summary["partitions"]}
    assert ends == {("orders", p): sum(1 for q, _o in written if q == p) for p in range(3)}
    # Progress into a pipe: one line per micro-batch, with the lag per partition.
    batches = [line for line in result.stderr.splitlines() if line.startswith("batch ")]
    assert len(batches) == summary["batches"] and "orders-0=" in batches[0] and "lag 0 " in batches[-1]

    got = {(r.partition, r.offset): (r.k, r.v) for r in parquet_rows(spark, tmp_path / "out")}
    assert got == {po: (k.decode(), v.decode()) for po, (k, v, _h, _t) in written.items()}

    lag = subprocess.run([sys.executable, "-m", "kwire.cli.main", "lag", "sinkers", "--bootstrap", broker.bootstrap,
                          "--json"], capture_output=True, text=True, timeout=60)
    assert lag.returncode == 0, lag.stderr
    doc = json.loads(lag.stdout)
    assert doc["total_lag"] == 0
    assert {p["partition"]: p["committed_offset"] for p in doc["partitions"]} == {tp[1]: e for tp, e in ends.items()}


def test_json_through_a_transform_on_the_embedded_broker_it_starts(spark, tmp_path):
    # A broker's data dir with records in it; kwire sink (no --bootstrap) serves it itself.
    data = tmp_path / "kwire-data"
    with EmbeddedBroker(data, default_partitions=2) as b:
        create_topic(b.bootstrap, "clicks", partitions=2)
        written = produce(b.bootstrap, "clicks", [(None, b"click-%d" % i, None) for i in range(80)])
    (tmp_path / "shaping.py").write_text(
        "def even_offsets(df):\n"
        "    return df.where('offset % 2 = 0').selectExpr('CAST(value AS STRING) AS v', 'partition', 'offset')\n")
    result = sink("--topic", "clicks", "--to", "json:out", "--checkpoint", "ck", "--transform", "shaping:even_offsets",
                  "--trigger", "availableNow", "--broker-port", "0", "--broker-data-dir", str(data), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "no --bootstrap: started kwire's embedded broker at 127.0.0.1:" in result.stderr
    kept = sum(1 for _p, o in written if o % 2 == 0)
    assert f"80 rows read, {kept} written (counted on the way to the sink: Dataset.observe), {80 - kept} filtered" \
        in result.stdout and "Total lag: 0" in result.stdout
    got = {(r.partition, r.offset): r.v for r in spark.read.json(str(tmp_path / "out")).collect()}
    assert got == {po: v.decode() for po, (_k, v, _h, _t) in written.items() if po[1] % 2 == 0}


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own errors
        return exc.code


@pytest.mark.parametrize(("args", "message"), [
    (["--to", "parquet:x", "--checkpoint", "c"], "the following arguments are required: --topic"),
    (["--topic", "t", "--to", "csv:x", "--checkpoint", "c"], "--to: 'csv:x' is not parquet:PATH, json:PATH or console"),
    (["--topic", "t", "--to", "parquet:x"], "--checkpoint: a parquet sink needs a checkpoint directory"),
    (["--topic", "t", "--to", "console", "--trigger", "every5s"], "--trigger: 'every5s' is not availableNow"),
    (["--topic", "t", "--to", "console", "--trigger", "processingTime=5 fortnights"], "--trigger: processingTime="),
    (["--topic", "t", "--to", "console", "--sql", "SELECT 1", "--transform", "m:f"],
     "argument --transform: not allowed with argument --sql"),
    (["--topic", "t", "--to", "console", "--transform", "no_such_module_here:f"],
     "--transform: cannot import module 'no_such_module_here'"),
    (["--topic", "t", "--to", "console", "--transform", "json"], "--transform: 'json' is not module:function"),
    (["--topic", "t", "--to", "console", "--transform", "json:nothing"], "--transform: module 'json' has no 'nothing'"),
    (["--topic", "t", "--to", "console", "--max-offsets-per-trigger", "0"],
     "argument --max-offsets-per-trigger: must be at least 1"),
    (["--topic", "t", "--to", "console", "--starting-offsets", "beginning"], "--starting-offsets: 'beginning'"),
    (["--topic", "t", "--to", "console", "-X", "failOnDataLose=false"],
     "-X failOnDataLose: not an option of the kwire source; did you mean failOnDataLoss?"),
    (["--topic", "t", "--to", "console", "-X", "subscribe=u"], "-X subscribe: give it with --topic"),
    (["--topic", "t", "--to", "console", "-X", "kafka.fetch.max.byte=1"], "did you mean 'fetch.max.bytes'?"),
    (["--topic", "t", "--to", "console", "-X", "failOnDataLoss"], "argument -X: 'failOnDataLoss' is not key=value"),
    (["--topic", "t", "--to", "console", "--bootstrap", "b:1", "--conf", "spark.x"], "argument -c/--conf"),
    (["--topic", "t", "--to", "console", "--console-rows", "0"], "argument --console-rows: must be at least 1"),
])
def test_bad_arguments_exit_2_naming_the_problem_before_spark_starts(capsys, args, message):
    assert exit_code(["sink", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "message"), [
    (["--sql", "SELECT nope FROM events"], "--sql: "),
    (["--per-batch", "--sql", "SELECT nope FROM events"], "--sql: "),
    (["--sql", "SELECT CAST(key AS STRING) AS k, count(*) AS n FROM events GROUP BY 1"], "add --per-batch"),
    (["--transform", "broken_shape:shape"], "--transform: the function raised ZeroDivisionError"),
])
def test_what_spark_refuses_exits_2_naming_the_flag(spark, broker, tmp_path, monkeypatch, capsys, flags, message):
    (tmp_path / "broken_shape.py").write_text("def shape(df):\n    return 1 / 0\n")
    monkeypatch.chdir(tmp_path)
    code = main(["sink", "--topic", "orders", "--bootstrap", broker.bootstrap, "--to", f"parquet:{tmp_path / 'o'}",
                 "--checkpoint", str(tmp_path / "c"), *flags, "--trigger", "availableNow"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    if "nope" in flags[-1]:
        assert "nope" in err
    assert spark.sparkContext._jsc is not None  # the caller's session is left running
    assert not spark.streams.active  # nothing started


def test_records_deleted_by_retention_fail_the_stream_or_are_skipped_with_a_warning(spark, tmp_path):
    # Its own broker: retention runs only when the test says so.
    with EmbeddedBroker(retention_check_interval_ms=10**9) as b:
        topic = "aged-stream"
        create_topic(b.bootstrap, topic, partitions=1, internal_segment_bytes="2048", retention_bytes="4096")
        small = {"batch.size": "1024"}
        produce(b.bootstrap, topic, [(None, b"v" * 100, None, 0) for _ in range(60)], **small)

        def job(**options: str) -> SinkJob:
            return SinkJob(topic=topic, bootstrap=b.bootstrap, to=f"parquet:{tmp_path / 'out'}",
                           checkpoint=str(tmp_path / "ck"), trigger="availableNow", options=options,
                           sql="SELECT offset FROM events")

        first = run(spark, job())
        assert first.error is None and first.rows == 60
        # 200 more, and retention deletes the oldest, some of them never read by the query.
        produce(b.bootstrap, topic, [(None, b"w" * 100, None, 0) for _ in range(200)], **small)
        log = b.state.logs.get(topic, 0)
        b.call(lambda: log.apply_retention())
        start = log.log_start_offset
        assert 60 < start < 260 == log.log_end_offset

        failed = run(spark, job())
        assert failed.error is not None
        assert f"topic {topic} partition 0: offsets 60 to {start - 1} were deleted before they were read" \
            in failed.error
        assert "failOnDataLoss" in failed.error

        # failOnDataLoss=false, through the command: it carries on from the same checkpoint, skipping
        # the lost offsets with a warning (the Python worker's log, on the command's stderr).
        skipped = sink("--topic", topic, "--bootstrap", b.bootstrap, "--to", f"parquet:{tmp_path / 'out'}",
                       "--checkpoint", str(tmp_path / "ck"), "--sql", "SELECT offset FROM events",
                       "--trigger", "availableNow", "-X", "failOnDataLoss=false", "--json")
        assert skipped.returncode == 0, skipped.stderr
        assert f"topic {topic} partition 0: offsets 60 to {start - 1} were deleted before they were read" \
            in skipped.stderr and "skipping it (failOnDataLoss=false)" in skipped.stderr
        summary = json.loads(skipped.stdout)
        assert summary["rows_read"] == 260 - start and summary["total_lag"] == 0
        offsets = sorted(r.offset for r in parquet_rows(spark, tmp_path / "out"))
        assert offsets == list(range(60)) + list(range(start, 260))


def test_per_batch_counts_the_rows_each_batch_wrote(spark, broker, tmp_path):
    # foreachBatch reports no numOutputRows: the batch writer counts its own (an Observation).
    create_topic(broker.bootstrap, "grouped")
    written = produce(broker.bootstrap, "grouped", [(b"k%d" % (i % 4), b"v", None) for i in range(90)])
    job = SinkJob(topic="grouped", bootstrap=broker.bootstrap, to=f"parquet:{tmp_path / 'out'}",
                  checkpoint=str(tmp_path / "ck"), per_batch=True, trigger="availableNow", max_offsets_per_trigger=40,
                  sql="SELECT partition, count(*) AS n FROM events GROUP BY partition")
    result = run(spark, job)
    assert result.error is None and result.rows_read == 90 and result.batches >= 3
    rows = parquet_rows(spark, tmp_path / "out")
    assert sum(r.n for r in rows) == len(written) == 90
    assert (result.rows_written, result.written_by) == (len(rows), "observed")  # a row per partition per batch
    assert result.rows_filtered == 90 - len(rows)
