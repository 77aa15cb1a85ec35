"""``kwire analyze`` on one machine, this tree against a baseline commit, side by side in one run.

    python benchmarks/bench_findings.py [--baseline REF] [--exchanges 20000 100000] [--repeat 5]

Measures what changing the findings' engine costs (issue 25: the rules as SQL run by DuckDB
instead of Python): each run is a fresh process doing ``session.analyze_captures`` on one capture,
wall time from before the first kwire import to the findings (so DuckDB's and pyarrow's imports
count), and the CPU time of the whole process (the figure to read on a loaded machine), alternated
baseline / current so load hits both alike; the medians of ``--repeat`` pairs are printed, with the
ratios current / baseline (> 1: slower now).

The captures: the largest of the real captures in /work/shared/captures (a small run: start-up
dominates), and synthetic Kafka captures of ``--exchanges`` exchanges over 50 connections (ApiVersions
answered, every 50th with an error, every 100th left unanswered at the connection's end), built
with the analyzer's own pcap writer.  The baseline is ``git archive REF src`` in a temp dir.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CAPTURES = Path("/work/shared/captures")
TS0 = 1_700_000_000_000_000_000

_RUN = """
import sys, time
t = time.perf_counter()
from kwire.analyze.session import analyze_captures
a = analyze_captures([sys.argv[1]])
print(time.perf_counter() - t, a.exchanges, len(a.findings))
"""


def synthetic_capture(path: Path, exchanges: int) -> None:
    sys.path.insert(0, str(REPO / "src"))
    from kwire.analyze.pcapwrite import PcapWriter, TcpConversation
    from kwire.protocol import encode_request, encode_response, messages

    ok = messages.ApiVersionsResponse(api_keys=[
        messages.ApiVersionsResponse.ApiVersion(api_key=key, min_version=0, max_version=9) for key in range(10)])
    failed = messages.ApiVersionsResponse(error_code=35)
    per_conn = max(1, exchanges // 50)
    with open(path, "wb") as f:
        writer = PcapWriter(f)
        ts = TS0
        for conn in range(50):
            conv = TcpConversation(writer, "10.2.2.1", 40000 + conn, "10.2.2.2", 9092)
            conv.handshake(ts)
            for i in range(per_conn):
                cid = conn * per_conn + i
                ts += 1_000_000
                conv.send(0, encode_request(messages.ApiVersionsRequest(), 2, cid, f"client-{conn % 7}"), ts)
                if cid % 100 == 99:
                    continue  # unanswered: the connection ends first
                conv.send(1, encode_response(failed if cid % 50 == 0 else ok, 2, cid), ts + 200_000)
            ts += 1_000_000
            conv.close(ts)


def run(src: Path, capture: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the whole process, what it found) of one fresh process."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", _RUN, str(capture)], env=env, capture_output=True, text=True,
                         check=True, cwd=tempfile.gettempdir()).stdout.split()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return float(out[0]), cpu, f"{out[1]} exchanges, {out[2]} findings"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--exchanges", type=int, nargs="*", default=[20_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline, "src"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        captures = sorted(CAPTURES.rglob("*.pcap"), key=lambda p: p.stat().st_size)[-1:]
        for n in args.exchanges:
            path = Path(tmp) / f"synthetic-{n}.pcap"
            synthetic_capture(path, n)
            captures.append(path)
        print(f"baseline {args.baseline}, median of {args.repeat} alternated pairs per process: wall seconds "
              f"(imports to findings) and CPU seconds (user+sys of the whole process)")
        print("| capture | size | wall baseline | wall current | ratio | CPU baseline | CPU current | ratio | what |")
        print("|---|---|---|---|---|---|---|---|---|")
        for capture in captures:
            old, new = [], []
            what = ""
            for _ in range(args.repeat):
                old.append(run(base / "src", capture)[:2])
                *t, what = run(REPO / "src", capture)
                new.append(t)
            wa, wb = (statistics.median(w for w, _ in runs) for runs in (old, new))
            ca, cb = (statistics.median(c for _, c in runs) for runs in (old, new))
            print(f"| {capture.name} | {capture.stat().st_size / 1e6:.2f} MB | {wa:.2f} s | {wb:.2f} s | "
                  f"{wb / wa:.2f}x | {ca:.2f} s | {cb:.2f} s | {cb / ca:.2f}x | {what} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
