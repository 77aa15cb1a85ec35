"""Link / IP / TCP decoding to TcpSegment, and the skip counters."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from kwire.analyze import PacketDecoder, TcpSegment, format_addr
from kwire.analyze.packets import ACK, FIN, PSH, SYN
from kwire.analyze.pcapwrite import ethernet, ipv4, ipv6, link_frame, tcp, tcp_packet

V4 = ("192.0.2.1", "198.51.100.7")
V6 = ("2001:db8::1", "2001:db8:ffff::42")
PAYLOAD = b"kafka frame bytes" * 5


def addr(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


def expect(src, dst, payload=PAYLOAD, flags=ACK | PSH, missing=0, seq=123456, ack=654321):
    return TcpSegment(addr(src), addr(dst), 40000, 9092, seq, ack, flags, payload, missing)


def decode(linktype, data, orig_len=None):
    dec = PacketDecoder()
    seg = dec.decode(linktype, data, len(data) if orig_len is None else orig_len)
    return seg, dec


LINKTYPES_V4 = [1, 0, 108, 113, 276, 101, 12, 14, 228]
LINKTYPES_V6 = [1, 0, 108, 113, 276, 101, 12, 14, 229]


@pytest.mark.parametrize("linktype", LINKTYPES_V4)
def test_ipv4_over_each_link_type(linktype):
    pkt = tcp_packet(linktype, *V4, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    seg, dec = decode(linktype, pkt)
    assert seg == expect(*V4)
    assert dec.counts() == dict.fromkeys(dec.counts(), 0)


@pytest.mark.parametrize("linktype", LINKTYPES_V6)
def test_ipv6_over_each_link_type(linktype):
    pkt = tcp_packet(linktype, *V6, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    seg, _ = decode(linktype, pkt)
    assert seg == expect(*V6)
    assert format_addr(seg.src) == V6[0] and format_addr(seg.dst) == V6[1]


@pytest.mark.parametrize("linktype", [0, 108])
@pytest.mark.parametrize("byteorder", ["little", "big"])
@pytest.mark.parametrize("family6", [10, 24, 28, 30])
def test_bsd_loopback_families_in_both_byte_orders(linktype, byteorder, family6):
    ip4 = ipv4(*V4, tcp(*V4, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD))
    ip6 = ipv6(*V6, tcp(*V6, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD))
    assert decode(linktype, (2).to_bytes(4, byteorder) + ip4)[0] == expect(*V4)
    assert decode(linktype, family6.to_bytes(4, byteorder) + ip6)[0] == expect(*V6)
    seg, dec = decode(linktype, (7).to_bytes(4, byteorder) + ip4)
    assert seg is None and dec.non_ip == 1


def test_raw_ip_with_unknown_version_is_not_ip():
    seg, dec = decode(101, b"\x50" + bytes(40))
    assert seg is None and dec.non_ip == 1


@pytest.mark.parametrize("vlans,qinq", [((10,), False), ((10, 20), True), ((10, 20), False), ((1, 2, 3), True)])
@pytest.mark.parametrize("ip", [V4, V6])
def test_vlan_tags(vlans, qinq, ip):
    pkt = tcp_packet(1, *ip, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD, vlans=vlans, qinq=qinq)
    assert pkt[12:14] == (b"\x88\xa8" if qinq and len(vlans) > 1 else b"\x81\x00")
    assert decode(1, pkt)[0] == expect(*ip)


def test_mpls_and_pppoe():
    ip = ipv4(*V4, tcp(*V4, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD))
    labels = struct.pack("!I", 100 << 12 | 64) + struct.pack("!I", 200 << 12 | 1 << 8 | 64)
    assert decode(1, ethernet(labels + ip, 0x8847))[0] == expect(*V4)
    pppoe = struct.pack("!BBHHH", 0x11, 0, 1, len(ip) + 2, 0x0021)
    assert decode(1, ethernet(pppoe + ip, 0x8864))[0] == expect(*V4)
    pppoe_lcp = struct.pack("!BBHHH", 0x11, 0, 1, 6, 0xC021) + bytes(4)
    seg, dec = decode(1, ethernet(pppoe_lcp, 0x8864))
    assert seg is None and dec.non_ip == 1


def test_ipv4_options():
    segment = tcp(*V4, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    pkt = link_frame(1, ipv4(*V4, segment, options=b"\x94\x04\x00\x00" + b"\x01" * 8))
    assert pkt[14] == 0x48
    assert decode(1, pkt)[0] == expect(*V4)


def test_tcp_options_and_flags():
    segment = tcp(*V4, 40000, 9092, 1, 0, SYN | 0x100, b"", options=b"\x02\x04\x05\xb4\x04\x02\x08\x0a" + bytes(8))
    seg, _ = decode(228, ipv4(*V4, segment))
    assert seg.flags == SYN | 0x100 and seg.payload == b"" and seg.seq == 1


def test_ethernet_padding_and_trailer_ignored():
    pkt = tcp_packet(1, *V4, 40000, 9092, 123456, 654321, ACK, b"")
    assert len(pkt) == 54
    seg, _ = decode(1, pkt + bytes(6) + b"FCS!")
    assert seg.payload == b"" and seg.missing == 0
    seg, _ = decode(1, tcp_packet(1, *V4, 40000, 9092, 123456, 654321, ACK | PSH, b"ab") + b"\0\0\0\0")
    assert seg.payload == b"ab"


@pytest.mark.parametrize("ip", [V4, V6])
def test_snaplen_cut_payload_is_reported_missing(ip):
    pkt = tcp_packet(1, *ip, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    cut = pkt[:len(pkt) - 30]
    seg, dec = decode(1, cut, len(pkt))
    assert seg == expect(*ip, payload=PAYLOAD[:-30], missing=30)
    assert dec.snaplen_cut == 1


@pytest.mark.parametrize("ip", [V4, V6])
@pytest.mark.parametrize("keep", [10, 14, 20, 33, 40, 53])
def test_headers_cut_by_snaplen_are_skipped(ip, keep):
    pkt = tcp_packet(1, *ip, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    header_end = 14 + (20 if ip is V4 else 40) + 20
    assert keep < header_end  # every cut point lies inside the headers
    seg, dec = decode(1, pkt[:keep], len(pkt))
    assert seg is None and dec.truncated == 1


def test_tso_zero_ip_length():
    segment = tcp(*V4, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    pkt = link_frame(1, ipv4(*V4, segment, total_length=0))
    assert decode(1, pkt)[0] == expect(*V4)
    seg, _ = decode(1, pkt[:-10], len(pkt))  # and cut by the snaplen: orig_len tells what is missing
    assert seg.payload == PAYLOAD[:-10] and seg.missing == 10


def test_ipv4_fragments():
    segment = tcp(*V4, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    first = link_frame(1, ipv4(*V4, segment[:48], more_fragments=True, ident=7))
    rest = link_frame(1, ipv4(*V4, segment[48:], frag_offset=48, ident=7))
    dec = PacketDecoder()
    seg = dec.decode(1, first, len(first))
    assert seg.payload == PAYLOAD[:28] and dec.first_fragments == 1
    assert dec.decode(1, rest, len(rest)) is None and dec.fragments == 1
    far = link_frame(1, ipv4(*V4, segment[48:], frag_offset=32768, ident=7))  # only offset bit 12 set
    assert dec.decode(1, far, len(far)) is None and dec.fragments == 2


def test_ipv6_extension_headers():
    segment = tcp(*V6, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    exts = [(0, b"\x01\x04\0\0\0\0"), (43, b"\x00\x00" + bytes(4)), (60, b"\x01\x02\0\0"), (51, bytes(14))]
    pkt = link_frame(1, ipv6(*V6, segment, extensions=exts))
    assert decode(1, pkt)[0] == expect(*V6)


def test_ipv6_fragments_and_esp():
    segment = tcp(*V6, 40000, 9092, 123456, 654321, ACK | PSH, PAYLOAD)
    first = link_frame(1, ipv6(*V6, segment[:48], extensions=[(44, struct.pack("!BHI", 0, 1, 9))]))
    rest = link_frame(1, ipv6(*V6, segment[48:], extensions=[(44, struct.pack("!BHI", 0, 48, 9))]))
    dec = PacketDecoder()
    assert dec.decode(1, first, len(first)).payload == PAYLOAD[:28]
    assert dec.first_fragments == 1
    assert dec.decode(1, rest, len(rest)) is None and dec.fragments == 1
    esp = link_frame(1, ipv6(*V6, bytes(40), next_header=50))
    assert dec.decode(1, esp, len(esp)) is None and dec.non_tcp == 1


def test_non_tcp_and_non_ip_are_counted():
    dec = PacketDecoder()
    udp = link_frame(1, ipv4(*V4, bytes(8) + b"dns?", proto=17))
    icmp6 = link_frame(1, ipv6(*V6, bytes(8), next_header=58))
    arp = ethernet(bytes(28), 0x0806)
    llc = ethernet(bytes(40), 0x0026)  # an 802.3 length, not an ethertype
    for pkt in (udp, icmp6, arp, llc):
        assert dec.decode(1, pkt, len(pkt)) is None
    assert (dec.non_tcp, dec.non_ip) == (2, 2)
    assert dec.decode(147, b"whatever", 8) is None
    assert dec.unsupported_linktype == 1 and dec.unsupported_linktypes == {147}


def test_malformed_headers_are_counted():
    dec = PacketDecoder()
    good = tcp_packet(1, *V4, 40000, 9092, 1, 2, ACK, b"xy")
    bad_ihl = bytearray(good)
    bad_ihl[14] = 0x43
    bad_version = bytearray(good)
    bad_version[14] = 0x55
    bad_doff = bytearray(good)
    bad_doff[14 + 20 + 12] = 0x40
    short_total = bytearray(good)
    struct.pack_into("!H", short_total, 16, 30)  # IP length cannot hold the TCP header
    for pkt in (bad_ihl, bad_version, bad_doff, short_total):
        assert dec.decode(1, bytes(pkt), len(pkt)) is None
    assert dec.malformed == 4


def test_short_link_headers_are_truncated():
    dec = PacketDecoder()
    for lt, data in [(1, bytes(10)), (113, bytes(15)), (276, bytes(19)), (0, b"\2\0"), (101, b"")]:
        assert dec.decode(lt, data, 100) is None
    assert dec.truncated == 5


def test_fin_syn_flags_survive():
    for flags in (SYN, SYN | ACK, FIN | ACK, ACK | PSH):
        seg, _ = decode(228, ipv4(*V4, tcp(*V4, 1, 2, 3, 4, flags)))
        assert seg.flags == flags and (seg.sport, seg.dport, seg.seq, seg.ack) == (1, 2, 3, 4)
