"""From a request frame to a response: header, version checks, decoding, the handler, errors.

Sans-IO like the handlers: ``dispatch(state, frame, ...)`` returns what to send (or an awaitable
of it), and the network layer only moves bytes.  Refusals follow Kafka:

* ApiVersions at a version we lack: our list at v0 with UNSUPPORTED_VERSION (KIP-511);
* a known api key we don't serve, or a version outside the handler's range: the response with
  UNSUPPORTED_VERSION in its top-level error code where it has one, else the connection closes
  (an unserved api is named in one warning per request, a few per api and interval: see
  ``log_limiter.ProblemLog``; a closed connection is logged by the network layer the same way);
* an unknown api key, a version the codec lacks, or a body that doesn't decode: the connection
  closes (there is no response layout to answer in).  Every refusal is logged.

On a SASL listener, before the login completes, only ApiVersions, SaslHandshake and
SaslAuthenticate are served (anything else closes the connection), and after SaslHandshake v0 the
frames are bare SASL tokens, answered as bare tokens (see ``auth.sasl``).

What a frame is (a request and its header, or a bare SASL token) is the connection machine's
reading (``kwire.protocol.connection.ServerConnection``, passed as ``wire`` by the network layer),
and it learns from the answers given here what the next frames are.
"""

from __future__ import annotations

import inspect
import logging
import struct
from dataclasses import dataclass

from kwire.protocol.connection import FrameError, SaslTokenReceived, ServerConnection, read_request, sasl_token_frame
from kwire.protocol.errors import KafkaStorageError, ProtocolError, UnknownServerError, UnsupportedVersionError
from kwire.protocol.frames import encode_response_parts
from kwire.protocol.messages import Message, request_class, response_class
from kwire.protocol.quotas import client_throttles
from kwire.protocol.schema import REQUEST_NAMES

from .auth.sasl import PRE_AUTH_APIS, SASL_HANDSHAKE, SaslStateError
from .context import RequestContext
from .handlers import HANDLERS
from .handlers.api_versions import API_VERSIONS, unsupported_version_response
from .handlers.common import storage_error
from .handlers.registry import CloseConnection
from .log_limiter import ProblemLog

logger = logging.getLogger("kwire.broker.requests")
# Requests for apis this broker does not serve: one line each, a few per api per interval (a client
# retrying one in a loop must not flood the log).
_unserved_log = ProblemLog(logger)

_KEY_VERSION = struct.Struct(">hh")

__all__ = ["CloseConnection", "Reply", "dispatch"]


@dataclass(slots=True)
class Reply:
    """What to send back: the response frame's pieces (bytes and spliced file ranges)."""

    api_key: int
    api_version: int
    correlation_id: int
    parts: list
    # A client quota was exceeded: the connection reads nothing more for this long once the answer
    # is out (KIP-219); ``hold``: the client's version predates KIP-219, so the answer itself waits.
    throttle_ms: int = 0
    hold: bool = False


def has_throttle_field(response) -> bool:
    """Whether this response (at any version) has a throttle_time_ms to tell a throttle time in."""
    cls = type(response)
    has = _THROTTLE_FIELD.get(cls)
    if has is None:
        has = _THROTTLE_FIELD[cls] = any(f.name == "ThrottleTimeMs" for f in cls.SPEC.struct.fields)
    return has


_THROTTLE_FIELD: dict[type, bool] = {}


def _error_response(api_key: int, version: int, code: int):
    """A default response of this api/version with the top-level error code set, or None."""
    cls = response_class(api_key)
    field = next((f for f in cls.SPEC.struct.fields if f.name == "ErrorCode"), None)
    if field is None or not field.versions[0] <= version <= field.versions[1]:
        return None
    resp = cls()
    resp.error_code = code
    return resp


def _finish(header, response, meter=None) -> Reply | None:
    if meter is not None:
        return _finish_metered(header, response, meter)
    if response is None:
        return None
    key, version, cid = header.request_api_key, header.request_api_version, header.correlation_id
    parts = encode_response_parts(response, version, cid)
    # A handler that throttles (the controller mutation quota of topic creations and deletions,
    # KIP-599) says so in its answer's throttle time: the connection is muted for it too.
    throttle_ms = getattr(response, "throttle_time_ms", 0) or 0
    if throttle_ms > 0:
        return Reply(key, version, cid, parts, throttle_ms, hold=not client_throttles(key, version))
    return Reply(key, version, cid, parts)


