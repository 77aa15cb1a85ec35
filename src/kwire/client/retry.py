"""Retrying an operation on retriable errors, with Kafka's exponential backoff, until a deadline.

Kafka (KIP-580) backs off ``retry.backoff.ms * 2**attempt`` up to ``retry.backoff.max.ms``, with
20% random jitter so that clients that failed together do not retry together.  Only errors that
``is_retriable`` accepts are retried; anything else is raised at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .backoff import Backoff
from .errors import ClientTimeoutError, is_retriable

__all__ = ["Backoff", "retrying"]

logger = logging.getLogger("kwire.client")

T = TypeVar("T")

async def retrying(operation: Callable[[], Awaitable[T]], *, timeout: float, backoff: Backoff, what: str,
                   before_retry: Callable[[BaseException], Awaitable[None] | None] | None = None) -> T:
    """Run ``operation`` until it succeeds, a non-retriable error occurs, or ``timeout`` seconds pass.

    ``before_retry(exc)`` runs before each new attempt (e.g. to refresh metadata after
    NOT_LEADER_OR_FOLLOWER).  On timeout the last retriable error is raised inside a
    ``ClientTimeoutError`` that names ``what``.
    """
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        try:
            return await operation()
        except Exception as exc:
            if not is_retriable(exc):
                raise
            pause = backoff.delay(attempt)
            if time.monotonic() + pause >= deadline:
                raise ClientTimeoutError(f"{what} did not succeed within {timeout:g} s; last error: {exc}") from exc
            logger.debug("%s failed (%s); retrying in %.3f s", what, exc, pause)
            attempt += 1
            await asyncio.sleep(pause)
            if before_retry is not None:
                result = before_retry(exc)
                if result is not None:
                    await result
