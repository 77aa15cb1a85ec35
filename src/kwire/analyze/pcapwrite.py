"""Writing captures: pcap and pcapng writers, packet builders, synthetic TCP conversations.

For tests and for exporting traffic (the embedded broker or client recording what it exchanged,
the analyzer writing the packets of one connection)::

    with open("out.pcap", "wb") as f:
        w = PcapWriter(f)
        conv = TcpConversation(w, "10.0.0.1", 50000, "10.0.0.2", 9092)
        conv.handshake(ts_ns)
        conv.send(TO_SERVER, request_frame, ts_ns)
        conv.send(TO_CLIENT, response_frame, ts_ns)
        conv.close(ts_ns)

Packets are built with correct IPv4 and TCP checksums.  ``PcapWriter`` writes either byte order
and microsecond or nanosecond timestamps; ``PcapngWriter`` sections, interfaces (link type,
snaplen, ``if_tsresol``), enhanced and simple packet blocks, and any other block verbatim.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import BinaryIO

from .packets import ACK, FIN, PSH, SYN

__all__ = [
    "PcapWriter",
    "PcapngWriter",
    "TcpConversation",
    "ethernet",
    "ipv4",
    "ipv6",
    "link_frame",
    "tcp",
    "tcp_packet",
]

_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD


def _addr(a: str | bytes) -> bytes:
    return a if isinstance(a, bytes) else ipaddress.ip_address(a).packed


def _checksum(data: bytes) -> int:
    if len(data) & 1:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def tcp(src: str | bytes, dst: str | bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
        payload: bytes = b"", *, window: int = 65535, options: bytes = b"") -> bytes:
    """A TCP header (with checksum over the pseudo-header of src/dst) and payload."""
    options += b"\0" * (-len(options) % 4)
    hl = 20 + len(options)
    header = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, (hl // 4) << 4 | (flags >> 8 & 1),
                         flags & 0xFF, window, 0, 0) + options
    s, d = _addr(src), _addr(dst)
    length = hl + len(payload)
    if len(s) == 4:
        pseudo = s + d + struct.pack("!BBH", 0, 6, length)
    else:
        pseudo = s + d + struct.pack("!IxxxB", length, 6)
    csum = _checksum(pseudo + header + payload)
    return header[:16] + struct.pack("!H", csum) + header[18:] + payload


def ipv4(src: str | bytes, dst: str | bytes, payload: bytes, *, proto: int = 6, ident: int = 0, ttl: int = 64,
         options: bytes = b"", frag_offset: int = 0, more_fragments: bool = False, dont_fragment: bool = True,
         total_length: int | None = None) -> bytes:
    """An IPv4 header (with options and checksum) and payload; frag_offset in bytes (multiple of 8)."""
    options += b"\0" * (-len(options) % 4)
    ihl = 20 + len(options)
    frag = (frag_offset >> 3) | (0x2000 if more_fragments else 0) | (0x4000 if dont_fragment and not
                                                                      more_fragments and not frag_offset else 0)
    total = ihl + len(payload) if total_length is None else total_length
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl // 4, 0, total, ident, frag, ttl, proto, 0,
                         _addr(src), _addr(dst)) + options
    return header[:10] + struct.pack("!H", _checksum(header)) + header[12:] + payload


def ipv6(src: str | bytes, dst: str | bytes, payload: bytes, *, next_header: int = 6,
         extensions: list[tuple[int, bytes]] = (), hop_limit: int = 64) -> bytes:
    """An IPv6 header, extension headers and payload.

    ``extensions``: (header type, body) pairs in order; the body excludes the next-header byte
    (and for the common layouts the length byte is computed: give the rest, padded by this
    function to fill 8-octet units).  Types 44 (fragment: body is 7 bytes, given whole) and 51
    (AH: 4-octet units) are laid out as their RFCs say.
    """
    chain = b""
    types = [t for t, _ in extensions] + [next_header]
    for i, (_t, body) in enumerate(extensions):
        nxt = types[i + 1]
        t = types[i]
        if t == 44:
            chain += bytes([nxt]) + body[:7].ljust(7, b"\0")
        elif t == 51:
            body += b"\0" * (-(len(body) + 2) % 4)
            chain += bytes([nxt, (len(body) + 2) // 4 - 2]) + body
        else:
            body += b"\0" * (-(len(body) + 2) % 8)
            chain += bytes([nxt, (len(body) + 2) // 8 - 1]) + body
    first = types[0]
    return struct.pack("!IHBB16s16s", 0x60000000, len(chain) + len(payload), first, hop_limit, _addr(src),
                       _addr(dst)) + chain + payload


def ethernet(payload: bytes, ethertype: int, *, vlans: tuple[int, ...] = (), src: bytes = b"\x02\0\0\0\0\x01",
             dst: bytes = b"\x02\0\0\0\0\x02", qinq: bool = False) -> bytes:
    """An Ethernet II frame; each VLAN id adds an 802.1Q tag (the first an 802.1ad one if qinq)."""
    tags = b""
    for i, vid in enumerate(vlans):
        tpid = 0x88A8 if qinq and i == 0 and len(vlans) > 1 else 0x8100
        tags += struct.pack("!HH", tpid, vid & 0xFFF)
    return dst + src + tags + struct.pack("!H", ethertype) + payload


def link_frame(linktype: int, ip_packet: bytes, *, vlans: tuple[int, ...] = (), null_byteorder: str = "little",
               qinq: bool = False) -> bytes:
    """Wrap an IP packet in the link layer of ``linktype`` (1, 0, 108, 113, 276, 101, 12, 14, 228, 229)."""
    v6 = ip_packet[0] >> 4 == 6
    ethertype = _ETH_IPV6 if v6 else _ETH_IPV4
    if linktype == 1:
        return ethernet(ip_packet, ethertype, vlans=vlans, qinq=qinq)
    if linktype in (0, 108):
        family = (30 if null_byteorder == "little" else 24) if v6 else 2
        order = "big" if linktype == 108 else null_byteorder
        return family.to_bytes(4, order) + ip_packet
    if linktype == 113:
        return struct.pack("!HHH8sH", 0, 1, 6, b"\x02\0\0\0\0\x01\0\0", ethertype) + ip_packet
    if linktype == 276:
        return struct.pack("!HHIHBB8s", ethertype, 0, 1, 1, 0, 6, b"\x02\0\0\0\0\x01\0\0") + ip_packet
    if linktype in (101, 12, 14, 228, 229):
        return ip_packet
    raise ValueError(f"cannot build link type {linktype}")


def tcp_packet(linktype: int, src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int,
               payload: bytes = b"", *, vlans: tuple[int, ...] = (), **link_options) -> bytes:
    """A whole TCP packet over IPv4 or IPv6 (from the address form) in the given link layer."""
    segment = tcp(src, dst, sport, dport, seq, ack, flags, payload)
    ip = ipv6(src, dst, segment) if ":" in src else ipv4(src, dst, segment)
    return link_frame(linktype, ip, vlans=vlans, **link_options)


class PcapWriter:
    """Writes a classic pcap file."""

    def __init__(self, f: BinaryIO, linktype: int = 1, *, nanosecond: bool = False, byteorder: str = "little",
                 snaplen: int = 262144):
        self.f = f
        self.linktype = linktype
        self.snaplen = snaplen
        self._e = "<" if byteorder == "little" else ">"
        self._ns = nanosecond
        magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
        f.write(struct.pack(self._e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))

    def write(self, ts_ns: int, data: bytes, orig_len: int | None = None) -> None:
        """One record; data beyond the snaplen is cut (orig_len keeps the full length)."""
        orig = len(data) if orig_len is None else orig_len
        data = data[:self.snaplen]
        sec, rem = divmod(ts_ns, 1_000_000_000)
        frac = rem if self._ns else rem // 1000
        self.f.write(struct.pack(self._e + "IIII", sec, frac, len(data), orig) + data)


class PcapngWriter:
    """Writes a pcapng file: call ``add_interface`` before writing packets on it."""

    def __init__(self, f: BinaryIO, *, byteorder: str = "little"):
        self.f = f
        self._e = "<" if byteorder == "little" else ">"
        self._ifaces: list[tuple[int, int]] = []  # (snaplen, tsresol byte)
        self.new_section()

    def block(self, btype: int, body: bytes) -> None:
        """Any block: type and body (padded to 4 bytes here)."""
        body += b"\0" * (-len(body) % 4)
        n = len(body) + 12
        self.f.write(struct.pack(self._e + "II", btype, n) + body + struct.pack(self._e + "I", n))

    def _options(self, options: list[tuple[int, bytes]]) -> bytes:
        out = b""
        for code, value in options:
            out += struct.pack(self._e + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)
        return out + (struct.pack(self._e + "HH", 0, 0) if options else b"")

    def new_section(self, byteorder: str | None = None) -> None:
        """Start a section (byte order may change); interfaces must be described again."""
        if byteorder is not None:
            self._e = "<" if byteorder == "little" else ">"
        self._ifaces = []
        self.block(0x0A0D0D0A, struct.pack(self._e + "IHHq", 0x1A2B3C4D, 1, 0, -1))

    def add_interface(self, linktype: int = 1, *, snaplen: int = 0, tsresol: int | None = None,
                      tsoffset: int | None = None) -> int:
        """Describe an interface; tsresol is the if_tsresol byte (6 = us default, 9 = ns, 0x80|n = 2^-n)."""
        opts = []
        if tsresol is not None:
            opts.append((9, bytes([tsresol])))
        if tsoffset is not None:
            opts.append((14, struct.pack(self._e + "q", tsoffset)))
        self.block(1, struct.pack(self._e + "HHI", linktype, 0, snaplen) + self._options(opts))
        self._ifaces.append((snaplen, 6 if tsresol is None else tsresol))
        return len(self._ifaces) - 1

    def _units(self, ts_ns: int, iface: int, tsoffset: int = 0) -> int:
        r = self._ifaces[iface][1]
        ts_ns -= tsoffset * 1_000_000_000
        if r & 0x80:
            return (ts_ns << (r & 0x7F)) // 1_000_000_000
        e = r & 0x7F
        return ts_ns // 10 ** (9 - e) if e <= 9 else ts_ns * 10 ** (e - 9)

    def write(self, ts_ns: int, data: bytes, iface: int = 0, orig_len: int | None = None, *,
              tsoffset: int = 0) -> None:
        """An enhanced packet block (tsoffset: the interface's if_tsoffset in seconds, if it has one)."""
        orig = len(data) if orig_len is None else orig_len
        snaplen = self._ifaces[iface][0]
        if snaplen:
            data = data[:snaplen]
        units = self._units(ts_ns, iface, tsoffset)
        self.block(6, struct.pack(self._e + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(data), orig) + data)

    def write_simple(self, data: bytes, orig_len: int | None = None) -> None:
        """A simple packet block (interface 0, no timestamp)."""
        orig = len(data) if orig_len is None else orig_len
        self.block(3, struct.pack(self._e + "I", orig) + data)

    def write_obsolete(self, ts_ns: int, data: bytes, iface: int = 0, orig_len: int | None = None) -> None:
        """An (obsolete) packet block, type 2."""
        orig = len(data) if orig_len is None else orig_len
        units = self._units(ts_ns, iface)
        self.block(2, struct.pack(self._e + "HHIIII", iface, 0, units >> 32, units & 0xFFFFFFFF, len(data), orig)
                   + data)


class TcpConversation:
    """Writes one TCP connection's packets with consistent sequence and acknowledgment numbers.

    ``writer`` is a ``PcapWriter`` or ``PcapngWriter`` (``write(ts_ns, data)``) or any callable
    taking (ts_ns, packet bytes).  Direction 0 is client to server, 1 server to client.
    """

    def __init__(self, writer, client: str, client_port: int, server: str, server_port: int, *,
                 linktype: int = 1, isn: tuple[int, int] = (1000, 5000), mss: int = 1460, **link_options):
        self._write = writer if callable(writer) else writer.write
        self.ends = ((client, client_port), (server, server_port))
        self.linktype = linktype
        self.mss = mss
        self.link_options = link_options
        self.next_seq = [isn[0], isn[1]]

    def packet(self, direction: int, flags: int, payload: bytes = b"", *, seq: int | None = None,
               ack: int | None = None) -> bytes:
        """The bytes of one packet (not written, sequence numbers not advanced)."""
        (src, sport), (dst, dport) = self.ends[direction], self.ends[1 - direction]
        seq = self.next_seq[direction] if seq is None else seq
        ack = self.next_seq[1 - direction] if ack is None else ack
        return tcp_packet(self.linktype, src, dst, sport, dport, seq, ack, flags, payload, **self.link_options)

    def emit(self, ts_ns: int, direction: int, flags: int, payload: bytes = b"", *, seq: int | None = None,
             ack: int | None = None, advance: bool = True) -> bytes:
        """Write one packet; advance the sender's sequence number by what it consumes."""
        pkt = self.packet(direction, flags, payload, seq=seq, ack=ack)
        self._write(ts_ns, pkt)
        if advance and seq is None:
            self.next_seq[direction] = (self.next_seq[direction] + len(payload)
                                        + (1 if flags & (SYN | FIN) else 0)) & 0xFFFFFFFF
        return pkt

    def handshake(self, ts_ns: int = 0) -> None:
        self.emit(ts_ns, 0, SYN, ack=0)
        self.emit(ts_ns + 1000, 1, SYN | ACK)
        self.emit(ts_ns + 2000, 0, ACK)

    def segments(self, direction: int, data: bytes) -> list[tuple[int, bytes]]:
        """(seq, payload) of the MSS-sized segments that would carry data, without writing them."""
        out = []
        seq = self.next_seq[direction]
        for i in range(0, len(data), self.mss):
            part = data[i:i + self.mss]
            out.append((seq, part))
            seq = (seq + len(part)) & 0xFFFFFFFF
        return out

    def send(self, direction: int, data: bytes, ts_ns: int = 0, *, ack_it: bool = True) -> None:
        """Write data as MSS-sized segments, then (ack_it) the peer's acknowledgment."""
        for i in range(0, len(data), self.mss):
            self.emit(ts_ns, direction, ACK | PSH, data[i:i + self.mss])
        if ack_it:
            self.emit(ts_ns + 100, 1 - direction, ACK)

    def close(self, ts_ns: int = 0) -> None:
        self.emit(ts_ns, 0, FIN | ACK)
        self.emit(ts_ns + 1000, 1, FIN | ACK)
        self.emit(ts_ns + 2000, 0, ACK)
