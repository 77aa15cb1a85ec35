"""``kwire consume``: print a topic's records as kcat does: raw bytes, a format of yours, or JSON.

    kwire consume orders                          records written from now on, until Ctrl-C
    kwire consume orders -o beginning -e          everything there is, then exit
    kwire consume orders -p 0 2 -o -10            the last 10 records of partitions 0 and 2
    kwire consume orders -o s@1700000000000 -o e@1700003600000 -e     one hour of records
    kwire consume orders --group billing          as a member of group billing (commits offsets)
    kwire consume orders -f '%p:%o %k=%s\\n'       partition, offset, key and value
    kwire consume orders -K '\\t' -D '\\0'           key TAB value NUL, for binary-safe pipes
    kwire consume orders --json --count 100       JSON lines

Without ``--group`` the command reads the topic's partitions directly (all of them, or those of
``--partition``), starting where ``-o`` says (kcat's positions): ``end`` by default, as kcat and
kafka-console-consumer; ``beginning`` (or ``--from-beginning``); ``N`` an offset; ``-N`` N records
before the end (never before the start of the log); ``s@MS`` the first record at or after a
timestamp.  ``-o e@MS`` (with or without a start) stops each partition at its first record at or
after that timestamp, and the command once every partition has.  Nothing is committed.

With ``--group G`` (or a ``group.id`` in ``-X``/``--config``) it subscribes as a member of the
group: the group decides which partitions it reads and where each starts (the committed offset,
which is what ``-o stored`` names; ``-o beginning``/``-o end`` set ``auto.offset.reset`` for
partitions without one).  Offsets are committed automatically, and once more on exit, however it
exits (``--count``, ``-e``, Ctrl-C or SIGTERM); closing leaves the group so the others take over
at once.

``--exit-at-end`` (``-e``) stops once every assigned partition has reached the end offset it had
when it was assigned (records written after that are not printed).  With a group whose
assignment is empty (more members than partitions) that is at once.

Output is flushed after every batch of records and a record's output is always written whole.
Keys and values are written as the bytes stored, never decoded.  Without ``--format`` each
record is its value followed by ``-D`` (default a newline), with the key and ``-K`` before it when
``-K`` is given.  A null key or value writes nothing, or ``NULL`` with ``-Z`` (kcat's -Z).
``--format`` takes kcat's directives: ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key,
``%s`` value, ``%T`` timestamp (ms), ``%h`` headers (``k=v,k=v``), ``%K``/``%S`` key/value length
in bytes (-1 for null), ``%%``; escapes ``\\n`` ``\\t`` ``\\r`` ``\\0`` ``\\\\`` ``\\xHH``.

``--json`` writes one JSON object per line: topic, partition, offset, timestamp, timestamp_type
("CreateTime" or "LogAppendTime"), key, value, headers (a list of [key, value]).  A key or value
that is not valid UTF-8 is written as ``key_base64``/``value_base64`` (standard base64) in place
of ``key``/``value``; a header value that is not, as ``{"base64": "..."}``.

On exit the number of records printed goes to stderr.  A topic the broker does not know is an
error at once.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from . import start_up
from .arg_types import delimiter, positive_int, unescape
from .client_options import add_client_options, client_command, client_settings
from .output import fail

__all__ = ["compile_format", "json_line", "register", "run"]

T = TypeVar("T")

POLL_INTERVAL_MS = 500  # how long one poll waits for records: bounds how late a Ctrl-C is noticed
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


# -- output ---------------------------------------------------------------------------------------
# Lines are bytes: a key or value is written exactly as stored (kcat's way), never decoded.
def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else b"%d" % len(data)


def _directives(null: bytes) -> dict[str, Callable[[Any], bytes]]:
    """kcat's format directives; ``null`` is what a null key, value or header value prints as."""

    def raw(data: bytes | None) -> bytes:
        return null if data is None else data

    return {
        "t": lambda r: r.topic.encode(),
        "p": lambda r: b"%d" % r.partition,
        "o": lambda r: b"%d" % r.offset,
        "k": lambda r: raw(r.key),
        "s": lambda r: raw(r.value),
        "T": lambda r: b"%d" % r.timestamp,
        "h": lambda r: b",".join(k.encode() + b"=" + raw(v) for k, v in r.headers),
        "K": lambda r: _length(r.key),
        "S": lambda r: _length(r.value),
    }


