"""The ``kwire`` command's start-up runs without the cyclic garbage collector.

Importing a command is ~150 modules: thousands of long-lived objects (functions, classes,
codecs) that every collection walks only to keep them.  30-40 collections of them were 5-15 ms
of each command line (issue 24).  ``pause()`` (the kwire command itself, at its first import)
turns the collector off; ``over()`` (once the command's imports are done) turns it back on with
what start-up made frozen (``gc.freeze``: later collections skip those objects), so long-running
commands (a broker, a consumer, a producer reading a pipe) collect as usual.

State lives here, not in ``kwire.cli.main``: run as ``python -m kwire.cli.main``, that module is
``__main__`` and a command importing ``kwire.cli.main`` would get a second copy.
"""

from __future__ import annotations

import gc

__all__ = ["over", "pause"]

_paused = False


def pause() -> None:
    """Turn the collector off for the start-up (only the kwire command: a program that imports
    kwire keeps its collector as it set it)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def over() -> None:
    """The start-up is over: the collector back on if ``pause`` turned it off (idempotent)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
