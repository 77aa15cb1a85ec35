"""Errors the consumer raises to the application, beside the broker's error codes and the client's."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import ClientError
from .types import TopicPartition

__all__ = ["CommitFailedError", "FatalGroupError", "NoOffsetForPartitionError", "StaleCommitError"]


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in sorted(partitions))


class StaleCommitError(ClientError):
    """A commit for partitions this consumer does not own right now; nothing was committed.

    The usual cause: the consumer lost the partitions in a rebalance while it was processing a
    batch, and another member owns them now.  Committing the old positions would move that
    member's progress backwards, so the commit is refused before it reaches the broker.
    """

    def __init__(self, message: str, partitions: Iterable[TopicPartition]):
        super().__init__(message)
        self.partitions = sorted(partitions)


class CommitFailedError(ClientError):
    """The group coordinator refused a commit because the group rebalanced under this consumer.

    Its generation (or member id) is no longer current: the partitions may belong to another
    member now.  Poll to rejoin the group, then commit what the new assignment covers.
    ``error_code`` is the coordinator's (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, ...).
    """

    def __init__(self, message: str, error_code: int | None = None):
        super().__init__(message)
        self.error_code = error_code


class FatalGroupError(ClientError):
    """The consumer cannot take part in its group any more (fenced static member, bad config...)."""


class NoOffsetForPartitionError(ClientError):
    """A partition needs a starting offset and ``auto.offset.reset`` is ``none``."""

    def __init__(self, partitions: Iterable[TopicPartition], why: str):
        self.partitions = sorted(partitions)
        super().__init__(f"{why} for {_names(self.partitions)} and auto.offset.reset is 'none': "
                         "seek() to an offset, or set auto.offset.reset to 'earliest' or 'latest'")