_DIRECTIVE_NAMES = " ".join("%" + d for d in _directives(b""))


def compile_format(fmt: str, *, null: bytes = b"") -> Callable[[Any], bytes]:
    """A kcat format string -> a function from a ConsumerRecord to the bytes of its output.

    ``%k``/``%s`` are the key's and value's bytes as stored; a null prints as ``null`` (kcat:
    empty, or ``NULL`` with -Z).  ValueError names the first directive or escape it does not know.
    """
    directives = _directives(null)
    parts: list[Callable[[Any], bytes]] = []
    literal = bytearray()

    def flush_literal() -> None:
        if literal:
            data = bytes(literal)
            parts.append(lambda _r, data=data: data)
            literal.clear()

    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c in "%\\" and i + 1 == len(fmt):
            raise ValueError(f"the format ends with a lone {c!r}")
        if c == "\\":
            width = 4 if fmt[i + 1] == "x" else 2
            literal += unescape(fmt[i:i + width])
            i += width
        elif c == "%":
            nxt = fmt[i + 1]
            if nxt == "%":
                literal += b"%"
            elif nxt in directives:
                flush_literal()
                parts.append(directives[nxt])
            else:
                raise ValueError(f"unknown directive %{nxt} in the format (known: {_DIRECTIVE_NAMES} %%)")
            i += 2
        else:
            literal += os.fsencode(c)
            i += 1
    flush_literal()
    if len(parts) == 1:
        return parts[0]
    return lambda r: b"".join([part(r) for part in parts])


def delimited(value_end: bytes, key_end: bytes | None, null: bytes) -> Callable[[Any], bytes]:
    """kcat's output without -f: the value and ``-D`` (default a newline), the key and ``-K`` first
    when -K is given."""
    def raw(data: bytes | None) -> bytes:
        return null if data is None else data

    if key_end is None:
        return lambda r: raw(r.value) + value_end
    return lambda r: raw(r.key) + key_end + raw(r.value) + value_end


