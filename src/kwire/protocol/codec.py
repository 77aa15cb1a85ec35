"""A message's compiled codec at run time: what the generated functions call, and their code kept
on disk.

``compiler`` writes, for each (message, version), the Python source of straight-line decode and
encode functions; this module runs them.  Writing that source from the schema is most of what a
codec costs once its compiled code is cached (~0.1-0.8 ms a message; a command line uses about
ten), so the cache is keyed by what decides the source, not by the source: the message's name,
version and variant, with the files the writer reads (compiler.py, schema.py, the generated
_schema.py, this module) stamped as Python stamps a module's .pyc (their mtime and size).  A hit
runs the kept code in a namespace rebuilt from the kept recipes of its constants (struct
formats, classes found by their qualified names, defaults) and reads neither the schema nor the
compiler: a generated class's codec (``Message.codec``, ``schema_codec``) starts from the
message's name, and its spec is only built on a miss.  A miss, a spec that is not the schema's
(a test's own), or a stamp that changed, writes the source again (``compiler.write``).
"""

from __future__ import annotations

import marshal
import os
import struct
import sys
import threading
import uuid
from collections.abc import Callable
from functools import cache
from types import CodeType
from typing import TYPE_CHECKING, Any

from .errors import DecodeError, EncodeError, ProtocolError
from .primitives import INT8, INT16, INT32, Buffer, read_uvarint, uvarint
from .schema import MessageSpec, message_spec
from .splice import splice_records

if TYPE_CHECKING:
    from .message_base import Struct

__all__ = ["Codec", "codec", "schema_codec"]

# A compiled decoder: (input, offset) -> (the struct read, the offset after it).  The struct's class
# is the spec's, chosen at run time (one Codec type serves every message), hence Any.
Decoder = Callable[[Buffer, int], tuple[Any, int]]
# A compiled encoder: appends the struct's bytes to the buffer.
Encoder = Callable[["Struct", bytearray], None]
# What a failure handler gets as the field being read or written: its name (None before the first
# field), or for a run of fixed-width fields handled in one step, (name, size) pairs when decoding
# and (name, struct format) pairs when encoding.
_DecodingField = str | None | tuple[tuple[str, int], ...]
_EncodingField = str | None | tuple[tuple[str, str], ...]

_DECODE_FAILURES = (struct.error, IndexError, ValueError, OverflowError, TypeError, KeyError, MemoryError)
_ENCODE_FAILURES = (struct.error, TypeError, AttributeError, ValueError, OverflowError, KeyError)

# Unpackers of primitive arrays by element count: building the format string and looking it up
# in struct's cache for every array costs more than decoding a short array.
_CACHED_ARRAY_LEN = 64


@cache
def _array_unpackers(fmt: str) -> list[Callable[[Buffer, int], tuple[Any, ...]]]:
    """The unpackers of arrays of 0.._CACHED_ARRAY_LEN-1 elements of a format, made when a codec
    first needs them (all formats at import were ~0.5 ms of every start-up; a command uses one
    or two)."""
    return [struct.Struct(f">{n}{fmt}").unpack_from for n in range(_CACHED_ARRAY_LEN)]


def _array_unpacker(fmt: str, n: int) -> Callable[[Buffer, int], tuple[Any, ...]]:
    return struct.Struct(f">{n}{fmt}").unpack_from


def _decode_failure(exc: Exception, field: _DecodingField, pos: int, blen: int) -> DecodeError:
    """The DecodeError for a low-level failure while reading ``field`` at ``pos``.

    ``field`` is a name, or for a run of fixed-width fields read in one step a tuple of
    (name, size) pairs: the field that ran past the end is found from the bytes that were left.
    """
    if isinstance(field, tuple):
        left = blen - pos
        for name, size in field:
            if left < size:
                field = name
                break
            left -= size
            pos += size
        else:
            field = field[0][0]
    if isinstance(exc, (struct.error, IndexError)):
        reason = "truncated: the data ends inside this field"
    elif isinstance(exc, UnicodeDecodeError):
        reason = "invalid UTF-8 in a string"
    elif isinstance(exc, MemoryError):
        reason = "a length prefix asks for more memory than is available"
    else:
        reason = str(exc) or type(exc).__name__
    return DecodeError(reason, path=[field] if field else [], offset=pos)


