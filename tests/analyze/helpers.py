"""Shared helpers of the analyze tests: capture paths, in-memory captures, event summaries."""

from __future__ import annotations

import io
from pathlib import Path

from kwire.analyze import Chunk, End, Gap
from kwire.analyze.pcapwrite import PcapngWriter, PcapWriter

CAPTURES = Path(__file__).parents[2].parent / "shared" / "captures"
DEEPFLOW = CAPTURES / "deepflow"

TS0 = 1_700_000_000_123_456_789  # a timestamp with nanoseconds


class ShortReads(io.RawIOBase):
    """A non-seekable stream that returns at most ``step`` bytes per read (like a pipe)."""

    def __init__(self, data: bytes, step: int = 7):
        self._data = data
        self._pos = 0
        self.step = step
        self.reads: list[int] = []

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = len(self._data) - self._pos
        self.reads.append(n)
        got = self._data[self._pos:self._pos + min(n, self.step)]
        self._pos += len(got)
        return got

    @property
    def position(self) -> int:
        return self._pos


def pcap_bytes(packets, linktype: int = 1, **options) -> bytes:
    """A pcap file of (ts_ns, data) or (ts_ns, data, orig_len) packets."""
    f = io.BytesIO()
    w = PcapWriter(f, linktype, **options)
    for p in packets:
        w.write(*p)
    return f.getvalue()


def pcapng_bytes(packets, linktype: int = 1, *, byteorder: str = "little", tsresol: int | None = None) -> bytes:
    """A one-interface pcapng file of (ts_ns, data) packets."""
    f = io.BytesIO()
    w = PcapngWriter(f, byteorder=byteorder)
    w.add_interface(linktype, tsresol=tsresol)
    for p in packets:
        w.write(*p)
    return f.getvalue()


def summary(events) -> list[tuple]:
    """Events as comparable tuples: ('data', frame, bytes), ('gap', frame, size), ('end', reason)."""
    out = []
    for e in events:
        if type(e) is Chunk:
            out.append(("data", e.frame, bytes(e.data)))
        elif type(e) is Gap:
            out.append(("gap", e.frame, e.size))
        else:
            assert type(e) is End
            out.append(("end", e.reason))
    return out


def stream_view(events) -> list:
    """Events with consecutive chunks merged: [b'bytes', ('gap', n), b'bytes', ..., ('end', reason)]."""
    out: list = []
    for e in events:
        if type(e) is Chunk:
            if out and isinstance(out[-1], bytes):
                out[-1] += bytes(e.data)
            else:
                out.append(bytes(e.data))
        elif type(e) is Gap:
            out.append(("gap", e.size))
        else:
            out.append(("end", e.reason))
    return out
