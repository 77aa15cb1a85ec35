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
setting"), or a Kafka setting kwire does not implement yet (Java keystores, metrics).
Unlike Java, which logs unknown settings and carries on, nothing is ignored silently: ``sasl.*``
settings without a SASL ``security.protocol`` (or ``ssl.*`` without SSL) are an error too.

Security (TLS and SASL) takes librdkafka's names, which both Java and librdkafka users know::

    security.protocol=SASL_SSL               PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    sasl.mechanism=SCRAM-SHA-512             PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (librdkafka: sasl.mechanisms)
    sasl.username=alice / sasl.password=...  or Java's sasl.jaas.config (PlainLoginModule/ScramLoginModule)
    ssl.ca.location=ca.pem                   PEM file or directory; default: the system's trusted CAs
    ssl.certificate.location=client.pem      client certificate for mutual TLS (PEM), and its
    ssl.key.location=client.key              private key (PEM; ssl.key.password if encrypted)
    ssl.endpoint.identification.algorithm    https (default: the broker's certificate must name its
                                             host) or none (librdkafka) / empty (Java): chain only
    enable.ssl.certificate.verification      true (default); false trusts any certificate (librdkafka's)


Defaults are Kafka 4.x's Java client's; where kwire differs, the field's comment says why.
Settings Java derives from others when not given (``enable.idempotence``,
``delivery.timeout.ms``, ``enable.auto.commit``) are None in the signature and resolved on
construction as Java does; ``with_()`` re-derives them, ``dataclasses.replace`` would not.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..settings import ConfigError, check_choice, check_range, coerce, did_you_mean, setting_types
from .partitioner import PARTITIONERS

if TYPE_CHECKING:
    from pathlib import Path  # load_properties imports it when called: pathlib (with urllib.parse
    # and ipaddress) is a few ms of every client command line's start-up (issue 24)

__all__ = [
    "ASSIGNORS",
    "AdminConfig",
    "CommonConfig",
    "ConfigError",
    "ConsumerConfig",
    "ProducerConfig",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "SUPPORTED_SECURITY_PROTOCOLS",
    "load_properties",
    "parse_host_port",
    "parse_properties",
    "secret",
]

I32 = 2**31 - 1  # Java's Integer.MAX_VALUE: the bound of Kafka's INT settings
I64 = 2**63 - 1  # Long.MAX_VALUE: LONG settings

# security.protocol values Kafka knows, and those kwire implements (all of them now).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_SECURITY_PROTOCOLS = SECURITY_PROTOCOLS
# sasl.mechanism values kwire's client speaks (GSSAPI and OAUTHBEARER are not implemented).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Other names for a setting: librdkafka's, so that its configs (and kcat's -X habits) work as
# they are.  Each maps to the one setting that means the same (librdkafka's CONFIGURATION.md
# documents these as aliases of, or equivalent to, the Java names).
_ALIASES = {
    "sasl_mechanisms": "sasl_mechanism",
    "queue_buffering_max_ms": "linger_ms",
    "request_required_acks": "acks",
    "compression_codec": "compression_type",
    "message_send_max_retries": "retries",
    "message_timeout_ms": "delivery_timeout_ms",
    "max_in_flight": "max_in_flight_requests_per_connection",
    "fetch_wait_max_ms": "fetch_max_wait_ms",
    "fetch_message_max_bytes": "max_partition_fetch_bytes",
    "topic_metadata_refresh_interval_ms": "metadata_max_age_ms",
}
# Values librdkafka takes beside Java's, by setting.
_VALUE_ALIASES: dict[str, dict[str, str]] = {
    "auto_offset_reset": {"smallest": "earliest", "beginning": "earliest", "largest": "latest", "end": "latest"},
}

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


class _Signature:
    """``inspect.signature`` of a config class (help(), editors): its settings with their
    defaults, as @dataclass's generated __init__ showed them; made only when asked for."""

    def __get__(self, obj: object, owner: type) -> Any:
        import inspect

        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(f.name, kind, default=f.default, annotation=f.type)
                                  for f in dataclasses.fields(owner)], return_annotation=None)


