"""Client settings under Kafka's names: what Java and librdkafka users already write.

    ProducerConfig.from_settings({"bootstrap.servers": "k1:9092,k2:9092", "acks": "all"}, linger_ms=5)
    ConsumerConfig.from_settings(load_properties("consumer.properties"), group_id="billing")

A field is a Kafka property with its dots as underscores (``bootstrap_servers`` is
``bootstrap.servers``).  ``from_settings`` takes a mapping of Kafka's dotted names and keywords
with underscores (keywords win; either spelling works in either place), typed or as text as in a .properties file or ``-X key=value``:
"1000" is 1000, "true"/"false" booleans, "all" is acks -1, "a,b" a list.  Constructing a config
directly (``ProducerConfig(linger_ms=5)``) runs the same checks.

Every mistake is a ``ConfigError`` naming the setting: an unknown name (with the closest known
one), a wrong type, a value out of range, a setting of another client ("group.id is a consumer
setting"), or a Kafka setting kwire does not implement yet (``transactional.id``, SSL/SASL).
Unlike Java, which logs unknown settings and carries on, nothing is ignored silently.

Defaults are Kafka 4.x's Java client's; where kwire differs, the field's comment says why.
Settings Java derives from others when not given (``enable.idempotence``,
``delivery.timeout.ms``, ``enable.auto.commit``) are None in the signature and resolved on
construction as Java does; ``with_()`` re-derives them, ``dataclasses.replace`` would not.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..settings import ConfigError, check_choice, check_range, coerce, did_you_mean, setting_types
from .partitioner import PARTITIONERS

__all__ = [
    "ASSIGNORS",
    "AdminConfig",
    "CommonConfig",
    "ConfigError",
    "ConsumerConfig",
    "ProducerConfig",
    "SECURITY_PROTOCOLS",
    "SUPPORTED_SECURITY_PROTOCOLS",
    "load_properties",
    "parse_host_port",
    "parse_properties",
    "secret",
]

I32 = 2**31 - 1  # Java's Integer.MAX_VALUE: the bound of Kafka's INT settings
I64 = 2**63 - 1  # Long.MAX_VALUE: LONG settings

# security.protocol values Kafka knows, and those kwire implements.  Adding SSL/SASL: list the
# protocol here, add its settings as fields (passwords with ``secret()``), and drop its prefix
# from _UNSUPPORTED_PREFIXES.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT",)

# partition.assignment.strategy names and the rebalance protocol each one runs.
ASSIGNORS = {"range": "eager", "roundrobin": "eager", "cooperative-sticky": "cooperative"}
# Java properties files name assignors by class.
_JAVA_ASSIGNORS = {f"org.apache.kafka.clients.consumer.{cls}": name for cls, name in (
    ("RangeAssignor", "range"), ("RoundRobinAssignor", "roundrobin"), ("CooperativeStickyAssignor", "cooperative-sticky"))}

_HIDDEN = "[hidden]"  # what to_dict shows of a secret


def _int(default: int | None, *, low: int = 0, high: int = I32) -> Any:
    """An integer setting and its bounds (by default Java's INT: 0 to 2^31-1)."""
    return field(default=default, metadata={"range": (low, high)})


def _choice(default: str, *choices: str) -> Any:
    return field(default=default, metadata={"choices": choices})


def secret(default: str | None = None) -> Any:
    """A setting never shown: left out of repr, masked by ``to_dict`` (passwords, keys)."""
    return field(default=default, repr=False, metadata={"secret": True})


def _kafka_name(name: str) -> str:
    return name.replace("_", ".")


C = TypeVar("C", bound="CommonConfig")


@dataclass(frozen=True)
class CommonConfig:
    """The settings every client takes."""

    ROLE: ClassVar[str] = "client"
    # Fields that are None when not given and derived on construction (see the module docstring).
    _DERIVED: ClassVar[tuple[str, ...]] = ()

    # host:port pairs to reach the cluster at first (IPv6 as [addr]:port); the other brokers are
    # learnt from Metadata.  A string is split at commas.
    bootstrap_servers: tuple[str, ...] = ("localhost:9092",)
    # Named in every request: broker logs, quotas, metrics.  Java: "" then "producer-1"...;
    # librdkafka: "rdkafka".  kwire names itself.
    client_id: str = "kwire"
    # How long to wait for the answer to a request before failing or retrying it.
    request_timeout_ms: int = _int(30_000)
    # Refresh metadata at least this often, to see new brokers and partitions.
    metadata_max_age_ms: int = _int(300_000, high=I64)
    # Retries of a failed request wait retry.backoff.ms, doubling up to retry.backoff.max.ms (KIP-580).
    retry_backoff_ms: int = _int(100, high=I64)
    retry_backoff_max_ms: int = _int(1000, high=I64)
    # Reconnects to a broker wait reconnect.backoff.ms, doubling up to reconnect.backoff.max.ms.
    reconnect_backoff_ms: int = _int(50, high=I64)
    reconnect_backoff_max_ms: int = _int(1000, high=I64)
    # Give up on a TCP connect (and try the next address) after this long.
    socket_connection_setup_timeout_ms: int = _int(10_000, high=I64)
    # Close a connection that has been idle this long.
    connections_max_idle_ms: int = _int(540_000, high=I64)
    # Requests sent on a connection before their answers come.  A producer setting in Java,
    # shared by every client as in librdkafka; at most 5 for an idempotent producer.
    max_in_flight_requests_per_connection: int = _int(5, low=1)
    # PLAINTEXT only for now (see SECURITY_PROTOCOLS).  Case-insensitive, as in Java.
    security_protocol: str = "PLAINTEXT"
    # The rack this client runs in: consumers fetch from a replica in it where brokers allow
    # (KIP-392).  A consumer setting in Java.
    client_rack: str = ""

    # -- construction -----------------------------------------------------------------------------
    def __post_init__(self) -> None:
        given = {name for name in self._DERIVED if getattr(self, name) is not None}
        object.__setattr__(self, "_given", frozenset(given))
        for name, kind in setting_types(type(self)).items():
            value = getattr(self, name)
            if value is None and kind.optional:
                continue
            key = _kafka_name(name)
            special = _PARSERS.get(name)
            if special is not None:
                value = special(key, value)
            else:
                value = coerce(key, value, kind.kind, parse_text=True)
                meta = _fields(type(self))[name].metadata
                if "range" in meta:
                    check_range(key, value, *meta["range"])
                if "choices" in meta:
                    check_choice(key, value, meta["choices"])
            object.__setattr__(self, name, value)
        self._check()

    def _check(self) -> None:
        """Rules across settings; subclasses add theirs (and derive their _DERIVED fields)."""

    @classmethod
    def from_settings(cls: type[C], conf: Mapping[str, Any] | None = None, /, **kwargs: Any) -> C:
        """A config from Kafka's dotted names (``conf``) and underscored keywords; keywords win."""
        values: dict[str, Any] = {}
        for key, value in [*(conf or {}).items(), *kwargs.items()]:
            values[cls._field_of(key)] = value
        return cls(**values)

    @classmethod
    def _field_of(cls, key: Any) -> str:
        """The field ``key`` sets (either spelling: no Kafka name has an underscore), or the
        ConfigError saying why it sets none."""
        if not isinstance(key, str):
            raise ConfigError(f"setting names are strings, got {key!r}")
        name = key.replace(".", "_")
        if name not in _fields(cls):
            raise cls._not_a_setting(key)
        return name

    @classmethod
    def _not_a_setting(cls, key: str) -> ConfigError:
        kafka = _kafka_name(key)
        roles = [role for role, other in _ROLES.items() if other is not cls and key.replace(".", "_") in _fields(other)]
        if roles:
            return ConfigError(f"{kafka} is a {' and '.join(roles)} setting; {cls._a_role()} does not take it")
        reason = _unsupported(kafka)
        if reason is not None:
            role, why = reason
            if role is not None and role != cls.ROLE:
                return ConfigError(f"{kafka} is a {role} setting; {cls._a_role()} does not take it")
            return ConfigError(f"{kafka} is not supported: {why}")
        # Suggest in the spelling the key was written in.
        known = [_kafka_name(n) if "." in key else n for n in _fields(cls)]
        message = f"unknown {cls.ROLE} setting {key!r}"
        guess = did_you_mean(key, known)
        return ConfigError(message + (f" (did you mean {guess!r}?)" if guess else ""))

    @classmethod
    def _a_role(cls) -> str:
        return ("an " if cls.ROLE[0] in "aeiou" else "a ") + cls.ROLE

    def with_(self: C, **changes: Any) -> C:
        """A copy with ``changes`` (field names), derived settings derived again."""
        kept = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in self._DERIVED or f.name in self._given}  # type: ignore[attr-defined]
        return type(self)(**{**kept, **changes})

    # -- output -----------------------------------------------------------------------------------
    def to_dict(self, *, include_secrets: bool = False) -> dict[str, Any]:
        """Kafka's dotted names -> values (lists for lists), for JSON output and logs.  Secrets
        show as "[hidden]" unless ``include_secrets``; ``from_settings(to_dict(include_secrets=True))``
        equals this config."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("secret") and value is not None and not include_secrets:
                value = _HIDDEN
            out[_kafka_name(f.name)] = list(value) if isinstance(value, tuple) else value
        return out

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        """``bootstrap.servers`` as (host, port) pairs (IPv6 hosts without brackets)."""
        return [parse_host_port(address) for address in self.bootstrap_servers]


@dataclass(frozen=True)
class ProducerConfig(CommonConfig):
    ROLE: ClassVar[str] = "producer"
    _DERIVED: ClassVar[tuple[str, ...]] = ("enable_idempotence", "delivery_timeout_ms")

    # Acknowledgement a produce waits for: 0 none, 1 the leader's, -1 ("all") every in-sync replica's.
    acks: int = -1
    # Wait up to this long for more records before sending a batch that is not full.  Kafka 4.0's
    # default (KIP-1030; 0 before).
    linger_ms: int = _int(5, high=I64)
    # Bytes of records per partition batch; a batch is sent when full.
    batch_size: int = _int(16_384)
    compression_type: str = _choice("none", "none", "gzip", "snappy", "lz4", "zstd")
    # Producer id and sequence numbers, so that retries never duplicate nor reorder records.
    # Not given: on unless acks, retries or max.in.flight rule it out (then quietly off, as in
    # Java 3.x+); given true with one of those: ConfigError.
    enable_idempotence: bool | None = None
    # Resends of a failed batch (within delivery.timeout.ms, which is the real bound).
    retries: int = _int(I32)
    # Report a record failed this long after send() at the latest.  Not given: 120000, or
    # linger.ms + request.timeout.ms when that is more (Java); given below that: ConfigError.
    delivery_timeout_ms: int | None = _int(None)
    # Bytes of records waiting to be sent before send() blocks.
    buffer_memory: int = _int(33_554_432, high=I64)
    # How long send() may block: for metadata of a new topic, or for buffer memory.
    max_block_ms: int = _int(60_000, high=I64)
    # Largest Produce request, so also the largest record.
    max_request_size: int = _int(1_048_576, low=1)
    # How records without a partition are spread: librdkafka's names (see kwire.client.partitioner).
    # murmur2_random is what Java's default partitioner does.
    partitioner: str = _choice("murmur2_random", *PARTITIONERS)
    # Choose partitions as if no record had a key (Java's built-in partitioner setting).
    partitioner_ignore_keys: bool = False

    def _check(self) -> None:
        super()._check()
        # Java's postProcessAndValidateIdempotenceConfigs.
        conflicts = []
        if self.acks != -1:
            conflicts.append(f"acks=all (got {self.acks})")
        if self.retries == 0:
            conflicts.append("retries > 0 (got 0)")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append(f"max.in.flight.requests.per.connection <= 5 "
                             f"(got {self.max_in_flight_requests_per_connection})")
        if self.enable_idempotence is None:
            object.__setattr__(self, "enable_idempotence", not conflicts)
        elif self.enable_idempotence and conflicts:
            raise ConfigError(f"enable.idempotence=true needs {', '.join(conflicts)}; "
                              "set enable.idempotence=false to go without")
        # Java's KafkaProducer.configureDeliveryTimeout.
        floor = min(self.linger_ms + self.request_timeout_ms, I32)
        if self.delivery_timeout_ms is None:
            object.__setattr__(self, "delivery_timeout_ms", max(120_000, floor))
        elif self.delivery_timeout_ms < floor:
            raise ConfigError(f"delivery.timeout.ms must be >= linger.ms + request.timeout.ms ({floor}), "
                              f"got {self.delivery_timeout_ms}")


@dataclass(frozen=True)
class ConsumerConfig(CommonConfig):
    ROLE: ClassVar[str] = "consumer"
    _DERIVED: ClassVar[tuple[str, ...]] = ("enable_auto_commit",)

    # The consumer group; None: no group (assign() only, offsets not committed).
    group_id: str | None = None
    # Static membership (KIP-345): a member restarting within session.timeout.ms keeps its partitions.
    group_instance_id: str | None = None
    # Where to start when the group has no committed offset: latest, earliest, or none (an error).
    auto_offset_reset: str = _choice("latest", "latest", "earliest", "none")
    # Commit consumed offsets every auto.commit.interval.ms.  Not given: true with a group.id,
    # false without (Java); true without a group.id: ConfigError.
    enable_auto_commit: bool | None = None
    auto_commit_interval_ms: int = _int(5000)
    # The coordinator drops a member it has not heard from for this long.
    session_timeout_ms: int = _int(45_000, low=1)
    # How often to tell the coordinator this member is alive; below session.timeout.ms.
    heartbeat_interval_ms: int = _int(3000, low=1)
    # A member that does not poll for this long leaves the group (also its rebalance timeout).
    max_poll_interval_ms: int = _int(300_000, low=1)
    max_poll_records: int = _int(500, low=1)
    # A fetch waits until fetch.min.bytes are there or fetch.max.wait.ms has passed.
    fetch_min_bytes: int = _int(1)
    fetch_max_wait_ms: int = _int(500)
    # Bytes per fetch response, and per partition in it (soft limits: one batch always fits).
    fetch_max_bytes: int = _int(52_428_800)
    max_partition_fetch_bytes: int = _int(1_048_576)
    # Assignors offered to the group, preferred first (names, or Java's class names).  Java's
    # default mixes eager range with cooperative-sticky: allowed, as in Java (the group then
    # rebalances eagerly, see rebalance_protocol); librdkafka refuses mixes.
    partition_assignment_strategy: tuple[str, ...] = ("range", "cooperative-sticky")
    # read_committed skips records of aborted transactions and stops at open ones.  Java's
    # default; librdkafka's is read_committed.
    isolation_level: str = _choice("read_uncommitted", "read_uncommitted", "read_committed")
    # Check the CRC of fetched batches.
    check_crcs: bool = True
    # Let a subscription to a missing topic create it (when the broker allows).  Java's default;
    # librdkafka's is false.
    allow_auto_create_topics: bool = True
    # Leave internal topics (__consumer_offsets...) out of pattern subscriptions.
    exclude_internal_topics: bool = True

    def _check(self) -> None:
        super()._check()
        for name in ("group_id", "group_instance_id"):
            if getattr(self, name) == "":
                raise ConfigError(f"{_kafka_name(name)} must not be empty (leave it unset for none)")
        if self.enable_auto_commit is None:
            object.__setattr__(self, "enable_auto_commit", self.group_id is not None)
        elif self.enable_auto_commit and self.group_id is None:
            raise ConfigError("enable.auto.commit=true needs a group.id")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(f"heartbeat.interval.ms ({self.heartbeat_interval_ms}) must be lower than "
                              f"session.timeout.ms ({self.session_timeout_ms})")

    @property
    def rebalance_protocol(self) -> str:
        """"cooperative" when every configured assignor is cooperative, else "eager" (Java)."""
        protocols = {ASSIGNORS[name] for name in self.partition_assignment_strategy}
        return "cooperative" if protocols == {"cooperative"} else "eager"


@dataclass(frozen=True)
class AdminConfig(CommonConfig):
    ROLE: ClassVar[str] = "admin"

    # Java's AdminClientConfig default is 5 minutes, not the producer's and consumer's 9.
    connections_max_idle_ms: int = _int(300_000, high=I64)


_ROLES: dict[str, type[CommonConfig]] = {"producer": ProducerConfig, "consumer": ConsumerConfig, "admin": AdminConfig}


@functools.cache
def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


# -- settings with their own parsing ---------------------------------------------------------------
_HOST = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")  # a DNS name or an IPv4 address


def parse_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[ipv6]:port"`` -> (host, port); ValueError saying what is wrong."""
    text = address.strip()
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise ValueError(f"{address!r} has no ']' after its IPv6 address")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{address!r}: {host!r} is not an IPv6 address") from None
        if not rest.startswith(":"):
            raise ValueError(f"{address!r} has no port (write [{host}]:9092)")
        port = rest[1:]
    else:
        host, colon, port = text.rpartition(":")
        if not colon:
            raise ValueError(f"{address!r} has no port (write {text or 'host'}:9092)")
        if ":" in host:
            raise ValueError(f"{address!r}: an IPv6 address goes in brackets, as [{host}]:{port}")
        if not _HOST.fullmatch(host):
            raise ValueError(f"{address!r}: {host!r} is not a host name or address")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"{address!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def _parse_bootstrap(key: str, value: Any) -> tuple[str, ...]:
    servers = coerce(key, value, tuple)
    if not servers:
        raise ConfigError(f"{key} must name at least one host:port")
    for address in servers:
        try:
            parse_host_port(address)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    return servers


