"""kwire's one settings parser: dataclass fields checked against their annotations.

The broker (TOML) and the clients (Kafka property names, .properties files, ``-X key=value``)
describe their settings as dataclass fields; this module reads each field's value type from
its annotation and checks or coerces a value to it, with errors that name the setting:

    kinds = setting_types(BrokerConfig)                   # {"port": SettingType(int, optional=False), ...}
    coerce("port", "x", kinds["port"].kind)              # ConfigError: port must be an integer, got 'x'
    coerce("linger.ms", "5", int, parse_text=True)       # 5: text as in a .properties file
    unknown_setting("prot", ["port", "host"])            # ConfigError: unknown setting 'prot' (did you mean 'port'?)
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

__all__ = [
    "ConfigError",
    "SettingType",
    "check_choice",
    "check_range",
    "coerce",
    "did_you_mean",
    "setting_types",
    "unknown_setting",
    "value_type",
]


class ConfigError(ValueError):
    """A setting that is missing, unknown, of the wrong type or out of range; the message names it."""


class SettingType(NamedTuple):
    """What a field accepts: ``kind`` is bool, int, float, str, Path or tuple (a tuple of strings).
    (A NamedTuple: a frozen dataclass's generated methods were ~1 ms of every client command
    line's start-up.)"""

    kind: type
    optional: bool = False  # the annotation allows None


# What the messages call each kind ("port must be an integer, got 'x'"); Path's below.
_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               tuple: "a list of strings"}
_INTEGER = re.compile(r"[+-]?\d+")  # what Java's Integer.parseInt takes: no "1_000", no "1e3"


def _is_path(kind: Any) -> bool:
    """Whether ``kind`` is pathlib.Path.  Only a module that imported pathlib can annotate a
    setting with Path, so pathlib is not imported here: with urllib.parse and ipaddress it is a
    few ms of the start-up of every client command line, whose settings have no paths (issue 24)."""
    pathlib = sys.modules.get("pathlib")
    return pathlib is not None and kind is pathlib.Path


def _words(kind: type) -> str:
    return "a path string" if _is_path(kind) else _TYPE_WORDS[kind]


def value_type(hint: Any) -> SettingType:
    """The setting type of a resolved annotation: ``int | None`` -> int (optional), ``tuple[str, ...]`` -> tuple."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"a setting has one value type, not {hint!r}")
        hint = args[0]
    kind = typing.get_origin(hint) or hint
    if kind is list:  # read as a tuple: configs are frozen, their lists too
        kind = tuple
    if kind not in _TYPE_WORDS and not _is_path(kind):
        raise TypeError(f"settings of type {hint!r} are not supported")
    return SettingType(kind, optional)


def _setting_types(cls: type) -> dict[str, SettingType]:
    """Each field of dataclass ``cls`` with its setting type.  Fields of other types (a nested
    dataclass, say) are left out: the caller handles them."""
    found: dict[str, SettingType] = {}
    for f in dataclasses.fields(cls):
        try:
            found[f.name] = value_type(_field_hint(cls, f))
        except TypeError:
            continue
    return found


def _field_hint(cls: type, f: dataclasses.Field) -> Any:
    """The field's annotation evaluated where it was written, as ``typing.get_type_hints`` does
    for these classes, but each distinct text once: get_type_hints compiled one expression per
    field (~40 for a client config, 5-10 ms of every client command line's start-up) where a
    handful of texts ("int", "str | None"...) repeat."""
    hint = f.type
    if not isinstance(hint, str):
        return hint
    owner = next((c for c in cls.__mro__ if f.name in c.__dict__.get("__annotations__", {})), cls)
    return _evaluated(hint, owner.__module__)


# Cached per class.  Typed as a plain callable: through functools.cache's own type, mypy would ask
# a config class to be Hashable by its instances' __hash__.
setting_types: Callable[[type], dict[str, SettingType]] = functools.cache(_setting_types)


@functools.cache
def _evaluated(text: str, module: str) -> Any:
    return eval(text, vars(sys.modules[module]))  # noqa: S307 - an annotation of kwire's own code


def coerce(name: str, value: Any, kind: type, *, parse_text: bool = False) -> Any:
    """``value`` checked against ``kind``; with ``parse_text``, strings are parsed as Kafka parses
    property values ("1000" -> 1000, "TRUE" -> True, "a, b" -> ("a", "b")).

    bool is never taken for an int nor an int for a bool.  A tuple setting takes a list or tuple of
    strings, or one comma-separated string (always: that is how every Kafka client writes lists).
    """
    if kind is tuple:
        return _coerce_list(name, value)
    path = _is_path(kind)
    if parse_text and isinstance(value, str) and kind is not str and not path:
        return _parse(name, value, kind)
    if path:
        if isinstance(value, (str, kind)):
            return kind(value)
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    raise ConfigError(f"{name} must be {_words(kind)}, got {value!r}")


def _parse(name: str, text: str, kind: type) -> Any:
    word = text.strip()
    if kind is bool and word.lower() in ("true", "false"):
        return word.lower() == "true"
    if kind is int and _INTEGER.fullmatch(word):
        return int(word)
    if kind is float:
        try:
            return float(word)
        except ValueError:
            pass
    raise ConfigError(f"{name} must be {_words(kind)}, got {text!r}")


def _coerce_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return tuple(item.strip() for item in value)
    raise ConfigError(f"{name} must be {_TYPE_WORDS[tuple]} (or one comma-separated string), got {value!r}")


def check_range(name: str, value: int | float, low: int | float | None = None,
                high: int | float | None = None) -> None:
    """ConfigError unless ``low <= value <= high`` (either bound may be None); it names the bound crossed."""
    if low is not None and value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ConfigError(f"{name} must be <= {high}, got {value!r}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """ConfigError unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` when it is a likely typo of it, else None."""
    import difflib  # only for a mistake: not with every command line's start-up

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_setting(name: str, known: Iterable[str], *, what: str = "setting", where: str = "",
                    list_known: bool = False) -> ConfigError:
    """The error for a key that is no setting: ``<where>: unknown <what> 'x' (did you mean 'y'?)``.

    With ``list_known`` and no close match, the known names are listed instead.
    """
    known = sorted(known)
    message = f"{where}: " if where else ""
    message += f"unknown {what} {name!r}"
    guess = did_you_mean(name, known)
    if guess is not None:
        message += f" (did you mean {guess!r}?)"
    elif list_known:
        message += f" (known: {', '.join(known)})"
    return ConfigError(message)
