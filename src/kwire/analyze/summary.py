"""The analysis in numbers: what ``Summary.add`` keeps of every exchange, and the terminal report.

``Summary`` keeps, for a capture of any size, only counters and one latency array per API:

* per (protocol, API): exchanges, statuses, exchanges with an error, request/response bytes,
  latencies (``array('d')`` of milliseconds: 8 bytes an answered exchange; the percentiles are
  exact, computed once at the end);
* per connection: exchanges, errors, bytes, the client id it shows;
* error names by API, topics and partitions (exchanges, records, bytes), MongoDB databases and
  collections, client ids - each in a ``CappedCounter`` or ``Tallies`` that holds a bounded number
  of keys, so garbage input cannot grow them without bound;
* a latency time series per API for the HTML report (``LatencySeries``): per time bucket the
  count, the maximum and a small sample for the median; at most ``MAX_BUCKETS`` buckets (the
  bucket width doubles, merging neighbours, when a capture spans long).

``render_text(analysis, file, width)`` prints the terminal summary of a finished analysis
(``session.Analysis``): captures, APIs, connections, errors, top topics/partitions/collections,
findings and warnings.
"""

from __future__ import annotations

import math
import random
import shutil
import sys
import textwrap
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO

from kwire.text_table import print_table

from .exchange import ANSWERED, UNANSWERED, Exchange

__all__ = [
    "MAX_BUCKETS",
    "ApiStats",
    "Bucket",
    "CappedCounter",
    "ConnectionStats",
    "LatencySeries",
    "Summary",
    "Tallies",
    "finding_place",
    "format_duration",
    "format_frames",
    "percentile",
    "render_text",
]

MAX_BUCKETS = 2000  #: time buckets kept per API (a chart has fewer pixels than that across)
SAMPLE_SIZE = 31  #: latencies sampled per bucket for its median
DISTINCT_LIMIT = 10_000  #: distinct keys a CappedCounter holds before lumping new ones together
OTHER = "(other)"  #: the key new names go to once a CappedCounter is full
NS_PER_S = 1_000_000_000


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """The nearest-rank percentile (a value that occurred) of ascending values; None if there are none."""
    n = len(sorted_values)
    if not n:
        return None
    rank = max(1, math.ceil(p / 100 * n))
    return sorted_values[min(rank, n) - 1]


class CappedCounter(Counter):
    """A Counter that holds at most ``limit`` distinct keys; later new keys all count as ``OTHER``."""

    def __init__(self, limit: int = DISTINCT_LIMIT):
        super().__init__()
        self.limit = limit

    def add(self, key, n: int = 1) -> None:
        if key not in self and len(self) >= self.limit:
            key = OTHER
        self[key] += n


#: The Kafka APIs whose records a consumer reads (Fetch responses); the records of every other
#: exchange (Produce requests) are records written.
FETCH_APIS = frozenset(("Fetch", "ShareFetch"))

# The slots of a ``Tallies`` list
EXCHANGES, PRODUCED, PRODUCED_BYTES, FETCHED, FETCHED_BYTES = range(5)


class Tallies(dict):
    """key -> [exchanges, records produced, their bytes, records fetched, their bytes] (the slots
    ``EXCHANGES`` ... ``FETCHED_BYTES``), holding at most ``limit`` keys (later ones go to ``OTHER``).

    Produced and fetched are apart: a record written once and read by two consumers is one
    record produced and two fetched, and their sum means nothing.

    One small list per key, updated in place: a Fetch naming hundreds of partitions costs one
    lookup per partition.
    """

    def __init__(self, limit: int = DISTINCT_LIMIT):
        super().__init__()
        self.limit = limit

    def new(self, key) -> list[int]:
        if len(self) >= self.limit:
            key = OTHER
            if key in self:
                return self[key]
        tally = self[key] = [0, 0, 0, 0, 0]
        return tally

    def top(self, n: int) -> list[tuple[Any, list[int]]]:
        """The n keys named by most exchanges (then most records), with their tallies."""
        return sorted(self.items(), key=lambda kv: (-kv[1][EXCHANGES], -kv[1][PRODUCED] - kv[1][FETCHED],
                                                   str(kv[0])))[:n]


