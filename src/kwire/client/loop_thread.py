"""The event loop behind the synchronous clients: one daemon thread per process, shared.

``kwire.Producer``, ``kwire.Consumer`` and ``kwire.Admin`` are thin wrappers that hand each call
to their async twin running on this loop and wait for the answer.  Background work (linger
timers, heartbeats, auto commit) keeps running between calls because the loop never stops.

A forked child (Spark's Python workers are forked) gets a new loop: a thread does not survive a
fork, and a loop object copied from the parent must not be used.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .errors import ClientTimeoutError, IllegalStateError

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """The process's one event-loop thread, on which the synchronous clients run their async
    twins (see the module's docstring); ``LoopThread.get()`` gives it."""

    _instance: LoopThread | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="kwire-client-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @classmethod
    def get(cls) -> LoopThread:
        """The process's loop thread, started on first use (and again after a fork)."""
        instance = cls._instance
        if instance is not None and instance.pid == os.getpid():
            return instance
        with cls._lock:
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = cls()
            return cls._instance

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; a ``concurrent.futures.Future`` of its result."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise IllegalStateError("a synchronous kwire client was called from its own event loop; "
                                    "use the async client (kwire.AsyncProducer, ...) inside coroutines")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result; on timeout it is cancelled."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            # Since 3.11 this is the builtin TimeoutError, which the coroutine's own errors
            # (ClientTimeoutError) also are: only a future still running timed out here.
            if future.done():
                raise
            future.cancel()
            raise ClientTimeoutError(f"operation did not finish within {timeout:g} s") from None
        except KeyboardInterrupt:
            future.cancel()
            raise

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Run a plain function on the loop thread (thread-safe)."""
        self.loop.call_soon_threadsafe(callback, *args)
