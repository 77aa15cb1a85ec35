"""Recognising a Kafka request header: ``looks_like_kafka_request`` detects the protocol from a
client's first bytes, and the resynchronising scan checks its candidate request starts the same way."""

from __future__ import annotations

import re
import struct

from kwire.protocol import DEFAULT_MAX_FRAME_SIZE

from .constants import _NEWEST, CONTROLLED_SHUTDOWN

# Versions the sniffer accepts above the newest the codec knows: a client newer than kwire
# still speaks Kafka (its request is then reported as an unknown version).
_VERSION_SLACK = 4
# A client id longer than this is taken for garbage (real ones are tens of bytes).
_MAX_CLIENT_ID = 1024

_REQUEST_START = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length
_NOT_TEXT = re.compile(rb"[\x00-\x1f\x7f]")  # bytes no client id contains


def _request_start(buf, pos: int, end: int, max_size: int, slack: int) -> bool | None:
    """Is there a plausible request header at ``buf[pos:end]``?  None: not enough bytes to tell.

    Plausible: a sane size, an api key the codec knows, a version up to the newest known plus
    ``slack``, and a client id that is null or short text fitting in the frame.
    """
    have = end - pos
    if have < 8:
        return None
    if have < 14:
        size, key, version = struct.unpack_from(">ihh", buf, pos)
        clen = None
    else:
        size, key, version, _cid, clen = _REQUEST_START.unpack_from(buf, pos)
    newest = _NEWEST.get(key)
    if newest is None or not 0 <= version <= newest + slack or not 8 <= size <= max_size:
        return False
    if key == CONTROLLED_SHUTDOWN and version == 0:
        return True  # request header v0: no client id to check
    if size < 10:
        return False
    if clen is None:
        return None
    if clen < -1 or clen > size - 10 or clen > _MAX_CLIENT_ID:
        return False
    if clen > 0:
        stop = min(end, pos + 14 + clen)
        if _NOT_TEXT.search(buf, pos + 14, stop):
            return False
        if stop < pos + 14 + clen:
            return None
    return True


def looks_like_kafka_request(data: bytes) -> bool:
    """Do the first bytes a client sent look like a Kafka request?  (Used to detect the protocol.)"""
    if len(data) < 8:
        return False
    return _request_start(data, 0, len(data), DEFAULT_MAX_FRAME_SIZE, _VERSION_SLACK) is not False
