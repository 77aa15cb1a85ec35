"""A module logger that imports ``logging`` only when a record could be shown.

``logging`` (with traceback, string, textwrap...) is a few milliseconds of every command line's
start, and ``kwire produce`` logs nothing unless something goes wrong.  While no module has
imported ``logging``, no handler, level or filter can have been set, and Python's default shows
WARNING and above only (its last-resort handler): so debug and info records are dropped then,
and anything else imports ``logging`` and goes through the real logger, as it would have.
Once ``logging`` is loaded (by the application, asyncio, a test's caplog...), every call is the
real logger's.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["LazyLogger"]


class LazyLogger:
    """``logging.getLogger(name)``, fetched on the first record that could be shown."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def _real(self) -> Any:
        import logging

        return logging.getLogger(self.name)

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if "logging" in sys.modules:
            self._real().debug(msg, *args, **kwargs)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if "logging" in sys.modules:
            self._real().info(msg, *args, **kwargs)

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._real().warning(msg, *args, **kwargs)

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._real().error(msg, *args, **kwargs)

    def exception(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._real().exception(msg, *args, **kwargs)
