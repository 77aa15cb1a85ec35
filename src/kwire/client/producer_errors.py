"""Errors the producer gives its records and callers, beside the broker's codes and the client's."""

from __future__ import annotations

from kwire.protocol.errors import InvalidProducerEpochError, MessageTooLargeError

from .errors import ClientError, ClientTimeoutError
from .types import TopicPartition

__all__ = ["DeliveryTimeoutError", "InvalidPartitionError", "ProducerFencedError", "RecordTooLargeError"]


class RecordTooLargeError(MessageTooLargeError):
    """A record too big to send at all (``max.request.size`` or ``buffer.memory``), refused before
    it is queued.  A subclass of the broker's MESSAGE_TOO_LARGE, as Java's RecordTooLargeException."""


class DeliveryTimeoutError(ClientTimeoutError):
    """Records not delivered within ``delivery.timeout.ms`` of their batch's creation."""

    retriable = False  # the producer already retried for as long as it was allowed to

    def __init__(self, tp: TopicPartition, count: int, timeout_ms: int, last_error: BaseException | None = None):
        self.topic_partition = tp
        message = (f"{count} record(s) for {tp} expired: not delivered within delivery.timeout.ms "
                   f"({timeout_ms} ms)")
        if last_error is not None:
            message += f"; last error: {last_error}"
        super().__init__(message)


class InvalidPartitionError(ClientError, ValueError):
    """A record given a partition its topic does not have."""


class ProducerFencedError(InvalidProducerEpochError):
    """The broker refused this producer's current epoch: another producer with its id took over."""
