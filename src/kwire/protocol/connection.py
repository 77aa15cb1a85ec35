"""One Kafka connection's rules, sans-IO: the machine the client, the broker and the analyzer drive.

In h11's shape: the machine does no I/O and has no clock.  Bytes received go in
(``receive_data``, or the splitter's zero-copy buffers through ``framing``), events come out
(``next_event``); what a side sends comes out as bytes (``send_request``, ``send_sasl_token``),
and the machine records what that send means for what comes back.  Three roles:

* ``ClientConnection``: sends requests, reads their responses.
* ``ServerConnection``: reads requests, sends responses.
* ``ObserverConnection``: reads both directions of someone else's connection (a capture).

What the machine owns, as Kafka does it:

* Framing: a big-endian int32 size, then that many bytes (``FrameSplitter``; its size limits).
* Header versions: request header v2 for flexible versions, else v1 (v0 for ControlledShutdown
  v0); response header v1 for flexible versions, else v0, and always v0 for ApiVersions (a client
  must read the error before it knows which versions the broker speaks) (``frames``).
* Correlation ids and pairing: a broker answers a connection's requests in the order they were
  sent, so every response names the oldest request still waiting.  A client treats anything else
  as a broken stream; an observer takes a response to a later request as the answer to that one,
  the older ones lost with bytes the capture missed.
* acks=0: a Produce with acks 0 gets no response (Kafka's ``ProduceRequest`` with
  ``acks == 0``).  A client remembers the last ``UNAWAITED_KEPT`` of those correlation ids and
  drops an answer to one (librdkafka's mock cluster answers them; Kafka never does).
* SASL before KIP-152: after a SaslHandshake v0 answered without error, the frames of both sides
  are bare SASL tokens (a size and the token, no Kafka header) until the login is over (Kafka's
  ``SaslServerAuthenticator`` with ``enableKafkaSaslAuthenticateHeaders(false)``).
* The ApiVersions fallback (KIP-511): a broker that lacks the version a client asked for answers
  UNSUPPORTED_VERSION in the v0 layout with its own ranges, and the client asks again in the
  newest version both speak.

Why the server classifies frames when they are taken (``next_event``) and not when they arrive:
the answer to a SaslHandshake v0 changes what the next frames are, and a server answers in order,
so a frame is read in the state of the connection after the answers to the frames before it
(Kafka's authenticator reads one frame at a time for the same reason).

Events are small slotted objects compared by value (the property tests check that any split of
a byte stream into chunks gives equal events).
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, cast

from .errors import DecodeError, ProtocolError
from .frames import (
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_parts,
    encode_response_parts,
)
from .framing import DEFAULT_MAX_FRAME_SIZE, FrameSplitter
from .generated.api_keys import ApiKey
from .generated.error_codes import ErrorCode
from .generated.headers import RequestHeader
from .message_base import Request, Response, request_class
from .messages import ApiVersionsResponse, ProduceRequest
from .primitives import Buffer
from .schema import REQUEST_NAMES
from .splice import SplicedBytes

__all__ = [
    "NEED_DATA",
    "ClientConnection",
    "ConnectionClosed",
    "Event",
    "FrameError",
    "ObserverConnection",
    "Outstanding",
    "RequestReceived",
    "RequestUnanswered",
    "ResponseReceived",
    "SaslTokenReceived",
    "ServerConnection",
    "UnawaitedResponse",
    "api_versions_error_code",
    "api_versions_retry",
    "decode_api_versions_response",
    "produce_acks",
    "read_request",
    "sasl_token_frame",
]

# Plain ints: compared for every frame.
PRODUCE = int(ApiKey.PRODUCE)
API_VERSIONS = int(ApiKey.API_VERSIONS)
SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
_UNSUPPORTED_VERSION = int(ErrorCode.UNSUPPORTED_VERSION)

# How many unanswered acks=0 correlation ids a client remembers.  A broker that does answer them
# answers in order, long before a thousand more are sent; Kafka, which never answers, leaves the
# oldest to be forgotten.
UNAWAITED_KEPT = 1024

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()  #: ``next_event`` has nothing to give until more bytes arrive


# -- events ---------------------------------------------------------------------------------------
class Event:
    """An event of a connection; equal to another of its class with equal fields."""

    __slots__ = ()

    def _fields(self) -> tuple[Any, ...]:
        slots: tuple[str, ...] = self.__slots__
        return tuple(getattr(self, name) for name in slots)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Event) and other.__class__ is self.__class__ and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # equal by value: unhashable, as object allows

    def __repr__(self) -> str:
        slots: tuple[str, ...] = self.__slots__
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in slots
                           if name not in ("frame", "header"))
        return f"{type(self).__name__}({fields})"


class RequestReceived(Event):
    """A request frame: its header read, its body from ``body_offset`` on (decode it with the
    request class's codec, or ``decode_request``).  ``known``: kwire knows the api key and
    version (else the header was read in the v1 layout every client sends, so that it can still
    be refused or paired); ``expects_response``: not a Produce with acks=0."""

    __slots__ = ("frame", "header", "body_offset", "outstanding")

    def __init__(self, frame: Buffer, header: RequestHeader, body_offset: int,
                 outstanding: Outstanding | None = None):
        self.frame = frame
        self.header = header
        self.body_offset = body_offset
        #: (observer) the entry waiting for its response, None when none is expected
        self.outstanding = outstanding

    @property
    def api_key(self) -> int:
        return int(self.header.request_api_key)

    @property
    def api_version(self) -> int:
        return int(self.header.request_api_version)

    @property
    def correlation_id(self) -> int:
        return int(self.header.correlation_id)

    @property
    def known(self) -> bool:
        key = self.header.request_api_key
        return key in REQUEST_NAMES and request_class(key).has_version(self.header.request_api_version)

    @property
    def expects_response(self) -> bool:
        header = self.header
        return not (header.request_api_key == PRODUCE
                    and produce_acks(self.frame, self.body_offset, header.request_api_version) == 0)


class ResponseReceived(Event):
    """A response frame paired with its request (``outstanding``: what ``send_request`` or the
    observed request recorded, with the caller's ``context``).  Decode it with ``decode``."""

    __slots__ = ("frame", "outstanding")

    def __init__(self, frame: Buffer, outstanding: Outstanding):
        self.frame = frame
        self.outstanding = outstanding

    @property
    def api_key(self) -> int:
        return self.outstanding.api_key

    @property
    def api_version(self) -> int:
        return self.outstanding.api_version

    @property
    def correlation_id(self) -> int:
        return self.outstanding.correlation_id

    @property
    def context(self) -> Any:
        return self.outstanding.context

    def decode(self, **options: bool) -> Response:
        """The typed response; ApiVersions with the KIP-511 fallback (``decode_api_versions_response``).
        ``options`` go to ``decode_response`` (not for ApiVersions, which is read strictly)."""
        out = self.outstanding
        if out.api_key == API_VERSIONS:
            return decode_api_versions_response(self.frame, out.api_version)
        return decode_response(self.frame, out.api_key, out.api_version, **options)[1]


class SaslTokenReceived(Event):
    """A bare SASL token (after SaslHandshake v0).  ``from_client``: which side sent it;
    ``context``: (observer, server's tokens) the context given to the client's token it answers."""

    __slots__ = ("token", "from_client", "context")

    def __init__(self, token: Buffer, from_client: bool, context: Any = None):
        self.token = token
        self.from_client = from_client
        self.context = context


class UnawaitedResponse(Event):
    """(client) An answer to a request sent without waiting for one (acks=0): read and dropped."""

    __slots__ = ("correlation_id",)

    def __init__(self, correlation_id: int):
        self.correlation_id = correlation_id


class RequestUnanswered(Event):
    """(observer) A request that will get no response: ``why`` is 'skipped' (a response to a
    later request came first, its correlation id was reused, too many were waiting, the SASL
    tokens' pairing was lost) or what ended the connection."""

    __slots__ = ("request", "why")

    def __init__(self, request: Outstanding | SaslTokenReceived, why: str):
        self.request = request  #: the request's ``Outstanding``, or the client's SASL token
        self.why = why

    @property
    def context(self) -> Any:
        return self.request.context


class FrameError(Event):
    """The stream cannot be read on: a bad size prefix, an unreadable header, a response out of
    order.  ``from_client``: which side's bytes (None: not a side's fault).  ``frame``: the frame
    at fault, when there is one.  A client or server connection reads nothing after it."""

    __slots__ = ("error", "from_client", "frame")

    def __init__(self, error: ProtocolError, from_client: bool | None, frame: Buffer | None = None):
        self.error = error
        self.from_client = from_client
        self.frame = frame

    def _fields(self) -> tuple[Any, ...]:
        return (str(self.error), self.from_client, self.frame)


class ConnectionClosed(Event):
    """The peer ended its side (``receive_data(b"")``), ``partial`` bytes of a frame unread."""

    __slots__ = ("from_client", "partial")

    def __init__(self, from_client: bool, partial: int = 0):
        self.from_client = from_client
        self.partial = partial


class Outstanding:
    """A request waiting for its response: what it was, and the driver's ``context`` for it."""

    __slots__ = ("correlation_id", "api_key", "api_version", "context")

    def __init__(self, correlation_id: int, api_key: int, api_version: int, context: Any = None):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.context = context

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Outstanding) and other.__class__ is Outstanding
                and self.correlation_id == other.correlation_id and self.api_key == other.api_key
                and self.api_version == other.api_version)

    __hash__ = None  # type: ignore[assignment]  # equal by value: unhashable, as object allows

    def __repr__(self) -> str:
        return f"Outstanding({self.correlation_id}, api {self.api_key} v{self.api_version})"


