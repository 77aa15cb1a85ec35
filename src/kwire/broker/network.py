"""The broker's network layer: asyncio connections that split frames and send replies in order.

One ``Connection`` per client socket.  Requests on a connection are served one at a time in
arrival order (Kafka does the same: a client pipelines, the broker answers in order), so a
long-polling Fetch holds back only its own connection.  Handlers that finish at once are
answered inside ``buffer_updated`` without creating a task.

The wire rules are the connection machine's (``kwire.protocol.connection.ServerConnection``,
``Connection.wire``): its splitter frames the bytes, and each frame is read as a request (or a
bare SASL token after a SaslHandshake v0) when it is served, in the state the answers before it
left the connection in.  This module queues frames, schedules their serving, and moves bytes.

Receiving: a ``BufferedProtocol``, so the kernel writes into buffers the ``FrameSplitter``
hands out; a large frame (a Produce request) is received straight into a buffer of its own,
which then goes to the handler as it is: its record batches are stored from it, with no copy
in between (asyncio's ``data_received`` path would cost a new bytes object per read, and
splitting those another copy or two per frame).

File ranges: a reply's ``FileRecords`` pieces go out with ``os.sendfile`` on plain TCP, called
straight away while the socket has room (an answer that fits is sent without a task) and through
``loop.sendfile`` once it must wait.  To a loopback peer (the usual one of a development broker)
they are written instead from a read-only map of the segment file, made for each range: over
loopback the zero-copy path costs more than the copy it saves, at both ends (see
``_send_mapped_now``).  On TLS listeners the bytes must pass through the TLS layer: they are read
and written.

Each connection has its listener and a ``Session`` (who is on it, see ``auth.sasl``): on SASL
listeners frames are limited to 512 KiB until the login completes, and a request whose answer must
be the last (a failed login) closes the connection once that answer is written.

One bad connection never hurts the others: frame errors, decode errors and handler failures
close that connection and are logged with the peer's address, through the registry's
``ProblemLog`` (log_limiter.py): under a flood of bad connections, a few lines per kind of problem
and interval, then a count.

A connection waiting for request memory is not read from (that is the point), so it cannot see
its client leave.  Before it is given a frame buffer, and every ``WAITING_SWEEP_S`` while it
waits, it looks at its socket: one whose client has gone (reset, or ended its side without the
rest of the frame) gives up its place without anything being allocated for it.
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import ipaddress
import itertools
import logging
import mmap
import os
import select
import socket
import struct
import termios

from kwire.protocol.connection import ServerConnection
from kwire.protocol.errors import ProtocolError
from kwire.protocol.framing import FrameSplitter
from kwire.protocol.splice import SplicedBytes

from .auth.principal import ANONYMOUS, principal_from_certificate
from .auth.sasl import PRE_AUTH_MAX_FRAME, Session
from .dispatch import CloseConnection, PendingReply, Reply, dispatch
from .log_limiter import ProblemLog
from .storage.file_records import FileRecords

logger = logging.getLogger("kwire.broker.network")

__all__ = ["Connection", "ConnectionRegistry", "RequestMemory"]

# Stop reading from a client with this many requests queued behind the one being served.
MAX_QUEUED_REQUESTS = 64
# After a failed login is answered, the connection stays open this long (or until the client sends
# anything, which closes it): a client that reads the answer and the end of the stream in one go
# (kafka-python does) may drop the answer and report a bare disconnection instead of the reason.
FAILED_LOGIN_LINGER_S = 1.0
# A connection to a SASL listener that has not logged in by then is closed: unauthenticated peers
# must not hold sockets and buffers forever.
LOGIN_TIMEOUT_S = 60.0
# How often the connections waiting for request memory look whether their clients are still there.
WAITING_SWEEP_S = 1.0


class RequestMemory:
    """The broker-wide budget for large requests (Kafka's ``queued.max.request.bytes``).

    A frame too large for a connection's small staging buffer gets a buffer of its own as soon
    as its size prefix is read; its bytes are charged here from then until its request has been
    answered.  When the budget is spent, a connection that needs a new frame buffer stops reading
    (TCP pushes back on its client) and waits its turn: hundreds of clients each announcing a
    30 MiB request cannot make the broker allocate gigabytes.  One frame is always let through
    when nothing is charged, so a request up to the maximum request size always fits.
    Small requests (those that fit the staging buffer) are never charged and never wait.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity  #: bytes; negative: no limit
        self.used = 0
        self.grants = 0  #: frame buffers granted so far (for monitoring and tests)
        self.waiting: collections.deque[Connection] = collections.deque()
        self._sweep_timer: asyncio.TimerHandle | None = None

    def reserve(self, nbytes: int) -> bool:
        if self.capacity >= 0 and self.used and self.used + nbytes > self.capacity:
            return False
        self.used += nbytes
        self.grants += 1
        return True

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        # Each waiting connection asks once per release, in the order they started waiting; one
        # that is still refused queues up again at the end.
        for _ in range(len(self.waiting)):
            if self.capacity >= 0 and self.used >= self.capacity:
                break
            self.waiting.popleft().memory_freed()

    def wait(self, conn: Connection) -> None:
        """``conn`` waits for memory (at the end of the queue); while anyone waits, the queue is
        swept of connections whose clients have left."""
        self.waiting.append(conn)
        if self._sweep_timer is None:
            self._sweep_timer = asyncio.get_running_loop().call_later(WAITING_SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        self._sweep_timer = None
        for conn in list(self.waiting):
            conn.give_up_if_gone()  # a connection that gives up takes itself off the queue
        if self.waiting:
            self._sweep_timer = asyncio.get_running_loop().call_later(WAITING_SWEEP_S, self._sweep)

    def stop(self) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None


class ConnectionRegistry:
    def __init__(self, queued_max_request_bytes: int = -1) -> None:
        self.memory = RequestMemory(queued_max_request_bytes)
        self.problems = ProblemLog(logger)  # what goes wrong with connections, without flooding the log
        self.open: set[Connection] = set()
        # Tasks of closed connections still unwinding; shutdown waits for them.
        self.closing: set[asyncio.Task] = set()
        self._ids = itertools.count(1)
        # Requests read so far: the coordinators' loader holds its background reads until they
        # stop coming for a moment after start (coordinator.loader).
        self.requests = 0

    def next_id(self) -> int:
        return next(self._ids)

    async def close_all(self) -> None:
        for conn in list(self.open):
            conn.close("broker shutting down")
        if self.closing:
            await asyncio.gather(*self.closing, return_exceptions=True)
        self.memory.stop()
        self.problems.close()


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


class _Unsent:
    """The rest of a reply that could not go out at once (``done``: bytes of its first file range
    already sent)."""

    __slots__ = ("parts", "done", "throttle_ms")

    def __init__(self, parts: list, done: int = 0):
        self.parts = parts
        self.done = done
        self.throttle_ms = 0  # the reply's client quota throttle time (see Connection._mute)


def _is_loopback(peer) -> bool:
    """Whether ``peer`` (a transport's peername) is this machine over loopback."""
    if not isinstance(peer, tuple):
        return False
    try:
        address = ipaddress.ip_address(peer[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # 127.0.0.1 on a dual-stack listener
    return address.is_loopback


def _idle_socket_fd(transport) -> int | None:
    """The socket's descriptor, when bytes may go straight to it: the transport is open and
    holds nothing that must go first."""
    if transport.is_closing() or transport.get_write_buffer_size():
        return None
    return transport.get_extra_info("socket").fileno()


def _sendfile_now(transport, piece, done: int) -> int:
    """Bytes of ``piece`` (from ``done`` on) that ``os.sendfile`` puts on the socket at once,
    when nothing the transport holds must go first; the caller sends the rest with
    ``loop.sendfile``, which waits for room.  Alone, loop.sendfile costs about 32 us of event-loop
    work per call even when the socket has room (pausing and resuming reading, futures; measured
    34 against 1.9 us per 1 KiB range), and a Fetch answer has a range per partition."""
    fd = _idle_socket_fd(transport)
    if fd is None:
        return 0
    sent = 0
    try:
        while done + sent < piece.length:
            n = os.sendfile(fd, piece.fileno(), piece.position + done + sent, piece.length - done - sent)
            if n == 0:
                break  # the file ended early: loop.sendfile reports it
            sent += n
    except OSError:
        pass  # the socket is full (or failed): loop.sendfile waits for room (or raises as before)
    return sent


# A mapped file range is sent in pieces of this size once the socket is full: each is written to
# the transport (which keeps what the socket does not take) and the next waits for it to drain.
_MAPPED_PIECE = 256 * 1024


def _mapped(piece, done: int, length: int) -> tuple[mmap.mmap, int]:
    """``length`` bytes of ``piece`` from ``done`` on, mapped: (the map, where they start in it)."""
    start = piece.position + done
    base = start - start % mmap.ALLOCATIONGRANULARITY
    return mmap.mmap(piece.fileno(), start - base + length, offset=base, prot=mmap.PROT_READ), start - base


def _send_mapped_now(transport, piece, done: int) -> int:
    """Like ``_sendfile_now``, but writing the range from a read-only map of the segment file.

    For loopback peers: there the kernel's zero-copy path (splice's page references) costs more
    than the copy it saves, at both ends (1 MiB ranges of a cached file over loopback TCP, scratch
    script: os.sendfile 0.43-0.51 ms of sender CPU per MB and 0.19-0.22 ms for the receiver;
    a write from a map made for each range 0.27-0.28 and 0.10)."""
    fd = _idle_socket_fd(transport)
    if fd is None:
        return 0
    length = piece.length - done
    try:
        view_map, at = _mapped(piece, done, length)
    except (OSError, ValueError):
        return 0  # e.g. the file shrank: the slow path reports it
    sent = 0
    try:
        with memoryview(view_map) as view:
            while sent < length:
                n = os.write(fd, view[at + sent:at + length])
                if n == 0:
                    break
                sent += n
    except OSError:
        pass  # the socket is full (or failed): the slow path waits for room (or reports it)
    finally:
        view_map.close()
    return sent


# Linux tells a peer that ended its side of the stream apart from one that has sent nothing yet,
# even with bytes still unread before the end.
_PEER_ENDED = getattr(select, "POLLRDHUP", 0)


def _peer_cannot_send(fd: int, still_needed: int) -> bool:
    """Whether the client on socket ``fd`` has gone for good, or ended its side with fewer than
    ``still_needed`` bytes unread: the frame it announced can never be complete.

    Reads nothing (the socket's bytes are the frame's): on Linux the socket's hang-up flags and its
    count of unread bytes, elsewhere a peek (which sees the end only with nothing left unread)."""
    if _PEER_ENDED:
        poller = select.poll()
        poller.register(fd, select.POLLIN | _PEER_ENDED)
        events = poller.poll(0)
        flags = events[0][1] if events else 0
        if flags & (select.POLLERR | select.POLLHUP):
            return True  # reset (or both directions shut)
        if not flags & _PEER_ENDED:
            return False  # still there
        unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        return unread < still_needed
    with socket.socket(fileno=os.dup(fd)) as sock:
        try:
            return not sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False  # still there, nothing more sent yet
        except OSError:
            return True  # reset


class Connection(asyncio.BufferedProtocol):
    def __init__(self, state, registry: ConnectionRegistry, max_request_size: int, listener=None):
        self.state = state
        self.registry = registry
        self.id = registry.next_id()
        self.listener = listener  # kwire.broker.listeners.Listener; None: a trusted test connection
        self.session: Session | None = None
        self.max_request_size = max_request_size
        self.wire = ServerConnection(max_frame_size=max_request_size, reserve=self._reserve)
        if listener is not None and listener.sasl:  # small frames until the login (from the first byte on)
            self.wire.max_frame_size = min(PRE_AUTH_MAX_FRAME, max_request_size)
        # Each frame is a bytearray of its own: handlers may keep views of it and write into it.
        # Queued with the bytes it holds of the registry's RequestMemory (0 for small frames).
        self.queue: collections.deque[tuple[bytearray, int]] = collections.deque()
        self.charged = 0  # bytes of RequestMemory this connection holds
        self.serving_charge = 0  # of which the request being served holds
        self.waiting_memory = False  # in RequestMemory.waiting
        self.waiting_for = 0  # bytes of the frame buffer asked for, while waiting
        self.busy = False
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self.paused = False
        self.peer_ended = False  # the client closed its side; we answer what it sent, then close
        self.task: asyncio.Task | None = None
        self._linger: asyncio.TimerHandle | None = None  # closing after a failed login
        self.send_mapped = False  # file ranges from a map instead of sendfile (loopback peers)
        self._drained: asyncio.Future | None = None  # set while the transport asks us to pause writing
        self._login_timer: asyncio.TimerHandle | None = None
        # Muted for a client quota (KIP-219): nothing is read or served until this timer fires.
        self._throttle_timer: asyncio.TimerHandle | None = None

    @property
    def splitter(self) -> FrameSplitter:
        """The connection machine's frame splitter (its buffers, its memory reservations)."""
        return self.wire.framing

    # -- asyncio.BufferedProtocol -------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.send_mapped = _is_loopback(peer)
        self.registry.open.add(self)
        listener = self.listener
        if listener is not None:
            # TLS: asyncio calls this after the handshake, so the client certificate (if any) is known.
            principal = principal_from_certificate(transport.get_extra_info("peercert")) if listener.tls \
                else ANONYMOUS
            self.session = Session(self.state.security, listener=listener.name, sasl=listener.sasl, peer=self.peer,
                                   principal=principal)
            if listener.sasl:
                self._login_timer = asyncio.get_running_loop().call_later(LOGIN_TIMEOUT_S, self._login_timeout)
        logger.debug("connection %d from %s on listener %s", self.id, self.peer,
                     listener.name if listener is not None else "-")
        quotas = self.state.quota_manager
        if quotas.ip_active and isinstance(peer, tuple):
            self._over_connection_rate(quotas.connection_throttle_ms(peer[0]), peer[0])
        if self.queue:  # requests that arrived with the end of the TLS handshake
            self._update_reading()
            if not self.busy:
                self._serve()

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    async def _drain(self) -> None:
        """Until the transport's buffer is below its low-water mark (or the connection is gone)."""
        if self._drained is not None:
            await self._drained

    def connection_lost(self, exc) -> None:
        self.resume_writing()  # nothing waits for a transport that is gone
        self.closed = True
        self._cancel_timers()
        self.registry.open.discard(self)
        self._let_go()
        for listener in getattr(self.state, "connection_listeners", ()):
            try:
                listener(self.id)
            except Exception:  # noqa: BLE001 - one listener's failure must not stop the others
                logger.exception("connection %d: a close listener failed", self.id)
        logger.debug("connection %d from %s closed%s", self.id, self.peer, f": {exc}" if exc else "")

    def eof_received(self) -> bool:
        """The client ended its side (``nc -N``; a producer closing after acks=0 requests).  As Kafka,
        serve the requests that came before the end and answer them on the side still open, then
        close.  TLS has no half-close in asyncio: such a connection closes at once."""
        if self.listener is not None and self.listener.tls:
            return False
        self.peer_ended = True
        return self.busy or bool(self.queue)  # False: nothing left, asyncio closes (flushing what is written)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.closed:  # asyncio stops reading a closed transport; never hand a broken splitter out
            return memoryview(bytearray(1))
        return self.splitter.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:
            return
        splitter = self.splitter
        own = splitter.filling  # the bytes went into a charged frame buffer
        try:
            frames = splitter.buffer_updated(nbytes)
        except ProtocolError as exc:
            self.close(f"bad frame: {exc}", kind="bad frame")
            return
        self._take(frames, own)

    def _take(self, frames: list[bytearray], own: bool) -> None:
        if frames:
            if own:  # that path completes exactly one frame: the one charged when it began
                self.queue.append((frames[0], len(frames[0])))
            else:
                self.queue.extend((f, 0) for f in frames)
        if self.transport is None:
            # TLS: requests that came with the end of the handshake, before the handshake's
            # owner (tls_handshake.py) handed the connection over; connection_made serves them.
            return
        self._update_reading()
        if frames and not self.busy:
            self._serve()

    def _update_reading(self) -> None:
        """Read while the request queue is short and the splitter is not waiting for memory."""
        if self.peer_ended:  # nothing more to read: asyncio stopped reading at the end
            return
        stop = self.splitter.blocked or len(self.queue) > MAX_QUEUED_REQUESTS or self._throttle_timer is not None
        if stop and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        elif self.paused and not stop and len(self.queue) <= MAX_QUEUED_REQUESTS // 2:
            self.paused = False
            self.transport.resume_reading()

    # -- the shared request memory --------------------------------------------------------------
    def _reserve(self, nbytes: int) -> bool:
        memory = self.registry.memory
        if memory.reserve(nbytes):
            self.charged += nbytes
            return True
        self.waiting_for = nbytes
        if not self.waiting_memory:
            self.waiting_memory = True
            memory.wait(self)
        return False

    def _release(self, nbytes: int) -> None:
        if nbytes:
            self.charged -= nbytes
            self.registry.memory.release(nbytes)

    def _release_all(self) -> None:
        memory = self.registry.memory
        if self.waiting_memory:
            self.waiting_memory = False
            memory.waiting.remove(self)
        self._release(self.charged)

    def memory_freed(self) -> None:
        """Called by RequestMemory when bytes were released: ask for the frame buffer again,
        unless the client has left meanwhile (nobody saw it: reading was paused)."""
        self.waiting_memory = False  # RequestMemory took it off its queue
        if self.closed or not self.splitter.blocked or self.give_up_if_gone():
            return
        try:
            frames = self.splitter.retry()
        except ProtocolError as exc:
            self.close(f"bad frame: {exc}", kind="bad frame")
            return
        self._take(frames, False)

    def give_up_if_gone(self) -> bool:
        """Close this waiting connection if its client cannot send the rest of its frame any more
        (True): its place in RequestMemory goes to the next, and no buffer is made for it."""
        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if self.closed or sock is None or not self.splitter.blocked:
            return self.closed
        # The frame's size prefix and head are in the staging buffer (``buffered``); the rest is to come.
        # (On TLS the socket holds encrypted bytes, and the TLS layer may hold some already: but a
        # TLS connection closes at its client's end anyway, see eof_received.)
        still_needed = self.waiting_for + 4 - self.splitter.buffered
        try:
            gone = sock.fileno() < 0 or _peer_cannot_send(sock.fileno(), still_needed)
        except OSError:
            gone = True
        if gone:
            self.close(f"the client left while its request of {self.waiting_for} bytes waited for memory",
                       kind="left while waiting for request memory", level=logging.INFO)
        return gone

    # -- serving --------------------------------------------------------------------------------
    def _serve(self) -> None:
        """Answer queued requests in order until one needs to wait (then a task carries on)."""
        while self.queue and not self.closed and self._throttle_timer is None:
            if self._linger is not None:
                self.close(f"request after a failed login ({self.session.close_after})", kind="failed login",
                           flush=True)
                return
            frame, charge = self.queue.popleft()
            self.registry.requests += 1
            try:
                result = dispatch(self.state, frame, client_host=self.peer, connection_id=self.id, session=self.session,
                                  listener=self.listener, wire=self.wire)
            except CloseConnection as exc:
                self.close(str(exc), kind="refused request")
                return
            except Exception:
                self._failed()
                return
            if isinstance(result, Reply) and result.hold:
                result = self._held(result)  # a pre-KIP-219 client: the answer waits out the throttle time
            elif isinstance(result, Reply):
                rest = self._write_now(result.parts)
                if not rest:
                    self._release(charge)
                    self._mute(result.throttle_ms)
                    if self._after_reply():
                        continue
                    return
                rest.throttle_ms = result.throttle_ms
                result = rest  # the socket is full, or TLS must read files: a task sends the rest
            if result is None:
                self._release(charge)
                continue
            self.serving_charge = charge  # released when the task has answered
            self.busy = True
            self.task = asyncio.get_running_loop().create_task(self._serve_async(result))
            if isinstance(result, PendingReply) or asyncio.iscoroutine(result):  # a handler, or a held reply
                # A task cancelled before its first step (the connection closed at once) never
                # awaits the handler: close it so it is not reported as never awaited.
                self.task.add_done_callback(lambda _task, pending=result: pending.close())
            return
        if self.closed or (self.queue and self._throttle_timer is not None):
            return  # muted: _unmute serves the rest
        if self.peer_ended:
            self.transport.close()  # every request answered: close once the answers are out
        else:
            self._update_reading()

    async def _serve_async(self, result) -> None:
        try:
            if isinstance(result, _Unsent):
                await self._send(result.parts, result.done)
                self._mute(result.throttle_ms)
            else:
                result = await result
                if result is not None and not self.closed:
                    await self._send(result.parts)
                    self._mute(result.throttle_ms)
        except CloseConnection as exc:
            self.close(str(exc), kind="refused request")
            return
        except (ConnectionError, OSError) as exc:
            self.close(f"send failed: {exc}", kind="send failed")
            return
        except Exception:
            self._failed()
            return
        finally:
            self.busy = False
            self.task = None
            charge, self.serving_charge = self.serving_charge, 0
            if not self.closed:  # a closed connection released everything it held
                self._release(charge)
        if not self.closed and self._after_reply():
            self._serve()

    # -- client quotas: muting (KIP-219) --------------------------------------------------------
    def _mute(self, throttle_ms: int) -> None:
        """Read and serve nothing more from this client for ``throttle_ms`` (its answer is out): Kafka
        mutes a throttled channel so that a client that ignores throttle_time_ms is held back too."""
        if throttle_ms <= 0 or self.closed:
            return
        loop = asyncio.get_running_loop()
        timer = self._throttle_timer
        if timer is not None:
            if timer.when() >= loop.time() + throttle_ms / 1000.0:
                return  # muted for longer already
            timer.cancel()
        self._throttle_timer = loop.call_later(throttle_ms / 1000.0, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._throttle_timer = None
        if self.closed:
            return
        self._update_reading()
        if self.queue and not self.busy:
            self._serve()

    def _over_connection_rate(self, throttle_ms: int, host: str) -> None:
        """A connection over its ip's connection_creation_rate: read nothing from it and close it after
        the throttle time (Kafka's acceptor delays closing it, so that the client backs off)."""
        if throttle_ms <= 0:
            return
        self._throttle_timer = asyncio.get_running_loop().call_later(
            throttle_ms / 1000.0, lambda: self.close(f"connection creation rate of {host} over its quota "
                                                     f"(held {throttle_ms} ms)", kind="connection rate quota",
                                                     level=logging.INFO))
        self._update_reading()

    async def _held(self, reply: Reply) -> Reply:
        """The answer to a client too old to throttle itself, after its throttle time (Kafka delays it;
        the connection serves nothing else meanwhile, and is not muted after)."""
        await asyncio.sleep(reply.throttle_ms / 1000.0)
        reply.throttle_ms = 0
        return reply

    def _cancel_timers(self) -> None:
        for timer in (self._linger, self._login_timer, self._throttle_timer):
            if timer is not None:
                timer.cancel()

    def _login_timeout(self) -> None:
        if not self.closed and self.session is not None and not self.session.authenticated:
            self.close(f"no SASL login within {LOGIN_TIMEOUT_S:g} s", kind="no login in time")

    def _after_reply(self) -> bool:
        """What an answer changes on a connection: closed after a failed login (False), the full request
        size once logged in."""
        session = self.session
        if session is None:
            return True
        if session.close_after:
            if self._linger is None:
                reason = session.close_after
                self._linger = asyncio.get_running_loop().call_later(
                    FAILED_LOGIN_LINGER_S, lambda: self.close(reason, kind="failed login", flush=True))
                if self.queue:  # the client did not wait for the answer: nothing to linger for
                    self.close(reason, kind="failed login", flush=True)
            return False
        if session.authenticated and self.wire.max_frame_size != self.max_request_size:
            self.wire.max_frame_size = self.max_request_size
            if self._login_timer is not None:
                self._login_timer.cancel()
                self._login_timer = None
        return True

    def _write_now(self, parts: list) -> _Unsent | None:
        """Send a reply's pieces as far as can be done without waiting: bytes into the transport,
        file ranges with sendfile while nothing is queued before them.  None when all went out,
        else what is left (from the file range that found the socket full, or a TLS listener's
        file range, which must be read first)."""
        transport = self.transport
        tls = self.listener is not None and self.listener.tls
        for i, part in enumerate(parts):
            if part.__class__ is bytes:  # the usual part, before the (abstract class) checks below
                transport.write(part)
            elif isinstance(part, FileRecords):
                if tls:
                    return _Unsent(parts[i:])
                send_now = _send_mapped_now if self.send_mapped else _sendfile_now
                for j, piece in enumerate(part.slices):
                    sent = send_now(transport, piece, 0)
                    if sent < piece.length:
                        rest = FileRecords(part.slices[j:])
                        return _Unsent([rest, *parts[i + 1:]], sent)
            elif isinstance(part, SplicedBytes):
                transport.write(part.read())
            else:
                transport.write(part)
        return None

    async def _send(self, parts: list, done: int = 0) -> None:
        """Send ``parts``, waiting for room as needed (``done``: bytes of the first file range
        already sent)."""
        loop = asyncio.get_running_loop()
        transport = self.transport
        for part in parts:
            if self.closed:
                return
            if isinstance(part, FileRecords) and self.listener is not None and self.listener.tls:
                # No sendfile through TLS: read the ranges (off the loop when large) and write them.
                data = part.read() if len(part) < 1 << 20 else await loop.run_in_executor(None, part.read)
                if not self.closed:
                    transport.write(data)
            elif isinstance(part, FileRecords) and self.send_mapped:
                for piece in part.slices:
                    done += _send_mapped_now(transport, piece, done)
                    while done < piece.length and not self.closed:
                        await self._drain()
                        if self.closed:
                            return
                        n = min(_MAPPED_PIECE, piece.length - done)
                        view_map, at = _mapped(piece, done, n)
                        # Not closed here: the transport keeps what the socket won't take (a copy on
                        # Python 3.11, the view itself from 3.12 on), and the map goes with the
                        # last reference to it.
                        transport.write(memoryview(view_map)[at:at + n])
                        del view_map
                        done += n
                    done = 0
            elif isinstance(part, FileRecords):
                for piece in part.slices:
                    done += _sendfile_now(transport, piece, done)
                    if done < piece.length:
                        await loop.sendfile(transport, _FileView(piece.fileno()), piece.position + done,
                                            piece.length - done)
                    done = 0
            elif isinstance(part, SplicedBytes):
                transport.write(part.read())
            else:
                transport.write(part)

    def close(self, why: str, *, kind: str | None = None, level: int = logging.WARNING, flush: bool = False) -> None:
        """Close now (abort: drop what is unsent), or with flush once written data went out.

        ``kind``: the kind of problem ``why`` is an instance of, logged at ``level`` through the
        registry's ProblemLog (a flood of one kind is summarised); None: no problem (the broker
        shuts down), logged at debug level."""
        if self.closed:
            return
        self.closed = True
        self._cancel_timers()
        if kind is None:
            logger.debug("closing connection %d from %s: %s", self.id, self.peer, why)
        else:
            self.registry.problems.log(level, kind, "closing connection %d from %s: %s", self.id, self.peer, why)
        self._let_go()
        if self.transport is not None:
            if flush or why == "broker shutting down":
                self.transport.close()
            else:
                self.transport.abort()

    def _failed(self) -> None:
        """A request failed inside the broker (a bug): log it with its traceback, close."""
        self.registry.problems.log(logging.ERROR, "internal error", "connection %d from %s: request failed",
                                   self.id, self.peer, exc_info=True)
        self.close("internal error", kind="internal error")

    def _let_go(self) -> None:
        """Give up what a closed connection holds: its requests, the one being served, its request
        memory and its place in the queue for it, and its frame buffers."""
        self.queue.clear()
        self._abandon_task()
        self._release_all()
        # The splitter refers back to this connection (its reserve callback): with it, a frame
        # buffer it was filling would live until the cyclic garbage collector runs, however large
        # (40 closed connections with 99 MiB frames held 4 GB).  The machine takes a new one.
        self.wire.close()

    def _abandon_task(self) -> None:
        """Cancel the request being served (a long-polling Fetch, a parked JoinGroup): nobody is
        left to answer.  Shutdown waits for it through the registry."""
        task = self.task
        if task is None or task is asyncio.current_task():
            return
        task.cancel()
        self.registry.closing.add(task)
        task.add_done_callback(self.registry.closing.discard)
