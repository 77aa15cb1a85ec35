"""Rebalance time of a 3-member group: KIP-848 (``group.protocol=consumer``) against the classic
protocol (eager ``range`` and ``cooperative-sticky``), confluent-kafka against one kwire broker.

    python benchmarks/bench_rebalance.py [--partitions 12] [--heartbeat-ms 500] [--json]

One run of three moments, each timed from the client's action to the moment the members' own
rebalance callbacks say every partition is owned, by the expected members, none twice:

- *3 join*: three members subscribe at once to an empty group;
- *3rd joins*: a third member joins a stable group of two;
- *1 leaves*: one of three closes (leaving the group).

Both protocols get the same heartbeat interval (``--heartbeat-ms``: the broker's
``group_consumer_heartbeat_interval_ms`` for KIP-848, the client's ``heartbeat.interval.ms`` for
classic), since both pace their rebalances by it.  Each member polls in its own thread.  The
ratio is classic time over KIP-848 time (> 1: KIP-848 is faster).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import confluent_kafka  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kwire.broker import EmbeddedBroker  # noqa: E402

TOPIC = "bench-rebalance"
DEADLINE_S = 60


class Owners:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.overlaps = 0

    def assign(self, name: str, parts: list[int]) -> None:
        with self.lock:
            for p in parts:
                if self.owner.get(p, name) != name:
                    self.overlaps += 1
                self.owner[p] = name

    def revoke(self, name: str, parts: list[int]) -> None:
        with self.lock:
            for p in parts:
                if self.owner.get(p) == name:
                    del self.owner[p]

    def settled(self, names: set[str], partitions: int) -> bool:
        with self.lock:
            return len(self.owner) == partitions and set(self.owner.values()) == names


class Member:
    def __init__(self, name: str, conf: dict, owners: Owners):
        self.name = name
        self.stop = threading.Event()
        self.c = confluent_kafka.Consumer(conf)
        self.c.subscribe([TOPIC], on_assign=lambda c, ps: owners.assign(name, [p.partition for p in ps]),
                         on_revoke=lambda c, ps: owners.revoke(name, [p.partition for p in ps]),
                         on_lost=lambda c, ps: owners.revoke(name, [p.partition for p in ps]))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        end = time.monotonic() + 5 * DEADLINE_S
        while not self.stop.is_set() and time.monotonic() < end:
            self.c.poll(0.02)
        self.c.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(DEADLINE_S)


def _wait(owners: Owners, names: set[str], partitions: int) -> float:
    start = time.monotonic()
    while time.monotonic() - start < DEADLINE_S:
        if owners.settled(names, partitions):
            return time.monotonic() - start
        time.sleep(0.005)
    raise TimeoutError(f"the group never settled on {sorted(names)}")


def run_protocol(bootstrap: str, label: str, extra: dict, group: str, partitions: int) -> dict[str, float]:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **extra}
    times: dict[str, float] = {}
    owners = Owners()
    start = time.monotonic()
    members = [Member(f"m{i}", conf, owners) for i in range(3)]
    _wait(owners, {"m0", "m1", "m2"}, partitions)
    times["3 join"] = time.monotonic() - start
    members.pop().close()
    start = time.monotonic()
    _wait(owners, {"m0", "m1"}, partitions)
    time.sleep(1)  # let the group be stable (heartbeats) before the next change
    start = time.monotonic()
    members.append(Member("m3", conf, owners))
    _wait(owners, {"m0", "m1", "m3"}, partitions)
    times["3rd joins"] = time.monotonic() - start
    time.sleep(1)
    start = time.monotonic()
    closer = threading.Thread(target=members.pop(0).close)
    closer.start()
    _wait(owners, {"m1", "m3"}, partitions)
    times["1 leaves"] = time.monotonic() - start
    closer.join()
    for m in members:
        m.close()
    if owners.overlaps:
        raise AssertionError(f"{label}: {owners.overlaps} partition(s) owned by two members at once")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    hb = args.heartbeat_ms
    protocols = {
        "KIP-848 (uniform)": {"group.protocol": "consumer"},
        "classic range": {"group.protocol": "classic", "partition.assignment.strategy": "range",
                          "heartbeat.interval.ms": hb, "session.timeout.ms": 10_000},
        "classic cooperative-sticky": {"group.protocol": "classic",
                                       "partition.assignment.strategy": "cooperative-sticky",
                                       "heartbeat.interval.ms": hb, "session.timeout.ms": 10_000},
    }
    results: dict[str, dict[str, float]] = {}
    with EmbeddedBroker(None, group_consumer_heartbeat_interval_ms=hb,
                        group_consumer_session_timeout_ms=10_000) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])[TOPIC].result(30)
        for i, (label, extra) in enumerate(protocols.items()):
            print(f"{label} ...", file=sys.stderr)
            results[label] = run_protocol(broker.bootstrap, label, extra, f"bench-{i}", args.partitions)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    base = results["KIP-848 (uniform)"]
    print(f"rebalance of a 3-member group, {args.partitions} partitions, heartbeat {hb} ms, confluent-kafka "
          f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]}), kwire broker, "
          f"Python {platform.python_version()}; seconds until every partition is owned (one run)")
    print(f"{'moment':<12}" + "".join(f"{label:>28}" for label in results))
    for moment in base:
        cells = []
        for label, times in results.items():
            t = times[moment]
            cells.append(f"{t:>8.2f} s" if label == "KIP-848 (uniform)"
                         else f"{t:>8.2f} s ({t / base[moment]:>5.2f}x)")
        print(f"{moment:<12}" + "".join(f"{c:>28}" for c in cells))


if __name__ == "__main__":
    main()
