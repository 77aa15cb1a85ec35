"""The HTML report: one self-contained file (no script, no external font, style sheet or image).

``write_html(analysis, path)`` writes:

* the overview numbers (captures, packets, connections, exchanges, findings, warnings, time span);
* the findings, most severe first;
* latency over time, one chart per API (busiest first): the median and the maximum latency of
  each time bucket of ``Summary.series``, on a log scale when they span more than two decades.
  Every bucket is a point; lines join only neighbouring buckets, so an idle stretch is a break
  in the line, not a trend drawn across it, and an API seen in one bucket is a point;
* committed offsets over time, one chart per (group, topic): a step line per partition, each
  commit a point coloured by the member that made it, failed commits as red crosses;
* the findings marked on the chart they belong to (by API, or by group and topic): a marker at
  the finding's first time whose ``<title>`` (the browser's tooltip) tells what it is;
* tables of APIs, errors, connections and warnings.

Every chart shares one time axis (the span of the whole analysis), drawn at the same place in the
same width, so an event lines up across charts; its labels carry the date, with the year, when
the span crosses days.  Charts are SVG written here (``<svg class="chart">``, each data mark -
point, line, cross - of class ``mark``).  Everything that comes from a capture (client ids, topics, member
ids, error messages...) is untrusted and goes through ``html.escape``; the report has no script,
so it reads the same with JavaScript off.
"""

from __future__ import annotations

import html
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .summary import (
    NS_PER_S,
    SEVERITY_ORDER,
    finding_place,
    format_bytes,
    format_duration,
    format_frames,
    format_ms,
    format_ts,
)

__all__ = ["render_html", "write_html"]

