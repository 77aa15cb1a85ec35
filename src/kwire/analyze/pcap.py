"""A streaming reader of pcap and pcapng capture files.

``PcapReader(path_or_file)`` reads the file in chunks (memory bounded by the chunk size and the
largest record, whatever the file size) and yields one ``Packet`` per captured packet::

    with PcapReader("trace.pcapng") as reader:
        for frame, ts_ns, linktype, data, orig_len in reader:
            ...
    reader.warnings   # what stopped the reading early, if anything

Formats:

* pcap: both byte orders, microsecond (``a1b2c3d4``) and nanosecond (``a1b23c4d``) magics, and
  the "modified" pcap of old Red Hat tcpdump (``a1b2cd34``, 24-byte record headers).
* pcapng: section header, interface description (link type, snaplen, ``if_tsresol``,
  ``if_tsoffset``), enhanced packet, simple packet and the obsolete packet block; other blocks
  are skipped.  Several sections (each with its own byte order and interfaces) and several
  interfaces (each with its own link type and time resolution) per section.
* gzip-compressed files of either format, when given a path or a seekable file.

Timestamps are integer nanoseconds since the epoch (exact for every resolution up to 1 ns;
``Packet.ts`` gives float seconds).  Simple packet blocks carry no timestamp: they get the
timestamp of the packet before them (0 for the first).  Frame numbers start at 1 and count
every packet yielded, as Wireshark numbers them.

A file that is neither format raises ``NotACaptureError``.  A file cut short or corrupt further
on is not an error: reading stops there, the packets before it have been yielded, and
``reader.warnings`` says what happened and where.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

__all__ = [
    "LINKTYPE_ETHERNET",
    "LINKTYPE_LINUX_SLL",
    "LINKTYPE_LINUX_SLL2",
    "LINKTYPE_LOOP",
    "LINKTYPE_NULL",
    "LINKTYPE_RAW",
    "LINKTYPE_IPV4",
    "LINKTYPE_IPV6",
    "MAX_RECORD_SIZE",
    "NotACaptureError",
    "Packet",
    "PcapReader",
    "read_packets",
]

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

#: Records (pcap) or packet blocks (pcapng) larger than this are taken for corruption.
#: Wireshark's own limit for ordinary link types is 256 KiB; this leaves room for jumbo
#: loopback/TSO captures and still bounds the memory a corrupt length can claim.
MAX_RECORD_SIZE = 16 * 1024 * 1024

_CHUNK = 1 << 20  # bytes read at a time
_MAX_WARNINGS = 50

_tnew = tuple.__new__


class NotACaptureError(ValueError):
    """The input is neither a pcap nor a pcapng file."""


class Packet(NamedTuple):
    """One captured packet."""

    frame: int  #: 1-based number of the packet in the file
    ts_ns: int  #: capture time, integer nanoseconds since the epoch
    linktype: int  #: LINKTYPE_* of the packet's interface
    data: bytes  #: the captured bytes (possibly cut by the snaplen)
    orig_len: int  #: length of the packet on the wire

    @property
    def ts(self) -> float:
        """Capture time in float seconds (loses sub-microsecond precision)."""
        return self.ts_ns / 1e9


# pcap magics as read little-endian from the first four bytes.
_PCAP_MAGICS = {
    0xA1B2C3D4: ("<", 1000, 16),
    0xD4C3B2A1: (">", 1000, 16),
    0xA1B23C4D: ("<", 1, 16),
    0x4D3CB2A1: (">", 1, 16),
    0xA1B2CD34: ("<", 1000, 24),  # Alexey Kuznetzov's modified pcap
    0x34CDB2A1: (">", 1000, 24),
}
_PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_BOM = 0x1A2B3C4D

_BT_IDB = 1
_BT_PB = 2
_BT_SPB = 3
_BT_EPB = 6
_READ_BLOCKS = frozenset((_PCAPNG_SHB, _BT_IDB, _BT_PB, _BT_SPB, _BT_EPB))


class _Interface:
    __slots__ = ("linktype", "snaplen", "mul", "div", "offset_ns")

    def __init__(self, linktype: int, snaplen: int):
        self.linktype = linktype
        self.snaplen = snaplen
        self.mul = 1000  # default if_tsresol: microseconds
        self.div = 1
        self.offset_ns = 0


class PcapReader:
    """Iterate the packets of a pcap or pcapng file (a path or a binary file object).

    Iterate it once.  After (or during) iteration: ``format`` ('pcap' or 'pcapng'),
    ``warnings`` (list of str), ``packets`` (count yielded), ``linktypes`` (set seen),
    ``truncated`` (True if reading stopped before the end of the input).
    """

    def __init__(self, source: str | os.PathLike | BinaryIO, *, chunk_size: int = _CHUNK,
                 max_record_size: int = MAX_RECORD_SIZE):
        self._own = False
        if isinstance(source, (str, bytes, os.PathLike)):
            f: BinaryIO = open(source, "rb")  # noqa: SIM115 - closed by close()
            self._own = True
            self.name = os.fsdecode(source)
        else:
            f = source
            self.name = getattr(source, "name", "<stream>")
        self._f = f
        self._chunk = max(chunk_size, 64)
        self.max_record_size = max_record_size
        self.warnings: list[str] = []
        self._suppressed = 0
        self.packets = 0
        self.truncated = False
        self.linktypes: set[int] = set()
        self.byteorder = ""
        self.snaplen = 0
        # Sniff the format now so that a wrong file fails at open time.
        head = self._read_exact_or_less(4)
        if head[:2] == b"\x1f\x8b":
            self._f = self._gunzip(f, head)
            head = self._read_exact_or_less(4)
        self._head = head
        if len(head) < 4:
            self.close()
            raise NotACaptureError(f"{self.name}: too short to be a capture file ({len(head)} bytes)")
        magic = int.from_bytes(head, "little")
        if magic in _PCAP_MAGICS:
            self.format = "pcap"
        elif magic == _PCAPNG_SHB:
            self.format = "pcapng"
        else:
            self.close()
            raise NotACaptureError(f"{self.name}: not a pcap or pcapng file (starts with {head.hex()})")
        self._started = False
        self._consumed_before = 0  # bytes of the (uncompressed) input before the current buffer

    @property
    def bytes_consumed(self) -> int:
        """Bytes of the (uncompressed) input read past so far, for progress reports."""
        return self._consumed_before

    # -- plumbing ---------------------------------------------------------------------------

    def _read_exact_or_less(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            got = self._f.read(n - len(out))
            if not got:
                break
            out += got
        return out

    def _gunzip(self, f: BinaryIO, head: bytes) -> BinaryIO:
        try:
            f.seek(-len(head), io.SEEK_CUR)
        except (OSError, ValueError, AttributeError):
            raise NotACaptureError(f"{self.name}: gzip-compressed input must be a path or a seekable file") from None
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]

    def _warn(self, text: str) -> None:
        if len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(text)
        else:
            self._suppressed += 1
            self.warnings[-1] = f"... and {self._suppressed} more warnings"

    def _stop(self, text: str) -> None:
        self.truncated = True
        self._warn(text)

    def close(self) -> None:
        if self._own:
            self._f.close()
        elif isinstance(self._f, gzip.GzipFile):
            self._f.close()  # closes only the decompressor, not the caller's file

    def __enter__(self) -> PcapReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> Iterator[Packet]:
        if self._started:
            raise RuntimeError("a PcapReader can be iterated only once")
        self._started = True
        return self._pcap() if self.format == "pcap" else self._pcapng()

    def _read_some(self, n: int) -> bytes:
        """Up to n bytes (b"" at the end of the input or on a read error, which is recorded)."""
        try:
            return self._f.read(n)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            self._warn(f"read error at byte offset {self._consumed_before}: {e}")
            return b""

    def _fill(self, buf: bytes, pos: int, need: int) -> tuple[bytes, bool]:
        """buf[pos:] extended by reads until it holds ``need`` bytes; (new buf, eof).

        A read error (I/O, broken compression) is recorded and taken for the end of the input.
        """
        parts = [buf[pos:]]
        have = len(parts[0])
        want = max(need, self._chunk)
        read = self._f.read
        while have < need:
            try:
                got = read(want - have)
            except (OSError, EOFError, gzip.BadGzipFile) as e:
                self._warn(f"read error at byte offset {self._consumed_before + have}: {e}")
                got = b""
            if not got:
                return b"".join(parts), True
            parts.append(got)
            have += len(got)
        return b"".join(parts), False

    # -- pcap -------------------------------------------------------------------------------

    def _pcap(self):
        buf, _ = self._fill(self._head, 0, 24)
        magic = int.from_bytes(buf[:4], "little")
        if len(buf) < 24:
            self._stop(f"file header cut short ({len(buf)} of 24 bytes)")
            return
        endian, ts_mul, rec_len = _PCAP_MAGICS[magic]
        self.byteorder = "little" if endian == "<" else "big"
        _major, _minor, _zone, _sigfigs, snaplen, network = struct.unpack_from(endian + "HHiIII", buf, 4)
        self.snaplen = snaplen
        linktype = network & 0xFFFF  # upper bits: FCS length / flags
        self.linktypes.add(linktype)
        limit = max(self.max_record_size, snaplen if snaplen < (1 << 30) else 0)
        rec = struct.Struct(endian + "IIII").unpack_from
        frame = self.packets
        pos = 24
        n = len(buf)
        eof = False
        while True:
            # Fast path: whole records inside the buffer.
            while pos + rec_len <= n:
                sec, frac, caplen, orig_len = rec(buf, pos)
                start = pos + rec_len
                end = start + caplen
                if end > n or caplen > limit:
                    if caplen > limit:
                        self.packets = frame
                        self._stop(f"record {frame + 1} at byte offset {self._offset(pos)} claims "
                                   f"{caplen} captured bytes (over {limit}): file corrupt, stopped")
                        return
                    break
                frame += 1
                yield _tnew(Packet, (frame, sec * 1_000_000_000 + frac * ts_mul, linktype, buf[start:end], orig_len))
                pos = end
            self.packets = frame
            if eof:
                if pos < n:
                    self._stop(self._cut_pcap(buf, pos, n, rec_len, endian))
                return
            # Need more bytes: the record header, or the record's data.
            need = rec_len
            if pos + rec_len <= n:
                need = rec_len + rec(buf, pos)[2]
            self._consumed_before += pos
            buf, eof = self._fill(buf, pos, need)
            pos = 0
            n = len(buf)

    def _offset(self, pos: int) -> int:
        return self._consumed_before + pos

    def _cut_pcap(self, buf: bytes, pos: int, n: int, rec_len: int, endian: str) -> str:
        where = self._offset(pos)
        if n - pos < rec_len:
            return (f"file cut short in the record header of frame {self.packets + 1} "
                    f"(byte offset {where}, {n - pos} of {rec_len} bytes)")
        caplen = struct.unpack_from(endian + "I", buf, pos + 8)[0]
        return (f"file cut short in the middle of frame {self.packets + 1} "
                f"(byte offset {where}, {n - pos - rec_len} of {caplen} bytes): frame dropped")

    # -- pcapng -----------------------------------------------------------------------------

    def _pcapng(self):
        buf = self._head
        pos = 0
        n = len(buf)
        eof = False
        frame = self.packets
        endian = ""
        ifaces: list[_Interface] = []
        last_ts = 0
        limit = self.max_record_size
        hdr = epb = pb = u32 = blk = None
        while True:
            if blk is not None:
                # Fast path: well-formed enhanced packet blocks inside the buffer.
                nifaces = len(ifaces)
                while pos + 28 <= n:
                    btype, blen, ifid, ts_hi, ts_lo, caplen, orig_len = blk(buf, pos)
                    end = pos + blen
                    if (btype != _BT_EPB or end > n or ifid >= nifaces or caplen > blen - 32 or blen & 3
                            or u32(buf, end - 4)[0] != blen):
                        break  # the general path below deals with it
                    iface = ifaces[ifid]
                    last_ts = ((ts_hi << 32) | ts_lo) * iface.mul // iface.div + iface.offset_ns
                    frame += 1
                    yield _tnew(Packet, (frame, last_ts, iface.linktype, buf[pos + 28:pos + 28 + caplen], orig_len))
                    pos = end
            if n - pos < 12:
                if eof:
                    self.packets = frame
                    if pos < n:
                        self._stop(f"file cut short in a block header (byte offset {self._offset(pos)}, "
                                   f"{n - pos} bytes left)")
                    return
                self._consumed_before += pos
                buf, eof = self._fill(buf, pos, 12)
                pos = 0
                n = len(buf)
                continue
            btype = hdr(buf, pos)[0] if hdr is not None else int.from_bytes(buf[pos:pos + 4], "little")
            if btype == _PCAPNG_SHB:  # the same in both byte orders
                bom = buf[pos + 8:pos + 12]
                if bom == b"\x4d\x3c\x2b\x1a":
                    endian = "<"
                elif bom == b"\x1a\x2b\x3c\x4d":
                    endian = ">"
                else:
                    self.packets = frame
                    self._stop(f"section header at byte offset {self._offset(pos)} has no valid "
                               f"byte-order magic ({bom.hex()}): file corrupt, stopped")
                    return
                if not self.byteorder:
                    self.byteorder = "little" if endian == "<" else "big"
                hdr = struct.Struct(endian + "II").unpack_from
                epb = struct.Struct(endian + "IIIII").unpack_from
                pb = struct.Struct(endian + "HHIIII").unpack_from
                u32 = struct.Struct(endian + "I").unpack_from
                blk = struct.Struct(endian + "7I").unpack_from
                ifaces = []
            blen = hdr(buf, pos)[1]
            if blen < 12 or blen & 3:
                self.packets = frame
                self._stop(f"block at byte offset {self._offset(pos)} has an invalid length {blen}: "
                           "file corrupt, stopped")
                return
            interesting = btype in _READ_BLOCKS
            if blen > limit and interesting:
                self.packets = frame
                self._stop(f"block at byte offset {self._offset(pos)} claims {blen} bytes "
                           f"(over {limit}): file corrupt, stopped")
                return
            if n - pos < blen:
                if eof:
                    self.packets = frame
                    self._stop(f"file cut short in a block of type {btype:#x} (byte offset "
                               f"{self._offset(pos)}, {n - pos} of {blen} bytes): block dropped")
                    return
                if not interesting and blen > self._chunk:
                    # Skip a big block we do not read without holding it in memory.
                    skip = blen - (n - pos)
                    self._consumed_before += n
                    while skip > 0:
                        got = self._read_some(min(skip, self._chunk))
                        if not got:
                            self.packets = frame
                            self._stop(f"file cut short in a block of type {btype:#x}: block dropped")
                            return
                        skip -= len(got)
                        self._consumed_before += len(got)
                    buf = b""
                    pos = n = 0
                    continue
                self._consumed_before += pos
                buf, eof = self._fill(buf, pos, blen)
                pos = 0
                n = len(buf)
                continue
            end = pos + blen
            if u32(buf, end - 4)[0] != blen:
                self.packets = frame
                self._stop(f"block at byte offset {self._offset(pos)}: trailing length "
                           f"{u32(buf, end - 4)[0]} differs from leading length {blen}: file corrupt, stopped")
                return
            if btype == _BT_EPB:
                if blen < 32:
                    self._warn(f"enhanced packet block at byte offset {self._offset(pos)} too short, skipped")
                else:
                    ifid, ts_hi, ts_lo, caplen, orig_len = epb(buf, pos + 8)
                    if ifid >= len(ifaces):
                        self._warn(f"packet block at byte offset {self._offset(pos)} names interface "
                                   f"{ifid}, not described: skipped")
                    elif caplen > blen - 32:
                        self.packets = frame
                        self._stop(f"enhanced packet block at byte offset {self._offset(pos)} claims "
                                   f"{caplen} bytes in a {blen}-byte block: file corrupt, stopped")
                        return
                    else:
                        iface = ifaces[ifid]
                        last_ts = ((ts_hi << 32) | ts_lo) * iface.mul // iface.div + iface.offset_ns
                        frame += 1
                        yield _tnew(Packet, (frame, last_ts, iface.linktype, buf[pos + 28:pos + 28 + caplen],
                                             orig_len))
            elif btype == _BT_SPB:
                if not ifaces:
                    self._warn(f"simple packet block at byte offset {self._offset(pos)} with no "
                               "interface described: skipped")
                elif blen >= 16:
                    iface = ifaces[0]
                    orig_len = u32(buf, pos + 8)[0]
                    caplen = min(orig_len, blen - 16)
                    if iface.snaplen:
                        caplen = min(caplen, iface.snaplen)
                    frame += 1
                    yield _tnew(Packet, (frame, last_ts, iface.linktype, buf[pos + 12:pos + 12 + caplen], orig_len))
            elif btype == _BT_IDB:
                if blen < 20:
                    self._warn(f"interface description block at byte offset {self._offset(pos)} "
                               "too short: ignored")
                    ifaces.append(_Interface(-1, 0))
                else:
                    linktype = struct.unpack_from(endian + "H", buf, pos + 8)[0]
                    iface = _Interface(linktype, u32(buf, pos + 12)[0])
                    self._idb_options(iface, buf, pos + 16, end - 4, endian)
                    ifaces.append(iface)
                    self.linktypes.add(linktype)
                    if not self.snaplen:
                        self.snaplen = iface.snaplen
            elif btype == _BT_PB:
                if blen >= 32:
                    ifid, _drops, ts_hi, ts_lo, caplen, orig_len = pb(buf, pos + 8)
                    if ifid < len(ifaces) and caplen <= blen - 32:
                        iface = ifaces[ifid]
                        last_ts = ((ts_hi << 32) | ts_lo) * iface.mul // iface.div + iface.offset_ns
                        frame += 1
                        yield _tnew(Packet, (frame, last_ts, iface.linktype, buf[pos + 28:pos + 28 + caplen],
                                             orig_len))
                    else:
                        self._warn(f"packet block at byte offset {self._offset(pos)} is inconsistent: skipped")
            elif btype == _PCAPNG_SHB:
                if blen < 28:
                    self.packets = frame
                    self._stop(f"section header at byte offset {self._offset(pos)} too short: "
                               "file corrupt, stopped")
                    return
                major = struct.unpack_from(endian + "H", buf, pos + 12)[0]
                if major != 1:
                    self.packets = frame
                    self._stop(f"section header at byte offset {self._offset(pos)} has version "
                               f"{major}, not 1: stopped")
                    return
            pos = end
            self.packets = frame

    def _idb_options(self, iface: _Interface, buf: bytes, pos: int, end: int, endian: str) -> None:
        opt = struct.Struct(endian + "HH").unpack_from
        while pos + 4 <= end:
            code, length = opt(buf, pos)
            if code == 0:
                break
            value = buf[pos + 4:pos + 4 + length]
            if len(value) < length:
                self._warn("interface description options run past the block: rest ignored")
                break
            if code == 9 and length >= 1:  # if_tsresol
                r = value[0]
                if r & 0x80:
                    iface.mul, iface.div = 1_000_000_000, 1 << (r & 0x7F)
                else:
                    e = r & 0x7F
                    if e <= 9:
                        iface.mul, iface.div = 10 ** (9 - e), 1
                    else:
                        iface.mul, iface.div = 1, 10 ** (e - 9)
            elif code == 14 and length >= 8:  # if_tsoffset, seconds
                iface.offset_ns = struct.unpack_from(endian + "q", value, 0)[0] * 1_000_000_000
            pos += 4 + ((length + 3) & ~3)


def read_packets(source: str | os.PathLike | BinaryIO):
    """Yield the packets of a capture file (a shortcut for iterating a ``PcapReader``)."""
    with PcapReader(source) as reader:
        yield from reader
