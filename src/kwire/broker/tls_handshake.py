"""The TLS handshake of a TLS listener's connections, run by the broker so that a failed one is
logged.

With ``create_server(ssl=...)`` asyncio runs the server-side handshake itself and, when it
fails (a client that does not trust the broker's certificate, one without the client
certificate mutual TLS asks for, plain TCP sent to a TLS port), closes the connection and logs
nothing unless the event loop runs in debug mode: the operator never learns why clients are
refused.  Here a TLS listener accepts plain TCP, and ``TlsHandshake`` upgrades each connection
with ``loop.start_tls``, logs the reason of a failure, and gives a successful one to the
broker's protocol as asyncio would have.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Callable

from .log_limiter import ProblemLog

__all__ = ["HANDSHAKE_TIMEOUT_S", "TlsHandshake"]

logger = logging.getLogger("kwire.broker.network")

HANDSHAKE_TIMEOUT_S = 60.0  # asyncio's default for ssl_handshake_timeout


class TlsHandshake(asyncio.Protocol):
    """Stands in for the broker's protocol until the TLS handshake is done."""

    def __init__(self, make_protocol: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext, listener: str,
                 timeout: float = HANDSHAKE_TIMEOUT_S, problems: ProblemLog | None = None):
        self._make_protocol = make_protocol
        self._problems = problems if problems is not None else ProblemLog(logger)  # the broker's: a flood of failures is summarised
        self._context = context
        self._listener = listener
        self._timeout = timeout
        self._task: asyncio.Task | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # No byte may reach this protocol: the ClientHello is start_tls's to read.
        transport.pause_reading()  # type: ignore[attr-defined]
        self._task = asyncio.get_running_loop().create_task(self._handshake(transport))

    def data_received(self, data: bytes) -> None:  # pragma: no cover - reading is paused until start_tls
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        # Before start_tls took the transport over (the peer left at once): nothing to hand over.
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _handshake(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        protocol = self._make_protocol()
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport, protocol, self._context, server_side=True,  # type: ignore[arg-type]
                ssl_handshake_timeout=self._timeout)
        except ssl.SSLError as exc:
            self._problems.log(logging.WARNING, "failed TLS handshake", "TLS handshake with %s on listener %s failed: %s",
                               where, self._listener, _reason(exc))
            return
        except (asyncio.TimeoutError, TimeoutError):
            self._problems.log(logging.WARNING, "TLS handshake timeout",
                               "TLS handshake with %s on listener %s failed: no handshake within %g s", where,
                               self._listener, self._timeout)
            return
        except (OSError, ConnectionError) as exc:
            self._problems.log(logging.INFO, "TLS handshake cut short",
                               "TLS handshake with %s on listener %s failed: the connection ended (%s)", where,
                               self._listener, str(exc) or type(exc).__name__)
            return
        except asyncio.CancelledError:
            transport.close()
            raise
        # The last handshake bytes may have brought requests, and asyncio hands them to the
        # protocol before this coroutine resumes (the broker's Connection queues them until
        # now); or the peer may already have left, which the protocol was told.
        if not getattr(protocol, "closed", False):
            protocol.connection_made(tls)


def _reason(exc: ssl.SSLError) -> str:
    """OpenSSL's words and reason code, as in "tlsv1 alert unknown ca (TLSV1_ALERT_UNKNOWN_CA)"."""
    text = getattr(exc, "verify_message", None) or (exc.args[1] if len(exc.args) > 1 else str(exc))
    found = _OPENSSL_TEXT.search(str(text))
    words = found.group(1) if found else str(text)
    reason = getattr(exc, "reason", None)
    return f"{words} ({reason})" if reason and reason not in words else words


# "[SSL: REASON] the words (_ssl.c:1006)": the words.
_OPENSSL_TEXT = re.compile(r"\] (.*?) \(_ssl\.c:\d+\)")
