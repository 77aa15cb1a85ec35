"""The base classes of the generated message classes, and finding a class by name or api key.

The classes themselves are generated source (``kwire.protocol.generated``, re-exported lazily by
``kwire.protocol.messages``).  What they share lives here: equality, ``repr``, ``to_dict`` and
``from_dict`` on every struct, and on every message the version-specialised codec compiled by
``compiler.py`` (the classes are plain source; the encoders and decoders stay compiled at run time,
once per message and version, for speed).
"""

from __future__ import annotations

import uuid
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, Union, cast

from .codec import Codec, schema_codec
from .errors import UnknownApiVersionError
from .generated import MESSAGE_MODULES
from .generated.api_keys import API_INFO, ApiKey
from .schema import ZERO_UUID, MessageSpec, StructSpec, message_spec

if TYPE_CHECKING:
    from .splice import SplicedBytes

__all__ = ["Data", "Header", "MISSING", "Message", "Records", "Request", "Response", "Struct", "ZERO_UUID",
           "message_class", "message_class_of", "no_values", "request_class", "response_class"]

# The value of a ``records`` field: bytes as decoded, a memoryview of the input with
# ``record_views``, or a ``SplicedBytes`` placeholder in a broker's zero-copy Fetch response.
Records = Union[bytes, bytearray, memoryview, "SplicedBytes"]

# The default of a list or struct parameter in a generated ``__init__``: a fresh list or struct
# is made per instance, while an explicit None stays None (a null on the wire).
MISSING: Any = object()


def no_values(_obj: object) -> tuple[()]:
    """``_values`` of a struct without fields."""
    return ()


class _StructSpecOf:
    """``cls._spec``: the schema spec of a generated struct class, found from its qualified name
    (``MetadataRequest.MetadataRequestTopic``) on first use and then kept on the class."""

    def __get__(self, obj: object, cls: type) -> StructSpec:
        owner, *path = cls.__qualname__.split(".")
        spec = message_spec(owner).struct
        for name in path:
            spec = next(f.struct for f in spec.fields if f.struct is not None and f.struct.name == name)
        # The descriptor gives way to the value on the class: mypy sees a plain ``type`` here.
        cls._spec = spec  # type: ignore[attr-defined]
        return spec


class _MessageSpecOf:
    """``cls.SPEC``: the spec of a generated message class, found by its name on first use."""

    def __get__(self, obj: object, cls: type) -> MessageSpec:
        spec = message_spec(cls.__name__)
        # The descriptor gives way to the value on the class: mypy sees a plain ``type`` here.
        cls.SPEC = spec  # type: ignore[attr-defined]
        return spec