# Layout of one chart, in SVG user units (the SVG scales to the page width).
WIDTH, HEIGHT = 960, 280
LEFT, RIGHT, TOP, BOTTOM = 72, 56, 16, 36
MAX_CHARTS = 40  #: charts of each kind (the busiest APIs, the groups/topics with most commits)
MAX_POINTS = 2000  #: commit points per chart; more are thinned evenly (the last one always kept)
MAX_MARKERS = 200  #: finding markers per chart
MAX_TABLE_ROWS = 200
MAX_DOTS = 300  #: a latency series with more buckets than this is drawn as lines (isolated buckets keep a dot)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31")
SEVERITY_COLOURS = {"error": "#d62728", "warning": "#e6a700", "info": "#1f77b4"}
ERROR_COLOUR = "#d62728"

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1100px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1em; margin: 1.2em 0 .3em; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
.overview { display: flex; flex-wrap: wrap; gap: .5em 2em; }
.overview div { min-width: 9em; } .overview b { display: block; font-size: 1.3em; }
.sev-error { color: #b00; font-weight: bold; } .sev-warning { color: #a67800; font-weight: bold; }
svg { width: 100%; height: auto; background: #fff; }
svg text { font-size: 11px; fill: #444; }
.legend { font-size: .8em; margin: 0 0 .5em; padding: 0; list-style: none; }
.legend li { display: inline-block; margin-right: 1.2em; }
.swatch { display: inline-block; width: .8em; height: .8em; margin-right: .3em; vertical-align: middle; }
.note { color: #666; font-size: .85em; }
"""


def e(value) -> str:
    """Text from anywhere (capture contents included) made safe for HTML text and attributes."""
    return html.escape("" if value is None else str(value), quote=True)


# -- charts ---------------------------------------------------------------------------------------

@dataclass
class Line:
    label: str
    colour: str
    points: list[tuple[int, float]]  #: (time ns, value), in time order
    step: bool = False  #: hold each value until the next point (committed offsets)
    dashed: bool = False
    end_label: str | None = None  #: written at the line's last point
    #: points further apart than this (ns) are not joined: the series has no value between them
    #: (a bucketed series passes its bucket width); None joins every point
    gap_ns: int | None = None
    dots: bool = True  #: a point at each value (a run of one point always gets one)

    def runs(self) -> list[list[tuple[int, float]]]:
        """The points cut where two neighbours are more than ``gap_ns`` apart."""
        out: list[list[tuple[int, float]]] = []
        for point in self.points:
            if out and (self.gap_ns is None or point[0] - out[-1][-1][0] <= self.gap_ns):
                out[-1].append(point)
            else:
                out.append([point])
        return out


@dataclass(frozen=True)
class TimeAxis:
    """The time span every chart of a report draws (ns since the epoch, ``t1 > t0``)."""

    t0: int
    t1: int

    @classmethod
    def around(cls, times: Iterable[int]) -> TimeAxis | None:
        times = [t for t in times if t]
        if not times:
            return None
        t0, t1 = min(times), max(times)
        if t1 == t0:  # one instant: a second around it
            t0, t1 = t0 - NS_PER_S // 2, t1 + NS_PER_S // 2
        return cls(t0, t1)


@dataclass
class Dot:
    t_ns: int
    value: float
    colour: str
    title: str
    cross: bool = False


@dataclass
class Marker:
    t_ns: int
    colour: str
    title: str


@dataclass
class Chart:
    """An x = time, y = value chart rendered as SVG."""

    y_label: str
    lines: list[Line] = field(default_factory=list)
    dots: list[Dot] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    log_y: bool | None = None  #: None: log scale when the values span more than two decades
    zero_based: bool = True  #: a linear axis starts at 0 (latencies); False fits the values (offsets)
    axis: TimeAxis | None = None  #: the report's shared time axis; None fits this chart's own times

    def svg(self) -> str:
        times = [t for line in self.lines for t, _ in line.points] + [d.t_ns for d in self.dots]
        times += [m.t_ns for m in self.markers]
        values = [v for line in self.lines for _, v in line.points] + [d.value for d in self.dots]
        if not times:
            return ""
        axis = self.axis or TimeAxis.around(times)
        t0, t1 = axis.t0, axis.t1
        positive = [v for v in values if v > 0]
        log = self.log_y
        if log is None:
            log = bool(positive) and max(positive) / min(positive) > 100
        if log and positive:
            lo = 10 ** math.floor(math.log10(min(positive)))
            hi = 10 ** math.ceil(math.log10(max(positive)))
            if hi == lo:
                hi = lo * 10
        else:
            log = False
            lo = min(values, default=0.0)
            hi = max(values, default=1.0)
            if self.zero_based:  # from 0 up to a round number above the highest value
                lo = min(lo, 0.0)
                if hi > lo:
                    step = _nice_step(hi - lo)
                    hi = math.ceil(hi / step) * step
            else:  # a margin so the lowest and highest points are not on the frame
                pad = (hi - lo) * 0.05
                lo, hi = lo - pad, hi + pad
            if hi == lo:
                # One value: a margin around it, relative so that it shows at any size (a
                # committed offset near 2**63 minus 1 is the same float).
                margin = max(1.0, abs(lo) * 0.05)
                lo, hi = lo - margin, hi + margin
        plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

        def x(t: int) -> float:
            return LEFT + (t - t0) / (t1 - t0) * plot_w

        def y(v: float) -> float:
            if log:
                v = max(v, lo)
                frac = (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
            else:
                frac = (v - lo) / (hi - lo)
            return TOP + (1 - frac) * plot_h

        out = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg" role="img">',
               f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#bbb"/>']
        for value in (_log_ticks(lo, hi) if log else _linear_ticks(lo, hi)):
            yy = y(value)
            out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{LEFT - 4}" y="{yy + 4:.1f}" text-anchor="end">{e(_number(value))}</text>')
        for t in _time_ticks(t0, t1):
            xx = x(t)
            out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#eee"/>')
            out.append(f'<text x="{xx:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">'
                       f'{e(_time_label(t, t0, t1))}</text>')
        out.append(f'<text x="12" y="{TOP + plot_h / 2:.0f}" transform="rotate(-90 12 {TOP + plot_h / 2:.0f})" '
                   f'text-anchor="middle">{e(self.y_label)}{" (log)" if log else ""}</text>')
        out.append(f'<text x="{LEFT + plot_w}" y="{HEIGHT - 4}" text-anchor="end">time (UTC) from '
                   f'{e(format_ts(t0))}</text>')
        for line in self.lines:
            dash = ' stroke-dasharray="4 3"' if line.dashed else ""
            for run in line.runs():
                if len(run) > 1:
                    coords = []
                    for i, (t, v) in enumerate(run):
                        if line.step and i:
                            coords.append(f"{x(t):.1f},{y(run[i - 1][1]):.1f}")
                        coords.append(f"{x(t):.1f},{y(v):.1f}")
                    out.append(f'<polyline class="mark" fill="none" stroke="{line.colour}" stroke-width="1.5"{dash} '
                               f'points="{" ".join(coords)}"><title>{e(line.label)}</title></polyline>')
                if line.dots or len(run) == 1:
                    out.extend(f'<circle class="mark" cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5" '
                               f'fill="{line.colour}"><title>{e(line.label)}</title></circle>' for t, v in run)
            if line.end_label and line.points:
                t, v = line.points[-1]
                out.append(f'<text x="{x(t) + 4:.1f}" y="{y(v) + 4:.1f}">{e(line.end_label)}</text>')
        for d in self.dots:
            xx, yy = x(d.t_ns), y(d.value)
            if d.cross:
                out.append(f'<path class="mark" d="M{xx - 4:.1f},{yy - 4:.1f}L{xx + 4:.1f},{yy + 4:.1f}'
                           f'M{xx - 4:.1f},{yy + 4:.1f}L{xx + 4:.1f},{yy - 4:.1f}" stroke="{d.colour}" '
                           f'stroke-width="2"><title>{e(d.title)}</title></path>')
            else:
                out.append(f'<circle class="mark" cx="{xx:.1f}" cy="{yy:.1f}" r="3" fill="{d.colour}">'
                           f'<title>{e(d.title)}</title></circle>')
        for m in self.markers[:MAX_MARKERS]:
            xx = x(m.t_ns)
            out.append(f'<g><title>{e(m.title)}</title>'
                       f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="{m.colour}" '
                       f'stroke-dasharray="2 2"/>'
                       f'<path d="M{xx - 5:.1f},{TOP - 8}L{xx + 5:.1f},{TOP - 8}L{xx:.1f},{TOP}Z" '
                       f'fill="{m.colour}"/></g>')
        out.append("</svg>")
        return "".join(out)


def _nice_step(span: float, count: int = 5) -> float:
    raw = span / count
    if raw <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if raw <= mult * base:
            return mult * base
    return 10 * base


def _linear_ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0 ** k for k in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]


_TIME_STEPS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
                 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 2 * 86400, 7 * 86400, 14 * 86400)
_DAY_S = 86400


def _time_ticks(t0: int, t1: int, count: int = 6) -> list[int]:
    span_s = (t1 - t0) / NS_PER_S
    step_s = next((s for s in _TIME_STEPS_S if span_s / s <= count), None)
    if step_s is None:  # months or years: the first of a month, every few months
        return _month_ticks(t0, t1, count)
    step = int(step_s * NS_PER_S)
    first = -(-t0 // step) * step
    return list(range(first, t1 + 1, step))


def _month_ticks(t0: int, t1: int, count: int) -> list[int]:
    start = datetime.fromtimestamp(t0 / NS_PER_S, tz=timezone.utc)
    end = datetime.fromtimestamp(t1 / NS_PER_S, tz=timezone.utc)
    months = (end.year - start.year) * 12 + end.month - start.month + 1
    every = next((m for m in (1, 2, 3, 6, 12) if months / m <= count), None) or 12 * math.ceil(months / count / 12)
    ticks = []
    index = start.year * 12 + start.month - 1  # months since year 0, from the month t0 is in
    index = -(-index // every) * every
    while True:
        tick = datetime(index // 12, index % 12 + 1, 1, tzinfo=timezone.utc)
        t = int(tick.timestamp()) * NS_PER_S
        if t > t1:
            return ticks
        if t >= t0:
            ticks.append(t)
        index += every


def _time_label(t_ns: int, t0: int, t1: int) -> str:
    """A tick's label on an axis from t0 to t1: the date (with the year) when the axis crosses a
    day, the time of day when it is shorter than two weeks, milliseconds below ten seconds."""
    t = datetime.fromtimestamp(t_ns / NS_PER_S, tz=timezone.utc)
    span_ns = t1 - t0
    first = datetime.fromtimestamp(t0 / NS_PER_S, tz=timezone.utc)
    last = datetime.fromtimestamp(t1 / NS_PER_S, tz=timezone.utc)
    if first.date() != last.date():
        if span_ns > 14 * _DAY_S * NS_PER_S:
            return t.strftime("%Y-%m-%d")
        return t.strftime("%Y-%m-%d %H:%M")
    if span_ns < 10 * NS_PER_S:
        return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"
    return t.strftime("%H:%M:%S")


def _number(v: float) -> str:
    """Axis numbers: short (1.5k, 2M, 0.01)."""
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:g}G"
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def _legend(entries: Iterable[tuple[str, str]], limit: int = 24) -> str:
    entries = list(entries)
    items = [f'<li><span class="swatch" style="background:{colour}"></span>{e(label)}</li>'
             for label, colour in entries[:limit]]
    if len(entries) > limit:
        items.append(f"<li>... {len(entries) - limit} more</li>")
    return f'<ul class="legend">{"".join(items)}</ul>'


def _thin(points: list, limit: int) -> list:
    """At most ``limit`` evenly spread points, the last one kept (it is where the line ends)."""
    if len(points) <= limit:
        return points
    step = len(points) / limit
    out = [points[int(i * step)] for i in range(limit - 1)]
    out.append(points[-1])
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- findings -------------------------------------------------------------------------------------

def _finding_title(f, with_capture: bool) -> str:
    parts = [f"[{f.severity}] {f.kind}: {f.message}"]
    where = ", ".join(f"{k} {v}" for k, v in finding_place(f))
    if where:
        parts.append(where)
    parts.append(f"first at {format_ts(f.first_ts_ns)}")
    frames = format_frames(f.frames, with_capture=with_capture, shown=5)
    if frames:
        parts.append(frames)
    return "\n".join(parts)


def _marker(f, with_capture: bool) -> Marker | None:
    if not f.first_ts_ns:
        return None
    return Marker(f.first_ts_ns, SEVERITY_COLOURS.get(f.severity, "#555"), _finding_title(f, with_capture))


# -- sections -------------------------------------------------------------------------------------

class Raw(str):
    """HTML written here (never capture text): a table cell put in as it is."""


def _table(headers: Sequence[str], rows: Iterable[Sequence], numeric: Iterable[int] = ()) -> str:
    numeric = set(numeric)
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            text = c if isinstance(c, Raw) else e(c)
            cells.append(f'<td class="n">{text}</td>' if i in numeric else f"<td>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _overview(analysis) -> str:
    s = analysis.summary
    severities = defaultdict(int)
    for f in analysis.findings:
        severities[f.severity] += 1
    span = ""
    if s.first_ts_ns is not None and s.last_ts_ns is not None:
        span = format_duration((s.last_ts_ns - s.first_ts_ns) / NS_PER_S)
    items = [
        ("captures", len(analysis.captures)),
        ("bytes read", format_bytes(analysis.bytes_read)),
        ("packets", analysis.stats.get("packets", 0)),
        ("connections", len(analysis.connections)),
        ("exchanges", analysis.exchanges),
        ("findings", ", ".join(f"{n} {sev}" for sev, n in sorted(severities.items(),
                               key=lambda kv: SEVERITY_ORDER.get(kv[0], 9))) or "0"),
        ("warnings", analysis.warnings.total),
        ("time span", span or "-"),
        ("first", format_ts(s.first_ts_ns)),
    ]
    cells = "".join(f"<div><b>{e(value)}</b>{e(label)}</div>" for label, value in items)
    names = ", ".join(analysis.captures) or "(none readable)"
    return f'<p>{e(names)}</p><div class="overview">{cells}</div>'


def _findings_section(analysis) -> str:
    findings = analysis.findings  # already most severe first (findings.finding_order)
    if not findings:
        return "<p>No findings.</p>"
    rows = []
    for f in findings[:MAX_TABLE_ROWS]:
        where = ", ".join(f"{k} {v}" for k, v in finding_place(f))
        severity = Raw(f'<span class="sev-{e(f.severity)}">{e(f.severity)}</span>')
        rows.append((severity, f.kind, f.message, where, f.count, format_ts(f.first_ts_ns),
                     format_frames(f.frames, with_capture=len(analysis.captures) > 1)))
    table = _table(["severity", "kind", "message", "where", "count", "first", "frames"], rows, numeric=[4])
    more = f'<p class="note">{len(findings) - MAX_TABLE_ROWS} more not shown.</p>' if len(findings) > MAX_TABLE_ROWS else ""
    return table + more


def _report_axis(analysis) -> TimeAxis | None:
    """The time axis every chart shares: from the first to the last thing any chart draws."""
    s = analysis.summary
    times = [s.first_ts_ns, s.last_ts_ns]
    for series in s.series.values():
        points = series.points()
        if points:  # points are drawn at their bucket's middle
            times += [points[0][0] + series.width_ns // 2, points[-1][0] + series.width_ns // 2]
    times += [row.get("ts_ns") for row in analysis.commits if row.get("topic") is not None]
    times += [f.first_ts_ns for f in analysis.findings]
    return TimeAxis.around(t for t in times if t)


def _latency_section(analysis, axis: TimeAxis | None = None) -> str:
    s = analysis.summary
    keys = sorted(s.series, key=lambda k: -s.apis[k].count)
    parts = []
    for protocol, api in keys[:MAX_CHARTS]:
        series = s.series[(protocol, api)]
        half = series.width_ns // 2
        medians, maxes = [], []
        for start, bucket in series.points():
            if bucket.max_ms is None:
                continue
            medians.append((start + half, bucket.median_ms))
            maxes.append((start + half, bucket.max_ms))
        if not medians:
            continue
        # neighbouring buckets are width_ns apart: further means idle buckets between, no line there
        gap, dots = series.width_ns, len(medians) <= MAX_DOTS
        chart = Chart("latency ms", axis=axis,
                      lines=[Line("max latency per bucket", PALETTE[1], maxes, dashed=True, gap_ns=gap, dots=dots),
                             Line("median latency per bucket", PALETTE[0], medians, gap_ns=gap, dots=dots)])
        for f in analysis.findings:
            if f.api == api and getattr(f, "protocol", None) in (None, protocol):
                marker = _marker(f, len(analysis.captures) > 1)
                if marker:
                    chart.markers.append(marker)
        width_s = series.width_ns / NS_PER_S
        parts.append(f"<h3>{e(protocol)} {e(api)}</h3>"
                     + _legend([("median", PALETTE[0]), ("max", PALETTE[1])])
                     + chart.svg()
                     + f'<p class="note">{_plural(s.apis[(protocol, api)].count, "exchange")}; '
                       f'buckets of {width_s:g} s</p>')
    if len(keys) > MAX_CHARTS:
        parts.append(f'<p class="note">{len(keys) - MAX_CHARTS} less busy APIs not charted.</p>')
    return "".join(parts) or "<p>No answered exchanges.</p>"


def _commit_section(analysis, axis: TimeAxis | None = None) -> str:
    by_chart: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in analysis.commits:
        if row.get("ts_ns") and row.get("topic") is not None:
            by_chart[(row.get("group") or "", row["topic"])].append(row)
    if not by_chart:
        return "<p>No offset commits in the captures.</p>"
    keys = sorted(by_chart, key=lambda k: (-len(by_chart[k]), k))
    parts = []
    for group, topic in keys[:MAX_CHARTS]:
        rows = sorted(by_chart[(group, topic)], key=lambda r: (r["ts_ns"], r.get("request_frame") or 0))
        members: dict[str, str] = {}  # member -> colour, in order of first commit
        labels: dict[str, str] = {}
        chart = Chart("committed offset", log_y=False, zero_based=False, axis=axis)
        by_partition: dict[int, list[dict]] = defaultdict(list)
        for row in rows:
            by_partition[row["partition"]].append(row)
        per_partition_limit = max(10, MAX_POINTS // max(1, len(by_partition)))
        for partition in sorted(by_partition):
            prow = _thin(by_partition[partition], per_partition_limit)
            ok = [(r["ts_ns"], r["offset"]) for r in prow if not r.get("error_code") and (r["offset"] or 0) >= 0]
            if ok:
                # a committed offset holds until the next commit: one step line, its commits are the dots
                chart.lines.append(Line(f"partition {partition}", "#999", ok, step=True, end_label=f"p{partition}",
                                        dots=False))
            for r in prow:
                if r["offset"] is None or r["offset"] < 0:
                    continue
                member = r.get("member_id") or r.get("client_id") or r.get("client") or "?"
                if member not in members:
                    members[member] = PALETTE[len(members) % len(PALETTE)]
                    labels[member] = f"{member} ({r.get('client_id')})" if r.get("client_id") else member
                title = (f"{topic}-{partition} offset {r['offset']} at {format_ts(r['ts_ns'])}\n"
                         f"member {member}, client {r.get('client_id') or r.get('client')}, "
                         f"generation {r.get('generation')}, frame {r.get('request_frame')}")
                if r.get("error_code"):
                    chart.dots.append(Dot(r["ts_ns"], r["offset"], ERROR_COLOUR,
                                          f"{title}\nfailed: {r.get('error') or r['error_code']}", cross=True))
                else:
                    chart.dots.append(Dot(r["ts_ns"], r["offset"], members[member], title))
        for f in analysis.findings:
            if f.group == group and f.topic in (None, "", topic):
                marker = _marker(f, len(analysis.captures) > 1)
                if marker:
                    chart.markers.append(marker)
        svg = chart.svg()
        if not svg:
            continue
        parts.append(f"<h3>group {e(group or '(none)')}, topic {e(topic)}</h3>"
                     + _legend((labels[m], colour) for m, colour in members.items())
                     + svg
                     + f'<p class="note">{_plural(len(rows), "partition commit")} of '
                       f'{_plural(len(by_partition), "partition")}</p>')
    if len(keys) > MAX_CHARTS:
        parts.append(f'<p class="note">{len(keys) - MAX_CHARTS} more (group, topic) pairs not charted.</p>')
    return "".join(parts)


def _api_table(analysis) -> str:
    rows = [(r["protocol"], r["api"], r["count"], r["errors"], r["unanswered"], format_ms(r["p50"]),
             format_ms(r["p90"]), format_ms(r["p99"]), format_ms(r["max"]), format_bytes(r["request_bytes"]),
             format_bytes(r["response_bytes"])) for r in analysis.summary.api_rows()]
    return _table(["protocol", "api", "count", "errors", "unanswered", "p50 ms", "p90 ms", "p99 ms", "max ms",
                   "request bytes", "response bytes"], rows, numeric=range(2, 11))


def _errors_table(analysis) -> str:
    errors = analysis.summary.errors
    if not errors:
        return "<p>No errors in responses.</p>"
    rows = [(*key, n) if isinstance(key, tuple) else ("", "", key, n) for key, n in errors.most_common(MAX_TABLE_ROWS)]
    return _table(["protocol", "api", "error", "occurrences"], rows, numeric=[3])


def _connections_table(analysis) -> str:
    s = analysis.summary
    top = s.top_connections(MAX_TABLE_ROWS)
    rows = [(c.capture, c.conn, c.client, c.server, c.protocol, c.client_id or "", c.count, c.errors,
             format_bytes(c.request_bytes + c.response_bytes)) for c in top]
    note = (f'<p class="note">Top {len(top)} of {len(s.connections)} by exchanges.</p>'
            if len(s.connections) > len(top) else "")
    return _table(["capture", "conn", "client", "server", "protocol", "client id", "exchanges", "errors", "bytes"],
                  rows, numeric=[1, 6, 7, 8]) + note


def _warnings_section(analysis) -> str:
    w = analysis.warnings
    if not w.total:
        return "<p>No warnings.</p>"
    counts = _table(["kind", "count"], w.counts.most_common(), numeric=[1])
    first = _table(["capture", "frame", "conn", "kind", "message"],
                   [(x.capture, x.frame or "", x.conn or "", x.kind, x.message) for x in w.kept[:MAX_TABLE_ROWS]],
                   numeric=[1, 2])
    return counts + f"<h3>The first {_plural(min(len(w.kept), MAX_TABLE_ROWS), 'warning')}</h3>" + first


def render_html(analysis) -> str:
    """The report of a finished ``session.Analysis`` as one HTML document."""
    names = analysis.captures
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    title = "kwire analyze: " + (shown or "no capture")  # the overview lists every capture
    axis = _report_axis(analysis)
    sections = [
        ("Overview", _overview(analysis)),
        ("Findings", _findings_section(analysis)),
        ("Latency over time", _latency_section(analysis, axis)),
        ("Committed offsets over time", _commit_section(analysis, axis)),
        ("APIs", _api_table(analysis)),
        ("Errors", _errors_table(analysis)),
        ("Connections", _connections_table(analysis)),
        ("Warnings", _warnings_section(analysis)),
    ]
    body = "".join(f"<h2>{e(name)}</h2>{content}" for name, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(title)}</title><style>{STYLE}</style></head>"
            f"<body><h1>{e(title)}</h1>{body}</body></html>\n")


def write_html(analysis, path: str | os.PathLike) -> None:
    """Write the report of ``analysis`` to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_html(analysis))
