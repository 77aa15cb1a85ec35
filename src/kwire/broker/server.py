"""The broker process: state + listening socket + background maintenance, started and stopped.

``Broker(config)`` is used by ``kwire broker`` and by the embedded broker::

    broker = Broker(config)
    await broker.start()          # opens (and if needed recovers) the data dir, then listens
    ...
    await broker.stop()           # closes connections, flushes, writes the clean-shutdown marker
"""

from __future__ import annotations

import asyncio
import logging
import time

from .config import BrokerConfig
from .network import Connection, ConnectionRegistry
from .state import BrokerState

logger = logging.getLogger("kwire.broker")

__all__ = ["Broker"]


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.state: BrokerState | None = None
        self._server: asyncio.base_events.Server | None = None
        self._connections = ConnectionRegistry(config.queued_max_request_bytes)
        self._tasks: list[asyncio.Task] = []
        self.started = asyncio.Event()

    @property
    def address(self) -> tuple[str, int]:
        """The advertised (host, port) clients connect to (the bound port when port was 0)."""
        return self.state.config.advertised

    @property
    def bootstrap(self) -> str:
        host, port = self.address
        return f"{host}:{port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        # Opening the data dir may recover logs after a crash: keep it off the event loop.
        self.state = await loop.run_in_executor(None, BrokerState, self.config)
        try:
            self._server = await loop.create_server(
                lambda: Connection(self.state, self._connections, self.config.max_request_size),
                self.config.host, self.config.port, reuse_address=True, backlog=1024)
        except BaseException:
            self.state.close()
            raise
        bound = self._server.sockets[0].getsockname()[1]
        # Handlers read the advertised address from the state's config: give it the bound port
        # (the same as the configured one unless that was 0).
        self.state.config = self.state.config.with_(port=bound)
        self._tasks.append(loop.create_task(self._every(self.config.retention_check_interval_ms, self._retention)))
        if self.config.fsync == "interval":
            self._tasks.append(loop.create_task(self._every(self.config.fsync_interval_ms, self._flush)))
        logger.info("kwire broker %d listening on %s:%d (advertised %s), data in %s, started in %.2f s",
                    self.config.node_id, self.config.host, bound, self.bootstrap, self.config.data_dir,
                    time.monotonic() - t0)
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

    async def serve_forever(self) -> None:
        await self._server.serve_forever()

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
        if self._server is not None:
            self._server.close()
        await self._connections.close_all()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.state is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, lambda: self.state.close(clean=clean))
            logger.info("kwire broker stopped%s", "" if clean else " (unclean)")
