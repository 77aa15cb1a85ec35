"""Typed Kafka messages: one class per request, response, header and data message.

Classes are created on first use from the generated schema, by Kafka's own names::

    from kwire.protocol import messages
    req = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="t")])
    data = req.encode(version=12)
    same = messages.MetadataRequest.decode(data, version=12)

Nested struct classes hang off their message class (``MetadataRequest.MetadataRequestTopic``),
because Kafka reuses struct names across messages with different fields.  Field names are
snake_case forms of Kafka's (``ThrottleTimeMs`` -> ``throttle_time_ms``).
"""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar

from ._schema import MESSAGES
from .compiler import Codec, Struct, build_struct_class, codec
from .errors import UnknownApiVersionError
from .schema import REQUEST_NAMES, RESPONSE_NAMES, MessageSpec, message_spec


class Message(Struct):
    """A top-level message: encodes to and decodes from the bytes of one version."""

    __slots__ = ()
    SPEC: ClassVar[MessageSpec]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]

    @classmethod
    def codec(cls, version: int) -> Codec:
        """The compiled codec for one version; UnknownApiVersionError for a version kwire lacks."""
        spec = cls.SPEC
        if not spec.has_version(version):
            raise UnknownApiVersionError(
                f"no version {version} (kwire speaks {spec.min_version}-{spec.max_version})", what=spec.name)
        return codec(spec, version)

    @classmethod
    def decode(cls, data, version: int, *, strict: bool = True, record_views: bool = False):
        """Decode the message body (no size prefix, no header).  With strict, trailing bytes are an error.

        ``record_views``: ``records`` fields become memoryview slices of data (see ``Codec.decode``).
        """
        return cls.codec(version).decode(data, 0, strict=strict, record_views=record_views)[0]

    def encode(self, version: int) -> bytes:
        """The message body at this version (no size prefix, no header)."""
        return bytes(self.codec(version).encode(self))

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.SPEC.is_flexible(version)


class Request(Message):
    """Base of every ``...Request`` class."""

    __slots__ = ()
    API_KEY: ClassVar[int]

    @classmethod
    def response_class(cls) -> type[Response]:
        return response_class(cls.API_KEY)


class Response(Message):
    """Base of every ``...Response`` class."""

    __slots__ = ()
    API_KEY: ClassVar[int]

    @classmethod
    def request_class(cls) -> type[Request]:
        return request_class(cls.API_KEY)


class Header(Message):
    """RequestHeader and ResponseHeader."""

    __slots__ = ()


class Data(Message):
    """Data messages carried inside other messages (ConsumerProtocolSubscription, ...)."""

    __slots__ = ()


_BASES = {"request": Request, "response": Response, "header": Header, "data": Data}


@cache
def message_class(name: str) -> type[Message]:
    """The class of a message by Kafka's name, e.g. ``message_class("FetchResponse")``."""
    if name not in MESSAGES:
        raise KeyError(f"no Kafka message named {name!r}")
    spec = message_spec(name)
    extra: dict[str, Any] = {"SPEC": spec, "MIN_VERSION": spec.min_version, "MAX_VERSION": spec.max_version}
    if spec.api_key is not None:
        extra["API_KEY"] = spec.api_key
    cls = build_struct_class(spec.struct, base=_BASES[spec.kind], extra=extra)
    spec.struct._class = cls  # the codec builds instances of this class for the top-level struct
    return cls


def request_class(api_key: int) -> type[Request]:
    """The request class for an api key; UnknownApiVersionError naming the key if unknown."""
    try:
        return message_class(REQUEST_NAMES[api_key])  # type: ignore[return-value]
    except KeyError:
        raise UnknownApiVersionError(f"unknown api key {api_key}") from None


def response_class(api_key: int) -> type[Response]:
    """The response class for an api key; UnknownApiVersionError naming the key if unknown."""
    try:
        return message_class(RESPONSE_NAMES[api_key])  # type: ignore[return-value]
    except KeyError:
        raise UnknownApiVersionError(f"unknown api key {api_key}") from None


def __getattr__(name: str) -> type[Message]:
    if name in MESSAGES:
        return message_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(MESSAGES))