@dataclass(slots=True)
class ApiStats:
    """Counts of one (protocol, API)."""

    protocol: str
    api: str
    count: int = 0
    errors: int = 0  #: exchanges whose response carries an error
    request_bytes: int = 0
    response_bytes: int = 0
    statuses: Counter = field(default_factory=Counter)
    latencies_ms: array = field(default_factory=lambda: array("d"))
    _sorted: list[float] | None = None

    def latency_percentiles(self) -> dict[str, float | None]:
        """p50, p90, p99 and max of the latencies, in milliseconds (None when nothing was answered)."""
        if self._sorted is None or len(self._sorted) != len(self.latencies_ms):
            self._sorted = sorted(self.latencies_ms)
        s = self._sorted
        return {"p50": percentile(s, 50), "p90": percentile(s, 90), "p99": percentile(s, 99),
                "max": s[-1] if s else None}


@dataclass(slots=True)
class ConnectionStats:
    """Counts of one connection (one capture's ``conn`` id)."""

    capture: str
    conn: int
    client: str
    server: str
    protocol: str
    client_id: str | None = None
    count: int = 0
    errors: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    apis: Counter = field(default_factory=Counter)  # bounded by the protocol's API names


@dataclass(slots=True)
class Bucket:
    """One time bucket of an API's latency series."""

    count: int = 0
    max_ms: float | None = None
    sample: list[float] = field(default_factory=list)  #: at most SAMPLE_SIZE latencies, for the median
    sampled_from: int = 0  #: latencies the sample stands for

    @property
    def median_ms(self) -> float | None:
        return percentile(sorted(self.sample), 50)


