"""The driver's questions to the cluster, through kwire's admin client: which partitions the
subscription covers, their earliest, latest and by-time offsets, where a spec puts each one,
and the group commits of ``kwire.commitGroup``.

Used while Spark plans (batch ``partitions()``, streaming ``initialOffset``/``latestOffset``/
``partitions``); nothing here runs on executors.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

from kwire.client import Admin, Consumer, TopicPartition
from kwire.settings import ConfigError

from .options import EARLIEST, LATEST, OffsetSpec, SourceOptions
from .planning import Offsets

__all__ = ["ClusterView"]

logger = logging.getLogger("kwire.spark")


class ClusterView:
    """One admin connection for a reader's planning; ``close()`` when done (or use ``with``)."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._admin = Admin(options.admin_settings())
        self._committer: Consumer | None = None

    def close(self) -> None:
        try:
            self._admin.close()
        finally:
            if self._committer is not None:
                self._committer.close()
                self._committer = None

    def __enter__(self) -> ClusterView:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- partitions -------------------------------------------------------------------------------
    def partitions(self) -> list[TopicPartition]:
        """The subscription's partitions now: topics that do not exist (yet) have none."""
        sub = self.options.subscription
        if sub.kind == "subscribePattern":
            pattern = re.compile(sub.pattern)
            topics = {name: info for name, info in self._admin.list_topics().items() if pattern.fullmatch(name)}
        else:
            names = sub.topics if sub.kind == "subscribe" else sorted({tp.topic for tp in sub.partitions})
            topics = {name: info for name, info in self._admin.metadata(names).topics.items() if not info.error_code}
        found = sorted(TopicPartition(name, p) for name, info in topics.items() for p in info.partitions)
        if sub.kind != "assign":
            return found
        missing = sorted(set(sub.partitions) - set(found))
        if missing:
            raise ConfigError(f"option assign names partitions that do not exist: {', '.join(map(str, missing))}")
        return list(sub.partitions)

    # -- offsets ----------------------------------------------------------------------------------
    def _list(self, specs: Mapping[TopicPartition, int | str]) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        found = self._admin.list_offsets(specs, isolation_level=self.options.isolation_level)
        return {tp: answer.offset for tp, answer in found.items()}

    def earliest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        return self._list(dict.fromkeys(partitions, "earliest"))

    def latest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        """Log end offsets (the last stable offsets with kafka.isolation.level=read_committed)."""
        return self._list(dict.fromkeys(partitions, "latest"))

    def resolve(self, spec: OffsetSpec, partitions: list[TopicPartition], *, ending: bool = False) -> Offsets:
        """Each partition's offset for ``spec`` (startingOffsets or endingOffsets and their
        timestamp forms), -2/-1 and times turned into offsets."""
        if spec.kind in ("earliest", "latest"):
            return self.earliest(partitions) if spec.kind == "earliest" else self.latest(partitions)
        given = spec.values
        if spec.kind in ("offsets", "timestamps"):
            missing = [tp for tp in partitions if tp not in given]
            extra = [tp for tp in given if tp not in set(partitions)]
            if missing or extra:
                # Spark's rule: specific offsets name every partition read, and only those.
                parts = []
                if missing:
                    parts.append(f"it does not name {', '.join(map(str, missing))}")
                if extra:
                    parts.append(f"it names {', '.join(map(str, extra))}, which the query does not read")
                raise ConfigError(f"option {spec.option} must give every partition the query reads "
                                  f"({self.options.subscription.describe()}): {'; '.join(parts)}")
        if spec.kind == "offsets":
            out = {tp: given[tp] for tp in partitions}
            out.update(self.earliest([tp for tp in partitions if given[tp] == EARLIEST]))
            out.update(self.latest([tp for tp in partitions if given[tp] == LATEST]))
            return out
        times = given if spec.kind == "timestamps" else dict.fromkeys(partitions, spec.timestamp)
        found = self._admin.list_offsets({tp: times[tp] for tp in partitions},
                                         isolation_level=self.options.isolation_level)
        out, unmatched = {}, []
        for tp in partitions:
            offset = found[tp].offset
            if offset >= 0:
                out[tp] = offset
            else:
                unmatched.append(tp)
        if unmatched:
            # No record at or after the time.  Spark: an error for a start (unless the strategy
            # says latest), the log end for an end.
            if not ending and self.options.timestamp_strategy == "error":
                raise ConfigError(f"option {spec.option}: no record of {', '.join(map(str, unmatched))} has a "
                                  f"timestamp at or after {times[unmatched[0]]}; set "
                                  "startingOffsetsByTimestampStrategy=latest to start at the log end instead")
            out.update(self.latest(unmatched))
        return out

    # -- kwire.commitGroup ------------------------------------------------------------------------
    def commit_group(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) to consumer group ``group``,
        as a consumer outside the group's membership would (``assign`` then commit)."""
        if not offsets:
            return
        if self._committer is None:
            settings = {**self.options.admin_settings(), "group.id": group, "enable.auto.commit": False}
            self._committer = Consumer(settings)
        self._committer.assign(list(offsets))
        self._committer.commit(dict(offsets))
