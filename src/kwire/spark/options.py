"""The data source's options, read and checked once at planning.

Spark's Kafka connector is the reference: the same option names, defaults and rules (see
``kwire.spark``'s docstring for the list).  Every mistake is a ``ConfigError`` whose message
names the option as the documentation spells it (``startingOffsets``, not ``startingoffsets``),
raised while Spark plans the query, before any task runs.

Spark hands Python data sources their options in a case-insensitive dict whose keys are already
lower-cased; lookups here are case-insensitive so that ``startingOffsets`` and ``startingoffsets``
mean the same, as in Spark.  ``kafka.*`` keys go to kwire's client as they arrive, prefix removed:
security too, as Spark's connector passes them (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config`` or ``kafka.sasl.username``/``kafka.sasl.password``, ``kafka.ssl.ca.location``...;
the certificate files must exist on the driver and on every executor).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kwire.client import AdminConfig, ConsumerConfig, ProducerConfig, TopicPartition
from kwire.settings import ConfigError, check_range, coerce

__all__ = [
    "EARLIEST",
    "LATEST",
    "ConfigError",
    "OffsetSpec",
    "SinkOptions",
    "SourceOptions",
    "Subscription",
    "check_batch",
    "check_stream",
    "parse_sink_options",
    "parse_source_options",
]

# Spark's markers inside startingOffsets / endingOffsets JSON (Kafka's ListOffsets timestamps).
LATEST = -1
EARLIEST = -2

_KAFKA = "kafka."
_SUBSCRIPTIONS = ("assign", "subscribe", "subscribePattern")
# Spark's own default for kafkaConsumer.pollTimeoutMs (spark.network.timeout).
_POLL_TIMEOUT_MS = 120_000

# kafka.* settings Spark's source refuses, and why (its messages, in substance).
_SOURCE_REFUSED = {
    "auto.offset.reset": "set the source option startingOffsets to earliest or latest instead",
    "enable.auto.commit": "the source never commits through the consumer; use kwire.commitGroup to "
                          "commit each micro-batch's end offsets to a group",
    "key.deserializer": "keys are always read as bytes; deserialize with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize with DataFrame operations",
    "interceptor.classes": "interceptors could break the source's offset bookkeeping",
}
# Set by the source itself: a user's value would be overridden, so it is not accepted silently.
_SOURCE_IGNORED = ("group.id", "group.instance.id")
_SINK_REFUSED = {
    "key.serializer": "keys are written from the key column (string or binary)",
    "value.serializer": "values are written from the value column (string or binary)",
}
# Spark's Kafka options kwire does not implement: refused rather than silently ignored.
_NOT_IMPLEMENTED = {
    "minOffsetsPerTrigger": "admission control by a minimum needs composite read limits, which "
                            "PySpark's data source API does not offer",
    "maxTriggerDelay": "it only makes sense with minOffsetsPerTrigger",
}


@dataclass(frozen=True)
class Subscription:
    """What to read: topics by name, topics whose whole name matches a pattern, or partitions."""

    kind: str                                   # "subscribe", "subscribePattern" or "assign"
    topics: tuple[str, ...] = ()                # subscribe
    pattern: str | None = None                  # subscribePattern (Java's regex syntax is Python's here)
    partitions: tuple[TopicPartition, ...] = ()  # assign

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return f"assign={', '.join(map(str, self.partitions))}"


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends, as an option said it.

    ``kind``: "earliest", "latest", "offsets" (per partition: an offset, or EARLIEST/LATEST),
    "timestamp" (one time for every partition) or "timestamps" (per partition).  ``option`` is
    the option it came from, for messages.
    """

    kind: str
    option: str
    per_partition: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None

    @property
    def values(self) -> dict[TopicPartition, int]:
        return dict(self.per_partition)


@dataclass(frozen=True)
class SourceOptions:
    subscription: Subscription
    # Kafka settings for kwire's clients (kafka.* without the prefix), bootstrap.servers included;
    # security ones too (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*), so never in the repr.
    client_settings: tuple[tuple[str, Any], ...] = field(repr=False)
    starting: OffsetSpec | None = None   # None: the mode's default (batch earliest, streaming latest)
    ending: OffsetSpec | None = None     # batch only; None: latest
    timestamp_strategy: str = "error"    # startingOffsetsByTimestampStrategy: error or latest
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = _POLL_TIMEOUT_MS
    commit_group: str | None = None

    @property
    def isolation_level(self) -> str:
        return dict(self.client_settings).get("isolation.level", "read_uncommitted")

    def consumer_settings(self) -> dict[str, Any]:
        """What the executors' consumers get: the user's settings, and what the source needs."""
        settings = {k: v for k, v in self.client_settings if k not in _SOURCE_IGNORED}
        # No group (partitions are assigned), no commits, and an error, not a silent jump, when
        # an offset is out of range: failOnDataLoss decides what happens then.
        settings.update({"auto.offset.reset": "none", "enable.auto.commit": False})
        settings.setdefault("client.id", "kwire-spark")
        # A range never waits for records (its end was at most the log end when it was
        # planned), so the broker's long poll only delays the worker's next task, whose fetch
        # queues behind the prefetch that reached the log end.
        settings.setdefault("fetch.max.wait.ms", 10)
        # A task reads one partition: larger answers than the consumer's 1 MiB default halve the
        # round trips per row for 1 KiB records (measured: 0.66 -> 1.15 M rows/s in one process,
        # /tmp-style script reading a 300,000-record range with read_range).  Two answers wait
        # at most, so a worker holds about 8 MiB of fetched data.
        settings.setdefault("max.partition.fetch.bytes", 4 * 1024 * 1024)
        return settings

    def admin_settings(self) -> dict[str, Any]:
        """The driver's admin client takes the settings every client shares (not fetch sizes...)."""
        settings = {k: v for k, v in self.client_settings if _admin_takes(k)}
        settings.setdefault("client.id", "kwire-spark")
        return settings


