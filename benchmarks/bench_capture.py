"""Throughput of the capture input layers: pcap reading, packet decoding, TCP reassembly.

    python benchmarks/bench_capture.py [capture.pcap|.pcapng ...] [--packets N]

Without a capture, writes a synthetic one (pcap, and the same as pcapng) (many Kafka-like connections, interleaved, MSS-sized
segments and their ACKs) to a temporary directory.  Prints packets/s and MB/s per layer.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

from kwire.analyze import TO_CLIENT, TO_SERVER, PacketDecoder, PcapReader, TcpCapture
from kwire.analyze.pcapwrite import PcapngWriter, PcapWriter, TcpConversation


def synthetic(path: str, packets: int, connections: int = 50) -> None:
    rnd = random.Random(1)
    with open(path, "wb") as f:
        w = PcapWriter(f)
        convs = [TcpConversation(w, f"10.0.{i // 250}.{i % 250 + 1}", 40000 + i, "10.9.9.9", 9092)
                 for i in range(connections)]
        ts = 1_700_000_000_000_000_000
        for c in convs:
            c.handshake(ts)
        written = 3 * connections
        while written < packets:
            c = rnd.choice(convs)
            ts += 10_000
            request = b"\0\0\0\x60" + bytes(96)
            response = b"\0" * rnd.choice((64, 600, 4000, 20000))
            c.send(TO_SERVER, request, ts)
            c.send(TO_CLIENT, response, ts + 5000)
            written += 2 + 1 + (len(response) + c.mss - 1) // c.mss
        for c in convs:
            c.close(ts)


def to_pcapng(src: str, dst: str) -> None:
    with open(dst, "wb") as f:
        w = PcapngWriter(f)
        w.add_interface(1, tsresol=9)
        for p in PcapReader(src):
            w.write(p.ts_ns, p.data, 0, p.orig_len)


def bench(path: str) -> None:
    size = os.path.getsize(path)

    def timed(label, fn):
        t = time.perf_counter()
        n = fn()
        dt = time.perf_counter() - t
        print(f"  {label:<28} {n:>9} in {dt:6.3f}s  {n / dt / 1e3:8.1f} k/s  {size / dt / 1e6:7.1f} MB/s")

    def read():
        n = 0
        for _ in PcapReader(path):
            n += 1
        return n

    def decode():
        dec = PacketDecoder().decode
        n = 0
        for _, _, lt, data, orig in PcapReader(path):
            if dec(lt, data, orig) is not None:
                n += 1
        return n

    def reassemble():
        n = 0
        with TcpCapture(path) as cap:
            for _ in cap.events():
                n += 1
        return n

    print(f"{path}: {size / 1e6:.1f} MB")
    timed("read (packets)", read)
    timed("read+decode (TCP segments)", decode)
    timed("read+decode+reassemble (events)", reassemble)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", nargs="*")
    ap.add_argument("--packets", type=int, default=300_000)
    args = ap.parse_args(argv)
    if args.captures:
        for path in args.captures:
            bench(path)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "synthetic.pcap")
        t = time.perf_counter()
        synthetic(path, args.packets)
        to_pcapng(path, path + "ng")
        print(f"wrote {path}(ng) in {time.perf_counter() - t:.1f}s")
        bench(path)
        bench(path + "ng")
    return 0


if __name__ == "__main__":
    sys.exit(main())