def _encode_failure(exc: Exception, field: _EncodingField, obj: object) -> EncodeError:
    """The EncodeError for a value that could not be written.

    For a run of fixed-width fields written in one step (``field`` a tuple of (name, format)
    pairs), each value is packed alone to find the one at fault.
    """
    if isinstance(field, tuple):
        culprit = field[0][0]
        for name, fmt in field:
            value: Any = getattr(obj, name, None)  # any value: finding the one that does not pack
            try:
                struct.pack(">" + fmt, value.bytes if fmt == "16s" else value)
            except (struct.error, TypeError, AttributeError) as e:
                culprit, exc = name, e
                break
        field = culprit
    return EncodeError(f"cannot encode value: {exc}", path=[field] if field else [])



# The decode error of a null where the version allows none (the lenient decode forgives arrays).
NOT_NULLABLE = "in a field that is not nullable in this version"
_NULL_ARRAY = f"null array {NOT_NULLABLE}"

# What every generated function may call, by the names the compiler writes.
_BASE_NAMESPACE: dict[str, Any] = {
    "DecodeError": DecodeError,
    "EncodeError": EncodeError,
    "_DF": _DECODE_FAILURES,
    "_EF": _ENCODE_FAILURES,
    "_dfail": _decode_failure,
    "_efail": _encode_failure,
    "_ruv": read_uvarint,
    "_uv": uvarint,
    "_i8": INT8.unpack_from,
    "_i16": INT16.unpack_from,
    "_i32": INT32.unpack_from,
    "_p8": INT8.pack,
    "_p16": INT16.pack,
    "_p32": INT32.pack,
    "_unpack_n": _array_unpacker,
    "_new": object.__new__,
    "_pack": struct.pack,
    "_UUID": uuid.UUID,
    "_str": str,
    "_bytes": bytes,
    "_bytearray": bytearray,
    "_mv": memoryview,
    "_splice": splice_records,
}

# A constant of generated code and how to make it again in another process (marshal-able, and
# without the message's spec, so that a cache hit never builds one): ("unpack", format) and
# ("pack", format): a struct.Struct's method; ("arrays", format): the cached unpackers of primitive
# arrays; ("class", qualname): a generated struct class by its qualified name
# (``MetadataRequest.MetadataRequestTopic``); ("new", qualname): a fresh instance of it, all
# defaults; ("uuid", n): uuid.UUID(int=n); ("value", v): v itself (a number, a string, a list, a
# layout tuple, a frozenset of tags).
Recipe = tuple[Any, ...]
Constants = dict[str, tuple[Any, Recipe]]


def _class_named(qualname: str) -> Any:
    """A generated struct class by its qualified name: the message's class, then nested classes."""
    from .message_base import message_class  # (message_base imports this module)

    owner, *path = qualname.split(".")
    cls: Any = message_class(owner)
    for name in path:
        cls = getattr(cls, name)
    return cls


def _made(recipe: Recipe) -> Any:
    kind = recipe[0]
    if kind == "unpack":
        return struct.Struct(recipe[1]).unpack_from
    if kind == "pack":
        return struct.Struct(recipe[1]).pack
    if kind == "arrays":
        return _array_unpackers(recipe[1])
    if kind == "class":
        return _class_named(recipe[1])
    if kind == "new":
        return _class_named(recipe[1])()
    if kind == "uuid":
        return uuid.UUID(int=recipe[1])
    if kind == "value":
        return recipe[1]
    raise ValueError(f"unknown codec constant recipe {kind!r}")


def namespace(recipes: dict[str, Recipe]) -> dict[str, Any]:
    """The globals of a message's generated functions: the helpers, and its constants made from
    their recipes (``compiler`` checks that they give what it wrote)."""
    ns = dict(_BASE_NAMESPACE)
    for name, recipe in recipes.items():
        ns[name] = _made(recipe)
    return ns


class Written:
    """Generated source of one (message, version, variant), as ``compiler.write`` gives it."""

    __slots__ = ("constants", "decoder", "encoder", "source")

    def __init__(self, source: str, constants: Constants, decoder: str, encoder: str) -> None:
        self.source = source
        self.constants = constants  # name -> (value, recipe)
        self.decoder = decoder      # the message's decoder function's name in the source
        self.encoder = encoder


