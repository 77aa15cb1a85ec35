"""Small pieces shared by the request handlers."""

from __future__ import annotations

import logging

from kwire.protocol.errors import KafkaError, UnknownServerError

logger = logging.getLogger("kwire.broker.handlers")

# Topic authorized operations when the client did not ask for them (Kafka's INT32_MIN sentinel).
NO_AUTHORIZED_OPERATIONS = -(2**31)


def error_of(exc: BaseException) -> tuple[int, str]:
    """(error code, message) to put in a response for an exception raised while serving."""
    if isinstance(exc, KafkaError):
        return exc.code, str(exc)
    logger.exception("unexpected error while serving a request")
    return UnknownServerError.code, f"{type(exc).__name__}: {exc}"
