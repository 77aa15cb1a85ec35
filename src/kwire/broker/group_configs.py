"""Group configs: what IncrementalAlterConfigs / AlterConfigs set on a GROUP resource (Kafka's
``GroupConfig``, KIP-848 / KIP-932 / KIP-1071 / KIP-1240), kept in
``<data dir>/__kwire/group-configs.json``, and the typed view the group coordinators read.

    cfg = state.group_configs.get("orders")      # GroupConfig, broker defaults applied
    cfg.consumer_session_timeout_ms             # 45000 unless the group overrides it
    cfg.share_auto_offset_reset                 # "latest" | "earliest" | "by_duration:PT1H"
    cfg.share_auto_offset_reset_duration_ms     # None, or the by_duration in ms

As in Kafka, a group config can be set for a group that does not exist yet (the coordinator
reads it when the group appears), the listed keys are Kafka 4.3's, unknown names are refused
(``Unknown group config name: x``), and a value must lie within the broker's bounds for it
(``group.consumer.min.session.timeout.ms`` ... ``group.share.max.record.lock.duration.ms``), each
key checked only when the group sets it (KIP-1240).  The defaults and bounds are the broker's
settings of those names where its config has them (``GroupBrokerConfig.from_broker``), else
Kafka's defaults.  A value that was valid when set
but lies outside bounds lowered later is clamped when read, so a coordinator never runs with
a value the broker would refuse.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kwire.protocol.configs import ConfigSource, ConfigType
from kwire.settings import ConfigError

from .meta_document import MetaDocument
from .topic_configs import INT_MAX, BrokerSynonym, OneOf, Range, TopicConfigDef, parse_value
from .topics import META_DIR

__all__ = ["GROUP_CONFIGS", "GroupBrokerConfig", "GroupConfig", "GroupConfigStore", "check_group_configs",
           "parse_iso8601_duration_ms"]

logger = logging.getLogger("kwire.broker.group_configs")

_FILE = "group-configs.json"
_VERSION = 1
_WHAT_TO_DO = ("restore the file, or move it away to start without the group configs set by "
               "IncrementalAlterConfigs (every group then runs with the broker's defaults)")


# -- share.auto.offset.reset ----------------------------------------------------------------------
# Java's Duration.parse grammar (ISO-8601 PnDTnHnMn.nS, days at most), which Kafka's
# ShareGroupAutoOffsetResetStrategy uses for by_duration:<duration>.
_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
                       r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE)


def parse_iso8601_duration_ms(text: str) -> int:
    """An ISO-8601 duration (``PT1H``, ``P1DT2H3M4.5S``) in milliseconds; ValueError if it is
    not one (Java's Duration.parse grammar)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or (m.group(3) is not None and not any(m.group(i) for i in (4, 5, 6))) \
            or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(f"not an ISO-8601 duration (PnDTnHnMn.nS): {text!r}")
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    fraction = (m.group(7) or "").ljust(3, "0")[:3]
    millis = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000
    millis += (-1 if (m.group(6) or "").startswith("-") else 1) * int(fraction or 0)
    return -millis if m.group(1) == "-" else millis


@dataclass(frozen=True)
class AutoOffsetReset:
    """Kafka's ShareGroupAutoOffsetResetStrategy.Validator: ``latest``, ``earliest`` or
    ``by_duration:<ISO-8601 duration>`` (not negative); case-insensitive like Kafka."""

    def check(self, name: str, value: Any) -> None:
        text = str(value).strip().lower()
        if text in ("latest", "earliest"):
            return
        if text.startswith("by_duration:"):
            try:
                if parse_iso8601_duration_ms(text[len("by_duration:"):]) >= 0:
                    return
            except ValueError:
                pass
            raise ConfigError(f"Invalid value {value} for configuration {name}: the duration of by_duration "
                              "must be a non-negative ISO-8601 duration (PnDTnHnMn.nS)")
        raise ConfigError(f"Invalid value {value} for configuration {name}: must be one of "
                          "latest, earliest, by_duration:PnDTnHnMn.nS")

    def __str__(self) -> str:
        return "[latest, earliest, by_duration:PnDTnHnMn.nS]"


# -- the broker's settings for groups ----------------------------------------------------------------
@dataclass(frozen=True)
class GroupBrokerConfig:
    """The broker settings that default group configs and bound them, with Kafka 4.3's defaults
    (GroupCoordinatorConfig, ShareGroupConfig): ``<key>`` is the default for every group,
    ``(min, max)`` the range a group's own value must lie in."""

    consumer_session_timeout_ms: int = 45_000
    consumer_session_timeout_ms_bounds: tuple[int, int] = (45_000, 60_000)
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_heartbeat_interval_ms_bounds: tuple[int, int] = (5_000, 15_000)
    consumer_assignment_interval_ms: int = 1_000
    share_session_timeout_ms: int = 45_000
    share_session_timeout_ms_bounds: tuple[int, int] = (45_000, 60_000)
    share_heartbeat_interval_ms: int = 5_000
    share_heartbeat_interval_ms_bounds: tuple[int, int] = (5_000, 15_000)
    share_record_lock_duration_ms: int = 30_000
    share_record_lock_duration_ms_bounds: tuple[int, int] = (15_000, 60_000)
    share_delivery_count_limit: int = 5
    share_delivery_count_limit_bounds: tuple[int, int] = (2, 10)
    share_partition_max_record_locks: int = 2_000
    share_partition_max_record_locks_bounds: tuple[int, int] = (100, 10_000)
    share_assignment_interval_ms: int = 1_000
    streams_session_timeout_ms: int = 45_000
    streams_session_timeout_ms_bounds: tuple[int, int] = (45_000, 60_000)
    streams_heartbeat_interval_ms: int = 5_000
    streams_heartbeat_interval_ms_bounds: tuple[int, int] = (5_000, 15_000)
    streams_num_standby_replicas: int = 0
    streams_max_standby_replicas: int = 2
    streams_initial_rebalance_delay_ms: int = 3_000

    @classmethod
    def from_broker(cls, config: object) -> GroupBrokerConfig:
        """The settings the broker's config holds, by Kafka's names as attributes
        (``group.consumer.session.timeout.ms`` -> ``group_consumer_session_timeout_ms``, its bounds
        ``group_consumer_min/max_session_timeout_ms``); Kafka's defaults for the rest."""
        values: dict[str, Any] = {}
        for f in cls.__dataclass_fields__:
            if f == "streams_max_standby_replicas":
                names: tuple[str, ...] = ("group_streams_max_standby_replicas",)
            elif f.endswith("_bounds"):
                kind, rest = f.removesuffix("_bounds").split("_", 1)
                names = (f"group_{kind}_min_{rest}", f"group_{kind}_max_{rest}")
            else:
                names = (f"group_{f}",)
            found = [getattr(config, n, None) for n in names]
            if f.endswith("_bounds"):
                default = cls.__dataclass_fields__[f].default
                values[f] = tuple(d if v is None else int(v) for v, d in zip(found, default, strict=True))
            elif found[0] is not None:
                values[f] = int(found[0])
        return cls(**values)

    def is_default(self, name: str) -> bool:
        """Whether the broker runs with Kafka's default for the group config ``name``."""
        return self.default(name) == (GROUP_CONFIGS[name].default or "")

    def bounds(self, name: str) -> tuple[int, int] | None:
        """The broker's range for the group config ``name`` (None: only its own validator)."""
        if name == "streams.num.standby.replicas":
            return 0, self.streams_max_standby_replicas
        return getattr(self, _attr(name) + "_bounds", None)

    def default(self, name: str) -> str:
        """The value a group without its own has, as DescribeConfigs shows it."""
        d = GROUP_CONFIGS[name]
        attr = _attr(name)
        if d.broker_name and hasattr(self, attr):
            value = getattr(self, attr)
            return str(value).lower() if isinstance(value, bool) else str(value)
        return d.default or ""


def _attr(name: str) -> str:
    return name.replace(".", "_")


_I, _S, _B = ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN


def _def(name: str, kind: ConfigType, default: str, validator, doc: str, broker: str | None) -> TopicConfigDef:
    # TopicConfigDef is the catalogue row of every config kwire describes; ``synonyms`` holds the
    # broker config that defaults this one (Kafka's GroupConfig.ALL_GROUP_CONFIG_SYNONYMS).
    return TopicConfigDef(name, kind, default, validator, doc, (BrokerSynonym(broker),) if broker else (),
                          field=name.replace(".", "_"))


# Kafka 4.3's GroupConfig keys, by name (DescribeConfigs lists them in this order), with the
# validators of GroupConfig.CONFIG_DEF; the broker bounds come on top (check_group_configs).
GROUP_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in (
    _def("consumer.assignment.interval.ms", _I, "1000", Range(0, INT_MAX),
         "Least time between two assignment updates of a consumer group.", "group.consumer.assignment.interval.ms"),
    _def("consumer.heartbeat.interval.ms", _I, "5000", Range(1, INT_MAX),
         "The heartbeat interval given to the members of a consumer group.", "group.consumer.heartbeat.interval.ms"),
    _def("consumer.session.timeout.ms", _I, "45000", Range(1, INT_MAX),
         "Time without a heartbeat after which a consumer group member is removed.",
         "group.consumer.session.timeout.ms"),
    _def("share.assignment.interval.ms", _I, "1000", Range(0, INT_MAX),
         "Least time between two assignment updates of a share group.", "group.share.assignment.interval.ms"),
    _def("share.auto.offset.reset", _S, "latest", AutoOffsetReset(),
         "Where a share partition without a start offset starts: latest, earliest, or by_duration:<ISO-8601 "
         "duration> before now.", None),
    _def("share.delivery.count.limit", _I, "5", Range(2, INT_MAX),
         "Delivery attempts of a record to a share group before it is archived.", "group.share.delivery.count.limit"),
    _def("share.heartbeat.interval.ms", _I, "5000", Range(1, INT_MAX),
         "The heartbeat interval given to the members of a share group.", "group.share.heartbeat.interval.ms"),
    _def("share.isolation.level", _S, "read_uncommitted", OneOf(("read_committed", "read_uncommitted")),
         "read_committed: the share group delivers only committed transactional records; read_uncommitted: all.",
         None),
    _def("share.partition.max.record.locks", _I, "2000", Range(100, INT_MAX),
         "Records of one share partition that may be acquired (in flight) at once.",
         "group.share.partition.max.record.locks"),
    _def("share.record.lock.duration.ms", _I, "30000", Range(1000, INT_MAX),
         "How long a share consumer holds an acquired record before it is released for redelivery.",
         "group.share.record.lock.duration.ms"),
    # KIP-1222; Kafka added it in 4.3 with the default false (renewals refused with INVALID_RECORD_STATE).
    _def("share.renew.acknowledge.enable", _B, "false", None,
         "Whether members of the share group may renew the lock of a record (RENEW acknowledgements).", None),
    _def("share.session.timeout.ms", _I, "45000", Range(1, INT_MAX),
         "Time without a heartbeat after which a share group member is removed.", "group.share.session.timeout.ms"),
    _def("streams.heartbeat.interval.ms", _I, "5000", Range(1, INT_MAX),
         "The heartbeat interval given to the members of a streams group.", "group.streams.heartbeat.interval.ms"),
    _def("streams.initial.rebalance.delay.ms", _I, "3000", Range(0, INT_MAX),
         "Wait for more members before a new streams group's first assignment.",
         "group.streams.initial.rebalance.delay.ms"),
    _def("streams.num.standby.replicas", _I, "0", Range(0, INT_MAX),
         "Standby replicas of each task of a streams group.", "group.streams.num.standby.replicas"),
    _def("streams.session.timeout.ms", _I, "45000", Range(1, INT_MAX),
         "Time without a heartbeat after which a streams group member is removed.",
         "group.streams.session.timeout.ms"),
)}

