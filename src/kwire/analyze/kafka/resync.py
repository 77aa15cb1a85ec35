"""Finding the next frame start in a direction that lost (or never had) its place in the stream.

After a ``Gap``, a size prefix no broker would accept (``forged_length``), or in a direction
captured from its middle, the partial frame is dropped and a bounded scan looks for the next
plausible frame start (a request header the codec knows; a response naming a request in
flight).  ``_Resync`` holds the scanning half of ``KafkaFlow`` (``flow``), whose state it uses:
``_max``, ``_in_flight``, ``_client_id_bytes``, ``_verdicts``, ``_warn`` and ``_decode_response``.
``_Side`` is a direction's framing state: its splitter, and its ``_Scan`` while it has lost its place.
"""

from __future__ import annotations

import re
import struct
from functools import lru_cache
from typing import TYPE_CHECKING

from kwire.protocol import API_KEYS, FrameSplitter, ProtocolError, decode_request

from ..exchange import UNDECODABLE
from ..tcp import TO_SERVER
from .constants import _DIRECTION_NAMES, _NEWEST, CONTROLLED_SHUTDOWN
from .sniff import _request_start

if TYPE_CHECKING:
    from .flow import _InFlight

# During the first bytes of a direction captured from its middle, a response to a request the
# capture does not hold is accepted at offset 0 only if it is complete within this many bytes.
_PROBE_LIMIT = 64 * 1024
# Bytes a resynchronising scan holds while candidates wait for their frame to be whole (a frame
# larger than that is taken on its header only if that is strong evidence), and how many
# candidates it keeps.
_SCAN_LIMIT = 1024 * 1024
_MAX_PENDING = 256
# Verdicts on candidate frames remembered during a scan (bodies up to this size, this many).
_MEMO_MAX_BODY = 4096
_MEMO_ENTRIES = 256

_RESPONSE_START = struct.Struct(">ii")  # size, correlation id
_INT32 = struct.Struct(">i")


def _int32_at(buf, pos: int) -> int:
    return _INT32.unpack_from(buf, pos)[0]


def _size_pattern(max_size: int, least: int) -> bytes:
    """Regex bytes matching a big-endian int32 size from ``least`` (< 256) to about ``max_size``."""
    top = re.escape(bytes((min(max_size >> 24, 0x7F),)))
    return b"(?!\\x00\\x00\\x00[\\x00-" + re.escape(bytes((least - 1,))) + b"])[\\x00-" + top + b"]..."


@lru_cache(maxsize=32)
def _request_scan_pattern(max_size: int, client_id: bytes | None) -> re.Pattern:
    """A regex finding candidate request starts (checked exactly afterwards): it lets the resync
    scan run in C instead of testing every offset in Python.  With the connection's client id
    known (a client sends the same one in every request), only that one matches."""
    keys = b"".join(re.escape(bytes((k,))) for k in API_KEYS if 0 <= k < 256)
    newest = re.escape(bytes((max(_NEWEST.values()),)))
    tail = b"(?:[\\x00-\\x03].|\\xff\\xff)" if client_id is None else re.escape(client_id)
    return re.compile(b"(?=" + _size_pattern(max_size, 10) + b"\\x00[" + keys + b"]\\x00[\\x00-" + newest
                      + b"]...." + tail + b")", re.DOTALL)


@lru_cache(maxsize=64)
def _response_scan_pattern(max_size: int, correlation_ids: tuple[int, ...]) -> re.Pattern:
    """A regex finding candidate response starts: a sane size, then the id of a request in flight."""
    ids = b"|".join(re.escape(_INT32.pack(c)) for c in correlation_ids)
    return re.compile(b"(?=" + _size_pattern(max_size, 4) + b"(?:" + ids + b"))", re.DOTALL)


def _request_body_decodes(body: bytes, _entry) -> bool:
    try:
        decode_request(body, strict=False)
    except ProtocolError:
        return False
    return True


