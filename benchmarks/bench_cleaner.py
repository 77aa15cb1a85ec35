"""The log cleaner benchmark: kwire's log compaction against its ceilings, side by side in one run.

Three cases, each printed with its ratio:

1. **Cleaner throughput.**  A partition log of keyed records (``--keys`` keys rewritten many
   times, one batch in ``--compressed-every`` lz4/zstd-compressed) is built with kwire's storage
   API (``PartitionLog.append``) in a temp dir and copied before each run; one
   ``Cleaner.clean(log)`` is timed (offset map, copy, fsync, swap).  MB/s = bytes of the segments
   cleaned / time.  The ceiling, measured in the same run on the same copy of the segment files
   (alternated with the cleaner): plain Python ``os.read`` of every ``.log`` file and ``os.write``
   of the same bytes into a new file, in the cleaner's io buffer size, without and with an
   ``fsync`` per file: the least any cleaner must do.  Both read from the page cache (the files
   were just written or copied; nothing here can drop it).
2. **Produce with the cleaner busy.**  Two ``kwire broker`` subprocesses (``--fsync never``), one
   with the cleaner on (``log_cleaner_backoff_ms`` small) and one with ``log_cleaner_enable =
   false``.  Each has a compacted topic (segment.bytes 1 MiB, min.cleanable.dirty.ratio 0.01)
   kept dirty by a background writer (keyed 1 KiB values at ``--dirty-mbps``), so that the first
   broker's cleaner runs all the time.  confluent-kafka produces 1 KiB values to another topic:
   throughput (flat out, linger.ms 10) and p50 latency (1,000 msgs/s, linger.ms 0, librdkafka's
   produce()-to-delivery-report time).  The two brokers are measured in alternated slices, the
   writer running for the one measured; ratios cleaner-on/cleaner-off (latency: off/on, so
   above 1 is better either way; the goal is >= 0.8).
4. **The event loop's lag while a clean runs** (``--only lag``; not in the default run).  In
   this process, an asyncio loop sleeps 1 ms over and over and records how late each wake-up is,
   while a ``Cleaner.clean`` of a fresh copy of case 1's log (``--lag-log-mb``) runs in another
   thread: (a) the clean in that thread, as the broker's cleaner used to do, (b) the clean in
   the worker process (``Cleaner(worker=...)``: the thread only waits and swaps), (c) no clean
   (the thread sleeps as long).  Alternated, ``--repeat`` each.  This is the broker's share of
   the produce-latency goal without its I/O and locks: the GIL the cleaner holds.
5. **Appends to the partition being cleaned** (``--only append``; not in the default run).  In
   this process, a thread appends one batch of 5 keyed 1 KiB records every ms to a compacted log
   (case 2's dirty topic: 1 MiB segments, ``--dirty-keys`` keys) and times each
   ``PartitionLog.append``, while the main thread cleans that log over and over, or sleeps as long;
   ``--repeat`` alternated slices of ``--append-seconds`` each.  What a swap costs the appends
   that wait for the partition lock (the event loop's appends in the broker), without the network
   and the clients of case 2: robust to a loaded machine, where case 2's p50 is not.
3. **1,000 keys rewritten N times.**  confluent-kafka writes ``--rewrites`` records cycling over
   ``--rewrite-keys`` keys to a compacted topic of a ``kwire broker`` subprocess; its VmRSS is
   sampled every 100 ms.  At the end (after waiting for the cleaner to catch up, bounded): the
   partition's segments and size against the size of one record per key, the RSS first/last/max,
   and a check that a consumer reading from offset 0 gets every key's last value.

    python benchmarks/bench_cleaner.py                       # about 2-3 minutes; progress on stderr
    python benchmarks/bench_cleaner.py --json                # every figure as JSON on stdout
    python benchmarks/bench_cleaner.py --log-mb 256 --repeat 5 --slices 6 --rewrites 1000000
    python benchmarks/bench_cleaner.py --only cleaner        # one case: cleaner, produce, rewrite, lag, append

MB = 10^6 bytes.  Progress goes to stderr.  Figures and the command go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from peers import process_rss_bytes, terminate  # same directory

from kwire.broker.storage import Cleaner, CleanerConfig, LogConfig, PartitionLog
from kwire.broker.storage.cleaner_checkpoint import read_cleaner_checkpoint
from kwire.broker.storage.cleaner_worker import CleanerWorker
from kwire.protocol.records import Compression, RecordBatchBuilder, iter_batches

CLIENT_LOG_LEVEL = 3  # librdkafka: errors only
MIB = 1 << 20
_CLEANED = re.compile(r"cleaned (\S+): (\d+) bytes -> (\d+) bytes")


def log(msg: str) -> None:
    print(f"[bench_cleaner {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- 1. cleaner throughput against read + write ------------------------------------------------------
def build_log(directory: Path, *, mb: float, keys: int, value_size: int, per_batch: int, compressed_every: int,
              segment_bytes: int, seed: int = 1) -> dict:
    """A compacted partition log of about ``mb`` MB of keyed records, closed; what it holds."""
    rng = random.Random(seed)
    pool = os.urandom(4096)
    config = LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(directory, config)
    codecs = (Compression.LZ4, Compression.ZSTD)
    target = int(mb * 1e6)
    n_batches = n_records = compressed = 0
    ts = 1_000
    try:
        while plog.size_in_bytes < target:
            codec = Compression.NONE
            if compressed_every and n_batches % compressed_every == compressed_every - 1:
                codec = codecs[compressed % len(codecs)]
                compressed += 1
            b = RecordBatchBuilder(compression=codec)
            for _ in range(per_batch):
                k = rng.randrange(keys)
                # half random bytes, half a repeated pattern: the compressed batches shrink about 2x
                start = rng.randrange(len(pool) - value_size)
                value = (b"%08d:" % n_records + pool[start:start + value_size // 2]).ljust(value_size, b"v")
                b.append(b"key-%06d" % k, value[:value_size], ts)
                n_records += 1
                ts += 1
            plog.append(b.build(), now_ms=ts)
            n_batches += 1
        plog.roll(now_ms=ts)  # everything written is cleanable: nothing left in the active segment
        size = plog.size_in_bytes
        segments = len([s for s in plog.segments if s.size])
    finally:
        plog.close()
    return {"bytes": size, "segments": segments, "records": n_records, "batches": n_batches,
            "compressed_batches": compressed, "keys": keys, "value_size": value_size, "records_per_batch": per_batch,
            "segment_bytes": segment_bytes}


def ceiling_run(directory: Path, out_dir: Path, chunk: int, fsync: bool) -> dict:
    """Read every .log file of ``directory`` and write its bytes into a new file (one per segment)."""
    files = sorted(directory.glob("*.log"))
    total = 0
    t0 = time.perf_counter()
    for path in files:
        src = os.open(path, os.O_RDONLY)
        dst = os.open(out_dir / (path.name + ".copy"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            while True:
                data = os.read(src, chunk)
                if not data:
                    break
                view = memoryview(data)
                while view:
                    view = view[os.write(dst, view):]
                total += len(data)
            if fsync:
                os.fsync(dst)
        finally:
            os.close(src)
            os.close(dst)
    elapsed = time.perf_counter() - t0
    for path in out_dir.glob("*.copy"):
        path.unlink()
    return {"bytes": total, "seconds": elapsed, "mb_per_s": total / elapsed / 1e6}


def cleaner_run(directory: Path, config: LogConfig, cleaner_config: CleanerConfig,
                worker: CleanerWorker | None = None) -> dict:
    plog = PartitionLog(directory, config, clean_shutdown=True)
    try:
        t0 = time.perf_counter()
        result = Cleaner(cleaner_config, worker=worker).clean(plog, now_ms=int(time.time() * 1000))
        elapsed = time.perf_counter() - t0
        if result is None:
            raise RuntimeError("the cleaner found nothing to clean")
        segments_after = len([s for s in plog.segments if s.size])
        size_after = plog.size_in_bytes
    finally:
        plog.close()
    return {"bytes": result.bytes_before, "bytes_after": result.bytes_after, "size_after": size_after,
            "seconds": elapsed, "mb_per_s": result.bytes_before / elapsed / 1e6,
            "records_read": result.records_read, "records_removed": result.records_removed,
            "segments_before": result.segments_before, "segments_after": segments_after}


def case_cleaner(args, work: Path) -> dict:
    template = work / "template" / "bench-0"
    segment_bytes = int(args.segment_mb * MIB)
    log(f"cleaner: building a log of ~{args.log_mb:g} MB ({args.keys:,} keys, {args.value_size} B values, "
        f"{args.records_per_batch} records a batch, one batch in {args.compressed_every} lz4/zstd, "
        f"segment.bytes {segment_bytes:,})")
    t0 = time.perf_counter()
    built = build_log(template, mb=args.log_mb, keys=args.keys, value_size=args.value_size,
                      per_batch=args.records_per_batch, compressed_every=args.compressed_every,
                      segment_bytes=segment_bytes)
    log(f"cleaner: built {built['bytes'] / 1e6:,.1f} MB, {built['segments']} segments, {built['records']:,} records "
        f"in {time.perf_counter() - t0:.1f} s")
    config = LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    cleaner_config = CleanerConfig()
    # "cleaner": Cleaner.clean in this thread; "cleaner (worker)": the map and the copy in the
    # worker process (kwire.log.cleaner.worker.process), started before the runs.
    cleaners = [{"thread": "cleaner", "worker": "cleaner (worker)"}[m] for m in cleaner_modes(args)]
    runs: dict[str, list[dict]] = {name: [] for name in [*cleaners, "read+write", "read+write+fsync"]}
    out_dir = work / "ceiling-out"
    out_dir.mkdir()
    worker = CleanerWorker() if "cleaner (worker)" in runs else None
    if worker is not None:  # its start (an interpreter and the imports) is not the clean's
        warm = work / "warm-up" / "bench-0"
        shutil.copytree(template, warm)
        cleaner_run(warm, config, cleaner_config, worker)
        shutil.rmtree(warm.parent)
    try:
        _cleaner_rounds(args, work, template, config, cleaner_config, worker, runs, out_dir)
    finally:
        if worker is not None:
            worker.close()
    best = {name: max(rs, key=lambda r: r["mb_per_s"]) for name, rs in runs.items()}
    first = best[cleaners[0]]
    out = {"log": built, "runs": runs, "best": best, "cleaners": cleaners,
           "ratio_vs_write": first["mb_per_s"] / best["read+write"]["mb_per_s"],
           "ratio_vs_fsync": first["mb_per_s"] / best["read+write+fsync"]["mb_per_s"]}
    if len(cleaners) == 2:
        out["ratio_worker_vs_thread"] = best["cleaner (worker)"]["mb_per_s"] / best["cleaner"]["mb_per_s"]
        out["ratio_worker_vs_thread_median"] = statistics.median(r["mb_per_s"] for r in runs["cleaner (worker)"]) / \
            statistics.median(r["mb_per_s"] for r in runs["cleaner"])
    return out


def _cleaner_rounds(args, work: Path, template: Path, config: LogConfig, cleaner_config: CleanerConfig,
                    worker: CleanerWorker | None, runs: dict[str, list[dict]], out_dir: Path) -> None:
    order = list(runs)
    for i in range(args.repeat):
        k = i % len(order)
        for name in order[k:] + order[:k]:
            copy = work / f"run-{i}-{name}" / "bench-0"
            shutil.copytree(template, copy)  # a fresh copy each time: the cleaner rewrites its log
            if name.startswith("cleaner"):
                r = cleaner_run(copy, config, cleaner_config, worker if name == "cleaner (worker)" else None)
            else:
                r = ceiling_run(copy, out_dir, cleaner_config.io_buffer_size, fsync=name.endswith("fsync"))
            shutil.rmtree(copy.parent)
            runs[name].append(r)
            log(f"cleaner: run {i + 1}/{args.repeat} {name}: {r['mb_per_s']:,.1f} MB/s "
                f"({r['bytes'] / 1e6:,.1f} MB in {r['seconds']:.3f} s)")


# -- 4. the event loop's lag during a clean ----------------------------------------------------------
def lag_run(directory: Path, config: LogConfig, mode: str, worker: CleanerWorker, sleep_s: float) -> dict:
    """Wake-up lateness of a 1 ms asyncio sleep in this thread while another thread cleans
    ``directory`` (mode "thread" or "worker") or sleeps ``sleep_s`` (mode "none")."""
    plog = PartitionLog(directory, config, clean_shutdown=True)
    done = threading.Event()
    took: list[float] = []

    def work() -> None:
        t0 = time.perf_counter()
        try:
            if mode == "none":
                time.sleep(sleep_s)
            else:
                Cleaner(CleanerConfig(), worker=worker if mode == "worker" else None).clean(
                    plog, now_ms=int(time.time() * 1000))
        finally:
            took.append(time.perf_counter() - t0)
            done.set()

    lags: list[float] = []

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while not done.is_set():
            t = loop.time()
            await asyncio.sleep(0.001)
            lags.append((loop.time() - t - 0.001) * 1000)

    thread = threading.Thread(target=work)
    try:
        thread.start()
        asyncio.run(probe())
        thread.join()
    finally:
        plog.close()
    lags.sort()
    return {"seconds": took[0], "wakeups": len(lags), "lags_ms": lags}


def case_lag(args, work: Path) -> dict:
    template = work / "lag-template" / "bench-0"
    segment_bytes = int(args.segment_mb * MIB)
    built = build_log(template, mb=args.lag_log_mb, keys=args.keys, value_size=args.value_size,
                      per_batch=args.records_per_batch, compressed_every=args.compressed_every,
                      segment_bytes=segment_bytes)
    config = LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    worker = CleanerWorker()
    lags: dict[str, list[float]] = {"none": [], "thread": [], "worker": []}
    runs: dict[str, list[dict]] = {name: [] for name in lags}
    try:
        for i in range(args.repeat + 1):  # the first round warms up (the worker's start, caches): not counted
            order = ["thread", "worker", "none"]
            k = i % len(order)
            for name in order[k:] + order[:k]:
                copy = work / f"lag-{i}-{name}" / "bench-0"
                shutil.copytree(template, copy)
                done = [r["seconds"] for r in runs["thread"] + runs["worker"]]
                r = lag_run(copy, config, name, worker, statistics.median(done) if done else 1.0)
                shutil.rmtree(copy.parent)
                if i:
                    runs[name].append({k2: v for k2, v in r.items() if k2 != "lags_ms"})
                    lags[name] += r["lags_ms"]
                lat = r["lags_ms"]
                log(f"lag: run {i}/{args.repeat} {name}: {r['seconds']:.2f} s, {r['wakeups']} wake-ups, "
                    f"late p50 {lat[len(lat) // 2]:.3f} ms, p99 {lat[len(lat) * 99 // 100]:.3f} ms"
                    + (" (warm-up)" if not i else ""))
    finally:
        worker.close()
    out: dict = {"log": built, "runs": runs}
    for name, lat in lags.items():
        lat.sort()
        out[name] = {"wakeups": len(lat), "p50_ms": lat[len(lat) // 2], "p90_ms": lat[len(lat) * 9 // 10],
                     "p99_ms": lat[len(lat) * 99 // 100], "max_ms": lat[-1],
                     "clean_seconds": statistics.median(r["seconds"] for r in runs[name])}
    return out


# -- brokers ----------------------------------------------------------------------------------------
def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (field 3 on: state, ppid, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


class KwireBroker:
    """``kwire broker --config <toml>`` in a subprocess, temp data dir, --log-level info (the
    cleaner's one line per clean is counted from its stderr); stop() sends SIGTERM."""

    def __init__(self, name: str, settings: dict, start_timeout: float = 60):
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"kwire-bench-cleaner-{name}-"))
        self.data_dir = self.dir / "data"
        toml = self.dir / "broker.toml"
        toml.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
        self.stderr_path = self.dir / "broker.stderr"
        self.stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-m", "kwire.cli.main", "broker", "--config", str(toml), "--host", "127.0.0.1",
               "--port", "0", "--data-dir", str(self.data_dir), "--fsync", "never", "--log-level", "info", "--json"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr)
        deadline = time.monotonic() + start_timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.stop()
                raise SystemExit(f"kwire broker did not start: see {self.stderr_path}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if chunk:
                    line += chunk
        self.bootstrap = json.loads(line)["bootstrap"]
        self.pid = self.proc.pid
        self._read_upto = 0

    def rss_bytes(self) -> int | None:
        return process_rss_bytes(self.pid)

    def cpu_seconds(self) -> float:
        """user + system CPU time of the broker process so far."""
        fields = _stat_fields(self.pid)
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else float("nan")

    def child_pids(self) -> list[int]:
        """The broker's child processes: its log cleaner's worker processes."""
        pids: list[int] = []
        try:
            for task in os.listdir(f"/proc/{self.pid}/task"):
                with open(f"/proc/{self.pid}/task/{task}/children") as f:
                    pids += [int(x) for x in f.read().split()]
        except OSError:
            pass
        return pids

    def worker_cpu_seconds(self) -> float:
        """user + system CPU time of the cleaner's worker processes so far: the live ones', and
        the ended ones' the broker has waited for (cutime + cstime)."""
        fields = _stat_fields(self.pid)
        if not fields:
            return float("nan")
        ticks = int(fields[13]) + int(fields[14])
        for pid in self.child_pids():
            child = _stat_fields(pid)
            if child:
                ticks += int(child[11]) + int(child[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def worker_rss_bytes(self) -> int:
        return sum(process_rss_bytes(pid) or 0 for pid in self.child_pids())

    def new_cleans(self) -> tuple[int, int]:
        """(cleans, bytes of segments cleaned) logged since the last call."""
        with open(self.stderr_path, "rb") as f:
            f.seek(self._read_upto)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._read_upto += end
        cleans = cleaned = 0
        for m in _CLEANED.finditer(data[:end].decode(errors="replace")):
            cleans += 1
            cleaned += int(m.group(2))
        return cleans, cleaned

    def errors(self) -> list[str]:
        text = self.stderr_path.read_text(errors="replace")
        return [row for row in text.splitlines() if " ERROR " in row or "Traceback" in row]

    def stop(self) -> int | None:
        code = terminate(self.proc, 60)
        self.proc.stdout.close()
        self.stderr.close()
        return code

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def create_topics(bootstrap: str, topics: list[NewTopic]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": CLIENT_LOG_LEVEL})
    for topic, fut in admin.create_topics(topics, request_timeout=15).items():
        try:
            fut.result(30)
        except Exception as exc:
            raise SystemExit(f"create topic {topic} on {bootstrap}: {exc}") from None


def compacted_topic(name: str, ratio: float) -> NewTopic:
    return NewTopic(name, num_partitions=1, replication_factor=1,
                    config={"cleanup.policy": "compact", "segment.bytes": str(MIB),
                            "min.cleanable.dirty.ratio": str(ratio), "delete.retention.ms": "1000"})


def latency_summary(lat: list[float]) -> dict:
    """Nearest-rank percentiles of latencies in seconds, in ms."""
    lat = sorted(lat)
    n = len(lat)

    def pct(q: float) -> float:
        return lat[min(n - 1, max(0, round(q * n) - 1))] * 1000 if n else float("nan")

    return {"messages": n, "p50_ms": pct(0.50), "p99_ms": pct(0.99)}


# -- 2. produce with the cleaner busy --------------------------------------------------------------
class DirtyWriter(threading.Thread):
    """Keyed 1 KiB values to the compacted topic of whichever broker ``target`` names, at about
    ``mbps`` MB/s (ticks of 10 ms), until ``done``."""

    def __init__(self, brokers: dict[str, KwireBroker], topic: str, keys: int, mbps: float):
        super().__init__(daemon=True, name="dirty-writer")
        self.topic, self.keys = topic, keys
        self.per_tick = max(1, round(mbps * 1e6 / 1024 / 100))
        self.producers = {name: Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "acks": "1",
                                          "log_level": CLIENT_LOG_LEVEL}) for name, b in brokers.items()}
        self.target: str | None = None
        self.done = threading.Event()
        self.sent = 0
        self.errors = 0
        self.value = os.urandom(1024)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors += 1

    def run(self) -> None:
        rng = random.Random(2)
        nxt = time.perf_counter()
        while not self.done.is_set():
            target = self.target
            if target is None:
                self.done.wait(0.01)
                nxt = time.perf_counter()
                continue
            p = self.producers[target]
            for _ in range(self.per_tick):
                try:
                    p.produce(self.topic, self.value, key=b"key-%06d" % rng.randrange(self.keys),
                              on_delivery=self._on_delivery)
                    self.sent += 1
                except BufferError:
                    break
            p.poll(0)
            nxt += 0.01
            delay = nxt - time.perf_counter()
            if delay > 0:
                self.done.wait(delay)
            else:
                nxt = time.perf_counter()

    def flush(self) -> None:
        for p in self.producers.values():
            p.flush(10)


def throughput_slice(p: Producer, topic: str, value: bytes, seconds: float) -> dict:
    """Produce ``value`` flat out for ``seconds`` and wait for every delivery report."""
    errors: list[str] = []
    produce, poll = p.produce, p.poll

    def on_error(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    sent = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        try:
            produce(topic, value, partition=0, on_delivery=on_error)
            sent += 1
        except BufferError:
            poll(0.001)
        if not sent & 1023:
            poll(0)
            if time.perf_counter() > deadline:
                break
    left = p.flush(max(seconds, 10))
    elapsed = time.perf_counter() - t0
    delivered = sent - len(errors) - left
    return {"messages": delivered, "seconds": elapsed, "mb_per_s": delivered * len(value) / elapsed / 1e6,
            "errors": len(errors) + left}


class LatencyProducer:
    """One 1 KiB message every 1/rate s to partition 0 (linger.ms 0, Nagle off); latency is
    librdkafka's produce()-to-delivery-report time (as in bench_broker.py)."""

    def __init__(self, bootstrap: str, topic: str, rate: float):
        self.topic, self.interval = topic, 1 / rate
        self.value = os.urandom(1024)
        self.lat: list[float] = []
        self.errors = 0
        self.outstanding = 0
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "socket.nagle.disable": True,
                           "on_delivery": self._on_delivery, "log_level": CLIENT_LOG_LEVEL})
        self.p.list_topics(topic, timeout=10)
        self.run(0.3)
        self.lat.clear()

    def _on_delivery(self, err, msg) -> None:
        self.outstanding -= 1
        if err is not None:
            self.errors += 1
        else:
            self.lat.append(msg.latency())

    def run(self, seconds: float) -> list[float]:
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
                p.poll(0.001)
            else:
                time.sleep(nxt - now)
        p.flush(10)
        return self.lat[first:]


def cleaner_modes(args) -> list[str]:
    """The cleaner-on variants ``--cleaner-in`` asks for: "thread", "worker" or both."""
    return ["thread", "worker"] if args.cleaner_in == "both" else [args.cleaner_in]


def case_produce(args) -> dict:
    on = {"log_cleaner_backoff_ms": args.backoff_ms}
    modes = {name: {**on, "log_cleaner_worker_process": name == "worker"} for name in cleaner_modes(args)}
    modes["off"] = {"log_cleaner_enable": False}
    brokers: dict[str, KwireBroker] = {}
    try:
        for name, settings in modes.items():
            brokers[name] = KwireBroker(f"produce-{name}", settings)
            create_topics(brokers[name].bootstrap, [compacted_topic("dirty", args.dirty_ratio),
                                                    NewTopic("produce", num_partitions=1, replication_factor=1)])
        # The clients live in _produce_slices' frame: gone when it returns, before the brokers stop
        # (no reconnect noise from librdkafka).
        return _produce_slices(args, brokers)
    finally:
        gc.collect()
        for b in brokers.values():
            b.stop()
            b.cleanup()


def _produce_slices(args, brokers: dict[str, KwireBroker]) -> dict:
    modes = list(brokers)
    log(f"produce: brokers up ({', '.join(f'{n}: {b.bootstrap}' for n, b in brokers.items())}); "
        f"filling each compacted topic with {args.dirty_keys:,} keys x 1 KiB")
    value = os.urandom(1024)
    for b in brokers.values():
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 10, "log_level": CLIENT_LOG_LEVEL})
        for k in range(args.dirty_keys):
            while True:
                try:
                    p.produce("dirty", value, key=b"key-%06d" % k)
                    break
                except BufferError:
                    p.poll(0.01)
        p.flush(30)
    del p
    writer = DirtyWriter(brokers, "dirty", args.dirty_keys, args.dirty_mbps)
    writer.start()
    try:
        thr_producers = {name: Producer({"bootstrap.servers": b.bootstrap, "acks": "1", "linger.ms": 10,
                                         "batch.size": 1_000_000, "compression.type": "none",
                                         "queue.buffering.max.messages": 2_000_000,
                                         "queue.buffering.max.kbytes": 2_097_151, "log_level": CLIENT_LOG_LEVEL})
                         for name, b in brokers.items()}
        lat_producers = {name: LatencyProducer(b.bootstrap, "produce", args.rate) for name, b in brokers.items()}
        for p in thr_producers.values():  # connect, not timed
            p.list_topics("produce", timeout=10)
            p.produce("produce", value, partition=0)
            p.flush(10)
        slices: dict[str, list[dict]] = {name: [] for name in modes}
        lat: dict[str, list[float]] = {name: [] for name in modes}
        for i in range(args.slices):
            # Each broker in each place of the order in turn (on/off, off/on for two).
            k = i % len(modes)
            for name in modes[k:] + modes[:k]:
                b = brokers[name]
                writer.target = name
                time.sleep(args.warmup_seconds)  # the writer dirties the log; the cleaner starts on it
                b.new_cleans()
                cpu0, wcpu0 = b.cpu_seconds(), b.worker_cpu_seconds()
                t0 = time.perf_counter()
                thr = throughput_slice(thr_producers[name], "produce", value, args.produce_seconds)
                sl = lat_producers[name].run(args.latency_seconds)
                elapsed = time.perf_counter() - t0
                writer.target = None
                cleans, cleaned = b.new_cleans()
                s = {"mb_per_s": thr["mb_per_s"], "messages": thr["messages"], "errors": thr["errors"],
                     "p50_ms": latency_summary(sl)["p50_ms"], "latency_messages": len(sl), "cleans": cleans,
                     "cleaned_mb": cleaned / 1e6, "seconds": elapsed,
                     "broker_cpu": (b.cpu_seconds() - cpu0) / elapsed,
                     "worker_cpu": (b.worker_cpu_seconds() - wcpu0) / elapsed}
                slices[name].append(s)
                lat[name].extend(sl)
                log(f"produce: slice {i + 1}/{args.slices} cleaner {name}: {s['mb_per_s']:,.1f} MB/s, "
                    f"p50 {s['p50_ms']:.3f} ms, {cleans} cleans ({s['cleaned_mb']:,.1f} MB cleaned), "
                    f"broker CPU {s['broker_cpu']:.2f} cores (+ cleaner worker {s['worker_cpu']:.2f}), "
                    f"load {os.getloadavg()[0]:.1f}")
        writer.done.set()
        writer.join(10)
        writer.flush()
        out: dict = {"slices": slices, "writer_sent": writer.sent, "writer_errors": writer.errors}
        for name in modes:
            mbps = [s["mb_per_s"] for s in slices[name]]
            out[name] = {"mb_per_s_median": statistics.median(mbps), "mb_per_s_best": max(mbps),
                         **latency_summary(lat[name]),
                         "cleans": sum(s["cleans"] for s in slices[name]),
                         "cleaned_mb": sum(s["cleaned_mb"] for s in slices[name]),
                         "errors": sum(s["errors"] for s in slices[name]) + lat_producers[name].errors}
        # cleaner-on / cleaner-off for each variant (latency: off/on, so above 1 is better either way)
        out["ratio_mb_per_s"] = {n: out[n]["mb_per_s_median"] / out["off"]["mb_per_s_median"] for n in modes[:-1]}
        out["ratio_p50"] = {n: out["off"]["p50_ms"] / out[n]["p50_ms"] for n in modes[:-1]}
        # and per slice pair: each cleaner-on slice against the cleaner-off slice of its round
        out["ratio_p50_slices"] = {
            n: [off["p50_ms"] / s["p50_ms"] for s, off in zip(slices[n], slices["off"], strict=True)]
            for n in modes[:-1]}
        out["broker_errors"] = {name: b.errors() for name, b in brokers.items()}
        return out
    finally:
        writer.done.set()
        writer.join(10)
        writer.producers.clear()


