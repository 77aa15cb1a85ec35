"""Real captures for the analyzer's tests and benchmark: tcpdump or dumpcap recording real Kafka
clients on the loopback interface, and tshark reading the same files as an independent oracle.

Three parts:

* ``capture(ports, path, tool=...)``: a context manager around tcpdump (pcap) or dumpcap
  (pcapng).  It returns only once the capture really records (a marker datagram sent through
  the loopback shows up in the file) and, on exit, waits until everything sent before the exit
  is in the file (a second marker) before stopping the tool with SIGINT.  Capture tools read
  the kernel's packet ring in blocks handed over on a timer: stopped right after the traffic,
  they lose what was not handed over yet (here tcpdump without ``--immediate-mode`` lost all
  117 packets of a one-second run, dumpcap, which has no such switch, 2 of 6), so "the tool
  said it was listening" and "the tool exited" are not enough on their own.
* ``tshark_pdus(path, ports)`` / ``tshark_fields(...)``: tshark's dissection of a capture, one
  ``TsharkPdu`` per Kafka (or MongoDB) message, from tshark's PDML output.  PDML, because it is
  the one output that keeps each message of a frame apart (a frame may complete several Kafka
  messages; ``-T fields``/``json``/``ek`` merge their fields per frame) and keeps the nesting
  (which partition belongs to which topic).
* Scenario drivers (``run_scenario(name)``): each starts its own peer (kwire's
  ``EmbeddedBroker`` or librdkafka's mock cluster), captures real clients doing real work, and
  returns what the clients themselves reported (records delivered, consumed, offsets committed,
  assignments handed to their callbacks) next to the capture file, for the tests to compare
  with what the analyzer decodes from the capture.  Runs are cached per process, so the test
  files share them.

Every wait here is bounded in time and in count; a tool that misbehaves fails the run with its
own output in the message.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiokafka
import confluent_kafka
import kafka
from confluent_kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from kwire.broker import EmbeddedBroker

__all__ = [
    "ON_MOCK",
    "RUNS",
    "RUN_IDS",
    "CaptureResult",
    "ScenarioRun",
    "TsharkPartition",
    "TsharkPdu",
    "capture",
    "established_connections",
    "run_scenario",
    "tshark_fields",
    "tshark_pdus",
]

CAPTURE_BUFFER_MIB = 128  # the kernel ring the capture tools read from
_SCAN_CHUNK = 8 << 20  # bytes of a capture file read at a time when looking for a marker
QUIET = {"log_level": 0}  # librdkafka: the brokers closing idle connections at the end is not news

# -------------------------------------------------------------------------------------------------
# Capturing


@dataclass
class CaptureResult:
    """What a finished capture left: the file and the tool's own account of it."""

    path: Path
    tool: str
    ports: list[int]
    output: str = ""  #: the tool's stderr (its packet counts are there)
    returncode: int | None = None

    @property
    def dropped(self) -> int | None:
        """Packets the kernel dropped because the tool did not keep up, as the tool reports it."""
        m = re.search(r"(\d+) packets? dropped by kernel", self.output)  # tcpdump
        if m is None:
            m = re.search(r"received/dropped on interface .*: \d+/(\d+)", self.output)  # dumpcap
        return None if m is None else int(m.group(1))


class _Marker:
    """Datagrams sent to ourselves through the loopback to see what the capture file holds.

    The capture filter lets this UDP port through.  Each wait sends datagrams that share a
    random prefix; ``seen_in(path, prefix)`` looks for it in the file, reading only what was
    added since the last look (capture files get big)."""

    def __init__(self) -> None:
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx.bind(("127.0.0.1", 0))
        self.port = self.rx.getsockname()[1]
        self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._offset = 0  # bytes of the file already searched

    @staticmethod
    def prefix() -> bytes:
        return b"kwire-capture-marker-" + secrets.token_hex(8).encode() + b"-"

    def send(self, prefix: bytes, seq: int) -> None:
        self.tx.sendto(prefix + b"%d" % seq, ("127.0.0.1", self.port))

    def seen_in(self, path: Path, prefix: bytes) -> bool:
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return False
        with f:
            # Resume a little before where the last look ended: a prefix may straddle that point.
            start = max(self._offset - len(prefix), 0)
            while True:  # ends at the end of the file: each turn moves ``start`` forward
                f.seek(start)
                data = f.read(_SCAN_CHUNK)
                found = data.find(prefix)
                if found >= 0:
                    self._offset = start + found + len(prefix)
                    return True
                self._offset = start + len(data)
                if len(data) < _SCAN_CHUNK:
                    return False
                start += len(data) - len(prefix)

    def close(self) -> None:
        self.rx.close()
        self.tx.close()


def _port_filter(ports: Iterable[int], exclude_connections: Iterable[tuple[int, int]]) -> str:
    tcp = " or ".join(f"tcp port {p}" for p in ports)
    expr = f"({tcp})"
    excluded = sorted(set(exclude_connections))
    if excluded:
        expr += " and not (" + " or ".join(f"(tcp port {c} and tcp port {s})" for c, s in excluded) + ")"
    return expr


