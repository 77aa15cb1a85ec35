"""Transactional produce against plain idempotent produce, on kwire's broker: what a transaction
costs a producer that commits every 100 records, and one that commits every 10,000.

One kwire broker (``python -m kwire.cli.main broker``, ``--fsync never``, as bench_broker.py) on
127.0.0.1; two producers side by side in one run: kwire's own ``Producer`` and confluent-kafka's
(librdkafka).  Each sends ``--records`` values of ``--size`` bytes to a fresh topic
(``bench_broker.PARTITIONS`` partitions, round-robin) in three modes:

- idempotent: ``enable.idempotence`` and one flush at the end (the baseline);
- txn/100: ``transactional.id``, begin / 100 records / commit, and so on;
- txn/10000: the same with 10,000 records per transaction.

A transaction's cost is AddPartitionsToTxn for the partitions it first writes to, the flush that
commit does, EndTxn and the markers the coordinator writes into every partition.  The broker
finalizes transaction.version 2 (KIP-890 part 2), so kwire's producer speaks transactions v2 (no
AddPartitionsToTxn, an epoch bump per EndTxn) and librdkafka 2.16 v1; the row "kwire (tv1)" is
kwire's producer with the broker set to transaction.version 1 by UpdateFeatures for its runs.  Figures are
records/s and MB/s of the timed part (init_transactions and the first metadata are not timed),
and each mode's ratio to the same client's idempotent run (1.0 = free).  After every run the
records are counted in the log (the high watermark less the commit markers: one per partition per
transaction), so a run that lost records says so.

    python benchmarks/bench_transactions.py [--records 50000] [--size 256] [--seconds 60] [--no-tv1]

Progress goes to stderr; the table to stdout; figures and the command to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from bench_broker import PARTITIONS, KwireBroker  # same directory
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as CkProducer

from kwire.client import Admin
from kwire.client.admin_quorum import FeatureUpgrade
from kwire.client.producer import Producer as KwProducer

LOG_LEVEL = 3  # librdkafka: errors only
MODES = (("idempotent", 0), ("txn/100", 100), ("txn/10000", 10_000))


def log(msg: str) -> None:
    print(f"[bench_transactions {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def settings(bootstrap: str, txn_id: str | None) -> dict:
    """The same producer settings for both clients (Kafka's names)."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "batch.size": 65536, "compression.type": "none"}
    if txn_id is not None:
        conf["transactional.id"] = txn_id
    return conf


def run(make: Callable[[dict], object], bootstrap: str, topic: str, *, per_txn: int, records: int, size: int,
        seconds: float, errors: list[str]) -> dict:
    """Produce ``records`` values; with ``per_txn``, in transactions of that many records."""
    p = make(settings(bootstrap, f"bench-{topic}" if per_txn else None))
    value = b"v" * size
    if per_txn:  # the id's producer id, metadata and connections: not timed
        p.init_transactions(30)
        p.begin_transaction()
    p.produce(topic, value, partition=0)
    p.commit_transaction(30) if per_txn else p.flush(30)
    sent, deadline = 0, time.perf_counter() + seconds
    t0 = time.perf_counter()
    while sent < records and time.perf_counter() < deadline:
        count = min(per_txn or records, records - sent)
        if per_txn:
            p.begin_transaction()
        for i in range(count):
            while True:
                try:
                    p.produce(topic, value, partition=(sent + i) % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.001)
            if not i & 1023:
                p.poll(0)
        if per_txn:
            p.commit_transaction(60)  # flushes first
        sent += count
    if not per_txn:
        p.flush(60)
    elapsed = time.perf_counter() - t0
    close = getattr(p, "close", None)
    if close is not None:
        close()
    if sent < records:
        errors.append(f"{topic}: time budget hit after {sent:,} of {records:,} records")
    transactions = -(-sent // per_txn) if per_txn else 0
    return {"records": sent, "seconds": elapsed, "per_s": sent / elapsed, "mb_per_s": sent * size / elapsed / 1e6,
            "transactions": transactions}


def records_in_log(bootstrap: str, topic: str, markers: int) -> int:
    """Offsets in the topic's partitions less ``markers`` control records (the warm-up record included)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-transactions-count", "log_level": LOG_LEVEL})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)) \
            - markers
    finally:
        c.close()


def set_transaction_version(bootstrap: str, level: int) -> None:
    """The broker's finalized transaction.version (an admin's UpdateFeatures, as with Kafka)."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.update_features({"transaction.version": level}, upgrade=FeatureUpgrade.SAFE_DOWNGRADE)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=256, help="value bytes")
    ap.add_argument("--seconds", type=float, default=60, help="time budget of one run")
    ap.add_argument("--no-tv1", action="store_true", help="leave out kwire's producer at transaction.version 1")
    args = ap.parse_args(argv)

    clients = {"kwire": lambda conf: KwProducer(conf),
               "confluent-kafka": lambda conf: CkProducer({**conf, "log_level": LOG_LEVEL})}
    if not args.no_tv1:
        clients["kwire (tv1)"] = lambda conf: KwProducer(conf)
    broker = KwireBroker("never")
    results: dict[tuple[str, str], dict] = {}
    errors: list[str] = []
    try:
        for client, make in clients.items():
            if client == "kwire (tv1)":
                set_transaction_version(broker.bootstrap, 1)
            for mode, per_txn in MODES:
                topic = f"txn-{client.replace(' ', '').replace('(', '-').replace(')', '')}-{mode.replace('/', '-')}"
                log(f"{client} {mode}: {args.records:,} records of {args.size} B")
                r = run(make, broker.bootstrap, topic, per_txn=per_txn, records=args.records, size=args.size,
                        seconds=args.seconds, errors=errors)
                # A committed transaction leaves a marker in each partition it wrote to (all of them
                # here; the warm-up transaction's in partition 0).
                markers = r["transactions"] * PARTITIONS + (1 if per_txn else 0)
                in_log = records_in_log(broker.bootstrap, topic, markers)
                if in_log != r["records"] + 1:
                    errors.append(f"{client} {mode}: {in_log:,} records in the log, {r['records'] + 1:,} sent")
                results[(client, mode)] = r
                log(f"  {r['per_s']:,.0f} records/s, {r['transactions']:,} transactions")
    finally:
        broker.stop()

    print(f"\n{args.records:,} records of {args.size} B per run, {PARTITIONS} partitions, acks=all, "
          "kwire broker --fsync never, one run each\n")
    print(f"{'client':<16} {'mode':<11} {'records/s':>11} {'MB/s':>7} {'txns':>6} {'vs idempotent':>14}")
    for client in clients:
        base = results[(client, "idempotent")]["per_s"]
        for mode, _ in MODES:
            r = results[(client, mode)]
            print(f"{client:<16} {mode:<11} {r['per_s']:>11,.0f} {r['mb_per_s']:>7.1f} {r['transactions']:>6,} "
                  f"{r['per_s'] / base:>14.2f}")
    print("\nkwire / confluent-kafka, same mode: " + ", ".join(
        f"{mode} {results[('kwire', mode)]['per_s'] / results[('confluent-kafka', mode)]['per_s']:.2f}"
        for mode, _ in MODES))
    for e in errors:
        print(f"PROBLEM: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
