"""The HTML report in a real browser: Debian's Chromium, headless, renders the report of real
captures, and a probe reads what it drew.

The probe is a script put at the top of a copy of the report (the report itself has none): it
records every script error the page raises, then, once the page has loaded, measures each chart
as laid out - how many of its data marks (points, lines, crosses) have a size and sit inside its
plot frame, and where the frame is on the page - and writes that as JSON into a ``<pre>`` that
``--dump-dom`` hands back.  A second run takes a screenshot, kept in the test's tmp dir.

Chromium comes from ``tools/ensure_test_tools.sh`` (``make test`` and .ci/run call it); without
it the tests fail, naming the script, instead of skipping.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kwire.analyze.analyzer import AnalyzeOptions
from kwire.analyze.report_html import write_html
from kwire.analyze.session import analyze_captures

from .helpers import DEEPFLOW
from .realcap import run_scenario

PROBE = """<script>
window.kwireErrors = [];
window.addEventListener("error", (e) => window.kwireErrors.push(String(e.message || e.type)));
window.addEventListener("load", () => {
  const charts = [...document.querySelectorAll("svg.chart")].map((svg) => {
    const frame = svg.querySelector("rect").getBoundingClientRect();
    const inside = (r) => r.right >= frame.left - 1 && r.left <= frame.right + 1
      && r.bottom >= frame.top - 1 && r.top <= frame.bottom + 1;
    const marks = [...svg.querySelectorAll(".mark")].map((m) => m.getBoundingClientRect());
    let heading = svg.previousElementSibling;
    while (heading && heading.tagName !== "H3") heading = heading.previousElementSibling;
    return {title: heading ? heading.textContent : "?", marks: marks.length,
            drawn: marks.filter((r) => (r.width > 0 || r.height > 0) && inside(r)).length,
            left: Math.round(frame.left), width: Math.round(frame.width)};
  });
  const out = document.createElement("pre");
  out.id = "kwire-probe";
  out.textContent = JSON.stringify({errors: window.kwireErrors, charts: charts});
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("headless Chromium is needed to test the HTML report: run tools/ensure_test_tools.sh "
                    "(it installs Debian's package chromium)")
    return path


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # --no-sandbox: the tests may run as root, where Chromium's sandbox refuses to start
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1200,900", *args]
    out = subprocess.run(command, capture_output=True, timeout=180)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {out.returncode}: {out.stderr.decode(errors='replace')[-2000:]}")
    return out


def probe(report: Path, tmp_path: Path) -> dict:
    """What Chromium drew of ``report``: {'errors': [...], 'charts': [{title, marks, drawn, left, width}]}."""
    text = report.read_text(encoding="utf-8")
    probed = tmp_path / "probed.html"
    probed.write_text(text.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    out = run_chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", probed.as_uri())
    dom = out.stdout.decode("utf-8", errors="replace")
    start = dom.find('<pre id="kwire-probe">')
    assert start >= 0, f"the probe wrote nothing: the page did not load? {dom[:500]!r}"
    body = dom[start + len('<pre id="kwire-probe">'):dom.index("</pre>", start)]
    return json.loads(html.unescape(body))


def screenshot(report: Path, tmp_path: Path) -> Path:
    shot = tmp_path / "report.png"
    run_chromium(tmp_path, "--hide-scrollbars", "--window-size=1200,2400", f"--screenshot={shot}", report.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no PNG at {shot}"
    print(f"screenshot of the report: {shot}")
    return shot


def check_report(analysis, tmp_path: Path) -> dict:
    report = tmp_path / "report.html"
    write_html(analysis, report)
    seen = probe(report, tmp_path)
    screenshot(report, tmp_path)
    assert seen["errors"] == []
    charts = seen["charts"]
    assert charts, "no chart drawn"
    empty = [c["title"] for c in charts if c["drawn"] == 0 or c["drawn"] != c["marks"]]
    assert empty == [], f"charts with marks missing or outside their frame: {empty}"
    # one time axis in one frame: the frames sit at the same place, so an instant lines up
    assert len({(c["left"], c["width"]) for c in charts}) == 1, charts
    return seen


def test_the_report_of_real_client_traffic_in_chromium(tmp_path):
    """Real clients against kwire's broker (realcap's 'normal' scenario): latency charts for each
    API, committed offsets of the consumer groups."""
    run = run_scenario("normal", "tcpdump")
    analysis = analyze_captures([run.path], AnalyzeOptions())
    seen = check_report(analysis, tmp_path)
    titles = [c["title"] for c in seen["charts"]]
    assert {"kafka Produce", "kafka Fetch", "kafka JoinGroup"} <= set(titles)
    assert any(t.startswith("group normal-billing, topic normal-orders") for t in titles)


def test_the_report_of_captures_years_apart_in_chromium(tmp_path):
    """DeepFlow's captures, taken years apart, on one axis: APIs seen in one bucket each are points."""
    paths = sorted((DEEPFLOW / "kafka").glob("*.pcap")) + sorted((DEEPFLOW / "mongo").glob("*.pcap"))
    analysis = analyze_captures(paths, AnalyzeOptions())
    seen = check_report(analysis, tmp_path)
    assert len(seen["charts"]) >= 10


def test_the_probe_sees_a_script_error_and_a_chart_without_marks(tmp_path):
    """The checks above can fail: a page whose script throws, and a chart with no mark drawn (a
    one-point polyline, which draws nothing - the old report's empty chart)."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><h3>kafka Fetch</h3>'
                    '<svg class="chart" viewBox="0 0 100 100" xmlns="http://www.w3.org/2000/svg">'
                    '<rect x="10" y="10" width="80" height="80" fill="none" stroke="#bbb"/>'
                    '<polyline class="mark" fill="none" stroke="#000" points="50,50"/></svg>'
                    '<script>throw new Error("boom")</script></body></html>', encoding="utf-8")
    seen = probe(page, tmp_path)
    assert len(seen["errors"]) == 1 and "boom" in seen["errors"][0]
    assert seen["charts"] == [{"title": "kafka Fetch", "marks": 1, "drawn": 0, "left": seen["charts"][0]["left"],
                               "width": seen["charts"][0]["width"]}]
