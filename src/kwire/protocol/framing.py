"""An incremental splitter of size-prefixed frames: feed bytes as they arrive, take whole frames.

Kafka frames are a big-endian int32 size followed by that many bytes.  The same splitter serves
MongoDB's wire protocol (little-endian int32 size that counts itself) through its options, so
the client, the broker and the analyzer all share one implementation.

Two ways in, one set of rules (size checks, error messages):

* ``feed(data)``: bytes the caller already holds (a capture, a ``data_received`` chunk).
* ``get_buffer()`` / ``buffer_updated(n)``: the splitter says where the next bytes go, for
  ``recv_into`` and ``asyncio.BufferedProtocol``.  A frame that is not complete in the
  receive buffer gets a buffer of its own as soon as its size is known, and the rest of it is
  received straight into that buffer: a large frame is never copied after the kernel wrote it.
  With ``reuse_frames``, the buffer of a large frame its owner has let go of is used again for a
  later one (a consumer's fetch answers): no new memory to fault in and zero for each answer.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable

from .errors import DecodeError, FrameTooLargeError
from .primitives import Buffer

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
# The buffer API's staging area, allocated at the first read: small frames (most requests and
# responses) arrive several per read and are copied out of it once; a larger one leaves only its
# first part in it.  Small, since a broker holds one per connection.
DEFAULT_RECEIVE_BUFFER_SIZE = 16 * 1024
# Frames from this size up are worth reusing (``reuse_frames``): below it a new buffer is cheap.
REUSE_MIN_FRAME_SIZE = 256 * 1024

_SIZE_BIG = struct.Struct(">i")
_SIZE_LITTLE = struct.Struct("<i")


class FrameSplitter:
    """Splits a byte stream into frames.

    ``feed(data)`` returns the frames completed by data (bodies without the size prefix, unless
    ``keep_prefix``).  A size above ``max_frame_size`` or below zero raises ``FrameTooLargeError``
    / ``DecodeError`` before any memory is set aside for it; after that the stream is out of sync
    and the splitter refuses further input.

    The buffer API (``get_buffer``/``buffer_updated``) returns each frame as a ``bytearray`` of
    its own, which the caller may keep and modify.  Use one API per splitter: each holds its own
    partial data, so mixing them would reorder the stream (``RuntimeError``).

    ``reserve`` (buffer API only): called with a frame's size before a buffer of its own is
    allocated for it; returning False leaves the frame's first bytes in the staging area and the
    splitter ``blocked``: the caller stops reading (a server shares a memory budget between its
    connections, so a flood of huge size prefixes cannot allocate memory it does not have) and
    calls ``retry()`` when memory may be free again.

    ``reuse_frames`` (buffer API only): the number of large frames (``REUSE_MIN_FRAME_SIZE`` and
    up) the splitter keeps track of after handing them out.  A later frame of about the same size
    is received into one of them that nothing references any more (no memoryview, no exported
    buffer, no other reference: the owner dropped it), resized, instead of into a new zeroed
    buffer.  The splitter holds up to that many such buffers while it lives; a frame handed out
    is never touched while anything else refers to it.
    """

    __slots__ = ("max_frame_size", "_buf", "_need", "_size", "_includes_prefix", "_keep_prefix", "_broken",
                 "_receive_size", "_stage", "_stage_view", "_start", "_end", "_frame", "_frame_view", "_filled",
                 "_reserve", "blocked", "_spares", "_spares_max")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, byteorder: str = "big",
                 size_includes_prefix: bool = False, keep_prefix: bool = False,
                 receive_buffer_size: int = DEFAULT_RECEIVE_BUFFER_SIZE, reserve: Callable[[int], bool] | None = None,
                 reuse_frames: int = 0) -> None:
        if byteorder not in ("big", "little"):
            raise ValueError("byteorder must be 'big' or 'little'")
        if receive_buffer_size < 8:
            raise ValueError("receive_buffer_size must be at least 8")
        if reuse_frames < 0:
            raise ValueError("reuse_frames must not be negative")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._need = -1  # total bytes of the frame being assembled (prefix included), -1: unknown
        self._size = (_SIZE_LITTLE if byteorder == "little" else _SIZE_BIG).unpack_from
        self._includes_prefix = size_includes_prefix
        self._keep_prefix = keep_prefix
        self._broken: DecodeError | None = None
        # Buffer API state, allocated on first use so feed-only splitters don't pay for it.
        self._receive_size = receive_buffer_size
        self._stage: bytearray | None = None
        self._stage_view: memoryview | None = None
        self._start = self._end = 0  # unsplit bytes are _stage[_start:_end]
        self._frame: bytearray | None = None  # the frame being received into its own buffer
        self._frame_view: memoryview | None = None
        self._filled = 0  # bytes of _frame received so far
        self._reserve = reserve
        self.blocked = False  #: a frame waits for ``reserve`` to grant its buffer (stop reading)
        # Large frames handed out, oldest first, for reuse once nothing else refers to them.
        self._spares: list[bytearray] | None = [] if reuse_frames else None
        self._spares_max = reuse_frames

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        partial = self._filled + (0 if self._keep_prefix else 4) if self._frame is not None else 0
        return len(self._buf) + self._end - self._start + partial

    def _frame_total(self, buf: bytes | bytearray, start: int) -> int:
        """Bytes of the frame whose size prefix is at ``buf[start:start + 4]``, prefix included.

        Checks the size before anything is allocated for the frame; a bad one breaks the stream.
        """
        size: int = self._size(buf, start)[0]  # struct's values are typed Any
        body = size - 4 if self._includes_prefix else size
        if body < 0:
            self._broken = DecodeError(f"negative frame size {size}", what="frame", offset=start)
            raise self._broken
        if body > self.max_frame_size:
            self._broken = FrameTooLargeError(
                f"frame of {body} bytes is over the maximum of {self.max_frame_size}", what="frame")
            raise self._broken
        return body + 4

    # -- feeding bytes ------------------------------------------------------------------------
    def feed(self, data: Buffer) -> list[bytes]:
        """Add bytes; return every frame they complete, in order."""
        if self._broken is not None:
            raise self._broken
        if self._end or self._frame is not None:
            raise RuntimeError("feed() on a splitter holding data received through get_buffer()")
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        start = 0
        end = len(buf)
        while True:
            if self._need < 0:
                if end - start < 4:
                    break
                self._need = self._frame_total(buf, start)
            if end - start < self._need:
                break
            frame_start = start if self._keep_prefix else start + 4
            frames.append(bytes(buf[frame_start:start + self._need]))
            start += self._need
            self._need = -1
        if start:
            del buf[:start]
        return frames

    # -- receiving into the splitter's buffers ------------------------------------------------
    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next received bytes go (never empty); then call ``buffer_updated(n)``.

        ``sizehint`` is accepted for ``asyncio.BufferedProtocol`` and ignored: inside a frame
        the buffer is the rest of that frame, so a read never runs into the next one.
        """
        if self._broken is not None:
            raise self._broken
        if self._frame_view is not None:
            return self._frame_view[self._filled:]
        if self._stage_view is None:
            if self._buf:
                raise RuntimeError("get_buffer() on a splitter holding data given to feed()")
            self._stage = bytearray(self._receive_size)
            self._stage_view = memoryview(self._stage)
        return self._stage_view[self._end:]

    def buffer_updated(self, nbytes: int) -> list[bytearray]:
        """``nbytes`` were written at the start of the last ``get_buffer()``; return every frame
        completed, in order, each a ``bytearray`` the caller owns."""
        if self._broken is not None:
            raise self._broken
        frame = self._frame
        if frame is not None:
            self._filled += nbytes
            if self._filled < len(frame):
                return []
            frame_view = self._frame_view
            assert frame_view is not None  # set and cleared together with _frame
            frame_view.release()  # the frame must stay resizable for its new owner
            self._frame = self._frame_view = None
            return [frame]
        self._end += nbytes
        return self._split_stage()

    @property
    def filling(self) -> bool:
        """A frame is being received into a buffer of its own (it was given to ``reserve``)."""
        return self._frame is not None

    def retry(self) -> list[bytearray]:
        """After ``reserve`` said no: ask again; return the frames this completes (none while
        still ``blocked``)."""
        if self._broken is not None:
            raise self._broken
        if not self.blocked:
            return []
        return self._split_stage()

    def _frame_buffer(self, nbytes: int) -> bytearray:
        """A buffer of ``nbytes`` for a frame: a spare one if ``reuse_frames`` allows, else new.

        Its contents need not be zero: the frame is handed out only once every byte of it has
        been received into it."""
        spares = self._spares
        if spares is None or nbytes < REUSE_MIN_FRAME_SIZE:
            return bytearray(nbytes)
        for i in range(len(spares)):
            # 2 references: the list's and getrefcount's argument.  Any other holder (the
            # frame's owner, a memoryview or an exported buffer of it) adds one of its own.
            if sys.getrefcount(spares[i]) != 2:
                continue
            # Within its allocation and at least half of it, a bytearray resizes in place
            # (CPython reallocates below half), so the reused memory is what the frame gets.
            room = spares[i].__alloc__() - 1  # one byte of the allocation is the trailing NUL
            if not (room + 1) // 2 <= nbytes <= room:
                continue
            frame = spares.pop(i)
            if len(frame) > nbytes:
                del frame[nbytes:]
            elif len(frame) < nbytes:
                frame.extend(bytes(nbytes - len(frame)))
            spares.append(frame)
            return frame
        frame = bytearray(nbytes)
        spares.append(frame)
        if len(spares) > self._spares_max:
            del spares[0]
        return frame

    def _split_stage(self) -> list[bytearray]:
        self.blocked = False
        stage, start, end = self._stage, self._start, self._end
        # Only reached through buffer_updated/retry, after get_buffer() allocated the stage.
        assert stage is not None
        skip = 0 if self._keep_prefix else 4
        frames: list[bytearray] = []
        while end - start >= 4:
            total = self._frame_total(stage, start)
            if end - start >= total:
                frames.append(stage[start + skip:start + total])  # one copy, of a frame that fits
                start += total
                continue
            # Incomplete: from here on its bytes are received into the frame's own buffer.
            if self._reserve is not None and not self._reserve(total - skip):
                self.blocked = True
                break
            have = end - start - skip
            frame = self._frame_buffer(total - skip)
            stage_view = self._stage_view
            assert stage_view is not None  # allocated with the stage
            frame[:have] = stage_view[start + skip:end]
            self._frame, self._frame_view, self._filled = frame, memoryview(frame), have
            start = end
        left = end - start
        if left and start:  # part of a size prefix, or the head of a frame still blocked: to the front
            stage[:left] = stage[start:end]
        self._start, self._end = 0, left
        return frames
