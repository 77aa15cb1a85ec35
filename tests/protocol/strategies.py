"""Random kwire messages, driven by kwire's own schema: hypothesis strategies and a seeded builder.

``message_strategy(cls, version)`` draws a valid instance of any message class at a version:

* only fields on the wire in that version get random values; the others keep their defaults;
* ``None`` only where the field is nullable in that version;
* tagged fields are sometimes left at their default (not written) and sometimes set;
* in flexible versions, structs sometimes carry unknown tagged fields (tags no field uses);
* integers span their type's whole range, floats are finite (NaN has its own tests), strings are
  any unicode that UTF-8 can encode, within the int16 byte limit of non-compact strings;
* arrays of structs stay short so deeply nested messages stay small; strings, bytes and arrays of
  primitives are now and then long enough to need multi-byte uvarint lengths.

``random_instance(cls, version, rng)`` builds the same kind of value from a ``random.Random``,
for tests that need many deterministic inputs without hypothesis' overhead (truncations,
mutations) and for "rich" instances where every field present in the version is set.
"""

from __future__ import annotations

import random
import struct
import uuid
from functools import cache

from hypothesis import strategies as st

from kwire.protocol import messages
from kwire.protocol._schema import MESSAGES
from kwire.protocol.schema import FieldSpec, StructSpec

ZERO_UUID = uuid.UUID(int=0)

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

# Non-compact strings carry an int16 byte count; compact ones a uvarint.
MAX_STRING_BYTES = 0x7FFF


def all_message_versions(kinds: tuple[str, ...] = ("request", "response", "header", "data")) -> list[tuple[str, int]]:
    """Every (message name, version) kwire knows, for the given message kinds."""
    out = []
    for name, d in sorted(MESSAGES.items()):
        if d["type"] in kinds:
            lo, hi = d["validVersions"]
            out.extend((name, v) for v in range(lo, hi + 1))
    return out


def used_tags(spec: StructSpec) -> set[int]:
    """Every tag a field of this struct uses in any version (never drawn as an unknown tag).

    int(): Kafka's json writes a few tags as strings ("tag": "0"), and kwire keeps them as written."""
    return {int(f.tag) for f in spec.fields if f.tag is not None}


# ----------------------------------------------------------------------------- hypothesis


def _utf8_text(max_size: int) -> st.SearchStrategy[str]:
    return st.text(st.characters(codec="utf-8"), max_size=max_size).filter(
        lambda s: len(s.encode("utf-8")) <= MAX_STRING_BYTES)


def scalar_strategy(type_name: str) -> st.SearchStrategy:
    """Any valid value of a primitive type."""
    if type_name in INT_RANGES:
        lo, hi = INT_RANGES[type_name]
        return st.integers(lo, hi)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        # Now and then long enough for a two- or three-byte uvarint length.
        return st.one_of(_utf8_text(12), st.tuples(st.sampled_from("aé✓😀"), st.integers(64, 4000)).map(
            lambda t: t[0] * t[1]))
    if type_name in ("bytes", "records"):
        return st.one_of(st.binary(max_size=12), st.integers(128, 20000).map(lambda n: bytes(i % 251 for i in range(n))))
    if type_name == "uuid":
        return st.one_of(st.just(ZERO_UUID), st.integers(0, 2**128 - 1).map(lambda i: uuid.UUID(int=i)))
    raise ValueError(f"no strategy for {type_name}")


def unknown_tags_strategy(spec: StructSpec) -> st.SearchStrategy:
    taken = used_tags(spec)
    tags = st.one_of(st.integers(0, 40), st.integers(0, 2**31 - 1)).filter(lambda t: t not in taken)
    return st.one_of(st.none(), st.dictionaries(tags, st.binary(max_size=6), min_size=1, max_size=3))


class _Options:
    __slots__ = ("unknown_tags", "unknown_tags_in_tagged", "max_array")

    def __init__(self, unknown_tags: bool, unknown_tags_in_tagged: bool, max_array: int):
        self.unknown_tags = unknown_tags
        self.unknown_tags_in_tagged = unknown_tags_in_tagged
        self.max_array = max_array


def _field_strategy(f: FieldSpec, version: int, flexible: bool, depth: int, opts: _Options,
                    in_tagged: bool) -> st.SearchStrategy:
    """A value of field f (present in version), including None where nullable."""
    in_tagged = in_tagged or f.is_tagged(version)
    if f.struct is not None:
        elem = _struct_strategy(f.struct, version, flexible, depth + 1, opts, in_tagged)
    else:
        elem = scalar_strategy(f.element)
    if f.is_array:
        value = st.lists(elem, max_size=opts.max_array if depth < 2 else 1)
        if f.struct is None:  # now and then more elements than a one-byte uvarint count holds
            value = st.one_of(value, st.tuples(elem, st.integers(127, 300)).map(lambda t: [t[0]] * t[1]))
    else:
        value = elem
    if f.is_nullable(version):
        value = st.one_of(st.none(), value)
    if f.is_tagged(version):
        # Sometimes the default (not on the wire), sometimes a drawn value.
        value = st.one_of(st.builds(f.default), value)
    return value


