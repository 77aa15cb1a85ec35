"""Security building blocks shared by kwire's broker and client: SCRAM, PLAIN, TLS contexts.

Nothing here touches the network; the broker and the client drive these state machines over their own
connections. ``kwire.security.acl`` is Kafka's ACL model (bindings and filters), for the broker and for
admin clients. ``kwire.security.testing`` makes throwaway certificates (needs the ``cryptography`` package).
"""

from __future__ import annotations

from typing import Any

from ..lazy_exports import LazyExports
from .errors import AuthenticationError

# The other names load their module on first use (PEP 562): every client imports this package
# for AuthenticationError, and SCRAM's hashlib, hmac and secrets cost each command line's
# start-up although most connections never authenticate.
_LAZY = {
    "parse_plain_token": "plain", "plain_token": "plain",
    "MECHANISMS": "scram", "ScramClient": "scram", "ScramCredential": "scram", "ScramServer": "scram",
    "make_credential": "scram", "verify_password": "scram",
    "client_context": "tls", "server_context": "tls",
}

__all__ = [
    "MECHANISMS",
    "AuthenticationError",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "client_context",
    "make_credential",
    "parse_plain_token",
    "plain_token",
    "server_context",
    "verify_password",
]


_exports = LazyExports(__name__, _LAZY, globals())


def __getattr__(name: str) -> Any:
    return _exports.load(name)


def __dir__() -> list[str]:
    return _exports.names()