class Codec:
    """The compiled decoder and encoder of one message at one version."""

    __slots__ = ("name", "version", "decode_from", "encode_into", "source", "_spec", "_variants")

    def __init__(self, message: MessageSpec | str, version: int) -> None:
        """``message``: a spec, or the name of one of the schema's messages (whose spec is then
        built only if the code is not in the cache: see ``schema_codec``)."""
        if isinstance(message, str):
            self.name, self._spec = message, None
        else:
            self.name, self._spec = message.name, message
        self.version = version
        built = _built(self.name, self._spec, version, False, False)
        assert built is not None  # (the exact decoder is always built)
        self.source, self.decode_from, self.encode_into = built
        # (record_views, null_arrays_as_empty) -> the decoder compiled that way, on first use
        self._variants: dict[tuple[bool, bool], Decoder] = {(False, False): self.decode_from}

    @property
    def message(self) -> MessageSpec:
        """The message's spec (built on first use when the codec came from the cache)."""
        if self._spec is None:
            self._spec = message_spec(self.name)
        return self._spec

    def _decoder(self, record_views: bool, null_arrays_as_empty: bool = False) -> Decoder:
        """The decoder whose ``records`` fields are views of the input (``record_views``), and
        that reads a null array where the version allows none as empty (``null_arrays_as_empty``):
        each compiled on first use."""
        key = (record_views, null_arrays_as_empty)
        found = self._variants.get(key)
        if found is None:
            built = _built(self.name, self._spec, self.version, record_views, null_arrays_as_empty, self.source)
            # None: nothing this variant changes in this message
            found = self.decode_from if built is None else built[1]
            self._variants[key] = found
        return found

    def decode(self, data: Buffer, pos: int = 0, *, strict: bool = True, record_views: bool = False,
               forgive_null_arrays: bool = False) -> tuple[Any, int]:
        """Decode one message from data[pos:]; with strict, bytes left over are an error.

        ``forgive_null_arrays``: a null array in a field that this version does not let be null
        (librdkafka's mock broker sends them) reads as empty instead of failing: how a client
        reads its peers' answers.  That decoder is only tried after the exact one failed, so
        correct input costs nothing.

        With ``record_views``, ``records`` fields are ``memoryview`` slices of ``data`` instead
        of ``bytes`` copies: no copy of the (large) record batches, and writable when ``data``
        is (a broker stamps offsets into a Produce request's batches in place).  The views keep
        ``data`` alive and, while they exist, a ``bytearray`` ``data`` cannot be resized.
        """
        decode_from = self._decoder(record_views) if record_views else self.decode_from
        try:
            try:
                obj, end = decode_from(data, pos)
            except DecodeError as e:
                if not forgive_null_arrays or _NULL_ARRAY not in str(e):
                    raise
                obj, end = self._decoder(record_views, null_arrays_as_empty=True)(data, pos)
        except ProtocolError as e:
            e.what, e.version = self.name, self.version
            raise
        if strict and end != len(data):
            raise DecodeError(f"{len(data) - end} bytes left over after the message", what=self.name,
                              version=self.version, offset=end)
        return obj, end

    def encode(self, obj: Struct, out: bytearray | None = None) -> bytearray:
        """Append the encoding of obj to out (a new bytearray if None) and return it."""
        if out is None:
            out = bytearray()
        try:
            self.encode_into(obj, out)
        except ProtocolError as e:
            e.what, e.version = self.name, self.version
            raise
        return out


def _stamp() -> tuple[int, ...]:
    """What the generated source of a schema message depends on, as Python stamps a module's .pyc
    (mtime and size): the writer, the spec classes, the schema data, and this module."""
    global _STAMP
    if _STAMP is None:
        here = os.path.dirname(__file__)
        stamp: list[int] = [_FORMAT]
        for name in ("compiler.py", "schema.py", "_schema.py", "codec.py"):
            try:
                st = os.stat(os.path.join(here, name))
            except OSError:  # (a frozen or zipped install: the cache is off anyway)
                stamp += (-1, -1)
            else:
                stamp += (st.st_mtime_ns, st.st_size)
        _STAMP = tuple(stamp)
    return _STAMP


_STAMP: tuple[int, ...] | None = None
# The layout of a cache file; a change of it makes every file a miss.
_FORMAT = 2  # 2: recipes without the spec (class names, not struct indexes)