def _command(tool: str, path: Path, bpf: str) -> list[str]:
    if tool == "tcpdump":
        # --immediate-mode: hand each packet over at once (else a whole ring block can be lost
        # at SIGINT); -U: write each packet to the file at once; -s 0: whole packets.
        # -B: in immediate mode libpcap gives each packet a ring slot as big as the interface's MTU
        # (64 KiB on lo), so the default 2 MiB ring holds ~30 packets and drops bursts whenever
        # tcpdump is not scheduled at once; 128 MiB holds thousands.
        cmd = ["tcpdump", "-i", "lo", "--immediate-mode", "-U", "-B", str(CAPTURE_BUFFER_MIB * 1024), "-s", "0",
               "-w", str(path)]
        if os.geteuid() == 0:
            cmd += ["-Z", "root"]  # don't switch to the tcpdump user, who may not write to path's directory
        return [*cmd, bpf]
    if tool == "dumpcap":
        return ["dumpcap", "-i", "lo", "-B", str(CAPTURE_BUFFER_MIB), "-s", "0", "-f", bpf,
                "-w", str(path)]  # pcapng is its default
    raise ValueError(f"unknown capture tool {tool!r} (tcpdump or dumpcap)")


@contextmanager
def capture(ports: Iterable[int], path: str | os.PathLike, tool: str = "tcpdump", *,
            exclude_connections: Iterable[tuple[int, int]] = (), start_timeout: float = 15.0,
            stop_timeout: float = 15.0) -> Iterator[CaptureResult]:
    """Capture the loopback traffic of TCP ``ports`` into ``path`` while the block runs.

    ``exclude_connections`` ((client port, server port) pairs) leaves out connections that already
    existed (a capture must not start in the middle of a conversation the test did not plan for)."""
    ports = sorted(set(ports))
    path = Path(path)
    marker = _Marker()
    bpf = f"{_port_filter(ports, exclude_connections)} or (udp port {marker.port})"
    result = CaptureResult(path, tool, ports)
    errors = tempfile.TemporaryFile()  # not a pipe: nobody reads it while the tool runs, and a full pipe would block it
    proc = subprocess.Popen(_command(tool, path, bpf), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=errors)

    def tool_output() -> str:
        errors.seek(0)
        return errors.read().decode(errors="replace")

    try:
        ready = ("listening on", "Capturing on")
        _wait_for(lambda: any(r in tool_output() for r in ready) or proc.poll() is not None, start_timeout,
                  lambda: f"{tool} did not start capturing: {tool_output()!r}")
        if proc.poll() is not None:
            raise RuntimeError(f"{tool} exited with {proc.returncode}: {tool_output()}")
        _wait_for_marker(marker, path, proc, start_timeout, f"{tool} is running but records nothing", tool_output)
        yield result
        # Everything sent before this marker reached the file once the marker has.
        _wait_for_marker(marker, path, proc, stop_timeout, f"{tool} did not write the end of the traffic",
                         tool_output)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        result.returncode = proc.returncode
        result.output = tool_output()
        errors.close()
        marker.close()


def _wait_for(condition, timeout: float, why, step: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / step) + 2):
        if condition():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(step)
    raise TimeoutError(why())


def _wait_for_marker(marker: _Marker, path: Path, proc, timeout: float, what: str, tool_output) -> None:
    """Send marker datagrams (one every 50 ms, bounded) until the file holds one of them."""
    prefix = marker.prefix()
    deadline = time.monotonic() + timeout
    seen = False
    for seq in range(int(timeout / 0.05) + 2):
        marker.send(prefix, seq)
        time.sleep(0.05)
        seen = marker.seen_in(path, prefix)
        if seen or proc.poll() is not None or time.monotonic() > deadline:
            break
    if proc.poll() is not None:
        raise RuntimeError(f"{what}: it exited with {proc.returncode}: {tool_output()}")
    if not seen:
        raise TimeoutError(f"{what} within {timeout}s: {tool_output()!r}")


