"""kwire on a Spark cluster: shipping kwire to the executors, and a standalone cluster to try it.

Executors run the kwire source's reads and writes in their Python workers, so they need kwire
and its dependencies.  Two ways, both plain Spark:

* Install ``kwire`` (``pip install kwire``) in the executors' Python, as any library.
* Or ship it from the driver: ``ship_kwire(spark)`` zips the kwire package the driver runs and
  adds it with ``SparkContext.addPyFile`` (the same as ``spark-submit --py-files kwire.zip``), so
  executors import exactly the driver's kwire.  What the zip cannot carry are compiled modules,
  which Python does not import from a zip: kwire's dependencies, which the executors' Python
  must have (pyarrow, which PySpark's Python data sources need anyway, cramjam, crc32c and
  zstandard; ``spark.pyspark.python`` names that Python), and kwire's own optional helper
  (``kwire.protocol.records._layout``), without which the executors read with its slower
  Python stand-in.  Installing kwire on the nodes gives them the helper too.

``kwire sink --master spark://...`` ships kwire this way by itself.

``LocalCluster`` starts a Spark standalone master and workers on this machine from the PySpark
installation (``SPARK_HOME`` is the pyspark package directory; ``bin/spark-class`` runs the
``Master`` and ``Worker`` classes), for tests and for trying a cluster without installing one::

    with LocalCluster(workers=1, cores=2, memory="2g") as cluster:
        spark = (SparkSession.builder.master(cluster.master_url)
                 .config("spark.pyspark.python", sys.executable).getOrCreate())
        ship_kwire(spark)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ClusterError", "LocalCluster", "kwire_zip", "ship_kwire", "spark_home"]


class ClusterError(RuntimeError):
    """A master or worker that did not come up."""


def spark_home() -> Path:
    """``$SPARK_HOME``, else the pyspark package directory (where pip puts Spark's jars and bin/)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def kwire_zip(directory: str | Path | None = None) -> Path:
    """A zip of the kwire package this process imported (sources only), for ``addPyFile``."""
    import importlib.machinery

    import kwire

    package = Path(kwire.__file__).parent
    directory = Path(directory or tempfile.mkdtemp(prefix="kwire-ship-"))
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "kwire.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo") \
                    and not path.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                zf.write(path, Path("kwire") / path.relative_to(package))
    return target


def ship_kwire(spark: SparkSession, directory: str | Path | None = None) -> Path:
    """Zip this process's kwire and add it to ``spark``'s Python path on every executor."""
    path = kwire_zip(directory)
    spark.sparkContext.addPyFile(str(path))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """A standalone master and ``workers`` workers on 127.0.0.1, each worker its own JVM.

    ``start()`` returns once the master is up and every worker has registered with it (bounded by
    ``timeout`` seconds: a ``ClusterError`` with the logs otherwise); ``stop()`` ends them all.
    Logs are in ``log_dir``.
    """

    def __init__(self, workers: int = 1, *, cores: int = 1, memory: str = "1g", timeout: float = 120,
                 work_dir: str | Path | None = None, host: str = "127.0.0.1"):
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.timeout = timeout
        self.host = host
        self._tmp = None if work_dir else tempfile.TemporaryDirectory(prefix="kwire-spark-cluster-")
        self.work_dir = Path(work_dir or self._tmp.name)  # type: ignore[union-attr]
        self.log_dir = self.work_dir / "logs"
        self.master_url: str | None = None
        self._processes: list[tuple[str, subprocess.Popen, Path]] = []

    def _spawn(self, name: str, *args: str) -> Path:
        home = spark_home()
        log = self.log_dir / f"{name}.log"
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": self.host,
               "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(home / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self._processes.append((name, proc, log))
        return log

    def _wait_for(self, log: Path, marker: str, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if marker in text:
                return
            for name, proc, _log in self._processes:
                if proc.poll() is not None:
                    raise ClusterError(f"the Spark {name} exited ({proc.returncode}) before {what}:\n{self.logs()}")
            time.sleep(0.2)
        raise ClusterError(f"{what} did not happen within {self.timeout:g} s:\n{self.logs()}")

    def start(self) -> LocalCluster:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        try:
            log = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", self.host,
                              "--port", str(port), "--webui-port", str(_free_port()))
            self._wait_for(log, "I have been elected leader", "the master starting")
            self.master_url = f"spark://{self.host}:{port}"
            for i in range(self.workers):
                worker_dir = self.work_dir / f"worker-{i}"
                worker_dir.mkdir(exist_ok=True)
                log = self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                                  "--host", self.host, "--cores", str(self.cores), "--memory", self.memory,
                                  "--webui-port", str(_free_port()), "--work-dir", str(worker_dir))
                self._wait_for(log, "Successfully registered with master", f"worker {i} registering with the master")
        except BaseException:
            self.stop()
            raise
        return self

    def logs(self, tail: int = 4000) -> str:
        parts = []
        for name, _proc, log in self._processes:
            text = log.read_text(errors="replace") if log.exists() else ""
            parts.append(f"--- {name} ({log}) ---\n{text[-tail:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Workers first (they kill their executors), then the master; SIGKILL after 30 s."""
        for _name, proc, _log in reversed(self._processes):
            if proc.poll() is None:
                # The whole process group: a worker's executors and their Python workers too.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc, _log in reversed(self._processes):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self._processes.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
