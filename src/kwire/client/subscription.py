"""What a consumer reads: its subscription (topics or a pattern) or manual assignment, and per
assigned partition the position, a pending reset and whether it is paused.

The position is the offset of the next record to hand to the application (what a commit
stores).  ``None`` means not known yet: the consumer looks up the committed offset, or resets
per ``auto.offset.reset``.  Every change of position bumps the partition's ``seek_epoch`` so
fetches sent for an older position are recognised and dropped when they come back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import IllegalStateError
from .types import TopicPartition

__all__ = ["EARLIEST", "LATEST", "NONE_RESET", "PartitionState", "SubscriptionState"]

EARLIEST = "earliest"
LATEST = "latest"
NONE_RESET = "none"


class PartitionState:
    """One assigned partition, as the consumer tracks it."""

    __slots__ = ("tp", "position", "leader_epoch", "reset", "reset_reason", "paused", "seek_epoch",
                 "high_watermark", "last_stable_offset", "log_start_offset")

    def __init__(self, tp: TopicPartition):
        self.tp = tp
        self.position: int | None = None
        self.leader_epoch = -1          # of the last record handed out (committed with the offset)
        # EARLIEST or LATEST: a reset asked for and not done yet; NONE_RESET: the position is lost
        # (out of range with auto.offset.reset=none) and only a seek() brings the partition back.
        self.reset: str | None = None
        self.reset_reason = ""
        self.paused = False
        self.seek_epoch = 0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1

    @property
    def has_position(self) -> bool:
        return self.position is not None and self.reset is None

    def seek(self, offset: int, leader_epoch: int = -1) -> None:
        self.position = offset
        self.leader_epoch = leader_epoch
        self.reset = None
        self.seek_epoch += 1

    def request_reset(self, strategy: str, reason: str = "") -> None:
        self.reset = strategy
        self.reset_reason = reason
        self.seek_epoch += 1

    def __repr__(self) -> str:
        return (f"PartitionState({self.tp}, position={self.position}, reset={self.reset}, "
                f"paused={self.paused})")


class SubscriptionState:
    """Subscribed topics or pattern, or a manual assignment; and the assigned partitions' states.

    A consumer is in one mode at a time, as in Kafka: subscribed to topics, subscribed to a
    pattern, manually assigned, or none.  Switching needs ``unsubscribe()`` first.
    """

    NONE, TOPICS, PATTERN, MANUAL = "none", "topics", "pattern", "manual"

    def __init__(self) -> None:
        self.mode = self.NONE
        self.topics: frozenset[str] = frozenset()     # topics subscribed (or matched by the pattern)
        self.pattern: re.Pattern[str] | None = None
        self.assignment: dict[TopicPartition, PartitionState] = {}
        # Bumped whenever the assignment changes, so background work can tell its snapshot is old.
        self.assignment_epoch = 0

    # -- subscribing ------------------------------------------------------------------------------
    def _enter(self, mode: str) -> None:
        if self.mode not in (self.NONE, mode):
            raise IllegalStateError(
                f"the consumer is already {self._describe()}; call unsubscribe() before switching to "
                + {self.TOPICS: "subscribe(topics)", self.PATTERN: "subscribe(pattern=...)",
                   self.MANUAL: "assign(partitions)"}[mode])
        self.mode = mode

    def _describe(self) -> str:
        return {self.TOPICS: "subscribed to topics", self.PATTERN: "subscribed to a pattern",
                self.MANUAL: "manually assigned partitions"}.get(self.mode, "idle")

    def subscribe(self, topics: Iterable[str]) -> bool:
        """Subscribe to exactly these topics; True if the set changed."""
        topics = frozenset(topics)
        if not topics:
            raise ValueError("subscribe() needs at least one topic (use unsubscribe() to stop)")
        for topic in topics:
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"topic names are non-empty strings, not {topic!r}")
        self._enter(self.TOPICS)
        changed = topics != self.topics
        self.topics = topics
        return changed

    def subscribe_pattern(self, pattern: str | re.Pattern[str]) -> None:
        self._enter(self.PATTERN)
        self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern

    def match_topics(self, names: Iterable[str]) -> bool:
        """Pattern mode: set the subscribed topics to those of ``names`` the pattern matches fully;
        True if the set changed."""
        assert self.pattern is not None
        matched = frozenset(n for n in names if self.pattern.fullmatch(n))
        changed = matched != self.topics
        self.topics = matched
        return changed

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._enter(self.MANUAL)
        self.set_assignment(partitions)

    def unsubscribe(self) -> None:
        self.mode = self.NONE
        self.topics = frozenset()
        self.pattern = None
        self.set_assignment(())

    @property
    def group_managed(self) -> bool:
        """Whether the group assigns the partitions (subscribed to topics or a pattern)."""
        return self.mode in (self.TOPICS, self.PATTERN)

    # -- assignment -------------------------------------------------------------------------------
    def set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Make ``partitions`` the assignment; partitions kept keep their state (position, paused)."""
        fresh: dict[TopicPartition, PartitionState] = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            fresh[tp] = self.assignment.get(tp) or PartitionState(tp)
        self.assignment = fresh
        self.assignment_epoch += 1

    def remove(self, partitions: Iterable[TopicPartition]) -> None:
        gone = set(partitions)
        self.set_assignment(tp for tp in self.assignment if tp not in gone)

    def state(self, tp: TopicPartition) -> PartitionState:
        """The state of an assigned partition; IllegalStateError naming it when it is not assigned."""
        state = self.assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"partition {TopicPartition(*tp)} is not assigned to this consumer")
        return state

    def fetchable(self) -> list[PartitionState]:
        """Assigned partitions that may be fetched now: not paused, position known."""
        return [s for s in self.assignment.values() if not s.paused and s.position is not None and s.reset is None]

    def missing_positions(self) -> list[PartitionState]:
        return [s for s in self.assignment.values() if s.position is None or s.reset is not None]

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.assignment.items() if s.paused}

    def consumed_offsets(self) -> dict[TopicPartition, tuple[int, int]]:
        """(position, leader epoch) of every assigned partition with a known position."""
        return {tp: (s.position, s.leader_epoch) for tp, s in self.assignment.items()
                if s.position is not None and s.reset is None}