# __init__, repr, == and hash are CommonConfig's own (written once over the fields, below), not
# generated for each class by @dataclass: compiling an __init__ of ~60 parameters for each of
# four classes was half of this module's import, which every client command line pays (issue
# 24).  The fields stay dataclass fields (kwire.settings reads them; dataclasses.fields and
# replace work as before) and the classes frozen dataclasses (a subclass may be one too).
@dataclass(frozen=True, init=False, repr=False, eq=False)
class CommonConfig:
    """The settings every client takes."""

    ROLE: ClassVar[str] = "client"
    __signature__ = _Signature()
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
    # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.  Case-insensitive, as in Java.
    security_protocol: str = "PLAINTEXT"
    # SASL (SASL_PLAINTEXT, SASL_SSL): the mechanism and the login.  No default mechanism: Java's
    # and librdkafka's (GSSAPI) is one kwire does not speak.
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = secret()
    # Java's way to give the login (PlainLoginModule or ScramLoginModule with username= and
    # password=); read into sasl.username and sasl.password, which must agree if also given.
    sasl_jaas_config: str | None = secret()
    # TLS (SSL, SASL_SSL), PEM files as librdkafka takes them.  The CA (a file, or a directory of
    # hashed certificates) that signed the brokers' certificates; None: the system's trusted CAs.
    ssl_ca_location: str | None = None
    # A client certificate for mutual TLS, its key (None: in the certificate file) and the key's password.
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = secret()
    # "https": the broker's certificate must name the host connected to (Kafka's default since 2.0);
    # "none" (librdkafka's word; Java writes an empty value): the chain is still verified.
    ssl_endpoint_identification_algorithm: str = "https"
    # librdkafka's switch to trust any certificate (no chain, no hostname check): for tests only.
    enable_ssl_certificate_verification: bool = True
    # The rack this client runs in: consumers fetch from a replica in it where brokers allow
    # (KIP-392).  A consumer setting in Java.
    client_rack: str = ""

    # -- construction -----------------------------------------------------------------------------
    def __init__(self, *args: Any, **settings: Any) -> None:
        """The settings by field name (``linger_ms=5``; positionally in field order, as a
        dataclass takes them), each parsed and checked; the others at their defaults."""
        fields = _fields(type(self))
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__qualname__}() takes {len(fields)} settings, {len(args)} were given")
        for name, value in zip(fields, args, strict=False):  # fewer args than fields: the rest by name
            if name in settings:
                raise TypeError(f"{type(self).__qualname__}() got multiple values for {name!r}")
            settings[name] = value
        unknown = [name for name in settings if name not in fields]
        if unknown:
            raise TypeError(f"{type(self).__qualname__}() got an unexpected keyword argument {unknown[0]!r}")
        for name, f in fields.items():
            if name in settings:
                value = settings[name]
            elif f.default is not dataclasses.MISSING:
                value = f.default
            else:  # a default_factory (no config field has neither)
                value = f.default_factory()  # type: ignore[operator]
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        given = {name for name in self._DERIVED if getattr(self, name) is not None}
        object.__setattr__(self, "_given", frozenset(given))
        for name, kind in setting_types(type(self)).items():
            value = getattr(self, name)
            if value is None and kind.optional:
                continue
            key = _kafka_name(name)
            if isinstance(value, str) and name in _VALUE_ALIASES:
                value = _VALUE_ALIASES[name].get(value.strip().lower(), value)
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
        _check_security(self)

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
        name = _ALIASES.get(name, name)
        if name not in _fields(cls):
            raise cls._not_a_setting(key)
        return name

    @classmethod
    def _not_a_setting(cls, key: str) -> ConfigError:
        kafka = _kafka_name(key)
        underscored = key.replace(".", "_")
        underscored = _ALIASES.get(underscored, underscored)
        roles = [role for role, other in _ROLES.items() if other is not cls and underscored in _fields(other)]
        if roles:
            return ConfigError(f"{kafka} is a {' and '.join(roles)} setting; {cls._a_role()} does not take it")
        reason = _unsupported(kafka)
        if reason is not None:
            role, why = reason
            if role is not None and role != cls.ROLE:
                return ConfigError(f"{kafka} is a {role} setting; {cls._a_role()} does not take it")
            return ConfigError(f"{kafka} is not supported: {why}")
        # Suggest in the spelling the key was written in: underscores only to one who wrote them
        # (a keyword argument); Kafka's dotted names otherwise, librdkafka's aliases included.
        fields = _fields(cls)
        names = [*fields, *(alias for alias, target in _ALIASES.items() if target in fields)]
        known = [n if "_" in key else _kafka_name(n) for n in names]
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
    # repr, == and hash are written once here, over the fields, rather than generated for each class
    # by @dataclass: compiling those three for four classes of ~60 fields was a third of this
    # module's import, which every client command line pays (issue 24).  They do what the
    # generated ones do: repr leaves out repr=False fields (secrets), == compares every field of
    # two configs of the same class.
    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name, f in _fields(type(self)).items() if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _fields(type(self)))

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in _fields(type(self))))

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


