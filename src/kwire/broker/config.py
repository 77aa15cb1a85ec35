"""The broker's settings: one dataclass, read from TOML, overridden by command-line flags.

TOML keys are the field names below (``port = 9092``, ``fsync = "always"``); the log settings
sit in a ``[log]`` table named like ``LogConfig``'s fields (``segment_bytes``, ``retention_ms``).
Unknown keys are an error naming the key, so a typo never silently falls back to a default.

Security settings (listeners, TLS files, SASL mechanisms, the authorizer) are described in
``listeners`` and ``auth``; see the field comments below for their Kafka names.
"""

from __future__ import annotations

import base64
import dataclasses
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..settings import ConfigError, coerce, setting_types, unknown_setting
from .listeners import ListenerSpec, parse_advertised, parse_listeners
from .storage import LogConfig
from .storage.page_cache import MIN_PAGE_CACHE_BYTES

__all__ = ["BrokerConfig", "ConfigError", "FSYNC_POLICIES", "SASL_MECHANISMS", "load_config"]

FSYNC_POLICIES = ("never", "interval", "always")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SSL_CLIENT_AUTH = ("none", "requested", "required")
# The cleaner's worker process gets the segments' descriptors over a Unix socket (SCM_RIGHTS).
WORKER_PROCESS_SUPPORTED = hasattr(socket, "send_fds")


