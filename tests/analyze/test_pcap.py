"""The pcap / pcapng reader: formats, byte orders, resolutions, blocks, damage."""

from __future__ import annotations

import gzip
import io
import struct

import pytest

from kwire.analyze import NotACaptureError, Packet, PcapReader, read_packets
from kwire.analyze.pcapwrite import PcapngWriter, PcapWriter

from .helpers import TS0, ShortReads, pcap_bytes, pcapng_bytes

PKTS = [(TS0 + i * 1_000_001, bytes(range(i, i + 20 + i * 37 % 200))) for i in range(12)]


def read_all(data: bytes, **options) -> tuple[list[Packet], PcapReader]:
    reader = PcapReader(io.BytesIO(data), **options)
    return list(reader), reader


@pytest.mark.parametrize("byteorder", ["little", "big"])
@pytest.mark.parametrize("nanosecond", [False, True])
def test_pcap_byte_orders_and_resolutions(byteorder, nanosecond):
    data = pcap_bytes(PKTS, 1, byteorder=byteorder, nanosecond=nanosecond)
    packets, reader = read_all(data)
    assert reader.format == "pcap" and reader.byteorder == byteorder
    assert reader.warnings == [] and not reader.truncated
    assert [p.frame for p in packets] == list(range(1, len(PKTS) + 1))
    for p, (ts, payload) in zip(packets, PKTS, strict=True):
        assert p.ts_ns == (ts if nanosecond else ts // 1000 * 1000)
        assert p.linktype == 1 and p.data == payload and p.orig_len == len(payload)
    assert packets[0].ts == pytest.approx(TS0 / 1e9)
    assert reader.packets == len(PKTS)


def test_pcap_magic_bytes_on_disk():
    # The four magics as they appear at the start of files (not only what our writer emits).
    for head, order, ns in [(b"\xd4\xc3\xb2\xa1", "<", False), (b"\xa1\xb2\xc3\xd4", ">", False),
                            (b"\x4d\x3c\xb2\xa1", "<", True), (b"\xa1\xb2\x3c\x4d", ">", True)]:
        data = head + struct.pack(order + "HHiIII", 2, 4, 0, 0, 65535, 101)
        data += struct.pack(order + "IIII", 10, 999, 3, 60) + b"abc"
        (p,), reader = read_all(data)
        assert (p.ts_ns, p.linktype, p.data, p.orig_len) == (10_000_000_000 + (999 if ns else 999_000), 101, b"abc", 60)
        assert reader.snaplen == 65535


def test_modified_pcap_24_byte_records():
    data = struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, 1)
    for i in range(3):
        data += struct.pack("<IIII", 5, i, 4, 4) + struct.pack("<IHBB", 2, 0x800, 0, 0) + bytes([i]) * 4
    packets, reader = read_all(data)
    assert [(p.ts_ns, p.data) for p in packets] == [(5_000_000_000 + i * 1000, bytes([i]) * 4) for i in range(3)]


def test_pcap_linktype_upper_bits_ignored():
    data = bytearray(pcap_bytes(PKTS[:1], 1))
    struct.pack_into("<I", data, 20, 1 | 0x14000000)  # FCS-present flag and length in the upper bits
    (p,), _ = read_all(bytes(data))
    assert p.linktype == 1


def test_snaplen_cut_records_keep_orig_len():
    big = bytes(range(256)) * 4
    packets, _ = read_all(pcap_bytes([(TS0, big)], snaplen=100))
    assert packets[0].data == big[:100] and packets[0].orig_len == 1024


