"""The table of request handlers: api key -> (function, version range it implements).

A handler is a plain function ``handler(ctx, request) -> response`` (or an ``async def`` for
requests that wait: long-polled Fetch, JoinGroup, fsync'd Produce).  It gets the decoded request
and a ``RequestContext`` and returns the response object; it never touches sockets, so it is
tested by calling it.  Returning ``None`` means "send no response" (Produce with acks=0).

The version range registered is exactly what ApiVersions advertises for the key, so register
only versions the handler answers correctly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kwire.protocol.messages import request_class

__all__ = ["CloseConnection", "HandlerEntry", "HANDLERS", "handler", "supported_versions"]


class CloseConnection(Exception):
    """The request cannot be answered: close the connection (the reason is the message).  A
    handler raises it for a request that is invalid as a whole and has no error code to say so."""


HandlerFn = Callable[[Any, Any], Any | Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerEntry:
    api_key: int
    min_version: int
    max_version: int
    fn: HandlerFn


HANDLERS: dict[int, HandlerEntry] = {}


def handler(api_key: int, min_version: int = 0, max_version: int | None = None):
    """Register a handler for ``api_key`` versions min..max (default: the newest the codec knows)."""
    spec = request_class(api_key).SPEC
    top = spec.max_version if max_version is None else max_version
    if not spec.min_version <= min_version <= top <= spec.max_version:
        raise ValueError(f"api key {api_key}: versions {min_version}-{top} outside the codec's "
                         f"{spec.min_version}-{spec.max_version}")

    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in HANDLERS:
            raise ValueError(f"api key {api_key} already has a handler ({HANDLERS[api_key].fn.__qualname__})")
        HANDLERS[api_key] = HandlerEntry(api_key, min_version, top, fn)
        return fn

    return register


def supported_versions() -> dict[int, tuple[int, int]]:
    """api key -> (min, max) for every registered handler."""
    return {k: (e.min_version, e.max_version) for k, e in sorted(HANDLERS.items())}
