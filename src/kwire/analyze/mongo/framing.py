"""Framing each direction of a MongoDB connection into messages, and finding its place again.

Damaged streams: at a ``Gap`` the message under way is dropped.  If its header was seen, it says
where the next message starts, and what the message was: a request lost that way still waits for
its reply (the pair is ``UNDECODABLE``), a lost reply still answers its request.  Otherwise the
direction scans for a plausible header (sane length, an opcode that direction sends, for a
request responseTo 0, for a reply a responseTo naming a request in flight), bounded to a few
bytes of look-behind.  A length no MongoDB message can have is a 'forged_length' warning and is
scanned past the same way.  A direction whose start the capture missed starts by scanning.
Memory is bounded: per direction one partial message (at most the maximum message size) and the
scan window; per connection bounded tables of requests in flight.

``_Framing`` is the framing half of ``MongoFlow`` (``flow``), whose state it uses: ``conn``,
``ctx``, ``_limit``, ``_sides``, ``_waiting``, ``_chains``, ``_ends``; each whole message goes to
``_message``, a message cut by a gap to ``_lost_request`` / ``_lost_reply``.
"""

from __future__ import annotations

import re

from kwire.protocol.errors import DecodeError
from kwire.protocol.framing import FrameSplitter

from ..exchange import Exchange
from ..tcp import TO_CLIENT, TO_SERVER, Chunk, End, Gap
from .wire import (
    _CLIENT_OPCODES,
    _COMPRESSED_FIELDS,
    _HEADER,
    _INT32,
    _KNOWN_FLAGS,
    _REPLY_FIELDS,
    _SENDER,
    _SERVER_OPCODES,
    _UINT32,
    COMPRESSORS,
    OP_COMPRESSED,
    OP_MSG,
    OP_QUERY,
    OP_REPLY,
    OPCODE_NAMES,
)

_HEAD_KEPT = 20  # bytes kept of the message under way: the header and OP_MSG's flagBits
_EMPTY = memoryview(b"")


class _Side:
    """Framing state of one direction of the connection."""

    __slots__ = ("splitter", "head", "scan", "skipped", "discard", "probation", "started", "ended")

    def __init__(self):
        self.splitter: FrameSplitter | None = None  # None: scanning for a message header
        self.head = b""  # the first bytes (up to _HEAD_KEPT) of the message under way
        self.scan = bytearray()  # the scan window (while scanning)
        self.skipped = 0  # bytes scanned past since the stream was lost
        self.discard = 0  # bytes still to drop: the rest of a message cut by a gap
        self.probation = False  # the next message was found by scanning: if it does not decode, scan on
        self.started = False
        self.ended: str | None = None


def _pattern(opcodes, offset: int, prefix: bytes = b"") -> tuple[re.Pattern, int]:
    """A scan pattern matching a header field at ``offset`` (lookahead: overlapping matches)."""
    alternatives = b"|".join(re.escape(_INT32.pack(op)) for op in sorted(opcodes))
    return re.compile(b"(?=" + re.escape(prefix) + b"(?:" + alternatives + b"))"), offset


# Requests: responseTo 0 then a client opcode (header bytes 8..16).  Replies: a server opcode
# (bytes 12..16); their responseTo is checked against the requests in flight.
_REQUEST_SCAN = _pattern(_CLIENT_OPCODES, 8, b"\x00\x00\x00\x00")
_REPLY_SCAN = _pattern(_SERVER_OPCODES, 12)
# Bytes after the header worth checking before trusting a header found by scanning.
_PROBE_SIZE = {OP_MSG: 26, OP_COMPRESSED: 25, OP_REPLY: 36, OP_QUERY: 20}