@dataclass(frozen=True, init=False, repr=False, eq=False)
class ProducerConfig(CommonConfig):
    """A producer's settings (Kafka's ProducerConfig): the common ones and batching, acks,
    idempotence, delivery timeout, partitioner, transactions."""

    ROLE: ClassVar[str] = "producer"
    _DERIVED: ClassVar[tuple[str, ...]] = ("enable_idempotence", "delivery_timeout_ms")

    # Acknowledgement a produce waits for: 0 none, 1 the leader's, -1 ("all") every in-sync replica's.
    acks: int = -1
    # Wait up to this long for more records before sending a batch that is not full.  Kafka 4.0's
    # default (KIP-1030; 0 before).
    linger_ms: int = _int(5, high=I64)
    # Bytes of records per partition batch; a batch is sent when full.
    batch_size: int = _int(16_384)
    # librdkafka's bound on the records of one batch (Java has none): a batch is also full at
    # this many records.  None: no bound, as Java.
    batch_num_messages: int | None = _int(None, low=1, high=1_000_000)
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
    # Transactions (init_transactions, begin/commit/abort_transaction): the id that a restarted
    # producer takes over (fencing the old one).  Implies idempotence.
    transactional_id: str | None = None
    # The coordinator aborts a transaction open longer than this (bounded by the broker's
    # transaction.max.timeout.ms).
    transaction_timeout_ms: int = _int(60_000, low=1)

    def _check(self) -> None:
        super()._check()
        # Java's postProcessAndValidateIdempotenceConfigs.
        if self.transactional_id == "":
            raise ConfigError("transactional.id must not be empty (leave it unset for no transactions)")
        if self.transactional_id is not None and self.enable_idempotence is False:
            raise ConfigError("transactional.id needs enable.idempotence=true (transactions are idempotent)")
        conflicts = []
        if self.acks != -1:
            conflicts.append(f"acks=all (got {self.acks})")
        if self.retries == 0:
            conflicts.append("retries > 0 (got 0)")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append(f"max.in.flight.requests.per.connection <= 5 "
                             f"(got {self.max_in_flight_requests_per_connection})")
        if self.enable_idempotence is None and self.transactional_id is None:
            object.__setattr__(self, "enable_idempotence", not conflicts)
        elif (self.enable_idempotence or self.transactional_id is not None) and conflicts:
            if self.transactional_id is not None:
                raise ConfigError(f"transactional.id needs {', '.join(conflicts)} (transactions are idempotent)")
            raise ConfigError(f"enable.idempotence=true needs {', '.join(conflicts)}; "
                              "set enable.idempotence=false to go without")
        if self.enable_idempotence is None:
            object.__setattr__(self, "enable_idempotence", True)  # implied by transactional.id
        # Java's KafkaProducer.configureDeliveryTimeout.
        floor = min(self.linger_ms + self.request_timeout_ms, I32)
        if self.delivery_timeout_ms is None:
            object.__setattr__(self, "delivery_timeout_ms", max(120_000, floor))
        elif self.delivery_timeout_ms < floor:
            raise ConfigError(f"delivery.timeout.ms must be >= linger.ms + request.timeout.ms ({floor}), "
                              f"got {self.delivery_timeout_ms}")


