"""Argument types shared by the ``kwire`` commands: one parser per kind of value, one message."""

from __future__ import annotations

import argparse

__all__ = ["key_value", "positive_int"]


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
