"""Errors of a response: every error_code field, found by a walker compiled per (api, version)."""

from __future__ import annotations

import itertools
from typing import Any

from kwire.protocol import error_name, response_class

_WALKERS: dict[tuple[int, int], Any] = {}  # (api key, version) -> walker, or None: no error fields
_UNSET = object()
_ERROR_NAMES: dict[int, str] = {}


def _has_error_field(struct_spec, version: int) -> bool:
    for f in struct_spec.fields:
        if not f.present(version):
            continue
        if f.attr == "error_code" and f.struct is None and not f.is_array:
            return True
        if f.struct is not None and _has_error_field(f.struct, version):
            return True
    return False


def _compile_error_walker(api_key: int, version: int):
    """A function ``walk(response, out)`` appending every non-zero error code, each struct's own
    before its children's (so the top-level error comes first); None if the response has none.

    Written as straight-line Python and compiled once, like the codec itself: a generic walk
    over the schema per response costs more than decoding the response.
    """
    spec = response_class(api_key).SPEC
    lines: list[str] = []
    names = itertools.count()

    def emit(struct_spec, var: str, ind: str) -> None:
        fields = [f for f in struct_spec.fields if f.present(version)]
        for f in fields:
            if f.attr == "error_code" and f.struct is None and not f.is_array:
                lines.extend((f"{ind}c = {var}.error_code", f"{ind}if c:", f"{ind}    out.append(c)"))
        for f in fields:
            if f.struct is None or not _has_error_field(f.struct, version):
                continue
            x = f"x{next(names)}"
            if f.is_array:
                lines.append(f"{ind}for {x} in {var}.{f.attr} or ():")
            else:
                lines.extend((f"{ind}{x} = {var}.{f.attr}", f"{ind}if {x} is not None:"))
            emit(f.struct, x, ind + "    ")

    emit(spec.struct, "o", "    ")
    if not lines:
        return None
    namespace: dict[str, Any] = {}
    source = "def walk(o, out):\n" + "\n".join(lines) + "\n"
    exec(compile(source, f"<kwire analyze {spec.name} v{version} errors>", "exec"), namespace)
    return namespace["walk"]


def _error_walker(api_key: int, version: int):
    key = (api_key, version)
    walker = _WALKERS.get(key, _UNSET)
    if walker is _UNSET:
        walker = _WALKERS[key] = _compile_error_walker(api_key, version)
    return walker


def _error_name(code: int) -> str:
    name = _ERROR_NAMES.get(code)
    if name is None:
        name = _ERROR_NAMES[code] = error_name(code)
    return name
