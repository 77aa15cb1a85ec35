"""``kwire consume``: print a topic's records, one line each, as text, a format of yours, or JSON.

    kwire consume orders                          records written from now on, until Ctrl-C
    kwire consume orders --from-beginning -e      everything there is, then exit
    kwire consume orders -p 0 2 --offset -10      the last 10 records of partitions 0 and 2
    kwire consume orders --group billing          as a member of group billing (commits offsets)
    kwire consume orders -f '%p:%o %k=%s\\n'       partition, offset, key and value
    kwire consume orders --json --count 100       JSON lines

Without ``--group`` the command reads the topic's partitions directly (all of them, or those of
``--partition``), starting at the end as kafka-console-consumer does, at the earliest offset
with ``--from-beginning``, or at ``--offset N`` (negative: N records before the end, as kcat's
``-o -N``, never before the start of the log).  Nothing is committed.

With ``--group G`` (or a ``group.id`` in ``-X``/``--config``) it subscribes as a member of the
group: the group decides which partitions it reads and where each starts (the committed offset;
``--from-beginning`` sets ``auto.offset.reset=earliest`` for partitions without one).  Offsets
are committed automatically, and once more on exit, however it exits (``--count``, ``-e``,
Ctrl-C or SIGTERM); closing leaves the group so the others take over at once.

``--exit-at-end`` (``-e``) stops once every assigned partition has reached the end offset it had
when it was assigned (records written after that are not printed).  With a group whose
assignment is empty (more members than partitions) that is at once.

Output is flushed after every batch of records and a record's line is always written whole.
The default line is the value, decoded as UTF-8 (bytes that are not become U+FFFD), or ``null``
for a null value.  ``--format`` takes kcat's directives: ``%t`` topic, ``%p`` partition,
``%o`` offset, ``%k`` key, ``%s`` value, ``%T`` timestamp (ms), ``%h`` headers
(``k=v,k=v``), ``%K``/``%S`` key/value length in bytes (-1 for null), ``%%``; escapes ``\\n``
``\\t`` ``\\r`` ``\\\\``.  A null key, value or header value prints as ``null``.

``--json`` writes one JSON object per line: topic, partition, offset, timestamp, timestamp_type
("CreateTime" or "LogAppendTime"), key, value, headers (a list of [key, value]).  A key or value
that is not valid UTF-8 is written as ``key_base64``/``value_base64`` (standard base64) in place
of ``key``/``value``; a header value that is not, as ``{"base64": "..."}``.

On exit the number of records printed goes to stderr.  An unknown topic is an error once it has
not appeared within ``--timeout``.
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
from typing import Any, TypeVar

from .arg_types import positive_int
from .client_options import add_client_options, client_command, client_settings
from .output import fail

__all__ = ["compile_format", "json_line", "register", "run"]

T = TypeVar("T")

POLL_INTERVAL_MS = 500  # how long one poll waits for records: bounds how late a Ctrl-C is noticed
DEFAULT_FORMAT = "%s\\n"
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


# -- output ---------------------------------------------------------------------------------------
def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "replace")


def _length(data: bytes | None) -> str:
    return "-1" if data is None else str(len(data))


def _headers_text(headers) -> str:
    return ",".join(f"{k}={_text(v)}" for k, v in headers)


_DIRECTIVES: dict[str, Callable[[Any], str]] = {
    "t": lambda r: r.topic,
    "p": lambda r: str(r.partition),
    "o": lambda r: str(r.offset),
    "k": lambda r: _text(r.key),
    "s": lambda r: _text(r.value),
    "T": lambda r: str(r.timestamp),
    "h": lambda r: _headers_text(r.headers),
    "K": lambda r: _length(r.key),
    "S": lambda r: _length(r.value),
}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def compile_format(fmt: str) -> Callable[[Any], str]:
    """A kcat-like format string -> a function from a ConsumerRecord to its text.

    ValueError names the first directive or escape it does not know.
    """
    parts: list[Callable[[Any], str]] = []
    literal: list[str] = []

    def flush_literal() -> None:
        if literal:
            text = "".join(literal)
            parts.append(lambda _r, text=text: text)
            literal.clear()

    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c in "%\\":
            if i + 1 == len(fmt):
                raise ValueError(f"the format ends with a lone {c!r}")
            nxt = fmt[i + 1]
            if c == "\\":
                if nxt not in _ESCAPES:
                    raise ValueError(f"unknown escape \\{nxt} in the format (known: \\n \\t \\r \\\\)")
                literal.append(_ESCAPES[nxt])
            elif nxt == "%":
                literal.append("%")
            elif nxt in _DIRECTIVES:
                flush_literal()
                parts.append(_DIRECTIVES[nxt])
            else:
                raise ValueError(f"unknown directive %{nxt} in the format "
                                 f"(known: {' '.join('%' + d for d in _DIRECTIVES)} %%)")
            i += 2
        else:
            literal.append(c)
            i += 1
    flush_literal()
    if len(parts) == 1:
        return parts[0]
    return lambda r: "".join([part(r) for part in parts])


def _format_arg(text: str) -> Callable[[Any], str]:
    try:
        return compile_format(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def json_line(record) -> str:
    """One record as a JSON object on one line (with its newline)."""
    doc: dict[str, Any] = {"topic": record.topic, "partition": record.partition, "offset": record.offset,
                           "timestamp": record.timestamp,
                           "timestamp_type": TIMESTAMP_TYPES.get(record.timestamp_type)}
    _json_bytes(doc, "key", record.key)
    _json_bytes(doc, "value", record.value)
    doc["headers"] = [[k, _json_header_value(v)] for k, v in record.headers]
    return json.dumps(doc, ensure_ascii=False) + "\n"


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


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print a topic's records",
                       description="Print the records of a topic, one line each: read its partitions directly "
                                   "(starting at the end unless told otherwise), or as a member of a consumer group.",
                       epilog="Format directives: %t topic, %p partition, %o offset, %k key, %s value, "
                              "%T timestamp (ms), %h headers (k=v,...), %K/%S key/value length, %%; "
                              "escapes \\n \\t \\r \\\\. Null keys and values print as null. --json: keys and "
                              "values that are not UTF-8 come as key_base64/value_base64.")
    p.add_argument("topic", help="the topic to read")
    p.add_argument("-g", "--group", metavar="GROUP",
                   help="read as a member of this consumer group (committing offsets)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (with --group: where the group has no committed offset)")
    start.add_argument("-o", "--offset", type=int, metavar="N",
                       help="start at offset N; negative: N records before the end (not with --group)")
    p.add_argument("-p", "--partition", dest="partitions", type=_partitions, nargs="+", action="extend",
                   metavar="P", help="read only these partitions (default: all; not with --group)")
    p.add_argument("-c", "--count", type=positive_int, metavar="N", help="stop after N records")
    p.add_argument("-e", "--exit-at-end", action="store_true",
                   help="stop when every assigned partition reaches the end offset it had when assigned")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("-f", "--format", type=_format_arg, metavar="FMT",
                       help="a kcat-like format for each record (default '%%s\\n'; see below)")
    shape.add_argument("--json", action="store_true", help="one JSON object per record per line")
    add_client_options(p, json_output=False)
    p.set_defaults(func=client_command(run), consume_parser=p)


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
        self.render = (json_line if args.json
                       else args.format if args.format is not None else compile_format(DEFAULT_FORMAT))
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
        """The topic's partitions, waiting up to --timeout for the topic to exist."""
        from kwire.client.retry import Backoff
        from kwire.protocol.errors import KafkaError

        topic, timeout = self.args.topic, self.args.timeout
        backoff = Backoff(100, 1000)
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            why = ""
            try:
                found = await self.consumer.partitions_for(topic)
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
        if args.offset is not None:
            begins = await c.beginning_offsets(tps)
            ends = await c.end_offsets(tps)
            for tp in tps:
                begin, end = begins.get(tp, 0), ends.get(tp, 0)
                wanted = end + args.offset if args.offset < 0 else args.offset
                c.seek(tp, max(wanted, begin))  # past the end: auto.offset.reset (latest) takes over
        elif args.from_beginning:
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
        """With --exit-at-end in a group: note each assigned partition's end offset."""
        from kwire.client.consumer import RebalanceListener

        session = self

        class EndOffsets(RebalanceListener):
            async def on_partitions_assigned(self, assigned) -> None:
                if assigned:
                    await session.track_ends(assigned)
                session.assigned = True

            def on_partitions_revoked(self, revoked) -> None:
                session.forget(revoked)

        return EndOffsets()

    # -- the loop --
    def keep(self, records: list) -> list:
        """With --exit-at-end: drop records at or past their partition's end, and move the
        partition back to its end so a commit does not skip the dropped records."""
        if not self.ends:
            return records
        kept, dropped = [], {}
        for r in records:
            end = self.ends.get((r.topic, r.partition))
            if end is not None and r.offset >= end:
                dropped.setdefault((r.topic, r.partition), r.offset)
            else:
                kept.append(r)
        for tp, offset in dropped.items():
            self.consumer.seek(tp, offset)
        return kept

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
            limit = None if args.count is None else args.count - self.printed
            records = self.keep(await c.getmany(timeout_ms=POLL_INTERVAL_MS, max_records=limit))
            if records:
                render = self.render
                data = "".join([render(r) for r in records]).encode("utf-8")
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
    if args.group:
        settings["group.id"] = args.group
    group = settings.get("group.id") or None
    if group:
        if args.offset is not None:
            parser.error("--offset cannot be used with a group: a member starts where the group committed, "
                         "or per auto.offset.reset (--from-beginning: earliest) where it has not")
        if args.partitions:
            parser.error("--partition cannot be used with a group: the group assigns the partitions")
        settings.setdefault("enable.auto.commit", True)
        if args.from_beginning:
            settings["auto.offset.reset"] = "earliest"
    # A reader never creates the topic it reads (the topic is checked first anyway).
    settings.setdefault("allow.auto.create.topics", False)
    return settings, group


def run(args: argparse.Namespace) -> int:
    settings, group = _settings(args)
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


async def _main(session: _Session) -> int | None:
    from kwire.client.consumer import AsyncConsumer

    args = session.args
    session.install_signal_handlers()
    listener = session.listener() if session.group and args.exit_at_end else None
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