# -- wire facts the roles share -------------------------------------------------------------------
def sasl_token_frame(token: bytes) -> bytes:
    """A bare SASL token as SaslHandshake v0 frames it: its size, then its bytes."""
    return _INT32.pack(len(token)) + token


def produce_acks(frame: Buffer, offset: int, version: int) -> int | None:
    """The acks of a Produce request whose body starts at ``offset`` (None when unreadable):
    read without decoding the records.  The body starts with transactional_id (v3+; a compact
    string in flexible versions), then acks."""
    try:
        spec = request_class(PRODUCE).SPEC
        if version >= 3:  # ProduceRequest's TransactionalId: "versions": "3+"
            if spec.is_flexible(version):
                length, shift = 0, 0
                while True:  # unsigned varint: length + 1, 0 for null
                    b = frame[offset]
                    offset += 1
                    length |= (b & 0x7F) << shift
                    if not b & 0x80:
                        break
                    shift += 7
                offset += max(length - 1, 0)
            else:
                offset += 2 + max(_INT16.unpack_from(frame, offset)[0], 0)
        acks: int = _INT16.unpack_from(frame, offset)[0]
        return acks
    except (IndexError, struct.error):
        return None


def api_versions_error_code(frame: Buffer) -> int | None:
    """The error code of an ApiVersions response frame (its header is always v0: the code
    follows the correlation id), None when too short."""
    if len(frame) < 6:
        return None
    code: int = _INT16.unpack_from(frame, 4)[0]
    return code


