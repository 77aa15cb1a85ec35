"""TCP reassembly: ordered byte streams per connection and direction, with explicit gaps.

``TcpReassembler.feed(frame, ts_ns, segment)`` takes ``TcpSegment``s in capture order and
appends ``(connection, direction, event)`` triples to ``reassembler.events`` (the caller takes
them out and clears the list); ``finish()`` ends every open connection.  Events per direction
come in stream order:

* ``Chunk(frame, ts_ns, data)``: the next bytes of the stream, from packet ``frame``.
* ``Gap(frame, ts_ns, size)``: ``size`` bytes of the stream are missing here (never captured,
  cut by the snaplen, or given up on); the stream continues after them.  ``frame`` is the packet
  where the stream resumes (for a snaplen cut: the cut packet).  A framing layer should drop the
  frame it was assembling and resynchronise.
* ``End(frame, ts_ns, reason)``: no more bytes in this direction; reason is 'fin', 'rst', 'eof'
  (end of capture), 'idle' (idle timeout), or 'reused' (a new connection on the same addresses).
  The direction of the side that closed first ends first (its FIN, or its RST, which ends both).

Direction ``TO_SERVER`` (0) is client to server, ``TO_CLIENT`` (1) server to client.  The client
is the sender of the SYN (or the receiver of the SYN-ACK); without either (a capture started
mid-conversation), the side not using one of ``server_ports``, else not using one of
``KNOWN_SERVER_PORTS`` (Kafka's and MongoDB's usual ports), else the side with the higher port.
``Connection.roles`` says which rule decided: 'syn', 'port' or 'guess'.

Reassembly per direction: bytes are delivered once, in sequence order.  Retransmissions and
overlaps are dropped (the first bytes seen win), out-of-order segments wait in a heap bounded by
``max_buffered`` bytes per direction.  A hole becomes a ``Gap`` when the peer acknowledges data
past it (the sender will not send it again, so the capture missed it), when the buffer would
grow past its bound, or when the direction ends (``trust_acks=False`` leaves out the first rule,
for captures where an ACK may be recorded before the data it acknowledges, such as merged
captures of several interfaces).  Without a SYN a direction starts at the first sequence number
seen carrying data: bytes of that direction captured earlier but out of order are then taken
for retransmissions.

Memory is bounded by the open connections: a closed connection is forgotten ``linger_ns`` of
capture time after it closed (so late retransmissions do not open a new one), and with
``idle_timeout_ns`` set, a connection silent that long is ended with reason 'idle'.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import NamedTuple

from .packets import ACK, FIN, RST, SYN, TcpSegment, format_addr

__all__ = [
    "KNOWN_SERVER_PORTS",
    "TO_CLIENT",
    "TO_SERVER",
    "Chunk",
    "Connection",
    "Direction",
    "End",
    "Gap",
    "TcpReassembler",
]

TO_SERVER = 0
TO_CLIENT = 1

#: Ports taken for the server side when no SYN and no ``server_ports`` decide: Kafka's usual
#: listener ports and MongoDB's.
KNOWN_SERVER_PORTS = frozenset((9092, 9093, 9094, 9095, 19092, 29092, 27017, 27018, 27019))

_MASK = 0xFFFFFFFF
_HALF = 0x80000000
_FULL = 0x100000000
_NEVER = float("inf")
_ENTRY_OVERHEAD = 64  # bytes charged per buffered segment on top of its payload

_tnew = tuple.__new__


class Chunk(NamedTuple):
    """Stream bytes from one packet."""

    frame: int
    ts_ns: int
    data: bytes


class Gap(NamedTuple):
    """Missing stream bytes; the stream continues after them."""

    frame: int
    ts_ns: int
    size: int


class End(NamedTuple):
    """The end of one direction of a connection."""

    frame: int
    ts_ns: int
    reason: str


class Direction:
    """Reassembly state and counters of one direction of a connection."""

    __slots__ = ("started", "isn", "next_seq", "offset", "pending", "pending_bytes", "fin_off", "fin_frame",
                 "fin_ts", "ended", "bytes", "gaps", "gap_bytes", "duplicate_bytes", "out_of_order", "late")

    def __init__(self):
        self.started = False
        self.isn: int | None = None  #: sequence number of the SYN, if seen
        self.next_seq = 0  #: next sequence number expected (32-bit)
        self.offset = 0  #: stream offset of next_seq (bytes delivered + gap bytes)
        self.pending: list = []  # heap of (offset, frame, ts, data, missing)
        self.pending_bytes = 0
        self.fin_off: int | None = None
        self.fin_frame = 0
        self.fin_ts = 0
        self.ended: str | None = None  #: End reason once ended
        self.bytes = 0  #: bytes delivered in Chunks
        self.gaps = 0  #: Gap events
        self.gap_bytes = 0  #: bytes reported missing
        self.duplicate_bytes = 0  #: retransmitted or overlapping bytes dropped
        self.out_of_order = 0  #: segments that had to wait for earlier ones
        self.late = 0  #: segments ignored because the direction had ended


class Connection:
    """One TCP connection: who is client and server, and the two directions."""

    __slots__ = ("id", "client_addr", "client_port", "server_addr", "server_port", "roles", "first_frame",
                 "first_ts", "last_frame", "last_ts", "directions", "closed", "closed_ts", "data_seen")

    def __init__(self, cid: int, client_addr: bytes, client_port: int, server_addr: bytes, server_port: int,
                 roles: str, frame: int, ts: int):
        self.id = cid  #: 1-based, in order of first packet
        self.client_addr = client_addr
        self.client_port = client_port
        self.server_addr = server_addr
        self.server_port = server_port
        self.roles = roles  #: 'syn', 'port' (a given or known server port) or 'guess' (higher port is the client)
        self.first_frame = self.last_frame = frame
        self.first_ts = self.last_ts = ts
        self.directions = (Direction(), Direction())  #: indexed by TO_SERVER / TO_CLIENT
        self.closed = False
        self.closed_ts = 0
        self.data_seen = False

    @property
    def client(self) -> str:
        return _endpoint(self.client_addr, self.client_port)

    @property
    def server(self) -> str:
        return _endpoint(self.server_addr, self.server_port)

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.client} -> {self.server} ({self.roles})>"


def _ignore_ack(conn, d, ack) -> None:
    pass


def _endpoint(addr: bytes, port: int) -> str:
    text = format_addr(addr)
    return f"[{text}]:{port}" if len(addr) == 16 else f"{text}:{port}"


class TcpReassembler:
    """Reassembles TCP segments fed in capture order into per-direction event streams."""

    def __init__(self, server_ports=(), *, max_buffered: int = 4 << 20, linger_ns: int = 60_000_000_000,
                 idle_timeout_ns: int | None = None, trust_acks: bool = True):
        self.server_ports = frozenset(server_ports)
        if not trust_acks:  # holes wait for the buffer bound or the end (captures whose ACKs may come early)
            self._acked = _ignore_ack
        self.max_buffered = max_buffered
        self.linger_ns = linger_ns
        self.idle_timeout_ns = idle_timeout_ns
        self.events: list[tuple[Connection, int, Chunk | Gap | End]] = []
        self.flows: dict[tuple, tuple[Connection, int]] = {}
        self.open: dict[int, Connection] = {}  # id -> connection not yet closed
        self.connections = 0  #: connections seen
        self.ignored = 0  #: segments of unknown flows with neither SYN nor payload
        self._holes = 0  # directions with buffered segments (worth checking ACKs against)
        self._closed: deque[tuple[int, Connection]] = deque()
        self._next_sweep: int | None = None
        self._due = 0 if idle_timeout_ns is not None else _NEVER  # capture time of the next housekeeping

    # -- input ------------------------------------------------------------------------------

    def feed(self, frame: int, ts: int, seg: TcpSegment) -> None:
        src, dst, sport, dport, seq, ack, flags, payload, missing = seg
        if not flags & 7 and not missing:  # no SYN, FIN nor RST, nothing cut: the common cases
            if not payload:  # a pure ACK: only of interest if it acknowledges a hole
                if self._holes and flags & ACK:
                    entry = self.flows.get((src, sport, dst, dport))
                    if entry is not None:
                        self._acked(entry[0], 1 - entry[1], ack)
                return
            entry = self.flows.get((src, sport, dst, dport))
            if entry is not None:
                conn, d = entry
                h = conn.directions[d]
                if seq == h.next_seq and h.started and not h.pending and h.fin_off is None and h.ended is None:
                    # The next bytes in order: most segments.
                    self.events.append((conn, d, _tnew(Chunk, (frame, ts, payload))))
                    size = len(payload)
                    h.offset += size
                    h.next_seq = (seq + size) & _MASK
                    h.bytes += size
                    conn.data_seen = True
                    conn.last_frame = frame
                    conn.last_ts = ts
                    if self._holes and flags & ACK:
                        self._acked(conn, 1 - d, ack)
                    if ts >= self._due:
                        self._housekeeping(ts)
                    return
        self._feed(frame, ts, src, dst, sport, dport, seq, ack, flags, payload, missing)

    def _feed(self, frame, ts, src, dst, sport, dport, seq, ack, flags, payload, missing) -> None:
        """Everything but the common cases of ``feed``."""
        entry = self.flows.get((src, sport, dst, dport))
        if entry is None:
            if not flags & SYN and not payload and not missing:
                self.ignored += 1
                return
            entry = self._new(frame, ts, src, dst, sport, dport, flags)
        elif flags & SYN:
            conn, d = entry
            h = conn.directions[d]
            if conn.closed or (h.isn != seq and (h.started or conn.data_seen)):
                if not conn.closed:
                    self._close(conn, frame, ts, "reused")
                entry = self._new(frame, ts, src, dst, sport, dport, flags)
        conn, d = entry
        conn.last_frame = frame
        conn.last_ts = ts
        h = conn.directions[d]
        if h.ended is not None:
            h.late += 1
        else:
            if flags & SYN:
                if not h.started:
                    h.started = True
                    h.isn = seq
                    h.next_seq = (seq + 1) & _MASK
                seq = (seq + 1) & _MASK
            elif not h.started:
                h.started = True
                h.next_seq = seq
            delta = (seq - h.next_seq) & _MASK
            if delta >= _HALF:
                delta -= _FULL
            off = h.offset + delta
            total = len(payload) + missing
            if total:
                conn.data_seen = True
                if h.fin_off is not None and off >= h.fin_off:
                    h.late += 1
                elif delta <= 0:
                    self._deliver(conn, d, h, off, frame, ts, payload, missing)
                    if h.pending:
                        self._drain(conn, d, h)
                else:
                    if not h.pending:
                        self._holes += 1
                    heapq.heappush(h.pending, (off, frame, ts, bytes(payload), missing))
                    h.pending_bytes += len(payload) + _ENTRY_OVERHEAD
                    h.out_of_order += 1
                    if h.pending_bytes > self.max_buffered:
                        self._give_up(conn, d, h, self.max_buffered)
            if flags & FIN and h.fin_off is None:
                h.fin_off = off + total
                h.fin_frame = frame
                h.fin_ts = ts
            if h.fin_off is not None and h.offset >= h.fin_off:
                self._end(conn, d, h, frame, ts, "fin")
        if self._holes and flags & ACK:
            self._acked(conn, 1 - d, ack)
        if flags & RST and not conn.closed:
            self._close(conn, frame, ts, "rst", first=d)
        if ts >= self._due:
            self._housekeeping(ts)

    def finish(self) -> None:
        """End every open connection (end of capture): buffered bytes are delivered after gaps."""
        for conn in list(self.open.values()):
            self._close(conn, conn.last_frame, conn.last_ts, "eof")

    # -- internals --------------------------------------------------------------------------

    def _new(self, frame, ts, src, dst, sport, dport, flags) -> tuple[Connection, int]:
        if flags & SYN:
            from_client = not flags & ACK
            roles = "syn"
        elif dport in self.server_ports and sport not in self.server_ports:
            from_client, roles = True, "port"
        elif sport in self.server_ports and dport not in self.server_ports:
            from_client, roles = False, "port"
        elif dport in KNOWN_SERVER_PORTS and sport not in KNOWN_SERVER_PORTS:
            from_client, roles = True, "port"
        elif sport in KNOWN_SERVER_PORTS and dport not in KNOWN_SERVER_PORTS:
            from_client, roles = False, "port"
        else:
            from_client, roles = sport >= dport, "guess"
        self.connections += 1
        if from_client:
            conn = Connection(self.connections, src, sport, dst, dport, roles, frame, ts)
        else:
            conn = Connection(self.connections, dst, dport, src, sport, roles, frame, ts)
        d = TO_SERVER if from_client else TO_CLIENT
        entry = (conn, d)
        self.flows[(src, sport, dst, dport)] = entry
        self.flows[(dst, dport, src, sport)] = (conn, 1 - d)
        self.open[conn.id] = conn
        return entry

    def _deliver(self, conn, d, h, off, frame, ts, data, missing) -> None:
        """Bytes (then ``missing`` bytes known lost) starting at stream offset off <= h.offset."""
        skip = h.offset - off
        if skip:
            size = len(data)
            if skip >= size + missing:
                h.duplicate_bytes += size + missing
                return
            if skip < size:
                h.duplicate_bytes += skip
                data = data[skip:]
            else:
                h.duplicate_bytes += size
                missing -= skip - size
                data = b""
        size = len(data)
        if size:
            self.events.append((conn, d, _tnew(Chunk, (frame, ts, data))))
            h.offset += size
            h.next_seq = (h.next_seq + size) & _MASK
            h.bytes += size
        if missing:
            self._gap(conn, d, h, frame, ts, missing)

    def _gap(self, conn, d, h, frame, ts, size) -> None:
        self.events.append((conn, d, _tnew(Gap, (frame, ts, size))))
        h.offset += size
        h.next_seq = (h.next_seq + size) & _MASK
        h.gaps += 1
        h.gap_bytes += size

    def _drain(self, conn, d, h) -> None:
        """Deliver the buffered segments that are now in order."""
        pending = h.pending
        while pending and pending[0][0] <= h.offset:
            off, frame, ts, data, missing = heapq.heappop(pending)
            h.pending_bytes -= len(data) + _ENTRY_OVERHEAD
            self._deliver(conn, d, h, off, frame, ts, data, missing)
        if not pending:
            self._holes -= 1
            h.pending_bytes = 0

    def _skip_to(self, conn, d, h, off, frame, ts) -> None:
        """Declare the bytes up to stream offset off missing, then deliver what follows."""
        if off > h.offset:
            self._gap(conn, d, h, frame, ts, off - h.offset)
        if h.pending:
            self._drain(conn, d, h)

    def _give_up(self, conn, d, h, limit) -> None:
        """Skip holes until at most ``limit`` bytes stay buffered."""
        while h.pending and h.pending_bytes > limit:
            off, frame, ts = h.pending[0][:3]
            self._skip_to(conn, d, h, off, frame, ts)

    def _acked(self, conn, d, ack) -> None:
        """The peer acknowledged ``ack`` of direction d: holes below it will not be retransmitted."""
        h = conn.directions[d]
        if not h.pending:
            return
        delta = (ack - h.next_seq) & _MASK
        if delta == 0 or delta >= _HALF:
            return
        first, frame, ts = h.pending[0][:3]
        self._skip_to(conn, d, h, min(h.offset + delta, first), frame, ts)
        if h.fin_off is not None and h.offset >= h.fin_off and h.ended is None:
            self._end(conn, d, h, frame, ts, "fin")

    def _end(self, conn, d, h, frame, ts, reason) -> None:
        """End direction d: buffered bytes are delivered after gaps, then an End event."""
        if h.fin_off is not None and h.pending:  # nothing counts past the FIN
            kept = [p for p in h.pending if p[0] < h.fin_off]
            h.late += len(h.pending) - len(kept)
            heapq.heapify(kept)
            h.pending[:] = kept
            if not kept:
                self._holes -= 1
        while h.pending:
            off, pframe, pts = h.pending[0][:3]
            self._skip_to(conn, d, h, off, pframe, pts)
        if h.fin_off is not None and h.fin_off > h.offset:
            self._gap(conn, d, h, h.fin_frame, h.fin_ts, h.fin_off - h.offset)
        h.ended = reason
        self.events.append((conn, d, _tnew(End, (frame, ts, reason))))
        if conn.directions[1 - d].ended is not None and not conn.closed:
            self._mark_closed(conn, ts)

    def _close(self, conn, frame, ts, reason, first: int = TO_SERVER) -> None:
        """End both directions, ``first``'s first (a reset ends its sender's direction first, so a
        flow can tell which side gave up)."""
        for d in (first, 1 - first):
            h = conn.directions[d]
            if h.ended is None:
                self._end(conn, d, h, frame, ts, reason)

    def _mark_closed(self, conn, ts) -> None:
        conn.closed = True
        conn.closed_ts = ts
        self.open.pop(conn.id, None)
        self._closed.append((ts, conn))
        due = ts + self.linger_ns + 1
        if due < self._due:
            self._due = due

    def advance(self, ts: int) -> None:
        """The capture's clock reached ``ts`` without a packet of this reassembler (a caller that
        feeds one flow at a time, such as the Spark job, reads the others elsewhere): forget
        connections closed long enough ago and end idle ones, as ``feed`` would have."""
        if ts >= self._due:
            self._housekeeping(ts)

    def _housekeeping(self, ts) -> None:
        """Forget connections closed long enough ago, end idle ones; set when to come back."""
        if self._closed and ts - self._closed[0][0] > self.linger_ns:
            self._forget(ts)
        due = self._closed[0][0] + self.linger_ns + 1 if self._closed else _NEVER
        if self.idle_timeout_ns is not None:
            if self._next_sweep is None:
                self._next_sweep = ts + self.idle_timeout_ns // 4
            elif ts >= self._next_sweep:
                self._sweep(ts)
            due = min(due, self._next_sweep)
        self._due = due

    def _forget(self, ts) -> None:
        closed = self._closed
        flows = self.flows
        while closed and ts - closed[0][0] > self.linger_ns:
            _, conn = closed.popleft()
            for key in ((conn.client_addr, conn.client_port, conn.server_addr, conn.server_port),
                        (conn.server_addr, conn.server_port, conn.client_addr, conn.client_port)):
                entry = flows.get(key)
                if entry is not None and entry[0] is conn:
                    del flows[key]

    def _sweep(self, ts) -> None:
        limit = self.idle_timeout_ns
        for conn in list(self.open.values()):
            if ts - conn.last_ts > limit:
                self._close(conn, conn.last_frame, conn.last_ts, "idle")
        self._next_sweep = ts + limit // 4
