"""Output helpers shared by every ``kwire`` command: terminal tables and JSON for scripts."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from kwire.protocol.compiler import Struct


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


def print_json(value: Any, *, file: TextIO | None = None, indent: int | None = 2) -> None:
    print(json.dumps(to_jsonable(value), indent=indent, ensure_ascii=False), file=file or sys.stdout)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, file: TextIO | None = None,
                align_right: Iterable[int] = ()) -> None:
    """A plain aligned table; columns listed in align_right (numbers) are right-aligned.

    On a terminal, cells wider than it allows are cut with an ellipsis so lines never wrap;
    into a pipe or a file every cell is written whole (a script may be reading it).
    """
    out = file or sys.stdout
    text_rows = [["" if c is None else str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    is_terminal = getattr(out, "isatty", lambda: False)()
    total = shutil.get_terminal_size((120, 24)).columns if is_terminal else sum(widths) + 2 * len(widths)
    while sum(widths) + 2 * (len(widths) - 1) > total and max(widths) > 12:
        widest = widths.index(max(widths))
        widths[widest] -= 1
    right = set(align_right)

    def fmt(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            w = widths[i]
            if len(cell) > w:
                cell = cell[: w - 1] + "…"
            parts.append(cell.rjust(w) if i in right else cell.ljust(w))
        return "  ".join(parts).rstrip()

    print(fmt(list(headers)), file=out)
    print(fmt(["-" * w for w in widths]), file=out)
    for row in text_rows:
        print(fmt(row), file=out)


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