class _Scan:
    """Looking for a frame start in a direction that lost (or never had) its place in the stream.

    ``buf`` holds the bytes not yet ruled out, at most about ``_SCAN_LIMIT``: offsets before
    ``checked`` were examined; ``pending`` are plausible frame starts whose frame is not whole
    yet (a plausible header alone is weak evidence: zero-filled bytes make one easily).
    """

    __slots__ = ("buf", "checked", "pending", "skipped", "probe", "frame")

    def __init__(self, frame: int, probe: bool = False):
        self.buf = bytearray()
        self.checked = 0
        self.pending: list[int] = []
        self.skipped = 0  # bytes dropped so far
        self.probe = probe  # the direction's first bytes, whose start was not captured
        self.frame = frame  # where the stream was lost


class _Side:
    """Framing state of one direction."""

    __slots__ = ("splitter", "scan", "ended")

    def __init__(self, max_frame_size: int, captured_start: bool):
        self.splitter = FrameSplitter(max_frame_size)
        self.scan: _Scan | None = None if captured_start else _Scan(0, probe=True)
        self.ended: str | None = None  # End reason


class _Resync:
    """The scanning half of ``KafkaFlow`` (see the module docstring)."""

    def _rescan(self, direction: int, side: _Side, data, frame: int) -> list[bytes]:
        """Scan the bytes held plus ``data`` for frames; once in step again, hand over to the splitter.

        Whole frames the scan finds were validated by decoding them, and scanning goes on after
        each; the splitter takes over when the bytes end right after a frame, or at a frame too
        large for the scan window whose header is strong evidence (``_strong_start``).
        """
        scan = side.scan
        buf = scan.buf
        buf += data
        frames: list[bytes] = []
        while True:
            start = self._frame_start(direction, scan)
            if start is None:
                self._trim(scan)
                return frames
            size = _int32_at(buf, start)
            skipped = scan.skipped + start
            if skipped:
                where = "" if scan.probe else f" (stream lost at frame {scan.frame})"
                self._warn(frame, "resync", f"{_DIRECTION_NAMES[direction]}: {skipped} bytes skipped to the frame "
                                            f"start found in frame {frame}{where}")
            end = start + 4 + size
            if end > len(buf):
                self._in_step(side)
                frames.extend(side.splitter.feed(bytes(buf[start:])))  # one size prefix, already checked
                return frames
            frames.append(bytes(buf[start + 4:end]))
            del buf[:end]
            if not buf:  # the bytes ended right after a frame: in step again
                self._in_step(side)
                return frames
            scan.checked = scan.skipped = 0
            scan.pending = []
            scan.probe = False

    def _in_step(self, side: _Side) -> None:
        """The scan found its frame: the splitter frames from here."""
        side.scan = None
        side.splitter = FrameSplitter(self._max)
        self._verdicts.clear()

    def _trim(self, scan: _Scan) -> None:
        """Drop the bytes ruled out; give up the oldest candidates past the scan window."""
        pending = scan.pending
        if len(pending) > _MAX_PENDING:
            del pending[:len(pending) - _MAX_PENDING]
        drop = min(pending[0], scan.checked) if pending else scan.checked
        if drop:
            del scan.buf[:drop]
            scan.skipped += drop
            scan.checked -= drop
            scan.pending = [p - drop for p in pending]
            scan.probe = False

    def _frame_start(self, direction: int, scan: _Scan) -> int | None:
        """Where the next frame starts in the scan buffer, or None while no candidate proves itself.

        The first candidate whose frame is whole and decodes wins; a candidate not whole yet
        waits (pending) until it is, or until the bytes after it fill the scan window: a frame
        that large is then taken on its header if that is strong evidence (``_strong_start``),
        else given up.
        """
        buf = scan.buf
        end = len(buf)
        pending = scan.pending
        if direction == TO_SERVER:
            candidates = self._request_candidates(scan)
            valid = self._request_decodes
        else:
            candidates = self._response_candidates(scan)
            valid = self._response_valid
        for p in list(pending):  # candidates whose frames may have become whole
            if p + 4 + _int32_at(buf, p) <= end:
                if valid(scan, p):
                    return p
                pending.remove(p)
        for p in candidates:
            if p + 4 + _int32_at(buf, p) <= end:
                if valid(scan, p):
                    return p
            else:
                pending.append(p)
        while pending and end - pending[0] > _SCAN_LIMIT:
            p = pending.pop(0)
            if self._strong_start(direction, buf, p):
                return p
        return None

    def _strong_start(self, direction: int, buf, p: int) -> bool:
        """Is the header at ``p`` good enough evidence on its own (its frame exceeds the scan window)?

        A request must carry the client id this connection's requests carry (a client sends the
        same in all); a response must answer the oldest request in flight (Kafka answers in
        order).  Without that, zero fill or arrays of small numbers make headers often enough
        that taking one would swallow up to a maximum-size frame of the stream.
        """
        if direction == TO_SERVER:
            known = self._client_id_bytes
            return known is not None and len(known) > 2 and buf[p + 12:p + 12 + len(known)] == known
        return bool(self._in_flight) and _int32_at(buf, p + 4) == next(iter(self._in_flight))

    def _request_candidates(self, scan: _Scan):
        """Offsets of plausible request headers from ``scan.checked`` on (advancing it)."""
        buf = scan.buf
        end = len(buf)
        maximum = self._max
        pattern = _request_scan_pattern(maximum, self._client_id_bytes)
        for m in pattern.finditer(buf, scan.checked):
            p = m.start()
            verdict = _request_start(buf, p, end, maximum, 0)
            if verdict is None:  # its client id is not all there yet: judge it later
                scan.checked = p
                return
            if verdict and not (buf[p + 5] == CONTROLLED_SHUTDOWN and buf[p + 7] == 0):
                yield p  # (ControlledShutdown v0 has no client id to check: too weak to resync on)
        # The pattern needs 14 bytes and the client id: a start may hide in the tail.
        scan.checked = max(scan.checked, end - 13 - len(self._client_id_bytes or b""))

    def _request_decodes(self, scan: _Scan, p: int) -> bool:
        body = bytes(scan.buf[p + 4:p + 4 + _int32_at(scan.buf, p)])
        return self._verdict(body, None, _request_body_decodes)

    def _response_candidates(self, scan: _Scan):
        """Offsets of plausible response starts from ``scan.checked`` on (advancing it): a sane size
        then the correlation id of a request in flight."""
        buf = scan.buf
        end = len(buf)
        maximum = self._max
        start = scan.checked
        if scan.probe and start == 0 and end >= 8 and 4 <= _int32_at(buf, 0) <= maximum:
            yield 0  # the direction's first bytes may start with a response to a request not captured
            start = 1
        scan.checked = max(start, end - 7)  # a size and id cut by the end of the bytes: look again later
        if self._in_flight:
            for m in _response_scan_pattern(maximum, tuple(self._in_flight)).finditer(buf, start):
                yield m.start()

    def _response_valid(self, scan: _Scan, p: int) -> bool:
        buf = scan.buf
        size, cid = _RESPONSE_START.unpack_from(buf, p)
        entry = self._in_flight.get(cid)
        if entry is not None and (entry.ex.status == UNDECODABLE  # its request is unknown: cannot tell
                                  or self._verdict(bytes(buf[p + 4:p + 4 + size]), entry, self._response_decodes)):
            return True
        if scan.probe and p == 0 and size <= _PROBE_LIMIT:
            # A response to a request the capture lacks: taken if the next bytes start a frame too.
            after = p + 4 + size
            return len(buf) < after + 4 or 4 <= _int32_at(buf, after) <= self._max
        return False

    def _response_decodes(self, body: bytes, entry: _InFlight) -> bool:
        return self._decode_response(body, entry)[0] is not None

    def _verdict(self, body: bytes, entry: _InFlight | None, check) -> bool:
        """``check(body, entry)``, remembered for small bodies: periodic data (zero fill, arrays of
        small numbers) offers the same candidate frame over and over, each worth a decode."""
        if len(body) > _MEMO_MAX_BODY:
            return check(body, entry)
        key = (body, None if entry is None else (entry.key, entry.version))
        memo = self._verdicts
        verdict = memo.get(key)
        if verdict is None:
            if len(memo) >= _MEMO_ENTRIES:
                memo.clear()
            verdict = memo[key] = check(body, entry)
        return verdict