def established_connections(server_ports: Iterable[int]) -> set[tuple[int, int]]:
    """(client port, server port) of the TCP connections open now to ``server_ports`` on this
    machine (from /proc/net/tcp and tcp6): the conversations to leave out of a capture started
    afterwards.  Pairs, not client ports alone: the kernel gives a client port in use towards one
    server to a new connection towards another, and that one must be captured."""
    wanted = set(server_ports)
    found: set[tuple[int, int]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, remote = int(parts[1].rsplit(":", 1)[1], 16), int(parts[2].rsplit(":", 1)[1], 16)
            if remote in wanted:
                found.add((local, remote))
            elif local in wanted and remote:
                found.add((remote, local))
    return found


# -------------------------------------------------------------------------------------------------
# tshark


@dataclass
class TsharkPartition:
    """One topic-partition entry of a message as tshark shows it."""

    topic: str | None
    partition: int
    fields: dict[str, list[str]]  #: the entry's own fields (not those of its record batches)
    records: int | None  #: records tshark dissected under the entry (v2 records and legacy messages);
    #: None when tshark says it could not decompress them

    def first(self, name: str, default: str | None = None) -> str | None:
        values = self.fields.get(name)
        return values[0] if values else default


@dataclass
class TsharkPdu:
    """One message tshark dissected: where it is, its header fields and its partitions."""

    frame: int
    index: int  #: its place among the messages tshark found in the same frame
    protocol: str  #: 'kafka' or 'mongo'
    top: dict[str, str]  #: the message's own top-level fields (first value of each)
    fields: dict[str, list[str]]  #: every named field anywhere under the message, in order
    partitions: list[TsharkPartition]
    expert: list[str]  #: tshark's expert messages (unsupported version, malformed...)
    #: tshark does not know the message's own version (an ApiVersions response listing versions
    #: tshark does not know carries the same expert info, but for other APIs: that does not count)
    unsupported_version: bool = False
    src_port: int = 0  #: TCP ports of the frame that completed the message
    dst_port: int = 0

    def get(self, name: str, default: str | None = None) -> str | None:
        if name in self.top:
            return self.top[name]
        values = self.fields.get(name)
        return values[0] if values else default

    def int(self, name: str) -> int | None:
        value = self.get(name)
        return None if value in (None, "") else int(value, 0)

    # Kafka
    @property
    def is_request(self) -> bool:
        return "kafka.request_key" in self.top

    @property
    def api_key(self) -> int | None:
        return self.int("kafka.api_key")

    @property
    def api_version(self) -> int | None:
        return self.int("kafka.api_version" if self.is_request else "kafka.response.version")

    @property
    def correlation_id(self) -> int | None:
        return self.int("kafka.correlation_id")

    @property
    def length(self) -> int | None:
        """The message's size prefix (the bytes after it)."""
        return self.int("kafka.len")

    @property
    def request_missing(self) -> bool:
        """A response tshark could not pair (it does not keep requests of versions it does not know)."""
        return "kafka.request_missing" in self.fields

    @property
    def malformed(self) -> bool:
        return "_ws.malformed" in self.fields or "kafka.pdu_length_mismatch" in self.fields


def _tshark_command(path, ports: Iterable[int], decode_as: str) -> list[str]:
    cmd = ["tshark", "-n", "-r", os.fspath(path)]
    for port in sorted(set(ports)):
        cmd += ["-d", f"tcp.port=={port},{decode_as}"]
    return [*cmd, "-Y", decode_as, "-T", "pdml"]


def tshark_pdus(path: str | os.PathLike, ports: Iterable[int], decode_as: str = "kafka",
                timeout: float = 300) -> list[TsharkPdu]:
    """Every message tshark dissects in the capture, in frame order (``decode_as``: 'kafka' or
    'mongo', on the TCP ``ports``)."""
    proc = subprocess.Popen(_tshark_command(path, ports, decode_as), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    timer = threading.Timer(timeout, proc.kill)  # bounded: a stuck tshark fails the caller
    timer.start()
    stderr: list[bytes] = []
    drain = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    drain.start()
    try:
        pdus = list(_parse_pdml(proc.stdout, decode_as))
        proc.wait()
    finally:
        timer.cancel()
        drain.join(10)
    if proc.returncode != 0:
        raise RuntimeError(f"tshark failed ({proc.returncode}): {b''.join(stderr).decode(errors='replace')}")
    return pdus


def tshark_fields(path: str | os.PathLike, ports: Iterable[int], fields: Iterable[str],
                  decode_as: str = "kafka") -> list[dict[str, object]]:
    """One row per message: ``frame``, ``index`` and, for each field asked for, the list of its
    values under that message (empty when tshark shows none)."""
    fields = list(fields)
    return [{"frame": p.frame, "index": p.index, **{f: list(p.fields.get(f, ())) for f in fields}}
            for p in tshark_pdus(path, ports, decode_as)]


def _parse_pdml(stream, protocol: str) -> Iterator[TsharkPdu]:
    frame = 0
    for _event, elem in ET.iterparse(stream, events=("end",)):
        if elem.tag != "packet":
            continue
        index = 0
        ports = (0, 0)
        for proto in elem.iter("proto"):
            name = proto.get("name")
            if name == "geninfo":
                for f in proto.iter("field"):
                    if f.get("name") == "num":
                        frame = int(f.get("show"))
            elif name == "tcp":
                shown = {f.get("name"): f.get("show") for f in proto if f.get("name") in ("tcp.srcport", "tcp.dstport")}
                ports = (int(shown.get("tcp.srcport", 0)), int(shown.get("tcp.dstport", 0)))
            elif name == protocol:
                pdu = _pdu(frame, index, protocol, proto)
                pdu.src_port, pdu.dst_port = ports
                yield pdu
                index += 1
        elem.clear()  # PDML of a big capture is huge: keep one packet at a time


def _collect(elem, into: dict[str, list[str]]) -> None:
    for child in elem:
        name = child.get("name")
        if child.tag == "proto" and name:
            into.setdefault(name, []).append(child.get("showname") or "")
        elif name:
            into.setdefault(name, []).append(child.get("show", ""))
        _collect(child, into)


def _pdu(frame: int, index: int, protocol: str, proto) -> TsharkPdu:
    top = {}
    unsupported = False
    for child in proto:
        name = child.get("name")
        if name and name not in top:
            top[name] = child.get("show", "")
        if name in ("kafka.api_version", "kafka.response.version"):
            unsupported = any(e.get("name") == "kafka.unsupported_api_version" for e in child.iter())
    fields: dict[str, list[str]] = {}
    _collect(proto, fields)
    expert = fields.get("_ws.expert.message", [])
    partitions: list[TsharkPartition] = []
    _partitions(proto, None, partitions)
    return TsharkPdu(frame, index, protocol, top, fields, partitions, list(expert), unsupported)


def _partitions(elem, topic: str | None, out: list[TsharkPartition]) -> None:
    """Entries holding a ``kafka.partition_id`` of their own, each under the nearest enclosing
    ``kafka.topic_name``."""
    own: dict[str, list[str]] = {}
    for child in elem:
        name = child.get("name")
        if name:
            own.setdefault(name, []).append(child.get("show", ""))
    if "kafka.topic_name" in own:
        topic = own["kafka.topic_name"][0]
    ids = own.get("kafka.partition_id", [])
    if len(ids) > 1:  # a bare array of partition ids (OffsetFetch request): one entry each
        out.extend(TsharkPartition(topic, int(i), {"kafka.partition_id": [i]}, 0) for i in ids)
        return
    if ids:
        nested: dict[str, list[str]] = {}
        _collect(elem, nested)
        records = len(nested.get("kafka.record_attributes", ())) + _legacy_messages(elem)
        if any("Cannot decompress" in (e.get("show") or "") for e in elem.iter()):
            records = None
        out.append(TsharkPartition(topic, int(ids[0]), own, records))
        return
    for child in elem:
        if child.tag == "field" and len(child):
            _partitions(child, topic, out)


def _legacy_messages(elem) -> int:
    """Messages of a magic 0/1 message set, counting those inside compressed wrappers rather
    than the wrappers (a wrapper's value is the compressed inner message set)."""
    count = 0
    for child in elem:
        names = {c.get("name") for c in child}
        if "kafka.message_crc" in names:
            codec = next((c.get("show") for c in child if c.get("name") == "kafka.message_codec"), "0")
            inner = _legacy_messages(child)
            count += inner if codec not in ("0", None) else 1
        elif len(child):
            count += _legacy_messages(child)
    return count


# -------------------------------------------------------------------------------------------------
# What the clients report


@dataclass
class ClientFacts:
    """What one client told us about its own work."""

    client_id: str
    produced: Counter = field(default_factory=Counter)  #: (topic, partition) -> records delivered
    consumed: Counter = field(default_factory=Counter)  #: (topic, partition) -> records consumed
    refused: Counter = field(default_factory=Counter)  #: (topic, partition, error name) -> records refused
    #: offsets the client committed and the broker accepted, in order: (group, topic, partition, offset)
    commits: list[tuple[str, str, int, int]] = field(default_factory=list)
    #: (group, topic, partition) -> offset: what the group ended up with, when the client does not
    #: report each commit (kcat) and the cluster is asked afterwards
    final_commits: dict[tuple[str, str, int], int] = field(default_factory=dict)
    assignments: list[set[tuple[str, int]]] = field(default_factory=list)  #: each assignment handed to it
    member_id: str | None = None


@dataclass
class ScenarioRun:
    """A captured scenario: the file and what the peers said."""

    name: str
    capture: CaptureResult
    ports: list[int]  #: the broker ports
    clients: dict[str, ClientFacts]  #: by client id
    groups: dict[str, int] = field(default_factory=dict)  #: group -> generation the broker ended with
    seed: dict = field(default_factory=dict)  #: the seed scenario's facts (group, topic, partition, stale offset)

    @property
    def path(self) -> Path:
        return self.capture.path

    def produced(self) -> Counter:
        return sum((c.produced for c in self.clients.values()), Counter())

    def consumed(self) -> Counter:
        return sum((c.consumed for c in self.clients.values()), Counter())


def _records(n: int, topic: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    """Keyed records with headers, values of varied sizes (so batches hold several records)."""
    return [(b"key-%d" % i, (b"value-%d-" % i) * (1 + i % 17), [("n", b"%d" % i), ("topic", topic.encode())])
            for i in range(n)]


def _deadline_loop(seconds: float, step_count: int = 10_000) -> Iterator[int]:
    """Iterations until ``seconds`` have passed (and at most ``step_count``)."""
    deadline = time.monotonic() + seconds
    for i in range(step_count):
        if time.monotonic() > deadline:
            return
        yield i


def _confluent_produce(bootstrap: str, topic: str, n: int, facts: ClientFacts, **conf) -> None:
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            facts.produced[(msg.topic(), msg.partition())] += 1

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "client.id": facts.client_id,
                                         "acks": "all", "linger.ms": 5, **QUIET, **conf})
    for key, value, headers in _records(n, topic):
        producer.produce(topic, value=value, key=key, headers=headers, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(30)
    if left or errors:
        raise RuntimeError(f"{facts.client_id}: {left} records not delivered, errors {errors[:3]}")


def _confluent_consumer(bootstrap: str, group: str, topic: str, facts: ClientFacts, **conf):
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": facts.client_id,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 300, "partition.assignment.strategy": "range", **QUIET, **conf})

    def on_assign(c, partitions):
        facts.assignments.append({(tp.topic, tp.partition) for tp in partitions})

    consumer.subscribe([topic], on_assign=on_assign)
    return consumer


def _confluent_commit(consumer, facts: ClientFacts, group: str, offsets=None) -> None:
    kwargs = {"asynchronous": False}
    if offsets is not None:
        kwargs["offsets"] = offsets
    for tp in consumer.commit(**kwargs):
        if tp.error is not None:
            raise RuntimeError(f"{facts.client_id}: commit of {tp} failed")
        facts.commits.append((group, tp.topic, tp.partition, tp.offset))


def _confluent_consume_all(consumers: dict, n: int, seconds: float = 30) -> dict:
    """Poll every consumer (so none holds up a rebalance) until n records arrived; the last
    offset each consumer saw per partition."""
    positions: dict = {c: {} for c in consumers}
    total = 0
    for _ in _deadline_loop(seconds):
        if total >= n:
            break
        for consumer, facts in consumers.items():
            for m in consumer.consume(500, 0.1):
                if m.error() is not None:
                    raise RuntimeError(f"{facts.client_id}: {m.error()}")
                facts.consumed[(m.topic(), m.partition())] += 1
                positions[consumer][(m.topic(), m.partition())] = m.offset() + 1
                total += 1
    if total < n:
        raise RuntimeError(f"consumed {total} of {n} records")
    return positions


def _scenario_confluent(workdir: Path, tool: str) -> ScenarioRun:
    """(a) confluent-kafka: an lz4 producer (acks=all, keys, values, headers) and a consumer group
    of one member reading everything and committing, against kwire's broker."""
    topic, group, n = "orders-lz4", "billing", 300
    producer = ClientFacts("ck-producer")
    consumer_facts = ClientFacts("ck-consumer")
    with EmbeddedBroker(default_partitions=3) as broker:
        with capture([broker.port], workdir / f"confluent.{_ext(tool)}", tool) as cap:
            _confluent_produce(broker.bootstrap, topic, n, producer, **{"compression.type": "lz4"})
            consumer = _confluent_consumer(broker.bootstrap, group, topic, consumer_facts)
            try:
                _confluent_consume_all({consumer: consumer_facts}, n)
                _confluent_commit(consumer, consumer_facts, group)
                consumer_facts.member_id = consumer.memberid()
            finally:
                consumer.close()
        generation = _generation(broker, group)
    return ScenarioRun("confluent", cap, [broker.port], {f.client_id: f for f in (producer, consumer_facts)},
                       {group: generation})


def _scenario_kafka_python(workdir: Path, tool: str, *, api_version: tuple | None = None,
                           name: str = "kafka-python") -> ScenarioRun:
    """(b) kafka-python 3.0.12: producer and a consumer group of one member, against kwire's broker.

    ``api_version`` pins the protocol versions kafka-python speaks (it skips ApiVersions then):
    (2, 0, 0) keeps every request within what tshark 4.0's Kafka dissector knows."""
    topic, group, n = f"{name}-events", f"{name}-group", 200
    producer_facts = ClientFacts(f"{name}-producer")
    consumer_facts = ClientFacts(f"{name}-consumer")
    pinned = {"api_version": api_version} if api_version else {}
    with EmbeddedBroker(default_partitions=2) as broker:
        with capture([broker.port], workdir / f"{name}.{_ext(tool)}", tool) as cap:
            producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, client_id=producer_facts.client_id,
                                           acks="all", linger_ms=5, compression_type="gzip", **pinned)
            try:
                futures = [producer.send(topic, key=k, value=v, headers=h) for k, v, h in _records(n, topic)]
                producer.flush(30)
                for f in futures:
                    md = f.get(timeout=30)
                    producer_facts.produced[(md.topic, md.partition)] += 1
            finally:
                producer.close(10)
            # metadata_max_age_ms: kafka-python 3.0 may take the answer to its bootstrap Metadata
            # request for the one subscribe() asked, and leave the topic unknown (the assignment
            # empty) until its next refresh, 5 minutes by default (seen once under load).
            consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                                           client_id=consumer_facts.client_id, auto_offset_reset="earliest",
                                           enable_auto_commit=False, session_timeout_ms=10000,
                                           heartbeat_interval_ms=300, metadata_max_age_ms=1000, **pinned)

            class Listener(kafka.ConsumerRebalanceListener):
                def on_partitions_revoked(self, revoked):
                    pass

                def on_partitions_assigned(self, assigned):
                    consumer_facts.assignments.append({(tp.topic, tp.partition) for tp in assigned})

            try:
                consumer.subscribe([topic], listener=Listener())
                total = 0
                for _ in _deadline_loop(30):
                    if total >= n:
                        break
                    for tp, msgs in consumer.poll(timeout_ms=200).items():
                        consumer_facts.consumed[(tp.topic, tp.partition)] += len(msgs)
                        total += len(msgs)
                if total < n:
                    raise RuntimeError(f"kafka-python consumed {total} of {n}")
                offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1)
                           for tp in consumer.assignment()}
                consumer.commit(offsets)
                consumer_facts.commits += [(group, tp.topic, tp.partition, om.offset)
                                           for tp, om in sorted(offsets.items())]
                consumer_facts.member_id = consumer._coordinator._generation.member_id  # no public accessor
            finally:
                consumer.close()
        generation = _generation(broker, group)
    return ScenarioRun(name, cap, [broker.port],
                       {f.client_id: f for f in (producer_facts, consumer_facts)}, {group: generation})


