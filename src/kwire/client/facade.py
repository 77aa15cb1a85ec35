"""The one way kwire makes a synchronous facade of an asyncio client.

``Producer``, ``Consumer``, ``ShareConsumer`` and ``Admin`` run their ``Async*`` twin on kwire's
loop thread.  A facade class names its twin (``_twin``) and says how it waits for a coroutine
(``_wait``); each plain forwarding method is then one line::

    class Admin(SyncFacade):
        create_topics = blocking(AsyncAdmin.create_topics)   # awaits the coroutine, returns its result
    class Consumer(SyncFacade):
        seek = on_loop(AsyncConsumer.seek)                    # a plain method, run on the loop thread

The forwarder has the twin's signature (for type checkers, through ``ParamSpec``; for
``help()`` and ``inspect``, through ``__wrapped__``) and its docstring, so the two cannot drift
apart.  A method that does more than forward (converting arguments, running callbacks in the
caller's thread) is written out by hand and documented with ``mirrors``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from .loop_thread import LoopThread

__all__ = ["SyncFacade", "blocking", "mirrors", "on_loop"]

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")

_BLOCKS = "\n\nBlocks until it is done (the asyncio twin awaits the same)."


def mirrors(twin: Any, *, blocking: bool = False) -> Callable[[F], F]:
    """Decorate a hand-written facade method with the documentation of ``twin`` (its asyncio
    method or property); ``blocking`` adds that the call waits for what the coroutine waits for."""
    doc = getattr(twin, "__doc__", None)
    if doc is None:
        raise TypeError(f"{twin!r} has no docstring to mirror")

    def decorate(fn: F) -> F:
        fn.__doc__ = inspect.cleandoc(doc) + (_BLOCKS if blocking else "")
        return fn

    return decorate


class SyncFacade:
    """What ``blocking`` and ``on_loop`` need of a facade: its asyncio twin and kwire's loop thread."""

    _loop: LoopThread

    @property
    def _twin(self) -> Any:
        raise NotImplementedError

    def _wait(self, coro: Coroutine[Any, Any, R], timeout: float | None) -> R:
        """Run ``coro`` on the loop thread and wait for it; ``timeout`` is the call's own
        ``timeout`` argument, when it has one (the coroutine keeps that deadline itself)."""
        return self._loop.run(coro)

    def _on_loop(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Call a plain method of the twin on the loop thread (the twin's state lives there)."""
        async def call() -> R:
            return fn(*args, **kwargs)
        return self._loop.run(call())


def blocking(twin: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> Callable[Concatenate[SyncFacade, P], R]:
    """A facade method that runs the coroutine method ``twin`` of the asyncio client and returns
    its result."""
    name = twin.__name__

    @mirrors(twin, blocking=True)
    @functools.wraps(twin)
    def method(self: SyncFacade, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, Coroutine[Any, Any, R]] = getattr(self._twin, name)  # twin, on the asyncio client
        # The call's own ``timeout`` argument, a ``float | None`` in every client's signature (P
        # does not let mypy see one parameter by name).
        timeout = cast("float | None", kwargs.get("timeout"))
        return self._wait(bound(*args, **kwargs), timeout)

    return method


def on_loop(twin: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[SyncFacade, P], R]:
    """A facade method that calls the plain method ``twin`` of the asyncio client on the loop thread."""
    name = twin.__name__

    @mirrors(twin)
    @functools.wraps(twin)
    def method(self: SyncFacade, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(self._twin, name)  # twin, on the asyncio client
        return self._on_loop(bound, *args, **kwargs)

    return method