def _parse_acks(key: str, value: Any) -> int:
    if isinstance(value, str) and value.strip().lower() == "all":
        return -1
    try:
        acks = coerce(key, value, int, parse_text=True)
    except ConfigError:
        acks = None
    if acks not in (-1, 0, 1):
        raise ConfigError(f"{key} must be all, -1, 0 or 1, got {value!r}")
    return acks


def _parse_assignors(key: str, value: Any) -> tuple[str, ...]:
    names = tuple(_JAVA_ASSIGNORS.get(name, name) for name in coerce(key, value, tuple))
    if not names:
        raise ConfigError(f"{key} must name at least one assignor")
    for name in names:
        check_choice(key, name, ASSIGNORS)
    if len(set(names)) != len(names):
        raise ConfigError(f"{key} names an assignor twice: {', '.join(names)}")
    return names


def _parse_security_protocol(key: str, value: Any) -> str:
    protocol = coerce(key, value, str).strip().upper()
    check_choice(key, protocol, SECURITY_PROTOCOLS)
    if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
        raise ConfigError(f"{key}={protocol} is not supported yet (kwire speaks {', '.join(SUPPORTED_SECURITY_PROTOCOLS)})")
    return protocol


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "bootstrap_servers": _parse_bootstrap,
    "acks": _parse_acks,
    "partition_assignment_strategy": _parse_assignors,
    "security_protocol": _parse_security_protocol,
}