def _mock_cluster():
    """librdkafka's mock cluster (3 brokers) and its bootstrap list; the returned producer owns it."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 3, **QUIET})
    brokers = owner.list_topics(timeout=10).brokers.values()
    return owner, sorted(b.port for b in brokers), ",".join(f"{b.host}:{b.port}" for b in brokers)


def _kcat(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    out = subprocess.run(["kcat", *args], input=input, capture_output=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"kcat {' '.join(args)} failed: {out.stderr.decode(errors='replace')}")
    return out


def _scenario_kcat(workdir: Path, tool: str) -> ScenarioRun:
    """(c) kcat (Debian's, on Debian's librdkafka) producing, then consuming in a group that commits,
    against librdkafka's mock cluster (3 brokers)."""
    topic, group, n = "kcat-lines", "kcat-group", 120
    owner, ports, bootstrap = _mock_cluster()
    producer_facts, consumer_facts = ClientFacts("kcat-producer"), ClientFacts("kcat-consumer")
    try:
        owner.list_topics(topic, timeout=10)  # auto-creates it (the mock gives it 4 partitions)
        # The owner's own connections are open already: keep them out of the capture.
        with capture(ports, workdir / f"kcat.{_ext(tool)}", tool,
                     exclude_connections=established_connections(ports)) as cap:
            lines = b"".join(b"key-%d\tvalue-%d %s\n" % (i, i, b"x" * (i % 40)) for i in range(n))
            out = _kcat("-b", bootstrap, "-P", "-t", topic, "-K", "\t", "-H", "origin=kcat", "-z", "lz4",
                        "-X", "acks=all", "-X", f"client.id={producer_facts.client_id}", "-D", "\n", input=lines)
            # Balanced consumer: joins the group, commits (kcat commits what it consumed) and exits at the end.
            out = _kcat("-b", bootstrap, "-G", group, "-e", "-J", "-X", "auto.offset.reset=earliest",
                        "-X", f"client.id={consumer_facts.client_id}", "-X", "enable.auto.commit=true",
                        "-X", "auto.commit.interval.ms=100", topic)
            for line in out.stdout.decode().splitlines():
                if line.startswith("{"):
                    m = json.loads(line)
                    consumer_facts.consumed[(m["topic"], m["partition"])] += 1
        # kcat reports neither its deliveries nor its commits: the cluster tells what it stored.
        partitions = owner.list_topics(topic, timeout=10).topics[topic].partitions
        checker = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
        try:
            for p in partitions:
                low, high = checker.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high > low:
                    producer_facts.produced[(topic, p)] = high - low
            for tp in checker.committed([TopicPartition(topic, p) for p in partitions], timeout=10):
                if tp.offset >= 0:
                    consumer_facts.final_commits[(group, tp.topic, tp.partition)] = tp.offset
        finally:
            checker.close()
    finally:
        owner.flush(1)
    return ScenarioRun("kcat", cap, ports, {f.client_id: f for f in (producer_facts, consumer_facts)})


