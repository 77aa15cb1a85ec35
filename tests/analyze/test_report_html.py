"""The HTML report: one self-contained document, a chart per API and per (group, topic), findings
marked on their chart, and every string of the capture escaped."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from kwire.analyze.analyzer import AnalyzeOptions
from kwire.analyze.exchange import WarningLog
from kwire.analyze.findings import Finding
from kwire.analyze.report_html import render_html, write_html
from kwire.analyze.session import analyze_captures
from kwire.analyze.summary import Summary

from .helpers import DEEPFLOW, TS0
from .test_summary import empty_analysis, exchange

S = 1_000_000_000
HOSTILE = '<script>alert("x")</script>'
VOID = {"meta", "br", "hr", "img", "input", "link"}


class Document(HTMLParser):
    """Tags (with their attributes), text, and whether every element was closed in order."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.open: list[str] = []
        self.mismatched: list[str] = []
        self.titles: list[str] = []  # text of SVG <title> elements (the tooltips)
        self.h3: list[str] = []
        self._in_svg_title = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.open.append(tag)
        if tag == "h3":
            self.h3.append("")
        if tag == "title" and "svg" in self.open:
            self._in_svg_title = True
            self.titles.append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.mismatched.append(tag)
        else:
            self.open.pop()
        if tag == "title":
            self._in_svg_title = False

    def handle_data(self, data):
        self.text.append(data)
        if self.open and self.open[-1] == "h3":
            self.h3[-1] += data
        if self._in_svg_title:
            self.titles[-1] += data

    def count(self, tag: str) -> int:
        return sum(1 for t, _ in self.tags if t == tag)


def commit(ts_ns, partition, offset, member, *, frame, error_code=0, client_id="consumer-1"):
    return {"capture": "t.pcap", "conn": 1, "client": "10.0.0.1:4000", "client_id": client_id,
            "api": "OffsetCommit", "api_version": 8, "request_frame": frame, "response_frame": frame + 1,
            "ts_ns": ts_ns, "group": "billing", "member_id": member, "generation": 3, "topic": "orders",
            "partition": partition, "offset": offset, "error_code": error_code,
            "error": "ILLEGAL_GENERATION" if error_code else None, "status": "answered"}


def sample_analysis():
    s = Summary()
    for i in range(60):
        s.add(exchange("Produce", latency_ms=1.0 + i % 5, ts_ns=TS0 + i * S, client_id=HOSTILE))
        s.add(exchange("Fetch", latency_ms=500.0 + i, ts_ns=TS0 + i * S, conn=2))
    commits = [commit(TS0 + i * S, i % 2, 100 + i, "member-a" if i < 10 else "member-b", frame=10 + i)
               for i in range(20)]
    commits.append(commit(TS0 + 25 * S, 0, 90, "member-a", frame=99, error_code=22))
    slow = Finding(kind="slow_request", severity="warning", protocol="kafka", message="Fetch answered in 559 ms",
                   api="Fetch", count=2, first_ts_ns=TS0 + 30 * S, frames=[("t.pcap", 61)])
    backwards = Finding(kind="offset_backwards", severity="error", protocol="kafka",
                        message=f"offset went down, by {HOSTILE}", group="billing", topic="orders", partition=0,
                        count=1, first_ts_ns=TS0 + 12 * S, frames=[("t.pcap", 22)])
    warnings = WarningLog()
    warnings("t.pcap", 5, 1, "gap", f"missing bytes near {HOSTILE}")
    return empty_analysis(s, commits=commits, findings=[backwards, slow], warnings=warnings, exchanges=120)


def test_the_report_parses_and_has_a_chart_per_api_and_per_group_topic():
    doc = Document(render_html(sample_analysis()))
    assert doc.mismatched == [] and doc.open == []
    # Produce and Fetch latency, billing/orders commits.
    assert doc.count("svg") == 3
    assert doc.h3[:3] == ["kafka Produce", "kafka Fetch", "group billing, topic orders"]


def test_findings_are_marked_on_their_charts():
    doc = Document(render_html(sample_analysis()))
    marked = [t for t in doc.titles if t.startswith("[")]
    assert len(marked) == 2
    assert any(t.startswith("[warning] slow_request: Fetch answered in 559 ms") for t in marked)
    assert any(t.startswith("[error] offset_backwards") and "frame 22" in t for t in marked)
    # Points of commits: 20 accepted ones coloured by member, one failed.
    points = [t for t in doc.titles if t.startswith("orders-")]
    assert len(points) == 21 and sum("failed: ILLEGAL_GENERATION" in t for t in points) == 1


def test_capture_strings_are_escaped_and_nothing_is_loaded_from_elsewhere():
    text = render_html(sample_analysis())
    doc = Document(text)
    assert doc.count("script") == 0
    assert HOSTILE not in text
    assert any(HOSTILE in t for t in doc.text)  # shown as text, in the tables and tooltips
    assert not any(tag in ("link", "img", "iframe", "object") or "src" in attrs for tag, attrs in doc.tags)
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text


def test_an_empty_analysis_still_makes_a_report(tmp_path):
    path = tmp_path / "r.html"
    write_html(empty_analysis(captures=[]), path)
    doc = Document(path.read_text(encoding="utf-8"))
    assert doc.mismatched == [] and doc.count("svg") == 0
    assert "No findings." in doc.text


