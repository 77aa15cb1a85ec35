"""The worker side of ``kwire analyze --spark``: capture files to segment rows, flows to table rows.

Two functions run inside Spark's Python workers (through ``mapInArrow``), with the same layers
as the single-machine analyzer:

* ``read_segments``: one capture file per task, read with ``PcapReader`` + ``PacketDecoder``, out
  as Arrow batches of TCP segments (``SEGMENT_COLUMNS``).  Each segment carries its file's number
  and its *flow*, the unordered pair of endpoints, so both directions of a connection (and every
  connection that reuses the same addresses and ports) land in one group.
* ``decode_flows``: a partition of segments sorted by (file, flow, frame); each flow is fed to
  its own ``TcpReassembler`` and ``CaptureDecoder.decode_events`` (the very code of the
  single-machine path), and the rows of the tables come out (``tables.exchange_row``,
  ``commit_rows``, ``group_event_row``, ``connection_row``), with the warnings, the counters and
  the protocol decisions, as one Arrow stream of tagged rows (``DECODED_KINDS``).

What per-flow decoding changes, and how it is made to give the single-machine results:

* Connection ids.  A capture's connections are numbered in the order of their first packet;
  a flow cannot know the other flows, so its rows carry the connection's first frame in ``conn``
  (unique in a capture: one packet opens at most one connection) and the driver renumbers.
* The reassembler's clock.  It forgets a closed connection ``linger_ns`` of *capture* time after
  it closed, which decides whether a late packet on the same addresses opens a new connection.
  Its clock moves with the packets of every connection (all but bare ACKs), so each segment row
  carries ``clock_ns``, the latest time of the segments before it in the file that move that
  clock, and the flow's reassembler does its housekeeping at that time before taking the segment.
  Exact when capture times do not go backwards, except after a lone FIN or RST of a connection the
  reassembler does not know (it moves the clock here, not there).  With times out of order the
  single-machine reassembler itself depends on the order of every connection's packets.
* Protocol knowledge across connections.  A connection whose first bytes do not tell its protocol
  takes the protocol last sniffed on the same server endpoint, from any connection.  Each flow
  reports its decisions (``decision`` rows: sniffed or not, and when, in the capture's order of
  events); the driver finds the connections whose answer another flow's knowledge changes and
  decodes those flows again with ``overrides`` ((file, first frame) -> protocol).  The decision
  is read through ``CaptureDecoder._decide`` (see ``_FlowDecoder``): it relies on a sniff, and only
  a sniff, recording its answer in ``protocol_of_server``.
* Warnings.  Each flow keeps up to ``warning_limit`` warnings (every one is counted by kind); the
  driver keeps the first ones by capture and frame.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .analyzer import AnalyzeOptions, CaptureDecoder
from .exchange import WarningLog
from .packets import PacketDecoder, TcpSegment
from .pcap import NotACaptureError, PcapReader
from .tables import commit_rows, exchange_row, group_event_row

__all__ = [
    "DECODED_KINDS",
    "SEGMENT_COLUMNS",
    "decode_flows",
    "flow_key",
    "read_segments",
]

#: Columns of the segment rows, in order, with their type names (see spark_job's type mapping).
#: ``file`` numbers the input files (two files may have the same name, never the same flows).
#: ``note`` is null for a segment; a reader's counters and warnings travel as note rows (a JSON
#: object, ``flow`` null) so they pass through the same stages as the segments.
SEGMENT_COLUMNS: dict[str, str] = {
    "file": "int32", "capture": "string", "flow": "binary", "frame": "int64", "ts_ns": "int64", "clock_ns": "int64",
    "src": "binary", "dst": "binary", "sport": "int32", "dport": "int32", "seq": "int64", "ack": "int64",
    "flags": "int32", "payload": "binary", "missing": "int64", "note": "string",
}

#: Row kinds of the decoded stream -> their columns (type names).  Table kinds use tables.SCHEMAS.
DECODED_KINDS: dict[str, str | dict[str, str]] = {
    "exchange": "exchanges",
    "commit": "offset_commits",
    "group_event": "group_events",
    "connection": "connections",
    "warning": {"capture": "string", "frame": "int64", "conn": "int32", "kind": "string", "message": "string"},
    "stat": {"name": "string", "value": "int64"},
    # A protocol decision taken on a connection whose server was not named by a port:
    # sniffed (the first bytes told) or not (the decoder fell back on what it knew or on the port).
    # (phase, frame, first_frame) orders decisions as the single-machine decoder takes them:
    # phase 0 while packets are read (frame: the packet being read), 1 at the end of the capture.
    "decision": {"server": "string", "first_frame": "int64", "phase": "int32", "frame": "int64",
                 "protocol": "string", "sniffed": "bool"},
}

_BATCH_ROWS = 4096  # rows per Arrow batch out of a worker
_BATCH_BYTES = 16 << 20  # payload bytes per segment batch: bounds a worker's memory


def flow_key(src: bytes, sport: int, dst: bytes, dport: int) -> bytes:
    """The unordered endpoint pair of a segment: both directions of a connection give the same key."""
    a = src + sport.to_bytes(2, "big")
    b = dst + dport.to_bytes(2, "big")
    return a + b if a <= b else b + a


# -- reading -------------------------------------------------------------------------------------

def read_segments(files: Iterable[tuple[int, str, str]], arrow_schema) -> Iterator:
    """Arrow batches of the TCP segments of capture files given as (file number, capture name, path).

    A file that cannot be read, or that stops early, gives a ``capture`` warning; its counters
    (packets, segments, the packet decoder's skips) come out as note rows.
    """
    import pyarrow as pa

    names = list(SEGMENT_COLUMNS)
    for index, capture, path in files:
        cols: dict[str, list] = {name: [] for name in names}
        size = 0
        notes: list[dict] = []
        try:
            reader = PcapReader(path)
        except (NotACaptureError, OSError) as e:
            notes.append({"warning": "capture", "message": _why(e, path)})
            yield _note_batch(pa, arrow_schema, index, capture, notes)
            continue
        decoder = PacketDecoder()
        decode = decoder.decode
        segments = 0
        clock = None
        frame = 0
        try:
            for frame, ts, linktype, data, orig_len in reader:
                seg = decode(linktype, data, orig_len)
                if seg is None:
                    continue
                segments += 1
                src, dst, sport, dport, seq, ack, flags, payload, missing = seg
                cols["flow"].append(flow_key(src, sport, dst, dport))
                cols["frame"].append(frame)
                cols["ts_ns"].append(ts)
                cols["clock_ns"].append(ts if clock is None else clock)
                # The reassembler does its housekeeping after every segment but a bare ACK (and a
                # segment of an unknown flow with no SYN nor data, which cannot be told here).
                if (flags & 7 or payload or missing) and (clock is None or ts > clock):
                    clock = ts
                cols["src"].append(src)
                cols["dst"].append(dst)
                cols["sport"].append(sport)
                cols["dport"].append(dport)
                cols["seq"].append(seq)
                cols["ack"].append(ack)
                cols["flags"].append(flags)
                cols["payload"].append(payload)
                cols["missing"].append(missing)
                size += len(payload)
                if len(cols["frame"]) >= _BATCH_ROWS or size >= _BATCH_BYTES:
                    yield _segment_batch(pa, arrow_schema, index, capture, cols)
                    cols = {name: [] for name in names}
                    size = 0
        except OSError as e:  # a read error part way: what came before counts
            notes.append({"warning": "capture", "message": _why(e, path)})
        finally:
            reader.close()
        if cols["frame"]:
            yield _segment_batch(pa, arrow_schema, index, capture, cols)
        stats = {"packets": frame, "tcp_segments": segments, **decoder.counts()}
        notes.extend({"stat": name, "value": value} for name, value in stats.items())
        notes.extend({"warning": "capture", "message": text} for text in reader.warnings)
        yield _note_batch(pa, arrow_schema, index, capture, notes)


def _why(error: Exception, path: str) -> str:
    if isinstance(error, NotACaptureError):
        return str(error)
    return f"{path}: {getattr(error, 'strerror', None) or error}"


def _segment_batch(pa, schema, index: int, capture: str, cols: dict[str, list]):
    n = len(cols["frame"])
    cols["file"] = [index] * n
    cols["capture"] = [capture] * n
    cols["note"] = [None] * n
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)


def _note_batch(pa, schema, index: int, capture: str, notes: list[dict]):
    n = len(notes)
    arrays = []
    for f in schema:
        if f.name == "file":
            arrays.append(pa.array([index] * n, type=f.type))
        elif f.name == "capture":
            arrays.append(pa.array([capture] * n, type=f.type))
        elif f.name == "note":
            arrays.append(pa.array([json.dumps(note) for note in notes], type=f.type))
        else:
            arrays.append(pa.nulls(n, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# -- decoding ------------------------------------------------------------------------------------

class _RowBuffer:
    """Tagged rows of the decoded stream, turned into Arrow batches of the decoded schema."""

    def __init__(self, arrow_schema):
        self.schema = arrow_schema
        self.kinds: list[str] = []
        self.files: list[int] = []
        self.captures: list[str] = []
        self.flows: list[bytes | None] = []
        self.rows: list[dict] = []

    def add(self, kind: str, file: int, capture: str, flow: bytes | None, row: dict) -> None:
        self.kinds.append(kind)
        self.files.append(file)
        self.captures.append(capture)
        self.flows.append(flow)
        self.rows.append(row)

    def __len__(self) -> int:
        return len(self.rows)

    def flush(self):
        import pyarrow as pa

        kinds, rows = self.kinds, self.rows
        arrays = []
        for f in self.schema:
            if f.name == "kind":
                arrays.append(pa.array(kinds, type=f.type))
            elif f.name == "file":
                arrays.append(pa.array(self.files, type=f.type))
            elif f.name == "capture":
                arrays.append(pa.array(self.captures, type=f.type))
            elif f.name == "flow":
                arrays.append(pa.array(self.flows, type=f.type))
            else:
                name = f.name
                arrays.append(pa.array([r if k == name else None for k, r in zip(kinds, rows, strict=True)], type=f.type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self.kinds, self.files, self.captures, self.flows, self.rows = [], [], [], [], []
        return batch


class _Knowledge(dict):
    """``CaptureDecoder.protocol_of_server`` that remembers the last key a sniff wrote."""

    written: tuple[bytes, int] | None = None

    def __setitem__(self, key, value) -> None:
        self.written = key
        super().__setitem__(key, value)


def _endpoint_key(key: tuple[bytes, int]) -> str:
    """A server endpoint as the decision rows name it (only compared, never shown)."""
    addr, port = key
    return f"{addr.hex()}:{port}"


class _FlowDecoder(CaptureDecoder):
    """``CaptureDecoder`` for one flow at a time, reporting its protocol decisions.

    ``_decide`` is wrapped, not rewritten: the knowledge of the connection's server is taken away
    while the decoder decides, so that a sniff (which records what it found) can be told apart from
    a fall-back, and then the fall-back takes the override the driver computed from every flow,
    else this flow's own knowledge, else what the ports said.
    """

    def __init__(self, options: AnalyzeOptions, overrides: Mapping[tuple[int, int], str]):
        super().__init__(options)
        self.overrides = overrides
        self.file = 0
        self.now = (0, 0)  # (phase, frame) of the packet being read, see DECODED_KINDS['decision']
        self.decisions: list[dict] = []
        self.protocol_of_server = _Knowledge()

    def _decide(self, conn, pending, *, final: bool):
        knowledge = self.protocol_of_server
        key = (conn.server_addr, conn.server_port)  # where a fall-back looks
        known = knowledge.pop(key, None)
        knowledge.written = None
        decided = super()._decide(conn, pending, final=final)
        written = knowledge.written
        if known is not None and written != key:
            dict.__setitem__(knowledge, key, known)
        if decided is None:
            return None
        protocol, swap = decided
        if written is None:  # not sniffed
            protocol = self.overrides.get((self.file, conn.first_frame)) or known or protocol
        self.decisions.append({"server": _endpoint_key(written or key), "first_frame": conn.first_frame,
                               "phase": self.now[0], "frame": self.now[1], "protocol": protocol,
                               "sniffed": written is not None})
        return protocol, swap


def _segment_rows(batches: Iterable) -> Iterator[tuple]:
    """(file, capture, flow, frame, ts_ns, clock_ns, TcpSegment, note) of each row of segment batches."""
    tnew = tuple.__new__
    for batch in batches:
        cols = {name: batch.column(name).to_pylist() for name in SEGMENT_COLUMNS}
        for (file, capture, flow, frame, ts, clock, src, dst, sport, dport, seq, ack, flags, payload, missing,
             note) in zip(*(cols[name] for name in SEGMENT_COLUMNS), strict=True):
            if note is not None:
                yield file, capture, None, 0, 0, 0, None, note
            else:
                yield file, capture, flow, frame, ts, clock, tnew(TcpSegment, (src, dst, sport, dport, seq, ack,
                                                                               flags, payload, missing)), None


class _Peekable:
    __slots__ = ("it", "head")

    def __init__(self, it: Iterator):
        self.it = it
        self.head = next(it, None)

    def pop(self):
        head = self.head
        self.head = next(self.it, None)
        return head


def decode_flows(batches: Iterable, arrow_schema, options: AnalyzeOptions,
                 overrides: Mapping[tuple[int, int], str] | None = None) -> Iterator:
    """Arrow batches of decoded rows from segment batches sorted by (file, flow, frame).

    ``overrides``: (file, first frame of a connection) -> the protocol a fall-back decision on that
    connection must take (see the module docstring)."""
    out = _RowBuffer(arrow_schema)
    decoder = _FlowDecoder(options, overrides or {})
    rows = _Peekable(_segment_rows(batches))
    while rows.head is not None:
        file, capture, flow = rows.head[:3]
        if flow is None:
            _pass_note(out, file, capture, rows.pop()[7])
        else:
            _decode_flow(decoder, file, capture, flow, rows, out)
        if len(out) >= _BATCH_ROWS:
            yield out.flush()
    if len(out):
        yield out.flush()


def _pass_note(out: _RowBuffer, file: int, capture: str, note: str) -> None:
    item = json.loads(note)
    if "stat" in item:
        out.add("stat", file, capture, None, {"name": item["stat"], "value": item["value"]})
    else:
        out.add("warning", file, capture, None, {"capture": capture, "frame": 0, "conn": 0,
                                                 "kind": item["warning"], "message": item["message"]})
        out.add("stat", file, capture, None, {"name": "warning:" + item["warning"], "value": 1})


def _flow_segments(rows: _Peekable, file: int, flow: bytes) -> Iterator[tuple[int, int, int, TcpSegment]]:
    while rows.head is not None and rows.head[2] == flow and rows.head[0] == file:
        _, _, _, frame, ts, clock, seg, _ = rows.pop()
        yield frame, ts, clock, seg


def _decode_flow(decoder: _FlowDecoder, file: int, capture: str, flow: bytes, rows: _Peekable,
                 out: _RowBuffer) -> None:
    """Decode one flow's segments (the head of ``rows``) into ``out``."""
    opts = decoder.options
    decoder.warnings = WarningLog(opts.warning_limit)
    decoder.stats = {}
    decoder.connections = []
    decoder.protocol_of_server = _Knowledge()
    decoder.decisions = []
    decoder.file = file
    first_frame: dict[int, int] = {}  # connection id in this flow -> its first frame (the id the driver maps)
    reassembler = decoder.reassembler()
    segments = _flow_segments(rows, file, flow)

    def events():
        r = reassembler
        for frame, ts, clock, seg in segments:
            r.advance(clock)  # the capture's clock moved on while other flows' packets were read
            decoder.now = (0, frame)
            r.feed(frame, ts, seg)
            if r.events:
                got, r.events = r.events, []
                for item in got:
                    first_frame[item[0].id] = item[0].first_frame
                    yield item
        decoder.now = (1, 0)
        r.finish()
        got, r.events = r.events, []
        yield from got

    def conn_of(cid: int) -> int:
        return first_frame.get(cid, 0) if cid else 0

    try:
        for ex in decoder.decode_events(capture, events()):
            row = exchange_row(ex)
            row["conn"] = conn_of(row["conn"])
            out.add("exchange", file, capture, flow, row)
            for commit in commit_rows(ex):
                commit["conn"] = row["conn"]
                out.add("commit", file, capture, flow, commit)
            event = group_event_row(ex)
            if event is not None:
                event["conn"] = row["conn"]
                out.add("group_event", file, capture, flow, event)
    except Exception as e:  # noqa: BLE001 - a decoding bug must cost one flow, not the whole job
        decoder.warnings(capture, 0, 0, "internal", f"flow {flow.hex()} abandoned: {type(e).__name__}: {e}")
        for _ in segments:  # skip the rest of the flow
            pass
    for row in decoder.connections:
        row["conn"] = conn_of(row["conn"])
        out.add("connection", file, capture, flow, row)
    for w in decoder.warnings.kept:
        out.add("warning", file, capture, flow, {"capture": w.capture, "frame": w.frame, "conn": conn_of(w.conn),
                                           "kind": w.kind, "message": w.message})
    stats: dict[str, Any] = dict(decoder.stats)
    stats["connections"] = reassembler.connections
    stats["ignored_segments"] = reassembler.ignored
    for kind, n in decoder.warnings.counts.items():
        stats["warning:" + kind] = n
    for name, value in stats.items():
        if value:
            out.add("stat", file, capture, flow, {"name": name, "value": value})
    for d in decoder.decisions:
        out.add("decision", file, capture, flow, d)