@pytest.mark.parametrize("chunk_size", [64, 65, 100, 333, 1 << 20])
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_chunk_boundaries_do_not_matter(fmt, chunk_size):
    make = pcap_bytes if fmt == "pcap" else pcapng_bytes
    data = make(PKTS, nanosecond=True) if fmt == "pcap" else make(PKTS, tsresol=9)
    packets, reader = read_all(data, chunk_size=chunk_size)
    assert [(p.ts_ns, p.data) for p in packets] == PKTS
    assert reader.warnings == []


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_short_reads_from_a_pipe(fmt):
    data = pcap_bytes(PKTS) if fmt == "pcap" else pcapng_bytes(PKTS)
    stream = ShortReads(data, step=5)
    packets = list(PcapReader(stream, chunk_size=64))
    assert [p.data for p in packets] == [d for _, d in PKTS]


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_reading_is_incremental(fmt):
    many = [(TS0 + i, bytes(100)) for i in range(2000)]
    data = pcap_bytes(many) if fmt == "pcap" else pcapng_bytes(many)
    stream = ShortReads(data, step=1 << 30)
    it = iter(PcapReader(stream, chunk_size=4096))
    first = next(it)
    assert first.frame == 1
    assert stream.position <= 8192 < len(data)  # one chunk read, not the file
    assert max(stream.reads) <= 4096 + 200
    assert sum(1 for _ in it) == 1999


@pytest.mark.parametrize("byteorder", ["little", "big"])
def test_pcapng_interfaces_resolutions_and_blocks(byteorder):
    f = io.BytesIO()
    w = PcapngWriter(f, byteorder=byteorder)
    eth = w.add_interface(1)  # default resolution: microseconds
    raw = w.add_interface(101, tsresol=9)
    bin20 = w.add_interface(228, tsresol=0x80 | 20)  # 2^-20 s
    milli = w.add_interface(229, tsresol=3, tsoffset=100)  # milliseconds, +100 s
    w.block(4, b"\x01\x00\x04\x00" + bytes(4) + b"\0\0\0\0")  # name resolution block: skipped
    w.write(TS0, b"e1", eth)
    w.write(TS0, b"r1", raw)
    w.block(0x0BAD, b"custom data " * 10)  # custom block: skipped
    w.write(TS0, b"b1", bin20)
    w.write(TS0, b"m1", milli, tsoffset=100)
    w.write_simple(b"simple-packet")  # 13 bytes: 3 of padding in the block
    w.write_obsolete(TS0 + 5000, b"old", raw)
    w.block(5, struct.pack("<I" if byteorder == "little" else ">I", 0) + bytes(16))  # interface statistics
    packets, reader = read_all(f.getvalue())
    assert reader.warnings == []
    assert reader.format == "pcapng" and reader.byteorder == byteorder
    assert reader.linktypes == {1, 101, 228, 229}
    got = [(p.frame, p.linktype, p.data, p.orig_len) for p in packets]
    assert got == [(1, 1, b"e1", 2), (2, 101, b"r1", 2), (3, 228, b"b1", 2), (4, 229, b"m1", 2),
                   (5, 1, b"simple-packet", 13), (6, 101, b"old", 3)]
    ts = [p.ts_ns for p in packets]
    assert ts[0] == TS0 // 1000 * 1000
    assert ts[1] == TS0
    assert abs(ts[2] - TS0) < 1000 and ts[2] <= TS0  # 2^-20 s units: < 1 us error, rounded down
    assert ts[3] == TS0 // 1_000_000 * 1_000_000
    assert ts[4] == ts[3]  # simple packets inherit the previous timestamp
    assert ts[5] == TS0 + 5000


def test_pcapng_simple_packet_cut_to_snaplen():
    f = io.BytesIO()
    w = PcapngWriter(f)
    w.add_interface(1, snaplen=8)
    w.write_simple(b"0123456789abcdef", 16)
    (p,), _ = read_all(f.getvalue())
    assert p.data == b"01234567" and p.orig_len == 16