def _scenario_legacy_refused(workdir: Path, tool: str) -> ScenarioRun:
    """librdkafka without ApiVersions (``api.version.request=false`` with
    ``broker.version.fallback=0.9.0``: Metadata v0, Produce v1 with gzip-compressed message sets
    of magic 1) against the mock cluster, which refuses Produce v1 with UNSUPPORTED_VERSION.

    librdkafka 2.x takes fallbacks of 0.10 and up as "ask with ApiVersions", so 0.9.0 is the only
    way to keep it to old versions, and neither kwire's broker (Produce v3 and up) nor the mock
    serves those: the producer's records are refused, which is what this capture shows - old
    versions that tshark's dissector knows completely, and error responses."""
    topic, n = "legacy-lines", 40
    legacy = {"api.version.request": False, "broker.version.fallback": "0.9.0"}
    owner, ports, bootstrap = _mock_cluster()
    producer_facts = ClientFacts("legacy-producer")
    try:
        owner.list_topics(topic, timeout=10)
        with capture(ports, workdir / f"legacy.{_ext(tool)}", tool,
                     exclude_connections=established_connections(ports)) as cap:
            def delivered(err, msg):
                if err is None:
                    producer_facts.produced[(msg.topic(), msg.partition())] += 1
                else:
                    producer_facts.refused[(msg.topic(), msg.partition(), err.name())] += 1

            producer = confluent_kafka.Producer({
                "bootstrap.servers": bootstrap, "client.id": producer_facts.client_id, "acks": "all",
                "linger.ms": 5, "compression.type": "gzip", "retries": 0, **legacy, **QUIET})
            for i in range(n):
                producer.produce(topic, value=b"legacy-%d " % i * (1 + i % 5), key=b"k%d" % i, on_delivery=delivered)
            left = producer.flush(30)
            del producer  # closes its connections inside the capture
            if left or sum(producer_facts.refused.values()) != n:
                raise RuntimeError(f"legacy producer: {left} left, refused {producer_facts.refused}")
    finally:
        owner.flush(1)
    return ScenarioRun("legacy-refused", cap, ports, {producer_facts.client_id: producer_facts})


