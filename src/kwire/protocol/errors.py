"""kwire's protocol exceptions and Kafka's error codes.

Two families live here:

* ``ProtocolError`` and its subclasses: bytes that are not valid Kafka protocol (decoding) or a
  message that cannot be written in the requested version (encoding).  They name what was being
  read or written: api, version and the field path.
* ``KafkaError`` and one subclass per Kafka error code (``UnknownTopicOrPartitionError`` ...),
  built from the generated error table; ``retriable`` is kept from Kafka's definitions.
"""

from __future__ import annotations

from typing import ClassVar

from ._schema import ERRORS


class ProtocolError(Exception):
    """Bytes that are not valid Kafka protocol, or a message that cannot be encoded."""

    def __init__(self, reason: str, *, what: str | None = None, version: int | None = None,
                 path: list[str] | None = None, offset: int | None = None):
        self.reason = reason
        self.what = what
        self.version = version
        self.path = list(path or [])
        self.offset = offset
        super().__init__(reason)

    def __str__(self) -> str:
        where = []
        if self.what is not None:
            where.append(self.what if self.version is None else f"{self.what} v{self.version}")
        if self.path:
            where.append("field " + ".".join(self.path))
        if self.offset is not None:
            where.append(f"at byte {self.offset}")
        return f"{', '.join(where)}: {self.reason}" if where else self.reason


class DecodeError(ProtocolError):
    """Input bytes could not be decoded."""


class EncodeError(ProtocolError):
    """A message could not be encoded (wrong value type, field missing in that version...)."""


class UnknownApiVersionError(ProtocolError):
    """An api key, or a version of a message, that kwire does not know.

    (Not to be confused with ``UnsupportedVersionError``, Kafka's error code 35 sent by brokers.)
    """


class FrameTooLargeError(DecodeError):
    """A size prefix larger than the configured maximum frame size."""


class CorruptRecordError(DecodeError):
    """A record batch or message whose checksum or layout is wrong."""


class KafkaError(Exception):
    """An error code returned by a Kafka broker.  ``KafkaError.for_code(n)`` gives the class."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    _by_code: ClassVar[dict[int, type[KafkaError]]] = {}

    def __init__(self, message: str | None = None):
        self.message = message
        super().__init__(message or self.name)

    def __str__(self) -> str:
        base = f"[Error {self.code}] {self.name}"
        return f"{base}: {self.message}" if self.message else base

    @classmethod
    def for_code(cls, code: int) -> type[KafkaError]:
        """The exception class for an error code (an unnamed class for codes Kafka never defined)."""
        try:
            return cls._by_code[code]
        except KeyError:
            unknown = type(f"KafkaError{code}", (KafkaError,), {"code": code, "name": f"UNKNOWN_ERROR_{code}"})
            cls._by_code[code] = unknown
            return unknown


def _class_name(name: str) -> str:
    words = "".join(part.capitalize() for part in name.split("_"))
    return words if words.endswith(("Error", "Exception")) else words + "Error"


def error_name(code: int) -> str:
    """Kafka's name for an error code, e.g. 3 -> ``UNKNOWN_TOPIC_OR_PARTITION``."""
    return KafkaError.for_code(code).name


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the typed error for a non-zero error code; return for 0."""
    if code:
        raise KafkaError.for_code(code)(message)


_exported = []
for _code, _name, _retriable in ERRORS:
    if _code == 0:
        continue
    if _class_name(_name) in globals():
        raise RuntimeError(f"Kafka error {_name} would replace kwire's {_class_name(_name)}")
    _cls = type(_class_name(_name), (KafkaError,), {"code": _code, "name": _name, "retriable": _retriable,
                                                      "__module__": __name__})
    KafkaError._by_code[_code] = _cls
    globals()[_cls.__name__] = _cls
    _exported.append(_cls.__name__)

ERROR_CODES: dict[int, tuple[str, bool]] = {c: (n, r) for c, n, r in ERRORS}

__all__ = [
    "ProtocolError", "DecodeError", "EncodeError", "UnknownApiVersionError", "FrameTooLargeError",
    "CorruptRecordError", "KafkaError", "ERROR_CODES", "error_name", "raise_for_code", *_exported,
]