def _struct_strategy(spec: StructSpec, version: int, flexible: bool, depth: int, opts: _Options,
                     in_tagged: bool) -> st.SearchStrategy:
    cls = spec.python_class()
    kwargs = {f.attr: _field_strategy(f, version, flexible, depth, opts, in_tagged)
              for f in spec.fields if f.present(version)}
    if flexible and opts.unknown_tags and (opts.unknown_tags_in_tagged or not in_tagged):
        kwargs["unknown_tags"] = unknown_tags_strategy(spec)
    return st.fixed_dictionaries(kwargs).map(lambda kw: cls(**kw))


@cache
def message_strategy(cls: type, version: int, *, unknown_tags: bool = True, unknown_tags_in_tagged: bool = True,
                     max_array: int = 3) -> st.SearchStrategy:
    """Valid instances of a kwire message class at a version (see the module docstring)."""
    spec = cls.SPEC
    assert spec.has_version(version), (cls.__name__, version)
    opts = _Options(unknown_tags, unknown_tags_in_tagged, max_array)
    return _struct_strategy(spec.struct, version, spec.is_flexible(version), 0, opts, False)


def any_message() -> st.SearchStrategy:
    """(class, version, instance) for any message kwire knows."""
    pairs = all_message_versions()

    def draw(pair):
        cls = getattr(messages, pair[0])
        return message_strategy(cls, pair[1]).map(lambda m: (cls, pair[1], m))

    return st.sampled_from(pairs).flatmap(draw)


# ----------------------------------------------------------------------------- seeded builder


def random_text(rng: random.Random, max_chars: int = 8) -> str:
    pool = "abcXYZ019-_. é✓кл€😀\u0000\u07ff\uffff"
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, max_chars)))


def random_scalar(type_name: str, rng: random.Random):
    if type_name in INT_RANGES:
        lo, hi = INT_RANGES[type_name]
        return rng.choice([lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi), rng.randint(-100, 100) if lo < 0 else
                           rng.randint(0, 100)])
    if type_name == "bool":
        return rng.random() < 0.5
    if type_name == "float64":
        return rng.choice([0.0, -0.0, 1.5, -2.25e300, float("inf"), 5e-324,
                           struct.unpack(">d", rng.randbytes(8))[0]])
    if type_name == "string":
        return random_text(rng)
    if type_name in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 10))
    if type_name == "uuid":
        return ZERO_UUID if rng.random() < 0.2 else uuid.UUID(int=rng.getrandbits(128))
    raise ValueError(type_name)


def _finite(value):
    return not (isinstance(value, float) and value != value)


def random_instance(cls: type, version: int, rng: random.Random, *, rich: bool = False, unknown_tags: bool = True,
                    max_array: int = 2):
    """A random valid instance.  With rich, every present field gets a non-null value and arrays are non-empty,
    so the encoding exercises every field of the version (useful for truncation and mutation sweeps)."""
    spec = cls.SPEC
    return _random_struct(spec.struct, version, spec.is_flexible(version), rng, rich, unknown_tags, max_array, 0)


def _random_struct(spec: StructSpec, version: int, flexible: bool, rng: random.Random, rich: bool,
                   unknown_tags: bool, max_array: int, depth: int):
    kwargs = {}
    for f in spec.fields:
        if not f.present(version):
            continue
        if f.is_tagged(version) and not rich and rng.random() < 0.4:
            continue
        if f.is_nullable(version) and not rich and rng.random() < 0.2:
            kwargs[f.attr] = None
            continue
        kwargs[f.attr] = _random_value(f, version, flexible, rng, rich, unknown_tags, max_array, depth)
    if flexible and unknown_tags and rng.random() < (0.5 if rich else 0.3):
        taken = used_tags(spec)
        tags = {}
        for _ in range(rng.randint(1, 2)):
            tag = rng.choice([rng.randint(0, 30), rng.randint(0, 2**31 - 1)])
            if tag not in taken:
                tags[tag] = rng.randbytes(rng.randint(0, 4))
        kwargs["unknown_tags"] = tags or None
    return spec.python_class()(**kwargs)


def _random_value(f: FieldSpec, version: int, flexible: bool, rng: random.Random, rich: bool, unknown_tags: bool,
                  max_array: int, depth: int):
    def one():
        if f.struct is not None:
            return _random_struct(f.struct, version, flexible, rng, rich, unknown_tags, max_array, depth + 1)
        while True:
            v = random_scalar(f.element, rng)
            if _finite(v):
                return v

    if f.is_array:
        lo = 1 if rich else 0
        hi = max(lo, max_array if depth < 2 else 1)
        return [one() for _ in range(rng.randint(lo, hi))]
    return one()
