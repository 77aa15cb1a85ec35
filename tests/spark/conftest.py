"""Fixtures of the Spark data source tests: one local[2] SparkSession per module (UI off, few
shuffle partitions: the machine has 2 cores), kwire's embedded broker, and helpers that produce
with kwire's Producer and read back with kwire's Consumer."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable

import pytest

import kwire.spark
from kwire.broker import EmbeddedBroker
from kwire.client import Admin, Consumer, NewTopic, Producer, TopicPartition

PARTITIONS = 3


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=PARTITIONS) as b:
        yield b


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    # The Python workers must be this interpreter (pyarrow, kwire): not whatever python3 is on PATH.
    saved = {name: os.environ.get(name) for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("kwire-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               # Python workers' log records (failOnDataLoss=false warnings) in python_worker_logs().
               .config("spark.sql.pyspark.worker.logging.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    kwire.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS, **configs: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions,
                                      configs={k.replace("_", "."): v for k, v in configs.items()})])


def produce(bootstrap: str, topic: str, records: Iterable[tuple], **conf) -> dict[tuple[int, int], tuple]:
    """Produce ``(key, value, headers[, partition[, timestamp]])`` records with kwire's Producer;
    (partition, offset) -> (key, value, headers tuple, timestamp ms) of each acknowledged record
    (the broker's timestamp where the topic uses LogAppendTime)."""
    records = list(records)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf}) as producer:
        futures = []
        for record in records:
            key, value, headers, *rest = record
            partition = rest[0] if rest else None
            timestamp = rest[1] if len(rest) > 1 else None
            futures.append(producer.produce(topic, value, key, partition=partition, timestamp=timestamp,
                                            headers=headers))
        assert producer.flush(30) == 0
    written = {}
    for future, (key, value, headers, *_rest) in zip(futures, records, strict=True):
        md = future.result()
        written[(md.partition, md.offset)] = (key, value, tuple(headers or ()), md.timestamp)
    return written


def read_back(bootstrap: str, topic: str, expected: int, partitions: int = PARTITIONS) -> list:
    """Every record of ``topic`` through kwire's Consumer (waits for ``expected`` of them)."""
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            got += consumer.poll(0.2)
        got += consumer.poll(0.2)  # and nothing more
    return got


def kafka_rows(df) -> dict[tuple[str, int, int], tuple]:
    """The rows of a kwire source DataFrame: (topic, partition, offset) -> (key, value, headers,
    timestamp ms, timestampType).  The milliseconds come from Spark (unix_millis), free of any
    time zone."""
    out = {}
    for r in df.selectExpr("*", "unix_millis(timestamp) AS millis").collect():
        row = r.asDict(recursive=True)
        headers = tuple((h["key"], h["value"]) for h in row.get("headers") or ())
        out[(row["topic"], row["partition"], row["offset"])] = (
            row["key"], row["value"], headers, row["millis"], row["timestampType"])
    return out


# -- kwire sink as users run it -------------------------------------------------------------------
# Small Spark for the 2-core machine: two local threads, no UI, two shuffle partitions.
SPARK_SMALL = ("--master", "local[2]", "-c", "spark.ui.enabled=false", "-c", "spark.sql.shuffle.partitions=2")


def sink_env(**extra: str) -> dict[str, str]:
    """The environment of a ``kwire sink`` subprocess: this interpreter for the Python workers,
    no $KWIRE_BOOTSTRAP from the caller."""
    env = {k: v for k, v in os.environ.items() if k not in ("KWIRE_BOOTSTRAP", "PYSPARK_DRIVER_PYTHON")}
    env["PYSPARK_PYTHON"] = sys.executable
    env.update(extra)
    return env


def sink_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kwire.cli.main", "sink", *args]


def parquet_rows(spark, path) -> list:
    """Rows of a file sink's output read through Spark (which keeps to its _spark_metadata log)."""
    return spark.read.parquet(str(path)).collect()
