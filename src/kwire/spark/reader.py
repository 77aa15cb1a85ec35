"""The batch and streaming readers: planning on the driver, one task per offset range.

Batch (``spark.read``): ``partitions()`` resolves startingOffsets (default earliest) and
endingOffsets (default latest) for every partition of the subscription and cuts the ranges
(``minPartitions``, ``maxRecordsPerPartition``).

Streaming (``spark.readStream``): offsets are ``{"topic": {"partition": offset}}`` dicts, the
layout Spark's connector checkpoints.  ``initialOffset`` resolves startingOffsets (default
latest); ``latestOffset(start, limit)`` looks at the log ends, finds new partitions (they start
at their earliest offset), and applies the read limit (``maxOffsetsPerTrigger``, shared by
backlog); ``prepareForTriggerAvailableNow`` pins the log ends of that moment as the last target.

With ``kwire.commitGroup``, the end offsets of each finished micro-batch are committed to that
consumer group, so any lag tool shows the query's lag.  Spark calls ``commit(end)`` only when
it plans the batch after (so the last batch of a run would never be committed that way); but
``latestOffset`` is only asked once the previous batch is committed to the checkpoint, and its
``start`` is that batch's end, so the commit happens there, once per new end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .fetch import read_range, report_data_loss
from .lookup import ClusterView
from .options import OffsetSpec, SourceOptions
from .planning import OffsetRange, Offsets, from_json, ranges_between, rate_limit, split_ranges, to_json

__all__ = ["KwireBatchReader", "KwireStreamReader"]


def _read(partition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The rows of one planned range.  A plan with no ranges (an empty topic, or starting and
    ending offsets equal everywhere) reaches here as PySpark's placeholder InputPartition(None),
    which holds no rows."""
    if not isinstance(partition, OffsetRange):
        return iter(())
    return read_range(partition, options)

class KwireBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        with ClusterView(options) as view:
            tps = view.partitions()
            start = view.resolve(options.starting or OffsetSpec("earliest", "startingOffsets"), tps)
            end = view.resolve(options.ending or OffsetSpec("latest", "endingOffsets"), tps, ending=True)
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise ValueError(f"topic {tp.topic} partition {tp.partition}: the starting offset {start[tp]} is after "
                                 f"the ending offset {end[tp]}; check startingOffsets and endingOffsets")
            ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
        return split_ranges(ranges, min_partitions=options.min_partitions,
                            max_records=options.max_records_per_partition)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)


class KwireStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Lives in one driver-side Python process for the whole query: it keeps its admin client."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._view: ClusterView | None = None
        self._target: Offsets | None = None      # Trigger.AvailableNow: the ends to stop at
        self._latest: Offsets | None = None      # log ends last seen, for progress reports
        self._initial: Offsets | None = None     # this run's initialOffset (not a batch end)
        self._committed: Offsets | None = None   # last offsets committed to kwire.commitGroup

    def __getstate__(self) -> dict:
        # Pickled to the executors for read(): clients and driver state stay behind.
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"])

    @property
    def view(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(self.options)
        return self._view

    def initialOffset(self) -> dict:
        # Spark asks more than once as a query starts (twice with Trigger.AvailableNow): the
        # first answer stands, so "latest" cannot move between the asks, and the broker is
        # asked once.
        if self._initial is None:
            view = self.view
            tps = view.partitions()
            self._initial = view.resolve(self.options.starting or OffsetSpec("latest", "startingOffsets"), tps)
        return to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        view = self.view
        self._target = view.latest(view.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        self._maybe_commit_group(begin)
        view = self.view
        latest = dict(self._target) if self._target is not None else view.latest(view.partitions())
        self._latest = latest
        # Partitions new since the start count from their earliest offset, for the limit as for
        # planning.  Partitions gone since are left out of the end: planning reports them, as
        # it reports an end below the start (a topic deleted and created again).
        new = [tp for tp in latest if tp not in begin]
        base = {**{tp: begin[tp] for tp in latest if tp in begin}, **view.earliest(new)}
        end = rate_limit(base, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else latest
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = from_json(start), from_json(end)
        new = [tp for tp in until if tp not in begin]
        ranges, problems = ranges_between(begin, until, self.view.earliest(new) if new else {})
        for problem in problems:
            report_data_loss(self.options, problem)
        return split_ranges(ranges, min_partitions=self.options.min_partitions,
                            max_records=self.options.max_records_per_partition)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)

    def commit(self, end: dict) -> None:
        self._maybe_commit_group(from_json(end))

    def _maybe_commit_group(self, offsets: Offsets) -> None:
        """Commit a finished batch's end offsets to kwire.commitGroup, once each."""
        group = self.options.commit_group
        if group is None or not offsets or offsets == self._initial:
            return
        done = self._committed or {}
        if all(done.get(tp, -1) >= offset for tp, offset in offsets.items()):
            return  # already committed (Spark's commit() comes after latestOffset saw the same end)
        self.view.commit_group(group, offsets)
        self._committed = dict(offsets)

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None
