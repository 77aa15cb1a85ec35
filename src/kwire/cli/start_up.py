"""The ``kwire`` command's start-up runs without the cyclic garbage collector, and without
importing ``inspect`` for ``dataclasses``.

Importing a command is ~150 modules: thousands of long-lived objects (functions, classes,
codecs) that every collection walks only to keep them.  30-40 collections of them were 5-15 ms
of each command line (issue 24).  ``pause()`` (the kwire command itself, at its first import)
turns the collector off; ``over()`` (once the command's imports are done) turns it back on with
what start-up made frozen (``gc.freeze``: later collections skip those objects), so long-running
commands (a broker, a consumer, a producer reading a pipe) collect as usual.

``dataclasses`` imports ``inspect`` (with ``ast``, ``dis`` and ``tokenize``: ~10 ms, the largest
stdlib import of a client command line) for one use: writing a docstring for a dataclass that has
none, which the client's all have.  From ``pause()`` to ``over()``, ``inspect`` is a stand-in in
``sys.modules`` that imports the real module at its first attribute read; ``over()`` takes it out
again, so a later ``import inspect`` gets the real module.  A module imported meanwhile keeps the
stand-in, which from its first use on reads the real module's names.

State lives here, not in ``kwire.cli.main``: run as ``python -m kwire.cli.main``, that module is
``__main__`` and a command importing ``kwire.cli.main`` would get a second copy.
"""

from __future__ import annotations

import gc
import importlib
import sys
import types
from typing import Any

__all__ = ["over", "pause"]

_paused = False
_DEFERRED = ("inspect",)  # see the module's docstring


class _Deferred(types.ModuleType):
    """A module's stand-in: its first attribute read imports the real module, whose names it
    then holds (a read of a name it holds never comes here)."""

    def __getattr__(self, attr: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        real = importlib.import_module(self.__name__)
        self.__dict__.update(real.__dict__)
        return getattr(real, attr)


def pause() -> None:
    """Turn the collector off for the start-up, and defer ``inspect`` (only the kwire command:
    a program that imports kwire keeps its collector and its imports as it set them)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True
    for name in _DEFERRED:
        if name not in sys.modules:
            sys.modules[name] = _Deferred(name)


def over() -> None:
    """The start-up is over: the collector back on if ``pause`` turned it off, and deferred
    modules no longer stood in for (idempotent)."""
    global _paused
    for name in _DEFERRED:
        if isinstance(sys.modules.get(name), _Deferred):
            del sys.modules[name]
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