def _scenario_seed(workdir: Path, tool: str) -> ScenarioRun:
    """(d) The seed's failure, on purpose: two confluent-kafka consumers, A then B, in one group with
    manual commits.  B's arrival moves partition p from A to B; B commits advancing offsets for p
    while A keeps committing its old offset for p with an explicit offsets list."""
    topic, group, n = "payments", "settlement", 60
    producer = ClientFacts("seed-producer")
    a, b = ClientFacts("consumer-A"), ClientFacts("consumer-B")
    with EmbeddedBroker(default_partitions=2) as broker:
        with capture([broker.port], workdir / f"seed.{_ext(tool)}", tool) as cap:
            _confluent_produce(broker.bootstrap, topic, n, producer)
            consumer_a = _confluent_consumer(broker.bootstrap, group, topic, a)
            consumer_b = None
            try:
                # A alone: it gets both partitions, reads everything, commits what it processed.
                positions = _confluent_consume_all({consumer_a: a}, n)[consumer_a]
                stale = {tp: min(off, 5) for tp, off in positions.items()}  # A "processed" 5 records of each
                _confluent_commit(consumer_a, a, group, [TopicPartition(t, p, o) for (t, p), o in stale.items()])
                # B joins: the group rebalances, one partition moves to B, which resumes at A's
                # committed offset and commits as it goes (a commit per batch: its offset climbs in steps).
                consumer_b = _confluent_consumer(broker.bootstrap, group, topic, b)
                moved, read = None, 0
                for _ in _deadline_loop(30):
                    _consume(consumer_a, a)  # A keeps polling: it must rejoin, and it heartbeats
                    batch = _consume(consumer_b, b, 4)
                    if batch:
                        read += len(batch)
                        last = batch[-1]
                        _confluent_commit(consumer_b, b, group,
                                          [TopicPartition(last.topic(), last.partition(), last.offset() + 1)])
                    if moved is None and len(a.assignments) >= 2 and b.assignments:
                        (moved,) = b.assignments[-1]
                    if moved is not None and read >= producer.produced[moved] - stale[moved]:
                        break
                if moved is None or read < producer.produced[moved] - stale[moved]:
                    raise RuntimeError(f"the group never moved a partition to consumer-B and B read {read} "
                                       f"records: A {a.assignments}, B {b.assignments}")
                stale_offset = stale[moved]
                # A, unaware, commits its old position for the partition it lost, again and again.
                for _ in range(3):
                    consumer_a.poll(0)
                    _confluent_commit(consumer_a, a, group, [TopicPartition(*moved, stale_offset)])
                a.member_id, b.member_id = consumer_a.memberid(), consumer_b.memberid()
            finally:
                consumer_a.close()
                if consumer_b is not None:
                    consumer_b.close()
        generation = _generation(broker, group)
    return ScenarioRun("seed", cap, [broker.port], {f.client_id: f for f in (producer, a, b)}, {group: generation},
                       seed={"group": group, "topic": moved[0], "partition": moved[1], "stale_offset": stale_offset,
                             "member_a": a.member_id, "member_b": b.member_id})


