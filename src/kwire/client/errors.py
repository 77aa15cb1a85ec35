"""Errors the client raises itself, beside the broker's error codes (``kwire.protocol.errors``).

Every broker error code is a ``KafkaError`` subclass with Kafka's ``retriable`` flag; the client
adds the failures that happen on its side of the wire.  ``is_retriable`` is the one test the retry
loops use, so a connection lost and NOT_LEADER_OR_FOLLOWER are treated alike.

Security failures are not retriable, as in Kafka's clients (``AuthenticationException``): a wrong
password or an untrusted certificate fails the call that needed the connection, at once, rather
than being tried again until a timeout.  ``AuthenticationError`` (SASL) and its ``TlsError`` (the TLS
handshake) are also ``kwire.security.AuthenticationError``s.
"""

from __future__ import annotations

from kwire.protocol.errors import KafkaError
from kwire.security.errors import AuthenticationError as _SecurityAuthenticationError

__all__ = [
    "AuthenticationError",
    "BrokerConnectionError",
    "ClientError",
    "ClientTimeoutError",
    "IllegalStateError",
    "NoBrokersAvailableError",
    "SecurityProtocolMismatchError",
    "TlsError",
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


class AuthenticationError(ClientError, _SecurityAuthenticationError):
    """The broker refused the login, or the client refused the broker: "authentication failed for
    user alice with SCRAM-SHA-512: <the broker's reason>".  Never names the password."""


class TlsError(AuthenticationError):
    """The TLS handshake with a broker failed: untrusted or expired certificate, a name that does not
    match the host, a client certificate the broker refused.  The message names the broker's address
    and OpenSSL's reason."""


class SecurityProtocolMismatchError(ClientError):
    """The broker does not speak the client's ``security.protocol`` on this port: a TLS listener
    reached in plain TCP, or a broker without SASL reached with SASL."""


class UnsupportedApiError(ClientError):
    """The broker and the client share no version of an api the operation needs."""


class IllegalStateError(ClientError):
    """An operation that the client's current state does not allow (closed, not subscribed...)."""


def is_retriable(exc: BaseException) -> bool:
    """Whether an operation that failed with ``exc`` may be tried again."""
    if isinstance(exc, (KafkaError, ClientError)):
        return bool(exc.retriable)
    return False
