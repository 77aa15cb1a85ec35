"""Capture file to TCP streams, end to end, on synthetic captures written by the test."""

from __future__ import annotations

import io

import pytest

from kwire.analyze import (
    TO_CLIENT,
    TO_SERVER,
    NotACaptureError,
    TcpCapture,
    iter_tcp_events,
    iter_tcp_streams,
)
from kwire.analyze.packets import ACK, FIN, PSH, RST
from kwire.analyze.pcapwrite import PcapngWriter, PcapWriter, TcpConversation

from .helpers import TS0, stream_view

REQUEST = b"\x00\x00\x00\x10" + b"R" * 16
RESPONSE = b"\x00\x00\x0b\xb4" + bytes(range(256)) * 11 + b"\x01" * 180  # 3000 bytes: three segments


def conversation(writer, client="10.1.1.1", server="10.2.2.2", *, linktype=1, cport=51000, sport=9092,
                 handshake=True, close=True, **link_options):
    conv = TcpConversation(writer, client, cport, server, sport, linktype=linktype, **link_options)
    t = TS0
    if handshake:
        conv.handshake(t)
    conv.send(TO_SERVER, REQUEST, t + 10_000)
    conv.send(TO_CLIENT, RESPONSE, t + 20_000)
    if close:
        conv.close(t + 30_000)
    return conv


def streams_of(data: bytes, **options):
    caps: list[TcpCapture] = []
    streams = list(iter_tcp_streams(io.BytesIO(data), capture=caps, **options))
    return streams, caps[0]


def pcap_of(build, linktype=1, **writer_options) -> bytes:
    f = io.BytesIO()
    w = PcapWriter(f, linktype, **writer_options)
    build(w)
    return f.getvalue()


LINKS = [(1, "v4"), (1, "v6"), (0, "v4"), (0, "v6"), (108, "v4"), (113, "v4"), (113, "v6"), (276, "v4"),
         (276, "v6"), (101, "v4"), (101, "v6"), (12, "v4"), (14, "v6"), (228, "v4"), (229, "v6")]


@pytest.mark.parametrize("linktype,family", LINKS)
def test_each_link_type_end_to_end(linktype, family):
    client, server = ("10.1.1.1", "10.2.2.2") if family == "v4" else ("fd00::1", "fd00::2")
    data = pcap_of(lambda w: conversation(w, client, server, linktype=linktype), linktype)
    (s,), cap = streams_of(data)
    assert s.data(TO_SERVER) == REQUEST and s.data(TO_CLIENT) == RESPONSE
    assert s.end(TO_SERVER) == s.end(TO_CLIENT) == "fin"
    assert s.conn.roles == "syn" and s.conn.server_port == 9092
    assert s.conn.client == ("10.1.1.1:51000" if family == "v4" else "[fd00::1]:51000")
    assert cap.warnings == []
    stats = cap.stats()
    assert stats["packets"] == stats["tcp_segments"] == 3 + 2 + 4 + 3 and stats["connections"] == 1


@pytest.mark.parametrize("vlans,qinq", [((5,), False), ((100, 200), True)])
def test_vlan_end_to_end(vlans, qinq):
    data = pcap_of(lambda w: conversation(w, vlans=vlans, qinq=qinq))
    (s,), _ = streams_of(data)
    assert s.data(TO_CLIENT) == RESPONSE


