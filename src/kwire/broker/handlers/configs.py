"""DescribeConfigs for topics and the broker, and the topic config listing CreateTopics v5+ returns."""

from __future__ import annotations

from dataclasses import dataclass

from kwire.protocol import messages
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from ..auth.acls import AclOperation, ResourceType
from ..state import TOPIC_CONFIGS
from ..storage import LogConfig
from .registry import handler

DESCRIBE_CONFIGS = 32
TOPIC, BROKER = 2, 4  # resource types

# ConfigSource values (DescribeConfigsResponse).
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# ConfigType values.
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    config_type: int
    documentation: str
    read_only: bool = False


# Topic configs shown, with their type and a line of doc; the LogConfig field holding each
# effective value comes from TOPIC_CONFIGS (the settable configs), or _FIXED.
_TOPIC_ENTRIES: list[tuple[str, int, str]] = [
    ("cleanup.policy", LIST, "Only 'delete' (retention by time and size)."),
    ("retention.ms", LONG, "How long a segment is kept after its newest record; -1 forever."),
    ("retention.bytes", LONG, "Size a partition's log may reach before old segments go."),
    ("segment.bytes", INT, "Size at which the active segment rolls."),
    ("segment.ms", LONG, "Age at which the active segment rolls."),
    ("index.interval.bytes", INT, "Bytes between offset index entries."),
    ("message.timestamp.type", STRING, "CreateTime or LogAppendTime."),
    ("max.message.bytes", INT, "Largest record batch accepted."),
    ("min.insync.replicas", INT, "Always 1 on this single-node broker."),
]
_FIXED = {"cleanup.policy": "delete", "min.insync.replicas": "1"}
_DEFAULT_LOG = LogConfig()


def _value(cfg: LogConfig, key: str) -> str:
    return _FIXED[key] if key in _FIXED else str(getattr(cfg, TOPIC_CONFIGS[key][0]))


def topic_config_entries(broker, overrides: dict[str, str]) -> list[ConfigEntry]:
    """The effective configs of a topic with these overrides, each with where it comes from."""
    base = broker.config.log
    out = []
    for key, kind, doc in _TOPIC_ENTRIES:
        if key in overrides:
            value, source = overrides[key], DYNAMIC_TOPIC_CONFIG
        else:
            value = _value(base, key)
            source = DEFAULT_CONFIG if value == _value(_DEFAULT_LOG, key) else STATIC_BROKER_CONFIG
        out.append(ConfigEntry(key, value, source, kind, doc))
    return out


