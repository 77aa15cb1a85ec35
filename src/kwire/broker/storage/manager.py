"""All partition logs of one data directory (Kafka's LogManager, one log dir).

Layout::

    data_dir/
        .lock                   flock'ed while a LogManager owns the directory
        .kafka_cleanshutdown    present only between a clean close() and the next open
        <topic>-<n>/            one PartitionLog each
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

from kwire.protocol.errors import (
    InvalidPartitionsError,
    InvalidTopicException,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from ._files import DELETED_SUFFIX, fsync_dir
from .config import LogConfig
from .log import PartitionLog, parse_partition_dir
from .page_cache import PageCacheLimit, page_cache_control_available

if TYPE_CHECKING:
    from .cleaner import CleanerConfig, LogCleaner

__all__ = ["LogManager", "CLEAN_SHUTDOWN_FILE", "validate_topic_name"]

logger = logging.getLogger("kwire.broker.storage")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
_LOCK_FILE = ".lock"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def validate_topic_name(topic: str) -> None:
    """Kafka's rules: 1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if topic in (".", "..") or not _LEGAL_TOPIC.match(topic):
        raise InvalidTopicException(f"illegal topic name {topic!r}")


class LogManager:
    """Opens every ``<topic>-<n>`` directory under ``data_dir`` (recovering them if the last
    shutdown was not clean) and owns them until ``close()``.

    Partition configs are not persisted here: ``create_partition`` takes an optional override
    and reloaded partitions get ``config`` (or ``configs[topic]`` if given) — the broker's
    metadata layer owns per-topic settings.

    ``lazy_topics``: after a clean shutdown, the partitions of these topics (the internal ones,
    up to 100 of them) are opened on first use (``get``) rather than here, so they don't cost
    the broker's start: nothing touched them since their clean close, so opening one later with
    ``clean_shutdown`` is as good as now.  After a crash they are recovered here with the rest.
    """

    def __init__(self, data_dir: Path, config: LogConfig | None = None, *,
                 configs: dict[str, LogConfig] | None = None, page_cache_bytes: int = -1,
                 lazy_topics: Collection[str] = ()):
        self.data_dir = Path(data_dir)
        self.config = config or LogConfig()
        # -1: leave the page cache to the kernel.  Where the platform can't (not Linux), too.
        self.page_cache = (PageCacheLimit(page_cache_bytes)
                           if page_cache_bytes >= 0 and page_cache_control_available() else None)
        self._topic_configs = dict(configs or {})
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lazy_topics = frozenset(lazy_topics)
        self._unopened: dict[tuple[str, int], Path] = {}  # lazy partitions not opened yet
        self.load_findings: dict[tuple[str, int], list[str]] = {}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.data_dir / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise KafkaStorageError(f"{self.data_dir} is in use by another process") from None
        try:
            self._open()
        except BaseException:
            self._close_logs(flush=False)
            os.close(self._lock_fd)
            raise
        self._closed = False
        self.cleaner: LogCleaner | None = None  # once start_cleaner() ran

    def start_cleaner(self, config: CleanerConfig | None = None, *,
                      clock: Callable[[], int] | None = None) -> LogCleaner:
        """Start the log cleaner's threads (Kafka starts its LogCleaner with the LogManager) for
        the compacted partitions; ``config`` a ``CleanerConfig``.  Returns the ``LogCleaner``
        (stopped by ``close()``).  With ``config.enable`` false nothing runs, but the returned
        cleaner's ``clean_once`` still works."""
        from .cleaner import LogCleaner  # cleaner.py imports this module's types

        with self._lock:
            self._check_open()
            if self.cleaner is None:
                self.cleaner = LogCleaner(self, config) if clock is None else LogCleaner(self, config, clock=clock)
            self.cleaner.start()
            return self.cleaner

    def stop_cleaner(self) -> None:
        """Stop the cleaner's threads; a clean under way is aborted, or finishes its swap."""
        cleaner = self.cleaner
        if cleaner is not None:
            cleaner.stop()

    def _open(self) -> None:
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
        for path in sorted(self.data_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith((DELETED_SUFFIX, ".tmp")):
                logger.warning("removing leftover directory %s", path)
                shutil.rmtree(path)
                continue
            parsed = parse_partition_dir(path.name)
            if parsed is None:
                continue
            if self.clean_shutdown and parsed[0] in self._lazy_topics:
                self._unopened[parsed] = path
                continue
            self._open_log(parsed, path)
        # Only now, with everything loaded: from here on a crash must trigger recovery.
        if self.clean_shutdown:
            marker.unlink()
            fsync_dir(self.data_dir)

    def _open_log(self, key: tuple[str, int], path: Path) -> PartitionLog:
        log = PartitionLog(path, self._config_for(key[0]), clean_shutdown=self.clean_shutdown,
                           page_cache=self.page_cache)
        self._logs[key] = log
        if log.load_findings:
            self.load_findings[key] = log.load_findings
        return log

    def _open_lazy(self, key: tuple[str, int]) -> PartitionLog | None:
        """The log of a lazy partition, opened now (under the lock); None if it is not one."""
        path = self._unopened.pop(key, None)
        return None if path is None else self._open_log(key, path)

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.config)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log manager of {self.data_dir} is closed")

    # -- partitions -------------------------------------------------------------------------
    def create_partition(self, topic: str, partition: int, config: LogConfig | None = None, *,
                         exist_ok: bool = False) -> PartitionLog:
        """Create (or with ``exist_ok`` return) the log of ``topic``-``partition``."""
        validate_topic_name(topic)
        if partition < 0:
            raise InvalidPartitionsError(f"partition {partition} of {topic!r} is negative")
        with self._lock:
            self._check_open()
            key = (topic, partition)
            self._open_lazy(key)
            if key in self._logs:
                if exist_ok:
                    return self._logs[key]
                raise TopicAlreadyExistsError(f"{topic}-{partition} already exists")
            if config is not None:
                self._topic_configs[topic] = config
            path = self.data_dir / f"{topic}-{partition}"
            log = PartitionLog(path, self._config_for(topic), clean_shutdown=True, page_cache=self.page_cache)
            fsync_dir(self.data_dir)
            self._logs[key] = log
            return log

    def set_topic_config(self, topic: str, config: LogConfig) -> None:
        """Give ``topic``'s open partitions (and those created later) ``config``: a dynamic config
        change, read from the next append, roll or retention pass on."""
        with self._lock:
            self._check_open()
            self._topic_configs[topic] = config
            for (name, _), log in self._logs.items():
                if name == topic:
                    log.set_config(config)  # under the partition's lock

    def get(self, topic: str, partition: int) -> PartitionLog:
        with self._lock:
            self._check_open()
            try:
                return self._logs[(topic, partition)]
            except KeyError:
                log = self._open_lazy((topic, partition))
                if log is None:
                    raise UnknownTopicOrPartitionError(f"{topic}-{partition}") from None
                return log

    def partitions(self) -> list[tuple[str, int]]:
        """Every partition, opened or not yet (``lazy_topics``)."""
        with self._lock:
            return sorted([*self._logs, *self._unopened])

    def opened(self, topic: str, partition: int) -> bool:
        """Whether the partition's log is open (a lazy one may still wait for its first use)."""
        with self._lock:
            return (topic, partition) in self._logs

    def topics(self) -> list[str]:
        with self._lock:
            return sorted({t for t, _ in [*self._logs, *self._unopened]})

    def delete_topic(self, topic: str) -> list[int]:
        """Close and remove every partition of ``topic``; returns their numbers.

        Each directory is first renamed to ``<dir>.<uuid>.deleted`` (atomic, and the name can't
        be loaded as a partition), so a crash mid-removal leaves a directory the next open
        removes instead of a half-deleted partition.
        """
        with self._lock:
            self._check_open()
            for key in [k for k in self._unopened if k[0] == topic]:
                self._open_lazy(key)
            numbers = sorted(n for t, n in self._logs if t == topic)
            if not numbers:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            doomed = []
            for n in numbers:
                log = self._logs.pop((topic, n))
                log.close_without_flush()
                target = log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{DELETED_SUFFIX}")
                os.replace(log.dir, target)
                doomed.append(target)
            fsync_dir(self.data_dir)
            self._topic_configs.pop(topic, None)
            for path in doomed:
                shutil.rmtree(path)
            return numbers

    # -- maintenance ------------------------------------------------------------------------
    def flush_all(self) -> None:
        with self._lock:
            self._check_open()
            for log in self._logs.values():
                log.flush()

    def apply_retention_all(self, now_ms: int | None = None) -> dict[tuple[str, int], list[int]]:
        """Run retention on every partition; returns the deleted segment base offsets by partition."""
        with self._lock:
            self._check_open()
            deleted = {key: log.apply_retention(now_ms) for key, log in self._logs.items()}
            return {key: bases for key, bases in deleted.items() if bases}

    def _close_logs(self, *, flush: bool) -> OSError | None:
        """Close every log; the first I/O error, if closing (flushing) one failed.  A log that
        fails does not keep the others open: each is closed, and a failed flush is what the next
        start's recovery is for (Kafka's shutdown does the same with an offline log dir)."""
        failed: OSError | None = None
        for (topic, partition), log in self._logs.items():
            try:
                if flush:
                    log.close()
                else:
                    log.close_without_flush()
            except OSError as exc:
                logger.error("%s-%d: closing its log failed: %s; its unflushed tail is recovered at the next "
                             "start", topic, partition, exc)
                failed = failed or exc
        return failed

    def close(self, *, clean: bool = True) -> None:
        """Flush and close every log, then write the clean-shutdown marker.  Idempotent.

        ``clean=False`` closes the files without flushing or writing the marker (after an I/O
        error, or to simulate a crash): the next open recovers from the recovery points.
        """
        # First, and without our lock: a cleaner thread takes it to list the partitions.
        self.stop_cleaner()
        with self._lock:
            if self._closed:
                return
            if self.page_cache is not None:
                self.page_cache.close()
            try:
                if not clean:
                    self._close_logs(flush=False)
                    return
                if self._close_logs(flush=True) is not None:
                    return  # no clean-shutdown marker: the next start recovers the logs
                marker = self.data_dir / CLEAN_SHUTDOWN_FILE
                try:
                    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    fsync_dir(self.data_dir)
                except OSError as exc:  # the logs are flushed: the next start only checks them again
                    logger.error("could not write %s: %s; the next start recovers the logs", marker, exc)
            finally:
                self._closed = True
                os.close(self._lock_fd)  # releases the flock

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