def _json_bytes(doc: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        doc[name] = None
        return
    try:
        doc[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        doc[name + "_base64"] = base64.b64encode(data).decode("ascii")


def _json_header_value(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def json_line(record) -> bytes:
    """One record as a JSON object on one line (with its newline), UTF-8."""
    doc: dict[str, Any] = {"topic": record.topic, "partition": record.partition, "offset": record.offset,
                           "timestamp": record.timestamp,
                           "timestamp_type": TIMESTAMP_TYPES.get(record.timestamp_type)}
    _json_bytes(doc, "key", record.key)
    _json_bytes(doc, "value", record.value)
    doc["headers"] = [[k, _json_header_value(v)] for k, v in record.headers]
    return (json.dumps(doc, ensure_ascii=False) + "\n").encode()


def _write(data: bytes) -> None:
    out = sys.stdout.buffer
    out.write(data)
    out.flush()


# -- arguments ------------------------------------------------------------------------------------
def _partitions(text: str) -> list[int]:
    """``2`` or ``0,2``: partition numbers."""
    try:
        numbers = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a partition number (or a comma-separated list)") from None
    if not numbers or any(n < 0 for n in numbers):
        raise argparse.ArgumentTypeError(f"{text!r}: partitions are numbers from 0")
    return numbers


def _format_arg(text: str) -> str:
    try:
        compile_format(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


@dataclass(frozen=True)
class Position:
    """One ``-o``: where to start (beginning, end, stored, an offset, N before the end, the first
    record at or after a time) or, for ``e@``, the time to stop at."""

    kind: str  # "beginning" | "end" | "stored" | "offset" | "tail" | "time" | "stop_time"
    value: int = 0


def _position(text: str) -> Position:
    """kcat's ``-o``: beginning | end | stored | N | -N | s@MS | e@MS."""
    if text in ("beginning", "end", "stored"):
        return Position(text)
    kind, number = {"s@": "time", "e@": "stop_time"}.get(text[:2], ""), text[2:]
    if not kind:
        kind, number = ("tail", text[1:]) if text.startswith("-") else ("offset", text)
    if not number.isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a position: beginning, end, stored, N (an offset), -N (N before the end), "
            "s@MS (the first record at or after a timestamp in ms), e@MS (stop at that timestamp)")
    return Position(kind, int(number))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print a topic's records",
                       description="Print the records of a topic, one line each: read its partitions directly "
                                   "(starting at the end unless told otherwise), or as a member of a consumer group.",
                       epilog="Format directives: %t topic, %p partition, %o offset, %k key, %s value, "
                              "%T timestamp (ms), %h headers (k=v,...), %K/%S key/value length, %%; "
                              "escapes \\n \\t \\r \\0 \\\\ \\xHH. Keys and values are written as the bytes "
                              "stored; a null one as nothing (-Z: NULL). --json: keys and values that are not "
                              "UTF-8 come as key_base64/value_base64.")
    p.add_argument("topic", help="the topic to read")
    p.add_argument("-g", "--group", metavar="GROUP",
                   help="read as a member of this consumer group (committing offsets)")
    p.add_argument("--share-group", metavar="GROUP",
                   help="read as a member of this share group (KIP-932): each record printed is accepted; "
                        "where a new group starts is its share.auto.offset.reset group config")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (with --group: where the group has no committed offset)")
    start.add_argument("-o", "--offset", type=_position, action="append", metavar="POS",
                       help="where to start, as kcat's -o: beginning, end, stored (the group's committed "
                            "offsets), N, -N (N records before the end), s@MS (first record at or after a "
                            "timestamp); e@MS stops each partition at that timestamp. Repeatable for s@/e@ "
                            "(with --group: beginning, end, stored and e@ only)")
    p.add_argument("-p", "--partition", dest="partitions", type=_partitions, nargs="+", action="extend",
                   metavar="P", help="read only these partitions (default: all; not with --group)")
    p.add_argument("-c", "--count", type=positive_int, metavar="N", help="stop after N records")
    p.add_argument("-e", "--exit-at-end", action="store_true",
                   help="stop when every assigned partition reaches the end offset it had when assigned")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("-f", "--format", type=_format_arg, metavar="FMT",
                       help="a kcat-like format for each record (default '%%s\\n'; see below)")
    shape.add_argument("--json", action="store_true", help="one JSON object per record per line")
    shape.add_argument("-D", "--delimiter", type=delimiter, metavar="DELIM",
                       help="write DELIM after each value (default a newline; escapes as in the format)")
    p.add_argument("-K", "--key-delimiter", type=delimiter, metavar="DELIM",
                   help="write the key and DELIM before each value (not with -f or --json)")
    p.add_argument("-Z", "--null", action="store_true",
                   help="write a null key or value as NULL (default: nothing, as kcat)")
    add_client_options(p, json_output=False)
    # The consumer's imports are start-up too (kwire.cli.start_up): run() says when they are done.
    p.set_defaults(func=client_command(run), consume_parser=p, start_up_in_handler=True)


# -- running --------------------------------------------------------------------------------------
class _Stopped(Exception):
    """Ctrl-C or SIGTERM came while the command was still setting up."""


class _Session:
    """One run of the command: its consumer, where it stops, what it printed."""

    def __init__(self, args: argparse.Namespace, settings: dict[str, Any], group: str | None):
        self.args = args
        self.settings = settings
        self.group = group
        self.stop = asyncio.Event()
        self.consumer = None
        null = b"NULL" if args.null else b""
        self.render = (json_line if args.json
                       else compile_format(args.format, null=null) if args.format is not None
                       else delimited(args.delimiter or b"\n", args.key_delimiter, null))
        # e@MS: partitions whose next record is at or past that time are finished.
        self.finished: set = set()
        self.printed = 0
        # --exit-at-end: the end offset of each assigned partition when it was assigned, and
        # those that have not reached it yet.
        self.ends: dict[Any, int] = {}
        self.pending: set = set()
        self.assigned = False

    # Signals: the first asks for a clean stop; after it the default handlers are back, so a
    # second Ctrl-C interrupts whatever is stuck.
    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._on_signal)
            except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
                pass

    def _on_signal(self) -> None:
        self.stop.set()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    async def until_stopped(self, step: Awaitable[T]) -> T:
        """Run a setup step; _Stopped if a signal comes first (the step is cancelled)."""
        task = asyncio.ensure_future(step)
        stopping = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise _Stopped
        return task.result()

    # -- setup --
    async def topic_partitions(self) -> list[int]:
        """The topic's partitions.  A broker that says the topic does not exist is believed at
        once (kcat's way: a typo should not cost --timeout); a retriable answer (a leader being
        elected, a topic being created) is asked again until --timeout."""
        from kwire.client.retry import Backoff
        from kwire.protocol.errors import KafkaError, UnknownTopicOrPartitionError

        topic, timeout = self.args.topic, self.args.timeout
        backoff = Backoff(100, 1000)
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            why = ""
            try:
                found = await self.consumer.partitions_for(topic)
            except UnknownTopicOrPartitionError as exc:
                raise LookupError(f"topic {topic!r} does not exist ({exc.name})") from None
            except KafkaError as exc:
                found, why = [], f" ({exc.name})"
            if found:
                return found
            pause = backoff.delay(attempt)
            if time.monotonic() + pause >= deadline:
                raise LookupError(f"topic {topic!r} does not exist{why}: not found within {timeout:g} s")
            attempt += 1
            await asyncio.sleep(pause)

    async def start_assigned(self, partitions: list[int]) -> None:
        """No group: assign the partitions and place each where the flags say."""
        from kwire.client.types import TopicPartition

        c, args = self.consumer, self.args
        tps = [TopicPartition(args.topic, p) for p in partitions]
        c.assign(tps)
        start = args.start or Position("end")  # kafka-console-consumer's and kcat's default
        if start.kind in ("offset", "tail"):
            begins = await c.beginning_offsets(tps)
            ends = await c.end_offsets(tps)
            for tp in tps:
                begin, end = begins.get(tp, 0), ends.get(tp, 0)
                wanted = end - start.value if start.kind == "tail" else start.value
                c.seek(tp, max(wanted, begin))  # past the end: auto.offset.reset (latest) takes over
        elif start.kind == "time":
            await c.seek_to_timestamp(start.value, tps)
        elif start.kind == "beginning":
            c.seek_to_beginning(tps)
        else:
            c.seek_to_end(tps)
        if args.exit_at_end:
            await self.track_ends(tps)
        self.assigned = True

    async def track_ends(self, tps) -> None:
        ends = await self.consumer.end_offsets(tps)
        for tp in tps:
            self.ends[tp] = ends.get(tp, 0)
            self.pending.add(tp)

    def forget(self, tps) -> None:
        for tp in tps:
            self.ends.pop(tp, None)
            self.pending.discard(tp)

    def listener(self):
        """With --exit-at-end or e@MS in a group: note each assigned partition (and its end offset)."""
        from kwire.client.consumer import RebalanceListener

        session = self

        class EndOffsets(RebalanceListener):
            async def on_partitions_assigned(self, assigned) -> None:
                if assigned and session.args.exit_at_end:
                    await session.track_ends(assigned)
                session.assigned = True

            def on_partitions_revoked(self, revoked) -> None:
                session.forget(revoked)
                session.finished.difference_update((tp.topic, tp.partition) for tp in revoked)

        return EndOffsets()

    # -- the loop --
    def keep(self, records: list) -> list:
        """Drop records at or past their partition's end (--exit-at-end) or stop time (e@MS), and
        move the partition back to the first one dropped so a commit does not skip it."""
        stop_ms = self.args.stop_ms
        if not self.ends and stop_ms is None:
            return records
        kept, dropped = [], {}
        for r in records:
            tp = (r.topic, r.partition)
            end = self.ends.get(tp)
            if tp in dropped or (end is not None and r.offset >= end):
                dropped.setdefault(tp, r.offset)
            elif stop_ms is not None and r.timestamp >= stop_ms:
                dropped.setdefault(tp, r.offset)
                self.finished.add(tp)
            else:
                kept.append(r)
        for tp, offset in dropped.items():
            self.consumer.seek(tp, offset)
            if tp in self.finished:
                self.consumer.pause([tp])
        return kept

    def past_stop_time(self) -> bool:
        """e@MS: whether every assigned partition has reached a record at or past that time."""
        assignment = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        return self.assigned and bool(assignment) and assignment <= self.finished

    async def reached_end(self) -> bool:
        """Whether every assigned partition has reached its end (pausing those that have)."""
        if not self.assigned:
            return False
        for tp in list(self.pending):
            if tp not in self.consumer.assignment():
                self.forget([tp])
                continue
            if await self.consumer.position(tp, self.args.timeout) >= self.ends[tp]:
                self.pending.discard(tp)
                self.consumer.pause(tp)
        return not self.pending

    async def consume(self) -> None:
        c, args = self.consumer, self.args
        while not self.stop.is_set():
            if args.exit_at_end and await self.reached_end():
                return
            if args.stop_ms is not None and self.past_stop_time():
                return
            limit = None if args.count is None else args.count - self.printed
            records = self.keep(await c.getmany(timeout_ms=POLL_INTERVAL_MS, max_records=limit))
            if records:
                render = self.render
                data = b"".join([render(r) for r in records])
                try:
                    # In a thread, so the loop goes on heartbeating while a slow reader holds stdout.
                    await asyncio.to_thread(_write, data)
                except OSError:
                    # Not printed (the reader went away): a commit on the way out must not skip them.
                    for r in reversed(records):
                        c.seek((r.topic, r.partition), r.offset)
                    raise
                self.printed += len(records)
                if args.count is not None and self.printed >= args.count:
                    return

    async def finish(self) -> int:
        """Commit (group, auto commit on) and close; 1 if the final commit failed."""
        c, status = self.consumer, 0
        if c is None:
            return 0
        try:
            if self.group and c.config.enable_auto_commit and c.assignment():
                try:
                    await c.commit(timeout=self.args.timeout)
                except Exception as exc:
                    status = fail(f"could not commit the offsets of group {self.group!r}: {exc}", 1)
        finally:
            try:
                await asyncio.wait_for(c.close(), self.args.timeout)
            except asyncio.TimeoutError:
                pass  # the process is about to exit; the group's session timeout removes the member
        return status


def _settings(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    parser: argparse.ArgumentParser = args.consume_parser
    settings = client_settings(args)
    if args.share_group:
        # The share group decides what each member gets: no positions, partitions or end.
        for given, what in ((args.group, "--group"), (args.offset or args.from_beginning, "--offset/--from-beginning"),
                            (args.partitions, "--partition"), (args.exit_at_end, "--exit-at-end")):
            if given:
                parser.error(f"{what} cannot be used with --share-group: the share group hands out the records")
        settings["group.id"] = args.share_group
        args.start, args.stop_ms = None, None
        return settings, args.share_group
    if args.group:
        settings["group.id"] = args.group
    group = settings.get("group.id") or None
    positions = args.offset or []
    starts = [p for p in positions if p.kind != "stop_time"]
    stops = [p for p in positions if p.kind == "stop_time"]
    if len(starts) > 1 or len(stops) > 1:
        parser.error("-o takes one start position and one e@ stop at most")
    if args.from_beginning:
        starts = [Position("beginning")]
    args.start = starts[0] if starts else None
    args.stop_ms = stops[0].value if stops else None
    if group:
        if args.start is not None and args.start.kind not in ("beginning", "end", "stored"):
            parser.error("--offset cannot be used with a group: a member starts where the group committed, "
                         "or per auto.offset.reset (-o beginning / --from-beginning: earliest, -o end: latest) "
                         "where it has not")
        if args.partitions:
            parser.error("--partition cannot be used with a group: the group assigns the partitions")
        settings.setdefault("enable.auto.commit", True)
        if args.start is not None and args.start.kind in ("beginning", "end"):
            settings["auto.offset.reset"] = "earliest" if args.start.kind == "beginning" else "latest"
    elif args.start is not None and args.start.kind == "stored":
        parser.error("-o stored starts at a group's committed offsets: give the group with --group")
    if args.key_delimiter is not None and (args.format is not None or args.json):
        parser.error("-K writes the key before each value in the default output: not with -f or --json")
    # A reader never creates the topic it reads (the topic is checked first anyway).
    settings.setdefault("allow.auto.create.topics", False)
    return settings, group


def run(args: argparse.Namespace) -> int:
    try:
        settings, group = _settings(args)
        # (imported here, as the rest of start-up, rather than on the loop in _main)
        if args.share_group:
            import kwire.client.share_consumer  # noqa: F401
        else:
            import kwire.client.consumer  # noqa: F401
    finally:
        start_up.over()  # the client's imports are done (a bad setting ends the command anyway)
    _show_client_warnings()
    session = _Session(args, settings, group)
    try:
        status = asyncio.run(_main(session))
    except BrokenPipeError:
        # The reader went away (``| head``): not an error.  The consumer was closed on the way
        # out; stdout now points at /dev/null so the interpreter's last flush has nowhere to fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    if status is None:  # a setup error, already reported
        return 1
    noun = "record" if session.printed == 1 else "records"
    print(f"{session.printed} {noun} read from {args.topic}", file=sys.stderr)
    return status


async def _share_main(session: _Session) -> int:
    """--share-group: print what the share group hands this member; each poll accepts (implicit
    acknowledgement) what the previous one printed, close accepts the last."""
    from kwire.client.share_consumer import AcknowledgeType, AsyncShareConsumer

    args = session.args
    session.install_signal_handlers()
    settings = {k: v for k, v in session.settings.items() if k != "allow.auto.create.topics"}
    if args.count is not None:
        settings["max.poll.records"] = min(args.count, 500)
    c = session.consumer = AsyncShareConsumer(settings)
    try:
        c.subscribe([args.topic])
        while not session.stop.is_set():
            records = await c.poll(POLL_INTERVAL_MS / 1000)
            if args.count is not None:
                keep = args.count - session.printed
                for r in records[keep:]:  # past the count: back to the group, for other members
                    c.acknowledge(r, AcknowledgeType.RELEASE)
                records = records[:keep]
            if records:
                await asyncio.to_thread(_write, b"".join([session.render(r) for r in records]))
                session.printed += len(records)
                if args.count is not None and session.printed >= args.count:
                    break
    finally:
        await asyncio.shield(c.close())
    return 0


async def _main(session: _Session) -> int | None:
    from kwire.client.consumer import AsyncConsumer

    args = session.args
    if args.share_group:
        return await _share_main(session)
    session.install_signal_handlers()
    listener = session.listener() if session.group and (args.exit_at_end or args.stop_ms is not None) else None
    session.consumer = AsyncConsumer(session.settings, listener=listener)
    try:
        try:
            partitions = await session.until_stopped(session.topic_partitions())
        except LookupError as exc:
            await session.consumer.close()
            fail(str(exc), 1)
            return None
        chosen = sorted({p for given in args.partitions or () for p in given})
        if chosen:
            missing = sorted(set(chosen) - set(partitions))
            if missing:
                fail(f"topic {args.topic!r} has no partition {', '.join(map(str, missing))} "
                     f"(its partitions are 0-{max(partitions)})", 1)
                return None
        if session.group:
            session.consumer.subscribe([args.topic])  # with -e the listener notes the assignment
        else:
            await session.until_stopped(session.start_assigned(chosen or partitions))
        await session.consume()
    except _Stopped:
        pass
    except BrokenPipeError:
        await session.finish()
        raise
    except BaseException:
        if session.consumer is not None:
            await asyncio.shield(session.consumer.close())
        raise
    return await session.finish()


class _LowerLevelFormatter(logging.Formatter):
    """``kwire: warning: ...``, as the command's own messages are written."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace(f": {record.levelname}: ", f": {record.levelname.lower()}: ", 1)


def _show_client_warnings() -> None:
    """The client's warnings (a lost partition, a failed auto commit) as ``kwire: warning:`` lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LowerLevelFormatter("kwire: %(levelname)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    client_logger = logging.getLogger("kwire.client")
    client_logger.addHandler(handler)
    client_logger.propagate = False