# -- 3. 1,000 keys rewritten N times ---------------------------------------------------------------
class RssSampler(threading.Thread):
    """The broker's VmRSS every ``interval`` s, and the largest the partition got (segments, bytes)."""

    def __init__(self, broker: KwireBroker, part_dir: Path, interval: float = 0.1):
        super().__init__(daemon=True, name="rss-sampler")
        self.broker, self.part_dir, self.interval = broker, part_dir, interval
        self.done = threading.Event()
        self.samples: list[tuple[float, int]] = []
        self.worker_samples: list[int] = []  # the cleaner's worker processes' VmRSS, while there is one
        self.max_segments = self.max_bytes = 0

    def run(self) -> None:
        t0 = time.perf_counter()
        while not self.done.is_set():
            rss = self.broker.rss_bytes()
            if rss is not None:
                self.samples.append((time.perf_counter() - t0, rss))
            worker_rss = self.broker.worker_rss_bytes()
            if worker_rss:
                self.worker_samples.append(worker_rss)
            try:
                f = partition_files(self.part_dir)
            except OSError:  # a segment swapped meanwhile
                f = {"segments": 0, "bytes": 0}
            self.max_segments = max(self.max_segments, f["segments"])
            self.max_bytes = max(self.max_bytes, f["bytes"])
            self.done.wait(self.interval)