class _Framing:
    """The framing half of ``MongoFlow`` (see the module docstring)."""

    def _splitter(self) -> FrameSplitter:
        return FrameSplitter(self.ctx.max_frame_size, byteorder="little", size_includes_prefix=True,
                             keep_prefix=True)

    def _on_chunk(self, d: int, chunk: Chunk, out: list[Exchange]) -> None:
        side = self._sides[d]
        if side.ended:
            return
        if not side.started:
            side.started = True
            if self.conn.directions[d].isn is not None:  # else the capture began mid-stream: scan
                side.splitter = self._splitter()
        data = memoryview(chunk.data)
        if side.discard:
            n = min(side.discard, len(data))
            side.discard -= n
            data = data[n:]
        while len(data):
            if side.splitter is None:
                data = self._scan(d, side, data, chunk.frame)
            else:
                data = self._split(d, side, data, chunk, out)

    def _split(self, d: int, side: _Side, data: memoryview, chunk: Chunk, out: list[Exchange]) -> memoryview:
        """Frame in-sync bytes.  Returns the bytes to scan when the stream turns out to be lost."""
        splitter = side.splitter
        held = splitter.buffered
        if held:
            if held <= len(side.head):  # all of the message under way is in head: start over from it
                data = memoryview(side.head + bytes(data))
                splitter = side.splitter = self._splitter()
            else:  # its size was checked: feed up to its end alone, a bad size after it must not cost it
                rest = _INT32.unpack_from(side.head)[0] - held
                if rest > len(data):
                    splitter.feed(data)
                    return _EMPTY
                (raw,) = splitter.feed(data[:rest])
                side.head = b""
                if not self._message(d, side, raw, chunk, out):
                    return memoryview(raw[1:] + bytes(data[rest:]))
                data = data[rest:]
        # data starts at a message boundary
        try:
            frames = splitter.feed(data)
        except DecodeError:
            return self._bad_size(d, side, data, chunk, out)
        for i, raw in enumerate(frames):
            if not self._message(d, side, raw, chunk, out):
                tail = data[len(data) - splitter.buffered:] if splitter.buffered else b""
                return memoryview(b"".join((raw[1:], *frames[i + 1:], tail)))
        held = splitter.buffered
        side.head = bytes(data[len(data) - held:len(data) - held + _HEAD_KEPT]) if held else b""
        if len(side.head) >= 4:
            length = _INT32.unpack_from(side.head)[0]
            if not self._sane_length(d, length, chunk.frame):
                side.splitter, side.head = None, b""
                return data[len(data) - held + 1:]
        return _EMPTY

    def _sane_length(self, d: int, length: int, frame: int) -> bool:
        if 16 <= length <= self._limit:
            return True
        self._warn(frame, "forged_length", f"{_SENDER[d]} message length {length} is not a MongoDB message "
                                           f"size (16..{self._limit}); scanning for the next message")
        return False

    def _bad_size(self, d: int, side: _Side, data: memoryview, chunk: Chunk, out: list[Exchange]) -> memoryview:
        """The splitter refused a size in ``data`` (which starts at a message boundary).  It does not
        say where; the messages before the bad size are whole and worth keeping, so find the shortest
        prefix of ``data`` a fresh splitter refuses: the bad size is its last four bytes."""
        good, bad = 0, len(data)
        while bad - good > 1:
            mid = (good + bad) // 2
            try:
                self._splitter().feed(data[:mid])
                good = mid
            except DecodeError:
                bad = mid
        at = bad - 4
        frames = self._splitter().feed(data[:at])
        for i, raw in enumerate(frames):
            if not self._message(d, side, raw, chunk, out):
                return memoryview(b"".join((raw[1:], *frames[i + 1:], bytes(data[at:]))))
        self._sane_length(d, _INT32.unpack_from(data, at)[0], chunk.frame)  # warns
        side.splitter, side.head = None, b""
        return data[at + 1:]

    def _scan(self, d: int, side: _Side, data: memoryview, frame: int) -> memoryview:
        """Look for a plausible message header; return the bytes from it on, or nothing (keep looking)."""
        window = side.scan
        window += data
        pos, found = self._find_header(d, window)
        side.skipped += pos
        if not found:
            del window[:pos]
            return _EMPTY
        # On probation until the message decodes: a look-alike header makes scanning go on, and the
        # bytes skipped are reported once, when a real message is found.
        rest = bytes(window[pos:])
        side.scan = bytearray()
        side.splitter, side.head, side.probation = self._splitter(), b"", True
        return memoryview(rest)

    def _find_header(self, d: int, window: bytearray) -> tuple[int, bool]:
        """(position, found): the first plausible header, or where to resume when more bytes come."""
        keep_from = max(0, len(window) - 15)  # a header whose opcode has not fully arrived
        if d == TO_CLIENT and not (self._waiting or self._chains):
            return keep_from, False  # a reply must name a request in flight: there is none
        pattern, offset = _REQUEST_SCAN if d == TO_SERVER else _REPLY_SCAN
        for m in pattern.finditer(window):
            start = m.start() - offset
            if start < 0:
                continue
            verdict = self._plausible(d, window, start)
            if verdict is None:
                return start, False
            if verdict:
                return start, True
        return keep_from, False

    def _plausible(self, d: int, buf: bytearray, i: int) -> bool | None:
        """Whether a message header may start at ``buf[i]``; None until enough bytes tell."""
        avail = len(buf) - i
        if avail < 16:
            return None
        length, _request_id, response_to, opcode = _HEADER.unpack_from(buf, i)
        if not 16 <= length <= self._limit:
            return False
        if d == TO_SERVER:
            if response_to != 0 or opcode not in _CLIENT_OPCODES:
                return False
        elif opcode not in _SERVER_OPCODES or (response_to not in self._waiting and response_to not in self._chains):
            return False
        need = _PROBE_SIZE.get(opcode, 16)
        if length < need:
            return False
        if avail < need:
            return None
        if opcode == OP_MSG:
            flags = _UINT32.unpack_from(buf, i + 16)[0]
            size = _INT32.unpack_from(buf, i + 21)[0]
            return not flags & ~_KNOWN_FLAGS and buf[i + 20] in (0, 1) and 5 <= size <= length - 21
        if opcode == OP_COMPRESSED:
            original, size, compressor_id = _COMPRESSED_FIELDS.unpack_from(buf, i + 16)
            return (original in OPCODE_NAMES and original != OP_COMPRESSED and compressor_id in COMPRESSORS
                    and 0 <= size <= self._limit)
        if opcode == OP_REPLY:
            flags, _cursor, starting_from, returned = _REPLY_FIELDS.unpack_from(buf, i + 16)
            return 0 <= flags < 16 and starting_from >= 0 and returned >= 0
        if opcode == OP_QUERY:
            return not _INT32.unpack_from(buf, i + 16)[0] & ~0xFE
        return True

    def _on_gap(self, d: int, gap: Gap, out: list[Exchange]) -> None:
        side = self._sides[d]
        if side.ended:
            return
        side.started = True
        self._warn(gap.frame, "gap", f"{gap.size} bytes of the {_SENDER[d]} stream were not captured")
        if d == TO_CLIENT:
            for req in (*self._waiting.values(), *self._chains.values()):
                req.response_gap = True
        splitter, head, trusted = side.splitter, side.head, not side.probation
        side.splitter, side.head, side.probation, side.scan = None, b"", False, bytearray()
        if side.discard:  # the gap fell in the rest of a message already dropped
            side.discard = max(0, side.discard - gap.size)
            return
        if splitter is None or not splitter.buffered or len(head) < 16 or not trusted:
            return  # the lost message's header was not seen (or was only a scanning guess): scan
        length, request_id, response_to, opcode = _HEADER.unpack_from(head)
        rest = length - splitter.buffered
        if gap.size < rest:  # the message ends after the gap: its header says where the next starts
            side.discard = rest - gap.size
        flags = _UINT32.unpack_from(head, 16)[0] if opcode == OP_MSG and len(head) >= 20 else 0
        if opcode == OP_COMPRESSED and len(head) >= 20:
            opcode = _INT32.unpack_from(head, 16)[0]  # the original opcode; the OP_MSG flags are compressed
        if d == TO_SERVER:
            self._lost_request(request_id, opcode, flags, length, gap, out)
        else:
            self._lost_reply(request_id, response_to, flags, length, gap, out)

    def _on_end(self, d: int, end: End) -> None:
        side = self._sides[d]
        if side.ended:
            return
        side.ended = self._ends[d] = end.reason
        splitter = side.splitter
        if splitter is not None and splitter.buffered:
            head = side.head
            total = f" of {_INT32.unpack_from(head)[0]}" if len(head) >= 4 else ""
            self._warn(end.frame, "truncated", f"the {_SENDER[d]} stream ended inside a message "
                                               f"({splitter.buffered}{total} bytes)")
            if d == TO_CLIENT and len(head) >= 16:
                req = self._waiting.get(_HEADER.unpack_from(head)[2])
                if req is not None:
                    req.warning = "its reply was cut short by the end of the stream"
        lost = side.skipped + len(side.scan)
        if lost:
            self._warn(end.frame, "resync", f"the {_SENDER[d]} stream ended while scanning: {lost} bytes "
                                            f"without a message")
        side.splitter, side.head, side.scan, side.skipped = None, b"", bytearray(), 0
