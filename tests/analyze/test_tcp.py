"""TCP reassembly: order, duplicates, overlaps, gaps, roles, closing, bounds."""

from __future__ import annotations

import ipaddress

import pytest

from kwire.analyze import TO_CLIENT, TO_SERVER, Chunk, End, Gap, TcpReassembler, TcpSegment
from kwire.analyze.packets import ACK, FIN, PSH, RST, SYN

from .helpers import stream_view, summary

CLIENT = ipaddress.ip_address("10.0.0.1").packed
SERVER = ipaddress.ip_address("10.0.0.2").packed
CPORT, SPORT = 50000, 9092
CISN, SISN = 1000, 70000


class Wire:
    """Feeds hand-made segments of one or more connections to a reassembler."""

    def __init__(self, **options):
        self.r = TcpReassembler(**options)
        self.frame = 0
        self.all: list[tuple] = []

    def send(self, direction, seq, data=b"", flags=ACK | PSH, ack=0, missing=0, *, cport=CPORT, ts=None):
        self.frame += 1
        if direction == TO_SERVER:
            seg = TcpSegment(CLIENT, SERVER, cport, SPORT, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, flags, data, missing)
        else:
            seg = TcpSegment(SERVER, CLIENT, SPORT, cport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, flags, data, missing)
        self.r.feed(self.frame, self.frame * 1000 if ts is None else ts, seg)
        got = list(self.r.events)
        self.r.events.clear()
        self.all.extend(got)
        return got

    def handshake(self, cport=CPORT):
        self.send(TO_SERVER, CISN, flags=SYN, cport=cport)
        self.send(TO_CLIENT, SISN, flags=SYN | ACK, ack=CISN + 1, cport=cport)
        self.send(TO_SERVER, CISN + 1, flags=ACK, ack=SISN + 1, cport=cport)

    def finish(self):
        self.r.finish()
        self.all.extend(self.r.events)
        self.r.events.clear()

    def events(self, direction, conn_id=1):
        return [e for c, d, e in self.all if c.id == conn_id and d == direction]

    def conns(self):
        seen = {}
        for c, _, _ in self.all:
            seen.setdefault(c.id, c)
        return list(seen.values())


def test_in_order_with_handshake_and_fin():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"hello ")
    w.send(TO_SERVER, CISN + 7, b"world")
    w.send(TO_CLIENT, SISN + 1, b"response")
    w.send(TO_SERVER, CISN + 12, flags=FIN | ACK)
    w.send(TO_CLIENT, SISN + 9, flags=FIN | ACK)
    assert summary(w.events(TO_SERVER)) == [("data", 4, b"hello "), ("data", 5, b"world"), ("end", "fin")]
    assert summary(w.events(TO_CLIENT)) == [("data", 6, b"response"), ("end", "fin")]
    (conn,) = w.conns()
    assert conn.roles == "syn" and conn.client == "10.0.0.1:50000" and conn.server == "10.0.0.2:9092"
    assert conn.closed and not w.r.open
    assert conn.directions[TO_SERVER].bytes == 11 and conn.directions[TO_SERVER].isn == CISN
    end = w.events(TO_CLIENT)[-1]
    assert type(end) is End and end.frame == 8


def test_out_of_order_segments_are_reordered():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 7, b"CCC")
    w.send(TO_SERVER, CISN + 4, b"BBB")
    assert w.events(TO_SERVER) == []
    w.send(TO_SERVER, CISN + 1, b"AAA")
    assert summary(w.events(TO_SERVER)) == [("data", 6, b"AAA"), ("data", 5, b"BBB"), ("data", 4, b"CCC")]
    assert w.conns()[0].directions[TO_SERVER].out_of_order == 2


def test_retransmissions_and_duplicates_are_dropped():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"0123456789")
    w.send(TO_SERVER, CISN + 1, b"0123456789")  # retransmission
    w.send(TO_SERVER, CISN + 4, b"3456")  # inside what was delivered
    w.send(TO_SERVER, CISN + 10, b"9")  # keepalive-like: last byte again
    w.send(TO_SERVER, CISN + 11, b"abc")
    w.send(TO_SERVER, CISN + 11, b"abc")
    assert stream_view(w.events(TO_SERVER)) == [b"0123456789abc"]
    assert w.conns()[0].directions[TO_SERVER].duplicate_bytes == 10 + 4 + 1 + 3


