"""The client benchmark: kwire's producer and consumer against kafka-python, aiokafka and
confluent-kafka, all driving the same kwire broker, in one run.

The broker is ``kwire broker`` in its own process (``--fsync never``, 4 partitions).  Each client
runs in a fresh worker process of its own, one after the other, so no client shares a GIL or a
warm cache with another:

- produce: N values of S bytes (100 B and 1 KiB), keyless, acks=1, no idempotence, no compression,
  linger 5 ms and 256 KiB batches everywhere; the clock stops when every delivery is confirmed;
- consume: N records (written once per size by librdkafka, not measured) read from offset 0
  with manually assigned partitions (no group), up to 1 MiB per partition per fetch, every
  record's value touched; the clock runs from the end of the first non-empty poll to the N-th
  record (connecting and the first fetch are fixed costs, not throughput).

kwire is measured twice: its asyncio core (AsyncProducer/AsyncConsumer, the twin of aiokafka)
and its synchronous facade (Producer/Consumer, the twin of kafka-python).

    python benchmarks/bench_clients.py [--messages 200000] [--sizes 100,1024] [--repeat 2] [--json]
    python benchmarks/bench_clients.py --before /tmp/kwire-before [--rounds 3]   # a change's A/B

Ratios are kwire's msgs/s over each peer's (>1: kwire faster); the best of ``--repeat`` runs of
each (client, size) counts.  confluent-kafka is C (librdkafka): the ceiling, not a target.
Progress goes to stderr.  Figures and the command go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab_trees  # noqa: E402  (same directory)
from bench_broker import KwireBroker  # noqa: E402

CLIENTS = ("kwire-async", "kwire-sync", "aiokafka", "kafka-python", "confluent-kafka")
PARTITIONS = 4
LINGER_MS = 5
BATCH_BYTES = 256 * 1024
FETCH_BYTES = 1 << 20


def log(msg: str) -> None:
    print(f"[bench_clients {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def value_of(size: int) -> bytes:
    return b"x" * size


# -- workers: one (client, action) per process ---------------------------------------------------
# Consumers are timed from the end of their first non-empty poll to the last record, so that
# connecting, joining and the first fetch's wait (fixed costs, not throughput) are left out.
_FIRST: list[tuple[float, int]] = []
_DONE: list[float] = []


def _first_batch(seen: int) -> None:
    if seen and not _FIRST:
        _FIRST.append((time.perf_counter(), seen))


def _mark_done() -> None:
    _DONE.append(time.perf_counter())


def produce_kwire_async(bootstrap: str, topic: str, n: int, size: int) -> None:
    from kwire.client.producer import AsyncProducer

    async def go():
        value = value_of(size)
        async with AsyncProducer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False,
                                  "linger.ms": LINGER_MS, "batch.size": BATCH_BYTES}) as producer:
            futures = [await producer.send(topic, value) for _ in range(n)]
            await producer.flush()
            for f in futures:
                f.result()
    asyncio.run(go())


def produce_kwire_sync(bootstrap: str, topic: str, n: int, size: int) -> None:
    from kwire.client.producer import Producer

    value = value_of(size)
    with Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False,
                   "linger.ms": LINGER_MS, "batch.size": BATCH_BYTES}) as producer:
        futures = [producer.produce(topic, value) for _ in range(n)]
        producer.flush(120)
        for f in futures:
            f.result()


def produce_aiokafka(bootstrap: str, topic: str, n: int, size: int) -> None:
    import aiokafka

    async def go():
        value = value_of(size)
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS,
                                             max_batch_size=BATCH_BYTES)
        await producer.start()
        try:
            futures = [await producer.send(topic, value) for _ in range(n)]
            await producer.flush()
            for f in futures:
                f.result()
        finally:
            await producer.stop()
    asyncio.run(go())


def produce_kafka_python(bootstrap: str, topic: str, n: int, size: int) -> None:
    import kafka

    value = value_of(size)
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS,
                                   batch_size=BATCH_BYTES, enable_idempotence=False)
    futures = [producer.send(topic, value) for _ in range(n)]
    producer.flush(120)
    for f in futures:
        f.get(0)
    producer.close()


def produce_confluent(bootstrap: str, topic: str, n: int, size: int) -> None:
    import confluent_kafka

    value = value_of(size)
    failed = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False,
                                         "linger.ms": LINGER_MS, "batch.size": BATCH_BYTES,
                                         "delivery.report.only.error": True, "log_level": 3})
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, _msg: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) or failed:
        raise SystemExit(f"confluent-kafka: {len(failed)} failed deliveries")


def consume_kwire_async(bootstrap: str, topic: str, n: int, size: int) -> int:
    from kwire.client.consumer import AsyncConsumer
    from kwire.client.types import TopicPartition

    async def go():
        async with AsyncConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                                  "max.partition.fetch.bytes": FETCH_BYTES}) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            seen = total = 0
            deadline = time.monotonic() + 300
            while seen < n and time.monotonic() < deadline:
                _first_batch(seen)
                for record in await consumer.getmany(timeout_ms=1000):
                    total += len(record.value)
                    seen += 1
            _mark_done()
            return seen
    return asyncio.run(go())


def consume_kwire_sync(bootstrap: str, topic: str, n: int, size: int) -> int:
    from kwire.client.consumer import Consumer
    from kwire.client.types import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                         "max.partition.fetch.bytes": FETCH_BYTES})
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen = total = 0
        deadline = time.monotonic() + 300
        while seen < n and time.monotonic() < deadline:
            _first_batch(seen)
            for record in consumer.poll(1.0):
                total += len(record.value)
                seen += 1
        _mark_done()
        return seen
    finally:
        consumer.close()


def consume_aiokafka(bootstrap: str, topic: str, n: int, size: int) -> int:
    import aiokafka

    async def go():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                             auto_offset_reset="earliest", max_partition_fetch_bytes=FETCH_BYTES)
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            seen = total = 0
            deadline = time.monotonic() + 300
            while seen < n and time.monotonic() < deadline:
                _first_batch(seen)
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    for record in records:
                        total += len(record.value)
                        seen += 1
            _mark_done()
            return seen
        finally:
            await consumer.stop()
    return asyncio.run(go())


def consume_kafka_python(bootstrap: str, topic: str, n: int, size: int) -> int:
    import kafka

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                   auto_offset_reset="earliest", max_partition_fetch_bytes=FETCH_BYTES)
    try:
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        seen = total = 0
        deadline = time.monotonic() + 300
        while seen < n and time.monotonic() < deadline:
            _first_batch(seen)
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    total += len(record.value)
                    seen += 1
        _mark_done()
        return seen
    finally:
        consumer.close()


def consume_confluent(bootstrap: str, topic: str, n: int, size: int) -> int:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-clients",
                                         "enable.auto.commit": False, "max.partition.fetch.bytes": FETCH_BYTES,
                                         "log_level": 3})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        seen = total = 0
        deadline = time.monotonic() + 300
        while seen < n and time.monotonic() < deadline:
            _first_batch(seen)
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None:
                    total += len(msg.value())
                    seen += 1
        _mark_done()
        return seen
    finally:
        consumer.close()


WORKERS = {
    ("produce", "kwire-async"): produce_kwire_async, ("produce", "kwire-sync"): produce_kwire_sync,
    ("produce", "aiokafka"): produce_aiokafka, ("produce", "kafka-python"): produce_kafka_python,
    ("produce", "confluent-kafka"): produce_confluent,
    ("consume", "kwire-async"): consume_kwire_async, ("consume", "kwire-sync"): consume_kwire_sync,
    ("consume", "aiokafka"): consume_aiokafka, ("consume", "kafka-python"): consume_kafka_python,
    ("consume", "confluent-kafka"): consume_confluent,
}


def worker_main(action: str, client: str, bootstrap: str, topic: str, n: int, size: int) -> None:
    """Runs in the worker process: imports the client, times the action, prints one JSON line."""
    fn = WORKERS[(action, client)]
    start = time.perf_counter()
    seen = fn(bootstrap, topic, n, size)
    elapsed = time.perf_counter() - start
    if action == "consume":
        if seen != n:
            raise SystemExit(f"{client} consumed {seen} of {n} records")
        if not _FIRST or _FIRST[0][1] >= n:
            raise SystemExit(f"{client} read all {n} records in its first poll: use more --messages")
        t_first, first_count = _FIRST[0]
        # Seconds that n records take at the rate measured after the first poll.
        elapsed = (_DONE[0] - t_first) * n / (n - first_count)
    print(json.dumps({"seconds": elapsed}), flush=True)


# -- the run ------------------------------------------------------------------------------------
def run_worker(action: str, client: str, bootstrap: str, topic: str, n: int, size: int,
               env: dict[str, str] | None = None) -> float | str:
    cmd = [sys.executable, __file__, "--worker", action, client, bootstrap, topic, str(n), str(size)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    except subprocess.TimeoutExpired:
        return "timed out after 600 s"
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="records per run (default 200000)")
    parser.add_argument("--sizes", default="100,1024", help="value sizes in bytes (default 100,1024)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per (client, size); the best counts")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="clients to run (default: all)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    ab = parser.add_argument_group("A/B", "--before TREE: kwire's clients of two trees alternated against one broker "
                                   "(this tree's), instead of the peers")
    ab_trees.add_arguments(ab, rounds=3, before_required=False)
    args = parser.parse_args(argv)
    if args.worker:
        action, client, bootstrap, topic, n, size = args.worker
        worker_main(action, client, bootstrap, topic, int(n), int(size))
        return 0
    if args.before is not None:
        return compare_trees(args)
    sizes = [int(s) for s in args.sizes.split(",")]
    clients = [c for c in args.clients.split(",") if c]
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown clients: {', '.join(unknown)} (known: {', '.join(CLIENTS)})")
    broker = KwireBroker("never")
    results: dict[str, dict] = {}
    try:
        for size in sizes:
            # One data set per size for every consumer, written by librdkafka (not measured).
            source = f"bench-consume-{size}"
            log(f"filling {source} with {args.messages} records of {size} B")
            filled = run_worker("produce", "confluent-kafka", broker.bootstrap, source, args.messages, size)
            if isinstance(filled, str):
                raise SystemExit(f"could not fill {source}: {filled}")
            for client in clients:
                for action in ("produce", "consume"):
                    key = f"{action} {size} B {client}"
                    best: float | str = "not run"
                    for attempt in range(args.repeat):
                        topic = f"bench-{client}-{size}-{attempt}" if action == "produce" else source
                        log(f"{key}: run {attempt + 1}/{args.repeat}")
                        got = run_worker(action, client, broker.bootstrap, topic, args.messages, size)
                        if isinstance(got, str):
                            best = got
                            break
                        best = got if isinstance(best, str) else min(best, got)
                    results[key] = {"action": action, "size": size, "client": client, "messages": args.messages}
                    if isinstance(best, str):
                        results[key]["error"] = best
                        log(f"{key}: FAILED {best}")
                    else:
                        results[key].update(seconds=best, msgs_per_s=args.messages / best,
                                            mb_per_s=args.messages * size / best / 1e6)
    finally:
        broker.stop()
        broker.cleanup()
    meta = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "cpus": os.cpu_count(),
            "messages": args.messages, "repeat": args.repeat}
    if args.json:
        print(json.dumps({"meta": meta, "results": list(results.values())}, indent=2))
    else:
        print_table(meta, results, sizes, clients)
    return 1 if any("error" in r for r in results.values()) else 0


def compare_trees(args: argparse.Namespace) -> int:
    """kwire's clients from the --before and --after trees, each case's workers alternated.

    One broker (this tree's ``kwire broker``) serves both, so a difference is the clients'; a
    peer's rate would be the same for both trees, so after/before here is also how kwire's
    ratio to any peer moved."""
    sizes = [int(s) for s in args.sizes.split(",")]
    srcs = ab_trees.trees(args)
    envs = {tree: ab_trees.tree_env(src, args.malloc) for tree, src in srcs.items()}
    clients = [c for c in args.clients.split(",") if c.startswith("kwire")] or ["kwire-async", "kwire-sync"]
    broker = KwireBroker("never")
    runs = 0
    rates: ab_trees.Rates = {"before": {}, "after": {}}
    try:
        for size in sizes:
            source = f"bench-consume-{size}"
            log(f"filling {source} with {args.messages} records of {size} B")
            filled = run_worker("produce", "confluent-kafka", broker.bootstrap, source, args.messages, size)
            if isinstance(filled, str):
                raise SystemExit(f"could not fill {source}: {filled}")
            for client in clients:
                for action in ("produce", "consume"):
                    case = f"{action} {size} B {client}"

                    def measure(tree: str, case: str = case, client: str = client, action: str = action,
                                size: int = size, source: str = source) -> dict[str, float]:
                        nonlocal runs
                        runs += 1
                        topic = f"ab-{client}-{size}-{runs}" if action == "produce" else source
                        got = run_worker(action, client, broker.bootstrap, topic, args.messages, size, envs[tree])
                        if isinstance(got, str):
                            raise SystemExit(f"{case} ({tree}): {got}")
                        return {case: args.messages / got}

                    log(f"{case}: {args.rounds} rounds")
                    for tree, by_case in ab_trees.alternate(measure, args.rounds).items():
                        rates[tree].update(by_case)
    finally:
        broker.stop()
        broker.cleanup()
    print(f"kwire's clients, {args.before} (before) against {args.after} (after), one broker, "
          f"{args.messages} records a run, malloc {args.malloc}")
    ab_trees.print_table(rates, pick=max, unit=" msg/s")
    return 0


def print_table(meta: dict, results: dict, sizes: list[int], clients: list[str]) -> None:
    print(f"kwire client benchmark, {meta['date']}, Python {meta['python']}, {meta['cpus']} CPUs, "
          f"{meta['messages']} records per run, best of {meta['repeat']}")
    header = f"{'action':8} {'size':>6} {'client':16} {'msgs/s':>10} {'MB/s':>8}  {'kwire-async/it':>14} {'kwire-sync/it':>13}"
    print(header)
    print("-" * len(header))
    for action in ("produce", "consume"):
        for size in sizes:
            mine = {k: results.get(f"{action} {size} B {k}", {}).get("msgs_per_s") for k in ("kwire-async", "kwire-sync")}
            for client in clients:
                r = results.get(f"{action} {size} B {client}", {})
                if "error" in r:
                    print(f"{action:8} {size:>5}B {client:16} FAILED: {r['error']}")
                    continue
                rate = r["msgs_per_s"]
                ratios = [f"{mine[k] / rate:.2f}x" if mine[k] else "-" for k in ("kwire-async", "kwire-sync")]
                print(f"{action:8} {size:>5}B {client:16} {rate:>10,.0f} {r['mb_per_s']:>8.1f}  {ratios[0]:>14} {ratios[1]:>13}")


if __name__ == "__main__":
    sys.exit(main())
