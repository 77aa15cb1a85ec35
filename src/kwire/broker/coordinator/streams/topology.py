"""A streams group's topology (KIP-1071) and what the cluster's topics make of it.

The first heartbeat of a member sends the application's topology: subtopologies, each reading
source topics (user topics) and repartition source topics (internal, written by another
subtopology), keeping state in changelog topics (internal), with copartition groups of sources
that must have equal partition counts.  ``StreamsTopology`` holds it as sent; ``configure``
resolves it against the topics that exist, as Kafka's InternalTopicManager.configureTopics does:

* a missing source topic makes the group not ready (status MISSING_SOURCE_TOPICS);
* a repartition topic without a fixed count gets the largest count of the sources of the
  subtopologies that write it; copartitioned topics all take the largest count of their group;
* a changelog topic gets as many partitions as its subtopology has tasks (its largest source);
* internal topics that do not exist yet are named for creation (MISSING_INTERNAL_TOPICS: the
  coordinator has the broker create them, and the group is ready once they exist);
* counts that disagree (copartitioned sources, an existing internal topic of another size) are
  INCORRECTLY_PARTITIONED_TOPICS.

A subtopology has one task per partition of its sources; a configured topology is the
subtopology id -> task count map the assignor works on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from kwire.protocol.errors import InvalidRequestError, StreamsInvalidTopologyError

__all__ = ["ConfiguredTopology", "InternalTopic", "StatusCode", "StreamsTopology", "Subtopology", "TopicSpec",
           "configure"]


class StatusCode(IntEnum):
    """StreamsGroupHeartbeatResponse.Status.StatusCode values (KIP-1071)."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5        # Kafka 4.2+: the initial rebalance delay holds the first assignment back


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """An internal topic as the topology declares it (partitions 0: not fixed; replication 0: default)."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicSpec, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicSpec, ...] = ()
    # Each copartition group as (source topic indexes, regex indexes, repartition source indexes).
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()

    @property
    def copartitioned_names(self) -> list[list[str]]:
        groups = []
        for sources, _regex, repartition in self.copartition_groups:
            groups.append([self.source_topics[i] for i in sources]
                          + [self.repartition_source_topics[i].name for i in repartition])
        return groups


@dataclass(frozen=True, slots=True)
class StreamsTopology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def subtopology(self, subtopology_id: str) -> Subtopology | None:
        return next((s for s in self.subtopologies if s.subtopology_id == subtopology_id), None)

    def source_topic_map(self) -> dict[str, str]:
        """Topic name -> id of the subtopology reading it, for its source and its repartition
        source topics (Kafka's StreamsTopology.sourceTopicMap): whose task a committed partition is."""
        out: dict[str, str] = {}
        for s in self.subtopologies:
            for name in (*s.source_topics, *(t.name for t in s.repartition_source_topics)):
                out[name] = s.subtopology_id
        return out

    @classmethod
    def from_request(cls, topology) -> StreamsTopology:
        """The topology of a StreamsGroupHeartbeatRequest, checked as Kafka checks it (the
        request's errors are INVALID_REQUEST, the topology's own STREAMS_INVALID_TOPOLOGY)."""
        subs = []
        seen: set[str] = set()
        for s in topology.subtopologies or ():
            if s.source_topic_regex:
                # Kafka 4.3: throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures.
                raise InvalidRequestError("Regular expressions for source topics are not supported yet.")
            sid = s.subtopology_id or ""
            if sid in seen:
                raise StreamsInvalidTopologyError(f"Subtopology {sid} is defined more than once.")
            seen.add(sid)
            changelogs = tuple(_spec(t) for t in s.state_changelog_topics or ())
            for t in changelogs:
                if t.partitions != 0:  # Kafka's throwIfInvalidTopology
                    raise StreamsInvalidTopologyError(
                        f"Changelog topic {t.name} must have an undefined partition count, but it is set to "
                        f"{t.partitions}.")
            sources = tuple(s.source_topics or ())
            repartition = tuple(_spec(t) for t in s.repartition_source_topics or ())
            groups = []
            for g in s.copartition_groups or ():
                src, rgx, rep = tuple(g.source_topics or ()), tuple(g.source_topic_regex or ()), \
                    tuple(g.repartition_source_topics or ())
                for kind, idx, bound in (("source topic", src, len(sources)), ("repartition source topic", rep,
                                                                                 len(repartition))):
                    bad = [i for i in idx if not 0 <= i < bound]
                    if bad:
                        raise StreamsInvalidTopologyError(
                            f"Copartition group of subtopology {sid} refers to {kind} index {bad[0]}, but the "
                            f"subtopology has {bound}.")
                if rgx:
                    raise InvalidRequestError("Regular expressions for source topics are not supported yet.")
                groups.append((src, rgx, rep))
            subs.append(Subtopology(sid, sources, (), changelogs, tuple(s.repartition_sink_topics or ()), repartition,
                                    tuple(groups)))
        result = cls(topology.epoch, tuple(subs))
        result._check_repartition_topics()
        return result

    def _check_repartition_topics(self) -> None:
        # A repartition source topic must be written by some subtopology: else nothing fills it
        # and its partition count can't be derived (Kafka's topology validation refuses it).
        sinks = {t for s in self.subtopologies for t in s.repartition_sink_topics}
        for s in self.subtopologies:
            for t in s.repartition_source_topics:
                if t.name not in sinks and t.partitions <= 0:
                    raise StreamsInvalidTopologyError(
                        f"Repartition source topic {t.name} of subtopology {s.subtopology_id} has no partition "
                        "count and no subtopology writes it.")


def _spec(t) -> TopicSpec:
    return TopicSpec(t.name or "", t.partitions, t.replication_factor,
                     tuple((c.key or "", c.value or "") for c in t.topic_configs or ()))


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """An internal topic to create: name, partitions, replication factor (0: default), configs."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ConfiguredTopology:
    """What ``configure`` made of a topology: task counts when ready, else why not."""

    tasks: Mapping[str, int]                               # subtopology id -> task count (ready only)
    statuses: tuple[tuple[StatusCode, str], ...] = ()
    to_create: tuple[InternalTopic, ...] = ()
    partition_counts: Mapping[str, int] = field(default_factory=dict)  # every topic it names -> count

    @property
    def ready(self) -> bool:
        return not self.statuses


def configure(topology: StreamsTopology, partitions_of: Callable[[str], int | None]) -> ConfiguredTopology:
    """Resolve ``topology`` against the cluster; ``partitions_of(name)``: a topic's partition
    count, None when it does not exist."""
    subs = topology.subtopologies
    missing_sources = sorted({t for s in subs for t in s.source_topics if partitions_of(t) is None})
    if missing_sources:
        return ConfiguredTopology({}, ((StatusCode.MISSING_SOURCE_TOPICS,
                                        f"Source topics {', '.join(missing_sources)} are missing."),))
    counts: dict[str, int] = {t: partitions_of(t) or 0 for s in subs for t in s.source_topics}
    declared = {t.name: t for s in subs for t in s.repartition_source_topics}
    for name, spec in declared.items():
        if spec.partitions > 0:
            counts[name] = spec.partitions
    writers = {}
    for s in subs:
        for t in s.repartition_sink_topics:
            writers.setdefault(t, []).append(s)
    # Repartition topics without a count: the largest source count of their writers, repeated
    # until nothing changes (a chain of repartitions resolves one link per pass).
    for _ in range(len(declared) + 1):
        changed = False
        for name in declared:
            if name in counts:
                continue
            known = [counts[t] for w in writers.get(name, ()) for t in _sources(w) if t in counts]
            if known:
                counts[name] = max(known)
                changed = True
        if not changed:
            break
    unresolved = sorted(n for n in declared if n not in counts)
    if unresolved:
        return ConfiguredTopology({}, ((StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
                                        f"Partition counts of repartition topics {', '.join(unresolved)} cannot be "
                                        "derived."),))
    wrong: list[str] = []
    for s in subs:
        for group in s.copartitioned_names:
            fixed = [n for n in group if n in s.source_topics or declared[n].partitions > 0]
            size = max((counts[n] for n in (fixed or group)), default=0)
            if any(counts[n] != size for n in fixed):
                # Kafka's words, a Java map per copartition group: [{bar=3, foo=6}]
                wrong.append("{" + ", ".join(f"{n}={counts[n]}" for n in sorted(fixed)) + "}")
            for n in group:
                if n not in fixed:
                    counts[n] = size
    if wrong:
        return ConfiguredTopology({}, ((StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
                                        "Following topics do not have the same number of partitions: "
                                        f"[{', '.join(wrong)}]"),))
    tasks = {s.subtopology_id: max((counts[t] for t in _sources(s)), default=0) for s in subs}
    internal: dict[str, InternalTopic] = {}
    for s in subs:
        for t in s.repartition_source_topics:
            internal[t.name] = InternalTopic(t.name, counts[t.name], t.replication_factor, t.configs)
        for t in s.state_changelog_topics:
            internal[t.name] = InternalTopic(t.name, tasks[s.subtopology_id], t.replication_factor, t.configs)
    statuses: list[tuple[StatusCode, str]] = []
    misfits = sorted(n for n, t in internal.items() if partitions_of(n) not in (None, t.partitions))
    if misfits:
        statuses.append((StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
                         f"Internal topics {', '.join(misfits)} have a partition count other than the topology's."))
    to_create = tuple(t for n, t in sorted(internal.items()) if partitions_of(n) is None)
    if to_create:
        statuses.append((StatusCode.MISSING_INTERNAL_TOPICS,
                         f"Internal topics are missing: {', '.join(t.name for t in to_create)}"))
    counts.update({n: t.partitions for n, t in internal.items()})
    return ConfiguredTopology(tasks if not statuses else {}, tuple(statuses), to_create, counts)


def _sources(s: Subtopology) -> list[str]:
    return list(s.source_topics) + [t.name for t in s.repartition_source_topics]