def partition_files(part_dir: Path) -> dict:
    logs = sorted(part_dir.glob("*.log"))
    sizes = [p.stat().st_size for p in logs]
    return {"segments": len(logs), "bytes": sum(sizes), "active_bytes": sizes[-1] if sizes else 0,
            "bases": [int(p.stem) for p in logs]}


def count_records(part_dir: Path) -> tuple[int, int]:
    """(records, distinct keys) in the partition's .log files."""
    n, keys = 0, set()
    for path in sorted(part_dir.glob("*.log")):
        for batch in iter_batches(path.read_bytes()):
            if batch.is_control:
                continue
            for r in batch.records():
                n += 1
                keys.add(r.key)
    return n, len(keys)


def case_rewrite(args) -> dict:
    n, nkeys, size = args.rewrites, args.rewrite_keys, args.rewrite_value_size
    broker = KwireBroker("rewrite", {"log_cleaner_backoff_ms": args.rewrite_backoff_ms})
    topic = "rewritten"
    part_dir = broker.data_dir / f"{topic}-0"
    sampler = RssSampler(broker, part_dir)
    p = None
    try:
        create_topics(broker.bootstrap, [compacted_topic(topic, args.rewrite_dirty_ratio)])
        rss_start = broker.rss_bytes()
        sampler.start()
        errors: list[str] = []

        def on_error(err, msg) -> None:
            errors.append(str(err))

        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 10, "batch.size": 1_000_000,
                      "queue.buffering.max.messages": 100_000, "delivery.report.only.error": True,
                      "on_delivery": on_error, "log_level": CLIENT_LOG_LEVEL})
        pad = b"x" * size
        key_of = [b"key-%04d" % k for k in range(nkeys)]
        log(f"rewrite: {n:,} records over {nkeys:,} keys ({size} B values) to {topic} "
            f"(segment.bytes 1 MiB, min.cleanable.dirty.ratio {args.rewrite_dirty_ratio}, "
            f"log_cleaner_backoff_ms {args.rewrite_backoff_ms})")
        t0 = time.perf_counter()
        deadline = t0 + args.rewrite_seconds
        sent = 0
        step = max(n // 10, 1)
        for i in range(n):
            value = (b"%010d|" % i + pad)[:size]
            while True:
                try:
                    p.produce(topic, value, key=key_of[i % nkeys])
                    break
                except BufferError:
                    p.poll(0.001)
            sent += 1
            if not i & 1023:
                p.poll(0)
                if time.perf_counter() > deadline:
                    log(f"rewrite: time budget of {args.rewrite_seconds:g} s hit after {sent:,} records")
                    break
            if (i + 1) % step == 0:
                f = partition_files(part_dir)
                log(f"rewrite: {i + 1:,} queued, partition {f['segments']} segments {f['bytes'] / 1e6:,.1f} MB, "
                    f"RSS {broker.rss_bytes() / MIB:,.1f} MiB")
        left = p.flush(60)
        p = None
        produce_s = time.perf_counter() - t0
        end_offset = sent  # one partition, offsets from 0
        # The cleaner catches up: wait (bounded) until its checkpoint reaches the active segment.
        t1 = time.perf_counter()
        while time.perf_counter() - t1 < args.settle_seconds:
            f = partition_files(part_dir)
            checkpoint = read_cleaner_checkpoint(part_dir)
            if checkpoint is not None and f["bases"] and checkpoint >= f["bases"][-1]:
                break
            time.sleep(0.2)
        settle_s = time.perf_counter() - t1
        time.sleep(0.5)
        sampler.done.set()
        sampler.join(5)
        files = partition_files(part_dir)
        records, keys_in_log = count_records(part_dir)
        # One record per key: a batch of one record of the same key and value size.
        one = RecordBatchBuilder()
        one.append(key_of[0], b"x" * size, 0)
        per_record_alone = len(one.build())
        packed = RecordBatchBuilder()
        for k in range(nkeys):
            packed.append(key_of[k], b"x" * size, 0)
        one_per_key = len(packed.build())
        # What a consumer reads: every key's last value.
        expected = {key_of[(sent - 1 - j) % nkeys]: sent - 1 - j for j in range(min(nkeys, sent))}
        got = read_latest(broker.bootstrap, topic, end_offset)
        mismatched = [k for k, i in expected.items() if got.get(k) != i]
        rss = [r for _, r in sampler.samples]
        return {"rewrites_requested": n, "sent": sent, "not_delivered": left, "delivery_errors": len(errors),
                "keys": nkeys, "value_size": size, "produce_seconds": produce_s,
                "msgs_per_s": sent / produce_s, "settle_seconds": settle_s, "files": files,
                "records_in_log": records, "keys_in_log": keys_in_log, "one_per_key_bytes": one_per_key,
                "one_per_key_batches_bytes": nkeys * per_record_alone,
                "cleaner_checkpoint": read_cleaner_checkpoint(part_dir),
                "cleans": broker.new_cleans()[0], "max_segments": sampler.max_segments,
                "max_bytes": sampler.max_bytes, "consumer_keys": len(got), "mismatched_keys": len(mismatched),
                "rss_start": rss_start, "rss_first": rss[0] if rss else None, "rss_last": rss[-1] if rss else None,
                "rss_max": max(rss) if rss else None, "rss_samples": len(rss),
                "rss_quartiles": [rss[len(rss) * q // 4] for q in range(4)] if rss else [],
                "worker_rss_first": sampler.worker_samples[0] if sampler.worker_samples else None,
                "worker_rss_last": sampler.worker_samples[-1] if sampler.worker_samples else None,
                "worker_rss_max": max(sampler.worker_samples, default=None),
                "worker_rss_samples": len(sampler.worker_samples),
                "broker_errors": broker.errors()}
    finally:
        sampler.done.set()
        p = None
        gc.collect()
        broker.stop()
        broker.cleanup()


def read_latest(bootstrap: str, topic: str, end: int, seconds: float = 60) -> dict[bytes, int]:
    """key -> index written in the value of its last record, reading the partition from offset 0."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cleaner", "enable.auto.commit": False,
                  "auto.offset.reset": "error", "log_level": CLIENT_LOG_LEVEL})
    c.assign([TopicPartition(topic, 0, 0)])
    out: dict[bytes, int] = {}
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(10_000, timeout=0.5)
            last = -1
            for m in msgs:
                if m.error():
                    continue
                out[m.key()] = int(m.value()[:10])
                last = m.offset()
            if last >= end - 1:
                break
            if not msgs:
                lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
                pos = c.position([TopicPartition(topic, 0)])[0].offset
                if pos >= hi:
                    break
    finally:
        c.close()
    return out


def _version(v) -> str:
    return v[0] if isinstance(v, tuple) else str(v)


# -- output -------------------------------------------------------------------------------------------
def _mib(n: int | None) -> str:
    return f"{n / MIB:,.1f} MiB" if n is not None else "n/a"


PRODUCE_LABELS = {"thread": "cleaner in its thread", "worker": "cleaner in a worker", "off": "cleaner off"}


def print_report(meta: dict, results: dict) -> None:
    print(f"kwire log cleaner; Python {meta['python']}, {meta['cpus']} CPUs, confluent-kafka {meta['confluent_kafka']}; "
          f"load average {meta['load_start']:.1f} at the start, {meta['load_end']:.1f} at the end; MB = 10^6 bytes")
    c = results.get("cleaner")
    if c:
        b = c["log"]
        print(f"\ncleaner throughput, best of {len(c['runs']['cleaner'])} (alternated, page cache warm)")
        print(f"  log: {b['bytes'] / 1e6:,.1f} MB in {b['segments']} segments, {b['records']:,} records over "
              f"{b['keys']:,} keys ({b['value_size']} B values, {b['records_per_batch']} a batch, "
              f"{b['compressed_batches']:,} of {b['batches']:,} batches lz4/zstd)")
        print(f"  {'':<34}{'MB/s':>10}{'seconds':>10}{'worst MB/s':>12}")
        labels = {"cleaner": "Cleaner.clean (map, copy, fsync)", "cleaner (worker)": "the same in the worker process",
                  "read+write": "read + write (Python)", "read+write+fsync": "read + write + fsync (Python)"}
        for name in c["runs"]:
            label = labels[name]
            best = c["best"][name]
            worst = min(r["mb_per_s"] for r in c["runs"][name])
            print(f"  {label:<34}{best['mb_per_s']:>10,.1f}{best['seconds']:>10.3f}{worst:>12,.1f}")
        cb = c["best"][c["cleaners"][0]]
        print(f"  {c['cleaners'][0]} / read+write {c['ratio_vs_write']:.4f}x; / read+write+fsync "
              f"{c['ratio_vs_fsync']:.3f}x")
        if "ratio_worker_vs_thread" in c:
            print(f"  worker / thread: best {c['ratio_worker_vs_thread']:.2f}x, median "
                  f"{c['ratio_worker_vs_thread_median']:.2f}x")
        print(f"  cleaned: {cb['bytes'] / 1e6:,.1f} MB -> {cb['size_after'] / 1e6:,.2f} MB, {cb['segments_before']} "
              f"segments -> {cb['segments_after']}, {cb['records_removed']:,} of {cb['records_read']:,} records removed")
    pr = results.get("produce")
    if pr:
        modes = list(pr["slices"])
        n = len(pr["slices"]["off"])
        print(f"\nproduce 1 KiB to another topic while a compacted topic is dirtied at {meta['args']['dirty_mbps']:g} "
              f"MB/s ({n} alternated slices each; throughput: median of slices, latency: all slices)")
        print(f"  {'':<22}{'MB/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'cleans':>8}{'MB cleaned':>12}")
        for name in modes:
            r = pr[name]
            print(f"  {PRODUCE_LABELS[name]:<22}{r['mb_per_s_median']:>10,.1f}{r['p50_ms']:>10.3f}{r['p99_ms']:>10.3f}"
                  f"{r['cleans']:>8}{r['cleaned_mb']:>12,.1f}")
        for name in modes[:-1]:
            print(f"  ratio {name}/off: throughput {pr['ratio_mb_per_s'][name]:.2f}x, p50 (off/{name}) "
                  f"{pr['ratio_p50'][name]:.2f}x (goal >= 0.8 for both); p50 ratio per round "
                  + " ".join(f"{x:.2f}" for x in pr["ratio_p50_slices"][name]))
        if "thread" in pr and "worker" in pr:
            print(f"  worker against thread: throughput {pr['worker']['mb_per_s_median'] / pr['thread']['mb_per_s_median']:.2f}x, "
                  f"p50 (thread/worker) {pr['thread']['p50_ms'] / pr['worker']['p50_ms']:.2f}x")
        for name in modes:
            print(f"  slices {PRODUCE_LABELS[name]}: MB/s " + " ".join(f"{s['mb_per_s']:.1f}" for s in pr["slices"][name])
                  + "; p50 " + " ".join(f"{s['p50_ms']:.3f}" for s in pr["slices"][name])
                  + "; broker CPU " + " ".join(f"{s['broker_cpu']:.2f}" for s in pr["slices"][name])
                  + "; cleaner worker CPU " + " ".join(f"{s.get('worker_cpu', 0.0):.2f}" for s in pr["slices"][name]))
    lg = results.get("lag")
    if lg:
        b = lg["log"]
        print(f"\nthe event loop's lag while a clean runs: a 1 ms asyncio sleep in a loop, wake-up lateness; "
              f"clean of {b['bytes'] / 1e6:,.1f} MB in {b['segments']} segments ({len(lg['runs']['none'])} alternated "
              "runs each, all wake-ups)")
        print(f"  {'':<34}{'clean s':>9}{'wake-ups':>10}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
        labels = {"none": "no clean", "thread": "clean in a thread (the GIL shared)",
                  "worker": "clean in the worker process"}
        for name in ("none", "thread", "worker"):
            r = lg[name]
            print(f"  {labels[name]:<34}{r['clean_seconds']:>9.2f}{r['wakeups']:>10,}{r['p50_ms']:>9.3f}"
                  f"{r['p90_ms']:>9.3f}{r['p99_ms']:>9.3f}{r['max_ms']:>9.3f}")
    ap = results.get("append")
    if ap:
        print(f"\nappends to the partition being cleaned: one batch of 5 x 1 KiB a ms from a thread, time of "
              f"PartitionLog.append ({len(ap['runs']['idle'])} alternated slices each)")
        print(f"  {'':<26}{'appends':>9}{'cleans':>8}{'swapped':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
        labels = {"cleaning": "cleaner cleaning the log", "cleaning (worker)": "the same in the worker",
                  "idle": "no clean"}
        for name in ap["runs"]:
            label, r = labels[name], ap[name]
            print(f"  {label:<26}{r['appends']:>9,}{r['cleans']:>8}{r['segments_written']:>9}{r['p50_ms']:>9.3f}"
                  f"{r['p90_ms']:>9.3f}{r['p99_ms']:>9.3f}{r['max_ms']:>9.1f}")
        for name in list(ap["runs"])[:-1]:
            print(f"  ratio no clean/{name}: p50 {ap['idle']['p50_ms'] / ap[name]['p50_ms']:.2f}x, "
                  f"p99 {ap['idle']['p99_ms'] / ap[name]['p99_ms']:.2f}x")
    rw = results.get("rewrite")
    if rw:
        f = rw["files"]
        scaled = "" if rw["rewrites_requested"] >= 1_000_000 else " (scaled down; --rewrites 1000000 for the full case)"
        print(f"\ncompacted topic, {rw['keys']:,} keys rewritten: {rw['sent']:,} records of {rw['value_size']} B "
              f"values{scaled}")
        print(f"  produced at {rw['msgs_per_s']:,.0f} msgs/s ({rw['produce_seconds']:.1f} s); cleaner caught up "
              f"{rw['settle_seconds']:.1f} s later; {rw['cleans']} cleans")
        print(f"  partition during the writes: at most {rw['max_segments']} segments, {rw['max_bytes'] / 1e6:,.1f} MB "
              f"(sampled every 100 ms)")
        print(f"  partition at the end: {f['segments']} segments, {f['bytes'] / 1e6:,.3f} MB (active segment "
              f"{f['active_bytes'] / 1e6:,.3f} MB), {rw['records_in_log']:,} records, {rw['keys_in_log']:,} keys")
        print(f"  one record per key: {rw['one_per_key_bytes'] / 1e6:,.3f} MB in one batch, "
              f"{rw['one_per_key_batches_bytes'] / 1e6:,.3f} MB as one batch each; partition / that: "
              f"{f['bytes'] / rw['one_per_key_bytes']:.1f}x / {f['bytes'] / rw['one_per_key_batches_bytes']:.1f}x")
        print(f"  broker RSS: {_mib(rw['rss_start'])} before, first {_mib(rw['rss_first'])}, last "
              f"{_mib(rw['rss_last'])}, max {_mib(rw['rss_max'])} ({rw['rss_samples']} samples every 100 ms; "
              f"quartiles {', '.join(_mib(x) for x in rw['rss_quartiles'])})")
        if rw.get("worker_rss_samples"):
            print(f"  cleaner worker process RSS: first {_mib(rw['worker_rss_first'])}, last "
                  f"{_mib(rw['worker_rss_last'])}, max {_mib(rw['worker_rss_max'])} ({rw['worker_rss_samples']} samples)")
        print(f"  consumer from offset 0: {rw['consumer_keys']:,} keys, {rw['mismatched_keys']} without their last value")
    problems = results.get("problems", [])
    print("\nchecks: " + ("; ".join(problems) if problems else
                          "every message acknowledged, every key's last value read back, no broker errors"))


# -- 5. appends to the partition being cleaned -----------------------------------------------------
def append_slice(plog: PartitionLog, cleaning: bool, seconds: float, keys: int, rng: random.Random,
                 worker: CleanerWorker | None = None) -> dict:
    """One slice: a thread appends a batch every ms and times it, while this thread cleans
    ``plog`` over and over (``cleaning``; the map and copy in ``worker`` if given) or sleeps."""
    value = os.urandom(1024)
    stop = threading.Event()
    took: list[float] = []

    def appender() -> None:
        nxt = time.perf_counter()
        while not stop.is_set():
            b = RecordBatchBuilder()
            for _ in range(5):
                b.append(b"key-%06d" % rng.randrange(keys), value, int(time.time() * 1000))
            data = b.build()
            t0 = time.perf_counter()
            plog.append(data)
            took.append((time.perf_counter() - t0) * 1000)
            nxt += 0.001
            delay = nxt - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            else:
                nxt = time.perf_counter()

    thread = threading.Thread(target=appender, name="appender")
    cleans = segments = 0
    thread.start()
    try:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            if not cleaning:
                time.sleep(deadline - time.perf_counter())
                break
            result = Cleaner(CleanerConfig(), worker=worker).clean(plog, now_ms=int(time.time() * 1000))
            if result is not None:
                cleans += 1
                segments += result.segments_after
            else:
                time.sleep(0.01)
    finally:
        stop.set()
        thread.join()
    took.sort()
    return {"appends": len(took), "cleans": cleans, "segments_written": segments, "lat_ms": took}


def case_append(args, work: Path) -> dict:
    directory = work / "append" / "dirty-0"
    config = LogConfig(segment_bytes=MIB, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(directory, config)
    rng = random.Random(3)
    value = os.urandom(1024)
    # "cleaning": Cleaner.clean in this process's thread; "cleaning (worker)": in the worker process
    names = [{"thread": "cleaning", "worker": "cleaning (worker)"}[m] for m in cleaner_modes(args)] + ["idle"]
    lat: dict[str, list[float]] = {name: [] for name in names}
    runs: dict[str, list[dict]] = {name: [] for name in lat}
    worker = CleanerWorker() if "cleaning (worker)" in names else None
    try:
        for k in range(args.dirty_keys // 5):  # every key once, as case 2's fill
            b = RecordBatchBuilder()
            for i in range(5):
                b.append(b"key-%06d" % (5 * k + i), value, int(time.time() * 1000))
            plog.append(b.build())
        for i in range(args.repeat):
            k = i % len(names)
            for name in names[k:] + names[:k]:
                r = append_slice(plog, name != "idle", args.append_seconds, args.dirty_keys, rng,
                                 worker if name == "cleaning (worker)" else None)
                t = r.pop("lat_ms")
                lat[name] += t
                runs[name].append(r)
                log(f"append: slice {i + 1}/{args.repeat} {name}: {r['appends']} appends, p50 {t[len(t) // 2]:.3f} ms, "
                    f"p99 {t[len(t) * 99 // 100]:.3f} ms, max {t[-1]:.1f} ms, {r['cleans']} cleans "
                    f"({r['segments_written']} segments swapped in), load {os.getloadavg()[0]:.1f}")
    finally:
        plog.close()
        if worker is not None:
            worker.close()
    out: dict = {"runs": runs}
    for name, t in lat.items():
        t.sort()
        out[name] = {"appends": len(t), "p50_ms": t[len(t) // 2], "p90_ms": t[len(t) * 9 // 10],
                     "p99_ms": t[len(t) * 99 // 100], "max_ms": t[-1],
                     "cleans": sum(r["cleans"] for r in runs[name]),
                     "segments_written": sum(r["segments_written"] for r in runs[name])}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--only", default="cleaner,produce,rewrite", help="cases to run (default all three)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON instead of the tables")
    parser.add_argument("--cleaner-in", choices=("thread", "worker", "both"), default="thread",
                        help="cases 1, 2 and 5: the cleaner in the broker's thread, in a worker process "
                             "(kwire.log.cleaner.worker.process), or both alternated in one run (default thread)")
    g = parser.add_argument_group("1. cleaner throughput")
    g.add_argument("--log-mb", type=float, default=48, help="size of the log built (default 48 MB)")
    g.add_argument("--keys", type=int, default=10_000, help="distinct keys (default 10,000)")
    g.add_argument("--value-size", type=int, default=100, help="bytes per value (default 100)")
    g.add_argument("--records-per-batch", type=int, default=100, help="records a batch (default 100)")
    g.add_argument("--compressed-every", type=int, default=4,
                   help="one batch in this many is compressed, lz4 and zstd in turn; 0: none (default 4)")
    g.add_argument("--segment-mb", type=float, default=4, help="segment.bytes of the log built, MiB (default 4)")
    g.add_argument("--repeat", type=int, default=3, help="runs of the cleaner and of each ceiling (default 3)")
    g = parser.add_argument_group("2. produce with the cleaner busy")
    g.add_argument("--slices", type=int, default=4, help="alternated slices per broker (default 4)")
    g.add_argument("--produce-seconds", type=float, default=3, help="flat-out produce per slice (default 3)")
    g.add_argument("--latency-seconds", type=float, default=2, help="latency run per slice (default 2)")
    g.add_argument("--warmup-seconds", type=float, default=1, help="writer alone before each slice (default 1)")
    g.add_argument("--rate", type=float, default=1000, help="msgs/s of the latency runs (default 1000)")
    g.add_argument("--dirty-mbps", type=float, default=4, help="background writer's rate, MB/s (default 4)")
    g.add_argument("--dirty-keys", type=int, default=10_000, help="keys of the compacted topic (default 10,000)")
    g.add_argument("--dirty-ratio", type=float, default=0.01, help="its min.cleanable.dirty.ratio (default 0.01)")
    g.add_argument("--backoff-ms", type=int, default=50, help="log_cleaner_backoff_ms of the cleaner-on broker "
                                                              "(default 50)")
    g = parser.add_argument_group("4. the event loop's lag during a clean (--only lag)")
    g.add_argument("--lag-log-mb", type=float, default=16, help="size of the log cleaned (default 16 MB)")
    g = parser.add_argument_group("5. appends to the partition being cleaned (--only append; --repeat slices each)")
    g.add_argument("--append-seconds", type=float, default=3, help="seconds per slice (default 3)")
    g = parser.add_argument_group("3. keys rewritten many times")
    g.add_argument("--rewrites", type=int, default=300_000, help="records written (default 300,000; the full "
                                                                 "case is 1000000)")
    g.add_argument("--rewrite-keys", type=int, default=1_000, help="keys (default 1,000)")
    g.add_argument("--rewrite-value-size", type=int, default=100, help="bytes per value (default 100)")
    g.add_argument("--rewrite-dirty-ratio", type=float, default=0.5,
                   help="min.cleanable.dirty.ratio of the topic (default 0.5, Kafka's)")
    g.add_argument("--rewrite-backoff-ms", type=int, default=500, help="log_cleaner_backoff_ms (default 500)")
    g.add_argument("--rewrite-seconds", type=float, default=120, help="time budget of the writes (default 120)")
    g.add_argument("--settle-seconds", type=float, default=30,
                   help="longest wait for the cleaner to catch up after the writes (default 30)")
    args = parser.parse_args(argv)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - {"cleaner", "produce", "rewrite", "lag", "append"}
    if unknown:
        parser.error(f"--only: unknown case(s) {', '.join(sorted(unknown))}")
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "confluent_kafka": _version(confluent_kafka.version()),
            "librdkafka": _version(confluent_kafka.libversion()), "load_start": os.getloadavg()[0], "args": vars(args),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    results: dict = {"problems": []}
    work = Path(tempfile.mkdtemp(prefix="kwire-bench-cleaner-", dir=os.getcwd()))
    started = time.perf_counter()
    try:
        if "cleaner" in only:
            results["cleaner"] = case_cleaner(args, work)
        if "lag" in only:
            results["lag"] = case_lag(args, work)
        if "append" in only:
            results["append"] = case_append(args, work)
        if "produce" in only:
            results["produce"] = pr = case_produce(args)
            for name in pr["slices"]:
                if pr[name]["errors"]:
                    results["problems"].append(f"produce cleaner {name}: {pr[name]['errors']} delivery errors")
                if pr["broker_errors"][name]:
                    results["problems"].append(f"broker (cleaner {name}) logged errors: {pr['broker_errors'][name][:3]}")
            for name in cleaner_modes(args):
                if pr[name]["cleans"] == 0:
                    results["problems"].append(f"the broker with the cleaner in a {name} cleaned nothing "
                                               "during its slices")
        if "rewrite" in only:
            results["rewrite"] = rw = case_rewrite(args)
            if rw["not_delivered"] or rw["delivery_errors"]:
                results["problems"].append(f"rewrite: {rw['not_delivered']} not delivered, "
                                           f"{rw['delivery_errors']} delivery errors")
            if rw["mismatched_keys"] or rw["consumer_keys"] != min(rw["keys"], rw["sent"]):
                results["problems"].append(f"rewrite: {rw['consumer_keys']} keys read back, "
                                           f"{rw['mismatched_keys']} without their last value")
            if rw["broker_errors"]:
                results["problems"].append(f"rewrite broker logged errors: {rw['broker_errors'][:3]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["load_end"] = os.getloadavg()[0]
    meta["seconds"] = time.perf_counter() - started
    log(f"done in {meta['seconds']:.0f} s")
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    else:
        print_report(meta, results)
    return 1 if results["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
