"""Dynamic broker configs: what AlterConfigs / IncrementalAlterConfigs set on the BROKER resource
(Kafka's DynamicBrokerConfig), kept in ``<data dir>/__kwire/broker-configs.json``.

Two scopes, as in Kafka: the resource name ``""`` is the cluster-wide default
(DYNAMIC_DEFAULT_BROKER_CONFIG), a node id is that broker's own (DYNAMIC_BROKER_CONFIG, which
wins).  Only configs kwire applies live are accepted (``dynamic_definition``): the broker
synonyms of topic configs (``log.retention.ms``, ``message.max.bytes``... Kafka's
DynamicLogConfig) and the log cleaner's settings (Kafka's LogCleaner.ReconfigurableConfigs).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from kwire.protocol.configs import ConfigType
from kwire.settings import ConfigError

from .config import WORKER_PROCESS_SUPPORTED, BrokerConfig
from .meta_document import MetaDocument
from .topic_configs import TOPIC_CONFIGS, Range, TopicConfigDef, parse_value
from .topics import META_DIR

__all__ = ["CLEANER_CONFIGS", "DynamicBrokerConfigs", "TOPIC_SYNONYM_CONFIGS", "check_dynamic_configs",
           "dynamic_definition"]

_FILE = "broker-configs.json"
_VERSION = 1
_WHAT_TO_DO = ("restore the file, or move it away to start without the dynamic broker configs set by "
               "AlterConfigs (the broker then runs with its static configuration)")

# The broker config that defaults each topic config cluster-wide (only the first synonym is
# dynamically updatable in Kafka: log.retention.ms, not log.retention.hours).
TOPIC_SYNONYM_CONFIGS: dict[str, TopicConfigDef] = {
    d.broker_name: d for d in TOPIC_CONFIGS.values() if d.broker_name and not d.internal}

_DOUBLE_MAX = 1.7976931348623157e308
# The log cleaner's settings BrokerConfig holds (``field``: the BrokerConfig attribute), with
# Kafka's types, defaults and ranges (CleanerConfig).
CLEANER_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in (
    TopicConfigDef("log.cleaner.threads", ConfigType.INT, "1", Range(1, None),
                   "Threads compacting logs.", field="log_cleaner_threads"),
    TopicConfigDef("log.cleaner.io.max.bytes.per.second", ConfigType.DOUBLE, str(_DOUBLE_MAX), Range(0, None),
                   "Read and write rate of the cleaner's I/O, over all its threads.",
                   field="log_cleaner_io_max_bytes_per_second"),
    TopicConfigDef("log.cleaner.dedupe.buffer.size", ConfigType.LONG, str(128 * 1024 * 1024), Range(0, None),
                   "Memory for the key map of a cleaning, over all cleaner threads.",
                   field="log_cleaner_dedupe_buffer_size"),
    TopicConfigDef("log.cleaner.io.buffer.size", ConfigType.INT, str(512 * 1024), Range(0, None),
                   "Read and write buffer of a cleaner thread.", field="log_cleaner_io_buffer_size"),
    TopicConfigDef("log.cleaner.backoff.ms", ConfigType.LONG, "15000", Range(0, None),
                   "Pause of the cleaner when no log needs cleaning.", field="log_cleaner_backoff_ms"),
    # kwire's own, named as kwire.fsync and kwire.page.cache.bytes are: Kafka's cleaner threads
    # share a JVM without a GIL, so it has no such setting.
    TopicConfigDef("kwire.log.cleaner.worker.process", ConfigType.BOOLEAN,
                   "true" if WORKER_PROCESS_SUPPORTED else "false", None,
                   "Whether each cleaner thread reads and writes in a worker process of its own, so that "
                   "compaction's work does not share the broker process's Python interpreter lock. The "
                   "worker's key map counts within log.cleaner.dedupe.buffer.size; its interpreter (about "
                   "30 MB) comes on top, started at the first clean. On by default where Unix sockets "
                   "pass file descriptors.",
                   field="log_cleaner_worker_process"),
)}


def dynamic_definition(name: str) -> TopicConfigDef | None:
    """The definition of a broker config kwire updates dynamically, else None."""
    return TOPIC_SYNONYM_CONFIGS.get(name) or CLEANER_CONFIGS.get(name)


def check_dynamic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check the whole set of dynamic configs of one scope; ConfigError naming the configs that
    cannot be updated dynamically (Kafka's message) or the first bad value."""
    fixed = sorted(k for k in configs if dynamic_definition(k) is None)
    if fixed:
        raise ConfigError(f"Cannot update these configs dynamically: {', '.join(fixed)} (kwire updates the log.* "
                          "defaults of topic configs, message.max.bytes, compression.type, min.insync.replicas, "
                          "unclean.leader.election.enable, log.cleaner.* and kwire.log.cleaner.worker.process "
                          "dynamically)")
    clean: dict[str, str] = {}
    for key, value in configs.items():
        if value is None:
            raise ConfigError(f"Null value not supported for : {key}")
        parsed = parse_value(key, value, dynamic_definition(key))
        if key == "min.insync.replicas" and parsed > 1:
            raise ConfigError(f"min.insync.replicas {value} is more than this single broker can hold (1)")
        clean[key] = value
    return clean


