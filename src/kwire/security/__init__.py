"""Security building blocks shared by kwire's broker and client: SCRAM, PLAIN, TLS contexts.

Nothing here touches the network; the broker and the client drive these state machines over their own
connections. ``kwire.security.acl`` is Kafka's ACL model (bindings and filters), for the broker and for
admin clients. ``kwire.security.testing`` makes throwaway certificates (needs the ``cryptography`` package).
"""

from .errors import AuthenticationError
from .plain import parse_plain_token, plain_token
from .scram import MECHANISMS, ScramClient, ScramCredential, ScramServer, make_credential, verify_password
from .tls import client_context, server_context

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