def test_overlap_keeps_first_bytes_seen():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"0123456789")
    w.send(TO_SERVER, CISN + 6, b"XXXXXabcde")  # 5 old bytes (different content!) and 5 new
    assert summary(w.events(TO_SERVER)) == [("data", 4, b"0123456789"), ("data", 5, b"abcde")]
    assert w.conns()[0].directions[TO_SERVER].duplicate_bytes == 5


def test_overlapping_buffered_segments():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 11, b"ABCDEFGHIJ")  # [10, 20)
    w.send(TO_SERVER, CISN + 16, b"fghijKLMNO")  # [15, 25)
    w.send(TO_SERVER, CISN + 13, b"cd")  # [12, 14) inside the first
    w.send(TO_SERVER, CISN + 1, b"0123456789")  # [0, 10)
    assert stream_view(w.events(TO_SERVER)) == [b"0123456789ABCDEFGHIJKLMNO"]


def test_missing_segment_becomes_a_gap_at_end():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"first")
    w.send(TO_SERVER, CISN + 1 + 5 + 100, b"after the hole")
    assert summary(w.events(TO_SERVER)) == [("data", 4, b"first")]
    w.finish()
    assert summary(w.events(TO_SERVER)) == [("data", 4, b"first"), ("gap", 5, 100), ("data", 5, b"after the hole"),
                                            ("end", "eof")]
    d = w.conns()[0].directions[TO_SERVER]
    assert (d.gaps, d.gap_bytes) == (1, 100)


def test_acknowledged_hole_becomes_a_gap_at_once():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"first")
    w.send(TO_SERVER, CISN + 206, b"second")  # 200 bytes never captured
    w.send(TO_SERVER, CISN + 212, b"third")
    assert stream_view(w.events(TO_SERVER)) == [b"first"]
    w.send(TO_CLIENT, SISN + 1, flags=ACK, ack=CISN + 217)  # the server got them all
    assert stream_view(w.events(TO_SERVER)) == [b"first", ("gap", 200), b"secondthird"]


def test_acks_can_be_distrusted():
    w = Wire(trust_acks=False)
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"first")
    w.send(TO_SERVER, CISN + 206, b"second")
    w.send(TO_CLIENT, SISN + 1, flags=ACK, ack=CISN + 212)  # recorded before the data it acknowledges
    w.send(TO_SERVER, CISN + 6, b"m" * 200)
    assert stream_view(w.events(TO_SERVER)) == [b"first" + b"m" * 200 + b"second"]


def test_partial_ack_of_a_hole():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"a")
    w.send(TO_SERVER, CISN + 102, b"z")  # hole [1, 101)
    w.send(TO_CLIENT, SISN + 1, flags=ACK, ack=CISN + 51)  # acks up to 50: [1, 50) lost in the capture
    assert stream_view(w.events(TO_SERVER)) == [b"a", ("gap", 49)]
    w.send(TO_SERVER, CISN + 51, b"R" * 51)  # the rest is retransmitted
    assert stream_view(w.events(TO_SERVER)) == [b"a", ("gap", 49), b"R" * 51 + b"z"]


def test_ack_not_past_the_hole_changes_nothing():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"a")
    w.send(TO_SERVER, CISN + 12, b"z")
    w.send(TO_CLIENT, SISN + 1, flags=ACK, ack=CISN + 2)
    w.send(TO_CLIENT, SISN + 1, flags=ACK, ack=CISN - 5)  # old
    assert stream_view(w.events(TO_SERVER)) == [b"a"]
    w.send(TO_SERVER, CISN + 2, b"0123456789")
    assert stream_view(w.events(TO_SERVER)) == [b"a0123456789z"]