@dataclass(frozen=True)
class SinkOptions:
    topic: str | None                                 # the topic option: overrides the topic column
    client_settings: tuple[tuple[str, Any], ...] = field(repr=False)  # for kwire's producer (secrets too)

    def producer_settings(self) -> dict[str, Any]:
        settings = dict(self.client_settings)
        settings.setdefault("client.id", "kwire-spark")
        return settings


def _admin_takes(key: str) -> bool:
    """Whether the admin client has the setting (under any of its names, librdkafka's aliases too)."""
    try:
        AdminConfig._field_of(key)
    except ConfigError:
        return False
    return True


# -- parsing -----------------------------------------------------------------------------------------
def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items()}


def _kafka_settings(options: Mapping[str, str]) -> dict[str, str]:
    """kafka.* options without the prefix, keys as they came."""
    return {k[len(_KAFKA):]: v for k, v in options.items() if str(k).lower().startswith(_KAFKA)}


def _bootstrap(kafka: dict[str, str]) -> None:
    if not str(kafka.get("bootstrap.servers", "")).strip():
        raise ConfigError("option kafka.bootstrap.servers must be given: the host:port list of the Kafka "
                          "brokers to read from or write to")


def _check_client(config_cls: type, kafka: dict[str, str], role: str) -> None:
    """Let kwire's client config judge the kafka.* settings now, at planning."""
    try:
        config_cls.from_settings(kafka)
    except ConfigError as exc:
        raise ConfigError(f"a kafka.* option is not a valid setting of kwire's {role}: {exc}") from None


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    value = options.get(name.lower())
    return default if value is None else coerce(f"option {name}", value, bool, parse_text=True)


def _int_at_least(options: dict[str, str], name: str, low: int) -> int | None:
    """An integer option (None when not given), at least ``low``."""
    value = options.get(name.lower())
    if value is None:
        return None
    number = coerce(f"option {name}", value, int, parse_text=True)
    check_range(f"option {name}", number, low)
    return number


def _positive(options: dict[str, str], name: str) -> int | None:
    return _int_at_least(options, name, 1)


def _json(name: str, text: str, example: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {name}: {text!r} is not valid JSON ({exc.msg}); "
                          f"write it like {example}") from None


def _per_partition(name: str, text: str, *, low: int, what: str) -> tuple[tuple[TopicPartition, int], ...]:
    """{"topic": {"0": 23, "1": -1}} -> ((TopicPartition, value), ...), each value >= low."""
    example = '{"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}' if what == "offset" else '{"topicA":{"0":1700000000000}}'
    data = _json(name, text, example)
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"option {name}: {text!r} must be a JSON object of topics, like {example}")
    out = []
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(f"option {name}: topic {topic!r} must map partition numbers to {what}s, like {example}")
        for partition, value in parts.items():
            if not (isinstance(partition, str) and re.fullmatch(r"\d+", partition)):
                raise ConfigError(f"option {name}: {partition!r} of topic {topic!r} is not a partition number")
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"option {name}: the {what} of {topic}-{partition} must be an integer >= {low}, "
                                  f"got {value!r}")
            out.append((TopicPartition(topic, int(partition)), value))
    return tuple(sorted(out))


def _subscription(options: dict[str, str]) -> Subscription:
    given = [name for name in _SUBSCRIPTIONS if name.lower() in options]
    if len(given) != 1:
        which = "none of them was" if not given else f"got {', '.join(given)}"
        raise ConfigError(f"exactly one of the options assign, subscribe, subscribePattern must be given; {which}")
    kind = given[0]
    text = options[kind.lower()]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise ConfigError(f"option subscribe must name at least one topic (a comma-separated list), got {text!r}")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        if not text.strip():
            raise ConfigError("option subscribePattern must not be empty")
        try:
            re.compile(text)
        except re.error as exc:
            raise ConfigError(f"option subscribePattern: {text!r} is not a valid regular expression ({exc})") from None
        return Subscription(kind, pattern=text)
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    data = _json("assign", text, example)
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"option assign: {text!r} must be a JSON object of topics to partition lists, like {example}")
    partitions = []
    for topic, numbers in data.items():
        if not isinstance(numbers, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                    for n in numbers):
            raise ConfigError(f"option assign: topic {topic!r} must map to a list of partition numbers, like {example}")
        partitions += [TopicPartition(topic, n) for n in numbers]
    if not partitions:
        raise ConfigError("option assign names no partition")
    return Subscription(kind, partitions=tuple(sorted(set(partitions))))


