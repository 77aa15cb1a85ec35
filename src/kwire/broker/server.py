"""The broker process: state + listening socket + background maintenance, started and stopped.

``Broker(config)`` is used by ``kwire broker`` and by the embedded broker::

    broker = Broker(config)
    await broker.start()          # opens (and if needed recovers) the data dir, then listens
    ...
    await broker.stop()           # closes connections, flushes, writes the clean-shutdown marker
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from kwire.security import server_context

from .config import BrokerConfig
from .coordinator.loader import Executor
from .listeners import Listener, ListenerSpec, parse_advertised, wildcard_host
from .network import Connection, ConnectionRegistry
from .state import BrokerState
from .storage import CleanerConfig
from .tls_handshake import TlsHandshake

logger = logging.getLogger("kwire.broker")

__all__ = ["Broker"]


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.state: BrokerState | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._connections = ConnectionRegistry(config.queued_max_request_bytes)
        self._tasks: list[asyncio.Task] = []
        self.started = asyncio.Event()
        # Where the coordinators' partitions are loaded after start (coordinator.loader): the
        # partitions in an executor (None: a worker thread of their own; a small one a request
        # asks for is loaded inside it), what follows such loads on the event loop's turn given
        # by a schedule (None: loop.call_soon).  Tests set ones they hold, to see the broker
        # while it loads.
        self.coordinator_load_executor: Executor | None = None
        self.coordinator_load_schedule: Callable[[Callable[[], None]], Any] | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The advertised (host, port) of the first listener (the bound port when port was 0)."""
        return self.state.listeners[0].advertised

    @property
    def bootstrap(self) -> str:
        host, port = self.address
        return f"{host}:{port}"

    @property
    def listeners(self) -> dict[str, Listener]:
        """The bound listeners by name."""
        return {listener.name: listener for listener in self.state.listeners}

    def bootstrap_for(self, name: str) -> str:
        """host:port of one listener (by name, e.g. "SASL_SSL"), for clients' bootstrap.servers."""
        listener = self.listeners.get(name.upper())
        if listener is None:
            raise KeyError(f"no listener {name!r} (listeners: {', '.join(self.listeners)})")
        host, port = listener.advertised
        return f"{host}:{port}"

    def _advertise(self, spec: ListenerSpec, bound: int, legacy: bool) -> tuple[str, int]:
        config = self.config
        named = parse_advertised(config.advertised_listeners, config.listener_specs()).get(spec.name)
        if named is not None:
            return named[0], named[1] or bound
        host = config.advertised_host or (spec.host if not wildcard_host(spec.host) else "127.0.0.1")
        return host, (config.advertised_port if legacy and config.advertised_port else bound)

    async def _listen(self, loop) -> None:
        config = self.config
        specs = config.listener_specs()
        tls = None
        if any(spec.tls for spec in specs):
            tls = server_context(certificate_location=config.ssl_certificate_location,
                                 key_location=config.ssl_key_location, key_password=config.ssl_key_password,
                                 ca_location=config.ssl_ca_location, client_auth=config.ssl_client_auth)
        for spec in specs:
            listener = Listener(spec, spec.port, ("", 0), tls if spec.tls else None)

            def connection(listener=listener) -> Connection:
                return Connection(self.state, self._connections, config.max_request_size, listener)

            def accept(listener=listener, connection=connection):
                if listener.ssl_context is None:
                    return connection()
                # The broker runs the handshake, so that a failed one is logged (tls_handshake.py).
                return TlsHandshake(connection, listener.ssl_context, listener.name,
                                    problems=self._connections.problems)

            server = await loop.create_server(accept, spec.host or None, spec.port, reuse_address=True, backlog=1024)
            self._servers.append(server)
            listener.port = server.sockets[0].getsockname()[1]
            listener.advertised = self._advertise(spec, listener.port, legacy=not config.listeners)
            self.state.listeners.append(listener)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        # Opening the data dir may recover logs after a crash: keep it off the event loop.  The
        # coordinators' internal partitions are loaded after the listeners bind (start_loading).
        self.state = await loop.run_in_executor(None, functools.partial(BrokerState, self.config,
                                                                        load_coordinators=False))
        try:
            await self._listen(loop)
        except BaseException:
            for server in self._servers:
                server.close()
            self._servers.clear()
            self.state.close()
            raise
        first = self.state.listeners[0]
        # Requests not from a listener's connection read the advertised address from the state's
        # config: give it the first listener's (the bound port when port was 0).
        self.state.config = self.state.config.with_(port=first.port, advertised_host=first.advertised[0],
                                                    advertised_port=first.advertised[1])
        self.state.transactions.start()  # transaction timeouts run on this loop from now on
        # __consumer_offsets and __transaction_state load in the background, as in Kafka: their
        # groups and transactional ids answer COORDINATOR_LOAD_IN_PROGRESS until then.
        # Its reads in the background wait until the first requests are answered (coordinator.loader).
        connections = self._connections
        self.state.start_loading(executor=self.coordinator_load_executor, schedule=self.coordinator_load_schedule,
                                 requests_seen=lambda: connections.requests)
        # Compaction of cleanup.policy=compact partitions, on its own threads (Kafka's LogCleaner).
        # state.config: the static settings with the dynamic log.cleaner.* ones (AlterConfigs) applied.
        self.state.logs.start_cleaner(CleanerConfig.from_broker(self.state.config))
        self._tasks.append(loop.create_task(self._every(self.config.retention_check_interval_ms, self._retention)))
        if self.config.fsync == "interval":
            self._tasks.append(loop.create_task(self._every(self.config.fsync_interval_ms, self._flush)))
        for listener in self.state.listeners:
            logger.info("listener %s (%s) on %s:%d, advertised as %s:%d", listener.name, listener.protocol,
                        listener.spec.host or "*", listener.port, *listener.advertised)
        security = self.state.security
        if any(listener.sasl for listener in self.state.listeners):
            logger.info("SASL mechanisms %s; %d user(s) in %s", ", ".join(security.mechanisms),
                        len(security.credentials.users()), security.credentials.path)
        if security.authorizer is not None:
            logger.info("authorizer on: %d ACL(s); super users: %s; no ACL found means %s",
                        len(security.acls.bindings()), ", ".join(sorted(security.authorizer.super_users)) or "none",
                        "allow" if security.authorizer.allow_if_no_acl else "deny")
        logger.info("kwire broker %d listening (bootstrap %s), data in %s, started in %.2f s",
                    self.config.node_id, self.bootstrap, self.config.data_dir, time.monotonic() - t0)
        self.started.set()

    async def _every(self, interval_ms: int, job) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await loop.run_in_executor(None, job)
            except Exception:
                logger.exception("background job %s failed", job.__name__)

    def _retention(self) -> None:
        for (topic, partition), bases in self.state.logs.apply_retention_all().items():
            logger.info("retention deleted %d segment(s) of %s-%d", len(bases), topic, partition)

    def _flush(self) -> None:
        self.state.logs.flush_all()
        self.state.coordinator.flush()
        self.state.transactions.flush()

    async def serve_forever(self) -> None:
        await asyncio.gather(*(server.serve_forever() for server in self._servers))

    async def stop(self, *, clean: bool = True) -> None:
        """Stop listening, close every connection, close the state (clean: flush + marker)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        for server in self._servers:
            server.close()
        await self._connections.close_all()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        if self.state is not None:
            loop = asyncio.get_running_loop()
            # A clean under way is aborted (or finishes its swap) before the logs close.
            await loop.run_in_executor(None, self.state.logs.stop_cleaner)
            await loop.run_in_executor(None, lambda: self.state.close(clean=clean))
            logger.info("kwire broker stopped%s", "" if clean else " (unclean)")
