"""The message schemas as Python objects: specs of messages, structs and fields.

The generated ``_schema`` module is plain data; this module gives it shape (version checks,
Python attribute names, parsed defaults) for the codec compiler and for ``kwire protocol show``.
Specs are built lazily, one message at a time, and ``_schema`` is only read when the first one is,
so importing kwire stays cheap.  The per-API facts (names, versions) come from the generated
``ApiKey`` table.
"""

from __future__ import annotations

import keyword
import re
import uuid
from collections.abc import Iterator
from functools import cache
from typing import Any

from .generated.api_keys import API_INFO

ZERO_UUID = uuid.UUID(int=0)

# Fixed-width primitives: struct format and size.
FIXED_TYPES: dict[str, tuple[str, int]] = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "uuid": ("16s", 16),
}
VARIABLE_TYPES = ("string", "bytes", "records")
PRIMITIVE_TYPES = frozenset(FIXED_TYPES) | frozenset(VARIABLE_TYPES)

Range = tuple[int, int]


def snake_case(name: str) -> str:
    """Kafka's ``ThrottleTimeMs`` -> ``throttle_time_ms``; acronyms stay one word (``SASLAuthBytes`` -> ``sasl_auth_bytes``)."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return s + "_" if keyword.iskeyword(s) else s


def _in(r: Range | None, v: int) -> bool:
    return r is not None and r[0] <= v <= r[1]


class FieldSpec:
    """One field of a struct, across all the versions that have it."""

    __slots__ = ("name", "attr", "type", "versions", "nullable", "tagged", "tag", "ignorable",
                 "default_text", "map_key", "flexible_override", "has_flexible_override",
                 "struct", "is_array", "element")

    def __init__(self, d: dict[str, Any], owner: str, parent: StructSpec | None = None):
        self.name: str = d["name"]
        self.attr: str = snake_case(self.name)
        self.type: str = d["type"]
        self.versions: Range = tuple(d["versions"])
        self.nullable: Range | None = tuple(d["nullableVersions"]) if "nullableVersions" in d else None
        self.tagged: Range | None = tuple(d["taggedVersions"]) if "taggedVersions" in d else None
        self.tag: int | None = d.get("tag")
        self.ignorable: bool = bool(d.get("ignorable", False))
        self.default_text: str | None = d.get("default")
        self.map_key: bool = bool(d.get("mapKey", False))
        self.has_flexible_override = "flexibleVersions" in d
        fo = d.get("flexibleVersions")
        self.flexible_override: Range | None = tuple(fo) if fo else None
        self.is_array = self.type.startswith("[]")
        self.element: str = self.type[2:] if self.is_array else self.type
        self.struct: StructSpec | None = None
        if "fields" in d:
            self.struct = StructSpec(self.element, d["fields"], owner, parent)
        elif self.element not in PRIMITIVE_TYPES:
            raise ValueError(f"{owner}.{self.name}: unknown type {self.type}")

    def present(self, v: int) -> bool:
        """The field is on the wire in version v (as a regular or a tagged field)."""
        return _in(self.versions, v)

    def is_tagged(self, v: int) -> bool:
        return _in(self.tagged, v)

    def is_nullable(self, v: int) -> bool:
        return _in(self.nullable, v)

    def is_flexible(self, v: int, message_flexible: bool) -> bool:
        """Compact encoding for this field: the message's flexibility unless the field overrides it."""
        if self.has_flexible_override:
            return _in(self.flexible_override, v)
        return message_flexible

    def default(self) -> Any:
        """A fresh default value (lists and structs are new objects each call)."""
        t = self.default_text
        if self.is_array:
            return None if t == "null" else []
        if self.struct is not None:
            return None if t == "null" else self.struct.python_class()()
        return parse_default(self.element, t)

    def describe_type(self) -> str:
        return self.type