def _scenario_normal(workdir: Path, tool: str) -> ScenarioRun:
    """Normal traffic, nothing wrong on purpose: every real client doing ordinary work against
    kwire's broker.  A confluent-kafka producer; short kcat runs one after the other from the same
    host (each a new process with new connections, as scripts and shells run a CLI); a group of two
    confluent-kafka consumers (each join is KIP-394's two JoinGroups, the first answered
    MEMBER_ID_REQUIRED, and the second member's arrival rebalances the first) reading everything
    and committing; a kafka-python consumer group of one and an aiokafka producer."""
    topic, group, n = "normal-orders", "normal-billing", 120
    producer = ClientFacts("normal-producer")
    first, second = ClientFacts("normal-consumer-1"), ClientFacts("normal-consumer-2")
    kp_facts = ClientFacts("normal-kafka-python")
    aio_facts = ClientFacts("normal-aiokafka")
    kcat_runs = 12
    with EmbeddedBroker(default_partitions=2) as broker:
        with capture([broker.port], workdir / f"normal.{_ext(tool)}", tool) as cap:
            _confluent_produce(broker.bootstrap, topic, n, producer)
            for i in range(kcat_runs):  # separate short CLI runs: a line produced, or the metadata listed
                if i % 3 == 2:
                    _kcat("-b", broker.bootstrap, "-L", "-t", topic)
                else:
                    _kcat("-b", broker.bootstrap, "-P", "-t", topic, "-X", "acks=all", input=b"kcat line %d\n" % i)
            consumer_1 = _confluent_consumer(broker.bootstrap, group, topic, first)
            consumer_2 = None
            try:
                total = n + kcat_runs - kcat_runs // 3
                _confluent_consume_all({consumer_1: first}, 1)
                consumer_2 = _confluent_consumer(broker.bootstrap, group, topic, second)
                _confluent_commit(consumer_1, first, group)
                read = sum(first.consumed.values())
                for _ in _deadline_loop(30):
                    if read >= total and len(second.assignments) >= 1 and len(first.assignments) >= 2:
                        break
                    for consumer, facts in ((consumer_1, first), (consumer_2, second)):
                        batch = _consume(consumer, facts)
                        read += len(batch)
                        if batch:  # each batch processed, its position committed
                            _confluent_commit(consumer, facts, group)
                if read < total or not first.commits:
                    raise RuntimeError(f"the group read {read} of {total} records, committed {first.commits}")
            finally:
                consumer_1.close()
                if consumer_2 is not None:
                    consumer_2.close()
            kp = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="normal-audit",
                                     client_id=kp_facts.client_id, auto_offset_reset="earliest",
                                     enable_auto_commit=False)
            try:
                kp.partitions_for_topic(topic)  # the topic's metadata before the join: else no assignment
                kp.subscribe([topic])
                got = 0
                for _ in _deadline_loop(30):
                    if got >= total:
                        break
                    for tp, msgs in kp.poll(timeout_ms=200).items():
                        kp_facts.consumed[(tp.topic, tp.partition)] += len(msgs)
                        got += len(msgs)
                if got < total:
                    raise RuntimeError(f"kafka-python read {got} of {total} records")
                kp.commit()
            finally:
                kp.close()
            asyncio.run(_aiokafka_produce(broker.bootstrap, topic, 20, aio_facts))
    clients = (producer, first, second, kp_facts, aio_facts)
    return ScenarioRun("normal", cap, [broker.port], {f.client_id: f for f in clients})


