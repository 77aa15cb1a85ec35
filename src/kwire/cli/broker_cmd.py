"""``kwire broker``: run the single-node Kafka-compatible broker in the foreground.

    kwire broker                                   127.0.0.1:9092, data in ./kwire-data
    kwire broker --port 19092 --fsync always --config broker.toml

SIGINT and SIGTERM stop it cleanly (flush, clean-shutdown marker); the next start then skips
recovery.  With ``--json`` the startup line is one JSON object (for scripts waiting on it).
On glibc the process keeps freed request buffers for reuse (``kwire.broker.malloc``); malloc
settings given in the environment (``MALLOC_*_``, ``GLIBC_TUNABLES``) take precedence.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from kwire.broker import Broker, ConfigError, load_config
from kwire.broker.config import FSYNC_POLICIES
from kwire.broker.malloc import tune_malloc
from kwire.protocol.errors import KafkaError

from .output import fail


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("broker", help="run kwire's single-node Kafka-compatible broker",
                       description="Run kwire's Kafka-compatible broker: one process, a durable log in a "
                                   "data directory, spoken to by any Kafka client. Flags override --config.")
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML settings (flags override it)")
    p.add_argument("--data-dir", type=Path, help="where the log lives (default ./kwire-data)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 9092; 0 picks a free one)")
    p.add_argument("--advertised-host", help="host clients are told to connect to (default: --host)")
    p.add_argument("--advertised-port", type=int, help="port clients are told to connect to (default: --port)")
    p.add_argument("--node-id", type=int, help="this broker's node id (default 1)")
    p.add_argument("--fsync", choices=FSYNC_POLICIES,
                   help="never: leave it to the OS; interval: every --fsync-interval-ms; always: acks=all "
                        "answered after fsync (group commit). Default never")
    p.add_argument("--fsync-interval-ms", type=int, help="with --fsync interval (default 1000)")
    auto = p.add_mutually_exclusive_group()
    auto.add_argument("--auto-create-topics", dest="auto_create_topics", action="store_true", default=None,
                      help="create topics on first use (the default)")
    auto.add_argument("--no-auto-create-topics", dest="auto_create_topics", action="store_false",
                      help="refuse unknown topics")
    p.add_argument("--default-partitions", type=int, help="partitions of auto-created topics (default 1)")
    p.add_argument("--segment-bytes", type=int, help="roll segments at this size (default 1 GiB)")
    p.add_argument("--segment-ms", type=int, help="roll segments at this age (default 7 days)")
    p.add_argument("--retention-ms", type=int, help="delete segments older than this; -1 never (default 7 days)")
    p.add_argument("--retention-bytes", type=int, help="keep partitions under this size; -1 no limit (default)")
    p.add_argument("--max-request-size", type=int, help="largest request accepted (default 100 MiB)")
    p.add_argument("--queued-max-request-bytes", type=int,
                   help="memory for large requests over all connections; past it, connections starting "
                        "another one wait (default 256 MiB; -1 no limit)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="server log verbosity on stderr (default info)")
    p.add_argument("--json", action="store_true", help="print the startup line as JSON on stdout")
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> dict:
    log = {"segment_bytes": args.segment_bytes, "segment_ms": args.segment_ms, "retention_ms": args.retention_ms,
           "retention_bytes": args.retention_bytes}
    return {"data_dir": args.data_dir, "host": args.host, "port": args.port, "advertised_host": args.advertised_host,
            "advertised_port": args.advertised_port, "node_id": args.node_id, "fsync": args.fsync,
            "fsync_interval_ms": args.fsync_interval_ms, "auto_create_topics": args.auto_create_topics,
            "default_partitions": args.default_partitions, "max_request_size": args.max_request_size,
            "queued_max_request_bytes": args.queued_max_request_bytes, "log": log}


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, **_settings(args))
    except ConfigError as exc:
        return fail(str(exc))
    # This process is the broker and nothing else: let it keep freed request buffers for reuse
    # (see kwire.broker.malloc; the embedded broker leaves its host process alone).
    tune_malloc()
    try:
        return asyncio.run(_serve(config, args.json))
    except (KafkaError, OSError) as exc:
        return fail(f"broker could not start: {exc}", 1)


async def _serve(config, as_json: bool) -> int:
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host, port = broker.address
    if as_json:
        print(json.dumps({"bootstrap": broker.bootstrap, "host": host, "port": port,
                          "data_dir": str(config.data_dir), "cluster_id": broker.state.cluster_id}), flush=True)
    else:
        print(f"kwire broker ready: bootstrap.servers={broker.bootstrap} data={config.data_dir} "
              f"(Ctrl-C stops it)", flush=True)
    await stop.wait()
    logging.getLogger("kwire.broker").info("signal received: shutting down cleanly")
    await broker.stop()
    return 0
