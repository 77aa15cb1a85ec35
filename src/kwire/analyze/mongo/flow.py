"""``MongoFlow``: one MongoDB connection's messages paired into ``Exchange``s.

Pairing follows the protocol's turn-taking:

* a request with moreToCome gets no reply: ``NO_RESPONSE_EXPECTED`` at once (so do the legacy
  OP_INSERT, OP_UPDATE, OP_DELETE and OP_KILL_CURSORS);
* a reply with moreToCome (exhaust cursor, streaming hello) is followed by more replies, each
  naming the reply before it in responseTo.  Each becomes an exchange of its own, with the
  request's api, requestID and namespace, but timed from the reply before it (that is when the
  server started on it): its ``request_frame`` / ``request_ts_ns`` are that reply's,
  ``request_bytes`` is 0 (nothing was sent for it), and ``details['exhaust_reply']`` counts it;
* a server answers the requests of one connection one at a time, in order: when a reply names a
  later request, the earlier ones were never answered (``details['unanswered_by'] = 'skipped'``);
* a reply naming no request the capture holds is an ``ORPHAN_RESPONSE``.

``Exchange.details`` keys, each present only when it applies: from the request 'compressor',
'checksum' ('valid' / 'mismatch'), 'exhaust_allowed', 'documents' / 'updates' / 'deletes' (batch
sizes), 'cursor_id', 'expected_wait_ms' (maxAwaitTimeMS of a streaming hello, maxTimeMS of an
awaitData getMore), 'skip' / 'return' (legacy query), 'command' (OP_COMMAND), 'cursors'
(OP_KILL_CURSORS); from the reply 'response_id' (its requestID), 'response_opcode',
'response_compressor', 'response_checksum', 'n', 'nModified', 'nReturned', 'cursor_id' (when the
request named none), 'errmsg'; and 'exhaust_reply', 'first_request_frame', 'unanswered_by'.

Framing, and the damaged streams it copes with, are ``framing``'s; decoding a message is
``decode``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..exchange import (
    ANSWERED,
    NO_RESPONSE_EXPECTED,
    ORPHAN_RESPONSE,
    UNANSWERED,
    UNDECODABLE,
    Exchange,
    FlowContext,
)
from ..tcp import TO_SERVER, Chunk, Connection, End, Gap
from .commands import (
    _HELLO_COMMANDS,
    _NOT_A_COLLECTION,
    _SEQUENCE_FIELDS,
    _app_name,
    _int,
    _reply_facts,
    _split_namespace,
    _unwrap_query,
)
from .decode import _kept, decode_message
from .errors import ERROR_NAMES
from .framing import _Framing, _Side
from .message import Message, _count, bson
from .wire import (
    _CLIENT_OPCODES,
    _EXHAUST_ALLOWED,
    _MORE_TO_COME,
    _NO_REPLY_OPCODES,
    _QUERY_AWAIT_DATA,
    _QUERY_EXHAUST,
    _QUERY_TAILABLE,
    _REPLY_CURSOR_NOT_FOUND,
    _REPLY_QUERY_FAILURE,
    _SENDER,
    _SERVER_OPCODES,
    MAX_MESSAGE_SIZE,
    OP_COMMAND,
    OP_GET_MORE,
    OP_INSERT,
    OP_KILL_CURSORS,
    OP_MSG,
    OP_QUERY,
    OP_REPLY,
    OPCODE_NAMES,
)

# A tailable awaitData cursor's getMore without maxTimeMS waits up to the server's default of 1 s.
_DEFAULT_AWAIT_MS = 1000

_MAX_WAITING = 4096  # requests in flight per connection (MongoDB answers one at a time; this is garbage's bound)
_MAX_AWAIT_CURSORS = 1024


@dataclass(slots=True, eq=False)
class _Request:
    """A request waiting for its reply (or replies)."""

    request_id: int
    opcode: int
    api: str
    frame: int | None
    ts_ns: int | None
    size: int
    database: str | None = None
    collection: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    message: Any = None  # kept message (ctx.keep_messages)
    warning: str | None = None
    undecodable: bool = False
    replies_expected: bool = True
    legacy_command: bool = False  # an OP_QUERY on '$cmd': its OP_REPLY holds a command reply
    legacy_exhaust: bool = False  # OP_QUERY with the Exhaust flag: its OP_REPLYs chain without a flag
    opens_await_cursor: bool = False  # find / aggregate of a tailable awaitData cursor
    replies: int = 0
    last_reply_frame: int | None = None
    last_reply_ts: int | None = None
    response_gap: bool = False  # bytes of the reply direction were lost while it waited


class MongoFlow(_Framing):
    """One MongoDB connection's decoder (see the docstrings of this module and ``framing``)."""

    def __init__(self, conn: Connection, ctx: FlowContext):
        if bson is None:
            raise ImportError("decoding MongoDB traffic needs pymongo (its bson package): pip install pymongo")
        self.conn = conn
        self.ctx = ctx
        self._limit = min(ctx.max_frame_size, MAX_MESSAGE_SIZE)
        self._client = conn.client
        self._server = conn.server
        self._sides = (_Side(), _Side())
        self._waiting: dict[int, _Request] = {}  # requestID -> request waiting for its first reply
        self._chains: dict[int, _Request] = {}  # requestID of a reply with moreToCome -> its request
        self._await_cursors: dict[int, None] = {}  # ids of tailable awaitData cursors, oldest first
        self._app_name: str | None = None
        self._ends: dict[int, str] = {}

    # -- Flow -------------------------------------------------------------------------------

    def feed(self, direction: int, event: Chunk | Gap | End) -> list[Exchange]:
        out: list[Exchange] = []
        kind = type(event)
        try:
            if kind is Chunk:
                self._on_chunk(direction, event, out)
            elif kind is Gap:
                self._on_gap(direction, event, out)
            elif kind is End:
                self._on_end(direction, event)
        except Exception as e:  # a decoder bug must not stop the capture's analysis: drop and rescan
            side = self._sides[direction]
            side.splitter, side.head, side.scan, side.discard, side.probation = None, b"", bytearray(), 0, False
            self._warn(event.frame, "internal", f"MongoDB decoder error on the {_SENDER[direction]} stream "
                                                f"({type(e).__name__}: {e}); scanning for the next message")
        return out

    def close(self) -> list[Exchange]:
        ended = set(self._ends.values())
        by = "connection_end" if ended & {"fin", "rst", "reused"} else "capture_end"
        # _ends keeps the order the directions ended in: the client ending first (a driver closing
        # a pooled connection) gave its waiting requests up itself.
        first = next((d for d, reason in self._ends.items() if reason in ("fin", "rst")), None)
        if first == TO_SERVER:
            by = "client_close"
        out = [self._unanswered(req, by) for req in self._waiting.values()]
        self._waiting.clear()
        self._chains.clear()  # an exhaust stream or streaming hello left open: its request was answered
        return out

    # -- messages cut by a gap (seen by ``framing``) ----------------------------------------

    def _lost_request(self, request_id: int, opcode: int, flags: int, length: int, gap: Gap,
                      out: list[Exchange]) -> None:
        """A request cut by a gap: known by its header only."""
        if opcode not in _CLIENT_OPCODES:
            return
        req = _Request(request_id, opcode, OPCODE_NAMES[opcode], gap.frame, gap.ts_ns, length,
                       warning="the request was cut by a capture gap", undecodable=True)
        if opcode in _NO_REPLY_OPCODES or flags & _MORE_TO_COME:
            out.append(self._exchange(req, UNDECODABLE))
        else:
            self._wait(req, gap.frame, out)

    def _lost_reply(self, reply_id: int, response_to: int, flags: int, length: int, gap: Gap,
                    out: list[Exchange]) -> None:
        """A reply cut by a gap still answers its request."""
        req, chained = self._request_for(response_to, out)
        if req is None:
            return
        ex = self._answer(req, chained, UNDECODABLE, gap.frame, gap.ts_ns, length)
        ex.details["response_id"] = reply_id
        ex.warning = "the reply was cut by a capture gap"
        out.append(ex)
        if flags & _MORE_TO_COME:
            self._chain(reply_id, req, gap.frame, gap.ts_ns)

    # -- messages ---------------------------------------------------------------------------

    def _message(self, d: int, side: _Side, raw: bytes, chunk: Chunk, out: list[Exchange]) -> bool:
        """Decode one framed message and pair it.  False: it cannot be a message, the stream is lost."""
        if not self._sane_length(d, len(raw), chunk.frame):
            side.splitter = None
            return False
        msg = decode_message(raw, keep_documents=self.ctx.keep_messages, max_size=self._limit)
        if side.probation:
            side.probation = False
            if msg.error is not None:  # the header found by scanning was a look-alike: scan on past it
                side.skipped += 1
                side.splitter = None
                return False
            if side.skipped:
                self._warn(chunk.frame, "resync", f"{_SENDER[d]} stream: skipped {side.skipped} bytes to the "
                                                  f"next message")
                side.skipped = 0
        what = "request" if d == TO_SERVER else "reply"
        for kind, text in msg.problems:
            self._warn(chunk.frame, kind, f"{what} {msg.request_id}: {text}")
        if msg.error is not None:
            self._warn(chunk.frame, "undecodable", f"{what} {msg.request_id} "
                                                   f"({OPCODE_NAMES.get(msg.opcode, msg.opcode)}): {msg.error}")
        if d == TO_SERVER:
            self._on_request(msg, chunk, out)
        else:
            self._on_reply(msg, chunk, out)
        return True

    def _on_request(self, msg: Message, chunk: Chunk, out: list[Exchange]) -> None:
        op = msg.opcode
        req = _Request(msg.request_id, op, OPCODE_NAMES.get(op, f"opcode {op}"), chunk.frame, chunk.ts_ns,
                       msg.length)
        if self.ctx.keep_messages:
            req.message = _kept(msg)
        if msg.compressor is not None:
            req.details["compressor"] = msg.compressor
        if msg.checksum is not None:
            req.details["checksum"] = msg.checksum
            if msg.checksum == "mismatch":
                req.warning = "the request's checksum does not match"
        if op not in _CLIENT_OPCODES:
            req.undecodable = True
            req.warning = f"request: {msg.error or f'{req.api} is not a request opcode'}"
            if msg.error is None:  # (a decoding error was warned about already)
                self._warn(chunk.frame, "undecodable", f"request {msg.request_id}: {req.warning}")
            out.append(self._exchange(req, UNDECODABLE))
            return
        if msg.error is not None:
            req.undecodable = True
            req.warning = f"request: {msg.error}"
        req.database, req.collection = _split_namespace(msg.namespace)
        if op == OP_MSG:
            self._command(req, msg.body, msg.sequences)
            req.replies_expected = not msg.flags & _MORE_TO_COME
            if msg.flags & _EXHAUST_ALLOWED:
                req.details["exhaust_allowed"] = True
        elif op == OP_QUERY:
            if req.collection == "$cmd" and msg.body:
                req.collection = None
                req.legacy_command = True
                self._command(req, _unwrap_query(msg.body), {})
            else:
                req.details.update(msg.fields)
                req.opens_await_cursor = bool(msg.flags & _QUERY_TAILABLE and msg.flags & _QUERY_AWAIT_DATA)
            req.legacy_exhaust = bool(msg.flags & _QUERY_EXHAUST)
        elif op == OP_COMMAND:
            req.database, req.collection = msg.namespace, None
            if msg.command_name:
                req.details["command"] = msg.command_name
        elif op == OP_INSERT:
            req.details["documents"] = _count(msg.documents)
        elif op in (OP_GET_MORE, OP_KILL_CURSORS):
            req.details.update(msg.fields)
        if op in _NO_REPLY_OPCODES or not req.replies_expected:
            out.append(self._exchange(req, UNDECODABLE if req.undecodable else NO_RESPONSE_EXPECTED))
        else:
            self._wait(req, chunk.frame, out)

    def _command(self, req: _Request, body: dict | None, sequences: dict[str, Any]) -> None:
        """Name, namespace and facts of a command (an OP_MSG body, or an OP_QUERY on $cmd)."""
        if not body:
            return
        name = next(iter(body))
        req.api = name
        value = body[name]
        db = body.get("$db")
        if isinstance(db, str):
            req.database = db
        if name == "getMore":
            collection = body.get("collection")
            cursor_id = _int(value)
            if cursor_id is not None:
                req.details["cursor_id"] = cursor_id
        else:
            collection = value if name not in _NOT_A_COLLECTION else None
        req.collection = collection if isinstance(collection, str) else None
        for key in _SEQUENCE_FIELDS:
            batch = sequences.get(key, body.get(key))
            if isinstance(batch, (list, int)) and not isinstance(batch, bool):
                req.details[key] = _count(batch)
        wait = None
        if name in _HELLO_COMMANDS:
            app = _app_name(body.get("client"))
            if app is not None:
                self._app_name = app
            wait = _int(body.get("maxAwaitTimeMS"))
        elif name == "getMore":
            wait = _int(body.get("maxTimeMS"))
            if wait is None and req.details.get("cursor_id") in self._await_cursors:
                wait = _DEFAULT_AWAIT_MS
        elif name in ("find", "aggregate"):
            pipeline = body.get("pipeline")
            change_stream = (isinstance(pipeline, list) and pipeline and isinstance(pipeline[0], dict)
                             and "$changeStream" in pipeline[0])
            req.opens_await_cursor = bool((body.get("tailable") and body.get("awaitData")) or change_stream)
        if wait is not None and wait > 0:
            req.details["expected_wait_ms"] = wait

    def _wait(self, req: _Request, frame: int, out: list[Exchange]) -> None:
        """Keep a request until its reply; bounded."""
        old = self._waiting.pop(req.request_id, None)
        if old is not None:
            old.warning = old.warning or "a later request reused its requestID before a reply came"
            out.append(self._unanswered(old, None))
        if len(self._waiting) >= _MAX_WAITING:
            oldest = self._waiting.pop(next(iter(self._waiting)))
            oldest.warning = f"given up: more than {_MAX_WAITING} requests waiting on the connection"
            self._warn(frame, "in_flight_limit", oldest.warning)
            out.append(self._unanswered(oldest, None))
        self._waiting[req.request_id] = req

    def _request_for(self, response_to: int, out: list[Exchange]) -> tuple[_Request | None, bool]:
        """The request a reply answers, and whether it follows an earlier reply (moreToCome)."""
        if response_to in self._waiting:
            # The server answers in order: requests sent before this one never will be.
            for request_id in list(self._waiting):
                if request_id == response_to:
                    break
                out.append(self._unanswered(self._waiting.pop(request_id), "skipped"))
            return self._waiting.pop(response_to), False
        req = self._chains.pop(response_to, None)
        return req, req is not None

    def _chain(self, reply_id: int, req: _Request, frame: int, ts_ns: int) -> None:
        """A reply with moreToCome: the next reply names this one."""
        req.last_reply_frame, req.last_reply_ts = frame, ts_ns
        if len(self._chains) >= _MAX_WAITING:
            self._chains.pop(next(iter(self._chains)))
        self._chains[reply_id] = req

    def _on_reply(self, msg: Message, chunk: Chunk, out: list[Exchange]) -> None:
        req, chained = self._request_for(msg.response_to, out)
        undecodable = msg.error is not None or msg.opcode not in _SERVER_OPCODES
        if req is None:
            ex = Exchange(protocol="mongodb", capture=self.ctx.capture, conn=self.conn.id, client=self._client,
                          server=self._server, api=OPCODE_NAMES.get(msg.opcode, f"opcode {msg.opcode}"),
                          api_key=msg.opcode, api_version=-1, correlation_id=msg.response_to,
                          status=UNDECODABLE if undecodable else ORPHAN_RESPONSE, client_id=self._app_name,
                          response_frame=chunk.frame, response_ts_ns=chunk.ts_ns, response_bytes=msg.length)
        else:
            status = UNDECODABLE if undecodable or req.undecodable else ANSWERED
            ex = self._answer(req, chained, status, chunk.frame, chunk.ts_ns, msg.length)
        if self.ctx.keep_messages:
            ex.response = _kept(msg)
        details = ex.details
        details["response_id"] = msg.request_id
        details["response_opcode"] = msg.opcode
        if msg.compressor is not None:
            details["response_compressor"] = msg.compressor
        if msg.checksum is not None:
            details["response_checksum"] = msg.checksum
        if undecodable:
            reason = msg.error or f"{OPCODE_NAMES.get(msg.opcode, msg.opcode)} is not a reply opcode"
            ex.warning = f"reply: {reason}" if ex.warning is None else f"{ex.warning}; reply: {reason}"
        elif msg.checksum == "mismatch":
            ex.warning = ex.warning or "the reply's checksum does not match"
        if msg.opcode == OP_REPLY:
            self._legacy_reply(ex, req, msg)
        else:
            _reply_facts(ex, msg.body)
        if req is None:
            out.append(ex)
            return
        more = (msg.opcode == OP_MSG and msg.flags & _MORE_TO_COME) or (
            msg.opcode == OP_REPLY and req.legacy_exhaust and msg.fields.get("cursor_id"))
        if more:
            self._chain(msg.request_id, req, chunk.frame, chunk.ts_ns)
        if req.opens_await_cursor and details.get("cursor_id"):
            self._await_cursors[details["cursor_id"]] = None
            if len(self._await_cursors) > _MAX_AWAIT_CURSORS:
                self._await_cursors.pop(next(iter(self._await_cursors)))
        out.append(ex)

    def _legacy_reply(self, ex: Exchange, req: _Request | None, msg: Message) -> None:
        if req is not None and req.legacy_command:
            _reply_facts(ex, msg.body)
        elif msg.flags & _REPLY_QUERY_FAILURE:
            _reply_facts(ex, msg.body if isinstance(msg.body, dict) else {"$err": "query failure"})
        else:
            ex.details["nReturned"] = msg.fields.get("number_returned", 0)
            ex.details.setdefault("cursor_id", msg.fields.get("cursor_id", 0))
        if msg.flags & _REPLY_CURSOR_NOT_FOUND and ex.error is None:
            ex.error_code, ex.error = 43, ERROR_NAMES[43]
            ex.errors[ex.error] += 1

    # -- exchanges --------------------------------------------------------------------------

    def _exchange(self, req: _Request, status: str) -> Exchange:
        return Exchange(protocol="mongodb", capture=self.ctx.capture, conn=self.conn.id, client=self._client,
                        server=self._server, api=req.api, api_key=req.opcode, api_version=-1,
                        correlation_id=req.request_id, status=status, client_id=self._app_name,
                        request_frame=req.frame, request_ts_ns=req.ts_ns, request_bytes=req.size,
                        database=req.database, collection=req.collection, details=dict(req.details),
                        request=req.message, warning=req.warning)

    def _answer(self, req: _Request, chained: bool, status: str, frame: int, ts_ns: int, size: int) -> Exchange:
        ex = self._exchange(req, status)
        if chained:  # timed from the reply before it: the server's wait for this one
            req.replies += 1
            ex.request_frame, ex.request_ts_ns, ex.request_bytes = req.last_reply_frame, req.last_reply_ts, 0
            ex.details["exhaust_reply"] = req.replies
            ex.details["first_request_frame"] = req.frame
        ex.response_frame, ex.response_ts_ns, ex.response_bytes = frame, ts_ns, size
        return ex

    def _unanswered(self, req: _Request, by: str | None) -> Exchange:
        ex = self._exchange(req, UNANSWERED)
        if req.response_gap:  # its reply may well be in what the capture missed: not the server's fault
            ex.warning = ex.warning or "its reply may be in a capture gap"
        elif by is not None:
            ex.details["unanswered_by"] = by
        return ex

    def _warn(self, frame: int, kind: str, message: str) -> None:
        self.ctx.warn(self.ctx.capture, frame, self.conn.id, kind, message)