def _finish_metered(header, response, meter) -> Reply | None:
    """Count the request against the client's quotas (``quotas.RequestMeter``); a throttled answer
    carries its throttle time, and an acks=0 Produce that has no answer still mutes the connection."""
    key, version, cid = header.request_api_key, header.request_api_version, header.correlation_id
    parts = encode_response_parts(response, version, cid) if response is not None and meter.needs_size else None
    response, throttle_ms = meter.finish(response, sum(map(len, parts)) if parts is not None else None)
    throttle_ms = max(throttle_ms, getattr(response, "throttle_time_ms", 0) or 0)  # the handler's own (KIP-599)
    if response is not None and (throttle_ms or parts is None):
        if throttle_ms and has_throttle_field(response):
            response.throttle_time_ms = throttle_ms
        parts = encode_response_parts(response, version, cid)
    if not throttle_ms:
        return None if response is None else Reply(key, version, cid, parts)
    return Reply(key, version, cid, parts or [], throttle_ms, hold=not client_throttles(key, version))


def _refuse(header, code: int, why: str) -> Reply:
    key, version = header.request_api_key, header.request_api_version
    resp = _error_response(key, version, code)
    if resp is None:
        raise CloseConnection(why)
    logger.info("answering %s: %s", code, why)
    return _finish(header, resp)


def _unserved(header, request_name: str, client_host: str, why: str) -> Reply:
    """UNSUPPORTED_VERSION for an api or version this broker does not serve, in the response's
    top-level error code; without one the connection closes.  One line per request, a few per
    api and interval: a warning here when answered, else the network layer's line for the
    connection it closes (which names the api too)."""
    key, version = header.request_api_key, header.request_api_version
    resp = _error_response(key, version, UnsupportedVersionError.code)
    if resp is None:
        raise CloseConnection(f"{request_name} v{version} {why} (its response has no top-level error code to "
                              "refuse it with)")
    name = request_name.removesuffix("Request")
    _unserved_log.log(logging.WARNING, f"unserved {name}", "%s v%d (api key %d) from %s (client %s) %s: answered "
                      "UNSUPPORTED_VERSION", name, version, key, client_host, header.client_id, why)
    return _finish(header, resp)