def test_pcapng_several_sections_change_byte_order_and_interfaces():
    f = io.BytesIO()
    w = PcapngWriter(f, byteorder="little")
    w.add_interface(1)
    w.write(TS0, b"one")
    w.new_section(byteorder="big")
    w.add_interface(113, tsresol=9)
    w.write(TS0, b"two")
    w.new_section(byteorder="little")
    w.add_interface(276)
    w.add_interface(0)
    w.write(TS0, b"three", 1)
    w.write(TS0, b"four", 0)
    packets, reader = read_all(f.getvalue())
    assert [(p.frame, p.linktype, p.data) for p in packets] == [(1, 1, b"one"), (2, 113, b"two"), (3, 0, b"three"),
                                                                 (4, 276, b"four")]
    assert packets[1].ts_ns == TS0 and packets[0].ts_ns == TS0 // 1000 * 1000
    assert reader.warnings == []


def test_pcapng_packet_on_undescribed_interface_is_skipped_with_a_warning():
    f = io.BytesIO()
    w = PcapngWriter(f)
    w.add_interface(1)
    w.write(TS0, b"ok")
    w._ifaces.append((0, 6))  # write as if interface 1 existed
    w.write(TS0, b"orphan", 1)
    w.write(TS0, b"ok again", 0)
    packets, reader = read_all(f.getvalue())
    assert [p.data for p in packets] == [b"ok", b"ok again"]
    assert [p.frame for p in packets] == [1, 2]
    assert len(reader.warnings) == 1 and "interface 1" in reader.warnings[0]
    assert not reader.truncated


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("cut", [1, 5, 12, 17, 30])
def test_truncated_file_keeps_what_was_read(fmt, cut):
    data = pcap_bytes(PKTS) if fmt == "pcap" else pcapng_bytes(PKTS)
    packets, reader = read_all(data[:-cut], chunk_size=64)
    assert [p.data for p in packets] == [d for _, d in PKTS[:-1]]
    assert reader.truncated and len(reader.warnings) == 1
    assert "cut short" in reader.warnings[0]


def test_truncated_in_file_header():
    packets, reader = read_all(pcap_bytes([])[:10])
    assert packets == [] and reader.truncated and "file header" in reader.warnings[0]


def test_empty_capture_is_fine():
    for data in (pcap_bytes([]), pcapng_bytes([])):
        packets, reader = read_all(data)
        assert packets == [] and reader.warnings == [] and not reader.truncated


def test_pcap_corrupt_record_length_stops_with_warning():
    data = bytearray(pcap_bytes(PKTS[:3]))
    second = 24 + 16 + len(PKTS[0][1])
    struct.pack_into("<I", data, second + 8, 0x7FFFFFF0)
    packets, reader = read_all(bytes(data))
    assert [p.data for p in packets] == [PKTS[0][1]]
    assert reader.truncated and "corrupt" in reader.warnings[0]


def test_pcap_corrupt_length_inside_buffer_is_caught():
    # The claimed length fits in what is buffered, but is over the limit: still corruption.
    data = bytearray(pcap_bytes([(TS0, b"x" * 100)] * 3, snaplen=120))
    struct.pack_into("<I", data, 24 + 8, 150)
    packets, reader = read_all(bytes(data), max_record_size=120)
    assert packets == [] and reader.truncated and "corrupt" in reader.warnings[0]


def test_pcapng_bad_block_length_stops_with_warning():
    data = bytearray(pcapng_bytes(PKTS[:3]))
    shb_len, idb_len = struct.unpack_from("<I", data, 4)[0], None
    idb_len = struct.unpack_from("<I", data, shb_len + 4)[0]
    second = shb_len + idb_len + struct.unpack_from("<I", data, shb_len + idb_len + 4)[0]
    struct.pack_into("<I", data, second + 4, 13)  # not a multiple of 4
    packets, reader = read_all(bytes(data))
    assert [p.data for p in packets] == [PKTS[0][1]]
    assert reader.truncated and "invalid length" in reader.warnings[0]


def test_pcapng_trailing_length_mismatch_stops():
    data = bytearray(pcapng_bytes(PKTS[:2]))
    struct.pack_into("<I", data, len(data) - 4, 999)
    packets, reader = read_all(bytes(data))
    assert [p.data for p in packets] == [PKTS[0][1]]
    assert "trailing length" in reader.warnings[0]


