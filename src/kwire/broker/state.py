"""Everything a request handler may read or change: the broker's state, without any sockets.

``BrokerState`` owns the log manager, the topic registry, the producer id allocator, the group
coordinator and the transaction coordinator.  Request handlers receive it through
``RequestContext.broker``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kwire.protocol.errors import KafkaStorageError

from .auth.security import BrokerSecurity
from .broker_configs import DynamicBrokerConfigs
from .config import BrokerConfig, new_cluster_id
from .coordinator.loader import CoordinatorLoader, Executor
from .durability import GroupCommit
from .group_configs import GroupBrokerConfig, GroupConfigStore
from .internal_topics import LAZY_TOPICS, InternalTopics
from .quotas import ClientQuotaManager, ClientQuotaStore
from .storage import LogConfig, LogManager
from .storage._files import atomic_write
from .topic_configs import topic_log_config
from .topics import META_DIR, TopicInfo, TopicRegistry

__all__ = ["BrokerState", "PartitionWaiters"]

logger = logging.getLogger("kwire.broker")

class PartitionWaiters:
    """Futures of long-polling fetches, woken when a partition gets new data."""

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}

    def add(self, key: tuple[str, int], fut: asyncio.Future) -> None:
        self._waiters.setdefault(key, set()).add(fut)

    def discard(self, key: tuple[str, int], fut: asyncio.Future) -> None:
        s = self._waiters.get(key)
        if s is not None:
            s.discard(fut)
            if not s:
                del self._waiters[key]

    def notify(self, key: tuple[str, int]) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)


class BrokerState:
    """The broker's data: open it on a data dir, ``close()`` it (clean shutdown) when done.

    ``load_coordinators=False``: the group and transaction coordinators load their internal
    partitions only when ``start_loading()`` is called (the server does, once it listens), in the
    background, as Kafka's coordinators do; until then they answer COORDINATOR_LOAD_IN_PROGRESS.
    """

    def __init__(self, config: BrokerConfig, *, load_coordinators: bool = True):
        self.config = config
        self.data_dir = Path(config.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.topics = TopicRegistry(self.data_dir)
        # Registered before the logs open, so their partitions get the internal topics' configs.
        self.internal_topics = InternalTopics(self.topics, config)
        # Configs set by AlterConfigs on the broker: the cleaner's settings change self.config,
        # the log.* defaults every topic's LogConfig (log_config_for); static_config stays as started.
        self.static_config = config
        self.dynamic_configs = DynamicBrokerConfigs(self.data_dir, config.node_id)
        self.config = self.dynamic_configs.broker_config(config, config)
        self.cluster_id = self._load_cluster_id()
        # Configs set on GROUP resources (consumer.*, share.*): the coordinators read
        # group_configs.get(group_id) for a group's session timeout, record lock duration...
        self.group_configs = GroupConfigStore(self.data_dir, GroupBrokerConfig.from_broker(config))
        self.logs = LogManager(self.data_dir, config.log,
                               configs={t: self.log_config_for(self.topics.get(t))
                                        for t in self.topics.names(internal=True)},
                               page_cache_bytes=config.page_cache_bytes, lazy_topics=LAZY_TOPICS)
        self.clean_shutdown = self.logs.clean_shutdown
        self.internal_topics.attach(self.logs, self.log_config_for)
        for key, findings in self.logs.load_findings.items():
            for line in findings:
                logger.warning("recovered %s-%d: %s", key[0], key[1], line)
        self._reconcile_partitions()
        self.waiters = PartitionWaiters()
        # Called with a connection's id when it closes (the network layer calls them): share
        # sessions end with their connection, as Kafka's (KAFKA-19015).
        self.connection_listeners: list = []
        self.durability = GroupCommit()
        # Imported here: both packages import this module's types for hints only.
        from .coordinator import GroupCoordinator
        from .producer_ids import ProducerIdManager
        from .transactions import TransactionCoordinator

        self.producer_ids = ProducerIdManager(self.data_dir)
        self.coordinator = GroupCoordinator(self.data_dir, config, self.topics, clean_shutdown=self.clean_shutdown,
                                            internal_topics=self.internal_topics, notify=self.waiters.notify,
                                            load=load_coordinators)
        # KIP-848 consumer groups: their offsets stay in the coordinator above.
        from .coordinator.consumer.broker_glue import open_consumer_groups
        self.consumer_groups = open_consumer_groups(self)
        # KIP-1071 streams groups, beside them (offsets in the same coordinator).
        from .coordinator.streams.broker_glue import open_streams_groups
        self.streams_groups = open_streams_groups(self)
        # Last: it completes the transactions a restart left half done, in the logs and the groups.
        self.transactions = TransactionCoordinator(
            self.data_dir, config, producer_ids=self.producer_ids, logs=self.logs, topics=self.topics,
            waiters=self.waiters, durability=self.durability, groups=self.coordinator,
            internal_topics=self.internal_topics, load=load_coordinators)
        self.loader: CoordinatorLoader | None = None  # once start_loading() ran
        self.security = BrokerSecurity(config, self.data_dir)
        # AlterClientQuotas' store, and what measures requests against it (dispatch asks it).
        self.client_quotas = ClientQuotaStore(self.data_dir)
        self.quota_manager = ClientQuotaManager(self.client_quotas)
        self.listeners: list = []  # kwire.broker.listeners.Listener, filled in when the server binds them
        self._closed = False

    def _load_cluster_id(self) -> str:
        path = self.data_dir / META_DIR / "cluster.id"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            cid = new_cluster_id()
            atomic_write(path, cid.encode() + b"\n")
            return cid
        cid = data.strip()
        # Clients see the id in Metadata and DescribeCluster (a nullable string there): any
        # printable ASCII word will do, but nothing else is taken as one.
        if not cid or len(cid) > 255 or not all(0x21 <= b <= 0x7E for b in cid):
            raise KafkaStorageError(
                f"{path}: not a cluster id ({data[:40]!r}); restore the file, or delete it to give this "
                "data directory a new id (clients that saw the old one may then refuse this broker)")
        return cid.decode("ascii")

    def _reconcile_partitions(self) -> None:
        """Make the logs match the registry after a crash between the two (create or delete).

        With no topic list on disk at all, directories of partitions are not leftovers of a
        deletion (that leaves the list without the topic) but what a lost list described: the
        topics are rebuilt from them instead of removed."""
        have = set(self.logs.partitions())
        if not self.topics.stored:
            for name in sorted({t for t, _ in have} - set(self.topics.names(internal=True))):
                count = 1 + max(p for t, p in have if t == name)
                logger.warning("%s is missing: topic %s rebuilt from its partitions' directories (%d partitions, "
                               "a new topic id, no config overrides)", self.topics.path, name, count)
                self.topics.add(name, count)
        for name in self.topics.names():
            info = self.topics.get(name)  # (internal topics' logs are created on first use)
            for p in range(info.partitions):
                if (name, p) not in have:
                    logger.warning("partition %s-%d was missing its log; created it empty", name, p)
                    self.logs.create_partition(name, p, self.log_config_for(info), exist_ok=True)
        for name in {t for t, _ in have} - set(self.topics.names(internal=True)):
            logger.warning("log directories of %s have no topic metadata; removing them", name)
            self.logs.delete_topic(name)

    def start_loading(self, *, post: Callable[[Callable[[], None]], None] | None = None,
                      executor: Executor | None = None,
                      schedule: Callable[[Callable[[], None]], Any] | None = None,
                      requests_seen: Callable[[], int] | None = None,
                      call_later: Callable[[float, Callable[[], None]], Any] | None = None) -> CoordinatorLoader:
        """Load what the coordinators have still to load, in the background (see
        coordinator.loader); ``post`` defaults to the running loop's ``call_soon_threadsafe``,
        ``schedule`` to its ``call_soon`` (to ``post`` when ``post`` is given).  With
        ``requests_seen`` (the count of requests read, from the network layer) the background
        reads wait for the loop's first requests, on ``call_later`` (the loop's by default)."""
        if self.loader is None:
            if post is None:
                loop = asyncio.get_running_loop()
                post, schedule = loop.call_soon_threadsafe, schedule or loop.call_soon
                call_later = call_later or loop.call_later
            self.loader = CoordinatorLoader(self.coordinator, self.transactions, post=post, executor=executor,
                                            schedule=schedule, data_dir=self.logs.data_dir,
                                            call_later=call_later, requests_seen=requests_seen)
            # Posted: the server's start returns (and its caller wakes) before the load begins.
            post(self.loader.start)
        return self.loader

    def log_config_for(self, info: TopicInfo | None) -> LogConfig:
        """The topic's LogConfig: static log settings <- dynamic broker configs <- topic overrides."""
        return topic_log_config(self.config.log, self.dynamic_configs.merged(), info.configs if info else {})

    def refresh_log_configs(self, topics: list[str] | None = None) -> None:
        """Recompute the LogConfig of these topics (default: all) into their open partitions,
        after a dynamic config change: it applies from the next append or retention pass."""
        for name in self.topics.names(internal=True) if topics is None else topics:
            info = self.topics.get(name)
            if info is not None:
                self.logs.set_topic_config(name, self.log_config_for(info))

    def close(self, *, clean: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.loader is not None:
                self.loader.close()  # before the logs it reads close
            self.transactions.close()
            self.consumer_groups.close()
            self.streams_groups.close()
            self.coordinator.close()
            self.producer_ids.close()
        finally:
            self.logs.close(clean=clean)