# (session, heartbeat): Kafka's cross-check that a session outlasts the heartbeat interval.
_SESSION_HEARTBEAT = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                      ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
                      ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))


def check_group_configs(configs: Mapping[str, str | None], broker: GroupBrokerConfig | None = None) -> dict[str, str]:
    """Check one group's whole set of overrides (Kafka's GroupConfig.validate): known names,
    parsable values within the key's validator and the broker's bounds, each session timeout
    above its heartbeat interval (the broker's value standing in for the one not set).
    ConfigError with Kafka's message for the first problem."""
    broker = broker or GroupBrokerConfig()
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise ConfigError(f"Unknown group config name: {name}")
    parsed: dict[str, Any] = {}
    clean: dict[str, str] = {}
    for name, value in configs.items():
        if value is None:
            raise ConfigError(f"Null value not supported for : {name}")
        parsed[name] = parse_value(name, value, GROUP_CONFIGS[name])
        clean[name] = value.strip()
        bounds = broker.bounds(name)
        if bounds is not None and not bounds[0] <= parsed[name] <= bounds[1]:
            if name == "streams.num.standby.replicas":
                raise ConfigError(f"{name} must be less than or equal to {bounds[1]}")
            raise ConfigError(f"{name} must be in the range {bounds[0]} to {bounds[1]} inclusive.")
    for session, heartbeat in _SESSION_HEARTBEAT:
        if session in parsed or heartbeat in parsed:
            s = parsed.get(session, int(broker.default(session)))
            h = parsed.get(heartbeat, int(broker.default(heartbeat)))
            if s <= h:
                raise ConfigError(f"{session} must be greater than {heartbeat}")
    return clean