def test_pcapng_bad_byte_order_magic():
    data = bytearray(pcapng_bytes(PKTS[:2]))
    data[8:12] = b"XXXX"
    packets, reader = read_all(bytes(data))
    assert packets == [] and "byte-order magic" in reader.warnings[0]


def test_pcapng_packet_length_over_block_is_corrupt():
    data = bytearray(pcapng_bytes(PKTS[:1]))
    shb_len = struct.unpack_from("<I", data, 4)[0]
    idb_len = struct.unpack_from("<I", data, shb_len + 4)[0]
    struct.pack_into("<I", data, shb_len + idb_len + 20, 5000)
    packets, reader = read_all(bytes(data))
    assert packets == [] and "corrupt" in reader.warnings[0]


def test_pcapng_big_unknown_block_skipped_without_loading_it():
    f = io.BytesIO()
    w = PcapngWriter(f)
    w.add_interface(1)
    w.write(TS0, b"before")
    w.block(0x0BAD, b"z" * 100_000)
    w.write(TS0, b"after")
    stream = ShortReads(f.getvalue(), step=1 << 30)
    packets = list(PcapReader(stream, chunk_size=1024))
    assert [p.data for p in packets] == [b"before", b"after"]
    assert max(stream.reads) <= 2048


@pytest.mark.parametrize("data", [b"", b"\xd4\xc3", b"hello world, not a capture", b"\x00" * 100,
                                  bytes(range(256)) * 10])
def test_garbage_is_not_a_capture(data, tmp_path):
    with pytest.raises(NotACaptureError):
        PcapReader(io.BytesIO(data))
    path = tmp_path / "garbage.pcap"
    path.write_bytes(data)
    with pytest.raises(NotACaptureError):
        list(read_packets(path))


def test_garbage_after_a_valid_header_stops_with_warning():
    data = pcap_bytes(PKTS[:2]) + bytes(range(256)) * 64
    packets, reader = read_all(data)
    assert [p.data for p in packets] == [d for _, d in PKTS[:2]]
    assert reader.truncated and reader.warnings
    data = pcapng_bytes(PKTS[:2]) + bytes(range(256)) * 64
    packets, reader = read_all(data)
    assert [p.data for p in packets] == [d for _, d in PKTS[:2]]
    assert reader.truncated and reader.warnings


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_gzip_compressed_path(fmt, tmp_path):
    data = pcap_bytes(PKTS) if fmt == "pcap" else pcapng_bytes(PKTS)
    path = tmp_path / "c.pcap.gz"
    path.write_bytes(gzip.compress(data))
    assert [p.data for p in read_packets(path)] == [d for _, d in PKTS]


def test_path_reader_closes_file_and_iterates_once(tmp_path):
    path = tmp_path / "c.pcap"
    path.write_bytes(pcap_bytes(PKTS))
    with PcapReader(path) as reader:
        assert len(list(reader)) == len(PKTS)
        with pytest.raises(RuntimeError):
            list(reader)
    assert reader._f.closed


def test_pcap_writer_cuts_to_snaplen_and_reader_agrees():
    f = io.BytesIO()
    w = PcapWriter(f, 101, snaplen=5)
    w.write(TS0, b"0123456789")
    (p,), _ = read_all(f.getvalue())
    assert (p.data, p.orig_len, p.linktype) == (b"01234", 10, 101)


def test_broken_compression_mid_file_keeps_what_was_read(tmp_path):
    many = [(TS0 + i, bytes([i % 256]) * 500) for i in range(400)]
    packed = gzip.compress(pcap_bytes(many), compresslevel=1)
    path = tmp_path / "cut.pcap.gz"
    path.write_bytes(packed[:len(packed) // 2])
    with PcapReader(path, chunk_size=4096) as reader:
        packets = list(reader)
    assert 0 < len(packets) < 400
    assert [p.data for p in packets] == [d for _, d in many[:len(packets)]]
    assert reader.truncated and any("read error" in w for w in reader.warnings)
