"""Every topic-level config Kafka 4.3 knows, in one table, and the small functions around it.

Each ``TopicConfigDef`` holds what Kafka's ``LogConfig`` ConfigDef holds for the name: value type
(``ConfigType``), default, validator, a line of documentation (ours), the broker configs that
supply its default (Kafka's ``ServerTopicConfigSynonyms``, by priority) and the ``LogConfig``
field it drives in kwire ("" for a config kwire accepts and shows but does not act on: one node
has no replication throttles, no tiered storage, no preallocation...).

    parse_value("retention.ms", "abc")        # ConfigError: retention.ms must be an integer, got 'abc'
    topic_log_config(static, broker_dynamic, {"retention.ms": "1000"})   # the partition's LogConfig

A topic's value comes from the first of: its own override, the dynamic per-broker value of its
broker synonym, the dynamic cluster-wide default, the broker's static config, Kafka's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kwire.protocol.configs import ConfigSource, ConfigType
from kwire.settings import ConfigError, check_choice, check_range, coerce, unknown_setting

from .storage.config import LONG_MAX, LogConfig

__all__ = [
    "BrokerSynonym",
    "INTERNAL_SEGMENT_BYTES",
    "ListOf",
    "OneOf",
    "Range",
    "TOPIC_CONFIGS",
    "ThrottledReplicas",
    "TopicConfigDef",
    "Valued",
    "broker_synonyms",
    "check_topic_overrides",
    "config_value_string",
    "describe_topic_config",
    "parse_value",
    "static_broker_value",
    "synonym_default",
    "topic_log_config",
]

INT_MAX, INT_MIN = (1 << 31) - 1, -(1 << 31)
LONG_MIN = -(1 << 63)
_DAY_MS = 24 * 3600 * 1000
_HOUR_MS, _MINUTE_MS = 3600 * 1000, 60 * 1000


# -- validators (Kafka's ConfigDef.Range, ValidString, ValidList, ThrottledReplicaListValidator) ---
@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (None: unbounded); ``also`` lists values allowed outside it
    (gzip's level -1, "the codec's default")."""

    low: int | float | None = None
    high: int | float | None = None
    also: tuple[int, ...] = ()

    def check(self, name: str, value: Any) -> None:
        if value in self.also:
            return
        try:
            check_range(name, value, self.low, self.high)
        except ConfigError as exc:
            if self.also:
                raise ConfigError(f"{exc} (or one of {', '.join(map(str, self.also))})") from None
            raise

    def __str__(self) -> str:
        text = f"[{'...' if self.low is None else self.low},...,{'...' if self.high is None else self.high}]"
        return text + "".join(f" or {v}" for v in self.also)


@dataclass(frozen=True)
class OneOf:
    """A string that is one of ``choices`` (case-sensitive, as Kafka's ValidString)."""

    choices: tuple[str, ...]

    def check(self, name: str, value: Any) -> None:
        check_choice(name, value, self.choices)

    def __str__(self) -> str:
        return f"[{', '.join(self.choices)}]"


@dataclass(frozen=True)
class ListOf:
    """A non-empty comma-separated list of ``choices`` (Kafka's ValidList.in)."""

    choices: tuple[str, ...]

    def check(self, name: str, value: Any) -> None:
        bad = [item for item in value if item not in self.choices]
        if bad or not value:
            raise ConfigError(f"{name} must be a list of {', '.join(self.choices)}, got {','.join(value)!r}")

    def __str__(self) -> str:
        return f"[{', '.join(self.choices)}]"