def test_buffer_bound_forces_a_gap():
    w = Wire(max_buffered=1200)  # 3 segments of 300 bytes (+64 bytes of bookkeeping each) fit
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"x")
    seq = CISN + 1 + 1 + 50  # a 50-byte hole, never filled, never acked
    for _ in range(3):
        w.send(TO_SERVER, seq, b"y" * 300)
        seq += 300
    assert stream_view(w.events(TO_SERVER)) == [b"x"]
    d = w.conns()[0].directions[TO_SERVER]
    assert d.pending_bytes == 3 * (300 + 64)
    w.send(TO_SERVER, seq, b"y" * 300)  # over the bound: give up on the hole
    assert stream_view(w.events(TO_SERVER)) == [b"x", ("gap", 50), b"y" * 1200]
    assert d.pending_bytes == 0
    w.send(TO_SERVER, seq + 300, b"y" * 300)
    w.finish()
    assert stream_view(w.events(TO_SERVER)) == [b"x", ("gap", 50), b"y" * 1500, ("end", "eof")]


def test_many_small_out_of_order_segments_stay_bounded():
    w = Wire(max_buffered=10_000)
    w.handshake()
    base = CISN + 1 + 1  # byte 0 never arrives
    for i in range(2000, 0, -1):  # arrive backwards
        w.send(TO_SERVER, base + i * 10, bytes([i % 256]) * 10)
        assert w.conns() == [] or w.conns()[0].directions[TO_SERVER].pending_bytes <= 10_000
    w.finish()
    total = sum(len(e.data) for e in w.events(TO_SERVER) if type(e) is Chunk)
    gaps = sum(e.size for e in w.events(TO_SERVER) if type(e) is Gap)
    assert total + gaps == 2001 * 10 + 1  # every byte up to the last accounted for, once


def test_mid_conversation_start_uses_server_ports():
    w = Wire(server_ports={9092})
    w.send(TO_CLIENT, 5555, b"tail of a response")
    w.send(TO_SERVER, 777, b"request")
    w.send(TO_CLIENT, 5555 + 18, b"next")
    (conn,) = w.conns()
    assert conn.roles == "port" and conn.server_port == 9092 and conn.client_port == CPORT
    assert stream_view(w.events(TO_CLIENT)) == [b"tail of a responsenext"]
    assert stream_view(w.events(TO_SERVER)) == [b"request"]


def test_mid_conversation_known_port_is_the_server():
    w = Wire()
    w.send(TO_CLIENT, 5555, b"server speaks first in the capture")
    (conn,) = w.conns()
    assert conn.roles == "port" and conn.server_port == SPORT == 9092


def test_mid_conversation_guess_puts_the_server_on_the_lower_port():
    w = Wire()
    w.r.feed(1, 0, TcpSegment(SERVER, CLIENT, 7000, 52000, 5555, 0, ACK, b"x", 0))
    w.r.feed(2, 0, TcpSegment(CLIENT, SERVER, 60000, 62000, 5555, 0, ACK, b"y", 0))
    a, b = (c for c, _, _ in w.r.events[::1])
    assert (a.roles, a.server_port, a.client_port) == ("guess", 7000, 52000)
    assert (b.roles, b.server_port, b.client_port) == ("guess", 60000, 62000)


def test_server_ports_override_the_guess():
    w = Wire(server_ports={50000})  # here the higher port is the server
    w.send(TO_CLIENT, 5555, b"x")
    (conn,) = w.conns()
    assert conn.roles == "port" and conn.server_port == 50000 and conn.client_port == 9092


def test_syn_ack_without_syn_identifies_the_server():
    w = Wire(server_ports={50000})  # SYN-ACK beats the port rule
    w.send(TO_CLIENT, SISN, flags=SYN | ACK, ack=CISN + 1)
    w.send(TO_SERVER, CISN + 1, b"req")
    w.send(TO_CLIENT, SISN + 1, b"resp")
    (conn,) = w.conns()
    assert conn.roles == "syn" and conn.server_port == SPORT
    assert stream_view(w.events(TO_SERVER)) == [b"req"] and stream_view(w.events(TO_CLIENT)) == [b"resp"]


def test_pure_acks_of_unknown_flows_open_nothing():
    w = Wire()
    w.send(TO_SERVER, 1, flags=ACK, ack=5)
    w.send(TO_SERVER, 1, flags=FIN | ACK)
    w.send(TO_SERVER, 1, flags=RST)
    assert w.all == [] and w.r.connections == 0 and w.r.ignored == 2


def test_syn_payload_fast_open():
    w = Wire()
    w.send(TO_SERVER, CISN, b"early", flags=SYN)
    w.send(TO_SERVER, CISN + 6, b" data")
    assert stream_view(w.events(TO_SERVER)) == [b"early data"]