def decode_api_versions_response(frame: Buffer, version: int) -> ApiVersionsResponse:
    """An ApiVersions response, read as KIP-511 has brokers write it: a broker that refuses the
    request's version (UNSUPPORTED_VERSION) answers in the v0 layout, which every client can
    read, so a refusal is read in v0 first; anything else in the request's version first, v0
    second.  ``DecodeError`` (the first layout's) when neither reads."""
    refused = version > 0 and api_versions_error_code(frame) == _UNSUPPORTED_VERSION
    first_error: ProtocolError | None = None
    for layout in dict.fromkeys((0, version) if refused else (version, 0)):
        try:
            # decode_response builds the class of the api key it is given: here ApiVersionsResponse
            return cast(ApiVersionsResponse, decode_response(frame, API_VERSIONS, layout)[1])
        except ProtocolError as exc:
            first_error = first_error or exc
    assert first_error is not None
    raise first_error


def api_versions_retry(response: ApiVersionsResponse, version: int) -> int | None:
    """After an ApiVersions answer at ``version``: the version to ask again in (KIP-511: the
    broker refused ours and named its newest in its v0 answer; v0 when it named none), or None
    when this answer stands."""
    if response.error_code != _UNSUPPORTED_VERSION or version <= 0:
        return None
    theirs: int = {k.api_key: k.max_version for k in response.api_keys or ()}.get(API_VERSIONS, 0)
    return max(min(theirs, version - 1), 0)