# -- Kafka settings kwire knows but does not implement ---------------------------------------------
# Given one, a client refuses to start rather than run without what it asks for.  Name -> (the
# role it belongs to, None for any; why).
_TRANSACTIONS = "transactions are not implemented yet"
_CLASSES = "Java classes cannot be loaded"
_METRICS = "client metrics are not implemented yet"
_UNSUPPORTED: dict[str, tuple[str | None, str]] = {
    "transactional.id": ("producer", _TRANSACTIONS),
    "transaction.timeout.ms": ("producer", _TRANSACTIONS),
    "partitioner.class": ("producer", f"{_CLASSES}; use partitioner"),
    "partitioner.adaptive.partitioning.enable": ("producer", "adaptive partitioning (KIP-794) is not implemented"),
    "partitioner.availability.timeout.ms": ("producer", "adaptive partitioning (KIP-794) is not implemented"),
    "key.serializer": ("producer", "keys and values are bytes; serialize before sending"),
    "value.serializer": ("producer", "keys and values are bytes; serialize before sending"),
    "compression.gzip.level": ("producer", "compression levels are not configurable yet"),
    "compression.lz4.level": ("producer", "compression levels are not configurable yet"),
    "compression.zstd.level": ("producer", "compression levels are not configurable yet"),
    "metadata.max.idle.ms": ("producer", "not implemented yet"),
    "key.deserializer": ("consumer", "records come back as bytes; deserialize after polling"),
    "value.deserializer": ("consumer", "records come back as bytes; deserialize after polling"),
    "group.protocol": ("consumer", "only the classic group protocol is implemented (not KIP-848's)"),
    "group.remote.assignor": ("consumer", "only the classic group protocol is implemented (not KIP-848's)"),
    "interceptor.classes": (None, _CLASSES),
    "default.api.timeout.ms": (None, "not implemented yet"),
    "client.dns.lookup": (None, "not implemented yet"),
    "socket.connection.setup.timeout.max.ms": (None, "not implemented yet"),
    "send.buffer.bytes": (None, "socket buffer sizes are left to the operating system"),
    "receive.buffer.bytes": (None, "socket buffer sizes are left to the operating system"),
    "metric.reporters": (None, _METRICS),
    "metrics.num.samples": (None, _METRICS),
    "metrics.recording.level": (None, _METRICS),
    "metrics.sample.window.ms": (None, _METRICS),
    "enable.metrics.push": (None, _METRICS),
    "auto.include.jmx.reporter": (None, _METRICS),
    "security.providers": (None, "SSL and SASL are not implemented yet"),
}
_UNSUPPORTED_PREFIXES = {"ssl.": "SSL is not implemented yet", "sasl.": "SASL is not implemented yet"}


