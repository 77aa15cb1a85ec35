"""kwire's protocol exceptions and Kafka's error codes.

Two families live here:

* ``ProtocolError`` and its subclasses: bytes that are not valid Kafka protocol (decoding) or a
  message that cannot be written in the requested version (encoding).  They name what was being
  read or written: api, version and the field path.
* ``KafkaError`` and one subclass per Kafka error code (``UnknownTopicOrPartitionError`` ...),
  generated source (``generated/error_codes.py``) with the ``ErrorCode`` enum; ``retriable`` is
  kept from Kafka's definitions.
"""

from __future__ import annotations

from .error_types import (
    CorruptRecordError,
    DecodeError,
    EncodeError,
    FrameTooLargeError,
    KafkaError,
    ProtocolError,
    UnknownApiVersionError,
)
from .generated import error_codes as _generated
from .generated.error_codes import *  # noqa: F403  (ErrorCode and the class of every error code)
from .generated.error_codes import ERROR_CLASSES, ErrorCode

KafkaError._by_code.update(ERROR_CLASSES)


def error_name(code: int) -> str:
    """Kafka's name for an error code, e.g. 3 -> ``UNKNOWN_TOPIC_OR_PARTITION``."""
    return KafkaError.for_code(code).name


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the typed error for a non-zero error code; return for 0."""
    if code:
        raise KafkaError.for_code(code)(message)


# Code -> (name, retriable) for every code Kafka defines, 0 (NONE) included.
ERROR_CODES: dict[int, tuple[str, bool]] = {int(c): (c.name, c.retriable) for c in ErrorCode}

__all__ = [
    "ProtocolError", "DecodeError", "EncodeError", "UnknownApiVersionError", "FrameTooLargeError",
    "CorruptRecordError", "KafkaError", "ERROR_CODES", "error_name", "raise_for_code",
]
__all__ += _generated.__all__