def test_report_of_the_deepflow_captures(tmp_path):
    paths = sorted((DEEPFLOW / "kafka").glob("*.pcap")) + sorted((DEEPFLOW / "mongo").glob("*.pcap"))
    analysis = analyze_captures(paths, AnalyzeOptions())
    path = tmp_path / "report.html"
    write_html(analysis, path)
    doc = Document(path.read_text(encoding="utf-8"))
    assert doc.mismatched == []
    latency_charts = sum(1 for a in analysis.summary.apis.values() if len(a.latencies_ms))
    commit_charts = len({(r["group"], r["topic"]) for r in analysis.commits if r["ts_ns"] and r["topic"]})
    assert latency_charts > 0 and commit_charts > 0
    assert doc.count("svg") == latency_charts + commit_charts


def test_a_chart_of_one_huge_value_draws_it_inside_the_frame():
    # A capture's committed offset can be any int64: near 2**63 a margin of 1 is lost in the
    # float, and the axis had no height (found by mutating the DeepFlow captures).
    from kwire.analyze.report_html import HEIGHT, TOP, Chart, Line

    for value in (2**63 - 1, -(2**63), 0, 5):
        svg = Chart("offset", lines=[Line("g t-0", "#000", [(TS0, float(value))], step=True)], zero_based=False).svg()
        (dot,) = [attrs for tag, attrs in Document(svg).tags if tag == "circle"]  # one point: a dot
        assert TOP < float(dot["cy"]) < HEIGHT, (value, dot)


def marks(svg: str) -> list[tuple[str, dict]]:
    return [(tag, attrs) for tag, attrs in Document(svg).tags if attrs.get("class") == "mark"]


def test_an_api_seen_in_one_bucket_is_a_point_not_an_empty_chart():
    s = Summary()
    s.add(exchange("DescribeConfigs", latency_ms=4.0, ts_ns=TS0))
    doc = Document(render_html(empty_analysis(s)))
    (svg_marks,) = [[t for t, a in doc.tags if a.get("class") == "mark"]]
    assert svg_marks == ["circle", "circle"]  # the median and the max of the one bucket


def test_a_series_is_not_joined_across_idle_buckets():
    """Busy for 5 s, idle for a minute, busy again: two runs of line, nothing drawn over the idle minute."""
    from kwire.analyze.report_html import Chart, Line, TimeAxis

    points = [(TS0 + i * S, 5.0) for i in range(5)] + [(TS0 + (65 + i) * S, 9.0) for i in range(5)]
    svg = Chart("ms", lines=[Line("median", "#000", points, gap_ns=S)], axis=TimeAxis(TS0, TS0 + 70 * S)).svg()
    lines = [a["points"] for t, a in marks(svg) if t == "polyline"]
    assert len(lines) == 2
    xs = [[float(c.split(",")[0]) for c in line.split()] for line in lines]
    assert max(xs[0]) < min(xs[1])  # the first run ends before the second starts: no segment across
    assert sum(t == "circle" for t, _ in marks(svg)) == 10
    isolated = Chart("ms", lines=[Line("m", "#000", [(TS0, 1.0), (TS0 + 9 * S, 2.0)], gap_ns=S, dots=False)]).svg()
    assert [t for t, _ in marks(isolated)] == ["circle", "circle"]  # runs of one point keep their dot


def test_every_chart_shares_one_time_axis():
    """A Produce burst at the start and a Fetch at the end: both charts span the whole analysis, so
    one instant is at one x in every chart."""
    s = Summary()
    for i in range(3):
        s.add(exchange("Produce", latency_ms=2.0, ts_ns=TS0 + i * S))
    s.add(exchange("Fetch", latency_ms=9.0, ts_ns=TS0 + 100 * S))
    text = render_html(empty_analysis(s))
    charts = [Document(part[:part.index("</svg>") + 6]) for part in ("<svg" + p for p in text.split("<svg")[1:])]
    assert len(charts) == 2
    frames_ = [[a for t, a in c.tags if t == "rect"] for c in charts]
    assert frames_[0] == frames_[1]  # the same plot frame in each
    ticks = [re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle">([^<]*)</text>', part)
             for part in text.split("<svg")[1:]]
    assert ticks[0] and ticks[0] == ticks[1]  # the same times at the same places
    from kwire.analyze.report_html import _report_axis

    axis = _report_axis(empty_analysis(s))
    assert (axis.t0, axis.t1) == (TS0, (TS0 // S + 100) * S + S // 2)  # the first exchange, the last bucket's middle


def test_time_labels_carry_the_year_when_the_axis_crosses_days():
    from kwire.analyze.report_html import Chart, Line, TimeAxis

    def labels(t0, t1):
        svg = Chart("ms", lines=[Line("m", "#000", [(t0, 1.0), (t1, 2.0)])], axis=TimeAxis(t0, t1)).svg()
        return [x for x in re.findall(r'text-anchor="middle">([^<]*)</text>', svg) if x != "ms"]  # time ticks

    day = 86400 * S
    within_a_day = labels(TS0, TS0 + 3600 * S)
    assert within_a_day and all(len(x) == 8 for x in within_a_day)  # 22:13:20
    over_days = labels(TS0, TS0 + 3 * day)
    assert over_days and all(x.startswith("2023-11-") for x in over_days)
    years = labels(TS0 - 3 * 365 * day, TS0)  # several captures, years apart
    assert {x[:4] for x in years} >= {"2021", "2022", "2023"}
