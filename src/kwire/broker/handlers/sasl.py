"""SaslHandshake and SaslAuthenticate: the connection's login (the state machine is ``auth.sasl``).

Served on every listener, as Kafka does; on a listener without SASL, or after the login completed,
they are answered with ILLEGAL_SASL_STATE. A failed or out-of-order exchange is answered, then the
connection closes (``Session.close_after``), as Kafka's authenticator does.
"""

from __future__ import annotations

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import IllegalSaslStateError, SaslAuthenticationFailedError
from kwire.security import AuthenticationError

from ..auth.sasl import SaslStateError
from .registry import handler

SASL_HANDSHAKE, SASL_AUTHENTICATE = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE


@handler(SASL_HANDSHAKE, 0, 1)
def handle_sasl_handshake(ctx, request):
    R = messages.SaslHandshakeResponse
    session = ctx.session
    if session is None:  # not a network connection: nothing to log in to
        return R(error_code=IllegalSaslStateError.code, mechanisms=[])
    code, mechanisms = session.handshake(request.mechanism or "", ctx.api_version)
    return R(error_code=code, mechanisms=mechanisms)


@handler(SASL_AUTHENTICATE, 0, 2)
def handle_sasl_authenticate(ctx, request):
    session = ctx.session
    if session is None or not session.sasl or session.state == "done":
        # Kafka answers these on an authenticated connection and keeps it (no re-authentication here).
        return _response(ctx, IllegalSaslStateError.code, "SaslAuthenticate is not expected on this connection")
    return _authenticate(ctx, session, bytes(request.auth_bytes or b""))


async def _authenticate(ctx, session, token: bytes):
    try:
        answer = await session.authenticate(token)
    except SaslStateError as exc:
        session.close_after = str(exc)
        return _response(ctx, IllegalSaslStateError.code, str(exc))
    except AuthenticationError as exc:
        session.close_after = f"SASL authentication failed: {exc}"
        return _response(ctx, SaslAuthenticationFailedError.code, str(exc))
    return _response(ctx, 0, None, answer)


def _response(ctx, code: int, message: str | None, answer: bytes = b""):
    resp = messages.SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=answer)
    if ctx.api_version >= 1:
        resp.session_lifetime_ms = 0  # no re-authentication (KIP-368): the login lasts the connection
    return resp
