"""A plain aligned text table, for the command line and the analyzer's terminal summaries.

A leaf module (it imports nothing of kwire), so the analyzer prints tables without depending on
the command line, and the command line without loading the analyzer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

__all__ = ["print_table"]


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
    if is_terminal:
        import shutil  # only on a terminal: with bz2 and lzma a few ms of a command's start-up

        total = shutil.get_terminal_size((120, 24)).columns
    else:
        total = sum(widths) + 2 * len(widths)
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
