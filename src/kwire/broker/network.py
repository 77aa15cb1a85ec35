"""The broker's network layer: asyncio connections that split frames and send replies in order.

One ``Connection`` per client socket.  Requests on a connection are served one at a time in
arrival order (Kafka does the same: a client pipelines, the broker answers in order), so a
long-polling Fetch holds back only its own connection.  Handlers that finish at once are
answered inside ``buffer_updated`` without creating a task.

Receiving: a ``BufferedProtocol``, so the kernel writes into buffers the ``FrameSplitter``
hands out; a large frame (a Produce request) is received straight into a buffer of its own,
which then goes to the handler as it is: its record batches are stored from it, with no copy
in between (asyncio's ``data_received`` path would cost a new bytes object per read, and
splitting those another copy or two per frame).

Zero-copy: a reply's ``FileRecords`` pieces go out with ``loop.sendfile`` (os.sendfile on plain
TCP; asyncio falls back to read-and-write on transports that can't, such as TLS).

One bad connection never hurts the others: frame errors, decode errors and handler failures
close that connection and are logged with the peer's address.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import socket

from kwire.protocol.errors import ProtocolError
from kwire.protocol.framing import FrameSplitter
from kwire.protocol.splice import SplicedBytes

from .dispatch import CloseConnection, PendingReply, Reply, dispatch
from .storage.file_records import FileRecords

logger = logging.getLogger("kwire.broker.network")

__all__ = ["Connection", "ConnectionRegistry"]

# Stop reading from a client with this many requests queued behind the one being served.
MAX_QUEUED_REQUESTS = 64


class ConnectionRegistry:
    def __init__(self) -> None:
        self.open: set[Connection] = set()
        # Tasks of closed connections still unwinding; shutdown waits for them.
        self.closing: set[asyncio.Task] = set()
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    async def close_all(self) -> None:
        for conn in list(self.open):
            conn.close("broker shutting down")
        if self.closing:
            await asyncio.gather(*self.closing, return_exceptions=True)


class _FileView:
    """What ``loop.sendfile`` wants: a binary file with fileno(); it seeks at the end, which the
    shared segment descriptor must not see (reads use pread, but keep it untouched anyway)."""

    __slots__ = ("_fd",)
    mode = "rb"

    def __init__(self, fd: int):
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, *_args) -> None:
        pass


class Connection(asyncio.BufferedProtocol):
    def __init__(self, state, registry: ConnectionRegistry, max_request_size: int):
        self.state = state
        self.registry = registry
        self.id = registry.next_id()
        self.splitter = FrameSplitter(max_request_size)
        # Each frame is a bytearray of its own: handlers may keep views of it and write into it.
        self.queue: collections.deque[bytearray] = collections.deque()
        self.busy = False
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self.paused = False
        self.task: asyncio.Task | None = None

    # -- asyncio.BufferedProtocol -------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.registry.open.add(self)
        logger.debug("connection %d from %s", self.id, self.peer)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.registry.open.discard(self)
        self.queue.clear()
        self._abandon_task()
        logger.debug("connection %d from %s closed%s", self.id, self.peer, f": {exc}" if exc else "")

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.closed:  # asyncio stops reading a closed transport; never hand a broken splitter out
            return memoryview(bytearray(1))
        return self.splitter.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:
            return
        try:
            frames = self.splitter.buffer_updated(nbytes)
        except ProtocolError as exc:
            self.close(f"bad frame: {exc}")
            return
        if not frames:
            return
        self.queue.extend(frames)
        if len(self.queue) > MAX_QUEUED_REQUESTS and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        if not self.busy:
            self._serve()

    # -- serving --------------------------------------------------------------------------------
    def _serve(self) -> None:
        """Answer queued requests in order until one needs to wait (then a task carries on)."""
        while self.queue and not self.closed:
            frame = self.queue.popleft()
            try:
                result = dispatch(self.state, frame, client_host=self.peer, connection_id=self.id)
            except CloseConnection as exc:
                self.close(str(exc))
                return
            except Exception:
                logger.exception("connection %d from %s: request failed", self.id, self.peer)
                self.close("internal error")
                return
            if isinstance(result, Reply) and not any(isinstance(p, SplicedBytes) for p in result.parts):
                for part in result.parts:
                    self.transport.write(part)
                continue
            if result is None:
                continue
            self.busy = True
            self.task = asyncio.get_running_loop().create_task(self._serve_async(result))
            if isinstance(result, PendingReply):
                # A task cancelled before its first step (the connection closed at once) never
                # awaits the handler: close it so it is not reported as never awaited.
                self.task.add_done_callback(lambda _task, pending=result: pending.close())
            return
        if self.paused and not self.closed and len(self.queue) <= MAX_QUEUED_REQUESTS // 2:
            self.paused = False
            self.transport.resume_reading()

    async def _serve_async(self, result) -> None:
        try:
            if not isinstance(result, Reply):
                result = await result
            if result is not None and not self.closed:
                await self._send(result)
        except CloseConnection as exc:
            self.close(str(exc))
            return
        except (ConnectionError, OSError) as exc:
            self.close(f"send failed: {exc}")
            return
        except Exception:
            logger.exception("connection %d from %s: request failed", self.id, self.peer)
            self.close("internal error")
            return
        finally:
            self.busy = False
            self.task = None
        if not self.closed:
            self._serve()

    async def _send(self, reply: Reply) -> None:
        loop = asyncio.get_running_loop()
        transport = self.transport
        for part in reply.parts:
            if self.closed:
                return
            if isinstance(part, FileRecords):
                for piece in part.slices:
                    await loop.sendfile(transport, _FileView(piece.fileno()), piece.position, piece.length)
            elif isinstance(part, SplicedBytes):
                transport.write(part.read())
            else:
                transport.write(part)

    def close(self, why: str) -> None:
        if self.closed:
            return
        self.closed = True
        level = logging.DEBUG if why == "broker shutting down" else logging.WARNING
        logger.log(level, "closing connection %d from %s: %s", self.id, self.peer, why)
        self.queue.clear()
        self._abandon_task()
        if self.transport is not None:
            self.transport.abort() if why != "broker shutting down" else self.transport.close()

    def _abandon_task(self) -> None:
        """Cancel the request being served (a long-polling Fetch, a parked JoinGroup): nobody is
        left to answer.  Shutdown waits for it through the registry."""
        task = self.task
        if task is None or task is asyncio.current_task():
            return
        task.cancel()
        self.registry.closing.add(task)
        task.add_done_callback(self.registry.closing.discard)
