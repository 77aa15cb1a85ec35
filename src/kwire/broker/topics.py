"""The broker's topic metadata: names, ids, partition counts and per-topic config overrides.

Persisted as one JSON document (``<data dir>/__kwire/topics.json``) replaced atomically on every
change, so topic ids stay stable across restarts (clients cache them since KIP-516).

Internal topics (Kafka's ``Topic.INTERNAL_TOPICS``) are topics of the registry like any other,
recognised by name: only the broker writes them, and no client may create or delete them.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kwire.protocol.coordinator_records import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC

from .storage._files import atomic_write

__all__ = ["TopicInfo", "TopicRegistry", "META_DIR", "INTERNAL_TOPICS", "is_internal"]

# Kafka's Topic.INTERNAL_TOPICS: names reserved for the coordinators' topics (4.x adds the share
# coordinator's), never plain topics.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})


def is_internal(name: str | None) -> bool:
    """Kafka's Topic.isInternal."""
    return name in INTERNAL_TOPICS

logger = logging.getLogger("kwire.broker.topics")

META_DIR = "__kwire"
_FILE = "topics.json"
# The topic list is rebuilt from the partitions' directories when the file is missing (see
# BrokerState): a way out for a file that is damaged, at the price of its ids and overrides.
_WHAT_TO_DO = ("; restore the file, or move it away to rebuild the topic list from the partitions' "
               "directories (the topics get new ids and lose their config overrides)")
_VERSION = 1


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    # Topic-level config overrides by Kafka's names ("retention.ms": "1000"), as strings.
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicRegistry:
    """Topic name -> ``TopicInfo``, with a reverse index by topic id."""

    def __init__(self, data_dir: Path):
        self._dir = Path(data_dir) / META_DIR
        self._dir.mkdir(parents=True, exist_ok=True)
        self._path = self._dir / _FILE
        self._lock = threading.RLock()
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._pending = False  # changes not written yet (see ensure)
        self._load()

    def _load(self) -> None:
        self.stored = False  # whether the topic list was on disk (False: a new data dir, or it was lost)
        try:
            doc = json.loads(self._path.read_text("utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self._path}: unreadable topic metadata: {exc}{_WHAT_TO_DO}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"{self._path}: unreadable topic metadata: a JSON {type(doc).__name__}, "
                             f"not an object{_WHAT_TO_DO}")
        if doc.get("version") != _VERSION:
            raise ValueError(f"{self._path}: unknown version {doc.get('version')!r}")
        where = "the topic list"
        try:
            for i, t in enumerate(doc["topics"]):
                where = f"topic entry {i}"
                info = TopicInfo(str(t["name"]), uuid.UUID(t["id"]), int(t["partitions"]),
                                 {str(k): str(v) for k, v in t.get("configs", {}).items()})
                if not info.name or info.partitions < 1:
                    raise ValueError(f"name {info.name!r}, {info.partitions} partitions")
                self._topics[info.name] = info
                self._by_id[info.topic_id] = info
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{self._path}: unreadable topic metadata: {where}: "
                             f"{type(exc).__name__} {exc}{_WHAT_TO_DO}") from None
        self.stored = True

    @property
    def path(self) -> Path:
        return self._path

    def _save(self) -> None:
        self._pending = False
        doc = {"version": _VERSION, "topics": [
            {"name": t.name, "id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
            for t in sorted(self._topics.values(), key=lambda t: t.name)]}
        atomic_write(self._path, json.dumps(doc, indent=1).encode())

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def names(self, *, internal: bool = False) -> list[str]:
        """The plain topics' names, sorted; with ``internal`` the internal topics' too."""
        return sorted(n for n in self._topics if internal or n not in INTERNAL_TOPICS)

    def __contains__(self, name: str) -> bool:
        return name in self._topics

    def __len__(self) -> int:
        """How many plain topics there are."""
        return len(self.names())

    def partition_exists(self, name: str, partition: int) -> bool:
        info = self._topics.get(name)
        return info is not None and 0 <= partition < info.partitions

    def add(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> TopicInfo:
        with self._lock:
            if name in self._topics:
                raise KeyError(name)
            info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs or {}))
            self._topics[name] = info
            self._by_id[info.topic_id] = info
            try:
                self._save()
            except BaseException:
                # Not on disk, so not a topic: the registry stays what the file says.
                del self._topics[name], self._by_id[info.topic_id]
                raise
            return info

    def ensure(self, wanted: dict[str, tuple[int, dict[str, str]]], *, save: bool = True) -> list[str]:
        """Topics the broker itself keeps (name -> (partitions, configs)): add those missing and
        give existing ones these configs, in one save.  An existing topic keeps its partition
        count (as Kafka's: the setting only counts when the topic is created).  Returns the
        names added.  ``save=False``: only in memory until ``save_pending()`` (or any other
        change) writes the list."""
        with self._lock:
            added = []
            changed = False
            for name, (partitions, configs) in wanted.items():
                info = self._topics.get(name)
                if info is None:
                    info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs))
                    self._topics[name] = info
                    self._by_id[info.topic_id] = info
                    added.append(name)
                    changed = True
                elif any(info.configs.get(k) != v for k, v in configs.items()):
                    info.configs = {**info.configs, **configs}
                    changed = True
            if changed:
                if save:
                    self._save()
                else:
                    self._pending = True
            return added

    def save_pending(self) -> None:
        """Write changes ``ensure(..., save=False)`` left in memory only."""
        with self._lock:
            if self._pending:
                self._save()

    def set_partitions(self, name: str, partitions: int) -> None:
        with self._lock:
            self._topics[name].partitions = partitions
            self._save()

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        with self._lock:
            self._topics[name].configs = dict(configs)
            self._save()

    def remove(self, name: str) -> TopicInfo:
        with self._lock:
            info = self._topics.pop(name)
            self._by_id.pop(info.topic_id, None)
            self._save()
            return info
