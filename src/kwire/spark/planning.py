"""Offset arithmetic for planning: which offset ranges become Spark tasks.

Pure functions, no broker: the readers (``reader.py``) look offsets up and hand them here.

* ``rate_limit``: ``maxOffsetsPerTrigger`` split across partitions by their backlog.
* ``ranges_between``: a micro-batch's start and end offsets -> ranges, and what looks like lost
  data (a partition gone, offsets gone backwards, a new partition not starting at 0).
* ``split_ranges``: one range per topic-partition, large ones cut for ``minPartitions`` and
  ``maxRecordsPerPartition``.

Offsets travel through Spark's checkpoints in the Kafka connector's JSON layout,
``{"topic": {"0": 42, "1": 7}}`` (``to_json``/``from_json``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from kwire.client import TopicPartition

__all__ = ["Offsets", "OffsetRange", "from_json", "rate_limit", "ranges_between", "split_ranges", "to_json"]

Offsets = dict[TopicPartition, int]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task: the records of ``topic``-``partition`` from ``start`` up to ``end`` (excluded)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Offsets as Spark's Kafka source checkpoints them: topic -> partition (as text) -> offset."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int) -> Offsets:
    """End offsets that take at most ``limit`` records past ``start``, shared by backlog.

    While the limit allows, every partition with a backlog gets one offset, so that none waits
    for the big ones to drain; the rest of the limit is shared in proportion to the backlogs
    (rounded down, the offsets left by rounding going to the largest remainders).  Below one
    offset per partition, the partitions with the largest backlogs get one each.  Unlike Spark's
    connector, whose rounding up of small shares can overshoot the limit, the sum never exceeds
    ``limit``.  Partitions absent from ``start`` end where they start: at their ``latest``.
    """
    backlog = {tp: latest[tp] - start[tp] for tp in latest if tp in start and latest[tp] > start[tp]}
    total = sum(backlog.values())
    end = dict(latest)
    if total <= limit:
        return end
    if limit < len(backlog):
        granted = dict.fromkeys(backlog, 0)
        for tp in _largest_first(backlog, limit):
            granted[tp] = 1
    else:
        rest, rest_total = limit - len(backlog), total - len(backlog)
        shares = {tp: rest * (size - 1) / rest_total for tp, size in backlog.items()}
        granted = {tp: 1 + math.floor(share) for tp, share in shares.items()}
        left = limit - sum(granted.values())
        for tp in sorted(backlog, key=lambda tp: (-(shares[tp] % 1), tp))[:left]:
            granted[tp] += 1
    for tp, n in granted.items():
        end[tp] = start[tp] + min(n, backlog[tp])
    return end


def _largest_first(backlog: Mapping[TopicPartition, int], n: int) -> list[TopicPartition]:
    """The ``n`` partitions with the largest backlog (ties by name)."""
    return heapq.nsmallest(n, backlog, key=lambda tp: (-backlog[tp], tp))


def ranges_between(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                   new_partition_start: Mapping[TopicPartition, int]) -> tuple[list[OffsetRange], list[str]]:
    """The ranges of a micro-batch, and a description of each sign of lost data.

    Partitions in ``end`` but not ``start`` appeared since (new topics of a pattern, added
    partitions): they start at ``new_partition_start`` (their earliest offset); one that does
    not start at 0 lost records before the query saw it.  A partition in ``start`` but not in
    ``end`` is gone; an end before its start means the topic was deleted and created again.
    """
    ranges: list[OffsetRange] = []
    problems: list[str] = []
    for tp in sorted(end):
        until = end[tp]
        if tp in start:
            since = start[tp]
        else:
            since = new_partition_start.get(tp, 0)
            if since > 0:
                problems.append(f"new partition {tp} starts at offset {since}, not 0: offsets 0 to {since - 1} "
                                "were deleted before the query read them")
        if until < since:
            problems.append(f"partition {tp}: the end offset {until} is before the start offset {since} "
                            "(was the topic deleted and created again?): offsets "
                            f"{until} to {since - 1} would be read twice or not at all; skipping the partition")
            continue
        if until > since:
            ranges.append(OffsetRange(tp.topic, tp.partition, since, until))
    for tp in sorted(set(start) - set(end)):
        problems.append(f"partition {tp} is gone (the topic was deleted?): records after offset {start[tp]} "
                        "may never have been read")
    return ranges, problems


def split_ranges(ranges: Iterable[OffsetRange], *, min_partitions: int | None = None,
                 max_records: int | None = None) -> list[OffsetRange]:
    """Tasks for ``ranges``: empty ones dropped; with ``min_partitions``, ranges larger than
    their fair share cut so that there are at least that many tasks (when there are that many
    records), each range's pieces proportional to its size; with ``max_records``, no task
    longer than that."""
    todo = [r for r in ranges if r.size > 0]
    if min_partitions is not None and len(todo) < min_partitions:
        total = sum(r.size for r in todo)
        todo = [piece for r in todo
                for piece in _cut(r, min(r.size, math.ceil(r.size * min_partitions / total)))]
    if max_records is not None:
        todo = [piece for r in todo for piece in _cut(r, math.ceil(r.size / max_records))]
    return todo


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` contiguous pieces whose sizes differ by at most one."""
    if parts <= 1:
        return [r]
    size, extra = divmod(r.size, parts)
    pieces, at = [], r.start
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        pieces.append(OffsetRange(r.topic, r.partition, at, at + n))
        at += n
    return pieces

