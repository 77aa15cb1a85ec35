"""``kwire broker``: run the single-node Kafka-compatible broker in the foreground.

    kwire broker                                   127.0.0.1:9092, data in ./kwire-data
    kwire broker --port 19092 --fsync always --config broker.toml
    kwire broker --listener PLAINTEXT://127.0.0.1:9092 --listener SASL_SSL://0.0.0.0:9093 \
        --ssl-certificate-location broker.pem --ssl-key-location broker.key --authorizer --super-user User:admin

Security: ``--listener`` (repeatable, Kafka's NAME://host:port; a NAME that is not a protocol needs
``--listener-security-protocol-map NAME:PROTOCOL``), PEM files for TLS, SASL users from
``kwire users``, ACLs from ``kwire acls`` enforced with ``--authorizer``.

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
import os
import signal
import sys
from pathlib import Path

from kwire.broker.config import FSYNC_POLICIES, SASL_MECHANISMS, SSL_CLIENT_AUTH, ConfigError, load_config
from kwire.broker.malloc import tune_malloc
from kwire.protocol.errors import KafkaError

from .output import fail

KEY_PASSWORD_ENV = "KWIRE_SSL_KEY_PASSWORD"
# Where ``kwire broker`` takes Kafka's default and the embedded broker (for tests) a faster one:
# Kafka waits group.initial.rebalance.delay.ms for more members before a new group's first
# rebalance; a test suite would wait too.
KAFKA_DEFAULTS = {"group_initial_rebalance_delay_ms": 3000, "group_streams_initial_rebalance_delay_ms": 3000}


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
    p.add_argument("--page-cache-bytes", type=int,
                   help="of the log bytes written, the newest this many stay in the page cache; older ones "
                        "are written back and dropped, so writes reuse memory (default 256 MiB; -1 leaves "
                        "it to the kernel; Linux only)")
    sec = p.add_argument_group("security (TLS, SASL, ACLs)")
    sec.add_argument("--listener", dest="listeners", action="append", metavar="NAME://HOST:PORT",
                     help="a listener (repeatable): PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, or a name mapped "
                          "with --listener-security-protocol-map; replaces --host/--port")
    sec.add_argument("--listener-security-protocol-map", dest="protocol_map", action="append", metavar="NAME:PROTO",
                     help="a listener name's security protocol, e.g. CLIENT:SASL_SSL (repeatable or comma-separated)")
    sec.add_argument("--advertised-listener", dest="advertised_listeners", action="append",
                     metavar="NAME://HOST:PORT", help="what clients of a listener are told to connect to (repeatable)")
    sec.add_argument("--ssl-certificate-location", metavar="PEM", help="the broker's certificate (chain), PEM")
    sec.add_argument("--ssl-key-location", metavar="PEM", help="its private key, PEM")
    sec.add_argument("--ssl-key-password", help=f"the key's pass phrase (better: ${KEY_PASSWORD_ENV})")
    sec.add_argument("--ssl-ca-location", metavar="PEM", help="CA certificates that sign client certificates")
    sec.add_argument("--ssl-client-auth", choices=SSL_CLIENT_AUTH,
                     help="ask TLS clients for a certificate: none (default), requested, required (mutual TLS)")
    sec.add_argument("--sasl-enabled-mechanisms", metavar="LIST",
                     help=f"SASL mechanisms offered, comma-separated (default {','.join(SASL_MECHANISMS)})")
    sec.add_argument("--failed-authentication-delay-ms", type=int,
                     help="delay before answering a failed login, doubled per recent failure of the host "
                          "(default 100)")
    authz = sec.add_mutually_exclusive_group()
    authz.add_argument("--authorizer", dest="authorizer", action="store_true", default=None,
                       help="enforce ACLs (kwire acls); a resource without ACLs is then denied to non-super users")
    authz.add_argument("--no-authorizer", dest="authorizer", action="store_false", help="no ACLs (the default)")
    sec.add_argument("--super-user", dest="super_users", action="append", metavar="PRINCIPAL",
                     help="a principal that bypasses ACLs, e.g. User:admin (repeatable)")
    sec.add_argument("--allow-everyone-if-no-acl-found", action="store_true", default=None,
                     help="with --authorizer: a resource without any ACL is open to all")
    grp = p.add_argument_group("consumer groups (Kafka's group.* broker settings)")
    grp.add_argument("--group-initial-rebalance-delay-ms", type=int, metavar="MS",
                     help="how long a new group waits for more members before its first rebalance "
                          f"(default {KAFKA_DEFAULTS['group_initial_rebalance_delay_ms']}, as Kafka; the embedded "
                          "broker: 0)")
    grp.add_argument("--group-min-session-timeout-ms", type=int, metavar="MS",
                     help="the shortest session timeout a member may ask for (default 6000)")
    grp.add_argument("--group-max-session-timeout-ms", type=int, metavar="MS",
                     help="the longest session timeout a member may ask for (default 1800000)")
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
            "queued_max_request_bytes": args.queued_max_request_bytes,
            "page_cache_bytes": args.page_cache_bytes, "log": log,
            "listeners": args.listeners, "listener_security_protocol_map": _split(args.protocol_map),
            "advertised_listeners": args.advertised_listeners,
            "ssl_certificate_location": args.ssl_certificate_location, "ssl_key_location": args.ssl_key_location,
            "ssl_key_password": args.ssl_key_password or os.environ.get(KEY_PASSWORD_ENV) or None,
            "ssl_ca_location": args.ssl_ca_location, "ssl_client_auth": args.ssl_client_auth,
            "sasl_enabled_mechanisms": _split([args.sasl_enabled_mechanisms] if args.sasl_enabled_mechanisms else None),
            "failed_authentication_delay_ms": args.failed_authentication_delay_ms,
            "authorizer": args.authorizer, "super_users": args.super_users,
            "group_initial_rebalance_delay_ms": args.group_initial_rebalance_delay_ms,
            "group_min_session_timeout_ms": args.group_min_session_timeout_ms,
            "group_max_session_timeout_ms": args.group_max_session_timeout_ms,
            "allow_everyone_if_no_acl_found": args.allow_everyone_if_no_acl_found}


def _split(values: list[str] | None) -> list[str] | None:
    """Repeated and/or comma-separated values, as one list (None when not given)."""
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.listeners and (args.host is not None or args.port is not None):
        return fail("--host and --port make the one PLAINTEXT listener; with --listener give every address there")
    try:
        config = load_config(args.config, defaults=KAFKA_DEFAULTS, **_settings(args))
    except ConfigError as exc:
        return fail(str(exc))
    # This process is the broker and nothing else: let it keep freed request buffers for reuse
    # (see kwire.broker.malloc; the embedded broker leaves its host process alone).
    tune_malloc()
    try:
        return asyncio.run(_serve(config, args.json))
    except (KafkaError, OSError, ValueError) as exc:  # ValueError: unusable TLS files (ssl.SSLError is an OSError)
        return fail(f"broker could not start: {exc}", 1)


async def _serve(config, as_json: bool) -> int:
    from kwire.broker.server import Broker  # the whole broker: only when one is started

    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host, port = broker.address
    if as_json:
        listeners = {name: f"{li.advertised[0]}:{li.advertised[1]}" for name, li in broker.listeners.items()}
        print(json.dumps({"bootstrap": broker.bootstrap, "host": host, "port": port, "listeners": listeners,
                          "data_dir": str(config.data_dir), "cluster_id": broker.state.cluster_id}), flush=True)
    else:
        listeners = " ".join(f"{name}={li.advertised[0]}:{li.advertised[1]}" for name, li in broker.listeners.items())
        print(f"kwire broker ready: bootstrap.servers={broker.bootstrap} ({listeners}) data={config.data_dir} "
              f"(Ctrl-C stops it)", flush=True)
    await stop.wait()
    logging.getLogger("kwire.broker").info("signal received: shutting down cleanly")
    await broker.stop()
    return 0