def test_fin_out_of_order_waits_for_the_data():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 4, flags=FIN | ACK)
    w.send(TO_SERVER, CISN + 1, b"abc")
    assert summary(w.events(TO_SERVER)) == [("data", 5, b"abc"), ("end", "fin")]


def test_fin_after_a_hole_reports_the_hole_at_close():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"abc")
    w.send(TO_SERVER, CISN + 14, flags=FIN | ACK)  # 10 bytes before the FIN never seen
    w.send(TO_CLIENT, SISN + 1, flags=FIN | ACK, ack=CISN + 15)
    w.finish()
    assert stream_view(w.events(TO_SERVER)) == [b"abc", ("gap", 10), ("end", "eof")]
    assert stream_view(w.events(TO_CLIENT)) == [("end", "fin")]


def test_data_after_fin_is_ignored():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"abc", flags=FIN | ACK)
    w.send(TO_SERVER, CISN + 4, b"zzz")
    w.send(TO_SERVER, CISN + 1, b"abc", flags=FIN | ACK)  # retransmitted FIN
    assert stream_view(w.events(TO_SERVER)) == [b"abc", ("end", "fin")]
    assert w.conns()[0].directions[TO_SERVER].late == 2


def test_rst_ends_both_directions_and_flushes():
    w = Wire()
    w.handshake()
    w.send(TO_CLIENT, SISN + 1, b"a")
    w.send(TO_CLIENT, SISN + 7, b"b")  # 5-byte hole
    w.send(TO_SERVER, CISN + 1, flags=RST)
    assert stream_view(w.events(TO_CLIENT)) == [b"a", ("gap", 5), b"b", ("end", "rst")]
    assert stream_view(w.events(TO_SERVER)) == [("end", "rst")]
    assert w.conns()[0].closed
    w.send(TO_CLIENT, SISN + 8, b"late")
    assert stream_view(w.events(TO_CLIENT))[-1] == ("end", "rst")


@pytest.mark.parametrize("sender", [TO_SERVER, TO_CLIENT])
def test_a_reset_ends_its_senders_direction_first(sender):
    """Flows tell who gave up by which direction ended first (a client closing with a request in
    flight, or a server resetting the connection)."""
    w = Wire()
    w.handshake()
    w.send(sender, (CISN if sender == TO_SERVER else SISN) + 1, flags=RST)
    ends = [(d, e.reason) for _, d, e in w.all if isinstance(e, End)]
    assert ends == [(sender, "rst"), (1 - sender, "rst")]


def test_snaplen_cut_segment_becomes_data_then_gap():
    w = Wire()
    w.handshake()
    w.send(TO_CLIENT, SISN + 1, b"head", missing=96)
    w.send(TO_CLIENT, SISN + 101, b"next")
    w.send(TO_CLIENT, SISN + 1, b"head", missing=96)  # retransmitted, cut the same way
    assert summary(w.events(TO_CLIENT)) == [("data", 4, b"head"), ("gap", 4, 96), ("data", 5, b"next")]


def test_snaplen_cut_segment_out_of_order():
    w = Wire()
    w.handshake()
    w.send(TO_CLIENT, SISN + 11, b"cut", missing=7)
    w.send(TO_CLIENT, SISN + 21, b"tail")
    w.send(TO_CLIENT, SISN + 1, b"0123456789")
    assert stream_view(w.events(TO_CLIENT)) == [b"0123456789cut", ("gap", 7), b"tail"]


def test_overlap_into_the_cut_part():
    w = Wire()
    w.handshake()
    w.send(TO_CLIENT, SISN + 1, b"ab", missing=8)  # [0,2) data, [2,10) missing
    w.send(TO_CLIENT, SISN + 6, b"fghijKL")  # [5,12): only KL is new
    assert stream_view(w.events(TO_CLIENT)) == [b"ab", ("gap", 8), b"KL"]


