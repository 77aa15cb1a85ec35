"""One analysis run: capture files in, the summary, the small tables and the findings out.

``analyze_captures(paths, options)`` decodes each capture with ``analyzer.CaptureDecoder`` and
passes every exchange once through everything that needs it - the ``Summary``, the
``exchanges`` table the findings read (``engines.LocalTables``: the dozen columns the rules use,
loaded into DuckDB in batches), the ``offset_commits`` / ``group_events`` tables, and the optional JSON lines
and Parquet writers - then drops it.  The findings are then computed by DuckDB over the tables
(``rules``, the same SQL ``kwire analyze --spark`` runs).  Memory is bounded by the open
connections, the summary's counters, the group tables (one row per committed partition and per
group request) and those few columns per exchange, never by the exchanges' decoded messages.

A file that cannot be read as a capture (missing, unreadable, not pcap/pcapng) becomes a
warning naming it, listed in ``Analysis.unreadable``, and the other files are still analysed.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from .analyzer import AnalyzeOptions, CaptureDecoder
from .engines import LocalTables
from .exchange import WarningLog
from .export import JsonLines, ParquetTables
from .findings import Thresholds
from .pcap import NotACaptureError
from .summary import Summary
from .tables import commit_rows, exchange_row, group_event_row

__all__ = ["Analysis", "Progress", "analyze_captures"]

#: progress(capture name, bytes read of all captures so far, total bytes of the captures)
Progress = Callable[[str, int, int], None]


@dataclass
class Analysis:
    """Everything an analysis run produced except the exchanges themselves."""

    captures: list[str]  #: names of the captures read (those that could not be are in ``unreadable``)
    stats: dict[str, int]  #: packet / segment / connection counters, summed over the captures
    warnings: WarningLog
    summary: Summary
    commits: list[dict]  #: ``offset_commits`` rows
    group_events: list[dict]  #: ``group_events`` rows
    connections: list[dict]  #: ``connections`` rows
    findings: list  #: ``findings.Finding``s
    exchanges: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    unreadable: list[tuple[str, str]] = field(default_factory=list)  #: (path, why) of files not read


def analyze_captures(paths: Sequence[str | os.PathLike], options: AnalyzeOptions | None = None, *,
                     thresholds: Thresholds | None = None, json_out: TextIO | None = None,
                     parquet_dir: str | os.PathLike | None = None, progress: Progress | None = None) -> Analysis:
    """Analyse the captures in order; see the module docstring.

    ``json_out``: a text file that gets one JSON line per exchange (``export.JsonLines``).
    ``parquet_dir``: where the tables are written as Parquet (``export.ParquetTables``).
    ``progress``: called now and then while reading (see ``Progress``).
    """
    options = options or AnalyzeOptions()
    if json_out is not None and not options.keep_messages:
        # The JSON lines show the decoded messages, which the flows only keep when asked to.
        options = dataclasses.replace(options, keep_messages=True)
    thresholds = thresholds or Thresholds()
    started = time.monotonic()
    decoder = CaptureDecoder(options)
    summary = Summary()
    rule_tables = LocalTables()
    commits: list[dict] = []
    group_events: list[dict] = []
    lines = JsonLines(json_out, record_values=options.record_values) if json_out is not None else None
    tables = ParquetTables(parquet_dir) if parquet_dir is not None else None
    analysis = Analysis(captures=[], stats=decoder.stats, warnings=decoder.warnings, summary=summary,
                        commits=commits, group_events=group_events, connections=decoder.connections, findings=[])
    total = sum(_size(p) for p in paths)
    done_before = 0  # bytes of the captures finished

    def take(ex) -> None:
        """Everything done with one exchange, which is then dropped."""
        analysis.exchanges += 1
        summary.add(ex)
        row = exchange_row(ex)  # built once: the findings and the Parquet table share it
        rule_tables.add_exchange(row)
        committed = commit_rows(ex)
        if committed:
            commits.extend(committed)
        event = group_event_row(ex)
        if event is not None:
            group_events.append(event)
        if lines is not None:
            lines.write(ex)
        if tables is not None:
            tables.write("exchanges", row)
            if committed:
                tables.write_many("offset_commits", committed)
            if event is not None:
                tables.write("group_events", event)

    try:
        for path in paths:
            name = os.path.basename(os.fsdecode(path))
            report = None
            if progress is not None:
                def report(consumed: int, _name=name, _before=done_before) -> None:
                    progress(_name, _before + consumed, total)
            exchanges = decoder.exchanges(path, progress=report, name=name)
            exchanges_before = analysis.exchanges
            read = _size(path)
            while True:
                # Only reading the capture is guarded: an error writing the outputs (a closed
                # pipe, a full disk) is not the capture's fault and goes to the caller.
                try:
                    ex = next(exchanges)
                except StopIteration:
                    analysis.captures.append(name)
                    break
                except (NotACaptureError, OSError) as e:
                    why = _why(e, path)
                    decoder.warnings(name, 0, 0, "capture", why)
                    analysis.unreadable.append((os.fsdecode(path), why))
                    if analysis.exchanges > exchanges_before:  # a read error part way: what came before counts
                        analysis.captures.append(name)
                    elif not isinstance(e, NotACaptureError):
                        read = 0
                    break
                take(ex)
            done_before += read
            analysis.bytes_read += read
        analysis.findings = rule_tables.findings(commits, group_events, decoder.connections, thresholds)
        if tables is not None:
            tables.write_many("connections", decoder.connections)
            tables.write_many("findings", (f.to_row() for f in analysis.findings))
    finally:
        rule_tables.close()
        if tables is not None:
            tables.close()
        analysis.seconds = time.monotonic() - started
    return analysis


def _size(path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _why(error: Exception, path) -> str:
    """A one-line reason naming the file (NotACaptureError messages already name it)."""
    if isinstance(error, NotACaptureError):
        return str(error)
    reason = error.strerror or str(error)
    return f"{os.fsdecode(path)}: {reason}"
