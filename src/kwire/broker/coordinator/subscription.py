"""Reading the consumer protocol's member metadata (the ``ConsumerProtocolSubscription`` bytes).

The coordinator treats member metadata as opaque, except for two questions Kafka's broker also
asks of groups with protocol type "consumer": which topics the members read (OffsetDelete
refuses to delete offsets of those, and offset expiry keeps them).
"""

from __future__ import annotations

import struct

from kwire.protocol import messages
from kwire.protocol.errors import DecodeError

__all__ = ["subscribed_topics"]

_VERSION = struct.Struct(">h")


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics in a consumer's subscription metadata, or None if the bytes can't be read.

    The bytes are an int16 version and the body.  A version newer than the codec knows is read
    as the newest known one with trailing fields ignored, as Kafka's consumer does (the format
    only ever grows at the end).
    """
    cls = messages.ConsumerProtocolSubscription
    if len(metadata) < _VERSION.size:
        return None
    (version,) = _VERSION.unpack_from(metadata)
    if version < cls.MIN_VERSION:
        return None
    try:
        sub = cls.decode(memoryview(metadata)[_VERSION.size:], min(version, cls.MAX_VERSION), strict=False)
    except DecodeError:
        return None
    return {t for t in sub.topics if t is not None}
