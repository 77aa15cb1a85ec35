"""Kafka's large generated enums (``ErrorCode``, ``ApiKey``) made the way the standard library makes its own.

The class statement of an IntEnum checks every member as it is added: for ErrorCode's 133
members that is ~3 ms of every command's start-up.  ``enum._simple_enum``, with which the
standard library builds its own large enums (``http.HTTPStatus``, ``re.RegexFlag``), makes the
same IntEnum from the body of a plain class several times faster.  It is private (Python 3.11+):
where it is missing, the body becomes an IntEnum through the metaclass, as the class statement
would make it.  Type checkers see an ordinary IntEnum subclass (``IntEnumBody`` is ``IntEnum``
to them).

    @int_enum
    class Color(IntEnumBody):
        RED = 1
"""

from __future__ import annotations

import enum
from enum import IntEnum
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from enum import IntEnum as IntEnumBody
else:
    IntEnumBody = object  # the body is a plain class; int_enum makes the IntEnum of it

__all__ = ["IntEnumBody", "int_enum"]

_C = TypeVar("_C", bound=type)


def int_enum(body: _C) -> _C:
    """The IntEnum whose members, methods and docstring are those of ``body`` (a plain class)."""
    simple: Any = getattr(enum, "_simple_enum", None)
    if simple is not None:
        made: _C = simple(IntEnum)(body)
        return made
    return _int_enum_by_class_statement(body)


def _int_enum_by_class_statement(body: _C) -> _C:
    """What ``class Name(IntEnum): <body>`` makes (the fallback, and the reference in tests)."""
    meta: Any = type(IntEnum)  # (EnumMeta)
    namespace = meta.__prepare__(body.__name__, (IntEnum,))
    for name, value in body.__dict__.items():
        if name not in ("__dict__", "__weakref__"):
            namespace[name] = value
    made: _C = meta(body.__name__, (IntEnum,), namespace)
    return made
