"""A package's public names loaded from their modules on first use (PEP 562), in one place.

``kwire.client`` and ``kwire.security`` export names whose modules cost a command line's
start-up (the producer, SCRAM's hashlib and hmac...) although most commands use few of them.
Each keeps a table of name -> defining module and forwards its module ``__getattr__`` and
``__dir__`` here::

    _exports = LazyExports(__name__, {"Producer": "producer", ...}, globals())

    def __getattr__(name: str) -> Any:
        return _exports.load(name)

    def __dir__() -> list[str]:
        return _exports.names()

The two small functions stay in the package (not assigned from here) so that type checkers see
a module ``__getattr__`` they recognise.  A leaf of kwire: it imports nothing of kwire, so every
layer may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["LazyExports"]


class LazyExports:
    """The lazily imported names of one package.

    ``homes`` maps each public name to the module that defines it, relative to the package
    (``"producer"`` for ``kwire.client.producer``); ``namespace`` is the package's ``globals()``,
    where a name is stored once loaded so that later lookups no longer reach ``__getattr__``.
    """

    __slots__ = ("_homes", "_namespace", "_package")

    def __init__(self, package: str, homes: Mapping[str, str], namespace: dict[str, Any]) -> None:
        self._package = package
        self._homes = homes
        self._namespace = namespace

    def load(self, name: str) -> Any:
        """The package's attribute ``name``, importing its module (for the package's ``__getattr__``)."""
        module = self._homes.get(name)
        if module is None:
            raise AttributeError(f"module {self._package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", self._package), name)
        self._namespace[name] = value
        return value

    def names(self) -> list[str]:
        """Every name of the package, loaded or not (for the package's ``__dir__``)."""
        return sorted(set(self._namespace) | set(self._homes))