class Struct:
    """Base of every generated message and struct class."""

    __slots__ = ()
    # A descriptor until first read (then the spec itself): typed as what reading it gives.
    _spec: ClassVar[StructSpec] = _StructSpecOf()  # type: ignore[assignment]
    _attrs: ClassVar[tuple[str, ...]]
    # Every field's value at once: an attrgetter of ``_attrs`` in each generated class.
    _values: ClassVar[Any]
    unknown_tags: dict[int, bytes] | None

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        # _values reads every field at once (an attrgetter): encoders compare each field that a
        # version lacks with its default, so this runs for every struct of many responses.
        return self._values(self) == other._values(other) and (
            (self.unknown_tags or None) == (other.unknown_tags or None)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = ", ".join(f"{a}={getattr(self, a)!r}" for a in self._attrs)
        return f"{type(self).__name__}({parts})"

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values: nested structs become dicts, lists stay lists."""
        out = {a: _plain(getattr(self, a)) for a in self._attrs}
        if self.unknown_tags:
            out["unknown_tags"] = dict(self.unknown_tags)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """The inverse of ``to_dict`` (missing keys take their defaults; unknown keys are an error)."""
        fields = {f.attr: f for f in cls._spec.fields}
        kwargs = {}
        for key, value in data.items():
            if key == "unknown_tags":
                kwargs[key] = {int(t): bytes(v) for t, v in value.items()} if value else None
                continue
            f = fields.get(key)
            if f is None:
                raise ValueError(f"{cls.__name__} has no field {key!r}")
            if f.struct is not None and value is not None:
                sub = f.struct.python_class()
                value = [sub.from_dict(x) for x in value] if f.is_array else sub.from_dict(value)
            elif f.element == "uuid" and isinstance(value, str):
                value = uuid.UUID(value)
            kwargs[key] = value
        return cls(**kwargs)


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


_M = TypeVar("_M", bound="Message")


class Message(Struct):
    """A top-level message: encodes to and decodes from the bytes of one version."""

    __slots__ = ()
    # A descriptor until first read (then the spec itself): typed as what reading it gives.
    SPEC: ClassVar[MessageSpec] = _MessageSpecOf()  # type: ignore[assignment]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]

    @classmethod
    def codec(cls, version: int) -> Codec:
        """The compiled codec for one version; UnknownApiVersionError for a version kwire lacks."""
        # The class's own versions (generated from the schema, as SPEC is): a codec from the code
        # cache never builds the message's spec.
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise UnknownApiVersionError(
                f"no version {version} (kwire speaks {cls.MIN_VERSION}-{cls.MAX_VERSION})", what=cls.__name__)
        return schema_codec(cls.__name__, version)

    @classmethod
    def has_version(cls, version: int) -> bool:
        """kwire speaks this version of the message (``SPEC.has_version`` without the spec)."""
        return cls.MIN_VERSION <= version <= cls.MAX_VERSION

    @classmethod
    def decode(cls: type[_M], data: Any, version: int, *, strict: bool = True, record_views: bool = False) -> _M:
        """Decode the message body (no size prefix, no header).  With strict, trailing bytes are an error.

        ``record_views``: ``records`` fields become memoryview slices of data (see ``Codec.decode``).
        """
        obj = cls.codec(version).decode(data, 0, strict=strict, record_views=record_views)[0]
        # The compiled decoder makes an instance of its spec's class, which is cls; one Codec type
        # serves every message, so its result is typed Any.
        return cast(_M, obj)

    def encode(self, version: int) -> bytes:
        """The message body at this version (no size prefix, no header)."""
        return bytes(self.codec(version).encode(self))

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.SPEC.is_flexible(version)


# The response class a request class is answered with: each generated request class names its own
# (``class FetchRequest(Request["FetchResponse"])``), so ``await conn.send(FetchRequest(...))`` is typed
# as a FetchResponse.  Covariant: any request is a ``Request[Response]``.
ResponseT_co = TypeVar("ResponseT_co", bound="Response", covariant=True)


class Request(Message, Generic[ResponseT_co]):
    """Base of every ``...Request`` class; its type parameter is the class of its response."""

    __slots__ = ()
    API_KEY: ClassVar[ApiKey]

    @classmethod
    def response_class(cls) -> type[Response]:
        return response_class(cls.API_KEY)


class Response(Message):
    """Base of every ``...Response`` class."""

    __slots__ = ()
    API_KEY: ClassVar[ApiKey]

    @classmethod
    def request_class(cls) -> type[Request[Response]]:
        return request_class(cls.API_KEY)


class Header(Message):
    """RequestHeader and ResponseHeader."""

    __slots__ = ()


class Data(Message):
    """Data messages carried inside other messages (ConsumerProtocolSubscription, ...)."""

    __slots__ = ()


@cache
def message_class(name: str) -> type[Message]:
    """The class of a message by Kafka's name, e.g. ``message_class("FetchResponse")``."""
    module = MESSAGE_MODULES.get(name)
    if module is None:
        raise KeyError(f"no Kafka message named {name!r}")
    cls: type[Message] = getattr(import_module(f"{__package__}.generated.{module}"), name)
    return cls


def message_class_of(name: str, base: type[_M]) -> type[_M]:
    """``message_class(name)``, which must be a ``base`` (Request, Response, Data...): TypeError if not."""
    cls = message_class(name)
    if not issubclass(cls, base):
        raise TypeError(f"{name} is not a {base.__name__}")
    return cls


def _api(api_key: int) -> str:
    try:
        return API_INFO[api_key].name
    except KeyError:
        raise UnknownApiVersionError(f"unknown api key {api_key}") from None


@cache
def request_class(api_key: int) -> type[Request[Response]]:
    """The request class for an api key; UnknownApiVersionError naming the key if unknown."""
    return message_class_of(_api(api_key) + "Request", Request)


@cache
def response_class(api_key: int) -> type[Response]:
    """The response class for an api key; UnknownApiVersionError naming the key if unknown."""
    return message_class_of(_api(api_key) + "Response", Response)
