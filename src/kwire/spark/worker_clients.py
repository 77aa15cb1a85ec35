"""kwire clients kept for the life of a Python worker process.

Spark reuses its Python workers across tasks (``spark.python.worker.reuse``, on by default), so
a task takes the consumer or producer a previous task of the same query left: no new
connections, no metadata round trips, and a producer whose batches keep filling across tasks.
Clients are keyed by their settings; one task at a time runs in a worker, so a client is never
shared by two tasks at once.  They are closed when the worker exits.

A forked worker starts with an empty cache (the clients' loop thread is per process too).

Spark's worker daemon runs a full garbage collection after every task of a reused worker
(``gc.collect()`` in pyspark/daemon.py).  With pyarrow, pandas and kwire loaded it walks about
100,000 objects that live as long as the worker: about 30 ms of CPU per task, a fifth of the
worker's CPU when reading 1 KiB records (measured with perf and gc.callbacks, 4 MiB fetches).
So when the first kwire task of a reused worker ends (``task_done``), what is loaded by then
goes to the permanent generation (``gc.freeze()``, made for long-lived objects of this kind),
and those collections walk only what later tasks make.  The end of a task, not its start:
PySpark imports pandas (about 300 modules) while the first task runs.
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
from collections.abc import Mapping
from typing import Any

from kwire.client import Consumer, Producer

__all__ = ["consumer", "producer", "task_done"]

_lock = threading.Lock()
_clients: dict[tuple, Any] = {}
_owner_pid: int | None = None
_frozen_pid: int | None = None


def _key(kind: str, settings: Mapping[str, Any]) -> tuple:
    return (kind, *sorted((k, repr(v)) for k, v in settings.items()))


def _get(kind: str, settings: Mapping[str, Any], make) -> Any:
    global _owner_pid
    key = _key(kind, settings)
    with _lock:
        if _owner_pid != os.getpid():
            # Clients inherited through a fork belong to the parent (their loop thread did not
            # survive): forget them without closing them.
            _clients.clear()
            _owner_pid = os.getpid()
        client = _clients.get(key)
        if client is None or getattr(client, "closed", False):
            client = _clients[key] = make(dict(settings))
        return client


def consumer(settings: Mapping[str, Any]) -> Consumer:
    """This worker's consumer for ``settings`` (no group: readers assign and seek)."""
    return _get("consumer", settings, Consumer)


def producer(settings: Mapping[str, Any]) -> Producer:
    """This worker's producer for ``settings``."""
    return _get("producer", settings, Producer)


def task_done() -> None:
    """A kwire task (a read or a write) ended in this worker: in a reused PySpark worker, the
    first time, freeze what is loaded for the garbage collector (see above)."""
    global _frozen_pid
    if _frozen_pid == os.getpid() or not os.environ.get("SPARK_REUSE_WORKER"):
        return
    _frozen_pid = os.getpid()
    gc.collect()  # what is garbage now must not be kept for good
    gc.freeze()


def discard(client: Any) -> None:
    """Drop a client that failed in a way that may have left it unusable, closing it."""
    with _lock:
        for key, value in list(_clients.items()):
            if value is client:
                del _clients[key]
    try:
        client.close()
    except Exception:  # noqa: BLE001 - it is being thrown away because it failed
        pass


@atexit.register
def _close_all() -> None:
    if _owner_pid != os.getpid():
        return
    for client in list(_clients.values()):
        try:
            client.close(5)
        except Exception:  # noqa: BLE001 - the worker is exiting; nothing to report to
            pass
    _clients.clear()