@pytest.mark.parametrize("byteorder", ["little", "big"])
@pytest.mark.parametrize("nanosecond", [False, True])
def test_pcap_variants_give_the_same_streams(byteorder, nanosecond):
    data = pcap_of(conversation, byteorder=byteorder, nanosecond=nanosecond)
    (s,), _ = streams_of(data)
    assert s.data(TO_SERVER) == REQUEST and s.data(TO_CLIENT) == RESPONSE
    first = s.events[TO_SERVER][0]
    assert first.ts_ns == (TS0 + 10_000 if nanosecond else (TS0 + 10_000) // 1000 * 1000)


@pytest.mark.parametrize("byteorder", ["little", "big"])
def test_pcapng_two_interfaces_two_connections(byteorder):
    f = io.BytesIO()
    w = PcapngWriter(f, byteorder=byteorder)
    eth = w.add_interface(1, tsresol=9)
    sll = w.add_interface(113)
    conversation(lambda ts, pkt: w.write(ts, pkt, eth), cport=1111)
    conversation(lambda ts, pkt: w.write(ts, pkt, sll), "fd00::9", "fd00::8", linktype=113, cport=2222)
    streams, cap = streams_of(f.getvalue())
    assert [s.conn.client_port for s in streams] == [1111, 2222]
    assert all(s.data(TO_CLIENT) == RESPONSE for s in streams)
    assert cap.reader.linktypes == {1, 113}


def test_disordered_capture_out_of_order_duplicate_overlap_and_missing():
    def build(w):
        conv = TcpConversation(w, "10.1.1.1", 51000, "10.2.2.2", 9092, mss=1000)
        conv.handshake(TS0)
        conv.send(TO_SERVER, REQUEST, TS0 + 1)
        segs = conv.segments(TO_CLIENT, RESPONSE)  # three: [0,1000) [1000,2000) [2000,3000)
        (s0, p0), (s1, p1), (s2, p2) = segs
        conv.emit(TS0 + 2, TO_CLIENT, ACK, p1, seq=s1)  # out of order
        conv.emit(TS0 + 3, TO_CLIENT, ACK, p0, seq=s0)
        conv.emit(TS0 + 4, TO_CLIENT, ACK, p0, seq=s0)  # duplicate
        conv.emit(TS0 + 5, TO_CLIENT, ACK, p1[500:] + p2[:300], seq=s1 + 500)  # overlap, 300 new bytes
        conv.emit(TS0 + 6, TO_CLIENT, ACK | PSH, p2[800:], seq=s2 + 800)  # 500 bytes never captured
        conv.next_seq[TO_CLIENT] = s2 + 1000
        conv.close(TS0 + 7)

    (s,), _ = streams_of(pcap_of(build))
    assert stream_view(s.events[TO_CLIENT]) == [RESPONSE[:2300], ("gap", 500), RESPONSE[2800:], ("end", "fin")]
    assert s.data(TO_CLIENT, gap_fill=b"?") == RESPONSE[:2300] + b"?" * 500 + RESPONSE[2800:]
    with pytest.raises(ValueError, match="gap of 500 bytes"):
        s.data(TO_CLIENT)
    (gap,) = s.gaps(TO_CLIENT)
    assert gap.frame == 10  # the packet where the stream resumed
    d = s.conn.directions[TO_CLIENT]
    assert d.duplicate_bytes == 1000 + 500 and d.out_of_order == 2  # p1, and what followed the hole


def test_snaplen_cut_capture_has_gaps_where_bytes_were_cut():
    data = pcap_of(lambda w: conversation(w, handshake=False, close=False), snaplen=54 + 100)
    streams, cap = streams_of(data, server_ports={9092})
    (s,) = streams
    assert s.conn.roles == "port"
    assert stream_view(s.events[TO_CLIENT]) == [RESPONSE[:100], ("gap", 1360), RESPONSE[1460:1560], ("gap", 1360),
                                               RESPONSE[2920:], ("end", "eof")]
    assert s.data(TO_SERVER) == REQUEST  # short enough to be whole
    assert cap.decoder.snaplen_cut == 2


def test_mid_conversation_capture_without_handshake():
    def build(w):
        conv = conversation(w, handshake=False, close=False, cport=40000, sport=36333)
        conv.emit(TS0 + 50_000, TO_CLIENT, ACK | RST)

    streams, _ = streams_of(pcap_of(build), server_ports={36333})
    (s,) = streams
    assert s.conn.roles == "port" and s.conn.server_port == 36333
    assert s.data(TO_SERVER) == REQUEST and s.data(TO_CLIENT) == RESPONSE
    assert s.end(TO_SERVER) == "rst"


def test_truncated_capture_file_keeps_the_streams_read_so_far():
    data = pcap_of(conversation)
    cut = data[:len(data) - 100]  # inside the last packets (the close)
    streams, cap = streams_of(cut)
    (s,) = streams
    assert s.data(TO_SERVER) == REQUEST and s.data(TO_CLIENT) == RESPONSE
    assert cap.reader.truncated and "cut short" in cap.warnings[0]
    assert s.end(TO_CLIENT) in ("eof", "fin")


def test_garbage_file_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("this is not a capture\n" * 10)
    with pytest.raises(NotACaptureError, match="not a pcap or pcapng"):
        list(iter_tcp_streams(path))


def test_corrupt_middle_stops_reading_but_ends_connections():
    data = bytearray(pcap_of(conversation))
    # Corrupt the record header of the 6th packet (after the request and its ack).
    offset = 24
    for _ in range(5):
        offset += 16 + int.from_bytes(data[offset + 8:offset + 12], "little")
    data[offset + 8:offset + 12] = (0x7FFFFFFF).to_bytes(4, "little")
    streams, cap = streams_of(bytes(data))
    (s,) = streams
    assert s.data(TO_SERVER) == REQUEST
    assert stream_view(s.events[TO_CLIENT]) == [("end", "eof")]
    assert cap.reader.truncated and "corrupt" in cap.warnings[0]


def test_iter_tcp_events_streams_in_capture_order(tmp_path):
    path = tmp_path / "two.pcap"
    with open(path, "wb") as f:
        w = PcapWriter(f)
        a = TcpConversation(w, "10.0.0.1", 1000, "10.0.0.9", 9092)
        b = TcpConversation(w, "10.0.0.2", 2000, "10.0.0.9", 9092)
        a.handshake(TS0)
        b.handshake(TS0)
        a.send(TO_SERVER, b"a1", TS0)
        b.send(TO_SERVER, b"b1", TS0)
        a.send(TO_SERVER, b"a2", TS0)
        b.emit(TS0, TO_SERVER, FIN | ACK)
    events = [(c.id, d, type(e).__name__, getattr(e, "data", None)) for c, d, e in iter_tcp_events(path)]
    assert events == [(1, 0, "Chunk", b"a1"), (2, 0, "Chunk", b"b1"), (1, 0, "Chunk", b"a2"), (2, 0, "End", None),
                      (1, 0, "End", None), (1, 1, "End", None), (2, 1, "End", None)]
    frames = [e.frame for _, _, e in iter_tcp_events(path)]
    assert frames[:4] == [7, 9, 11, 13]


def test_streams_yielded_as_connections_close(tmp_path):
    f = io.BytesIO()
    w = PcapWriter(f)
    a = TcpConversation(w, "10.0.0.1", 1000, "10.0.0.9", 9092)
    b = TcpConversation(w, "10.0.0.2", 2000, "10.0.0.9", 9092)
    a.handshake(TS0)
    b.handshake(TS0)
    b.send(TO_SERVER, b"b", TS0)
    b.close(TS0)
    a.send(TO_SERVER, b"a", TS0)
    f.seek(0)
    it = iter_tcp_streams(f)
    first = next(it)
    assert first.conn.id == 2 and first.end(TO_SERVER) == "fin"
    rest = list(it)
    assert [s.conn.id for s in rest] == [1] and rest[0].end(TO_SERVER) == "eof"


def test_memory_stays_bounded_on_a_big_capture(tmp_path):
    import tracemalloc

    path = tmp_path / "big.pcap"
    block = bytes(range(256)) * 57  # 14592 bytes: 10 segments
    with open(path, "wb") as f:
        conv = TcpConversation(PcapWriter(f), "10.0.0.1", 50000, "10.0.0.2", 9092)
        conv.handshake(TS0)
        for i in range(2000):
            conv.send(TO_CLIENT, block, TS0 + i * 1000, ack_it=i % 4 == 0)
        conv.close(TS0 + 10**9)
    size = path.stat().st_size
    assert size > 25_000_000
    tracemalloc.start()
    try:
        delivered = 0
        for _conn, _d, e in iter_tcp_events(path):
            delivered += len(getattr(e, "data", b""))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert delivered == 2000 * len(block)
    assert peak < 5_000_000, peak  # a read chunk or two, not the file
