"""Where a `kwire produce` of 100,000 x 100 B spends its time, phase by phase.

Runs, in fresh interpreters against librdkafka's mock cluster (started here), what the command
does: import the CLI, the produce command, the client config and the blocking producer, connect,
queue the records, flush.  Each phase's milliseconds are printed per run, then the median.  The
records are queued as one list of values (the command reads them in place, which is faster:
see bench_cli.py for the command itself).

    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python benchmarks/cli_produce_phases.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import confluent_kafka

PHASES = ("main", "command", "config", "producer", "connect", "queue", "flush")

# The child: times each phase with perf_counter and prints them as JSON.
CHILD = """
import time; t = [time.perf_counter()]
import sys
import kwire.cli.main; t.append(time.perf_counter())
import kwire.cli.produce_cmd, kwire.cli.client_options; t.append(time.perf_counter())
from kwire.client.config import ProducerConfig; t.append(time.perf_counter())
from kwire.client.producer_blocking import BlockingProducer; t.append(time.perf_counter())
p = BlockingProducer(ProducerConfig.from_settings({"bootstrap.servers": sys.argv[1]})); t.append(time.perf_counter())
p.produce_many("phases", [b"x" * 100] * 100_000); t.append(time.perf_counter())
p.flush(); t.append(time.perf_counter())
p.close()
import json; print(json.dumps([round(1000 * (b - a), 1) for a, b in zip(t, t[1:], strict=False)]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    mock = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(mock.list_topics(timeout=10).brokers.values()))
    bootstrap = f"{broker.host}:{broker.port}"
    rows = []
    print(" ".join(f"{name:>9}" for name in PHASES) + "   (ms)")
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", CHILD, bootstrap], capture_output=True, text=True, timeout=60,
                             check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(" ".join(f"{v:9.1f}" for v in row))
    print(" ".join(f"{statistics.median(col):9.1f}" for col in zip(*rows, strict=True)) + "   median")


if __name__ == "__main__":
    main()