@dataclass(frozen=True)
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 9092
    # What Metadata tells clients to connect to; defaults to host (or 127.0.0.1 when host is 0.0.0.0).
    advertised_host: str | None = None
    advertised_port: int | None = None
    data_dir: Path = Path("kwire-data")
    node_id: int = 1
    auto_create_topics: bool = True                   # auto.create.topics.enable
    default_partitions: int = 1                       # num.partitions
    fsync: str = "never"                              # never | interval | always
    fsync_interval_ms: int = 1000                     # with fsync = "interval"
    max_request_size: int = 100 * 1024 * 1024         # socket.request.max.bytes
    # Bytes of large requests being received or waiting to be answered, over all connections
    # (queued.max.request.bytes; Kafka's default is no limit, -1).  Past it, connections that
    # start another large request stop reading until memory frees.
    queued_max_request_bytes: int = 256 * 1024 * 1024
    retention_check_interval_ms: int = 5 * 60 * 1000  # log.retention.check.interval.ms
    # Of the log bytes the broker writes, the newest this many stay in the page cache; older
    # ones are written back and dropped (storage/page_cache.py says why); -1 leaves it all to
    # the kernel, as Kafka does.  Linux only (elsewhere always -1).
    page_cache_bytes: int = 256 * 1024 * 1024
    # Group coordinator (Kafka's names: group.*).  Kafka waits 3 s for more members before the
    # first rebalance of a new group; here 0, so the embedded broker (tests) answers at once.
    # ``kwire broker`` starts with Kafka's 3000 (cli/broker_cmd.py KAFKA_DEFAULTS).
    group_initial_rebalance_delay_ms: int = 0
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # KIP-848 consumer groups (group.consumer.*): what a group without its own consumer.* group
    # configs gets.  Kafka's defaults; tests lower them to see rebalances quickly.
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    # Which ways a group converts between the classic and the consumer protocol (Kafka 4.x's
    # group.consumer.migration.policy): bidirectional | upgrade | downgrade | disabled.
    group_consumer_migration_policy: str = "bidirectional"
    # The server-side assignors members may name (group.consumer.assignors); the first is the default.
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    # KIP-1071 streams groups: Kafka holds a new streams group's first assignment back this long
    # (group.streams.initial.rebalance.delay.ms, 3000); as the classic delay above, 0 here and
    # Kafka's 3000 for ``kwire broker``.
    group_streams_initial_rebalance_delay_ms: int = 0
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # Transaction coordinator (Kafka's names: transaction.max.timeout.ms, transactional.id.expiration.ms).
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    # Internal topics (Kafka's offsets.topic.num.partitions, transaction.state.log.num.partitions).
    offsets_topic_num_partitions: int = 50
    transaction_state_log_num_partitions: int = 50
    # KIP-932's share-group state topic (Kafka's share.coordinator.state.topic.num.partitions).
    share_coordinator_state_topic_num_partitions: int = 50
    # ShareUpdate records written between two ShareSnapshots of a share partition's state
    # (Kafka's share.coordinator.snapshot.update.records.per.snapshot).
    share_coordinator_snapshot_update_records_per_snapshot: int = 500
    # The log cleaner (Kafka's log.cleaner.*): compacts topics whose cleanup.policy holds "compact".
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308  # Double.MAX_VALUE: unthrottled
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_io_buffer_size: int = 512 * 1024
    log_cleaner_backoff_ms: int = 15_000
    # kwire's own (kwire.log.cleaner.worker.process): each cleaner thread reads and writes in a
    # worker process of its own, out of the broker's GIL (storage/cleaner_worker.py).  On where
    # the platform can pass descriptors over Unix sockets: on the quiet 2-core VM, producers kept
    # 0.82x throughput and 0.86x p50 latency of a broker without cleaning with the worker, against
    # 0.89x and 0.72x with the cleaner in the broker's thread (issue 21's goal: 0.8 for both;
    # ``bench_cleaner.py --only produce --cleaner-in both --slices 9``, benchmarks/RESULTS.md).
    log_cleaner_worker_process: bool = WORKER_PROCESS_SUPPORTED
    # -- security ----------------------------------------------------------------------------------
    # listeners: "NAME://host:port" (Kafka's listeners); empty: one PLAINTEXT listener on host:port.
    # A NAME that is not a protocol needs an entry "NAME:PROTOCOL" in listener_security_protocol_map.
    listeners: tuple[str, ...] = ()
    listener_security_protocol_map: tuple[str, ...] = ()
    advertised_listeners: tuple[str, ...] = ()        # "NAME://host:port" told to clients
    # TLS for SSL and SASL_SSL listeners: PEM files (librdkafka's names), and ssl.client.auth.
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)  # never in a repr or a log line
    ssl_ca_location: str | None = None                # CA that signs client certificates (mutual TLS)
    ssl_client_auth: str = "none"                     # none | requested | required
    sasl_enabled_mechanisms: tuple[str, ...] = SASL_MECHANISMS
    # A failed login is answered after this delay (Kafka's connection.failed.authentication.delay.ms),
    # doubled for each recent failure from the same host, up to the max.
    failed_authentication_delay_ms: int = 100
    failed_authentication_max_delay_ms: int = 5000
    # ACLs are enforced only with authorizer = true (Kafka's authorizer.class.name); then a resource
    # without ACLs is denied to all but super users unless allow_everyone_if_no_acl_found.
    authorizer: bool = False
    super_users: tuple[str, ...] = ()                 # "User:admin" principals that bypass ACLs
    allow_everyone_if_no_acl_found: bool = False
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0-65535, got {self.port}")
        if self.fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {self.fsync!r}")
        if self.default_partitions < 1:
            raise ConfigError(f"default_partitions must be >= 1, got {self.default_partitions}")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ConfigError("group_initial_rebalance_delay_ms must be >= 0, "
                              f"got {self.group_initial_rebalance_delay_ms}")
        if not 0 < self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise ConfigError("group_min_session_timeout_ms must be > 0 and at most group_max_session_timeout_ms, "
                              f"got {self.group_min_session_timeout_ms} and {self.group_max_session_timeout_ms}")
        if self.fsync_interval_ms < 1:
            raise ConfigError(f"fsync_interval_ms must be >= 1, got {self.fsync_interval_ms}")
        if self.max_request_size < 1024:
            raise ConfigError(f"max_request_size must be >= 1024, got {self.max_request_size}")
        if self.transaction_max_timeout_ms < 1 or self.transactional_id_expiration_ms < 1:
            raise ConfigError("transaction_max_timeout_ms and transactional_id_expiration_ms must be >= 1")
        if self.queued_max_request_bytes < -1 or self.queued_max_request_bytes == 0:
            raise ConfigError("queued_max_request_bytes must be -1 (no limit) or > 0, "
                              f"got {self.queued_max_request_bytes}")
        if self.group_consumer_migration_policy not in ("bidirectional", "upgrade", "downgrade", "disabled"):
            raise ConfigError("group_consumer_migration_policy must be one of bidirectional, upgrade, downgrade, "
                              f"disabled, got {self.group_consumer_migration_policy!r}")
        if not self.group_consumer_assignors or set(self.group_consumer_assignors) - {"uniform", "range"}:
            raise ConfigError("group_consumer_assignors must name some of uniform, range, got "
                              f"{list(self.group_consumer_assignors)}")
        if not 0 < self.group_consumer_heartbeat_interval_ms < self.group_consumer_session_timeout_ms:
            raise ConfigError("group_consumer_heartbeat_interval_ms must be > 0 and less than "
                              "group_consumer_session_timeout_ms")
        if self.offsets_topic_num_partitions < 1 or self.transaction_state_log_num_partitions < 1:
            raise ConfigError("offsets_topic_num_partitions and transaction_state_log_num_partitions must be >= 1")
        if self.share_coordinator_state_topic_num_partitions < 1:
            raise ConfigError("share_coordinator_state_topic_num_partitions must be >= 1")
        if self.share_coordinator_snapshot_update_records_per_snapshot < 1:
            raise ConfigError("share_coordinator_snapshot_update_records_per_snapshot must be >= 1")
        if self.log_cleaner_threads < 1 or self.log_cleaner_backoff_ms < 1 or self.log_cleaner_io_buffer_size < 1:
            raise ConfigError("log_cleaner_threads, log_cleaner_backoff_ms and log_cleaner_io_buffer_size must be >= 1")
        if self.log_cleaner_io_max_bytes_per_second <= 0:
            raise ConfigError("log_cleaner_io_max_bytes_per_second must be > 0")
        # Kafka's floor: the dedupe buffer must hold at least one entry per thread.
        if self.log_cleaner_dedupe_buffer_size < 1024 * 1024 * self.log_cleaner_threads:
            raise ConfigError("log_cleaner_dedupe_buffer_size must be at least 1 MiB per cleaner thread")
        # The worker gets the segments' descriptors over a Unix socket (storage/cleaner_worker.py).
        if self.log_cleaner_worker_process and not hasattr(socket, "send_fds"):
            raise ConfigError("log_cleaner_worker_process needs Unix sockets that pass file descriptors "
                              "(socket.send_fds), which this platform lacks")
        if self.page_cache_bytes != -1 and self.page_cache_bytes < MIN_PAGE_CACHE_BYTES:
            raise ConfigError(f"page_cache_bytes must be -1 (no limit) or >= {MIN_PAGE_CACHE_BYTES}, "
                              f"got {self.page_cache_bytes}")
        self._check_security()

    def _check_security(self) -> None:
        specs = self.listener_specs()
        parse_advertised(self.advertised_listeners, specs)
        if any(s.tls for s in specs) and not self.ssl_certificate_location:
            raise ConfigError("an SSL or SASL_SSL listener needs ssl_certificate_location (and ssl_key_location)")
        if self.ssl_client_auth not in SSL_CLIENT_AUTH:
            raise ConfigError(f"ssl_client_auth must be one of {', '.join(SSL_CLIENT_AUTH)}, "
                              f"got {self.ssl_client_auth!r}")
        if self.ssl_client_auth != "none" and not self.ssl_ca_location:
            raise ConfigError(f"ssl_client_auth = {self.ssl_client_auth} needs ssl_ca_location to verify clients")
        unknown = [m for m in self.sasl_enabled_mechanisms if m not in SASL_MECHANISMS]
        if unknown:
            raise ConfigError(f"sasl_enabled_mechanisms: {', '.join(unknown)} not supported "
                              f"(supported: {', '.join(SASL_MECHANISMS)})")
        if any(s.sasl for s in specs) and not self.sasl_enabled_mechanisms:
            raise ConfigError("a SASL listener needs at least one of sasl_enabled_mechanisms")
        if self.failed_authentication_delay_ms < 0 or \
                self.failed_authentication_max_delay_ms < self.failed_authentication_delay_ms:
            raise ConfigError("failed_authentication_delay_ms must be >= 0 and <= failed_authentication_max_delay_ms")
        for principal in self.super_users:
            kind, sep, name = principal.partition(":")
            if not sep or not kind or not name:
                raise ConfigError(f"super_users entry {principal!r} must be a principal like User:admin")

    def listener_specs(self) -> list[ListenerSpec]:
        """The configured listeners, or the one PLAINTEXT listener on host:port."""
        if not self.listeners:
            if self.listener_security_protocol_map or self.advertised_listeners:
                raise ConfigError("listener_security_protocol_map and advertised_listeners need listeners")
            return [ListenerSpec("PLAINTEXT", "PLAINTEXT", self.host, self.port)]
        return parse_listeners(self.listeners, self.listener_security_protocol_map)

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.advertised_host or (self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        return host, self.advertised_port or self.port

    def with_(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)


# Each setting's value type, read from its annotation (``int | None`` -> int: None is never written).
_TOP_TYPES: dict[str, type] = {name: t.kind for name, t in setting_types(BrokerConfig).items()}
_LOG_TYPES: dict[str, type] = {name: t.kind for name, t in setting_types(LogConfig).items()}


def _check_type(name: str, value: Any) -> Any:
    return coerce(name, value, _TOP_TYPES[name])


def load_config(path: Path | None = None, *, defaults: dict[str, Any] | None = None,
                **overrides: Any) -> BrokerConfig:
    """BrokerConfig's defaults, then ``defaults`` (a program's own: ``kwire broker`` takes Kafka's
    where the embedded broker keeps faster ones for tests), then the TOML file (if any), then
    ``overrides`` (None values are ignored).

    ``overrides`` may hold ``log`` as a dict of LogConfig fields.
    """
    values: dict[str, Any] = dict(defaults or {})
    log_values: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text("utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        for key, value in data.items():
            if key == "log":
                if not isinstance(value, dict):
                    raise ConfigError(f"{path}: [log] must be a table")
                log_values.update(value)
            elif key in _TOP_TYPES:
                values[key] = value
            else:
                raise unknown_setting(key, _TOP_TYPES, where=str(path))
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "log":
            log_values.update({k: v for k, v in value.items() if v is not None})
        elif key in _TOP_TYPES:
            values[key] = value
        else:
            raise unknown_setting(key, _TOP_TYPES)
    checked = {key: _check_type(key, value) for key, value in values.items()}
    for key in log_values:
        if key not in _LOG_TYPES:
            raise unknown_setting(key, _LOG_TYPES, what="log setting", list_known=True)
    log_checked = {key: coerce(key, value, _LOG_TYPES[key]) for key, value in log_values.items()}
    try:
        log = LogConfig(**log_checked)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"log settings: {exc}") from None
    return BrokerConfig(**checked, log=log)


def new_cluster_id() -> str:
    """A Kafka-style cluster id: 16 random bytes in URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
