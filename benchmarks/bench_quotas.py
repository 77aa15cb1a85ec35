"""Client quotas on kwire's broker: does the throttle hold a client to its quota, and what does
quota accounting cost a client that stays under it?

One kwire broker (``python -m kwire.cli.main broker``, ``--fsync never``, as bench_broker.py) and
confluent-kafka (librdkafka, which honours throttle_time_ms: KIP-219) on 127.0.0.1:

- held: a producer with ``producer_byte_rate`` = Q sends 1 KiB values as fast as it can for
  ``--seconds``; acknowledged bytes per second over the whole run, and Kafka's own measure, the
  bytes of the last 11 s (11 windows of 1 s) at each second, against Q.  As in Kafka, a client
  may burst 10 x Q at once (the rate is taken over at least 10 windows), then waits until that
  burst leaves the 11 windows: a greedy client alternates bursts and waits, ~10/11 of Q on average.
  The same with a consumer under ``consumer_byte_rate`` = Q reading what was produced.
  Value bytes are counted; the broker counts whole requests / answers (~1-2% more here).
- overhead: the same producer with no quota at all, and with quotas set far above what it sends
  (producer_byte_rate and request_percentage, so every request is measured and timed), two runs
  each in the order none, quota, quota, none, same broker, fresh topics: MB/s and the ratios
  (quota / none; 1.0 = free).

    python benchmarks/bench_quotas.py [--quota-mb 5] [--seconds 35] [--messages 60000]

Progress goes to stderr; figures and the command go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench_broker import KwireBroker  # same directory
from confluent_kafka import Consumer, Producer, TopicPartition

from kwire.client.admin import Admin, QuotaAlteration, QuotaEntity

SIZE = 1024
LOG_LEVEL = 3  # librdkafka: errors only


def log(msg: str) -> None:
    print(f"[bench_quotas {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def set_quotas(bootstrap: str, client_id: str, values: dict[str, float | None]) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.alter_client_quotas([QuotaAlteration(QuotaEntity.of(client_id=client_id), values)])


def produce(bootstrap: str, topic: str, client_id: str, *, n: int, seconds: float) -> dict:
    """Send up to ``n`` values within ``seconds``; delivery times of the acknowledged ones."""
    done: list[float] = []
    errors: list[str] = []

    def on_delivery(err, _msg) -> None:
        (errors.append(str(err)) if err else done.append(time.perf_counter()))

    throttles: list[float] = []
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 65536,
                  "compression.type": "none", "queue.buffering.max.kbytes": 16384, "acks": 1,
                  "on_delivery": on_delivery, "throttle_cb": lambda e: throttles.append(e.throttle_time),
                  "log_level": LOG_LEVEL})
    p.list_topics(topic, timeout=10)
    value = os.urandom(SIZE)
    t0 = time.perf_counter()
    deadline = t0 + seconds
    sent = 0
    while sent < n and time.perf_counter() < deadline:
        try:
            p.produce(topic, value)
            sent += 1
        except BufferError:
            p.poll(0.005)
        if not sent & 1023:
            p.poll(0)
    left = p.flush(max(deadline - time.perf_counter(), 0) + 30)
    p.poll(0)
    return {"t0": t0, "done": done, "errors": errors, "left": left, "sent": sent, "throttles": throttles,
            "end": time.perf_counter()}


def consume(bootstrap: str, topics: list[str], client_id: str, *, seconds: float) -> dict:
    """Read every partition of ``topics`` from the start for ``seconds``; the times values came."""
    throttles: list[float] = []
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": "bench-quotas",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.max.bytes": 4 << 20,
                  "max.partition.fetch.bytes": 1 << 20, "log_level": LOG_LEVEL,
                  # a small local queue: values are consumed about when they are fetched (the default
                  # 64 MB of prefetch would hide the fetch rate behind a buffer)
                  "queued.max.messages.kbytes": 4096,
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    meta = c.list_topics(timeout=10).topics
    c.assign([TopicPartition(t, p, 0) for t in topics for p in meta[t].partitions])
    got: list[float] = []
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        for msg in c.consume(1000, 0.2):
            if msg.error() is None:
                got.append(time.perf_counter())
    c.close()
    return {"t0": t0, "done": got, "end": deadline, "throttles": throttles}


def window_rates(run: dict, window: float = 11.0) -> list[float]:
    """Kafka's own measure: bytes of values in the last ``window`` seconds (quota.window.num x
    quota.window.size.seconds) over that time, at each whole second from ``window`` s in to the end."""
    times = sorted(t - run["t0"] for t in run["done"])
    rates = []
    at = window
    while at <= run["end"] - run["t0"]:
        rates.append(sum(1 for t in times if at - window < t <= at) * SIZE / window)
        at += 1.0
    return rates


def held_line(what: str, run: dict, quota: float) -> str:
    span = run["end"] - run["t0"]
    overall = len(run["done"]) * SIZE / span
    windows = window_rates(run)
    mean = sum(windows) / len(windows) if windows else float("nan")
    return (f"{what} held: {overall / 1e6:.3f} MB/s of values over {span:.0f} s (first burst included) against a "
            f"quota of {quota / 1e6:g} MB/s: ratio {overall / quota:.3f}; over 11 s sliding windows mean "
            f"{mean / quota:.3f}, min {min(windows, default=0) / quota:.3f}, max {max(windows, default=0) / quota:.3f} "
            f"of the quota ({len(run['throttles'])} throttle events, max {max(run['throttles'], default=0):.2f} s)")


def dispatch_cost(rounds: int = 5, per_round: int = 1000) -> str:
    """The accounting alone, without sockets or the client: one-record (1 KiB) Produce requests through the
    broker's dispatch (as the network layer calls it), from a client without quotas and from one
    with quotas far above its rate, interleaved rounds; the best round of each."""
    import tempfile

    from kwire.broker.config import load_config
    from kwire.broker.dispatch import dispatch
    from kwire.broker.quotas import Alteration
    from kwire.broker.state import BrokerState
    from kwire.protocol import encode_request, messages
    from kwire.protocol.records import RecordBatchBuilder

    P, C = messages.ProduceRequest, messages.CreateTopicsRequest
    with tempfile.TemporaryDirectory() as tmp:
        state = BrokerState(load_config(None, data_dir=f"{tmp}/data", port=9092))
        try:
            dispatch(state, encode_request(C(topics=[C.CreatableTopic(
                name="t", num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=1000,
                validate_only=False), 5, 1, client_id="admin")[4:], client_host="-", connection_id=1)
            state.client_quotas.alter([Alteration([("client-id", "metered")], [
                ("producer_byte_rate", 1e12), ("request_percentage", 1e6)])])
            builder = RecordBatchBuilder()
            builder.append(None, os.urandom(SIZE))  # small: the fixed per-request costs show
            request = P(acks=1, timeout_ms=1000, transactional_id=None, topic_data=[P.TopicProduceData(
                name="t", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=builder.build())])])
            frames = {c: encode_request(request, 9, 1, client_id=c)[4:] for c in ("free", "metered")}
            best = {"free": float("inf"), "metered": float("inf")}
            for _ in range(rounds):
                for client, frame in frames.items():
                    t = time.perf_counter()
                    for _ in range(per_round):
                        dispatch(state, bytearray(frame), client_host="-", connection_id=1)
                    best[client] = min(best[client], (time.perf_counter() - t) / per_round)
            # The accounting by itself (what dispatch adds for a metered request), many times over: the
            # figure the noisy end-to-end ratios cannot resolve.
            manager, response = state.quota_manager, messages.ProduceResponse(throttle_time_ms=0, responses=[])
            accounting = float("inf")
            for _ in range(rounds):
                t = time.perf_counter()
                for _ in range(per_round * 10):
                    meter = manager.meter(0, request, 1100, "User:ANONYMOUS", "metered")
                    meter.call(lambda _ctx, _req: response, None, request)
                    meter.finish(response, None)
                accounting = min(accounting, (time.perf_counter() - t) / (per_round * 10))
        finally:
            state.close()
    return (f"accounting through dispatch (1-record 1 KiB Produce, best of {rounds} x {per_round}): no quota "
            f"{best['free'] * 1e6:.0f} us, quotas set {best['metered'] * 1e6:.0f} us per request (ratio "
            f"{best['metered'] / best['free']:.3f}); the accounting alone {accounting * 1e6:.1f} us per request = "
            f"{accounting / best['free']:.1%} of an unmetered request")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quota-mb", type=float, default=5.0, help="the quota, MB/s (10^6 bytes)")
    ap.add_argument("--seconds", type=float, default=35.0, help="length of a throttled run")
    ap.add_argument("--messages", type=int, default=60_000, help="values per overhead run")
    args = ap.parse_args(argv)
    quota = args.quota_mb * 1e6
    broker = KwireBroker("never")
    out = []
    try:
        bs = broker.bootstrap
        # Two pairs in alternating order, each client on its own topic: one pair alone was noise on
        # the shared 2-core machine (0.68 and 1.83 in two invocations).
        set_quotas(bs, "metered", {"producer_byte_rate": 1e12, "request_percentage": 1e6})
        rates: dict[str, list[float]] = {"none": [], "quota": []}
        for i, name in enumerate(("none", "quota", "quota", "none")):
            log(f"overhead {i + 1}/4: {'no quota' if name == 'none' else 'quotas far above the rate'}")
            run = produce(bs, f"overhead-{i}", "free" if name == "none" else "metered", n=args.messages, seconds=60)
            rates[name].append(len(run["done"]) * SIZE / (run["done"][-1] - run["t0"]) / 1e6)
            if run["errors"] or run["left"] or max(run["throttles"], default=0) > 0:
                out.append(f"  note: {name} run: {len(run['errors'])} errors, {run['left']} undelivered, "
                           f"max throttle {max(run['throttles'], default=0)}")
        pairs = " ".join(f"{q / n:.3f}" for n, q in zip(rates["none"], rates["quota"][::-1], strict=True))
        out.append(f"overhead ({args.messages:,} x 1 KiB, acks=1): no quota {rates['none'][0]:.1f} / "
                   f"{rates['none'][1]:.1f} MB/s, quotas set but not reached {rates['quota'][0]:.1f} / "
                   f"{rates['quota'][1]:.1f} MB/s; ratio per pair {pairs}, of the sums "
                   f"{sum(rates['quota']) / sum(rates['none']):.3f}")

        log("accounting through dispatch, in this process")
        out.append(dispatch_cost())

        set_quotas(bs, "held", {"producer_byte_rate": quota})
        log(f"held: producer under producer_byte_rate {quota / 1e6:g} MB/s for {args.seconds:g} s")
        run = produce(bs, "held", "held", n=10**9, seconds=args.seconds)
        run["end"] = run["done"][-1] if run["done"] else run["end"]
        out.append(held_line("produce", run, quota))

        set_quotas(bs, "reader", {"consumer_byte_rate": quota})
        log(f"held: consumer under consumer_byte_rate {quota / 1e6:g} MB/s for {args.seconds:g} s")
        crun = consume(bs, [f"overhead-{i}" for i in range(4)] + ["held"], "reader", seconds=args.seconds)
        out.append(held_line("consume", crun, quota))
    finally:
        broker.stop()
        broker.cleanup()
    print(f"bench_quotas: {os.cpu_count()} CPUs, kwire --fsync never, confluent-kafka, 1 KiB values, "
          f"MB = 10^6 bytes")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
