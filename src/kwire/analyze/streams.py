"""From a capture file to TCP stream events: the pcap reader, packet decoder and reassembler chained.

Streaming (memory bounded by the open connections), for the analyzer::

    with TcpCapture("trace.pcap", server_ports={9092}) as cap:
        for conn, direction, event in cap.events():
            ...   # event: Chunk / Gap / End, direction: TO_SERVER / TO_CLIENT
        cap.reader.warnings, cap.decoder.counts(), cap.stats()

Per connection, collected (holds each connection's bytes until it closes; for tests and small
captures)::

    for stream in iter_tcp_streams("trace.pcap", server_ports={9092}):
        stream.conn.client, stream.data(TO_SERVER), stream.events[TO_CLIENT]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from .packets import PacketDecoder
from .pcap import PcapReader
from .tcp import TO_CLIENT, TO_SERVER, Chunk, Connection, End, Gap, TcpReassembler

__all__ = ["TO_CLIENT", "TO_SERVER", "TcpCapture", "TcpStream", "iter_tcp_events", "iter_tcp_streams"]

Event = Chunk | Gap | End


class TcpCapture:
    """A capture file read as TCP stream events; see the module docstring."""

    def __init__(self, source: str | os.PathLike | BinaryIO, *, server_ports: Iterable[int] = (),
                 max_buffered: int = 4 << 20, linger_ns: int = 60_000_000_000,
                 idle_timeout_ns: int | None = None, trust_acks: bool = True):
        self.reader = PcapReader(source)
        self.decoder = PacketDecoder()
        self.reassembler = TcpReassembler(server_ports, max_buffered=max_buffered, linger_ns=linger_ns,
                                          idle_timeout_ns=idle_timeout_ns, trust_acks=trust_acks)
        self.packets = 0  #: packets read
        self.segments = 0  #: TCP segments decoded

    def events(self) -> Iterator[tuple[Connection, int, Event]]:
        """Yield (connection, direction, event) in capture order, then the end-of-capture events."""
        decode = self.decoder.decode
        feed = self.reassembler.feed
        out = self.reassembler.events
        segments = 0
        frame = 0
        try:
            for frame, ts, linktype, data, orig_len in self.reader:
                seg = decode(linktype, data, orig_len)
                if seg is None:
                    continue
                segments += 1
                feed(frame, ts, seg)
                if out:
                    yield from out
                    out.clear()
        finally:
            self.packets = frame
            self.segments = segments
        self.reassembler.finish()
        yield from out
        out.clear()

    @property
    def warnings(self) -> list[str]:
        return self.reader.warnings

    def stats(self) -> dict[str, int]:
        """Packet, segment and connection counts and the decoder's skip counters."""
        r = self.reassembler
        return {"packets": self.packets, "tcp_segments": self.segments, "connections": r.connections,
                "ignored_segments": r.ignored, **self.decoder.counts()}

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> TcpCapture:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_tcp_events(source: str | os.PathLike | BinaryIO, **options) -> Iterator[tuple[Connection, int, Event]]:
    """(connection, direction, event) triples of a capture file, in capture order (streaming)."""
    with TcpCapture(source, **options) as cap:
        yield from cap.events()


class TcpStream:
    """One connection's events, split by direction (``events[TO_SERVER]``, ``events[TO_CLIENT]``)."""

    __slots__ = ("conn", "events")

    def __init__(self, conn: Connection):
        self.conn = conn
        self.events: tuple[list[Event], list[Event]] = ([], [])

    def chunks(self, direction: int) -> list[Chunk | Gap]:
        """The Chunk and Gap events of one direction."""
        return [e for e in self.events[direction] if type(e) is not End]

    def data(self, direction: int, gap_fill: bytes | None = None) -> bytes:
        """The bytes of one direction; gaps raise ValueError unless ``gap_fill`` (one byte) fills them."""
        parts = []
        for e in self.events[direction]:
            if type(e) is Chunk:
                parts.append(e.data)
            elif type(e) is Gap:
                if gap_fill is None:
                    raise ValueError(f"connection {self.conn.id} direction {direction} has a gap of {e.size} "
                                     f"bytes at frame {e.frame}")
                parts.append(gap_fill * e.size)
        return b"".join(parts)

    def gaps(self, direction: int) -> list[Gap]:
        return [e for e in self.events[direction] if type(e) is Gap]

    def end(self, direction: int) -> str | None:
        """How the direction ended ('fin', 'rst', 'eof'...)."""
        for e in reversed(self.events[direction]):
            if type(e) is End:
                return e.reason
        return None

    def __repr__(self) -> str:
        return f"<TcpStream {self.conn!r} {len(self.events[0])}+{len(self.events[1])} events>"


def iter_tcp_streams(source: str | os.PathLike | BinaryIO, *, capture: list | None = None,
                     **options) -> Iterator[TcpStream]:
    """Each connection's events, yielded when both directions have ended (closing order; the
    connections still open at the end of the capture last, in order of their first packet).

    ``options`` go to ``TcpCapture``; pass a list as ``capture`` to get the ``TcpCapture`` (for
    its warnings and counters) appended to it.
    """
    with TcpCapture(source, **options) as cap:
        if capture is not None:
            capture.append(cap)
        streams: dict[int, TcpStream] = {}
        for conn, direction, event in cap.events():
            stream = streams.get(conn.id)
            if stream is None:
                stream = streams[conn.id] = TcpStream(conn)
            stream.events[direction].append(event)
            if type(event) is End:
                other = stream.events[1 - direction]
                if other and type(other[-1]) is End:
                    yield streams.pop(conn.id)
        yield from streams.values()

