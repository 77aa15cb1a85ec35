"""The synchronous facades' one helper: a blocking method documented as its asyncio twin.

``Producer``, ``Consumer`` and ``Admin`` run the asyncio client on kwire's loop thread.  Each
blocking method does what the ``Async*`` method of the same name does; ``mirrors`` gives it that
method's documentation, so ``help(Consumer.seek)`` says what ``AsyncConsumer.seek`` does
instead of nothing, and the two cannot drift apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["mirrors"]

F = TypeVar("F", bound=Callable[..., Any])


def mirrors(twin: Any, *, blocking: bool = False) -> Callable[[F], F]:
    """Decorate a facade method with the documentation of ``twin`` (its asyncio method or
    property); ``blocking`` adds that the call waits for what the coroutine waits for."""
    doc = getattr(twin, "__doc__", None)
    if doc is None:
        raise TypeError(f"{twin!r} has no docstring to mirror")

    def decorate(fn: F) -> F:
        note = "\n\nBlocks until it is done (the asyncio twin awaits the same)." if blocking else ""
        fn.__doc__ = inspect.cleandoc(doc) + note
        return fn

    return decorate
