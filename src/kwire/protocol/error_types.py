"""The base exceptions of kwire's protocol layer (re-exported, with every Kafka error class, by ``errors``).

* ``ProtocolError`` and its subclasses: bytes that are not valid Kafka protocol (decoding) or a
  message that cannot be written in the requested version (encoding).  They name what was being
  read or written: api, version and the field path.
* ``KafkaError``: the base of the generated class of each Kafka error code.
"""

from __future__ import annotations

from typing import ClassVar


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