def broker_config_entries(broker) -> list[ConfigEntry]:
    c = broker.config
    host, port = c.advertised
    listeners = broker.listeners
    advertised = ",".join(f"{li.name}://{li.advertised[0]}:{li.advertised[1]}" for li in listeners) \
        or f"PLAINTEXT://{host}:{port}"
    items = [
        ("broker.id", str(c.node_id), INT, "This broker's node id."),
        ("advertised.listeners", advertised, LIST, "Where clients connect."),
        ("listeners", ",".join(f"{li.name}://{li.spec.host}:{li.port}" for li in listeners), LIST,
         "Where the broker listens."),
        ("listener.security.protocol.map", ",".join(f"{li.name}:{li.protocol}" for li in listeners), LIST,
         "Each listener's security protocol."),
        ("sasl.enabled.mechanisms", ",".join(c.sasl_enabled_mechanisms), LIST, "SASL mechanisms offered."),
        ("ssl.client.auth", c.ssl_client_auth, STRING, "Whether TLS listeners ask for client certificates."),
        ("authorizer.class.name", "kwire" if c.authorizer else "", STRING, "ACLs enforced when set."),
        ("super.users", ";".join(c.super_users), LIST, "Principals that bypass ACLs."),
        ("allow.everyone.if.no.acl.found", str(c.allow_everyone_if_no_acl_found).lower(), BOOLEAN,
         "Whether a resource without ACLs is open to all."),
        ("auto.create.topics.enable", str(c.auto_create_topics).lower(), BOOLEAN, "Create topics on first use."),
        ("num.partitions", str(c.default_partitions), INT, "Partitions of auto-created topics."),
        ("log.dirs", str(c.data_dir), STRING, "The data directory."),
        ("log.retention.ms", str(c.log.retention_ms), LONG, "Default retention.ms."),
        ("log.retention.bytes", str(c.log.retention_bytes), LONG, "Default retention.bytes."),
        ("log.segment.bytes", str(c.log.segment_bytes), INT, "Default segment.bytes."),
        ("log.roll.ms", str(c.log.segment_ms), LONG, "Default segment.ms."),
        ("message.max.bytes", str(c.log.max_message_bytes), INT, "Default max.message.bytes."),
        ("log.message.timestamp.type", c.log.message_timestamp_type, STRING, "Default message.timestamp.type."),
        ("socket.request.max.bytes", str(c.max_request_size), INT, "Largest request accepted."),
        ("queued.max.request.bytes", str(c.queued_max_request_bytes), LONG,
         "Memory for large requests being received or answered, over all connections."),
        ("group.initial.rebalance.delay.ms", str(c.group_initial_rebalance_delay_ms), INT,
         "Wait for more members before a new group's first rebalance."),
        ("group.min.session.timeout.ms", str(c.group_min_session_timeout_ms), INT, "Smallest session timeout."),
        ("group.max.session.timeout.ms", str(c.group_max_session_timeout_ms), INT, "Largest session timeout."),
        ("offsets.retention.minutes", str(c.offsets_retention_ms // 60000), INT, "How long committed offsets live."),
        ("kwire.fsync", c.fsync, STRING, "When the log is fsynced: never, interval or always."),
        ("kwire.page.cache.bytes", str(c.page_cache_bytes), LONG,
         "Newest log bytes written kept in the page cache; older ones are written back and dropped "
         "(-1: no limit)."),
    ]
    return [ConfigEntry(n, v, STATIC_BROKER_CONFIG, t, d, read_only=True) for n, v, t, d in items]


@handler(DESCRIBE_CONFIGS, 0)
def handle_describe_configs(ctx, request):
    R = messages.DescribeConfigsResponse
    Entry = R.DescribeConfigsResult.DescribeConfigsResourceResult
    broker = ctx.broker
    v = ctx.api_version
    results = []
    for res in request.resources:
        result = R.DescribeConfigsResult(error_code=0, error_message=None, resource_type=res.resource_type,
                                         resource_name=res.resource_name, configs=[])
        try:
            if res.resource_type == TOPIC:
                if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, res.resource_name):
                    raise TopicAuthorizationFailedError(f"{ctx.principal} may not DESCRIBE_CONFIGS of topic "
                                                        f"{res.resource_name!r}")
                info = broker.topics.get(res.resource_name)
                if info is None:
                    raise UnknownTopicOrPartitionError(f"topic {res.resource_name!r} does not exist")
                entries = topic_config_entries(broker, info.configs)
            elif res.resource_type == BROKER:
                if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
                    raise ClusterAuthorizationFailedError(f"{ctx.principal} may not DESCRIBE_CONFIGS of the broker")
                if res.resource_name not in ("", str(broker.config.node_id)):
                    raise InvalidRequestError(f"broker {res.resource_name!r} is not this broker "
                                              f"({broker.config.node_id})")
                entries = broker_config_entries(broker)
            else:
                raise InvalidRequestError(f"resource type {res.resource_type} is not supported "
                                          "(topics 2 and brokers 4 are)")
            keys = None if res.configuration_keys is None else set(res.configuration_keys)
            for e in entries:
                if keys is not None and e.name not in keys:
                    continue
                synonyms = [Entry.DescribeConfigsSynonym(name=e.name, value=e.value, source=e.source)] \
                    if request.include_synonyms else []
                result.configs.append(Entry(
                    name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                    is_default=v == 0 and e.source == DEFAULT_CONFIG, is_sensitive=False, synonyms=synonyms,
                    config_type=e.config_type if v >= 3 else 0,
                    documentation=e.documentation if v >= 3 and request.include_documentation else None))
        except (UnknownTopicOrPartitionError, InvalidRequestError, TopicAuthorizationFailedError,
                ClusterAuthorizationFailedError) as exc:
            result.error_code, result.error_message = exc.code, str(exc)
        results.append(result)
    return R(throttle_time_ms=0, results=results)
