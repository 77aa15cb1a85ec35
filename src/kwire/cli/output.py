"""Output helpers shared by every ``kwire`` command: terminal tables and JSON for scripts."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from kwire.protocol.jsonable import to_jsonable
from kwire.text_table import print_table

__all__ = ["fail", "print_fields", "print_json", "print_table", "to_jsonable"]


def print_json(value: Any, *, file: TextIO | None = None, indent: int | None = 2) -> None:
    import json  # only with --json: not with every command line's start-up

    print(json.dumps(to_jsonable(value), indent=indent, ensure_ascii=False), file=file or sys.stdout)


def fail(message: str, code: int = 2) -> int:
    """Print a one-line error to stderr and return the exit code for main()."""
    print(f"kwire: error: {message}", file=sys.stderr)
    return code


def print_fields(fields: Iterable[tuple[str, Any]], *, file: TextIO | None = None) -> None:
    """``Label: value`` lines with the values aligned (a record's header above its tables)."""
    pairs = [(label, "" if value is None else str(value)) for label, value in fields]
    width = max((len(label) for label, _ in pairs), default=0) + 1
    out = file or sys.stdout
    for label, value in pairs:
        print(f"{label + ':':<{width}} {value}".rstrip(), file=out)