def parse_default(type_name: str, text: str | None) -> Any:
    """A scalar default from the schema's text form."""
    if text == "null":
        return None
    if type_name == "bool":
        return text == "true"
    if type_name in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(text, 0) if text not in (None, "") else 0
    if type_name == "float64":
        return float(text) if text not in (None, "") else 0.0
    if type_name == "string":
        return text or ""
    if type_name == "bytes":
        return b""
    if type_name == "records":
        return None
    if type_name == "uuid":
        return ZERO_UUID
    raise ValueError(f"no default for type {type_name}")


class StructSpec:
    """A named group of fields: a message body or a nested struct."""

    __slots__ = ("name", "fields", "owner", "parent", "_class")

    def __init__(self, name: str, fields: list[dict[str, Any]], owner: str, parent: StructSpec | None = None):
        self.name = name
        self.owner = owner
        self.parent = parent  # the struct whose field this is (None for a message body)
        self.fields = [FieldSpec(f, owner, self) for f in fields]
        self._class: type | None = None
        attrs = [f.attr for f in self.fields]
        if len(set(attrs)) != len(attrs):
            raise ValueError(f"{owner}.{name}: two fields map to one attribute name")

    def python_class(self) -> type[Any]:
        """The generated Python class of this struct: the message's class, or the class nested in
        its parent's class by the struct's name (``MetadataRequest.MetadataRequestTopic``)."""
        if self._class is None:
            if self.parent is None:
                from .message_base import message_class

                self._class = message_class(self.owner)
            else:
                self._class = getattr(self.parent.python_class(), self.name)
        return self._class

    def walk(self) -> Iterator[StructSpec]:
        """This struct and every nested struct, depth first."""
        yield self
        for f in self.fields:
            if f.struct is not None:
                yield from f.struct.walk()


class MessageSpec:
    """A request, response, header or data message."""

    __slots__ = ("name", "kind", "api_key", "valid", "flexible", "struct")

    def __init__(self, d: dict[str, Any]):
        self.name: str = d["name"]
        self.kind: str = d["type"]  # request, response, header, data
        self.api_key: int | None = d.get("apiKey")
        self.valid: Range = tuple(d["validVersions"])
        fl = d.get("flexibleVersions")
        self.flexible: Range | None = tuple(fl) if fl else None
        self.struct = StructSpec(self.name, d["fields"], self.name)

    @property
    def min_version(self) -> int:
        return self.valid[0]

    @property
    def max_version(self) -> int:
        return self.valid[1]

    def has_version(self, v: int) -> bool:
        return self.valid[0] <= v <= self.valid[1]

    def is_flexible(self, v: int) -> bool:
        return _in(self.flexible, v)


@cache
def message_spec(name: str) -> MessageSpec:
    """The spec of a message by its Kafka name, e.g. ``MetadataRequest``."""
    from ._schema import MESSAGES  # 475 KB of data: read when the first codec is compiled

    return MessageSpec(MESSAGES[name])


REQUEST_NAMES: dict[int, str] = {int(k): info.name + "Request" for k, info in API_INFO.items()}
RESPONSE_NAMES: dict[int, str] = {int(k): info.name + "Response" for k, info in API_INFO.items()}
API_KEYS: tuple[int, ...] = tuple(sorted(REQUEST_NAMES))


def api_name(api_key: int) -> str:
    """Kafka's API name for a key, e.g. 3 -> ``Metadata``."""
    return API_INFO[api_key].name


def api_versions(api_key: int) -> Range:
    """(min, max) versions kwire speaks for an API key."""
    info = API_INFO[api_key]
    return (info.min_version, info.max_version)


def api_key_for(name: str) -> int:
    """The api key of an API by name: ``Metadata``, ``MetadataRequest``, ``metadata`` or ``3``."""
    if name.isdigit():
        key = int(name)
        if key in REQUEST_NAMES:
            return key
    lowered = name.lower().removesuffix("request").removesuffix("response")
    for key, req in REQUEST_NAMES.items():
        if req[: -len("Request")].lower() == lowered:
            return key
    raise KeyError(name)
