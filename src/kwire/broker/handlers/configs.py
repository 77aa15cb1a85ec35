"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, the broker and groups,
and the topic config listing CreateTopics v5+ returns.

Topic configs are the catalogue of ``topic_configs`` (every one Kafka 4.3 knows); a topic's
overrides live in the topic registry.  Broker configs set by the alter requests live in
``broker_configs`` (the resource name "" is the cluster-wide default, the node id this broker's
own).  Group configs (``consumer.*``, ``share.*``, ``streams.*``) live in ``group_configs``, for
any group id whether the group exists or not, as in Kafka.  Both alter requests validate through the same path as CreateTopics
(``check_topic_configs``), change nothing of a resource they refuse, and apply the rest live:
every affected partition gets its recomputed LogConfig (``BrokerState.refresh_log_configs``).

Error codes follow Kafka's broker and controller (ConfigAdminManager, ConfigurationControlManager):
a bad topic or group config is INVALID_CONFIG; a bad broker config INVALID_REQUEST (KAFKA-13609 keeps that
for compatibility), as are duplicate resources or keys, null values and unknown operations.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kwire.protocol import messages
from kwire.protocol.configs import AlterConfigOp, ConfigResourceType, ConfigSource, ConfigType
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    GroupAuthorizationFailedError,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    KafkaStorageError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from kwire.settings import ConfigError

from ..auth.acls import AclOperation, ResourceType
from ..broker_configs import CLEANER_CONFIGS, TOPIC_SYNONYM_CONFIGS, check_dynamic_configs, dynamic_definition
from ..config import BrokerConfig
from ..group_configs import GROUP_CONFIGS
from ..storage import CleanerConfig
from ..topic_configs import (
    TOPIC_CONFIGS,
    TopicConfigDef,
    Valued,
    broker_synonyms,
    check_topic_overrides,
    config_value_string,
    describe_topic_config,
    topic_log_config,
)
from .registry import handler

__all__ = ["ConfigEntry", "broker_config_entries", "check_topic_configs", "group_config_entries",
           "topic_config_entries"]

TOPIC, BROKER, GROUP = ConfigResourceType.TOPIC, ConfigResourceType.BROKER, ConfigResourceType.GROUP
_STATIC, _DEFAULT = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None       # None for a sensitive config: never sent
    source: ConfigSource
    config_type: ConfigType
    documentation: str
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[Valued, ...] = ()


# -- topics -----------------------------------------------------------------------------------------
def check_topic_configs(broker, configs: Mapping[str, str | None]) -> dict[str, str]:
    """Validate a topic's whole set of overrides by Kafka's names (CreateTopics, AlterConfigs,
    IncrementalAlterConfigs); INVALID_CONFIG naming the bad one and what it allows."""
    try:
        return check_topic_overrides(broker.config.log, broker.dynamic_configs.merged(), configs)
    except ConfigError as exc:
        raise InvalidConfigError(str(exc)) from None


