"""Argument types shared by the ``kwire`` commands: one parser per kind of value, one message."""

from __future__ import annotations

import argparse
import os

__all__ = ["delimiter", "key_value", "positive_float", "positive_int", "tcp_port", "unescape"]


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (the value may be empty or hold more '='), the key stripped."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key.strip(), value


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_float(text: str) -> float:
    """A number > 0 (seconds, milliseconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def tcp_port(text: str) -> int:
    """1 to 65535."""
    port = positive_int(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (1-65535)")
    return port


_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}


def unescape(text: str) -> bytes:
    """A delimiter or format as typed -> its bytes: ``\\n \\t \\r \\0 \\\\`` and ``\\xHH`` as kcat
    reads them; anything else as its UTF-8 bytes (or the raw bytes the shell passed).

    ValueError names an escape it does not know."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += os.fsencode(c)
            i += 1
            continue
        nxt = text[i + 1:i + 2]
        if nxt in _ESCAPES:
            out += _ESCAPES[nxt]
            i += 2
        elif nxt == "x" and len(text) >= i + 4 and all(h in "0123456789abcdefABCDEF" for h in text[i + 2:i + 4]):
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            shown = text[i:i + 4] if nxt == "x" else text[i:i + 2]
            raise ValueError(f"unknown escape {shown} (known: \\n \\t \\r \\0 \\\\ \\xHH)")
    return bytes(out)


def delimiter(text: str) -> bytes:
    """A non-empty delimiter (``-D``, ``-K``), escapes as ``unescape`` reads them."""
    try:
        data = unescape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not data:
        raise argparse.ArgumentTypeError("a delimiter cannot be empty")
    return data
