"""Decoded messages as JSON values: what ``kwire`` prints with ``--json`` and the analyzer's JSON lines.

One conversion for every JSON output of kwire (the command line's and the analyzer's), beside the
codec whose structs it reads.
"""

from __future__ import annotations

import uuid
from typing import Any

from .message_base import Struct

__all__ = ["to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """Messages, structs, UUIDs and bytes as JSON values (bytes as lowercase hex)."""
    if isinstance(value, Struct):
        return {k: to_jsonable(v) for k, v in value.to_dict().items()}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value
