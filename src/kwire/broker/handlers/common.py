"""Small pieces shared by the request handlers."""

from __future__ import annotations

import logging

from kwire.protocol.errors import KafkaError, KafkaStorageError, UnknownServerError

from ..log_limiter import ProblemLog

logger = logging.getLogger("kwire.broker.handlers")
# A full or read-only disk fails every request that writes: the log gets a few lines per interval.
_storage_log = ProblemLog(logging.getLogger("kwire.broker.storage"))


def storage_error(exc: OSError, doing: str, path: object = None) -> KafkaStorageError:
    """The KAFKA_STORAGE_ERROR a client is given when the data dir fails (full, read-only, gone),
    as Kafka answers for an offline log dir: the message names what was being done, the path
    (the OS error's own, else ``path``) and the OS error, and the broker log says the same."""
    where = exc.filename or path
    where = f"{where}: " if where else ""
    message = f"{doing} failed: {where}{exc.strerror or exc}"
    _storage_log.log(logging.ERROR, f"storage {exc.errno}", "%s", message)
    return KafkaStorageError(message)

# Topic authorized operations when the client did not ask for them (Kafka's INT32_MIN sentinel).
NO_AUTHORIZED_OPERATIONS = -(2**31)


def error_of(exc: BaseException) -> tuple[int, str | None]:
    """(error code, message) to put in a response for an exception raised while serving.

    The message is the exception's own text, as Kafka's ApiError.fromThrowable gives it: not the
    ``[Error N] NAME:`` prefix kwire prints for people, and nothing for an unexpected failure
    (UNKNOWN_SERVER_ERROR carries no message in Kafka, so no internals leak; the broker log has it)."""
    if isinstance(exc, KafkaStorageError):  # raised by the storage itself (a failed append)
        _storage_log.log(logging.ERROR, "storage", "%s", exc)
    if isinstance(exc, KafkaError):
        return exc.code, exc.message
    if isinstance(exc, OSError):
        failure = storage_error(exc, "writing to the log")
        return failure.code, failure.message
    logger.exception("unexpected error while serving a request")
    return UnknownServerError.code, None