@dataclass(frozen=True, init=False, repr=False, eq=False)
class ConsumerConfig(CommonConfig):
    """A consumer's settings (Kafka's ConsumerConfig): the common ones and the group, offsets,
    fetching and isolation."""

    ROLE: ClassVar[str] = "consumer"
    _DERIVED: ClassVar[tuple[str, ...]] = ("enable_auto_commit",)

    # The consumer group; None: no group (assign() only, offsets not committed).
    group_id: str | None = None
    # Static membership (KIP-345): a member restarting within session.timeout.ms keeps its partitions.
    group_instance_id: str | None = None
    # classic: JoinGroup/SyncGroup, the leader runs partition.assignment.strategy; consumer
    # (KIP-848): the broker assigns with group.remote.assignor (its default when None) and sets
    # the session timeout and heartbeat interval (the settings of those names do not apply).
    group_protocol: str = _choice("classic", "classic", "consumer")
    group_remote_assignor: str | None = None
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


@dataclass(frozen=True, init=False, repr=False, eq=False)
class AdminConfig(CommonConfig):
    """An admin client's settings (Kafka's AdminClientConfig): the common ones."""

    ROLE: ClassVar[str] = "admin"

    # Java's AdminClientConfig default is 5 minutes, not the producer's and consumer's 9.
    connections_max_idle_ms: int = _int(300_000, high=I64)


_ROLES: dict[str, type[CommonConfig]] = {"producer": ProducerConfig, "consumer": ConsumerConfig, "admin": AdminConfig}


def _fields_of(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


# Cached per class.  Typed as a plain callable: through functools.cache's own type, mypy would ask
# a config class to be Hashable by its instances' __hash__.
_fields: Callable[[type], dict[str, dataclasses.Field[Any]]] = functools.cache(_fields_of)


# -- settings with their own parsing ---------------------------------------------------------------
_HOST = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")  # a DNS name or an IPv4 address


def parse_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[ipv6]:port"`` -> (host, port); ValueError saying what is wrong."""
    text = address.strip()
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise ValueError(f"{address!r} has no ']' after its IPv6 address")
        import ipaddress  # only for a bracketed address (see the TYPE_CHECKING import of Path)

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
    servers: tuple[str, ...] = coerce(key, value, tuple)
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
        acks: int | None = coerce(key, value, int, parse_text=True)
    except ConfigError:
        acks = None
    if acks is None or acks not in (-1, 0, 1):
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
    protocol: str = coerce(key, value, str).strip().upper()
    check_choice(key, protocol, SECURITY_PROTOCOLS)
    if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
        raise ConfigError(f"{key}={protocol} is not supported yet (kwire speaks {', '.join(SUPPORTED_SECURITY_PROTOCOLS)})")
    return protocol


def _parse_sasl_mechanism(key: str, value: Any) -> str | None:
    if value is None:
        return None
    # Mechanism names are upper case in the SASL registry; Kafka compares them exactly, kwire forgives.
    mechanism: str = coerce(key, value, str).strip().upper()
    if mechanism in ("GSSAPI", "OAUTHBEARER"):
        raise ConfigError(f"{key}={mechanism} is not supported: kwire speaks {', '.join(SASL_MECHANISMS)}")
    check_choice(key, mechanism, SASL_MECHANISMS)
    return mechanism


def _parse_endpoint_identification(key: str, value: Any) -> str:
    word = coerce(key, value, str).strip().lower()
    word = word or "none"  # Java turns hostname verification off with an empty value
    check_choice(key, word, ("https", "none"))
    return word


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "bootstrap_servers": _parse_bootstrap,
    "acks": _parse_acks,
    "partition_assignment_strategy": _parse_assignors,
    "security_protocol": _parse_security_protocol,
    "sasl_mechanism": _parse_sasl_mechanism,
    "ssl_endpoint_identification_algorithm": _parse_endpoint_identification,
}