def dispatch(state, frame: bytes | bytearray, *, client_host: str, connection_id: int, session=None,
             listener=None, wire: ServerConnection | None = None):
    """Serve one request frame body (no size prefix).

    ``records`` fields (Produce) are decoded as views into ``frame``, which the handler may
    modify: give it a frame nobody else uses (the network layer hands over each frame's own
    buffer), or bytes.

    Returns a ``Reply``, None (no response: acks=0), or an awaitable of one of those.
    Raises ``CloseConnection`` when the connection must close.

    ``session`` (``auth.sasl.Session``) is who is on the connection; None means a trusted caller (no
    authentication, no ACL checks). ``listener`` is the listener the connection came in on.
    ``wire``: the connection's machine, which reads the frame (a request, or a bare SASL token after
    a SaslHandshake v0) and learns from the answer; None: a frame on its own (a request, or a token
    when ``session`` is in the middle of a v0 login).
    """
    if wire is not None:
        event = wire.request_event(frame)
    elif session is not None and session.raw_tokens:
        event = SaslTokenReceived(frame, True)
    else:
        event = read_request(frame)
    if event.__class__ is SaslTokenReceived:
        return _raw_token(session, event.token, wire)
    if session is not None and not session.authenticated:
        key = _KEY_VERSION.unpack_from(frame, 0)[0] if len(frame) >= 4 else None
        if key not in PRE_AUTH_APIS:
            name = REQUEST_NAMES.get(key, f"api key {key}").removesuffix("Request") if key is not None \
                else "a short frame"
            raise CloseConnection(f"{name} before SASL authentication (listener {session.listener})")
    if len(frame) >= 4:  # name an unknown api key or version before the rest of the header
        key, version = _KEY_VERSION.unpack_from(frame, 0)
        if key not in REQUEST_NAMES:
            raise CloseConnection(f"unknown api key {key} (version {version})")
        spec = request_class(key).SPEC
        if key != API_VERSIONS and not spec.has_version(version):
            raise CloseConnection(f"{spec.name} v{version} is unknown to this broker "
                                  f"(known: v{spec.min_version}-{spec.max_version})")
    if event.__class__ is FrameError:
        raise CloseConnection(f"unreadable request header: {event.error}")
    header, offset = event.header, event.body_offset
    key, version = header.request_api_key, header.request_api_version
    entry = HANDLERS.get(key)
    if key == API_VERSIONS and (entry is None or version > entry.max_version):
        resp = unsupported_version_response()
        return Reply(key, 0, header.correlation_id, encode_response_parts(resp, 0, header.correlation_id))
    cls = request_class(key)
    if entry is None:
        return _unserved(header, cls.SPEC.name, client_host, "is not served by this broker")
    if not entry.min_version <= version <= entry.max_version:
        return _unserved(header, cls.SPEC.name, client_host,
                         f"is not served (v{entry.min_version}-{entry.max_version} are)")
    try:
        request, end = cls.codec(version).decode(frame, offset, strict=False, record_views=True)
    except ProtocolError as exc:
        raise CloseConnection(f"malformed {cls.SPEC.name} v{version}: {exc}") from None
    if end != len(frame):
        # Kafka ignores bytes after the request (librdkafka's admin Metadata v13 sends 3), so do we.
        logger.debug("%s v%d from %s: %d bytes after the request ignored", cls.SPEC.name, version, client_host,
                     len(frame) - end)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s v%d correlation %d from %s (client %s)", cls.SPEC.name, version, header.correlation_id,
                     client_host, header.client_id)
    ctx = RequestContext(state, key, version, header.correlation_id, header.client_id, client_host, connection_id,
                         session, listener)
    # Client quotas: none set (the usual case) costs this one test.  Requests before a SASL login are
    # not counted (Kafka's authenticator answers them before quotas apply).
    meter = state.quota_manager.meter(key, request, len(frame), ctx.principal, header.client_id) \
        if state.quota_manager.active and (session is None or session.authenticated) else None
    try:
        result = entry.fn(ctx, request) if meter is None else meter.call(entry.fn, ctx, request)
    except CloseConnection:
        raise
    except OSError as exc:  # the data dir failed under a handler that had no finer answer
        return _refuse(header, KafkaStorageError.code, str(storage_error(exc, cls.SPEC.name.removesuffix("Request"))))
    except Exception:
        logger.exception("%s v%d handler failed", cls.SPEC.name, version)
        return _refuse(header, UnknownServerError.code, f"{cls.SPEC.name} handler failed")
    if result is not None and not isinstance(result, Message) and inspect.isawaitable(result):
        return PendingReply(header, cls.SPEC.name, result, meter)
    if key == SASL_HANDSHAKE and wire is not None and result is not None:
        wire.response_sent(key, version, result.error_code)  # v0 accepted: bare tokens follow
    return _finish(header, result, meter)


class PendingReply:
    """A handler still at work (a long-polling Fetch, a parked JoinGroup): await it for the Reply.

    ``close()`` when it will never be awaited (its connection closed before it started), so
    that neither it nor the handler's own coroutine is left unawaited.
    """

    __slots__ = ("_outer", "_handler")

    def __init__(self, header, name: str, pending, meter=None) -> None:
        self._handler = pending
        self._outer = _await(header, name, pending, meter) if header is not None else pending

    def __await__(self):
        return self._outer.__await__()

    def close(self) -> None:
        self._outer.close()
        close = getattr(self._handler, "close", None)  # a coroutine, or a quota meter's wrapper of one
        if close is not None:
            close()


async def _await(header, name: str, pending, meter=None) -> Reply | None:
    try:
        response = await pending
    except CloseConnection:
        raise
    except OSError as exc:
        return _refuse(header, KafkaStorageError.code, str(storage_error(exc, name.removesuffix("Request"))))
    except Exception:
        logger.exception("%s v%d handler failed", name, header.request_api_version)
        return _refuse(header, UnknownServerError.code, f"{name} handler failed")
    return _finish(header, response, meter)


def _raw_token(session, token, wire: ServerConnection | None) -> PendingReply:
    """SaslHandshake v0 was answered: this frame is a bare token; so is the answer (no header)."""
    return PendingReply(None, "SASL token", _answer_token(session, bytes(token), wire))


async def _answer_token(session, token: bytes, wire: ServerConnection | None) -> Reply:
    from kwire.security import AuthenticationError

    try:
        answer = await session.authenticate(token)
    except (AuthenticationError, SaslStateError) as exc:
        raise CloseConnection(f"SASL authentication failed (v0 framing): {exc}") from None
    if wire is None:
        return Reply(-1, 0, -1, [sasl_token_frame(answer)])
    # The login's last token: Kafka frames follow.
    return Reply(-1, 0, -1, [wire.send_sasl_token(answer, last=session.authenticated)])
