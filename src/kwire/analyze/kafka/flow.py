"""``KafkaFlow``: one connection's stream events in, ``Exchange``s out.

``KafkaFlow(conn, ctx)`` splits each direction into size-prefixed frames with the codec's
``FrameSplitter`` (or, after lost bytes, ``resync``'s scan), and hands the frames to the
connection machine in its observer role (``kwire.protocol.connection.ObserverConnection``), which
pairs responses with requests, sees acks=0 and the SASL v0 tokens; this module turns its events
into exchanges, decoding requests and responses with ``kwire.protocol``.  What a capture throws
at it, and what it does:

* Responses come in request order on a Kafka connection, so a response to request N means the
  requests sent before N were answered in bytes the capture lost: they become ``UNANSWERED``
  (``details["unanswered_by"] = "skipped"``) at once, which also keeps the in-flight table small.
* Requests still in flight when the flow closes are ``UNANSWERED`` by 'client_close' (the
  client's direction ended first: it closed with them in flight), 'connection_end' (the server
  ended first) or 'capture_end' (the capture stopped first).
* Produce with acks=0 gets no response: ``NO_RESPONSE_EXPECTED`` as soon as the request is read.
* ApiVersions v3+ refused with UNSUPPORTED_VERSION is answered in the v0 layout (KIP-511).
* After a SaslHandshake v0 answered without error, both sides exchange raw SASL tokens
  (size-prefixed, no Kafka header) until the client sends a real request again: those become
  ``SaslToken`` exchanges instead of garbage requests.
* A ``Gap``, a size prefix no broker would accept (``forged_length``), or a direction captured
  from its middle: the partial frame is dropped and a bounded scan looks for the next plausible
  frame start (a request header the codec knows; a response naming a request in flight).
* Frames that do not decode become ``UNDECODABLE`` exchanges with a warning; nothing raises out
  of ``feed``/``close``.

The scan after a lost place is ``resync``'s; the fields each api's exchanges take are read by
``readers``.  Record batches are decompressed to count records and uncompressed bytes (``records``).
"""

from __future__ import annotations

import struct
from collections import Counter, OrderedDict
from uuid import UUID

from kwire.protocol import FrameSplitter, ProtocolError, api_name, correlation_id_of_response, decode_request
from kwire.protocol.connection import (
    FrameError,
    ObserverConnection,
    RequestUnanswered,
    ResponseReceived,
    SaslTokenReceived,
    api_versions_error_code,
    decode_api_versions_response,
)
from kwire.protocol.frames import decode_response

from ..exchange import (
    ANSWERED,
    NO_RESPONSE_EXPECTED,
    ORPHAN_RESPONSE,
    UNANSWERED,
    UNDECODABLE,
    Exchange,
    FlowContext,
)
from ..tcp import TO_CLIENT, TO_SERVER, Chunk, Connection, End, Gap
from .constants import _DIRECTION_NAMES, _NEWEST, API_VERSIONS, SASL_HANDSHAKE
from .errors import _error_name, _error_walker
from .readers import _REQUEST_READERS, _RESPONSE_READERS, _has_throttle
from .resync import _Resync, _Scan, _Side

SASL_TOKEN = "SaslToken"  #: api name of the raw SASL tokens after a SaslHandshake v0
UNKNOWN_API = "Unknown"  #: api name when not even the request header could be read

# Requests waiting for a response, per connection.  Kafka clients keep at most a handful in
# flight (max.in.flight.requests.per.connection is 5 by default); beyond this the capture has
# lost the responses (one-sided capture) and the oldest are reported rather than kept forever.
_MAX_IN_FLIGHT = 1024

class _InFlight:
    """A request waiting for its response (the context of the machine's ``Outstanding``)."""

    __slots__ = ("ex", "key", "version", "aux")

    def __init__(self, ex: Exchange, key: int, version: int, aux):
        self.ex = ex
        self.key = key
        self.version = version
        self.aux = aux