def _cache_path(name: str, spec: MessageSpec | None, version: int, record_views: bool,
                null_arrays_as_empty: bool) -> str | None:
    """Where the code of this (message, version, variant) is kept: None when it is not (no cache
    directory, or a spec that is not the schema's, whose name says nothing of its fields).
    ``spec`` None: the schema's message of that name."""
    if _CODEC_CACHE is None:
        return None
    if spec is not None:
        try:
            if message_spec(name) is not spec:
                return None
        except KeyError:  # (a test's own spec)
            return None
    variant = ("-views" if record_views else "") + ("-nulls" if null_arrays_as_empty else "")
    # The interpreter's exact version in the name: a code object is only read back by the Python
    # that wrote it (the cache tag alone spans the bugfix releases of one version).
    return os.path.join(_CODEC_CACHE, f"{name}-v{version}{variant}.{sys.implementation.cache_tag}-"
                                      f"{sys.hexversion:x}.codec")


def _built(name: str, spec: MessageSpec | None, version: int, record_views: bool, null_arrays_as_empty: bool,
           base_source: str | None = None) -> tuple[str, Decoder, Encoder] | None:
    """The source, decoder and encoder of a (message, version, variant): from the cache, or
    written and compiled (and kept).  ``spec`` None: the schema's message ``name``, whose spec is
    built only on a miss.  With ``base_source`` (a variant's), None when the variant's source is
    that one (nothing to compile)."""
    path = _cache_path(name, spec, version, record_views, null_arrays_as_empty)
    if path is not None:
        try:
            with open(path, "rb") as f:
                stamp, source, code, recipes, dec, enc = marshal.loads(f.read())
            if stamp == _stamp() and (code is None or isinstance(code, CodeType)):
                if code is None:
                    return None  # (kept only for variants that are their base)
                ns = namespace(recipes)
                exec(code, ns)
                return source, ns[dec], ns[enc]
        except (OSError, ValueError, EOFError, TypeError, KeyError, IndexError, AttributeError):
            pass  # missing, damaged, or of another layout: written again
    from . import compiler  # the writer: only on a miss

    if spec is None:
        spec = message_spec(name)
    written = compiler.write(spec, version, record_views=record_views, null_arrays_as_empty=null_arrays_as_empty)
    same = base_source is not None and written.source == base_source
    code = None if same else compile(written.source, _filename(name, version, record_views, null_arrays_as_empty),
                                     "exec")
    if path is not None and not sys.dont_write_bytecode:
        _keep(path, (_stamp(), written.source, code, {n: recipe for n, (_, recipe) in written.constants.items()},
                     written.decoder, written.encoder))
    if code is None:
        return None
    ns = dict(_BASE_NAMESPACE)
    ns.update((n, value) for n, (value, _) in written.constants.items())
    exec(code, ns)
    return written.source, ns[written.decoder], ns[written.encoder]


def _filename(name: str, version: int, record_views: bool, null_arrays_as_empty: bool) -> str:
    """The generated code's name in tracebacks."""
    variant = f" {(record_views, null_arrays_as_empty)}" if record_views or null_arrays_as_empty else ""
    return f"<kwire {name} v{version}{variant}>"


def _keep(path: str, entry: tuple[Any, ...]) -> None:
    """Write a cache file whole or not at all (another process may be reading it); a failure to
    write (a read-only install) only means compiling next time too."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # A name of this process and thread: two threads may compile the same codec at once.
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(marshal.dumps(entry))
        os.replace(tmp, path)
    except (OSError, ValueError):  # (ValueError: a constant marshal cannot write)
        pass


# Where _built keeps code objects (None: no cache, e.g. a frozen install without a file).
_CODEC_CACHE: str | None = (os.path.join(os.path.dirname(__file__), "__pycache__", "codecs")
                            if "__file__" in globals() else None)


@cache
def codec(message: MessageSpec, version: int) -> Codec:
    """The compiled codec for a message at a version (compiled once, then cached): for one of the
    schema's specs, the same object as ``schema_codec``'s."""
    try:
        schemas = message_spec(message.name) is message
    except KeyError:  # (a test's own spec)
        schemas = False
    return schema_codec(message.name, version) if schemas else Codec(message, version)


@cache
def schema_codec(name: str, version: int) -> Codec:
    """The compiled codec of the schema's message ``name`` at a version (once, then cached): from
    the code cache without building the message's spec (``Message.codec``'s way; the caller
    checks the version, as the generated class's MIN_VERSION/MAX_VERSION do)."""
    return Codec(name, version)