def topic_config_entries(broker, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config with the value a topic with these overrides has, and where it comes from."""
    dynamic = broker.dynamic_configs
    per_broker, cluster_default = dynamic.per_broker, dynamic.cluster_default
    out = []
    for d in TOPIC_CONFIGS.values():
        if d.internal:
            continue
        value, synonyms = describe_topic_config(d, broker.config.log, per_broker, cluster_default, overrides)
        out.append(ConfigEntry(d.name, value.value, value.source, d.type, d.doc, synonyms=tuple(synonyms)))
    return out


def _topic_value(broker, overrides: Mapping[str, str], name: str) -> str | None:
    d = TOPIC_CONFIGS[name]
    dynamic = broker.dynamic_configs
    return describe_topic_config(d, broker.config.log, dynamic.per_broker, dynamic.cluster_default, overrides)[0].value


# -- the broker -------------------------------------------------------------------------------------
def _static_entries(broker) -> list[tuple[str, str | None, ConfigType, str]]:
    """The broker's configs no request can change: (name, value, type, doc)."""
    c = broker.static_config
    host, port = c.advertised
    listeners = broker.listeners
    advertised = ",".join(f"{li.name}://{li.advertised[0]}:{li.advertised[1]}" for li in listeners) \
        or f"PLAINTEXT://{host}:{port}"
    T = ConfigType
    return [
        ("broker.id", str(c.node_id), T.INT, "This broker's node id."),
        ("node.id", str(c.node_id), T.INT, "This broker's node id."),
        ("advertised.listeners", advertised, T.LIST, "Where clients connect."),
        ("listeners", ",".join(f"{li.name}://{li.spec.host}:{li.port}" for li in listeners), T.LIST,
         "Where the broker listens."),
        ("listener.security.protocol.map", ",".join(f"{li.name}:{li.protocol}" for li in listeners), T.LIST,
         "Each listener's security protocol."),
        ("sasl.enabled.mechanisms", ",".join(c.sasl_enabled_mechanisms), T.LIST, "SASL mechanisms offered."),
        ("ssl.client.auth", c.ssl_client_auth, T.STRING, "Whether TLS listeners ask for client certificates."),
        ("ssl.key.password", None, T.PASSWORD, "Password of the TLS private key."),
        ("authorizer.class.name", "kwire" if c.authorizer else "", T.STRING, "ACLs enforced when set."),
        ("super.users", ";".join(c.super_users), T.LIST, "Principals that bypass ACLs."),
        ("allow.everyone.if.no.acl.found", str(c.allow_everyone_if_no_acl_found).lower(), T.BOOLEAN,
         "Whether a resource without ACLs is open to all."),
        ("auto.create.topics.enable", str(c.auto_create_topics).lower(), T.BOOLEAN, "Create topics on first use."),
        ("num.partitions", str(c.default_partitions), T.INT, "Partitions of auto-created topics."),
        ("log.dirs", str(c.data_dir), T.STRING, "The data directory."),
        ("log.retention.check.interval.ms", str(c.retention_check_interval_ms), T.LONG,
         "Time between two retention passes over every partition."),
        ("log.cleaner.enable", str(c.log_cleaner_enable).lower(), T.BOOLEAN,
         "Whether topics with cleanup.policy compact are compacted."),
        ("socket.request.max.bytes", str(c.max_request_size), T.INT, "Largest request accepted."),
        ("queued.max.request.bytes", str(c.queued_max_request_bytes), T.LONG,
         "Memory for large requests being received or answered, over all connections."),
        ("group.initial.rebalance.delay.ms", str(c.group_initial_rebalance_delay_ms), T.INT,
         "Wait for more members before a new group's first rebalance."),
        ("group.min.session.timeout.ms", str(c.group_min_session_timeout_ms), T.INT, "Smallest session timeout."),
        ("group.max.session.timeout.ms", str(c.group_max_session_timeout_ms), T.INT, "Largest session timeout."),
        ("offsets.retention.minutes", str(c.offsets_retention_ms // 60000), T.INT, "How long committed offsets live."),
        ("kwire.fsync", c.fsync, T.STRING, "When the log is fsynced: never, interval or always."),
        ("kwire.page.cache.bytes", str(c.page_cache_bytes), T.LONG,
         "Newest log bytes written kept in the page cache; older ones are written back and dropped "
         "(-1: no limit)."),
    ]


def _topic_synonym_entry(broker, name: str, d: TopicConfigDef, per_broker: Mapping[str, str],
                         cluster_default: Mapping[str, str]) -> ConfigEntry:
    """A broker config that defaults a topic config (log.retention.ms): its value in its own
    unit (the first synonym's, ms or bytes like the topic's), and its synonyms."""
    value, _ = describe_topic_config(d, broker.config.log, per_broker, cluster_default, {})
    synonyms = broker_synonyms(d, broker.config.log, per_broker, cluster_default)
    return ConfigEntry(name, value.value, value.source, d.type, d.doc, synonyms=tuple(synonyms))


def _cleaner_entry(broker, name: str, d: TopicConfigDef, per_broker: Mapping[str, str],
                   cluster_default: Mapping[str, str]) -> ConfigEntry:
    static = getattr(broker.static_config, d.field)
    synonyms = [Valued(name, scope[name], source) for scope, source in (
        (per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG), (cluster_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        if name in scope]
    if static != getattr(BrokerConfig, d.field):
        synonyms.append(Valued(name, config_value_string(static), _STATIC))
    synonyms.append(Valued(name, d.default, _DEFAULT))
    first = synonyms[0]
    return ConfigEntry(name, first.value, first.source, d.type, d.doc, synonyms=tuple(synonyms))


def broker_config_entries(broker, resource_name: str | None = None) -> list[ConfigEntry]:
    """The broker's configs with their sources.  The resource "" (the cluster-wide default)
    lists only the dynamic defaults set on it, as Kafka does."""
    dynamic = broker.dynamic_configs
    per_broker, cluster_default = dynamic.per_broker, dynamic.cluster_default
    if resource_name == "":
        return [ConfigEntry(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, d.type, d.doc,
                            synonyms=(Valued(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),))
                for name, value in sorted(cluster_default.items()) for d in (dynamic_definition(name),)]
    entries = [ConfigEntry(n, v, _STATIC, t, doc, read_only=True, sensitive=t == ConfigType.PASSWORD,
                           synonyms=(Valued(n, v, _STATIC),))
               for n, v, t, doc in _static_entries(broker)]
    entries += [_topic_synonym_entry(broker, n, d, per_broker, cluster_default) for n, d in TOPIC_SYNONYM_CONFIGS.items()]
    entries += [_cleaner_entry(broker, n, d, per_broker, cluster_default) for n, d in CLEANER_CONFIGS.items()]
    entries += _secondary_synonym_entries()
    return sorted(entries, key=lambda e: e.name)


def _secondary_synonym_entries() -> list[ConfigEntry]:
    """The broker configs in other units that Kafka also lists (log.retention.minutes,
    log.retention.hours, log.roll.hours...): read-only, as Kafka updates only the first synonym
    dynamically; Kafka's default on the one that holds it (log.retention.hours=168), else null."""
    out = []
    for d in TOPIC_SYNONYM_CONFIGS.values():
        for synonym in d.synonyms[1:]:
            value = None
            if synonym is d.synonyms[-1] and d.default is not None:
                value = d.default if synonym.unit_ms == 1 else str(int(d.default) // synonym.unit_ms)
            out.append(ConfigEntry(synonym.name, value, _DEFAULT, d.type if synonym.unit_ms == 1 else ConfigType.INT,
                                   d.doc, read_only=True, synonyms=(Valued(synonym.name, value, _DEFAULT),)))
    return out


def _broker_scope(broker, name: str) -> str:
    """The dynamic config scope a BROKER resource names: "" or this broker's id (Kafka's
    validateResourceNameIsCurrentNodeId)."""
    if name == "":
        return name
    try:
        node = int(name)
    except ValueError:
        raise InvalidRequestError(f"Node id must be an integer, but it is: {name}") from None
    if node != broker.config.node_id:
        raise InvalidRequestError(f"Unexpected broker id, expected {broker.config.node_id}, but received {name}")
    return str(node)


# -- groups -----------------------------------------------------------------------------------------
def _check_group(ctx, group: str, operation: AclOperation) -> None:
    """A GROUP resource names a group id (which need not exist: Kafka keeps configs of groups to
    come); the operation is authorized on that group."""
    if not group:
        raise InvalidRequestError("Group name must not be empty")
    if not ctx.allowed(operation, ResourceType.GROUP, group):
        raise GroupAuthorizationFailedError(f"{ctx.principal} may not {operation.name} of group {group!r}")


def group_config_entries(broker, group: str) -> list[ConfigEntry]:
    """Every group config with the group's value (GROUP_CONFIG) or the broker's (DEFAULT_CONFIG);
    the synonyms as Kafka's ConfigHelper.createGroupConfigEntry gives them: the group's own
    value, then the broker config that defaults it (or, for a config without one, the
    default under the group config's own name)."""
    out = []
    store = broker.group_configs
    for name, value, source, d in store.describe(group):
        default = Valued(d.broker_name or name, store.broker.default(name), store.broker_source(name))
        synonyms = (Valued(name, value, source), default) if source == ConfigSource.GROUP_CONFIG else (default,)
        out.append(ConfigEntry(name, value, source, d.type, d.doc, synonyms=synonyms))
    return out


# -- DescribeConfigs --------------------------------------------------------------------------------
@handler(messages.DescribeConfigsRequest.API_KEY, 0)
def handle_describe_configs(ctx, request):
    R = messages.DescribeConfigsResponse
    Entry = R.DescribeConfigsResult.DescribeConfigsResourceResult
    broker = ctx.broker
    v = ctx.api_version
    results = []
    for res in request.resources:
        result = R.DescribeConfigsResult(error_code=ErrorCode.NONE, error_message=None, resource_type=res.resource_type,
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
                entries = broker_config_entries(broker, _broker_scope(broker, res.resource_name))
            elif res.resource_type == GROUP:
                _check_group(ctx, res.resource_name, AclOperation.DESCRIBE_CONFIGS)
                entries = group_config_entries(broker, res.resource_name)
            else:
                raise InvalidRequestError(f"resource type {res.resource_type} is not supported "
                                          "(topics 2, brokers 4 and groups 32 are)")
            keys = None if res.configuration_keys is None else set(res.configuration_keys)
            for e in entries:
                if keys is not None and e.name not in keys:
                    continue
                value = None if e.sensitive else e.value
                synonyms = [Entry.DescribeConfigsSynonym(name=s.name, value=None if e.sensitive else s.value,
                                                         source=s.source)
                            for s in e.synonyms] if request.include_synonyms else []
                result.configs.append(Entry(
                    name=e.name, value=value, read_only=e.read_only, config_source=e.source,
                    is_default=v == 0 and e.source == _DEFAULT, is_sensitive=e.sensitive, synonyms=synonyms,
                    config_type=e.config_type if v >= 3 else 0,
                    documentation=e.documentation if v >= 3 and request.include_documentation else None))
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
        results.append(result)
    return R(throttle_time_ms=0, results=results)


# -- AlterConfigs and IncrementalAlterConfigs ----------------------------------------------------------
# A resource's new dynamic configs from its current ones and the value lookup of a config
# (for APPEND/SUBTRACT on a config without an override: its effective value).
NewConfigs = Callable[[dict[str, str], Callable[[str], str | None]], Mapping[str, str | None]]


def _alter(ctx, resource_type: int, name: str, new_configs: NewConfigs, validate_only: bool) -> None:
    """Replace the dynamic configs of one resource by ``new_configs(current, lookup)``, all or nothing."""
    broker = ctx.broker
    if resource_type == TOPIC:
        if not ctx.allowed(AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name):
            raise TopicAuthorizationFailedError(f"{ctx.principal} may not ALTER_CONFIGS of topic {name!r}")
        info = broker.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        clean = check_topic_configs(broker, new_configs(dict(info.configs),
                                                        lambda key: _topic_value(broker, info.configs, key)))
        if not validate_only:
            broker.topics.set_configs(name, clean)
            broker.refresh_log_configs([name])
    elif resource_type == BROKER:
        if not ctx.allowed(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER):
            raise ClusterAuthorizationFailedError(f"{ctx.principal} may not ALTER_CONFIGS of the broker")
        scope = _broker_scope(broker, name)
        dynamic = broker.dynamic_configs
        entries = {e.name: e.value for e in broker_config_entries(broker)}
        try:
            clean = check_dynamic_configs(new_configs(dynamic.scope(scope), entries.get))
            merged = {**(clean if scope == "" else dynamic.cluster_default),
                      **(dynamic.per_broker if scope == "" else clean)}
            config = dynamic.broker_config(broker.config, broker.static_config, merged)
            for topic in broker.topics.names(internal=True):  # every topic's LogConfig must still hold together
                topic_log_config(config.log, merged, broker.topics.get(topic).configs)
        except ValueError as exc:  # ConfigError included
            raise InvalidRequestError(str(exc)) from None
        if not validate_only:
            dynamic.replace(scope, clean)
            old, broker.config = broker.config, config
            broker.refresh_log_configs()
            if any(getattr(old, d.field) != getattr(config, d.field) for d in CLEANER_CONFIGS.values()):
                _restart_cleaner(broker)
    elif resource_type == GROUP:
        _check_group(ctx, name, AclOperation.ALTER_CONFIGS)
        store = broker.group_configs
        try:
            clean = store.check(new_configs(store.overrides(name), lambda key: store.get(name).value(key)))
        except ConfigError as exc:  # Kafka's InvalidConfigurationException
            raise InvalidConfigError(str(exc)) from None
        if not validate_only:
            store.replace(name, clean)
    else:
        raise InvalidRequestError(f"Unknown resource type {resource_type} (topics 2, brokers 4 and groups 32 "
                                  "can be altered)")


_cleaner_restarts = threading.Lock()


def _restart_cleaner(broker) -> None:
    """Kafka's LogCleaner.reconfigure: a running cleaner restarts with the broker's current
    log.cleaner.* settings.  On a thread of its own, as stopping waits for a clean under way to
    abort; one restart at a time, each reading the newest settings."""
    logs = broker.logs
    if logs.cleaner is None:
        return  # never started: start_cleaner will read broker.config

    def restart() -> None:
        with _cleaner_restarts:
            previous = logs.cleaner
            if previous is None:
                return
            try:
                logs.stop_cleaner()
                logs.cleaner = None
                logs.start_cleaner(CleanerConfig.from_broker(broker.config), clock=previous.clock)
            except KafkaStorageError:
                pass  # the broker closed meanwhile

    threading.Thread(target=restart, name="kwire-cleaner-reconfigure", daemon=True).start()


def _check_request_shape(configs, *, null_ok: Callable[[object], bool]) -> None:
    """Kafka's ConfigAdminManager.preprocess checks, per resource."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    nulls = [c.name for c in configs if c.value is None and not null_ok(c)]
    if nulls:
        raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")


def _answer(Response, request, apply: Callable[[object], None]):
    """One result per resource; a resource named twice fails both times (Kafka)."""
    seen: dict[tuple[int, str], int] = {}
    for res in request.resources:
        key = (res.resource_type, res.resource_name)
        seen[key] = seen.get(key, 0) + 1
    results = []
    for res in request.resources:
        result = Response.AlterConfigsResourceResponse(error_code=ErrorCode.NONE, error_message=None,
                                                       resource_type=res.resource_type,
                                                       resource_name=res.resource_name)
        try:
            if seen[(res.resource_type, res.resource_name)] > 1:
                raise InvalidRequestError("Each resource must appear at most once.")
            apply(res)
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
        results.append(result)
    return Response(throttle_time_ms=0, responses=results)


@handler(messages.AlterConfigsRequest.API_KEY, 0)
def handle_alter_configs(ctx, request):
    """The legacy AlterConfigs: the given set replaces all dynamic configs of the resource."""
    def apply(res) -> None:
        _check_request_shape(res.configs, null_ok=lambda c: False)
        wanted = {c.name: c.value for c in res.configs}
        _alter(ctx, res.resource_type, res.resource_name, lambda current, lookup: wanted, request.validate_only)

    return _answer(messages.AlterConfigsResponse, request, apply)


def _definition(resource_type: int, name: str) -> TopicConfigDef | None:
    if resource_type == GROUP:
        return GROUP_CONFIGS.get(name)
    return TOPIC_CONFIGS.get(name) if resource_type == TOPIC else dynamic_definition(name)


@handler(messages.IncrementalAlterConfigsRequest.API_KEY, 0)
def handle_incremental_alter_configs(ctx, request):
    """SET, DELETE, APPEND, SUBTRACT (the last two on list configs) on the current configs."""
    def apply(res) -> None:
        for c in res.configs:
            if c.config_operation not in AlterConfigOp._value2member_map_:
                raise InvalidRequestError(f"Unknown operations type {c.config_operation}")
        _check_request_shape(res.configs, null_ok=lambda c: c.config_operation == AlterConfigOp.DELETE)

        def new_configs(current: dict[str, str], lookup: Callable[[str], str | None]) -> dict[str, str | None]:
            for c in res.configs:
                op = AlterConfigOp(c.config_operation)
                if op == AlterConfigOp.SET:
                    current[c.name] = c.value
                elif op == AlterConfigOp.DELETE:
                    current.pop(c.name, None)
                else:
                    d = _definition(res.resource_type, c.name)
                    if d is None:
                        current[c.name] = c.value  # unknown: the check of the whole set names it
                        continue
                    if d.type != ConfigType.LIST:
                        # ConfigurationControlManager's answer, for topics and brokers alike.
                        raise InvalidConfigError(f"Can't {op.name} to key {c.name} because its type is not LIST.")
                    base = current.get(c.name)
                    parts = [p.strip() for p in ((lookup(c.name) if base is None else base) or "").split(",")
                             if p.strip()]
                    for item in (p.strip() for p in c.value.split(",")):
                        if op == AlterConfigOp.APPEND and item not in parts:
                            parts.append(item)
                        elif op == AlterConfigOp.SUBTRACT and item in parts:
                            parts.remove(item)
                    current[c.name] = ",".join(parts)
            return current

        _alter(ctx, res.resource_type, res.resource_name, new_configs, request.validate_only)

    return _answer(messages.IncrementalAlterConfigsResponse, request, apply)