def read_request(frame: Buffer, outstanding: Outstanding | None = None) -> RequestReceived | FrameError:
    """A request frame on its own (no connection state): its header read, or why it cannot be."""
    try:
        header, offset = decode_request_header(frame)
    except ProtocolError as exc:
        return FrameError(exc, True, frame)
    return RequestReceived(frame, header, offset, outstanding)


class _Framing:
    """Frames in, one deque of them; ``framing`` is the splitter for the zero-copy buffer API."""

    __slots__ = ("framing", "_frames", "_ended", "_error")

    def __init__(self, max_frame_size: int, reserve: Callable[[int], bool] | None = None, reuse_frames: int = 0):
        self.framing = FrameSplitter(max_frame_size, reserve=reserve, reuse_frames=reuse_frames)
        self._frames: deque[Buffer | FrameError] = deque()
        self._ended: ConnectionClosed | None = None
        self._error: FrameError | None = None

    @property
    def max_frame_size(self) -> int:
        return self.framing.max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        self.framing.max_frame_size = value

    @property
    def broken(self) -> bool:
        """A FrameError was given out: nothing after it is read."""
        return self._error is not None

    def _peer_is_client(self) -> bool:
        raise NotImplementedError

    def receive_data(self, data: Buffer) -> None:
        """Bytes from the peer; ``b""``: the peer ended its side."""
        if self._ended is not None or self._error is not None:
            return
        if not data:
            self._ended = ConnectionClosed(self._peer_is_client(), self.framing.buffered)
            return
        try:
            self._frames.extend(self.framing.feed(data))
        except ProtocolError as exc:
            self._frames.append(FrameError(exc, self._peer_is_client()))

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were received into ``framing.get_buffer()`` (asyncio's BufferedProtocol)."""
        if self._error is not None:
            return
        try:
            self._frames.extend(self.framing.buffer_updated(nbytes))
        except ProtocolError as exc:
            self._frames.append(FrameError(exc, self._peer_is_client()))

    def next_event(self) -> Event | _NeedData:
        """The next event, or ``NEED_DATA``."""
        if self._error is not None:
            return NEED_DATA
        if self._frames:
            frame = self._frames.popleft()
            event = frame if isinstance(frame, FrameError) else self._event_for(frame)
            if isinstance(event, FrameError):
                self._error = event
                self._frames.clear()
            return event
        if self._ended is not None:
            ended, self._ended = self._ended, None
            self._error = FrameError(DecodeError("the connection ended", what="connection"), None)
            return ended
        return NEED_DATA

    def _event_for(self, frame: Buffer) -> Event:
        raise NotImplementedError


# -- the client -----------------------------------------------------------------------------------
class ClientConnection(_Framing):
    """A client's side: ``send_request`` -> bytes; responses come back as ``ResponseReceived``
    paired with the request (or ``UnawaitedResponse``, ``SaslTokenReceived``, ``FrameError``).

    ``reuse_frames``: see ``FrameSplitter`` (a consumer reuses the buffers of large Fetch answers).
    """

    __slots__ = ("client_id", "_pending", "_unawaited", "_next_correlation", "_raw", "_token_out")

    def __init__(self, *, client_id: str | None = "kwire", max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 reuse_frames: int = 0):
        super().__init__(max_frame_size, reuse_frames=reuse_frames)
        self.client_id = client_id
        self._pending: OrderedDict[int, Outstanding] = OrderedDict()
        self._unawaited: dict[int, None] = {}
        self._next_correlation = 0
        self._raw = False  # after SaslHandshake v0: bare tokens
        self._token_out = False  # a bare token waits for the broker's

    def _peer_is_client(self) -> bool:
        return False

    @property
    def in_flight(self) -> int:
        """Requests waiting for their response."""
        return len(self._pending)

    @property
    def awaiting_unawaited(self) -> bool:
        """acks=0 requests were sent whose answers (if the broker gives any) may still come."""
        return bool(self._unawaited)

    @property
    def sasl_tokens(self) -> bool:
        """The connection carries bare SASL tokens (after SaslHandshake v0)."""
        return self._raw

    @property
    def token_outstanding(self) -> bool:
        return self._token_out

    def outstanding(self) -> list[Outstanding]:
        """The requests waiting for their response, oldest first."""
        return list(self._pending.values())

    def forget_outstanding(self) -> list[Outstanding]:
        """The connection is given up: the requests still waiting, oldest first, now forgotten
        (an answer to one of them would be out of order)."""
        pending = list(self._pending.values())
        self._pending.clear()
        return pending

    def send_request(self, request: Request[Response], version: int, *, expect_response: bool | None = None,
                     context: Any = None) -> bytes:
        """The frame of ``request`` at ``version`` with the next correlation id.  ``expect_response``
        None: all but a Produce with acks=0; ``context`` comes back with the response."""
        cid = self._next_request()
        frame = encode_request(request, version, cid, self.client_id)
        self._sent(request, version, cid, expect_response, context)
        return frame

    def send_request_parts(self, request: Request[Response], version: int, *, expect_response: bool | None = None,
                           context: Any = None) -> list[Buffer | SplicedBytes]:
        """``send_request``'s frame in pieces (``frames.encode_request_parts``): its large records
        values by reference, for a transport that gather-writes them (``socket.sendmsg``)."""
        cid = self._next_request()
        parts = encode_request_parts(request, version, cid, self.client_id)
        self._sent(request, version, cid, expect_response, context)
        return parts

    def _next_request(self) -> int:
        if self._token_out:
            raise RuntimeError("a request while a bare SASL token waits for its answer")
        self._raw = False  # a Kafka request again: the SASL v0 exchange is over
        self._next_correlation = cid = (self._next_correlation + 1) & 0x7FFFFFFF
        return cid

    def _sent(self, request: Request[Response], version: int, cid: int, expect_response: bool | None,
              context: Any) -> None:
        key = request.API_KEY
        if expect_response is None:
            # The api key names the class: a PRODUCE request is a ProduceRequest (no isinstance per send).
            expect_response = not (key == PRODUCE and cast(ProduceRequest, request).acks == 0)
        if expect_response:
            self._pending[cid] = Outstanding(cid, key, version, context)
        else:
            self._unawaited[cid] = None
            if len(self._unawaited) > UNAWAITED_KEPT:
                del self._unawaited[next(iter(self._unawaited))]

    def send_sasl_token(self, token: bytes) -> bytes:
        """The bare frame of a SASL token (after SaslHandshake v0; nothing else in flight)."""
        if not self._raw or self._pending or self._token_out:
            raise RuntimeError("a bare SASL token is only sent after a SaslHandshake v0, on an idle connection")
        self._token_out = True
        return sasl_token_frame(token)

    def _event_for(self, frame: Buffer) -> Event:
        return self.response_event(frame)

    def response_event(self, frame: Buffer) -> Event:
        """What a response frame is (for drivers that take frames from ``framing`` themselves)."""
        if self._token_out:  # SaslHandshake v0: a bare token, no response header
            self._token_out = False
            return SaslTokenReceived(frame, False)
        if len(frame) < 4:
            return FrameError(DecodeError("a response needs at least 4 bytes", what="ResponseHeader"), False, frame)
        cid: int = _INT32.unpack_from(frame, 0)[0]
        if cid in self._unawaited:
            del self._unawaited[cid]
            return UnawaitedResponse(cid)
        pending = self._pending
        if not pending or next(iter(pending)) != cid:
            expected = next(iter(pending), None)
            error = DecodeError(f"answered correlation id {cid}, expected {expected}", what="ResponseHeader")
            return FrameError(error, False, frame)
        out = pending.pop(cid)
        if out.api_key == SASL_HANDSHAKE and out.api_version == 0 and len(frame) >= 6 \
                and not _INT16.unpack_from(frame, 4)[0]:
            self._raw = True  # SASL before KIP-152: bare tokens follow
        return ResponseReceived(frame, out)


# -- the server -----------------------------------------------------------------------------------
class ServerConnection(_Framing):
    """A server's side: requests come in as ``RequestReceived`` (or ``SaslTokenReceived`` after a
    SaslHandshake v0, ``FrameError``); answers go out through ``send_response``/``send_sasl_token``
    (or, for a driver that encodes its own answers, ``response_sent``), one per request that
    expects one, in order.

    ``reserve``: see ``FrameSplitter`` (a broker's shared budget for large request buffers).
    """

    __slots__ = ("_raw",)

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 reserve: Callable[[int], bool] | None = None):
        super().__init__(max_frame_size, reserve=reserve)
        self._raw = False

    def _peer_is_client(self) -> bool:
        return True

    @property
    def sasl_tokens(self) -> bool:
        """Frames are bare SASL tokens (a SaslHandshake v0 was accepted, the login is not over)."""
        return self._raw

    def _event_for(self, frame: Buffer) -> Event:
        return self.request_event(frame)

    def request_event(self, frame: Buffer) -> Event:
        """What a request frame is, in the connection's state now (for drivers that queue the
        frames of ``framing`` themselves and take them one at a time)."""
        if self._raw:
            return SaslTokenReceived(frame, True)
        try:  # (read_request's body, inlined: this runs for every request a broker serves)
            header, offset = decode_request_header(frame)
        except ProtocolError as exc:
            return FrameError(exc, True, frame)
        return RequestReceived(frame, header, offset)

    def send_response(self, response: Response, version: int, correlation_id: int) -> list[bytes | SplicedBytes]:
        """The response frame's pieces (``encode_response_parts``)."""
        parts = encode_response_parts(response, version, correlation_id)
        if response.API_KEY == SASL_HANDSHAKE:
            self.response_sent(SASL_HANDSHAKE, version, getattr(response, "error_code", 0))
        return parts

    def response_sent(self, api_key: int, version: int, error_code: int) -> None:
        """A driver encoded and sent a response itself: what it changes (an accepted SaslHandshake
        v0 makes the next frames bare tokens)."""
        if api_key == SASL_HANDSHAKE and version == 0 and not error_code:
            self._raw = True

    def send_sasl_token(self, token: bytes, *, last: bool = False) -> bytes:
        """The bare frame of the server's SASL token; ``last``: the login is over (Kafka frames
        follow)."""
        if last:
            self._raw = False
        return sasl_token_frame(token)

    def end_sasl_tokens(self) -> None:
        """The login is over: the next frames are Kafka requests again."""
        self._raw = False

    def close(self) -> None:
        """Let go of every buffer (a frame being filled may be large)."""
        self.framing = FrameSplitter(0)
        self._frames.clear()


