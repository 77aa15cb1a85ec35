"""One decoded message (``Message``), and what the decoders share: ``_Reader``, which reads a
message's fields in order, ``_Malformed``, and the BSON options documents are decoded with."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from .wire import _INT32, _UINT32

try:
    import bson
    from bson.codec_options import CodecOptions, DatetimeConversion
except ImportError:  # pymongo is optional: sniffing works without it, MongoFlow says what is missing
    bson = None


@dataclass(slots=True, eq=False)
class Message:
    """One decoded message.  Documents are dicts; a batch of documents is a list of them when kept
    (``keep_documents``), else only its count."""

    length: int  #: messageLength on the wire (the OP_COMPRESSED wrapper's, when compressed)
    request_id: int
    response_to: int
    opcode: int  #: inside OP_COMPRESSED, the original opcode
    compressor: str | None = None  #: 'noop', 'snappy', 'zlib', 'zstd' when it came in OP_COMPRESSED
    flags: int = 0  #: OP_MSG flagBits, OP_QUERY / OP_INSERT / OP_UPDATE / OP_DELETE flags, OP_REPLY responseFlags
    body: dict | None = None  #: OP_MSG body, OP_QUERY query, OP_REPLY first document, OP_COMMANDREPLY reply
    sequences: dict[str, Any] = field(default_factory=dict)  #: OP_MSG kind 1: identifier -> documents
    namespace: str | None = None  #: legacy fullCollectionName; OP_COMMAND's database
    command_name: str | None = None  #: OP_COMMAND
    documents: Any = None  #: legacy batches: OP_INSERT, OP_REPLY, OP_COMMAND / OP_COMMANDREPLY documents
    parts: dict[str, Any] = field(default_factory=dict)  #: other legacy documents (selector, update, projection)
    fields: dict[str, int] = field(default_factory=dict)  #: the layout's numbers (skip, cursor_id, ...)
    checksum: str | None = None  #: 'valid' / 'mismatch' when the message carries a CRC-32C
    problems: list[tuple[str, str]] = field(default_factory=list)  #: (warning kind, text): decoding went on
    error: str | None = None  #: why the body did not decode (the header still holds)


class _Malformed(Exception):
    """The message's layout does not hold together."""


class _Reader:
    """Reads a message's fields in order, within ``end``; layout errors raise ``_Malformed``."""

    __slots__ = ("data", "view", "pos", "end")

    def __init__(self, data: bytes, pos: int, end: int):
        self.data = data
        self.view = memoryview(data)
        self.pos = pos
        self.end = end

    def _take(self, size: int, what: str) -> int:
        pos = self.pos
        if self.end - pos < size:
            raise _Malformed(f"{what} runs past the end of the message (byte {pos})")
        self.pos = pos + size
        return pos

    def int32(self, what: str) -> int:
        return _INT32.unpack_from(self.data, self._take(4, what))[0]

    def uint32(self, what: str) -> int:
        return _UINT32.unpack_from(self.data, self._take(4, what))[0]

    def int64(self, what: str) -> int:
        return struct.unpack_from("<q", self.data, self._take(8, what))[0]

    def uint8(self, what: str) -> int:
        return self.data[self._take(1, what)]

    def cstring(self, what: str, end: int | None = None) -> str:
        stop = self.data.find(b"\x00", self.pos, self.end if end is None else end)
        if stop < 0:
            raise _Malformed(f"{what} has no terminating NUL")
        text = self.data[self.pos:stop].decode("utf-8", "replace")
        self.pos = stop + 1
        return text

    def document(self, what: str) -> dict:
        return _decode_document(self.view[self._document_span(what)])

    def _document_span(self, what: str) -> slice:
        pos = self.pos
        if self.end - pos < 5:
            raise _Malformed(f"{what} runs past the end of the message (byte {pos})")
        size = _INT32.unpack_from(self.data, pos)[0]
        if size < 5 or size > self.end - pos:
            raise _Malformed(f"{what} has an impossible length {size} (byte {pos})")
        self.pos = pos + size
        return slice(pos, pos + size)

    def documents(self, what: str, keep: bool, end: int | None = None) -> list | int:
        """The documents from here to ``end``: decoded when kept, else counted (walking their lengths)."""
        saved = self.end
        if end is not None:
            self.end = end
        out: list = []
        count = 0
        try:
            while self.pos < self.end:
                span = self._document_span(what)
                if keep:
                    out.append(_decode_document(self.view[span]))
                count += 1
        finally:
            self.end = saved
        return out if keep else count


if bson is not None:
    # Never fail a whole document over one bad string or an out-of-range date: replace and go on.
    _CODEC = CodecOptions(tz_aware=True, unicode_decode_error_handler="replace",
                          datetime_conversion=DatetimeConversion.DATETIME_AUTO)


def _decode_document(buf) -> dict:
    return bson.decode(buf, codec_options=_CODEC)


def _count(documents: list | int | None) -> int:
    if documents is None:
        return 0
    return documents if isinstance(documents, int) else len(documents)
