"""Link, network and transport decoding down to TCP segments.

``PacketDecoder().decode(linktype, data, orig_len)`` returns a ``TcpSegment`` for a TCP packet
and None for anything else, counting why in the decoder's attributes (``non_ip``, ``non_tcp``,
``fragments``, ``truncated``, ``malformed``, ``unsupported_linktype``).

Link types: Ethernet (1) with any number of 802.1Q / 802.1ad (QinQ) tags, MPLS label stacks and
PPPoE sessions; Linux cooked captures SLL (113) and SLL2 (276); BSD loopback NULL (0, family in
either byte order) and OpenBSD LOOP (108); raw IP (101, 12, 14: version from the first nibble;
228: IPv4; 229: IPv6).

IPv4 with options; non-first fragments are skipped (counted in ``fragments``), a first fragment
is decoded with the payload it carries (the reassembler then sees the rest as missing).  A total
length of 0 (TCP segmentation offload on the capturing host) means "up to the captured end".
IPv6 with hop-by-hop, routing, destination options, fragment, AH, mobility, HIP and shim6
extension headers skipped (ESP hides what follows: counted as ``non_tcp``).

TCP: ports, sequence and acknowledgment numbers, flags (including NS as bit 8), payload.  When
the snaplen cut the payload, ``missing`` is how many payload bytes the packet had beyond those
captured (from the IP length); the reassembler turns them into a gap.  Ethernet padding and
trailers past the IP length are ignored.  Checksums are not verified (offloading makes them
unreliable in captures taken on an endpoint).
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

__all__ = [
    "ACK",
    "FIN",
    "PSH",
    "RST",
    "SYN",
    "URG",
    "PacketDecoder",
    "TcpSegment",
    "format_addr",
]

FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10
URG = 0x20

_tnew = tuple.__new__

_IP4 = struct.Struct("!BBHHHBBH4s4s").unpack_from
_IP4_TCP = struct.Struct("!BBHHHBBH4s4sHHIIBB").unpack_from
_IP6 = struct.Struct("!IHBB16s16s").unpack_from
_TCP = struct.Struct("!HHIIBB").unpack_from
_U16 = struct.Struct("!H").unpack_from

_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD
_ETH_VLAN = frozenset((0x8100, 0x88A8, 0x9100, 0x9200, 0x9300))
_ETH_MPLS = frozenset((0x8847, 0x8848))
_ETH_PPPOE = 0x8864

_AF_INET6 = frozenset((10, 24, 28, 30))  # Linux, NetBSD/OpenBSD, FreeBSD, macOS
_RAW_LINKTYPES = frozenset((101, 12, 14))
# IPv6 extension headers in the common (next header, length in 8-octet units - 1) layout.
_IP6_EXT = frozenset((0, 43, 60, 135, 139, 140))


class TcpSegment(NamedTuple):
    """A TCP segment from one packet."""

    src: bytes  #: source address, 4 (IPv4) or 16 (IPv6) bytes
    dst: bytes  #: destination address
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int  #: FIN, SYN, RST, PSH, ACK, URG... (NS is 0x100)
    payload: bytes  #: the captured payload
    missing: int  #: payload bytes the snaplen cut off after ``payload`` (0 normally)


def format_addr(addr: bytes) -> str:
    """An IPv4 or IPv6 address as text."""
    return socket.inet_ntop(socket.AF_INET if len(addr) == 4 else socket.AF_INET6, addr)


class PacketDecoder:
    """Decodes captured packets to ``TcpSegment``s and counts the packets it skips."""

    __slots__ = ("non_ip", "non_tcp", "fragments", "truncated", "malformed", "unsupported_linktype",
                 "snaplen_cut", "first_fragments", "unsupported_linktypes")

    def __init__(self):
        self.non_ip = 0  #: link-layer payload not IPv4/IPv6 (ARP, LLDP...)
        self.non_tcp = 0  #: IP but not TCP (UDP, ICMP, ESP...)
        self.fragments = 0  #: non-first IP fragments (skipped)
        self.first_fragments = 0  #: first IP fragments (decoded with the payload they carry)
        self.truncated = 0  #: headers cut by the snaplen (skipped)
        self.malformed = 0  #: impossible header values (skipped)
        self.unsupported_linktype = 0  #: packets of link types not decoded
        self.unsupported_linktypes: set[int] = set()
        self.snaplen_cut = 0  #: TCP segments whose payload the snaplen cut (decoded, ``missing`` > 0)

    def counts(self) -> dict[str, int]:
        """The skip counters by name."""
        return {name: getattr(self, name) for name in self.__slots__ if name != "unsupported_linktypes"}

    def decode(self, linktype: int, data: bytes, orig_len: int) -> TcpSegment | None:
        """The TCP segment in a captured packet, or None (counted) if it holds none."""
        n = len(data)
        # -- link layer: find the network header offset and its ethertype-like protocol
        if linktype == 1:
            if n < 14:
                self.truncated += 1
                return None
            etype = (data[12] << 8) | data[13]
            off = 14
        elif linktype == 113:  # Linux SLL
            if n < 16:
                self.truncated += 1
                return None
            etype = (data[14] << 8) | data[15]
            off = 16
        elif linktype == 276:  # Linux SLL2
            if n < 20:
                self.truncated += 1
                return None
            etype = (data[0] << 8) | data[1]
            off = 20
        elif linktype in _RAW_LINKTYPES:
            if not n:
                self.truncated += 1
                return None
            version = data[0] >> 4
            etype = _ETH_IPV4 if version == 4 else _ETH_IPV6 if version == 6 else 0
            off = 0
        elif linktype == 228:
            etype, off = _ETH_IPV4, 0
        elif linktype == 229:
            etype, off = _ETH_IPV6, 0
        elif linktype == 0 or linktype == 108:  # BSD loopback: address family in either byte order
            if n < 4:
                self.truncated += 1
                return None
            family = int.from_bytes(data[:4], "little")
            if family > 0xFFFF:
                family = int.from_bytes(data[:4], "big")
            etype = _ETH_IPV4 if family == 2 else _ETH_IPV6 if family in _AF_INET6 else 0
            off = 4
        else:
            self.unsupported_linktype += 1
            self.unsupported_linktypes.add(linktype)
            return None
        if etype != _ETH_IPV4 and etype != _ETH_IPV6:
            etype, off = self._unwrap(data, etype, off, n)
            if etype < 0:
                return None

        # -- fast path: IPv4 without options nor fragmentation, whole TCP segment captured
        if etype == _ETH_IPV4 and n - off >= 40 and data[off] == 0x45:
            (_v, _tos, total, _id, frag, _ttl, proto, _sum, src, dst, sport, dport, seq, ack, doff,
             flags) = _IP4_TCP(data, off)
            end = off + total
            start = off + 20 + ((doff >> 4) << 2)
            if proto == 6 and not frag & 0x3FFF and doff >= 0x50 and start <= end <= n:
                return _tnew(TcpSegment, (src, dst, sport, dport, seq, ack, flags | ((doff & 1) << 8),
                                          data[start:end], 0))
            # anything else (TSO, cut by the snaplen, malformed...): the general path decides

        # -- network layer
        if etype == _ETH_IPV4:
            if n - off < 20:
                self.truncated += 1
                return None
            vihl, _tos, total, _id, frag, _ttl, proto, _sum, src, dst = _IP4(data, off)
            ihl = (vihl & 0x0F) << 2
            if vihl >> 4 != 4 or ihl < 20:
                self.malformed += 1
                return None
            if frag & 0x3FFF:
                if frag & 0x1FFF:
                    self.fragments += 1
                    return None
                self.first_fragments += 1
            if proto != 6:
                self.non_tcp += 1
                return None
            if total:
                if total < ihl:
                    self.malformed += 1
                    return None
                end = off + total
            else:  # TSO: the length is not filled in; the packet's wire length stands in for it
                end = orig_len if orig_len > n else n
            off += ihl
        else:
            if n - off < 40:
                self.truncated += 1
                return None
            vtcfl, plen, proto, _hlim, src, dst = _IP6(data, off)
            if vtcfl >> 28 != 6:
                self.malformed += 1
                return None
            off += 40
            end = off + plen if plen else orig_len if orig_len > n else n  # 0: jumbogram or TSO
            if proto != 6:
                proto, off = self._ip6_ext(data, proto, off, n)
                if proto != 6:
                    if proto >= 0:
                        self.non_tcp += 1
                    return None

        # -- TCP
        if off + 20 > n or off + 20 > end:
            if off + 20 > end:  # the IP length cannot hold a TCP header
                self.malformed += 1
            else:
                self.truncated += 1
            return None
        sport, dport, seq, ack, doff, flags = _TCP(data, off)
        hl = (doff >> 4) << 2
        if hl < 20 or off + hl > end:
            self.malformed += 1
            return None
        start = off + hl
        if start > n:
            self.truncated += 1
            return None
        if end > n:
            missing = end - n
            end = n
            self.snaplen_cut += 1
        else:
            missing = 0
        return _tnew(TcpSegment, (src, dst, sport, dport, seq, ack, flags | ((doff & 1) << 8),
                                  data[start:end], missing))

    def _unwrap(self, data: bytes, etype: int, off: int, n: int) -> tuple[int, int]:
        """Peel VLAN tags, MPLS labels and PPPoE off; (IPv4/IPv6 ethertype, offset) or (-1, _)."""
        while True:
            if etype == _ETH_IPV4 or etype == _ETH_IPV6:
                return etype, off
            if etype in _ETH_VLAN:
                if n - off < 4:
                    self.truncated += 1
                    return -1, off
                etype = (data[off + 2] << 8) | data[off + 3]
                off += 4
            elif etype in _ETH_MPLS:
                while True:
                    if n - off < 4:
                        self.truncated += 1
                        return -1, off
                    bottom = data[off + 2] & 1
                    off += 4
                    if bottom:
                        break
                if off >= n:
                    self.truncated += 1
                    return -1, off
                version = data[off] >> 4
                etype = _ETH_IPV4 if version == 4 else _ETH_IPV6 if version == 6 else 0
                if not etype:
                    self.non_ip += 1
                    return -1, off
            elif etype == _ETH_PPPOE:
                if n - off < 8:
                    self.truncated += 1
                    return -1, off
                ppp = (data[off + 6] << 8) | data[off + 7]
                off += 8
                etype = _ETH_IPV4 if ppp == 0x0021 else _ETH_IPV6 if ppp == 0x0057 else 0
                if not etype:
                    self.non_ip += 1
                    return -1, off
            else:
                self.non_ip += 1
                return -1, off

    def _ip6_ext(self, data: bytes, proto: int, off: int, n: int) -> tuple[int, int]:
        """Skip IPv6 extension headers; (upper protocol, offset), or (-1, _) if skipped and counted."""
        while True:
            if proto in _IP6_EXT:
                if n - off < 8:
                    self.truncated += 1
                    return -1, off
                proto, off = data[off], off + ((data[off + 1] + 1) << 3)
            elif proto == 44:  # fragment
                if n - off < 8:
                    self.truncated += 1
                    return -1, off
                if _U16(data, off + 2)[0] & 0xFFF8:
                    self.fragments += 1
                    return -1, off
                if data[off + 3] & 1:
                    self.first_fragments += 1
                proto, off = data[off], off + 8
            elif proto == 51:  # authentication header: length in 4-octet units - 2
                if n - off < 8:
                    self.truncated += 1
                    return -1, off
                proto, off = data[off], off + ((data[off + 1] + 2) << 2)
            else:
                return proto, off