# -- the observer ---------------------------------------------------------------------------------
class ObserverConnection:
    """Both directions of a connection seen from outside (a capture).

    ``receive_data(data, from_client=...)`` then ``next_event()``, or frames already split by the
    caller (which may have its own way to find frames again after lost bytes) through
    ``request_frame`` and ``response_frame``, each returning its events.  A request's
    ``RequestReceived.outstanding`` (when a response is expected) takes the caller's ``context``
    and comes back in the ``ResponseReceived`` or ``RequestUnanswered``; the context of a
    client's SASL token comes back with the server's token that answers it.
    """

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, max_in_flight: int = 1024):
        self.max_frame_size = max_frame_size
        # Kafka clients keep a handful in flight; beyond this the capture lost the responses.
        self.max_in_flight = max_in_flight
        #: requests waiting for their response, by correlation id, oldest first
        self.in_flight: OrderedDict[int, Outstanding] = OrderedDict()
        self.sasl_tokens = False  # bare SASL tokens are being exchanged (after SaslHandshake v0)
        self._tokens: deque[SaslTokenReceived] = deque()  # the client's, waiting for the server's
        self._splitters = (FrameSplitter(max_frame_size), FrameSplitter(max_frame_size))  # server's, client's
        self._events: deque[Event] = deque()

    # -- bytes ----------------------------------------------------------------------------------
    def receive_data(self, data: Buffer, *, from_client: bool) -> None:
        """Bytes of one direction, in the order they were seen; ``b""``: that side ended."""
        splitter = self._splitters[from_client]
        if not data:
            self._events.append(ConnectionClosed(from_client, splitter.buffered))
            return
        frames: list[bytes] = []
        try:
            frames = splitter.feed(data)
        except ProtocolError as exc:
            self._events.append(FrameError(exc, from_client))
        take = self.request_frame if from_client else self.response_frame
        for frame in frames:
            self._events.extend(take(frame))

    def next_event(self) -> Event | _NeedData:
        return self._events.popleft() if self._events else NEED_DATA

    # -- frames ---------------------------------------------------------------------------------
    def request_frame(self, frame: Buffer) -> list[Event]:
        """The events of a client frame: a request (tracked unless no response is expected),
        or a bare SASL token; before it, requests it leaves unanswered."""
        events: list[Event] = []
        if self.sasl_tokens:
            try:
                decode_request(frame)
            except ProtocolError:  # not a Kafka request: the next token
                token = SaslTokenReceived(frame, True)
                self._tokens.append(token)
                if len(self._tokens) > self.max_in_flight:  # a server that never answers
                    events.append(RequestUnanswered(self._tokens.popleft(), "skipped"))
                events.append(token)
                return events
            self.lost_place(events)  # a real request: the SASL exchange is over
        event = read_request(frame)
        if isinstance(event, FrameError):
            events.append(event)
            return events
        if event.expects_response:
            header = event.header
            cid = int(header.correlation_id)
            out = event.outstanding = Outstanding(cid, int(header.request_api_key), int(header.request_api_version))
            in_flight = self.in_flight
            old = in_flight.pop(cid, None)
            if old is not None:  # the correlation id was reused while waiting: the first lost its answer
                events.append(RequestUnanswered(old, "reused"))
            in_flight[cid] = out
            if len(in_flight) > self.max_in_flight:
                events.append(RequestUnanswered(in_flight.popitem(last=False)[1], "overflow"))
        events.append(event)
        return events

    def response_frame(self, frame: Buffer) -> list[Event]:
        """The events of a server frame: the response paired with its request (requests sent
        before it unanswered), a SASL token, or ``FrameError`` for a response nothing waits for."""
        if self._tokens:  # the server's answer to a bare SASL token
            return [SaslTokenReceived(frame, False, self._tokens.popleft().context)]
        in_flight = self.in_flight
        out = in_flight.get(_INT32.unpack_from(frame, 0)[0]) if len(frame) >= 4 else None
        if out is None:
            orphan: int = _INT32.unpack_from(frame, 0)[0] if len(frame) >= 4 and not self.sasl_tokens else -1
            return [FrameError(DecodeError(f"a response to correlation id {orphan}, which no request waits for",
                                           what="ResponseHeader"), False, frame)]
        events: list[Event] = []
        cid = out.correlation_id
        if next(iter(in_flight)) != cid:
            # Responses come in request order: the requests before this one were answered in
            # bytes the capture lost.
            while True:
                first, older = in_flight.popitem(last=False)
                if first == cid:
                    break
                events.append(RequestUnanswered(older, "skipped"))
        else:
            del in_flight[cid]
        if out.api_key == SASL_HANDSHAKE and out.api_version == 0 and len(frame) >= 6 \
                and not _INT16.unpack_from(frame, 4)[0]:
            self.sasl_tokens = True  # SASL before KIP-152: the client's next frames are bare tokens
        events.append(ResponseReceived(frame, out))
        return events

    def lost_place(self, events: list[Event] | None = None) -> list[Event]:
        """Bytes were lost (or a real request ended the tokens): the SASL tokens' pairing is gone;
        their waiting tokens are unanswered."""
        events = [] if events is None else events
        self.sasl_tokens = False
        while self._tokens:
            events.append(RequestUnanswered(self._tokens.popleft(), "skipped"))
        return events

    def close(self, why: str) -> list[Event]:
        """Everything still waiting is unanswered (``why``: what ended the connection)."""
        events: list[Event] = [RequestUnanswered(out, why) for out in self.in_flight.values()]
        self.in_flight.clear()
        events.extend(RequestUnanswered(token, why) for token in self._tokens)
        self._tokens.clear()
        return events