# -- security: settings that only make sense together ---------------------------------------------
_SASL_FIELDS = ("sasl_mechanism", "sasl_username", "sasl_password", "sasl_jaas_config")
_SSL_FIELDS = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location", "ssl_key_password")
# Java's login modules for the mechanisms kwire speaks (a JAAS line names one).
_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
# A JAAS line and its options, compiled when a sasl.jaas.config is first read (not at every import).
_JAAS_LINE = (r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
              r"(?P<options>(?:\s+[\w.-]+\s*=\s*(?:\"(?:[^\"\\]|\\.)*\"|[^\s;\"]+))*)\s*;\s*")
_JAAS_OPTION = r"([\w.-]+)\s*=\s*(?:\"((?:[^\"\\]|\\.)*)\"|([^\s;\"]+))"


def _parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module, options) of a one-module JAAS line.  Errors never quote the text: it holds a password."""
    match = re.fullmatch(_JAAS_LINE, text, re.S)
    if match is None:
        raise ConfigError('sasl.jaas.config is not a JAAS line like org.apache.kafka.common.security.scram.'
                          'ScramLoginModule required username="alice" password="...";')
    options = {}
    for m in re.finditer(_JAAS_OPTION, match["options"], re.S):
        quoted, bare = m[2], m[3]
        options[m[1]] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
    return match["module"], options


def _check_security(config: CommonConfig) -> None:
    protocol = config.security_protocol
    sasl = protocol.startswith("SASL_")
    tls = protocol.endswith("SSL")
    if not sasl:
        given = [_kafka_name(n) for n in _SASL_FIELDS if getattr(config, n) is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} given, but security.protocol is {protocol}: "
                              "set security.protocol=SASL_SSL or SASL_PLAINTEXT to log in with SASL")
    if not tls:
        given = [_kafka_name(n) for n in _SSL_FIELDS if getattr(config, n) is not None]
        if config.ssl_endpoint_identification_algorithm != "https":
            given.append("ssl.endpoint.identification.algorithm")
        if not config.enable_ssl_certificate_verification:
            given.append("enable.ssl.certificate.verification")
        if given:
            raise ConfigError(f"{', '.join(given)} given, but security.protocol is {protocol}: "
                              "set security.protocol=SSL or SASL_SSL to use TLS")
    if config.ssl_key_location is not None and config.ssl_certificate_location is None:
        raise ConfigError("ssl.key.location needs ssl.certificate.location (the client certificate it belongs to)")
    if config.ssl_key_password is not None and config.ssl_key_location is None and \
            config.ssl_certificate_location is None:
        raise ConfigError("ssl.key.password needs ssl.certificate.location (and ssl.key.location)")
    if not sasl:
        return
    if config.sasl_jaas_config is not None:
        _apply_jaas(config, config.sasl_jaas_config)
    if config.sasl_mechanism is None:
        raise ConfigError(f"security.protocol={protocol} needs sasl.mechanism ({', '.join(SASL_MECHANISMS)})")
    if not config.sasl_username:
        raise ConfigError(f"security.protocol={protocol} needs sasl.username (or sasl.jaas.config)")
    if config.sasl_password is None:
        raise ConfigError(f"security.protocol={protocol} needs sasl.password (or sasl.jaas.config)")


def _apply_jaas(config: CommonConfig, jaas: str) -> None:
    """Take username and password from sasl.jaas.config (``jaas``); explicit settings must say the same."""
    module, options = _parse_jaas(jaas)
    mechanisms = _JAAS_MODULES.get(module)
    if mechanisms is None:
        raise ConfigError(f"sasl.jaas.config names {module}; kwire takes PlainLoginModule or ScramLoginModule")
    if config.sasl_mechanism is not None and config.sasl_mechanism not in mechanisms:
        raise ConfigError(f"sasl.jaas.config names {module.rsplit('.', 1)[-1]}, which does not do "
                          f"sasl.mechanism={config.sasl_mechanism}")
    for option in ("username", "password"):
        if option not in options:
            raise ConfigError(f"sasl.jaas.config has no {option}=")
        name = f"sasl_{option}"
        given = getattr(config, name)
        if given is not None and given != options[option]:
            raise ConfigError(f"sasl.{option} and the {option} in sasl.jaas.config differ; give one of them")
        object.__setattr__(config, name, options[option])


# -- Kafka settings kwire knows but does not implement ---------------------------------------------
# Given one, a client refuses to start rather than run without what it asks for.  Name -> (the
# role it belongs to, None for any; why).
_CLASSES = "Java classes cannot be loaded"
_METRICS = "client metrics are not implemented yet"
_UNSUPPORTED: dict[str, tuple[str | None, str]] = {
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
    "security.providers": (None, "Java security providers cannot be loaded"),
    # Java's keystores and librdkafka's in-memory PEM: kwire reads PEM files.
    "ssl.truststore.location": (None, "kwire reads PEM files: give the CA as ssl.ca.location "
                                      "(keytool -exportcert -rfc turns a truststore entry into PEM)"),
    "ssl.truststore.password": (None, "kwire reads PEM files: give the CA as ssl.ca.location"),
    "ssl.truststore.type": (None, "kwire reads PEM files: give the CA as ssl.ca.location"),
    "ssl.truststore.certificates": (None, "kwire reads PEM files: give the CA as ssl.ca.location"),
    "ssl.keystore.location": (None, "kwire reads PEM files: give ssl.certificate.location and ssl.key.location"),
    "ssl.keystore.password": (None, "kwire reads PEM files: give ssl.certificate.location and ssl.key.location"),
    "ssl.keystore.type": (None, "kwire reads PEM files: give ssl.certificate.location and ssl.key.location"),
    "ssl.keystore.key": (None, "kwire reads PEM files: give ssl.certificate.location and ssl.key.location"),
    "ssl.keystore.certificate.chain": (None, "kwire reads PEM files: give ssl.certificate.location"),
    "ssl.ca.pem": (None, "kwire reads PEM files: write it to a file and give ssl.ca.location"),
    "ssl.certificate.pem": (None, "kwire reads PEM files: write it to a file and give ssl.certificate.location"),
    "ssl.key.pem": (None, "kwire reads PEM files: write it to a file and give ssl.key.location"),
    "ssl.protocol": (None, "kwire speaks TLS 1.2 and 1.3, as the system's OpenSSL allows"),
    "ssl.enabled.protocols": (None, "kwire speaks TLS 1.2 and 1.3, as the system's OpenSSL allows"),
    "ssl.cipher.suites": (None, "the system's OpenSSL defaults are used"),
    "ssl.key.password.type": (None, "not implemented"),
    "sasl.kerberos.service.name": (None, "GSSAPI (Kerberos) is not implemented"),
    "sasl.client.callback.handler.class": (None, _CLASSES),
    "sasl.login.callback.handler.class": (None, _CLASSES),
    "sasl.login.class": (None, _CLASSES),
    "sasl.oauthbearer.config": (None, "OAUTHBEARER is not implemented"),
}
# Whole families kwire does not implement.
_UNSUPPORTED_PREFIXES = {"sasl.kerberos.": "GSSAPI (Kerberos) is not implemented",
                         "sasl.oauthbearer.": "OAUTHBEARER is not implemented",
                         "sasl.login.": "Java login modules are not implemented (sasl.jaas.config is read "
                                        "for username and password only)"}


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
    from pathlib import Path

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
    lines = re.split(_LINE_BREAK, text)  # not str.splitlines: it also breaks at \f, a blank here
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


_LINE_BREAK = r"\r\n|\r|\n"  # compiled (and cached by re) when a properties file is read


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
