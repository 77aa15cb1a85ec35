"""The analyzer's driver: capture files in, exchanges out, one protocol layer per connection.

``CaptureDecoder(options).exchanges(path)`` streams the ``Exchange``s of one capture file: it
runs the TCP layers (``streams.TcpCapture``), decides for each connection whether it carries
Kafka, MongoDB or neither, and feeds that connection's stream events to a ``KafkaFlow`` or a
``MongoFlow``.  Memory is bounded by the open connections, as in the layers below.

Which protocol a connection speaks: a server port the user named for Kafka or MongoDB decides;
with no ports named, the first bytes the client sends are sniffed (a plausible Kafka request
header, or a MongoDB message header), and once a server endpoint is known to speak a protocol,
later connections to it (even ones captured mid-conversation, whose first bytes are not a
message start) take the same protocol.  Failing both, the usual ports (9092.., 27017..) decide.
Connections that are neither are counted and skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from .exchange import Exchange, FlowContext, WarningLog
from .pcap import NotACaptureError
from .streams import TcpCapture
from .tables import connection_row
from .tcp import TO_SERVER, Chunk, Connection, End, TcpReassembler

__all__ = ["AnalyzeOptions", "CaptureDecoder", "KAFKA", "MONGODB"]

KAFKA = "kafka"
MONGODB = "mongodb"
_OTHER = "other"

_KAFKA_PORTS = frozenset((9092, 9093, 9094, 9095, 19092, 29092))
_MONGO_PORTS = frozenset((27017, 27018, 27019))
_SNIFF_BYTES = 64  # enough for a Kafka request header with its client id, or a MongoDB header
_MAX_HELD_EVENTS = 64  # events held back while a connection's protocol is undecided


@dataclass
class AnalyzeOptions:
    """How captures are read and decoded (the CLI's flags)."""

    kafka_ports: frozenset[int] = frozenset()  #: server ports carrying Kafka (empty: detect)
    mongo_ports: frozenset[int] = frozenset()  #: server ports carrying MongoDB (empty: detect)
    max_frame_size: int = 100 * 1024 * 1024
    keep_messages: bool = False  #: keep decoded messages on exchanges (for --json)
    record_values: bool = False  #: with keep_messages: record keys and values too
    trust_acks: bool = True  #: see tcp.TcpReassembler
    warning_limit: int = 1000

    @property
    def detect(self) -> bool:
        """Sniff protocols from the traffic (no ports named)."""
        return not (self.kafka_ports or self.mongo_ports)


@dataclass
class _Pending:
    """A connection whose protocol is not decided yet: its events are held back (bounded)."""

    events: list = field(default_factory=list)
    first: list = field(default_factory=lambda: [b"", b""])  # the first bytes sent each way
    first_direction: int = -1  # the direction that sent data first


class _Swapped:
    """A connection seen the other way round (its flow takes the TCP layer's TO_CLIENT for
    TO_SERVER): the client and server fields and the directions are exchanged."""

    __slots__ = ("_conn", "directions")

    def __init__(self, conn: Connection):
        self._conn = conn
        self.directions = (conn.directions[1], conn.directions[0])

    def __getattr__(self, name: str):
        return getattr(self._conn, name)

    client = property(lambda self: self._conn.server)
    server = property(lambda self: self._conn.client)
    client_addr = property(lambda self: self._conn.server_addr)
    server_addr = property(lambda self: self._conn.client_addr)
    client_port = property(lambda self: self._conn.server_port)
    server_port = property(lambda self: self._conn.client_port)
    roles = property(lambda self: "swapped")


class CaptureDecoder:
    """Decodes capture files into exchanges; keeps counters, warnings and connection rows."""

    def __init__(self, options: AnalyzeOptions | None = None, *, warnings: WarningLog | None = None):
        self.options = options or AnalyzeOptions()
        self.warnings = warnings if warnings is not None else WarningLog(self.options.warning_limit)
        self.connections: list[dict] = []  #: ``connections`` table rows, in the order connections ended
        self.stats: dict[str, int] = {}  #: packet, segment, connection counters, summed over captures
        self.protocol_of_server: dict[tuple[bytes, int], str] = {}
        self.on_connection: Callable[[dict], None] | None = None  #: called with each connection row

    # -- public -----------------------------------------------------------------------------

    def exchanges(self, source: str | os.PathLike, *, progress: Callable[[int], None] | None = None,
                  name: str | None = None) -> Iterator[Exchange]:
        """The exchanges of one capture, in the order they completed.

        ``progress`` is called now and then with the bytes of the file read so far.
        Raises ``NotACaptureError`` when the file is not a capture at all.
        """
        capture = name or os.path.basename(os.fsdecode(source))
        opts = self.options
        cap = TcpCapture(source, server_ports=opts.kafka_ports | opts.mongo_ports, trust_acks=opts.trust_acks)
        reader = cap.reader
        tick = None if progress is None else (lambda: progress(reader.bytes_consumed))
        try:
            yield from self.decode_events(capture, cap.events(), tick=tick)
        finally:
            for key, value in cap.stats().items():
                self.stats[key] = self.stats.get(key, 0) + value
            for text in cap.warnings:
                self.warnings(capture, 0, 0, "capture", text)
            cap.close()
        if tick is not None:
            tick()

    def reassembler(self) -> TcpReassembler:
        """A TCP reassembler set up as ``exchanges`` sets up its own (for callers that group
        segments themselves, like the Spark job: feed it, then ``decode_events`` its events)."""
        opts = self.options
        return TcpReassembler(opts.kafka_ports | opts.mongo_ports, trust_acks=opts.trust_acks)

    def decode_events(self, capture: str, events: Iterable[tuple[Connection, int, object]], *,
                      tick: Callable[[], None] | None = None) -> Iterator[Exchange]:
        """The exchanges of a stream of (connection, direction, Chunk/Gap/End) events of one capture,
        as ``TcpCapture.events()`` or a ``TcpReassembler`` produce them (every connection ended by
        the end).  ``tick`` is called every 1024 events."""
        opts = self.options
        ctx = FlowContext(capture=capture, warn=self.warnings, max_frame_size=opts.max_frame_size,
                          keep_messages=opts.keep_messages, record_values=opts.record_values)
        flows: dict[int, object] = {}  # conn id -> Flow, _Pending, or None (not analyzed)
        views: dict[int, Connection | _Swapped] = {}  # conn id -> the connection as its flow sees it
        counts: dict[int, int] = {}  # conn id -> exchanges
        protocols: dict[int, str] = {}
        ended: dict[int, int] = {}  # conn id -> directions ended
        swapped: set[int] = set()  # connections whose roles the TCP layer guessed the wrong way round
        events_seen = 0
        for conn, direction, event in events:
            events_seen += 1
            if tick is not None and not events_seen & 0x3FF:
                tick()
            cid = conn.id
            flow = flows.get(cid, _UNSET)
            if flow is _UNSET:
                views[cid] = conn
                flow = flows[cid] = self._start(conn)
                if isinstance(flow, str):  # decided by port: make the flow now
                    protocols[cid] = flow
                    flow = flows[cid] = self._make_flow(flow, conn, ctx)
            if type(flow) is _Pending:
                flow.events.append((direction, event))
                if type(event) is Chunk:
                    if flow.first_direction < 0:
                        flow.first_direction = direction
                    if len(flow.first[direction]) < _SNIFF_BYTES:
                        flow.first[direction] += event.data[:_SNIFF_BYTES]
                decided = self._decide(conn, flow, final=type(event) is End
                                       or len(flow.events) >= _MAX_HELD_EVENTS)
                if decided is None:
                    continue
                decided, swap = decided
                protocols[cid] = decided
                held = flow.events
                if swap:
                    swapped.add(cid)
                    views[cid] = _Swapped(conn)
                    held = [(1 - d, e) for d, e in held]
                flow = flows[cid] = self._make_flow(decided, views[cid], ctx)
                if flow is not None:
                    n = 0
                    for d, e in held:
                        for ex in flow.feed(d, e):
                            n += 1
                            yield ex
                    counts[cid] = counts.get(cid, 0) + n
            elif flow is not None:
                out = flow.feed(1 - direction if cid in swapped else direction, event)
                if out:
                    counts[cid] = counts.get(cid, 0) + len(out)
                    yield from out
            if type(event) is End:
                ended[cid] = ended.get(cid, 0) + 1
                if ended[cid] == 2:
                    del ended[cid]
                    swapped.discard(cid)
                    yield from self._finish(capture, views.pop(cid), flows.pop(cid), protocols.pop(cid, _OTHER),
                                            counts.pop(cid, 0))
        # Connections whose two directions did not both end (a caller's reassembler not finished):
        # their requests still waiting are unanswered.
        for flow in flows.values():
            if type(flow) is not _Pending and flow is not None:
                yield from flow.close()

    # -- protocol choice ----------------------------------------------------------------------

    def _start(self, conn: Connection):
        """A new connection: its protocol from the ports if they decide, else a _Pending."""
        opts = self.options
        port = conn.server_port
        if port in opts.kafka_ports:
            return KAFKA
        if port in opts.mongo_ports:
            return MONGODB
        if not opts.detect:
            return None
        return _Pending()

    def _decide(self, conn: Connection, pending: _Pending, *, final: bool) -> tuple[str, bool] | None:
        """(protocol, swap) once the client's first bytes tell (or the protocol must be guessed).

        Kafka and MongoDB clients speak first.  When the TCP layer only guessed the roles (no SYN,
        no known port: it took the higher port for the client) and the side it called the server
        spoke first with what looks like a request, the guess was wrong: swap the roles.

        A contract the Spark job's per-flow decoder (``spark_segments._FlowDecoder``) builds on:
        the answer is None (undecided) or (protocol, swap), and ``protocol_of_server`` is written
        only when a sniff of the first bytes decided, never by a fall-back.
        """
        from .kafka import looks_like_kafka_request
        from .mongo import looks_like_mongo_message

        speaker = pending.first_direction
        if speaker < 0:  # no payload yet
            if not final:
                return None
            speaker = TO_SERVER
        first = pending.first[speaker]
        if len(first) < 16 and not final:
            return None
        swap = speaker != TO_SERVER and conn.roles == "guess"
        if first and (speaker == TO_SERVER or swap):
            server = (conn.client_addr, conn.client_port) if swap else (conn.server_addr, conn.server_port)
            if looks_like_kafka_request(first):
                self.protocol_of_server[server] = KAFKA
                return KAFKA, swap
            if looks_like_mongo_message(first):
                self.protocol_of_server[server] = MONGODB
                return MONGODB, swap
        known = self.protocol_of_server.get((conn.server_addr, conn.server_port))
        if known is not None:
            return known, False
        if conn.server_port in _KAFKA_PORTS:
            return KAFKA, False
        if conn.server_port in _MONGO_PORTS:
            return MONGODB, False
        return _OTHER, False

    def _make_flow(self, protocol: str, conn: Connection, ctx: FlowContext):
        if protocol == KAFKA:
            from .kafka import KafkaFlow

            return KafkaFlow(conn, ctx)
        if protocol == MONGODB:
            from .mongo import MongoFlow

            return MongoFlow(conn, ctx)
        self.stats["other_connections"] = self.stats.get("other_connections", 0) + 1
        return None

    def _finish(self, capture: str, conn: Connection, flow, protocol: str, count: int) -> list[Exchange]:
        out: list[Exchange] = []
        if type(flow) is _Pending:  # both directions ended before anything decided (no data at all)
            protocol = _OTHER
        elif flow is not None:
            out = flow.close()
            count += len(out)
        row = connection_row(capture, conn, protocol, count)
        self.connections.append(row)
        if self.on_connection is not None:
            self.on_connection(row)
        return out


_UNSET = object()


def decode_captures(paths: Iterable[str | os.PathLike], options: AnalyzeOptions | None = None
                    ) -> tuple[list[Exchange], CaptureDecoder]:
    """Every exchange of the captures, collected (for tests and small captures), and the decoder
    (its warnings, stats and connection rows).  Files that are not captures become warnings."""
    decoder = CaptureDecoder(options)
    out: list[Exchange] = []
    for path in paths:
        try:
            out.extend(decoder.exchanges(path))
        except NotACaptureError as e:
            decoder.warnings(os.path.basename(os.fsdecode(path)), 0, 0, "capture", str(e))
    return out, decoder


__all__ += ["decode_captures"]