class _InFlightView:
    """The machine's requests in flight as ``resync`` reads them: correlation id -> ``_InFlight``."""

    __slots__ = ("_outstanding",)

    def __init__(self, outstanding: OrderedDict):
        self._outstanding = outstanding

    def __bool__(self) -> bool:
        return bool(self._outstanding)

    def __len__(self) -> int:
        return len(self._outstanding)

    def __iter__(self):
        return iter(self._outstanding)

    def get(self, cid: int):
        out = self._outstanding.get(cid)
        return None if out is None else out.context


def _exchange_of(event: RequestUnanswered) -> Exchange | None:
    """The exchange of a request (or a client's SASL token) the machine says is unanswered."""
    context = event.context
    return context.ex if context.__class__ is _InFlight else context


class KafkaFlow(_Resync):
    """Decodes one TCP connection's Kafka traffic into exchanges (see the module docstring)."""

    def __init__(self, conn: Connection, ctx: FlowContext):
        self.conn = conn
        self.ctx = ctx
        self._capture = ctx.capture
        self._conn_id = conn.id
        self._client = conn.client
        self._server = conn.server
        self._keep = ctx.keep_messages
        self._max = ctx.max_frame_size
        self._sides = (_Side(self._max, conn.directions[TO_SERVER].isn is not None),
                       _Side(self._max, conn.directions[TO_CLIENT].isn is not None))
        self._wire = ObserverConnection(max_frame_size=self._max, max_in_flight=_MAX_IN_FLIGHT)
        self._in_flight = _InFlightView(self._wire.in_flight)
        # Topic ids (Fetch v13+, Produce v13+) are named by Metadata responses, which a client
        # often reads on another connection than the one it fetches on: one map per capture.
        self._topic_names: dict[UUID, str] = ctx.topic_names
        self._client_id: str | None = None  # the last one seen: SASL tokens carry none
        self._client_id_bytes: bytes | None = None  # its length prefix and bytes, for the resync scan
        self._verdicts: dict[tuple, bool] = {}  # see _verdict
        self._sasl_mechanism: str | None = None
        self._warned_in_flight = False
        self._closed = False
        self._closed_first: int | None = None  # the direction that ended first (FIN or RST)

    # -- Flow ----------------------------------------------------------------------------------

    def feed(self, direction: int, event) -> list[Exchange]:
        out: list[Exchange] = []
        try:
            kind = type(event)
            if kind is Chunk:
                side = self._sides[direction]
                frame = event.frame
                if side.scan is None:
                    splitter = side.splitter
                    had = splitter.buffered
                    try:
                        frames = splitter.feed(event.data)
                    except ProtocolError as e:  # a negative or oversized size prefix
                        frames = self._forged(direction, side, event, had, e)
                else:
                    frames = self._rescan(direction, side, event.data, frame)
                if frames:
                    ts = event.ts_ns
                    if direction == TO_SERVER:
                        on_request = self._request
                        for body in frames:
                            on_request(body, frame, ts, out)
                    else:
                        on_response = self._response
                        for body in frames:
                            on_response(body, frame, ts, out)
            elif kind is Gap:
                self._gap(direction, event, out)
            elif kind is End:
                self._sides[direction].ended = event.reason
                if self._closed_first is None and event.reason in ("fin", "rst"):
                    self._closed_first = direction
        except Exception as e:  # a bug must not stop the analysis of the whole capture
            self._internal_error(direction, event, e)
        return out

    def close(self) -> list[Exchange]:
        out: list[Exchange] = []
        if self._closed:
            return out
        self._closed = True
        try:
            ended = any(s.ended in ("fin", "rst") for s in self._sides) or any(
                d.ended in ("fin", "rst") for d in self.conn.directions)
            # The client ending first gave its requests up itself (a consumer closing during its
            # long-poll Fetch: Kafka's NetworkClient cancels what is in flight on close).
            why = ("client_close" if self._closed_first == TO_SERVER else "connection_end") if ended \
                else "capture_end"
            for event in self._wire.close(why):
                self._unanswered_to(out, event, why)
            for direction, side in enumerate(self._sides):
                name = _DIRECTION_NAMES[direction]
                scan = side.scan
                if scan is not None:
                    lost = scan.skipped + len(scan.buf)
                    if lost and not scan.probe:
                        self._warn(scan.frame, "resync",
                                   f"{name}: no frame start found in the {lost} bytes after frame {scan.frame}")
                    elif lost:
                        self._warn(scan.frame, "truncated",
                                   f"{name}: {lost} bytes without a whole frame (the capture holds only a part)")
                elif side.splitter.buffered:
                    self._warn(self.conn.last_frame, "truncated",
                               f"{name}: the last frame is incomplete ({side.splitter.buffered} bytes of it captured)")
        except Exception as e:
            self._internal_error(TO_SERVER, None, e)
        return out

    # -- framing -------------------------------------------------------------------------------

    def _forged(self, direction: int, side: _Side, event: Chunk, had: int, error: ProtocolError) -> list[bytes]:
        """A size prefix no broker accepts: drop the partial frame and scan this chunk for a frame start.

        With no partial frame before the chunk, the chunk started at a frame boundary: frames
        before the bad prefix are still found (the scan takes them at once).
        """
        self._warn(event.frame, "forged_length",
                   f"{_DIRECTION_NAMES[direction]}: {error.reason} at frame {event.frame}; resynchronising"
                   + (f" ({had} bytes of a partial frame dropped)" if had else ""))
        side.splitter = FrameSplitter(self._max)
        side.scan = _Scan(event.frame)
        return self._rescan(direction, side, event.data, event.frame)

    def _gap(self, direction: int, event: Gap, out: list[Exchange]) -> None:
        side = self._sides[direction]
        scan = side.scan
        partial = side.splitter.buffered if scan is None else len(scan.buf)
        self._warn(event.frame, "gap", f"{_DIRECTION_NAMES[direction]}: {event.size} bytes missing before frame "
                                       f"{event.frame}" + (f"; {partial} bytes of a partial frame dropped"
                                                           if partial else ""))
        side.splitter = FrameSplitter(self._max)
        side.scan = _Scan(event.frame)
        for lost in self._wire.lost_place():  # the tokens' pairing is lost: look for Kafka frames again
            self._unanswered_to(out, lost, "skipped")

    # -- requests ------------------------------------------------------------------------------

    def _request(self, body: bytes, frame: int, ts: int, out: list[Exchange]) -> None:
        for event in self._wire.request_frame(body):
            kind = event.__class__
            if kind is RequestUnanswered:
                why = event.why
                if why == "reused":  # the client reused a correlation id still waiting: the first lost its answer
                    cid = event.request.correlation_id
                    self._warn(frame, "correlation", f"correlation id {cid} reused at frame {frame} while waiting")
                elif why == "overflow" and not self._warned_in_flight:
                    self._warned_in_flight = True
                    self._warn(frame, "in_flight", f"over {_MAX_IN_FLIGHT} requests without a response (the "
                                                   f"capture lacks the server's side?): the oldest are reported "
                                                   f"unanswered")
                self._unanswered_to(out, event, "skipped")
            elif kind is SaslTokenReceived:
                event.context = self._sasl_token(body, frame, ts)
            elif kind is FrameError:  # not even a request header
                message = f"request at frame {frame} has no readable header: {event.error}"
                self._warn(frame, "undecodable", message)
                ex = Exchange("kafka", self._capture, self._conn_id, self._client, self._server, UNKNOWN_API, -1,
                              -1, -1, UNDECODABLE, self._client_id, frame, ts)
                ex.request_bytes = len(body) + 4
                ex.warning = message
                out.append(ex)
            else:
                self._request_received(event, body, frame, ts, out)

    def _request_received(self, event, body: bytes, frame: int, ts: int, out: list[Exchange]) -> None:
        header = event.header
        try:
            req = decode_request(body)[1]
            warning = None
        except ProtocolError as e:
            req, warning = self._lenient_request(body, header, frame, e)
        key = header.request_api_key
        version = header.request_api_version
        cid = header.correlation_id
        client_id = header.client_id
        if client_id != self._client_id and req is not None:  # (a garbage header must not teach the scan)
            self._client_id = client_id
            encoded = b"\xff\xff" if client_id is None else client_id.encode()
            self._client_id_bytes = encoded if client_id is None else struct.pack(">h", len(encoded)) + encoded
        name = api_name(key) if key in _NEWEST else f"ApiKey({key})"
        ex = Exchange("kafka", self._capture, self._conn_id, self._client, self._server, name, key, version, cid,
                      ANSWERED, client_id, frame, ts)
        ex.request_bytes = len(body) + 4
        aux = None
        if req is None:  # undecodable, but its header is known: its response can still be paired
            ex.status = UNDECODABLE
            ex.warning = warning
        else:
            if warning is not None:
                ex.warning = warning
            if self._keep:
                ex.request = req
            reader = _REQUEST_READERS.get(key)
            if reader is not None:
                aux = reader(self, ex, req, version, frame)
        outstanding = event.outstanding
        if outstanding is None:  # Produce with acks=0: no response comes
            if req is not None:
                ex.status = NO_RESPONSE_EXPECTED
            out.append(ex)
            return
        outstanding.context = _InFlight(ex, key, version, aux)

    def _lenient_request(self, body: bytes, header, frame: int, error: ProtocolError):
        """A request whose header reads but the strict decode refused: (request or None, warning)."""
        key, version = header.request_api_key, header.request_api_version
        if key not in _NEWEST:
            message = f"unknown api key {key} (version {version}, correlation id {header.correlation_id})"
            self._warn(frame, "unknown_api", f"frame {frame}: {message}")
            return None, message
        if version > _NEWEST[key] or version < 0:
            message = f"{api_name(key)} v{version} is not a version kwire knows"
            self._warn(frame, "unknown_api", f"frame {frame}: {message} (correlation id {header.correlation_id})")
            return None, message
        try:  # bytes left over after a request that otherwise decodes (a newer client, padding)
            req = decode_request(body, strict=False)[1]
        except ProtocolError as e:
            message = f"{api_name(key)} v{version} request does not decode: {e}"
            self._warn(frame, "undecodable", f"frame {frame}: {message}")
            return None, message
        message = f"{api_name(key)} v{version} request: {error}"
        self._warn(frame, "undecodable", f"frame {frame}: {message}")
        return req, message

    def _sasl_token(self, body: bytes, frame: int, ts: int) -> Exchange:
        ex = Exchange("kafka", self._capture, self._conn_id, self._client, self._server, SASL_TOKEN, -1, -1, -1,
                      ANSWERED, self._client_id, frame, ts)
        ex.request_bytes = len(body) + 4
        if self._sasl_mechanism:
            ex.details["mechanism"] = self._sasl_mechanism
        return ex

    # -- responses -----------------------------------------------------------------------------

    def _response(self, body: bytes, frame: int, ts: int, out: list[Exchange]) -> None:
        for event in self._wire.response_frame(body):
            kind = event.__class__
            if kind is ResponseReceived:
                if event.context is None:  # its request's reading failed inside kwire (reported)
                    out.append(self._orphan(body, frame, ts))
                else:
                    self._response_received(event.context, body, frame, ts, out)
            elif kind is RequestUnanswered:  # answered in bytes the capture lost
                self._unanswered_to(out, event, "skipped")
            elif kind is SaslTokenReceived:  # the server's answer to a raw SASL token
                ex = event.context
                ex.response_frame, ex.response_ts_ns, ex.response_bytes = frame, ts, len(body) + 4
                out.append(ex)
            else:  # FrameError: a response nothing waits for
                out.append(self._orphan(body, frame, ts))

    def _response_received(self, entry: _InFlight, body: bytes, frame: int, ts: int, out: list[Exchange]) -> None:
        ex = entry.ex
        ex.response_frame = frame
        ex.response_ts_ns = ts
        ex.response_bytes = len(body) + 4
        if ex.status == UNDECODABLE:  # its request did not decode; ApiVersions still says its error
            if entry.key == API_VERSIONS and len(body) >= 6:
                self._set_error(ex, [api_versions_error_code(body)])
            out.append(ex)
            return
        key = entry.key
        version = entry.version
        resp, warning = self._decode_response(body, entry)
        if resp is None:
            ex.status = UNDECODABLE
            ex.warning = warning
            self._warn(frame, "undecodable", f"frame {frame}: {warning}")
            if key == API_VERSIONS and len(body) >= 6:
                self._set_error(ex, [api_versions_error_code(body)])
                ex.status = ANSWERED
            out.append(ex)
            return
        if warning is not None:
            ex.warning = warning
            self._warn(frame, "undecodable", f"frame {frame}: {warning}")
        if self._keep:
            ex.response = resp
        if _has_throttle(key):
            ex.throttle_ms = resp.throttle_time_ms
        walker = _error_walker(key, version)
        if walker is not None:
            codes: list[int] = []
            walker(resp, codes)
            if codes:
                self._set_error(ex, codes)
        reader = _RESPONSE_READERS.get(key)
        if reader is not None:
            reader(self, ex, resp, version, entry.aux, frame)
        if key == SASL_HANDSHAKE and version == 0 and not resp.error_code:
            # SASL before KIP-152: the client's next frames are the mechanism's raw tokens (the
            # machine switched to them).
            self._sasl_mechanism = entry.aux
        out.append(ex)

    def _decode_response(self, body: bytes, entry: _InFlight):
        """(response, warning) or (None, why it does not decode)."""
        key, version = entry.key, entry.version
        if key == API_VERSIONS:
            return self._decode_api_versions(body, version)
        try:
            return decode_response(body, key, version)[1], None
        except ProtocolError as e:
            try:  # bytes left over after a response that otherwise decodes (a newer broker)
                response = decode_response(body, key, version, strict=False)[1]
            except ProtocolError:
                return None, f"{api_name(key)} v{version} response does not decode: {e}"
            return response, f"{api_name(key)} v{version} response: {e}"

    def _decode_api_versions(self, body: bytes, version: int):
        # KIP-511: a broker refusing the request's version answers in the v0 layout (the machine's reading).
        try:
            return decode_api_versions_response(body, version), None
        except ProtocolError as e:
            return None, f"ApiVersions v{version} response decodes in neither its layout nor v0's: {e}"

    def _set_error(self, ex: Exchange, codes: list[int]) -> None:
        names = [_error_name(c) for c in codes]
        ex.error_code = codes[0]
        ex.error = names[0]
        ex.errors = Counter(names)

    def _orphan(self, body: bytes, frame: int, ts: int) -> Exchange:
        raw = self._wire.sasl_tokens
        cid = correlation_id_of_response(body) if len(body) >= 4 and not raw else -1
        ex = Exchange("kafka", self._capture, self._conn_id, self._client, self._server,
                      SASL_TOKEN if raw else UNKNOWN_API, -1, -1, cid, ORPHAN_RESPONSE)
        ex.response_frame, ex.response_ts_ns, ex.response_bytes = frame, ts, len(body) + 4
        return ex

    def _unanswered_to(self, out: list[Exchange], event: RequestUnanswered, why: str) -> None:
        ex = _exchange_of(event)
        if ex is not None:  # (None: its request's reading failed inside kwire, and was reported)
            out.append(self._unanswered(ex, why))

    def _unanswered(self, ex: Exchange, why: str) -> Exchange:
        if ex.status == ANSWERED:
            ex.status = UNANSWERED
        ex.details["unanswered_by"] = why
        return ex

    # -- helpers -------------------------------------------------------------------------------

    def _topic_name(self, topic_id) -> str:
        """A topic named by id: its name if a Metadata response on this connection gave it."""
        if topic_id is None:
            return ""
        return self._topic_names.get(topic_id) or str(topic_id)

    def _warn(self, frame: int, kind: str, message: str) -> None:
        self.ctx.warn(self._capture, frame, self._conn_id, kind, message)

    def _internal_error(self, direction: int, event, error: Exception) -> None:
        frame = getattr(event, "frame", 0)
        self._warn(frame, "internal", f"{_DIRECTION_NAMES[direction]}: {type(error).__name__}: {error} "
                                      f"(frame {frame}); resynchronising")
        side = self._sides[direction]
        side.splitter = FrameSplitter(self._max)
        side.scan = _Scan(frame)
