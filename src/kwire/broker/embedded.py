"""A broker inside your Python process, for tests and local work.

Synchronous (runs its own event loop in a background thread)::

    from kwire.broker import EmbeddedBroker
    with EmbeddedBroker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

Asynchronous (runs in the caller's event loop)::

    async with EmbeddedBroker() as broker:
        ...

It listens on a free port of 127.0.0.1 and keeps its data in a temporary directory removed at
exit, unless ``data_dir`` is given.  Other settings are ``BrokerConfig`` fields as keywords
(``EmbeddedBroker(default_partitions=3, fsync="always")``).

Its defaults are for tests: a new consumer group rebalances at once
(``group_initial_rebalance_delay_ms=0``, where Kafka and ``kwire broker`` wait 3000 ms for more
members).  A test that depends on Kafka's delay passes ``group_initial_rebalance_delay_ms=3000``.

Security: listeners, TLS files and the authorizer are settings too; users are added with
``add_user`` (before or after start)::

    with EmbeddedBroker(listeners=["SASL_SSL://127.0.0.1:0"], ssl_certificate_location=cert,
                        ssl_key_location=key) as broker:
        broker.add_user("alice", "secret")
        conf = {"bootstrap.servers": broker.bootstrap_for("SASL_SSL"), ...}
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from .config import load_config
from .server import Broker

__all__ = ["EmbeddedBroker"]


class EmbeddedBroker:
    """A kwire broker running inside this process: ``with EmbeddedBroker() as b`` (or ``async
    with``) starts it on a free port of 127.0.0.1 and stops it at the end.

    ``data_dir``: where the logs live (default: a temporary directory removed at stop).
    ``settings``: any ``BrokerConfig`` field by name (``default_partitions=3``, ``fsync="always"``,
    ``listeners=[...]``); an unknown name or a bad value raises ``ConfigError`` naming it.
    """

    def __init__(self, data_dir: str | Path | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 **settings: Any):
        self._tmp: str | None = None
        if data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="kwire-broker-")
            data_dir = self._tmp
        self.config = load_config(None, data_dir=Path(data_dir), host=host, port=port, **settings)
        self.broker = Broker(self.config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` to give clients as bootstrap.servers."""
        return self.broker.bootstrap

    @property
    def port(self) -> int:
        """The TCP port of the first listener (chosen by the OS when 0 was asked for)."""
        return self.broker.address[1]

    def bootstrap_for(self, listener: str) -> str:
        """``host:port`` of one listener by name (``"SASL_SSL"``, or the name given in ``listeners``)."""
        return self.broker.bootstrap_for(listener)

    def add_user(self, username: str, password: str, mechanisms=None, *, iterations: int = 4096) -> None:
        """Create or replace a SASL user (SCRAM credentials in the data dir; PLAIN checks against them)."""
        from .auth.credentials import CredentialStore
        from .auth.sasl import SCRAM_MECHANISMS

        CredentialStore(self.config.data_dir).set_password(username, password, mechanisms or SCRAM_MECHANISMS,
                                                           iterations=iterations)

    @property
    def data_dir(self) -> Path:
        """The directory holding the broker's logs and metadata."""
        return self.config.data_dir

    @property
    def state(self):
        """The broker's ``BrokerState`` (logs, topics, coordinators), for tests that look inside;
        touch it from the broker's loop only (see ``call``)."""
        return self.broker.state

    # -- async ------------------------------------------------------------------------------
    async def __aenter__(self) -> EmbeddedBroker:
        try:
            await self.broker.start()
        except BaseException:
            self._cleanup()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await self.broker.stop()
        finally:
            self._cleanup()

    # -- sync -------------------------------------------------------------------------------
    def start(self) -> EmbeddedBroker:
        """Start the broker on a background thread; returns once it accepts connections."""
        if self._thread is not None:
            raise RuntimeError("this EmbeddedBroker is already running")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self.broker.start())
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="kwire-broker", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            self._loop.close()
            self._cleanup()
            raise failure[0]
        return self

    def stop(self, *, clean: bool = True) -> None:
        """Stop the broker and (if it made one) remove its temporary data dir."""
        if self._thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self.broker.stop(clean=clean), self._loop)
        try:
            fut.result(timeout=60)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=60)
            self._loop.close()
            self._thread = None
            self._cleanup()

    def wait_loaded(self, timeout: float | None = 30) -> bool:
        """Wait until the group and transaction coordinators have loaded their internal
        partitions, which they do in the background after ``start()`` (as Kafka's after a
        restart: clients retry COORDINATOR_LOAD_IN_PROGRESS meanwhile, except for a group of a
        small partition, loaded inside its first request).  For callers that read ``state``
        directly; whether the load finished within ``timeout`` seconds.  The load starts now if
        it was still waiting for the first requests (coordinator.loader)."""
        loader = self.broker.state.loader if self.broker.state is not None else None
        if loader is None:
            return True
        if loader.holding and self._loop is not None:
            self._loop.call_soon_threadsafe(loader.release)
        return loader.done.wait(timeout)

    def call(self, fn, *args):
        """Run ``fn(*args)`` on the broker's event loop thread and return its result (tests use it
        to look at the state without racing the broker)."""
        if self._loop is None:
            return fn(*args)

        async def run():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=60)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _cleanup(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
