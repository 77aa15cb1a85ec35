"""Argument types shared by the ``kwire`` commands: one parser per kind of value, one message."""

from __future__ import annotations

import argparse

__all__ = ["key_value", "positive_float", "positive_int", "tcp_port"]


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
