"""Write message specs as version-specialised encode/decode functions (the source of a codec).

An interpreter that walks the schema for every field of every message is slow in Python.  Instead,
for each (message, version) pair this module writes the Python source of straight-line functions
(one decoder and one encoder per struct), with runs of fixed-width fields merged into one
``struct`` call; ``kwire.protocol.codec`` compiles and runs it, and keeps the compiled code on
disk, so this module is imported only when a codec is not in that cache yet.  Each constant the
source uses comes with a recipe that makes it again without the message's spec (``codec.Recipe``).

Error reporting costs almost nothing on the fast path: each generated function keeps the name of
the field it is reading in a local and, on failure, raises ``DecodeError``/``EncodeError`` with
that name; enclosing functions prepend their own field, so the error names the whole path.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Protocol

from .codec import _CACHED_ARRAY_LEN, NOT_NULLABLE, Codec, Constants, Recipe, Written, _array_unpackers, codec
from .schema import FIXED_TYPES, FieldSpec, MessageSpec, StructSpec

__all__ = ["Codec", "codec", "write"]  # (Codec and codec live in kwire.protocol.codec, as before here)


def _is_fixed(f: FieldSpec) -> bool:
    return f.element in FIXED_TYPES and not f.is_array and f.struct is None


def _fixed_runs(fields: list[FieldSpec]) -> list[list[FieldSpec]]:
    """Fields grouped so consecutive fixed-width scalars share one list (one struct call)."""
    groups: list[list[FieldSpec]] = []
    for f in fields:
        if _is_fixed(f) and groups and _is_fixed(groups[-1][-1]):
            groups[-1].append(f)
        else:
            groups.append([f])
    return groups


class _Writer:
    """Accumulates generated source for one (message, version)."""

    def __init__(self, message: MessageSpec, version: int, *, record_views: bool = False,
                 null_arrays_as_empty: bool = False) -> None:
        self.message = message
        self.version = version
        self.record_views = record_views
        self.null_arrays_as_empty = null_arrays_as_empty
        self.flexible = message.is_flexible(version)
        self.lines: list[str] = []
        self.constants: Constants = {}
        self.done: dict[int, tuple[str, str]] = {}
        self.counter = 0

    def const(self, value: Any, recipe: Recipe) -> str:
        """A name for ``value`` in the generated code; ``recipe`` makes it again (see codec.Recipe)."""
        name = f"_c{self.counter}"
        self.counter += 1
        self.constants[name] = (value, recipe)
        return name

    def unpacker(self, fmt: str) -> str:
        return self.const(struct.Struct(fmt).unpack_from, ("unpack", fmt))

    def packer(self, fmt: str) -> str:
        return self.const(struct.Struct(fmt).pack, ("pack", fmt))

    def class_of(self, spec: StructSpec) -> str:
        cls = spec.python_class()
        return self.const(cls, ("class", cls.__qualname__))

    def default_of(self, f: FieldSpec) -> str:
        """A field's default (a constant the encoder compares values with), by a recipe that
        needs no spec: a struct's by its class, a UUID's by its number, any other as it is."""
        value = f.default()
        if f.struct is not None and not f.is_array and value is not None:
            recipe: Recipe = ("new", type(value).__qualname__)
        elif isinstance(value, uuid.UUID):
            recipe = ("uuid", value.int)
        else:
            recipe = ("value", value)
        return self.const(value, recipe)

    def value(self, value: Any) -> str:
        return self.const(value, ("value", value))

    def tmp(self, stem: str = "t") -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    # ---------------------------------------------------------------- decoding

    def read_uvarint(self, out: list[str], ind: str, target: str) -> None:
        out.append(f"{ind}{target} = buf[pos]")
        out.append(f"{ind}if {target} < 0x80:")
        out.append(f"{ind}    pos += 1")
        out.append(f"{ind}else:")
        out.append(f"{ind}    {target}, pos = _ruv(buf, pos)")

    def read_length(self, out: list[str], ind: str, target: str, compact: bool, width: str) -> None:
        """A length prefix into target; -1 means null in both encodings."""
        if compact:
            self.read_uvarint(out, ind, target)
            out.append(f"{ind}{target} -= 1")
        else:
            out.append(f"{ind}{target} = _i{width}(buf, pos)[0]")
            out.append(f"{ind}pos += {int(width) // 8}")

    def null_or_fail(self, out: list[str], ind: str, f: _Nullability, target: str, what: str) -> None:
        if f.is_nullable(self.version):
            out.append(f"{ind}{target} = None")
        elif what == "array" and self.null_arrays_as_empty:
            out.append(f"{ind}{target} = []")
        else:
            out.append(f"{ind}raise DecodeError('null {what} {NOT_NULLABLE}')")

    def read_value(self, out: list[str], ind: str, f: FieldSpec, target: str) -> None:
        """Statements reading field f (its whole value, array or not) into target."""
        v = self.version
        compact = f.is_flexible(v, self.flexible)
        if f.is_array:
            n = self.tmp("n")
            self.read_length(out, ind, n, compact, "32")
            out.append(f"{ind}if {n} < 0:")
            self.null_or_fail(out, ind + "    ", f, target, "array")
            out.append(f"{ind}else:")
            self.read_elements(out, ind + "    ", f, target, n)
            return
        if f.struct is not None:
            dec = self.struct_functions(f.struct)[0]
            if f.is_nullable(v):
                m = self.tmp("m")
                out.append(f"{ind}{m} = _i8(buf, pos)[0]")
                out.append(f"{ind}pos += 1")
                out.append(f"{ind}if {m} < 0:")
                out.append(f"{ind}    {target} = None")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {target}, pos = {dec}(buf, pos)")
            else:
                out.append(f"{ind}{target}, pos = {dec}(buf, pos)")
            return
        self.read_scalar(out, ind, f, f.element, target, compact)

    def read_scalar(self, out: list[str], ind: str, f: _Nullability, t: str, target: str, compact: bool) -> None:
        if t in FIXED_TYPES:
            fmt, size = FIXED_TYPES[t]
            s = self.unpacker(">" + fmt)
            out.append(f"{ind}{target} = {s}(buf, pos)[0]")
            out.append(f"{ind}pos += {size}")
            if t == "uuid":
                out.append(f"{ind}{target} = _UUID(bytes={target})")
            return
        n = self.tmp("n")
        self.read_length(out, ind, n, compact, "16" if t == "string" else "32")
        out.append(f"{ind}if {n} < 0:")
        self.null_or_fail(out, ind + "    ", f, target, t)
        out.append(f"{ind}else:")
        end = self.tmp("end")
        out.append(f"{ind}    {end} = pos + {n}")
        out.append(f"{ind}    if {end} > blen:")
        out.append(f"{ind}        raise DecodeError('{t} of %d bytes is longer than the %d bytes left' % ({n}, blen - pos))")
        if t == "string":
            out.append(f"{ind}    {target} = _str(buf[pos:{end}], 'utf-8')")
        elif t == "records" and self.record_views:
            out.append(f"{ind}    {target} = _mv(buf)[pos:{end}]")
        else:
            out.append(f"{ind}    {target} = _bytes(buf[pos:{end}])")
        out.append(f"{ind}    pos = {end}")

    def read_elements(self, out: list[str], ind: str, f: FieldSpec, target: str, n: str) -> None:
        t = f.element
        # Every element takes at least one byte, except in structs with no fields: a count above
        # the bytes left is forged, and checking it first bounds the loop by the input's size.
        check = [f"{ind}if {n} > blen - pos:",
                 f"{ind}    raise DecodeError('array of %d elements is longer than the %d bytes left' % ({n}, blen - pos))"]
        if f.struct is not None:
            out.extend(check)
            dec = self.struct_functions(f.struct)[0]
            app, item, i = self.tmp("app"), self.tmp("it"), self.tmp("i")
            out.append(f"{ind}{target} = []")
            out.append(f"{ind}{app} = {target}.append")
            out.append(f"{ind}for {i} in range({n}):")
            out.append(f"{ind}    {item}, pos = {dec}(buf, pos)")
            out.append(f"{ind}    {app}({item})")
        elif t in FIXED_TYPES and t != "uuid":
            fmt, size = FIXED_TYPES[t]
            arrays = self.const(_array_unpackers(fmt), ("arrays", fmt))
            # unpack_from checks the length itself; a long array is checked before its format is built.
            out.append(f"{ind}if {n} < {_CACHED_ARRAY_LEN}:")
            out.append(f"{ind}    {target} = list({arrays}[{n}](buf, pos))")
            out.append(f"{ind}else:")
            out.append(f"{ind}    if {n} * {size} > blen - pos:")
            out.append(f"{ind}        raise DecodeError('array of %d elements is longer than the %d bytes left' % ({n}, blen - pos))")
            out.append(f"{ind}    {target} = list(_unpack_n('{fmt}', {n})(buf, pos))")
            out.append(f"{ind}pos += {n} * {size}")
        else:
            out.extend(check)
            item, i = self.tmp("it"), self.tmp("i")
            out.append(f"{ind}{target} = []")
            out.append(f"{ind}for {i} in range({n}):")
            # Elements of arrays are never null in Kafka's schemas.
            elem = _ElementSpec(f)
            self.read_scalar(out, ind + "    ", elem, t, item, f.is_flexible(self.version, self.flexible))
            out.append(f"{ind}    {target}.append({item})")

    def decoder(self, spec: StructSpec, name: str) -> list[str]:
        v = self.version
        cls = self.class_of(spec)
        out = [f"def {name}(buf, pos):", "    blen = len(buf)", f"    o = _new({cls})", "    field = None", "    try:"]
        ind = "        "
        regular = [f for f in spec.fields if f.present(v) and not f.is_tagged(v)]
        tagged = sorted((f for f in spec.fields if f.present(v) and f.is_tagged(v)), key=_tag_of)
        # Fields this version lacks get their defaults, so every slot is set.
        wire = {f.attr for f in regular} | ({f.attr for f in tagged} if self.flexible else set())
        for f in spec.fields:
            if f.attr not in wire:
                out.append(f"{ind}o.{f.attr} = {self.default_expr(f)}")
        if not self.flexible:
            out.append(f"{ind}o.unknown_tags = None")
        for run in _fixed_runs(regular):
            f = run[0]
            if _is_fixed(f):
                st = struct.Struct(">" + "".join(FIXED_TYPES[g.element][0] for g in run))
                if len(run) == 1:
                    out.append(f"{ind}field = {f.attr!r}")
                else:
                    layout = tuple((g.attr, FIXED_TYPES[g.element][1]) for g in run)
                    out.append(f"{ind}field = {self.value(layout)}")
                targets = ", ".join(f"o.{g.attr}" for g in run)
                out.append(f"{ind}{targets}{',' if len(run) == 1 else ''} = {self.unpacker(st.format)}(buf, pos)")
                out.append(f"{ind}pos += {st.size}")
                for g in run:
                    if g.element == "uuid":
                        out.append(f"{ind}o.{g.attr} = _UUID(bytes=o.{g.attr})")
                continue
            out.append(f"{ind}field = {f.attr!r}")
            self.read_value(out, ind, f, f"o.{f.attr}")
        if self.flexible:
            for f in tagged:
                out.append(f"{ind}o.{f.attr} = {self.default_expr(f)}")
            out.append(f"{ind}field = '(tagged fields)'")
            # Almost every struct carries no tagged fields: one byte, zero.
            out.append(f"{ind}if buf[pos] == 0:")
            out.append(f"{ind}    pos += 1")
            out.append(f"{ind}    o.unknown_tags = None")
            out.append(f"{ind}else:")
            ind = ind + "    "
            self.read_uvarint(out, ind, "ntags")
            out.append(f"{ind}ut = None")
            out.append(f"{ind}if ntags > blen - pos:")
            out.append(f"{ind}    raise DecodeError('%d tagged fields in %d bytes' % (ntags, blen - pos))")
            out.append(f"{ind}for _ in range(ntags):")
            ind2 = ind + "    "
            out.append(f"{ind2}field = '(tagged fields)'")
            self.read_uvarint(out, ind2, "tag")
            self.read_uvarint(out, ind2, "tsize")
            out.append(f"{ind2}tend = pos + tsize")
            out.append(f"{ind2}if tend > blen:")
            out.append(f"{ind2}    raise DecodeError('tagged field %d of %d bytes is longer than the %d bytes left' % (tag, tsize, blen - pos))")
            kw = "if"
            for f in tagged:
                out.append(f"{ind2}{kw} tag == {f.tag}:")
                out.append(f"{ind2}    field = {f.attr!r}")
                self.read_value(out, ind2 + "    ", f, f"o.{f.attr}")
                out.append(f"{ind2}    if pos != tend:")
                out.append(f"{ind2}        raise DecodeError('tagged field size %d does not match its content' % tsize)")
                kw = "elif"
            if tagged:
                out.append(f"{ind2}else:")
                out.append(f"{ind2}    if ut is None:")
                out.append(f"{ind2}        ut = {{}}")
                out.append(f"{ind2}    ut[tag] = _bytes(buf[pos:tend])")
            else:
                out.append(f"{ind2}if ut is None:")
                out.append(f"{ind2}    ut = {{}}")
                out.append(f"{ind2}ut[tag] = _bytes(buf[pos:tend])")
            out.append(f"{ind2}pos = tend")
            out.append(f"{ind}o.unknown_tags = ut")
            ind = ind[:-4]
        out.append(f"{ind}pass")
        out.append("    except DecodeError as e:")
        out.append("        if field:")
        out.append("            e.path.insert(0, field)")
        out.append("            if e.offset is None:")
        out.append("                e.offset = pos")
        out.append("        raise")
        out.append("    except _DF as e:")
        out.append("        raise _dfail(e, field, pos, blen) from None")
        out.append("    return o, pos")
        return out

    def default_expr(self, f: FieldSpec) -> str:
        """An expression giving a fresh default for f in generated code."""
        if f.is_array:
            return "None" if f.default_text == "null" else "[]"
        if f.struct is not None:
            if f.default_text == "null":
                return "None"
            return f"{self.class_of(f.struct)}()"
        return self.default_of(f)

    # ---------------------------------------------------------------- encoding

    def write_value(self, out: list[str], ind: str, f: FieldSpec, value: str, dst: str) -> None:
        v = self.version
        compact = f.is_flexible(v, self.flexible)
        if f.is_array:
            out.append(f"{ind}if {value} is None:")
            self.write_null(out, ind + "    ", f, dst, compact, "array", b"\xff\xff\xff\xff")
            out.append(f"{ind}else:")
            ind2 = ind + "    "
            if compact:
                out.append(f"{ind2}{dst} += _uv(len({value}) + 1)")
            else:
                out.append(f"{ind2}{dst} += _p32(len({value}))")
            t = f.element
            if f.struct is not None:
                enc = self.struct_functions(f.struct)[1]
                item = self.tmp("it")
                out.append(f"{ind2}for {item} in {value}:")
                out.append(f"{ind2}    {enc}({item}, {dst})")
            elif t in FIXED_TYPES and t != "uuid":
                fmt = FIXED_TYPES[t][0]
                out.append(f"{ind2}{dst} += _pack('>%d{fmt}' % len({value}), *{value})")
            else:
                item = self.tmp("it")
                out.append(f"{ind2}for {item} in {value}:")
                self.write_scalar(out, ind2 + "    ", _ElementSpec(f), t, item, dst, compact)
            return
        if f.struct is not None:
            enc = self.struct_functions(f.struct)[1]
            if f.is_nullable(v):
                out.append(f"{ind}if {value} is None:")
                out.append(f"{ind}    {dst}.append(0xFF)")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {dst}.append(1)")
                out.append(f"{ind}    {enc}({value}, {dst})")
            else:
                out.append(f"{ind}if {value} is None:")
                out.append(f"{ind}    raise EncodeError('null is not allowed for this struct in this version')")
                out.append(f"{ind}{enc}({value}, {dst})")
            return
        self.write_scalar(out, ind, f, f.element, value, dst, compact)

    def write_null(self, out: list[str], ind: str, f: _Nullability, dst: str, compact: bool, what: str,
                   legacy_null: bytes) -> None:
        if not f.is_nullable(self.version):
            out.append(f"{ind}raise EncodeError('null is not allowed for this {what} in this version')")
        elif compact:
            out.append(f"{ind}{dst}.append(0)")
        else:
            out.append(f"{ind}{dst} += {legacy_null!r}")

    def write_scalar(self, out: list[str], ind: str, f: _Nullability, t: str, value: str, dst: str,
                     compact: bool) -> None:
        if t in FIXED_TYPES:
            fmt = FIXED_TYPES[t][0]
            pack = self.packer(">" + fmt)
            arg = f"{value}.bytes" if t == "uuid" else value
            out.append(f"{ind}{dst} += {pack}({arg})")
            return
        out.append(f"{ind}if {value} is None:")
        self.write_null(out, ind + "    ", f, dst, compact, t, b"\xff\xff" if t == "string" else b"\xff\xff\xff\xff")
        out.append(f"{ind}else:")
        data = self.tmp("b")
        if t == "string":
            out.append(f"{ind}    {data} = {value}.encode()")
        else:
            out.append(f"{ind}    {data} = {value}")
        if compact:
            out.append(f"{ind}    {dst} += _uv(len({data}) + 1)")
        elif t == "string":
            out.append(f"{ind}    {dst} += _p16(len({data}))")
        else:
            out.append(f"{ind}    {dst} += _p32(len({data}))")
        if t == "records":  # may be a SplicedBytes placeholder (zero-copy Fetch), or be kept out of a
            # GatherBuffer (a Produce request's batches, gather-written): see splice.py
            out.append(f"{ind}    if {data}.__class__ is _bytes and {dst}.__class__ is _bytearray:")
            out.append(f"{ind}        {dst} += {data}")
            out.append(f"{ind}    else:")
            out.append(f"{ind}        _splice({dst}, {data})")
        else:
            out.append(f"{ind}    {dst} += {data}")

    def encoder(self, spec: StructSpec, name: str) -> list[str]:
        v = self.version
        out = [f"def {name}(o, out):", "    field = None", "    try:"]
        ind = "        "
        for f in spec.fields:
            if not f.present(v) and not f.ignorable:
                default = self.default_of(f)
                out.append(f"{ind}if o.{f.attr} != {default}:")
                out.append(f"{ind}    field = {f.attr!r}")
                out.append(f"{ind}    raise EncodeError('has a value other than its default but is not in this "
                           f"version (it is in versions {f.versions[0]}-{f.versions[1]})')")
        regular = [f for f in spec.fields if f.present(v) and not f.is_tagged(v)]
        tagged = sorted((f for f in spec.fields if f.present(v) and f.is_tagged(v)), key=_tag_of)
        for run in _fixed_runs(regular):
            f = run[0]
            if _is_fixed(f):
                st = struct.Struct(">" + "".join(FIXED_TYPES[g.element][0] for g in run))
                args = ", ".join(f"o.{g.attr}.bytes" if g.element == "uuid" else f"o.{g.attr}" for g in run)
                if len(run) == 1:
                    out.append(f"{ind}field = {f.attr!r}")
                else:
                    layout = tuple((g.attr, FIXED_TYPES[g.element][0]) for g in run)
                    out.append(f"{ind}field = {self.value(layout)}")
                out.append(f"{ind}out += {self.packer(st.format)}({args})")
                continue
            out.append(f"{ind}field = {f.attr!r}")
            out.append(f"{ind}x = o.{f.attr}")
            self.write_value(out, ind, f, "x", "out")
        if not self.flexible:
            # As Kafka does: tagged fields cannot be carried by a version without them.
            out.append(f"{ind}if o.unknown_tags:")
            out.append(f"{ind}    field = '(tagged fields)'")
            out.append(f"{ind}    raise EncodeError('unknown tagged fields are set but this version has no tagged fields')")
        if self.flexible:
            out.append(f"{ind}field = '(tagged fields)'")
            out.append(f"{ind}ut = o.unknown_tags")
            known = tuple(sorted(_tag_of(f) for f in tagged))
            if known:
                out.append(f"{ind}if ut and not {self.value(frozenset(known))}.isdisjoint(ut):")
                out.append(f"{ind}    raise EncodeError('unknown tagged field %s has the tag of a known field' % "
                           f"sorted({self.value(frozenset(known))}.intersection(ut)))")
            if tagged:
                out.append(f"{ind}tags = []")
                for f in tagged:
                    default = self.default_of(f)
                    out.append(f"{ind}field = {f.attr!r}")
                    out.append(f"{ind}x = o.{f.attr}")
                    out.append(f"{ind}if x != {default}:")
                    out.append(f"{ind}    tb = bytearray()")
                    self.write_value(out, ind + "    ", f, "x", "tb")
                    out.append(f"{ind}    tags.append(({f.tag}, tb))")
                out.append(f"{ind}if ut:")
                out.append(f"{ind}    tags.extend(ut.items())")
                out.append(f"{ind}    tags.sort(key=lambda kv: kv[0])")
            else:
                out.append(f"{ind}tags = sorted(ut.items()) if ut else ()")
            out.append(f"{ind}if not tags:")
            out.append(f"{ind}    out.append(0)")
            out.append(f"{ind}else:")
            out.append(f"{ind}    out += _uv(len(tags))")
            out.append(f"{ind}    for tag, tb in tags:")
            out.append(f"{ind}        out += _uv(tag)")
            out.append(f"{ind}        out += _uv(len(tb))")
            out.append(f"{ind}        out += tb")
        out.append(f"{ind}pass")
        out.append("    except EncodeError as e:")
        out.append("        if field:")
        out.append("            e.path.insert(0, field)")
        out.append("        raise")
        out.append("    except _EF as e:")
        out.append("        raise _efail(e, field, o) from None")
        return out

    # ---------------------------------------------------------------- assembly

    def struct_functions(self, spec: StructSpec) -> tuple[str, str]:
        """Names of the decoder and encoder for spec, generating them on first use."""
        key = id(spec)
        if key not in self.done:
            n = len(self.done)
            names = (f"dec_{spec.name}_{n}", f"enc_{spec.name}_{n}")
            self.done[key] = names
            self.lines.extend(self.decoder(spec, names[0]))
            self.lines.extend(self.encoder(spec, names[1]))
        return self.done[key]


def _tag_of(f: FieldSpec) -> int:
    assert f.tag is not None  # a field in its tagged versions has a tag
    return f.tag


class _Nullability(Protocol):
    """What reading or writing a scalar asks of its field: a FieldSpec, or an array's element."""

    def is_nullable(self, v: int) -> bool: ...


class _ElementSpec:
    """Stands in for a FieldSpec when reading or writing one element of a primitive array."""

    def __init__(self, f: FieldSpec) -> None:
        self.f = f

    def is_nullable(self, v: int) -> bool:
        return False


def write(message: MessageSpec, version: int, *, record_views: bool = False,
          null_arrays_as_empty: bool = False) -> Written:
    """The source of a message's decode and encode functions at a version (a decoder variant:
    ``record_views``, ``null_arrays_as_empty``; see ``Codec._decoder``), with its constants and
    their recipes (``codec.namespace`` makes them again)."""
    w = _Writer(message, version, record_views=record_views, null_arrays_as_empty=null_arrays_as_empty)
    dec, enc = w.struct_functions(message.struct)
    return Written("\n".join(w.lines) + "\n", w.constants, dec, enc)


def __getattr__(name: str) -> Any:
    # ``Struct``, the base of the message classes, lived here before the classes were generated
    # source; it is in message_base now (which imports this module, hence the lazy lookup).
    if name == "Struct":
        from .message_base import Struct

        return Struct
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