# -- the typed view ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupConfig:
    """One group's effective configs: its own values over the broker's defaults (Kafka's
    GroupConfig with GroupConfigManager's defaults).  ``overrides`` holds what the group sets."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    consumer_assignment_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_assignment_interval_ms: int
    share_auto_offset_reset: str        # latest | earliest | by_duration:<ISO-8601>, lower case
    share_isolation_level: str          # read_uncommitted | read_committed
    share_renew_acknowledge_enable: bool
    streams_session_timeout_ms: int
    streams_heartbeat_interval_ms: int
    streams_num_standby_replicas: int
    streams_initial_rebalance_delay_ms: int
    overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def share_auto_offset_reset_duration_ms(self) -> int | None:
        """For ``by_duration:<d>``: d in milliseconds (start at the first record not older than
        now - d); None for latest/earliest."""
        strategy = self.share_auto_offset_reset
        if strategy.startswith("by_duration:"):
            return parse_iso8601_duration_ms(strategy[len("by_duration:"):])
        return None

    @property
    def share_read_committed(self) -> bool:
        return self.share_isolation_level == "read_committed"

    def value(self, name: str) -> str:
        """The effective value of the group config ``name`` as text."""
        v = getattr(self, name.replace(".", "_"))
        return str(v).lower() if isinstance(v, bool) else str(v)

    @classmethod
    def effective(cls, overrides: Mapping[str, str], broker: GroupBrokerConfig | None = None,
                  group_id: str = "") -> GroupConfig:
        """The group's configs from its (already checked) overrides, each clamped into the
        broker's current bounds with a warning (Kafka's GroupConfig.evaluate)."""
        broker = broker or GroupBrokerConfig()
        values: dict[str, Any] = {}
        for name, d in GROUP_CONFIGS.items():
            text = overrides.get(name)
            if text is None:
                text = broker.default(name)
            value = parse_value(name, text, d, check=False)
            bounds = broker.bounds(name) if name in overrides else None
            if bounds is not None and not bounds[0] <= value <= bounds[1]:
                capped = min(max(value, bounds[0]), bounds[1])
                logger.warning("group %r: %s %s is outside the broker's range %d..%d: %d applies", group_id, name,
                               value, bounds[0], bounds[1], capped)
                value = capped
            if isinstance(value, str):  # Kafka compares these case-insensitively
                head, sep, duration = value.partition(":")
                value = head.lower() + sep + duration.upper()
            values[d.field] = value
        return cls(**values, overrides=dict(overrides))


# -- the store -------------------------------------------------------------------------------------
Listener = Callable[[str, GroupConfig], None]


class GroupConfigStore:
    """The group configs of one data directory: ``get(group)`` for the coordinators, ``replace``
    for the config requests (persisted before it returns), ``add_listener`` to hear of changes."""

    def __init__(self, data_dir: Path, broker: GroupBrokerConfig | None = None):
        self._doc = MetaDocument(Path(data_dir) / META_DIR / _FILE, _VERSION, "group configs", _WHAT_TO_DO)
        self._path = self._doc.path
        self.broker = broker or GroupBrokerConfig()
        self._lock = threading.Lock()
        self._groups: dict[str, dict[str, str]] = self._load()
        self._cache: dict[str, GroupConfig] = {}
        self._listeners: list[Listener] = []

    @property
    def path(self) -> Path:
        return self._path

    def _load(self) -> dict[str, dict[str, str]]:
        groups = self._doc.load(lambda doc: {str(g): {str(k): str(v) for k, v in configs.items()}
                                             for g, configs in doc["groups"].items()}, {})
        for group, configs in groups.items():
            try:
                # Names and types only: a value outside bounds lowered since is clamped by get().
                check_group_configs(configs, _UNBOUNDED)
            except ConfigError as exc:
                raise self._doc.unreadable(f"group {group!r}: {exc}") from None
        return groups

    def get(self, group_id: str) -> GroupConfig:
        """The effective configs of ``group_id`` (the broker's defaults if it sets none)."""
        cfg = self._cache.get(group_id)
        if cfg is None:
            cfg = GroupConfig.effective(self._groups.get(group_id, {}), self.broker, group_id)
            self._cache[group_id] = cfg
        return cfg

    def overrides(self, group_id: str) -> dict[str, str]:
        """A copy of the configs ``group_id`` sets itself."""
        return dict(self._groups.get(group_id, {}))

    def groups(self) -> list[str]:
        """The groups that set configs (what ListConfigResources lists), sorted."""
        return sorted(self._groups)

    def check(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        """``check_group_configs`` against this broker's bounds."""
        return check_group_configs(configs, self.broker)

    def replace(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Make ``configs`` (checked) the whole set of ``group_id`` and write the file; an empty
        set removes the group's entry."""
        with self._lock:
            groups = {k: dict(v) for k, v in self._groups.items()}
            if configs:
                groups[group_id] = dict(configs)
            else:
                groups.pop(group_id, None)
            self._doc.save({"groups": {k: dict(sorted(v.items())) for k, v in sorted(groups.items())}})
            self._groups = groups
            self._cache.pop(group_id, None)
        cfg = self.get(group_id)
        for listener in list(self._listeners):
            listener(group_id, cfg)

    def delete(self, group_id: str) -> None:
        """Forget the configs of ``group_id`` (no-op if it sets none)."""
        if group_id in self._groups:
            self.replace(group_id, {})

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(group_id, new GroupConfig)`` after each change (on the changing thread)."""
        self._listeners.append(listener)

    def describe(self, group_id: str) -> list[tuple[str, str, ConfigSource, TopicConfigDef]]:
        """(name, value, source, definition) of every group config of ``group_id``: its own value
        as GROUP_CONFIG, else the broker's as STATIC_BROKER_CONFIG when the broker was started
        with a value other than Kafka's default, else DEFAULT_CONFIG (Kafka's
        ConfigHelper.createGroupConfigEntry)."""
        own = self._groups.get(group_id, {})
        return [(name, own[name], ConfigSource.GROUP_CONFIG, d) if name in own
                else (name, self.broker.default(name), self.broker_source(name), d)
                for name, d in GROUP_CONFIGS.items()]

    def broker_source(self, name: str) -> ConfigSource:
        """Where the broker's value for the group config ``name`` comes from."""
        return ConfigSource.DEFAULT_CONFIG if self.broker.is_default(name) else ConfigSource.STATIC_BROKER_CONFIG


# For reading the file: no broker bounds (they apply to new values; stored ones are clamped).
_BIG = (0, 1 << 62)
_UNBOUNDED = GroupBrokerConfig(**{f: _BIG for f in GroupBrokerConfig.__dataclass_fields__ if f.endswith("_bounds")},
                               streams_max_standby_replicas=INT_MAX)