def _timestamp(options: dict[str, str], name: str) -> int | None:
    return _int_at_least(options, name, 0)


def _offsets(options: dict[str, str], prefix: str) -> OffsetSpec | None:
    """startingOffsets/endingOffsets and their timestamp forms; Spark's precedence: by-timestamp
    JSON, then one timestamp, then offsets."""
    by_time = f"{prefix}OffsetsByTimestamp"
    if by_time.lower() in options:
        return OffsetSpec("timestamps", by_time, _per_partition(by_time, options[by_time.lower()], low=0,
                                                                what="timestamp"))
    one_time = f"{prefix}Timestamp"
    ts = _timestamp(options, one_time)
    if ts is not None:
        return OffsetSpec("timestamp", one_time, timestamp=ts)
    name = f"{prefix}Offsets"
    text = options.get(name.lower())
    if text is None:
        return None
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetSpec(word, name)
    if not text.strip().startswith("{"):
        raise ConfigError(f"option {name}: {text!r} is not earliest, latest or a JSON object of offsets "
                          f'like {{"topicA":{{"0":23,"1":-2}}}} (-2 earliest, -1 latest)')
    return OffsetSpec("offsets", name, _per_partition(name, text, low=EARLIEST, what="offset"))


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """The read options, checked (what holds for batch and streaming alike)."""
    lowered = _lowered(options)
    for name, why in _NOT_IMPLEMENTED.items():
        if name.lower() in lowered:
            raise ConfigError(f"option {name} is not supported by kwire's source: {why}")
    kafka = _kafka_settings(options)
    _bootstrap(kafka)
    for key, why in _SOURCE_REFUSED.items():
        if key in kafka:
            raise ConfigError(f"option kafka.{key} is not supported: {why}")
    _check_client(ConsumerConfig, {k: v for k, v in kafka.items() if k not in _SOURCE_IGNORED}, "consumer")
    strategy = lowered.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
    poll_timeout = _positive(lowered, "kafkaConsumer.pollTimeoutMs")
    group = lowered.get("kwire.commitgroup")
    if group is not None and not group.strip():
        raise ConfigError("option kwire.commitGroup must name a consumer group")
    return SourceOptions(
        subscription=_subscription(lowered),
        client_settings=tuple(sorted(kafka.items())),
        starting=_offsets(lowered, "starting"),
        ending=_offsets(lowered, "ending"),
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(lowered, "failOnDataLoss", True),
        include_headers=_bool(lowered, "includeHeaders", False),
        max_offsets_per_trigger=_positive(lowered, "maxOffsetsPerTrigger"),
        min_partitions=_positive(lowered, "minPartitions"),
        max_records_per_partition=_positive(lowered, "maxRecordsPerPartition"),
        poll_timeout_ms=poll_timeout or _POLL_TIMEOUT_MS,
        commit_group=group,
    )


def check_batch(options: SourceOptions) -> None:
    """What Spark refuses in a batch read: starting at latest, ending at earliest, streaming options."""
    start, end = options.starting, options.ending
    if start is not None:
        if start.kind == "latest":
            raise ConfigError("option startingOffsets=latest is not allowed in a batch query: "
                              "it would read nothing (use earliest, offsets or a timestamp)")
        for tp, offset in start.values.items() if start.kind == "offsets" else ():
            if offset == LATEST:
                raise ConfigError(f"option startingOffsets: {tp} is -1 (latest), which is not allowed "
                                  "in a batch query")
    if end is not None:
        if end.kind == "earliest":
            raise ConfigError("option endingOffsets=earliest is not allowed in a batch query (use latest, "
                              "offsets or a timestamp)")
        for tp, offset in end.values.items() if end.kind == "offsets" else ():
            if offset == EARLIEST:
                raise ConfigError(f"option endingOffsets: {tp} is -2 (earliest), which is not allowed")
    if options.commit_group is not None:
        raise ConfigError("option kwire.commitGroup applies to streaming reads (it commits each micro-batch's "
                          "end offsets); a batch read has no micro-batches")


def check_stream(options: SourceOptions) -> None:
    """What Spark refuses in a streaming read: an end."""
    if options.ending is not None:
        raise ConfigError(f"option {options.ending.option} is not allowed in a streaming query: "
                          "a stream has no end (use a batch read, or Trigger.AvailableNow)")


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    lowered = _lowered(options)
    kafka = _kafka_settings(options)
    _bootstrap(kafka)
    for key, why in _SINK_REFUSED.items():
        if key in kafka:
            raise ConfigError(f"option kafka.{key} is not supported: {why}")
    _check_client(ProducerConfig, kafka, "producer")
    topic = lowered.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigError("option topic must not be empty")
    return SinkOptions(topic=topic, client_settings=tuple(sorted(kafka.items())))