class DynamicBrokerConfigs:
    """The dynamic broker configs of one data directory, by scope (``""`` or a node id)."""

    def __init__(self, data_dir: Path, node_id: int):
        self._doc = MetaDocument(Path(data_dir) / META_DIR / _FILE, _VERSION, "dynamic broker configs", _WHAT_TO_DO)
        self._path = self._doc.path
        self._node = str(node_id)
        self._lock = threading.Lock()
        self._scopes: dict[str, dict[str, str]] = self._load()

    @property
    def path(self) -> Path:
        return self._path

    def _load(self) -> dict[str, dict[str, str]]:
        scopes = self._doc.load(lambda doc: {str(scope): {str(k): str(v) for k, v in configs.items()}
                                             for scope, configs in doc["scopes"].items()}, {})
        for scope, configs in scopes.items():
            try:
                check_dynamic_configs(configs)
            except ConfigError as exc:
                raise self._doc.unreadable(f"scope {scope!r}: {exc}") from None
        return scopes

    def scope(self, name: str) -> dict[str, str]:
        """A copy of the configs set on the resource ``name`` ("" or a node id)."""
        return dict(self._scopes.get(name, {}))

    @property
    def cluster_default(self) -> dict[str, str]:
        return self.scope("")

    @property
    def per_broker(self) -> dict[str, str]:
        return self.scope(self._node)

    def merged(self) -> dict[str, str]:
        """This broker's dynamic configs: its own over the cluster-wide defaults."""
        return {**self.cluster_default, **self.per_broker}

    def replace(self, name: str, configs: Mapping[str, str]) -> None:
        """Make ``configs`` the whole set of the resource ``name`` and write the file."""
        with self._lock:
            scopes = {k: dict(v) for k, v in self._scopes.items()}
            if configs:
                scopes[name] = dict(configs)
            else:
                scopes.pop(name, None)
            self._doc.save({"scopes": {k: dict(sorted(v.items())) for k, v in sorted(scopes.items())}})
            self._scopes = scopes

    def broker_config(self, current: BrokerConfig, static: BrokerConfig,
                      merged: Mapping[str, str] | None = None) -> BrokerConfig:
        """``current`` with each cleaner setting taken from the dynamic configs (``merged``, by
        default this broker's), else from ``static``; ConfigError if BrokerConfig refuses one.
        ``current`` keeps what the server filled in at start (the bound port)."""
        values = self.merged() if merged is None else merged
        changes = {d.field: parse_value(name, values[name], d) if name in values else getattr(static, d.field)
                   for name, d in CLEANER_CONFIGS.items()}
        return current.with_(**changes)
