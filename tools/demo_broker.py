"""``make demo``: kwire's broker doing its job, end to end, on this machine.

Starts an embedded kwire broker, produces records into a 4-partition topic with librdkafka
(confluent-kafka), consumes them back with a consumer group, and prints what happened.  Until
``kwire sink`` (the Spark pipeline) lands, this is the README's first command.
"""

from __future__ import annotations

import argparse
import sys
import time

import confluent_kafka

from kwire.broker import EmbeddedBroker
from kwire.cli.output import print_table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=512, help="value size in bytes")
    args = ap.parse_args()
    with EmbeddedBroker(default_partitions=4) as broker:
        print(f"kwire broker on {broker.bootstrap}, data in {broker.data_dir}", file=sys.stderr)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 10,
                                             "acks": "all", "enable.idempotence": True,
                                             "compression.type": "lz4"})
        value = b"x" * args.size
        t0 = time.monotonic()
        for i in range(args.records):
            while True:
                try:
                    producer.produce("demo-events", key=b"user-%d" % (i % 1000), value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 20_000 == 0:
                producer.poll(0)
                print(f"\rproduced {i:,}/{args.records:,}", end="", file=sys.stderr, flush=True)
        assert producer.flush(60) == 0
        produce_s = time.monotonic() - t0
        print(f"\rproduced {args.records:,}/{args.records:,} in {produce_s:.1f} s", file=sys.stderr)
        del producer  # closes its connections before the broker stops

        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "demo",
                                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["demo-events"])
        per_partition: dict[int, int] = {}
        got = 0
        t0 = time.monotonic()
        deadline = t0 + 120
        while got < args.records and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error():
                    raise SystemExit(f"consumer error: {m.error()}")
                per_partition[m.partition()] = per_partition.get(m.partition(), 0) + 1
                got += 1
        consume_s = time.monotonic() - t0
        consumer.commit(asynchronous=False)
        consumer.close()
        mb = args.records * args.size / 1e6
        print_table(["partition", "records", "log end offset"],
                    [(p, f"{n:,}", f"{broker.call(lambda p=p: broker.state.logs.get('demo-events', p).log_end_offset):,}")
                     for p, n in sorted(per_partition.items())], align_right=[0, 1, 2])
        print(f"\nrecords in {args.records:,}, records out {got:,}; produce {mb / produce_s:.0f} MB/s, "
              f"consume (with group join) {mb / consume_s:.0f} MB/s")
        return 0 if got == args.records else 1


if __name__ == "__main__":
    sys.exit(main())