def _unsupported(kafka_name: str) -> tuple[str | None, str] | None:
    if kafka_name in _UNSUPPORTED:
        return _UNSUPPORTED[kafka_name]
    for prefix, why in _UNSUPPORTED_PREFIXES.items():
        if kafka_name.startswith(prefix):
            return None, why
    return None


# -- .properties files -------------------------------------------------------------------------
def load_properties(path: str | Path) -> dict[str, str]:
    """The settings of a Java-style .properties file (UTF-8), in file order; see ``parse_properties``."""
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"properties file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"properties file {path}: {exc}") from None
    return parse_properties(text, str(path))


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """``key=value`` / ``key: value`` / ``key value`` lines as Java's ``Properties.load`` reads
    them: ``#`` and ``!`` comment lines, blank lines, a trailing backslash continuing the line,
    backslash escapes (``\\t``, ``\\n``, ``\\uXXXX``, ``\\=``...).  Errors name ``source`` and the line.

    Stricter than Java where Java's leniency hides mistakes: a line with a key and no separator,
    and a key given twice, are errors.  Trailing blanks of values are dropped (Java keeps them).
    """
    found: dict[str, str] = {}
    line_of: dict[str, int] = {}
    lines = _LINE_BREAK.split(text)  # not str.splitlines: it also breaks at \f, a blank here
    i = 0
    while i < len(lines):
        number, logical = i + 1, lines[i].lstrip(" \t\f")
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while _continued(logical) and i < len(lines):
            logical = logical[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continued(logical):  # a continuation at the end of the file continues nothing
            logical = logical[:-1]
        where = f"{source}:{number}"
        key, value = _split_entry(logical, where)
        if key in found:
            raise ConfigError(f"{where}: {key} is already set on line {line_of[key]}")
        found[key], line_of[key] = value, number
    return found


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _continued(line: str) -> bool:
    """Whether the line ends in an odd number of backslashes (an even number is escaped ones)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_entry(line: str, where: str) -> tuple[str, str]:
    """(key, value) of one logical line: the key ends at the first unescaped '=', ':' or blank."""
    end = 0
    while end < len(line) and line[end] not in "=: \t\f":
        end += 2 if line[end] == "\\" else 1
    end = min(end, len(line))
    key = _unescape(line[:end], where)
    rest = line[end:].lstrip(" \t\f")
    separator = rest[:1] in ("=", ":")
    if separator:
        rest = rest[1:].lstrip(" \t\f")
    if not key:
        raise ConfigError(f"{where}: no setting name before the value: {line!r}")
    if not separator and not rest:
        raise ConfigError(f"{where}: expected key=value, got {line!r}")
    value = rest.rstrip(" \t\f")
    if len(value) < len(rest) and _continued(value):  # "a\\ " ends in an escaped blank: keep it
        value = rest[:len(value) + 1]
    return key, _unescape(value, where)


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, where: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        if c == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{where}: bad \\u escape {text[i:i + 6]!r} (needs 4 hex digits)")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(c, c))
        i += 2
    return "".join(out)
