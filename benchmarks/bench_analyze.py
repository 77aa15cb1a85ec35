"""The analyzer benchmark: kwire analyze against tshark, decoding the same captures of real traffic.

    python benchmarks/bench_analyze.py [--size-mb 200] [--repeat 3] [--keep] [--traffic both]
                                       [--capture-dir DIR] [--mss 1448] [--tshark-verbose]

The captures (built once; reused while they exist): two producers writing ~1 KiB records, one
topic uncompressed and one lz4, and a consumer group of two members reading them back and
committing, against kwire's ``EmbeddedBroker``, recorded by ``tcpdump -s 0`` on the loopback (with
the tests' harness, tests/analyze/realcap.py) until the file reaches ``--size-mb``.  Two kinds of
clients, one capture each:

- ``confluent``: confluent-kafka (librdkafka 2.x).  It speaks Produce v10, Fetch v16, ... which
  tshark 4.0 does not know: tshark reads their headers and gives up on the bodies, so on this
  capture it does much less than kwire (no record batch is opened) and its speed is not a decode
  speed;
- ``kafka-python-2.0``: kafka-python pinned to Kafka 2.0's versions (Produce v6, Fetch v8, ...),
  all of which tshark dissects down to the last record: the fair comparison.

They live in the temp dir and are removed at the end unless ``--keep`` (or ``--capture-dir``,
whose files are kept and reused).  On the loopback the kernel hands tcpdump TCP segments of up to
64 KiB, ~45 times fewer packets than the same bytes between two machines; ``--mss 1448`` also
measures a copy cut into Ethernet-sized segments (``resegment``), where per-packet costs show.

Measured, each pinned to one core (``taskset -c 0``), each the best of ``--repeat`` runs of a fresh
process, wall and CPU (user+sys) time:

- kwire decode: ``CaptureDecoder`` over the file: every Kafka message decoded and paired, record
  batches decompressed to count their records, exchanges counted;
- kwire analyze: ``session.analyze_captures``: the same plus the summary, the tables and the
  findings, as ``kwire analyze`` runs them;
- tshark: ``tshark -r F -d tcp.port==P,kafka -T fields -e frame.number -e kafka.api_key
  -e kafka.correlation_id -e kafka.error -e kafka.topic_name -e kafka.partition_id
  -e kafka.offset > /dev/null``.  That is tshark's fair "decode every Kafka message": it reassembles
  TCP, dissects every Kafka message of every frame (decompressing record batches and walking each
  record, more than kwire, which counts them) and prints the fields kwire's tables hold, but no
  text tree.  ``-V``/``-T pdml`` would also format every field of every packet as text, which
  kwire does not do: ``--tshark-verbose`` adds a ``-V`` run for reference.

Ratio: tshark's time over the decoder's (> 1: faster than tshark).  Progress goes to stderr;
the blocks for benchmarks/RESULTS.md go to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the capture harness the tests use: tests/analyze/realcap.py

PARTITIONS = 4
RECORD_SIZE = 1024
CHUNK_RECORDS = 8000  # per topic per round: ~8 MB uncompressed, then read back before the next round
TOPICS = {"bench-plain": "none", "bench-lz4": "lz4"}
GROUP = "bench-readers"
TSHARK_FIELDS = ["frame.number", "kafka.api_key", "kafka.correlation_id", "kafka.error", "kafka.topic_name",
                 "kafka.partition_id", "kafka.offset"]


def log(msg: str) -> None:
    print(f"[bench_analyze {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- building the capture ---------------------------------------------------------------------


def _values(n: int) -> list[bytes]:
    """~1 KiB values that read like application data (lz4 roughly halves them), all different."""
    import random

    rnd = random.Random(7)
    words = [bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 9))) for _ in range(500)]
    out = []
    for i in range(n):
        head = b'{"order":%d,"customer":"c-%d","status":"%s","note":"' % (i, rnd.randint(1, 10**6),
                                                                          rnd.choice(words))
        body = b" ".join(rnd.choice(words) for _ in range(RECORD_SIZE // 6))
        out.append((head + body)[:RECORD_SIZE - 2] + b'"}')
    return out


class _ConfluentClients:
    """confluent-kafka (librdkafka 2.x): the newest versions (Produce v10, Fetch v16...), which
    tshark 4.0 does not know: it reads their headers and stops, so its time there is no decoding."""

    def __init__(self, bootstrap: str):
        import confluent_kafka

        self.producers = {topic: confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "client.id": f"bench-producer-{codec}", "acks": "all",
            "linger.ms": 5, "compression.type": codec, "log_level": 3}) for topic, codec in TOPICS.items()}
        self.consumers = [confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": f"bench-reader-{i}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3}) for i in range(2)]
        for c in self.consumers:
            c.subscribe(list(TOPICS))

    def produce(self, topic: str, value: bytes, key: bytes) -> None:
        producer = self.producers[topic]
        for _ in range(10_000):
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:  # librdkafka's queue is full: let it send
                producer.poll(0.05)
        producer.poll(0)

    def flush(self) -> None:
        for producer in self.producers.values():
            if producer.flush(60):
                raise RuntimeError("records not delivered within 60 s")

    def consume(self) -> int:
        got = 0
        for c in self.consumers:
            got += sum(1 for m in c.consume(2000, 0.05) if m.error() is None)
        return got

    def commit(self) -> None:
        for c in self.consumers:
            if c.assignment():
                c.commit(asynchronous=False)

    def close(self) -> None:
        for c in self.consumers:
            c.close()
        for producer in self.producers.values():
            producer.flush(10)


class _KafkaPython20Clients:
    """kafka-python pinned to Kafka 2.0's versions (Produce v6, Fetch v8...), all of which tshark 4.0
    dissects to the last record: the traffic on which tshark really decodes every message."""

    def __init__(self, bootstrap: str):
        import kafka

        pinned = {"bootstrap_servers": bootstrap, "api_version": (2, 0, 0)}
        self.producers = {topic: kafka.KafkaProducer(client_id=f"bench-producer-{codec}", acks="all", linger_ms=5,
                                                     compression_type=None if codec == "none" else codec, **pinned)
                          for topic, codec in TOPICS.items()}
        self.consumers = [kafka.KafkaConsumer(group_id=GROUP, client_id=f"bench-reader-{i}",
                                              auto_offset_reset="earliest", enable_auto_commit=False, **pinned)
                          for i in range(2)]
        for c in self.consumers:
            c.subscribe(list(TOPICS))

    def produce(self, topic: str, value: bytes, key: bytes) -> None:
        self.producers[topic].send(topic, value=value, key=key)

    def flush(self) -> None:
        for producer in self.producers.values():
            producer.flush(60)

    def consume(self) -> int:
        return sum(len(msgs) for c in self.consumers for msgs in c.poll(timeout_ms=50).values())

    def commit(self) -> None:
        for c in self.consumers:
            if c.assignment():
                c.commit()

    def close(self) -> None:
        for c in self.consumers:
            c.close()
        for producer in self.producers.values():
            producer.close(10)


TRAFFIC = {"confluent": _ConfluentClients, "kafka-python-2.0": _KafkaPython20Clients}


def build_capture(path: Path, size_mb: int, traffic: str) -> dict:
    """Record real client traffic into ``path`` until it holds ``size_mb`` MB; returns its facts."""
    from kwire.broker import EmbeddedBroker
    from tests.analyze.realcap import capture

    values = _values(2000)
    target = size_mb * 1_000_000
    produced = consumed = rounds = 0
    started = time.monotonic()
    with EmbeddedBroker(default_partitions=PARTITIONS) as broker:
        with capture([broker.port], path, "tcpdump") as cap:
            clients = TRAFFIC[traffic](broker.bootstrap)
            try:
                while path.stat().st_size < target and rounds < 10_000:
                    rounds += 1
                    for topic in TOPICS:
                        for i in range(produced, produced + CHUNK_RECORDS):
                            clients.produce(topic, values[i % len(values)], b"key-%d" % i)
                    clients.flush()
                    produced += CHUNK_RECORDS * len(TOPICS)
                    deadline = time.monotonic() + 120
                    while consumed < produced and time.monotonic() < deadline:
                        consumed += clients.consume()
                    if consumed < produced:
                        raise RuntimeError(f"the group read {consumed} of {produced} records within 120 s")
                    clients.commit()
                    log(f"{traffic} round {rounds}: {produced} records produced and read, capture "
                        f"{path.stat().st_size / 1e6:.0f} MB")
            finally:
                clients.close()
        port = broker.port
    facts = {"traffic": traffic, "port": port, "records_produced": produced, "records_consumed": consumed,
             "rounds": rounds, "dropped": cap.dropped, "build_seconds": round(time.monotonic() - started, 1),
             "size_bytes": path.stat().st_size}
    if cap.dropped:
        log(f"warning: the kernel dropped {cap.dropped} packets (the capture has gaps)")
    return facts


# -- Ethernet-sized segments ----------------------------------------------------------------------


def resegment(src: Path, dst: Path, mss: int) -> int:
    """Rewrite a loopback capture the way an Ethernet link would have carried the same bytes: each
    TCP payload longer than ``mss`` cut into segments of at most ``mss`` bytes (sequence numbers,
    IP lengths and checksums adjusted; PSH and FIN on the last piece).  On lo the kernel hands
    tcpdump segments of up to 64 KiB, so a loopback capture has ~45 times fewer packets than the
    same traffic between two machines: per-packet costs hardly show.  Returns the packets written."""
    from kwire.analyze.pcap import PcapReader
    from kwire.analyze.pcapwrite import PcapWriter

    written = 0
    with open(dst, "wb") as f:
        writer = None
        for packet in PcapReader(src):
            if writer is None:
                writer = PcapWriter(f, packet.linktype, nanosecond=True)
            pieces = _split(bytes(packet.data), mss) if packet.linktype == 1 else [bytes(packet.data)]
            for i, piece in enumerate(pieces):
                writer.write(packet.ts_ns + i, piece)  # 1 ns apart: the order stays that of the bytes
            written += len(pieces)
    return written


def _split(frame: bytes, mss: int) -> list[bytes]:
    """An Ethernet + IPv4 + TCP frame cut into frames of at most ``mss`` payload bytes."""
    if len(frame) < 54 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return [frame]  # not IPv4 TCP: as it was
    ip_len = (frame[14] & 15) * 4
    total = int.from_bytes(frame[16:18], "big")
    tcp = frame[14 + ip_len:14 + total]
    tcp_len = (tcp[12] >> 4) * 4
    payload = tcp[tcp_len:]
    if len(payload) <= mss:
        return [frame]
    seq = int.from_bytes(tcp[4:8], "big")
    out = []
    for offset in range(0, len(payload), mss):
        chunk = payload[offset:offset + mss]
        last = offset + mss >= len(payload)
        tcp_header = bytearray(tcp[:tcp_len])
        tcp_header[4:8] = ((seq + offset) & 0xFFFFFFFF).to_bytes(4, "big")
        if not last:
            tcp_header[13] &= ~0x09  # FIN and PSH belong to the last piece
        ip_header = bytearray(frame[14:14 + ip_len])
        ip_header[2:4] = (ip_len + tcp_len + len(chunk)).to_bytes(2, "big")
        ip_header[10:12] = b"\0\0"
        ip_header[10:12] = _ip_checksum(ip_header).to_bytes(2, "big")
        out.append(frame[:14] + bytes(ip_header) + bytes(tcp_header) + chunk)
    return out


def _ip_checksum(header: bytes) -> int:
    total = sum(int.from_bytes(header[i:i + 2], "big") for i in range(0, len(header), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


# -- measuring -----------------------------------------------------------------------------------


def child_main(mode: str, path: str, port: int) -> int:
    """Run inside the pinned child process: decode or analyze, print the counts as JSON.
    ('startup' only imports what the others import: the cost every run pays before reading.)"""
    from kwire.analyze.analyzer import AnalyzeOptions, CaptureDecoder
    from kwire.analyze.kafka import KafkaFlow  # noqa: F401 - imported on first use by the decoder
    from kwire.analyze.session import analyze_captures

    options = AnalyzeOptions(kafka_ports=frozenset([port]))
    if mode == "startup":
        out = {}
    elif mode == "decode":
        decoder = CaptureDecoder(options)
        exchanges = sum(1 for _ in decoder.exchanges(path))
        out = {"exchanges": exchanges, "packets": decoder.stats["packets"], "warnings": decoder.warnings.total}
    else:
        analysis = analyze_captures([path], options)
        out = {"exchanges": analysis.exchanges, "packets": analysis.stats["packets"],
               "warnings": analysis.warnings.total, "findings": len(analysis.findings)}
    print(json.dumps(out))
    return 0


def timed(cmd: list[str], stdout) -> tuple[float, float, str]:
    """Run ``cmd`` pinned to core 0: (wall seconds, CPU seconds of the child, its stdout if piped)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(["taskset", "-c", "0", *cmd], stdout=stdout, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout if isinstance(proc.stdout, str) else ""


def best_of(label: str, repeat: int, run) -> dict:
    walls, cpus, extra = [], [], {}
    for i in range(repeat):
        wall, cpu, info = run(i)
        walls.append(wall)
        cpus.append(cpu)
        extra.update(info)
        log(f"{label}: run {i + 1}/{repeat}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    return {"label": label, "wall": min(walls), "cpu": min(cpus), **extra}


def measure(path: Path, port: int, repeat: int, verbose_tshark: bool) -> list[dict]:
    """The decoders' best times, each with the startup time of its program (interpreter and imports;
    tshark's dissector registration), measured the same way on (almost) nothing to read."""
    kwire = [sys.executable, __file__, "--child"]

    def kwire_run(mode: str):
        def run(_i):
            wall, cpu, out = timed([*kwire, mode, str(path), str(port)], subprocess.PIPE)
            return wall, cpu, json.loads(out.strip().splitlines()[-1])
        return run

    kwire_startup = best_of("kwire startup", repeat, kwire_run("startup"))
    results = [dict(best_of(f"kwire {mode}", repeat, kwire_run(mode)), startup=kwire_startup["wall"])
               for mode in ("decode", "analyze")]

    fields = ["-T", "fields", *(a for f in TSHARK_FIELDS for a in ("-e", f))]

    def tshark(capture: Path, *args: str) -> list[str]:
        return ["tshark", "-n", "-r", str(capture), "-d", f"tcp.port=={port},kafka", *args]

    def to_null(cmd: list[str]):
        def run(_i):
            with open(os.devnull, "w") as null:
                wall, cpu, _ = timed(cmd, null)
            return wall, cpu, {}
        return run

    with tempfile.TemporaryDirectory() as tmp:
        excerpt = Path(tmp) / "first-packets.pcap"  # tshark's startup: the same command on 20 packets
        subprocess.run(["editcap", "-r", str(path), str(excerpt), "1-20"], check=True, capture_output=True)
        tshark_startup = best_of("tshark startup", repeat, to_null(tshark(excerpt, *fields)))

    def run_fields(i):
        if i:
            return to_null(tshark(path, *fields))(i)
        # The first run also counts the Kafka messages tshark found (ids are comma-joined per frame).
        with tempfile.TemporaryFile("w+") as out:
            wall, cpu, _ = timed(tshark(path, *fields), out)
            out.seek(0)
            messages = 0
            for line in out:
                ids = line.split("\t")[2]
                messages += len(ids.split(",")) if ids else 0
        return wall, cpu, {"messages": messages}

    results.append(dict(best_of("tshark -T fields", repeat, run_fields), startup=tshark_startup["wall"]))
    if verbose_tshark:
        results.append(dict(best_of("tshark -V", repeat, to_null(tshark(path, "-V"))),
                            startup=tshark_startup["wall"]))
    return results


def report(path: Path, facts: dict, results: list[dict], repeat: int) -> str:
    size = path.stat().st_size
    packets = results[0]["packets"]
    tshark = next(r for r in results if r["label"] == "tshark -T fields")
    version = subprocess.run(["tshark", "-v"], capture_output=True, text=True).stdout.splitlines()[0]

    def net(r: dict) -> float:
        return max(r["wall"] - r["startup"], 1e-3)

    lines = [
        f"kwire analyze vs {version.split(' (')[0]}, one core each (taskset -c 0), best of {repeat}",
        f"capture: {facts['traffic']} clients, {size / 1e6:.0f} MB pcap, {packets:,} packets ("
        + (f"rewritten with TCP segments of at most {facts['resegmented']} B" if facts.get("resegmented") else
           "lo: TCP segments up to 64 KiB") +
        f"), tcpdump -s 0; {facts['records_produced']:,} records of {RECORD_SIZE} B produced (half lz4) "
        f"and read back by a group of 2; kernel drops {facts['dropped']}",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
        "",
        f"{'decoder':<17} {'wall s':>7} {'start s':>7} {'MB/s':>7} {'net MB/s':>8} {'net pkt/s':>9} {'CPU s':>6} "
        f"{'ratio':>6} {'net ratio':>9} {'CPU ratio':>9}",
    ]
    for r in results:
        lines.append(f"{r['label']:<17} {r['wall']:7.2f} {r['startup']:7.2f} {size / r['wall'] / 1e6:7.1f} "
                     f"{size / net(r) / 1e6:8.1f} {packets / net(r):9,.0f} {r['cpu']:6.2f} "
                     f"{tshark['wall'] / r['wall']:5.2f}x {net(tshark) / net(r):8.2f}x {tshark['cpu'] / r['cpu']:8.2f}x")
    decode = next(r for r in results if r["label"] == "kwire decode")
    analyze = next(r for r in results if r["label"] == "kwire analyze")
    lines += [
        "",
        "start s: the same program on (almost) nothing (kwire: interpreter + imports; tshark: 20 packets);",
        "net = wall - start.  ratio = tshark -T fields time / this decoder's (> 1: faster than tshark);",
        "CPU ratio: the same with user+sys CPU time, steadier than wall time on a busy machine",
        f"messages: kwire {decode['exchanges']:,} exchanges (request + response), tshark "
        f"{tshark.get('messages', 0):,} Kafka messages; kwire warnings {decode['warnings']}, "
        f"findings {analyze.get('findings')}",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=200, help="capture size to build (MB, default 200)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each decoder; the best counts (default 3)")
    ap.add_argument("--keep", action="store_true", help="keep the captures built in the temp dir for the next run")
    ap.add_argument("--traffic", choices=[*TRAFFIC, "both"], default="both", help="which clients' traffic (default both)")
    ap.add_argument("--capture-dir", type=Path, help="where the captures are (built there if missing; always kept)")
    ap.add_argument("--mss", type=int, default=0,
                    help="also measure a copy with TCP segments of at most MSS bytes, as Ethernet carries them "
                         "(1448: a 1500-byte MTU); default 0: only the loopback capture as recorded")
    ap.add_argument("--tshark-verbose", action="store_true", help="also time tshark -V (text tree of every packet)")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "PATH", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        mode, path, port = args.child
        return child_main(mode, path, int(port))
    directory = args.capture_dir or Path(tempfile.gettempdir())
    directory.mkdir(parents=True, exist_ok=True)
    blocks = []
    for traffic in TRAFFIC if args.traffic == "both" else [args.traffic]:
        path = directory / f"kwire-bench-analyze-{traffic}-{args.size_mb}mb.pcap"
        meta = path.with_name(path.name + ".json")
        try:
            if path.exists() and meta.exists():
                facts = json.loads(meta.read_text())
                log(f"reusing {path} ({path.stat().st_size / 1e6:.0f} MB)")
            else:
                log(f"building a {args.size_mb} MB capture of {traffic} traffic at {path}")
                facts = build_capture(path, args.size_mb, traffic)
                meta.write_text(json.dumps(facts))
                log(f"built in {facts['build_seconds']} s: {facts}")
            results = measure(path, facts["port"], args.repeat, args.tshark_verbose)
            blocks.append(report(path, facts, results, args.repeat))
            if args.mss:
                cut = path.with_name(f"{path.stem}-mss{args.mss}.pcap")
                if not cut.exists():
                    log(f"rewriting {path.name} with segments of at most {args.mss} bytes")
                    log(f"{resegment(path, cut, args.mss):,} packets in {cut}")
                results = measure(cut, facts["port"], args.repeat, args.tshark_verbose)
                blocks.append(report(cut, dict(facts, resegmented=args.mss), results, args.repeat))
        finally:
            if not (args.keep or args.capture_dir):
                for p in (path, meta, path.with_name(f"{path.stem}-mss{args.mss}.pcap")):
                    p.unlink(missing_ok=True)
    print("\n\n".join(blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
