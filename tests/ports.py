"""Ports that refuse connections, held for as long as a test needs them."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def refusing_ports(count: int = 1) -> Iterator[list[int]]:
    """``count`` ports on 127.0.0.1 that refuse every connection while the block runs: each is
    bound and never listened on, so the kernel answers a connect with RST, and nothing else can
    take it meanwhile.  (A port bound and released at once can be taken by a broker another
    test starts in a parallel worker; then the connection is not refused.)"""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        yield ports