async def _aiokafka_produce(bootstrap: str, topic: str, n: int, facts: ClientFacts) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=facts.client_id, acks="all")
    await producer.start()
    try:
        for key, value, _headers in _records(n, topic):
            md = await producer.send_and_wait(topic, value=value, key=key)
            facts.produced[(md.topic, md.partition)] += 1
    finally:
        await producer.stop()


def _consume(consumer, facts: ClientFacts, max_records: int = 50) -> list:
    """One short poll of a confluent-kafka consumer; its records are counted in ``facts``."""
    batch = []
    for m in consumer.consume(max_records, 0.05):
        if m.error() is not None:
            raise RuntimeError(f"{facts.client_id}: {m.error()}")
        facts.consumed[(m.topic(), m.partition())] += 1
        batch.append(m)
    return batch


def _generation(broker: EmbeddedBroker, group: str) -> int | None:
    """The generation the broker's coordinator holds for the group (after its members left it)."""
    def read():
        g = broker.state.coordinator.group(group)
        return None if g is None else g.generation_id
    return broker.call(read)


def _ext(tool: str) -> str:
    return "pcapng" if tool == "dumpcap" else "pcap"


SCENARIOS = {
    "confluent": _scenario_confluent,
    "kafka-python": _scenario_kafka_python,
    "kcat": _scenario_kcat,
    "seed": _scenario_seed,
    "normal": _scenario_normal,
    "legacy-refused": _scenario_legacy_refused,
    "kafka-python-2.0": lambda workdir, tool: _scenario_kafka_python(workdir, tool, api_version=(2, 0, 0),
                                                                     name="kafka-python-2.0"),
}

#: the runs the tests read: (scenario, capture tool); dumpcap writes pcapng, tcpdump pcap
RUNS = [("confluent", "tcpdump"), ("confluent", "dumpcap"), ("kafka-python", "tcpdump"), ("kcat", "tcpdump"),
        ("seed", "tcpdump"), ("legacy-refused", "tcpdump"), ("kafka-python-2.0", "tcpdump")]
RUN_IDS = [f"{name}-{tool}" for name, tool in RUNS]
ON_MOCK = frozenset(("kcat", "legacy-refused"))  #: scenarios against librdkafka's mock cluster

_runs: dict[tuple[str, str], ScenarioRun] = {}
_workdir: Path | None = None
_lock = threading.Lock()


def run_scenario(name: str, tool: str = "tcpdump") -> ScenarioRun:
    """Run a scenario once per process (tests of both files share it) and return what it left."""
    global _workdir
    with _lock:
        key = (name, tool)
        if key not in _runs:
            if _workdir is None:
                _workdir = Path(tempfile.mkdtemp(prefix="kwire-realcap-"))
                atexit.register(shutil.rmtree, _workdir, True)
            workdir = _workdir / f"{name}-{tool}"
            workdir.mkdir()
            _runs[key] = SCENARIOS[name](workdir, tool)
        return _runs[key]
