"""An incremental splitter of size-prefixed frames: feed bytes as they arrive, take whole frames.

Kafka frames are a big-endian int32 size followed by that many bytes.  The same splitter serves
MongoDB's wire protocol (little-endian int32 size that counts itself) through its options, so
the client, the broker and the analyzer all share one implementation.
"""

from __future__ import annotations

from .errors import DecodeError, FrameTooLargeError

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default


class FrameSplitter:
    """Splits a byte stream into frames.

    ``feed(data)`` returns the frames completed by data (bodies without the size prefix, unless
    ``keep_prefix``).  A size above ``max_frame_size`` or below zero raises ``FrameTooLargeError``
    / ``DecodeError`` before any memory is set aside for it; after that the stream is out of sync
    and the splitter refuses further input.
    """

    __slots__ = ("max_frame_size", "_buf", "_need", "_little", "_includes_prefix", "_keep_prefix", "_broken")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, byteorder: str = "big",
                 size_includes_prefix: bool = False, keep_prefix: bool = False):
        if byteorder not in ("big", "little"):
            raise ValueError("byteorder must be 'big' or 'little'")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._need = -1  # total bytes of the frame being assembled (prefix included), -1: unknown
        self._little = byteorder == "little"
        self._includes_prefix = size_includes_prefix
        self._keep_prefix = keep_prefix
        self._broken: DecodeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buf)

    def feed(self, data) -> list[bytes]:
        """Add bytes; return every frame they complete, in order."""
        if self._broken is not None:
            raise self._broken
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        start = 0
        end = len(buf)
        while True:
            if self._need < 0:
                if end - start < 4:
                    break
                size = int.from_bytes(buf[start:start + 4], "little" if self._little else "big", signed=True)
                body = size - 4 if self._includes_prefix else size
                if body < 0:
                    self._broken = DecodeError(f"negative frame size {size}", what="frame", offset=start)
                    raise self._broken
                if body > self.max_frame_size:
                    self._broken = FrameTooLargeError(
                        f"frame of {body} bytes is over the maximum of {self.max_frame_size}", what="frame")
                    raise self._broken
                self._need = body + 4
            if end - start < self._need:
                break
            frame_start = start if self._keep_prefix else start + 4
            frames.append(bytes(buf[frame_start:start + self._need]))
            start += self._need
            self._need = -1
        if start:
            del buf[:start]
        return frames
