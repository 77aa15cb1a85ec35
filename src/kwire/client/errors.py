"""Errors the client raises itself, beside the broker's error codes (``kwire.protocol.errors``).

Every broker error code is a ``KafkaError`` subclass with Kafka's ``retriable`` flag; the client
adds the failures that happen on its side of the wire.  ``is_retriable`` is the one test the retry
loops use, so a connection lost and NOT_LEADER_OR_FOLLOWER are treated alike.
"""

from __future__ import annotations

from kwire.protocol.errors import KafkaError

__all__ = [
    "BrokerConnectionError",
    "ClientError",
    "ClientTimeoutError",
    "IllegalStateError",
    "NoBrokersAvailableError",
    "UnsupportedApiError",
    "is_retriable",
]


class ClientError(Exception):
    """A failure on the client's side (not an error code sent by a broker)."""

    retriable = False


class BrokerConnectionError(ClientError, ConnectionError):
    """A connection to a broker could not be made or was lost; requests on it may be retried."""

    retriable = True


class NoBrokersAvailableError(BrokerConnectionError):
    """None of the bootstrap servers or known brokers could be reached."""


class ClientTimeoutError(ClientError, TimeoutError):
    """A request or an operation did not finish within its timeout."""

    retriable = True


class UnsupportedApiError(ClientError):
    """The broker and the client share no version of an api the operation needs."""


class IllegalStateError(ClientError):
    """An operation that the client's current state does not allow (closed, not subscribed...)."""


def is_retriable(exc: BaseException) -> bool:
    """Whether an operation that failed with ``exc`` may be tried again."""
    if isinstance(exc, (KafkaError, ClientError)):
        return bool(exc.retriable)
    return False
