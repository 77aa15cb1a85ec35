"""Share groups (KIP-932) on kwire's broker: how fast confluent-kafka's ShareConsumer drains a topic
compared with a classic consumer group reading the same records from the same broker.

One kwire broker (``python -m kwire.cli.main broker``, ``--fsync never``, as bench_broker.py), one
topic of ``--partitions`` partitions holding ``--messages`` 100-byte values produced in batches of
``--batch`` records.  Then, in turn, each reader drains the whole topic from the start:

- classic: one confluent-kafka Consumer (classic group, auto commit);
- share x1: one ShareConsumer (implicit acknowledgement: each poll accepts the previous one's records);
- share x3: three ShareConsumers of one share group, each polled in its own thread.

Records per second from the first poll to the last record; ratio: share rate / classic rate (1.0
= as fast).  A share group does more per record than a classic group: every record is acquired,
locked, acknowledged, and the share-partition state is written to ``__share_group_state``.

    python benchmarks/bench_share.py [--messages 50000] [--partitions 3] [--batch 500]

``--refs A,B`` compares commits of kwire in one run: each ref's ``src`` (``git archive``, its
compiled helper built) runs its own broker with its own copy of the records, and every reader runs
against each broker in turn (alternated, so a load change on the machine hits both alike).

Progress goes to stderr; the table goes to stdout (and by hand to benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_broker import KwireBroker  # same directory
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

VALUE = b"x" * 100
TIMEOUT = 60.0


def log(msg: str) -> None:
    print(f"[bench_share {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def setup(bootstrap: str, topic: str, partitions: int, messages: int, batch: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": batch})
    for i in range(messages):
        p.produce(topic, VALUE, partition=i % partitions)
        if i % 10_000 == 9_999:
            p.poll(0)
    if p.flush(60):
        raise SystemExit("produce did not finish")


def earliest(bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                               incremental_configs=[entry])]).values():
        fut.result(30)


def classic(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-classic", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, start = 0, None
    deadline = time.monotonic() + TIMEOUT
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(1000, 0.5)
        if msgs and start is None:
            start = time.monotonic()
        got += sum(1 for m in msgs if m.error() is None)
    elapsed = time.monotonic() - (start or time.monotonic())
    c.close()
    if got < n:
        raise SystemExit(f"classic consumer read {got} of {n}")
    return n / elapsed


def share(bootstrap: str, topic: str, n: int, members: int, group: str) -> float:
    """``members`` ShareConsumers of one group, each polling in its own thread (as separate
    processes would), until together they have every record."""
    earliest(bootstrap, group)
    cs = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group}) for _ in range(members)]
    for c in cs:
        c.subscribe([topic])
    seen: set[tuple[int, int]] = set()
    lock = threading.Lock()
    first: list[float] = []
    deadline = time.monotonic() + TIMEOUT

    def member(c) -> None:
        while time.monotonic() < deadline:
            msgs = c.poll(0.2)
            with lock:
                if msgs and not first:
                    first.append(time.monotonic())
                seen.update((m.partition(), m.offset()) for m in msgs if m.error() is None)
                if len(seen) >= n:
                    return

    threads = [threading.Thread(target=member, args=(c,)) for c in cs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - (first[0] if first else time.monotonic())
    for c in cs:
        c.close()
    if len(seen) < n:
        raise SystemExit(f"{members} share consumer(s) read {len(seen)} of {n}")
    return n / elapsed


def source_tree(ref: str, into: Path) -> Path:
    """kwire's ``src`` at git ``ref`` in ``into``, with its compiled helper built (optional)."""
    repo = Path(__file__).resolve().parent.parent
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", ref, "src", "setup.py", "pyproject.toml",
                              "README.md"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=into, capture_output=True)
    return into / "src"


def broker_of(src: Path | None) -> KwireBroker:
    if src is None:
        return KwireBroker("never")
    run = f"import runpy, sys; sys.path.insert(0, {str(src)!r}); runpy.run_module('kwire.cli.main', run_name='__main__')"
    return KwireBroker("never", entry=["-c", run])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--members", default="1,2,4", help="share-group sizes to run, comma-separated (default 1,2,4)")
    ap.add_argument("--refs", default="", help="git refs of kwire to compare, comma-separated (default: the "
                    "installed kwire alone)")
    args = ap.parse_args()
    sizes = [int(m) for m in args.members.split(",")]
    refs = args.refs.split(",") if args.refs else [None]
    tmp = Path(tempfile.mkdtemp(prefix="bench-share-src-"))
    brokers: dict = {}
    topic = "bench-share"
    rows: dict[str, dict] = {}
    try:
        for ref in refs:
            brokers[ref] = broker_of(None if ref is None else source_tree(ref, tmp / ref.replace("/", "_")))
            log(f"{ref or 'installed kwire'}: producing {args.messages} records to {args.partitions} partitions")
            setup(brokers[ref].bootstrap, topic, args.partitions, args.messages, args.batch)
        for ref, b in brokers.items():
            log(f"{ref or 'kwire'}: classic consumer")
            rows.setdefault("classic group, 1 consumer", {})[ref] = classic(b.bootstrap, topic, args.messages)
        for members in sizes:
            for ref, b in brokers.items():
                log(f"{ref or 'kwire'}: share group, {members} consumer(s)")
                rows.setdefault(f"share group, {members} consumer(s)", {})[ref] = share(
                    b.bootstrap, topic, args.messages, members, f"bench-share-{members}")
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"draining {args.messages} x 100 B records, {args.partitions} partitions, kwire broker (fsync never); "
          "records/s from first poll to last record (one run)")
    base = rows["classic group, 1 consumer"]
    print(f"{'':28} " + "  ".join(f"{ref or 'kwire':>30}" for ref in refs))
    for name, by_ref in rows.items():
        cells = [f"{by_ref[ref]:12,.0f} rec/s ({by_ref[ref] / base[ref]:.2f}x classic)" for ref in refs]
        extra = f"   {by_ref[refs[-1]] / by_ref[refs[0]]:.2f}x {refs[0]}" if len(refs) > 1 else ""
        print(f"{name:28} " + "  ".join(f"{c:>30}" for c in cells) + extra)


if __name__ == "__main__":
    main()