@pytest.mark.parametrize("isn", [0xFFFFFFFF - 5, 0xFFFFFFFF, 0x7FFFFFFF - 3])
def test_sequence_number_wraparound(isn):
    w = Wire()
    w.send(TO_SERVER, isn, flags=SYN)
    w.send(TO_SERVER, isn + 1 + 8, b"89abcdef")  # past the wrap, out of order
    w.send(TO_SERVER, isn + 1, b"01234567")
    w.send(TO_SERVER, isn + 1 + 4, b"4567")  # duplicate across the wrap
    w.send(TO_SERVER, isn + 17, b"g")
    assert stream_view(w.events(TO_SERVER)) == [b"0123456789abcdefg"]


def test_port_reuse_opens_a_new_connection():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"first connection")
    w.send(TO_SERVER, CISN + 17, flags=FIN | ACK)
    w.send(TO_CLIENT, SISN + 1, flags=FIN | ACK)
    w.send(TO_SERVER, 9_000_000, flags=SYN)
    w.send(TO_SERVER, 9_000_000, flags=SYN)  # retransmitted SYN: same connection
    w.send(TO_CLIENT, 123, flags=SYN | ACK, ack=9_000_001)
    w.send(TO_SERVER, 9_000_001, b"second")
    w.send(TO_SERVER, CISN + 1, b"first connection")  # a stray old retransmission
    conns = w.conns()
    assert [c.id for c in conns] == [1, 2] and w.r.connections == 2
    assert stream_view(w.events(TO_SERVER, 1)) == [b"first connection", ("end", "fin")]
    assert stream_view(w.events(TO_SERVER, 2)) == [b"second"]


def test_late_syn_duplicate_after_data_changes_nothing():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"abc")
    w.send(TO_SERVER, CISN, flags=SYN)  # a stray copy of the SYN
    w.send(TO_CLIENT, SISN, flags=SYN | ACK, ack=CISN + 1)
    w.send(TO_SERVER, CISN + 4, b"def")
    assert w.r.connections == 1
    assert stream_view(w.events(TO_SERVER)) == [b"abcdef"]


def test_syn_on_an_open_mid_stream_connection_replaces_it():
    w = Wire(server_ports={9092})
    w.send(TO_SERVER, 500, b"old")
    w.send(TO_SERVER, 42, flags=SYN)
    w.send(TO_SERVER, 43, b"new")
    assert stream_view(w.events(TO_SERVER, 1)) == [b"old", ("end", "reused")]
    assert stream_view(w.events(TO_SERVER, 2)) == [b"new"]
    assert w.conns()[1].roles == "syn"


def test_interleaved_connections_are_kept_apart():
    w = Wire()
    for port in (1111, 2222, 3333):
        w.send(TO_SERVER, 100, flags=SYN, cport=port)
    for i in range(3):
        for j, port in enumerate((1111, 2222, 3333)):
            w.send(TO_SERVER, 101 + i, bytes([65 + j]), cport=port)
    w.finish()
    for cid, letter in zip((1, 2, 3), b"ABC", strict=True):
        assert stream_view(w.events(TO_SERVER, cid)) == [bytes([letter]) * 3, ("end", "eof")]


def test_closed_connections_are_forgotten_after_linger():
    w = Wire(linger_ns=10_000)
    for port in range(40000, 40050):
        w.handshake(cport=port)
        w.send(TO_SERVER, CISN + 1, flags=RST, cport=port)
    assert len(w.r.flows) <= 2 * 4  # only those closed in the last 10 us of capture time remain
    assert not w.r.open and w.r.connections == 50


def test_idle_timeout_ends_silent_connections():
    w = Wire(idle_timeout_ns=1_000_000)
    w.handshake(cport=1)
    w.send(TO_SERVER, CISN + 1, b"then silence", cport=1)
    w.handshake(cport=2)
    for i in range(20):
        w.send(TO_SERVER, CISN + 1 + i, b"x", cport=2, ts=10_000_000 + i * 100_000)
    assert stream_view(w.events(TO_SERVER, 1)) == [b"then silence", ("end", "idle")]
    assert stream_view(w.events(TO_SERVER, 2))[-1] == b"x" * 20
    assert set(w.r.open) == {2}


def test_events_carry_frames_and_timestamps():
    w = Wire()
    w.handshake()
    w.send(TO_SERVER, CISN + 1, b"abc", ts=123_456_789)
    (ev,) = w.events(TO_SERVER)
    assert ev == Chunk(4, 123_456_789, b"abc") and ev.ts_ns == 123_456_789