@dataclass(frozen=True)
class ThrottledReplicas:
    """``*``, or ``partition:broker`` pairs (Kafka's ThrottledReplicaListValidator)."""

    def check(self, name: str, value: Any) -> None:
        if list(value) == ["*"] or all(_is_pair(item) for item in value):
            return
        raise ConfigError(f"{name} must be '*' or a list of partition:broker pairs, got {','.join(value)!r}")

    def __str__(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


def _is_pair(item: str) -> bool:
    partition, sep, broker = item.partition(":")
    return bool(sep) and partition.strip().isdigit() and broker.strip().isdigit()


Validator = Range | OneOf | ListOf | ThrottledReplicas


@dataclass(frozen=True)
class BrokerSynonym:
    """A broker config that defaults a topic config: ``value * unit_ms`` is the topic's value
    (``log.retention.hours`` = 168 -> retention.ms 604800000)."""

    name: str
    unit_ms: int = 1


@dataclass(frozen=True)
class TopicConfigDef:
    name: str
    type: ConfigType
    default: str | None     # Kafka's default, as DescribeConfigs shows it
    validator: Validator | None
    doc: str
    synonyms: tuple[BrokerSynonym, ...] = ()  # by priority; only the first is dynamically updatable
    field: str = ""         # the LogConfig field it drives; "" = accepted and shown, not acted on
    internal: bool = False  # accepted, never listed (Kafka's defineInternal)

    @property
    def broker_name(self) -> str | None:
        """The broker config that sets this one's default cluster-wide (the first synonym)."""
        return self.synonyms[0].name if self.synonyms else None


def _syn(*names: str | tuple[str, int]) -> tuple[BrokerSynonym, ...]:
    return tuple(BrokerSynonym(n) if isinstance(n, str) else BrokerSynonym(*n) for n in names)


_B, _S, _I, _L, _D, _LIST = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG,
                             ConfigType.DOUBLE, ConfigType.LIST)
_CODECS = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # Kafka's BrokerCompressionType
_LONG_MAX = str(LONG_MAX)