class LatencySeries:
    """Per time bucket: exchanges started, the largest latency and the median of a sample.

    Buckets are aligned on multiples of ``width_ns`` since the epoch, so doubling the width maps
    bucket ``i`` onto ``i // 2`` exactly; that happens whenever more than ``max_buckets`` exist.
    Samples are reservoir samples drawn with a seeded generator: the same capture gives the
    same report.
    """

    def __init__(self, width_ns: int = NS_PER_S, max_buckets: int = MAX_BUCKETS, seed: int = 0):
        self.width_ns = width_ns
        self.max_buckets = max_buckets
        self.buckets: dict[int, Bucket] = {}
        self._rng = random.Random(seed)

    def add(self, ts_ns: int, latency_ms: float | None) -> None:
        index = ts_ns // self.width_ns
        bucket = self.buckets.get(index)
        if bucket is None:
            bucket = self.buckets[index] = Bucket()
            if len(self.buckets) > self.max_buckets:
                self._coarsen()
                bucket = self.buckets[ts_ns // self.width_ns]
        bucket.count += 1
        if latency_ms is None:
            return
        if bucket.max_ms is None or latency_ms > bucket.max_ms:
            bucket.max_ms = latency_ms
        bucket.sampled_from += 1
        if len(bucket.sample) < SAMPLE_SIZE:
            bucket.sample.append(latency_ms)
        else:  # reservoir sampling: every latency of the bucket equally likely to be in the sample
            slot = self._rng.randrange(bucket.sampled_from)
            if slot < SAMPLE_SIZE:
                bucket.sample[slot] = latency_ms

    def _coarsen(self) -> None:
        # Sparse series (bursts far apart) may not shrink at the first doubling: repeat.
        while len(self.buckets) > self.max_buckets:
            self.width_ns *= 2
            merged: dict[int, Bucket] = {}
            for index, bucket in self.buckets.items():
                into = merged.get(index // 2)
                merged[index // 2] = bucket if into is None else self._merge(into, bucket)
            self.buckets = merged

    def _merge(self, a: Bucket, b: Bucket) -> Bucket:
        maxes = [m for m in (a.max_ms, b.max_ms) if m is not None]
        out = Bucket(count=a.count + b.count, max_ms=max(maxes) if maxes else None,
                     sampled_from=a.sampled_from + b.sampled_from)
        if len(a.sample) + len(b.sample) <= SAMPLE_SIZE:
            out.sample = a.sample + b.sample
        else:  # each side keeps a share of the sample in proportion to the latencies it stands for
            share = round(SAMPLE_SIZE * a.sampled_from / out.sampled_from)
            share = min(max(share, SAMPLE_SIZE - len(b.sample)), len(a.sample))
            out.sample = self._rng.sample(a.sample, share) + self._rng.sample(b.sample, SAMPLE_SIZE - share)
        return out

    def points(self) -> list[tuple[int, Bucket]]:
        """(bucket start in ns, bucket), in time order."""
        return [(index * self.width_ns, self.buckets[index]) for index in sorted(self.buckets)]


class Summary:
    """Counters of every exchange added; see the module docstring."""

    def __init__(self, *, distinct_limit: int = DISTINCT_LIMIT, max_buckets: int = MAX_BUCKETS):
        self.apis: dict[tuple[str, str], ApiStats] = {}
        self.connections: dict[tuple[str, int], ConnectionStats] = {}
        self.series: dict[tuple[str, str], LatencySeries] = {}
        self.statuses: Counter = Counter()
        self.errors = CappedCounter(distinct_limit)  #: (protocol, api, error name) -> occurrences
        #: topic -> [exchanges naming it, produced records, bytes, fetched records, bytes]
        self.topics = Tallies(distinct_limit)
        #: (topic, partition) -> [exchanges naming it, produced records, bytes, fetched records, bytes]
        self.partitions = Tallies(distinct_limit)
        self.databases = CappedCounter(distinct_limit)  #: MongoDB database -> exchanges
        self.collections = CappedCounter(distinct_limit)  #: 'db.collection' -> exchanges
        self.client_ids = CappedCounter(distinct_limit)  #: client id -> exchanges
        self.exchanges = 0
        self.first_ts_ns: int | None = None
        self.last_ts_ns: int | None = None
        self._max_buckets = max_buckets

    def add(self, ex: Exchange) -> None:
        self.exchanges += 1
        self.statuses[ex.status] += 1
        latency = ex.latency_ms
        failed = bool(ex.error_code or ex.error)

        key = (ex.protocol, ex.api)
        api = self.apis.get(key)
        if api is None:
            api = self.apis[key] = ApiStats(ex.protocol, ex.api)
            self.series[key] = LatencySeries(max_buckets=self._max_buckets)
        api.count += 1
        api.errors += failed
        api.request_bytes += ex.request_bytes
        api.response_bytes += ex.response_bytes
        api.statuses[ex.status] += 1
        if latency is not None:
            api.latencies_ms.append(latency)
        ts = ex.ts_ns
        if ts:
            self.series[key].add(ts, latency)
            self.first_ts_ns = ts if self.first_ts_ns is None else min(self.first_ts_ns, ts)
            end = ex.response_ts_ns or ts
            self.last_ts_ns = end if self.last_ts_ns is None else max(self.last_ts_ns, end)

        ckey = (ex.capture, ex.conn)
        conn = self.connections.get(ckey)
        if conn is None:
            conn = self.connections[ckey] = ConnectionStats(ex.capture, ex.conn, ex.client, ex.server, ex.protocol)
        conn.count += 1
        conn.errors += failed
        conn.request_bytes += ex.request_bytes
        conn.response_bytes += ex.response_bytes
        conn.apis[ex.api] += 1
        if ex.client_id and conn.client_id is None:
            conn.client_id = ex.client_id

        if ex.errors:
            for name, n in ex.errors.items():
                self.errors.add((ex.protocol, ex.api, name), n)
        elif failed:
            self.errors.add((ex.protocol, ex.api, ex.error or str(ex.error_code)))
        if ex.client_id:
            self.client_ids.add(ex.client_id)

        if ex.partitions:
            self._add_partitions(ex.partitions, FETCHED if ex.api in FETCH_APIS else PRODUCED)
        if ex.database:
            self.databases.add(ex.database)
            if ex.collection:
                self.collections.add(f"{ex.database}.{ex.collection}")

    def _add_partitions(self, partitions: list, slot: int) -> None:
        """``slot``: PRODUCED or FETCHED, where the records go (their bytes in the slot after it)."""
        topics, parts = self.topics, self.partitions
        named: set[str] = set()
        for p in partitions:
            tally = parts.get((p.topic, p.partition)) or parts.new((p.topic, p.partition))
            tally[EXCHANGES] += 1
            tally[slot] += p.records
            tally[slot + 1] += p.bytes
            tally = topics.get(p.topic) or topics.new(p.topic)
            if p.topic not in named:  # a topic counts once per exchange, however many partitions it names
                named.add(p.topic)
                tally[EXCHANGES] += 1
            tally[slot] += p.records
            tally[slot + 1] += p.bytes

    # -- views --------------------------------------------------------------------------------

    def api_rows(self) -> list[dict[str, Any]]:
        """One dict per (protocol, API), busiest first: counts, bytes and latency percentiles (ms)."""
        rows = []
        for stats in sorted(self.apis.values(), key=lambda s: (-s.count, s.protocol, s.api)):
            rows.append({"protocol": stats.protocol, "api": stats.api, "count": stats.count,
                         "errors": stats.errors, "unanswered": stats.statuses[UNANSWERED],
                         "answered": stats.statuses[ANSWERED], "request_bytes": stats.request_bytes,
                         "response_bytes": stats.response_bytes, **stats.latency_percentiles()})
        return rows

    def top_connections(self, n: int) -> list[ConnectionStats]:
        return sorted(self.connections.values(), key=lambda c: (-c.count, c.capture, c.conn))[:n]


# -- the terminal report ------------------------------------------------------------------------

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
TOP = 10  #: rows of each "top" table
FRAMES_SHOWN = 3  #: frame numbers listed per finding


def format_frames(frames: Iterable[tuple[str, int]], *, with_capture: bool = False, shown: int = FRAMES_SHOWN) -> str:
    """'frames 12, 57, 90 (+3 more)'; with_capture names the capture of each ('a.pcap:12')."""
    frames = list(frames)
    if not frames:
        return ""
    listed = [f"{cap}:{frame}" if with_capture else str(frame) for cap, frame in frames[:shown]]
    word = "frame" if len(frames) == 1 else "frames"
    more = f" (+{len(frames) - shown} more)" if len(frames) > shown else ""
    return f"{word} {', '.join(listed)}{more}"


def format_bytes(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)  # unreachable: the loop returns at GB


def format_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 1:
        return f"{ms:.1f}"
    return f"{ms:.3f}"


def format_duration(seconds: float) -> str:
    """'0.123 s', '42.5 s', '12 min 5 s', '3 h 20 min', '12 d 4 h'."""
    if seconds < 60:
        return f"{seconds:.3f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"


def format_ts(ts_ns: int | None) -> str:
    if not ts_ns:
        return "-"
    t = datetime.fromtimestamp(ts_ns / NS_PER_S, tz=timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _heading(title: str, out: TextIO) -> None:
    print(file=out)
    print(title, file=out)


def finding_place(f) -> list[tuple[str, object]]:
    """(label, value) of what a finding is about: group, topic, partition, member, api, client."""
    pairs = (("group", f.group), ("topic", f.topic), ("partition", f.partition),
             ("member", getattr(f, "member", None)), ("api", f.api), ("client", f.client))
    return [(label, value) for label, value in pairs if value not in (None, "")]


def render_text(analysis, file: TextIO | None = None, width: int | None = None) -> None:
    """The terminal summary of a finished ``session.Analysis``."""
    out = file or sys.stdout
    width = width or shutil.get_terminal_size((100, 24)).columns
    s: Summary = analysis.summary
    several = len(analysis.captures) > 1

    print(f"Captures: {', '.join(analysis.captures) or '(none readable)'}", file=out)
    st = analysis.stats
    protocols = Counter(row.get("protocol") or "other" for row in analysis.connections)
    per_protocol = ", ".join(f"{name} {n}" for name, n in sorted(protocols.items()))
    print(f"Read {format_bytes(analysis.bytes_read)} in {analysis.seconds:.1f} s: {st.get('packets', 0)} packets, "
          f"{st.get('tcp_segments', 0)} TCP segments, {len(analysis.connections)} connections"
          + (f" ({per_protocol})" if per_protocol else ""), file=out)
    statuses = ", ".join(f"{name} {n}" for name, n in s.statuses.most_common())
    print(f"Exchanges: {s.exchanges}" + (f" ({statuses})" if statuses else ""), file=out)
    if s.first_ts_ns is not None and s.last_ts_ns is not None:
        span = format_duration((s.last_ts_ns - s.first_ts_ns) / NS_PER_S)
        print(f"Time: {format_ts(s.first_ts_ns)} to {format_ts(s.last_ts_ns)} ({span})", file=out)

    if s.apis:
        _heading("APIS (latency in ms)", out)
        print_table(["PROTOCOL", "API", "COUNT", "ERRORS", "UNANSWERED", "P50", "P90", "P99", "MAX",
                     "REQ-BYTES", "RESP-BYTES"],
                    [[r["protocol"], r["api"], r["count"], r["errors"], r["unanswered"], format_ms(r["p50"]),
                      format_ms(r["p90"]), format_ms(r["p99"]), format_ms(r["max"]),
                      format_bytes(r["request_bytes"]), format_bytes(r["response_bytes"])] for r in s.api_rows()],
                    file=out, align_right=range(2, 11))

    if s.connections:
        top = s.top_connections(TOP)
        _heading(f"CONNECTIONS (top {len(top)} of {len(s.connections)} by exchanges)", out)
        # The capture column only when there are several captures: one capture is named above.
        lead = ["CAPTURE"] if several else []
        headers = [*lead, "CONN", "CLIENT", "SERVER", "PROTOCOL", "CLIENT-ID", "EXCHANGES", "ERRORS", "BYTES"]
        rows = [[*([c.capture] if several else []), c.conn, c.client, c.server, c.protocol, c.client_id or "-",
                 c.count, c.errors, format_bytes(c.request_bytes + c.response_bytes)] for c in top]
        n = len(lead)
        print_table(headers, rows, file=out, align_right=[n, n + 5, n + 6, n + 7])

    if s.errors:
        _heading("ERRORS (occurrences in responses, by API)", out)
        print_table(["PROTOCOL", "API", "ERROR", "COUNT"],
                    [[key[0], key[1], key[2], n] if key != OTHER else ["", "", OTHER, n]
                     for key, n in s.errors.most_common(TOP * 2)], file=out, align_right=[3])

    if s.topics:
        _heading("TOPICS (by exchanges)", out)
        # produced (Produce requests) and fetched (Fetch responses) apart: one record read by two
        # consumers is fetched twice
        counts = ["EXCHANGES", "PRODUCED", "PRODUCED-BYTES", "FETCHED", "FETCHED-BYTES"]
        print_table(["TOPIC", *counts], [[t, *_tally_cells(tally)] for t, tally in s.topics.top(TOP)],
                    file=out, align_right=range(1, 6))
        _heading("PARTITIONS (by exchanges)", out)
        print_table(["TOPIC", "PARTITION", *counts],
                    [[*(tp if tp != OTHER else (OTHER, "")), *_tally_cells(tally)]
                     for tp, tally in s.partitions.top(TOP)],
                    file=out, align_right=range(1, 7))
    if s.collections or s.databases:
        _heading("MONGODB (by exchanges)", out)
        rows = [["database", name, n] for name, n in s.databases.most_common(TOP)]
        rows += [["collection", name, n] for name, n in s.collections.most_common(TOP)]
        print_table(["KIND", "NAME", "EXCHANGES"], rows, file=out, align_right=[2])
    if s.client_ids:
        _heading("CLIENT IDS (by exchanges)", out)
        print_table(["CLIENT-ID", "EXCHANGES"], s.client_ids.most_common(TOP), file=out, align_right=[1])

    _render_findings(analysis.findings, out, width, several)
    _render_warnings(analysis.warnings, out, width)


def _tally_cells(tally: list[int]) -> list:
    n, produced, produced_bytes, fetched, fetched_bytes = tally
    return [n, produced, format_bytes(produced_bytes), fetched, format_bytes(fetched_bytes)]


def _render_findings(findings: list, out: TextIO, width: int, several: bool) -> None:
    _heading(f"FINDINGS ({len(findings)})", out)
    if not findings:
        print("none", file=out)
        return
    wrap = textwrap.TextWrapper(width=max(width, 40), subsequent_indent="    ")
    for f in findings:  # in findings.finding_order: most severe first
        where = [f"{label} {value}" for label, value in finding_place(f)]
        if f.count and f.count > 1:
            where.append(f"{f.count} times")
        frames = format_frames(f.frames, with_capture=several)
        if frames:
            where.append(frames)
        print(wrap.fill(f"[{f.severity}] {f.kind}: {f.message}"), file=out)
        if where:
            print(wrap.fill("    " + "; ".join(where)), file=out)


WARNINGS_SHOWN = 5


def _render_warnings(warnings, out: TextIO, width: int) -> None:
    if not warnings.total:
        return
    counts = ", ".join(f"{kind} {n}" for kind, n in warnings.counts.most_common())
    _heading(f"WARNINGS ({warnings.total}: {counts})", out)
    wrap = textwrap.TextWrapper(width=max(width, 40), subsequent_indent="    ")
    for w in warnings.kept[:WARNINGS_SHOWN]:
        place = ", ".join(part for part in (w.capture, f"frame {w.frame}" if w.frame else "",
                                            f"conn {w.conn}" if w.conn else "") if part)
        print(wrap.fill(f"{place}: [{w.kind}] {w.message}"), file=out)
    if warnings.total > WARNINGS_SHOWN:
        print(f"... and {warnings.total - WARNINGS_SHOWN} more", file=out)
