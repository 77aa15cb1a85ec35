"""kwire on a real Spark cluster, not local mode: a standalone master and a worker started from
this machine's PySpark installation (``bin/spark-class`` ``Master`` and ``Worker``), each its
own JVM, the executors separate JVMs launched by the worker.  kwire reaches the executors as a
user would ship it: a zip added with ``addPyFile`` (``kwire.spark.cluster.ship_kwire``; ``kwire
sink --master spark://...`` does it itself), their Python named by ``spark.pyspark.python``.

A batch read through the cluster returns exactly what was produced, and ``kwire sink`` runs its
query on the cluster into Parquet, read back through the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import kwire.spark
from kwire.spark.cluster import LocalCluster, ship_kwire

from .conftest import create_topic, kafka_rows, produce, sink_command, sink_env
from .test_batch_read import expected_rows, sample

# Two applications at a time (this session and a kwire sink) on one 2-core worker: one core each.
APP_CONF = {"spark.cores.max": "1", "spark.executor.cores": "1", "spark.executor.memory": "512m",
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2"}


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(workers=1, cores=2, memory="2g") as c:
        yield c


@pytest.fixture(scope="module")
def cluster_spark(cluster, tmp_path_factory):
    from pyspark.sql import SparkSession

    saved = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(cluster.master_url).appName("kwire cluster test")
    for key, value in {**APP_CONF, "spark.pyspark.python": sys.executable}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    ship_kwire(session, tmp_path_factory.mktemp("ship"))
    kwire.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        if saved is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = saved


def test_a_batch_read_runs_on_the_clusters_executors_with_kwire_shipped(cluster, cluster_spark, broker):
    spark = cluster_spark
    assert spark.sparkContext.master == cluster.master_url
    written = produce(broker.bootstrap, "on-cluster", sample(300, b"c"), **{"compression.type": "zstd"})
    df = (spark.read.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", "on-cluster").option("includeHeaders", "true").option("minPartitions", "4").load())
    assert kafka_rows(df) == expected_rows("on-cluster", written)

    # The tasks ran in the worker's executor, whose Python imports kwire from the shipped zip.
    assert spark.sparkContext._jsc.sc().getExecutorIds().size() >= 1
    where = spark.sparkContext.parallelize(range(2), 2).map(lambda _: __import__("kwire").__file__).collect()
    assert all("kwire.zip" in path for path in where), where
    # Python imports no compiled module from a zip (kwire_zip leaves them out): the executors
    # read with the Python stand-in for kwire's compiled helper, so this test covers it on a cluster.
    helper = spark.sparkContext.parallelize(range(2), 2).map(
        lambda _: __import__("kwire.spark.columns", fromlist=["_layout"])._layout).collect()
    assert helper == [None, None]
    assert "Registering app kwire cluster test" in cluster.logs(tail=10**6)


def test_kwire_sink_runs_its_query_on_the_cluster(cluster, cluster_spark, broker, tmp_path):
    create_topic(broker.bootstrap, "to-cluster")
    written = produce(broker.bootstrap, "to-cluster", [(b"k%d" % i, b"v%d" % i, None) for i in range(500)])
    conf = [arg for key, value in APP_CONF.items() for arg in ("-c", f"{key}={value}")]
    result = subprocess.run(
        sink_command("--master", cluster.master_url, *conf, "--topic", "to-cluster", "--bootstrap", broker.bootstrap,
                     "--to", f"parquet:{tmp_path / 'out'}", "--checkpoint", str(tmp_path / "ck"),
                     "--trigger", "availableNow", "--max-offsets-per-trigger", "200",
                     "--sql", "SELECT CAST(key AS STRING) AS k, CAST(value AS STRING) AS v, partition, offset "
                              "FROM events", "--json"),
        capture_output=True, text=True, env=sink_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["rows_read"] == 500 and summary["total_lag"] == 0 and summary["batches"] >= 3
    assert "Registering app kwire sink" in cluster.logs(tail=10**6)

    got = {(r.partition, r.offset): (r.k, r.v) for r in cluster_spark.read.parquet(str(tmp_path / "out")).collect()}
    assert got == {po: (k.decode(), v.decode()) for po, (k, v, _h, _t) in written.items()}