# Kafka 4.3's LogConfig, in its order.  Defaults are Kafka's (ServerLogConfigs, LogConfig).
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in (
    TopicConfigDef("segment.bytes", _I, str(1 << 30), Range(1024 * 1024, INT_MAX),
                   "Size at which a partition's active segment file is closed and a new one started; retention "
                   "and compaction work on whole segments.", _syn("log.segment.bytes"), "segment_bytes"),
    TopicConfigDef("segment.ms", _L, str(7 * _DAY_MS), Range(1, LONG_MAX),
                   "Age at which the active segment is rolled even when not full, so that old data can expire.",
                   _syn("log.roll.ms", ("log.roll.hours", _HOUR_MS)), "segment_ms"),
    TopicConfigDef("segment.jitter.ms", _L, "0", Range(0, LONG_MAX),
                   "Largest random time taken off segment.ms so that partitions do not all roll at once.",
                   _syn("log.roll.jitter.ms", ("log.roll.jitter.hours", _HOUR_MS))),
    TopicConfigDef("segment.index.bytes", _I, str(10 * 1024 * 1024), Range(4, INT_MAX),
                   "Size of a segment's offset index (kwire's indexes grow as needed; accepted for compatibility).",
                   _syn("log.index.size.max.bytes")),
    TopicConfigDef("flush.messages", _L, _LONG_MAX, Range(1, LONG_MAX),
                   "Records written before the log is forced to disk (kwire: see the broker's fsync setting).",
                   _syn("log.flush.interval.messages")),
    TopicConfigDef("flush.ms", _L, _LONG_MAX, Range(0, LONG_MAX),
                   "Time after which written records are forced to disk (kwire: see the broker's fsync setting).",
                   _syn("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
    TopicConfigDef("retention.bytes", _L, "-1", Range(LONG_MIN, LONG_MAX),
                   "Size a partition may reach before its oldest segments are deleted; -1: no size limit.",
                   _syn("log.retention.bytes"), "retention_bytes"),
    TopicConfigDef("retention.ms", _L, str(7 * _DAY_MS), Range(-1, LONG_MAX),
                   "How long a segment is kept after its newest record before it is deleted; -1: forever.",
                   _syn("log.retention.ms", ("log.retention.minutes", _MINUTE_MS), ("log.retention.hours", _HOUR_MS)),
                   "retention_ms"),
    TopicConfigDef("max.message.bytes", _I, str(1024 * 1024 + 12), Range(0, INT_MAX),
                   "Largest record batch the topic accepts, after compression.", _syn("message.max.bytes"),
                   "max_message_bytes"),
    TopicConfigDef("index.interval.bytes", _I, "4096", Range(0, INT_MAX),
                   "Bytes of records between two entries of the offset index.", _syn("log.index.interval.bytes"),
                   "index_interval_bytes"),
    TopicConfigDef("delete.retention.ms", _L, str(_DAY_MS), Range(0, LONG_MAX),
                   "How long tombstones (null values) stay in a compacted topic after cleaning reaches them.",
                   _syn("log.cleaner.delete.retention.ms"), "delete_retention_ms"),
    TopicConfigDef("min.compaction.lag.ms", _L, "0", Range(0, LONG_MAX),
                   "Least time a record stays uncompacted.", _syn("log.cleaner.min.compaction.lag.ms"),
                   "min_compaction_lag_ms"),
    TopicConfigDef("max.compaction.lag.ms", _L, _LONG_MAX, Range(1, LONG_MAX),
                   "Longest time a record may stay uncompacted before its segment is cleaned.",
                   _syn("log.cleaner.max.compaction.lag.ms"), "max_compaction_lag_ms"),
    TopicConfigDef("file.delete.delay.ms", _L, "60000", Range(0, LONG_MAX),
                   "Wait before a deleted segment's files are removed (kwire removes them at once).",
                   _syn("log.segment.delete.delay.ms")),
    TopicConfigDef("min.cleanable.dirty.ratio", _D, "0.5", Range(0, 1),
                   "Share of the log that must be uncompacted before the cleaner compacts it.",
                   _syn("log.cleaner.min.cleanable.ratio"), "min_cleanable_dirty_ratio"),
    TopicConfigDef("cleanup.policy", _LIST, "delete", ListOf(("compact", "delete")),
                   "What happens to old segments: delete (by retention.ms / retention.bytes), compact (keep the "
                   "latest record of each key), or both.", _syn("log.cleanup.policy"), "cleanup_policy"),
    TopicConfigDef("unclean.leader.election.enable", _B, "false", None,
                   "Whether a replica out of sync may become leader (one node: no effect).",
                   _syn("unclean.leader.election.enable")),
    TopicConfigDef("min.insync.replicas", _I, "1", Range(1, INT_MAX),
                   "Replicas that must have an acks=all write (this single-node broker holds 1).",
                   _syn("min.insync.replicas")),
    TopicConfigDef("compression.type", _S, "producer", OneOf(_CODECS),
                   "Codec batches are stored in: producer keeps the producer's, another name makes the broker "
                   "recompress batches in that codec.", _syn("compression.type"), "compression_type"),
    TopicConfigDef("compression.gzip.level", _I, "-1", Range(1, 9, also=(-1,)),
                   "gzip level the broker compresses with when compression.type is gzip; -1: the codec's default.",
                   _syn("compression.gzip.level"), "compression_gzip_level"),
    TopicConfigDef("compression.lz4.level", _I, "9", Range(1, 17),
                   "lz4 level the broker compresses with when compression.type is lz4 (9: lz4's fast mode, others its high-compression mode).", _syn("compression.lz4.level"), "compression_lz4_level"),
    TopicConfigDef("compression.zstd.level", _I, "3", Range(-131072, 22),
                   "zstd level the broker compresses with when compression.type is zstd.", _syn("compression.zstd.level"), "compression_zstd_level"),
    TopicConfigDef("preallocate", _B, "false", None,
                   "Whether new segment files are allocated at full size up front (kwire: no).",
                   _syn("log.preallocate")),
    TopicConfigDef("message.timestamp.type", _S, "CreateTime", OneOf(("CreateTime", "LogAppendTime")),
                   "CreateTime keeps the producer's record timestamps; LogAppendTime stamps the broker's clock.",
                   _syn("log.message.timestamp.type"), "message_timestamp_type"),
    TopicConfigDef("message.timestamp.before.max.ms", _L, _LONG_MAX, Range(0, LONG_MAX),
                   "How far behind the broker's clock a CreateTime record timestamp may lie; an older record "
                   "is refused with INVALID_TIMESTAMP.", _syn("log.message.timestamp.before.max.ms"),
                   "message_timestamp_before_max_ms"),
    TopicConfigDef("message.timestamp.after.max.ms", _L, str(_HOUR_MS), Range(0, LONG_MAX),
                   "How far ahead of the broker's clock a CreateTime record timestamp may lie; a later record "
                   "is refused with INVALID_TIMESTAMP.", _syn("log.message.timestamp.after.max.ms"),
                   "message_timestamp_after_max_ms"),
    TopicConfigDef("leader.replication.throttled.replicas", _LIST, "", ThrottledReplicas(),
                   "Replicas whose leader-side replication is throttled (one node: no effect)."),
    TopicConfigDef("follower.replication.throttled.replicas", _LIST, "", ThrottledReplicas(),
                   "Replicas whose follower-side replication is throttled (one node: no effect)."),
    TopicConfigDef("remote.storage.enable", _B, "false", None,
                   "Whether segments are copied to tiered storage (kwire has none)."),
    TopicConfigDef("local.retention.ms", _L, "-2", Range(-2, LONG_MAX),
                   "With tiered storage, how long segments stay on local disk; -2: retention.ms.",
                   _syn("log.local.retention.ms")),
    TopicConfigDef("local.retention.bytes", _L, "-2", Range(-2, LONG_MAX),
                   "With tiered storage, the local size limit of a partition; -2: retention.bytes.",
                   _syn("log.local.retention.bytes")),
    TopicConfigDef("remote.log.copy.disable", _B, "false", None,
                   "With tiered storage, stop copying segments while remote ones stay readable."),
    TopicConfigDef("remote.log.delete.on.disable", _B, "false", None,
                   "With tiered storage, delete the remote segments when it is turned off."),
    # Kafka's internal setting for tests: a segment size under segment.bytes' 1 MiB floor.
    TopicConfigDef("internal.segment.bytes", _I, None, Range(14, INT_MAX),
                   "Segment size overriding segment.bytes, without its floor (for tests).", (), "segment_bytes",
                   internal=True),
)}

INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"
_FIELDS = {d.field: d for d in TOPIC_CONFIGS.values() if d.field and not d.internal}


def parse_value(name: str, text: str, definition: TopicConfigDef | None = None, *, check: bool = True) -> Any:
    """``text`` as the config's typed value (bool, int, float, str, or a tuple for a list),
    checked by its validator (unless ``check`` is false); ConfigError naming the config and
    what it allows."""
    d = definition or TOPIC_CONFIGS[name]
    kind = d.type
    if kind == ConfigType.LIST:
        value: Any = coerce(name, text, tuple)
    elif kind == ConfigType.BOOLEAN:
        value = coerce(name, text, bool, parse_text=True)
    elif kind in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        value = coerce(name, text, int, parse_text=True)
        low, high = (INT_MIN, INT_MAX) if kind == ConfigType.INT else (LONG_MIN, LONG_MAX)
        if not low <= value <= high:
            raise ConfigError(f"{name} must be a {kind.name.lower()} ({low}..{high}), got {text!r}")
    elif kind == ConfigType.DOUBLE:
        value = coerce(name, text, float, parse_text=True)
    else:
        value = text.strip()
    if check and d.validator is not None:
        d.validator.check(name, value)
    return value


def _field_value(d: TopicConfigDef, value: Any) -> Any:
    """A parsed value as its LogConfig field holds it."""
    return ",".join(value) if d.type == ConfigType.LIST else value


def config_value_string(value: Any) -> str:
    """A LogConfig field's value as Kafka writes it (``true``, ``0.5``, ``compact,delete``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _broker_value(d: TopicConfigDef, broker_dynamic: Mapping[str, str]) -> str | None:
    """The topic value a dynamic broker config gives (its synonyms converted), else None."""
    for synonym in d.synonyms:
        text = broker_dynamic.get(synonym.name)
        if text is not None:
            return text if synonym.unit_ms == 1 else str(int(text) * synonym.unit_ms)
    return None


def topic_log_config(static: LogConfig, broker_dynamic: Mapping[str, str],
                     overrides: Mapping[str, str]) -> LogConfig:
    """The LogConfig of a topic's partitions: each field from the topic's override, else the
    dynamic broker value (per-broker merged over the cluster default), else ``static``.

    Values were validated when they were set: a stored one is only parsed here, so that one
    set by an older kwire under looser rules still opens.  ValueError (ConfigError) if a value
    is not of its type or LogConfig refuses the combination."""
    changes: dict[str, Any] = {}
    for field, d in _FIELDS.items():
        text = overrides.get(d.name)
        if text is None:
            text = _broker_value(d, broker_dynamic)
        if text is not None:
            changes[field] = _field_value(d, parse_value(d.name, text, d, check=False))
    internal = overrides.get(INTERNAL_SEGMENT_BYTES)
    if internal is not None:
        changes["segment_bytes"] = int(internal)
    return static.with_(**changes) if changes else static


def check_topic_overrides(static: LogConfig, broker_dynamic: Mapping[str, str],
                          configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check a topic's whole set of overrides (what CreateTopics, AlterConfigs or
    IncrementalAlterConfigs would leave it with); ConfigError naming the first bad one and what
    it allows.  Returns them as stored (the strings given, as Kafka keeps them)."""
    clean: dict[str, str] = {}
    for key, value in configs.items():
        d = TOPIC_CONFIGS.get(key)
        if d is None:
            raise unknown_setting(key, [n for n, d in TOPIC_CONFIGS.items() if not d.internal],
                                  what="topic config", list_known=True)
        if value is None:
            raise ConfigError(f"{key}: null values are not supported for topic configs")
        parsed = parse_value(key, value, d)
        # One node: more in-sync replicas than that can never be met (Kafka would refuse every
        # acks=all write with NOT_ENOUGH_REPLICAS); refused up front instead.
        if key == "min.insync.replicas" and parsed > 1:
            raise ConfigError(f"min.insync.replicas {value} is more than this single broker can hold (1)")
        clean[key] = value
    try:
        effective = topic_log_config(static, broker_dynamic, clean)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    # Kafka's LogConfig.validateValues.
    if effective.min_compaction_lag_ms > effective.max_compaction_lag_ms:
        raise ConfigError(f"conflicting topic configs: min.compaction.lag.ms ({effective.min_compaction_lag_ms}) > "
                          f"max.compaction.lag.ms ({effective.max_compaction_lag_ms})")
    return clean


# -- DescribeConfigs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Valued:
    """A config value with where it comes from (a DescribeConfigs entry or synonym)."""

    name: str
    value: str | None
    source: ConfigSource


_DEFAULT_LOG = LogConfig()


def static_broker_value(d: TopicConfigDef, static: LogConfig) -> str | None:
    """The broker's static value of ``d``'s first synonym: kwire's static log settings, where
    they differ from Kafka's defaults (kwire cannot tell a default written out from none)."""
    if not d.field or d.internal:
        return None
    value = getattr(static, d.field)
    return None if value == getattr(_DEFAULT_LOG, d.field) else config_value_string(value)


def synonym_default(d: TopicConfigDef) -> Valued | None:
    """Kafka's default of the broker synonym that holds one (the last: ``log.retention.hours``)."""
    if not d.synonyms or d.default is None:
        return None
    last = d.synonyms[-1]
    value = d.default if last.unit_ms == 1 else str(int(d.default) // last.unit_ms)
    return Valued(last.name, value, ConfigSource.DEFAULT_CONFIG)


def broker_synonyms(d: TopicConfigDef, static: LogConfig, per_broker: Mapping[str, str],
                    cluster_default: Mapping[str, str]) -> list[Valued]:
    """The values of ``d``'s broker synonyms, in Kafka's order: every dynamic per-broker one,
    then the dynamic cluster defaults, the static config, the defaults (``configSynonyms``)."""
    found = [Valued(s.name, per_broker[s.name], ConfigSource.DYNAMIC_BROKER_CONFIG)
             for s in d.synonyms if s.name in per_broker]
    found += [Valued(s.name, cluster_default[s.name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
              for s in d.synonyms if s.name in cluster_default]
    static_value = static_broker_value(d, static)
    if static_value is not None:
        found.append(Valued(d.synonyms[0].name, static_value, ConfigSource.STATIC_BROKER_CONFIG))
    default = synonym_default(d)
    if default is not None:
        found.append(default)
    return found


def describe_topic_config(d: TopicConfigDef, static: LogConfig, per_broker: Mapping[str, str],
                          cluster_default: Mapping[str, str], overrides: Mapping[str, str]) -> tuple[Valued, list[Valued]]:
    """A topic config's effective value and its synonyms (the topic's own override first)."""
    synonyms = broker_synonyms(d, static, per_broker, cluster_default)
    if d.name in overrides:
        synonyms.insert(0, Valued(d.name, overrides[d.name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
    first = synonyms[0] if synonyms and synonyms[0].source != ConfigSource.DEFAULT_CONFIG else None
    if first is None:
        return Valued(d.name, d.default, ConfigSource.DEFAULT_CONFIG), synonyms
    value = first.value
    if first.source != ConfigSource.DYNAMIC_TOPIC_CONFIG:
        unit = next(s.unit_ms for s in d.synonyms if s.name == first.name)
        value = value if unit == 1 or value is None else str(int(value) * unit)
    return Valued(d.name, value, first.source), synonyms
