"""``kwire produce``: write records to a topic from arguments, a file or standard input.

    kwire produce orders '{"id": 1}' '{"id": 2}'          two records, keyless (sticky partitioner)
    kwire produce orders --key user-7 'hello'              keyed: murmur2, as a Java producer picks
    seq 1000 | kwire produce numbers                        one record per line of stdin
    kwire produce orders --file events.txt -K :            "key:value" lines
    kwire produce blobs -f dump.bin -D '\\0' -K '\\t'        NUL-separated binary records, key TAB value
    kwire produce orders -p 2 --header source=cli --compression zstd --acks all 'x'

Input is read as bytes (kcat's way): records are split at ``-D`` (default a newline), keys at the
first ``-K``, and nothing is decoded, so any binary data goes through as it is.  ``-Z`` sends an
empty key or value as null (a tombstone, for a compacted topic).

Records are batched as kcat batches them (librdkafka's ``batch.size`` of 1,000,000 bytes and
``batch.num.messages`` of 10,000) unless ``-X`` sets either, and each read of the input (a
megabyte) goes to the producer in one ``produce_many`` call, its records left where they were
read (no object per record) unless ``-K`` or ``-Z`` has to look at each.

It prints where the records went: for each partition the count and the first and last offsets
(``--verbose``: every record's partition and offset), or the same as JSON with ``--json``.
Records that could not be delivered are counted, the first error is shown, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

from . import start_up
from .arg_types import delimiter
from .client_options import add_client_options, client_command, client_settings
from .output import print_json, print_table

ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}
# librdkafka's batch.size and batch.num.messages defaults, which kcat produces with.
RDKAFKA_BATCHING = {"batch.size": 1_000_000, "batch.num.messages": 10_000}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="write records to a topic",
                       description="Write records to a topic: the VALUEs given, else one record per line "
                                   "of --file or standard input.",
                       epilog="Without --partition or --key, keyless records go to one partition per batch "
                              "(sticky); keyed records go where a Java producer would put them (murmur2).")
    p.add_argument("topic", help="the topic to write to")
    p.add_argument("values", nargs="*", metavar="VALUE", help="record values (default: lines of --file or stdin)")
    p.add_argument("-f", "--file", metavar="PATH", help="read the records from this file (as bytes)")
    p.add_argument("-D", "--delimiter", type=delimiter, default=b"\n", metavar="DELIM",
                   help="the end of each record in the input (default a newline; escapes \\n \\t \\0 \\xHH ...)")
    p.add_argument("-p", "--partition", type=int, metavar="N", help="write every record to partition N")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("-k", "--key", metavar="KEY", help="the key of every record")
    keys.add_argument("-K", "--key-separator", "--key-delimiter", type=delimiter, metavar="SEP",
                      help="split each record at the first SEP into key and value (escapes as -D)")
    p.add_argument("-Z", "--null", action="store_true",
                   help="send an empty key or value as null (a tombstone), as kcat's -Z")
    p.add_argument("-H", "--header", dest="headers", action="append", default=[], metavar="KEY=VALUE",
                   help="a header on every record (repeatable)")
    p.add_argument("-z", "--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"),
                   help="compression codec (default: none)")
    p.add_argument("--acks", choices=tuple(ACKS), help="acknowledgements to wait for (default: all)")
    p.add_argument("-v", "--verbose", action="store_true", help="print each record's partition and offset")
    add_client_options(p)
    # The producer's imports are start-up too (kwire.cli.start_up): run() says when they are done.
    p.set_defaults(func=client_command(run), trailing_positionals="values", start_up_in_handler=True)


def _header(text: str) -> tuple[str, bytes]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--header {text!r} is not key=value")
    return key, value.encode()


# Input is read this much at a time, and each read's records go to the producer in one
# produce_many call: a megabyte keeps the calls few without holding a big input in memory.
_READ_SIZE = 1 << 20


def _split(stream: BinaryIO, delim: bytes, before_read: Callable[[], None] | None = None,
           in_place: bool = False) -> Iterator[Sequence[bytes]]:
    """The records of a byte stream ending each at ``delim`` (the last may lack it), a column per
    read, so that input of any size streams through.  ``before_read()`` runs before each read
    (the blocking producer sends meanwhile).  ``in_place``: each read's records as
    ``delimited_values`` (the values left in the read's buffer: no object per record, which
    cost more than encoding the record); else a list of ``bytes``."""
    readinto = getattr(stream, "readinto1", None)  # readinto1: what is there now, so a pipe streams
    if in_place and readinto is not None:
        yield from _split_in_place(readinto, delim, before_read)
        return
    read = getattr(stream, "read1", stream.read)
    pending = b""
    # A one-byte delimiter cannot straddle two reads, so the record cut by the end of a read is
    # joined to the next read's first part alone: pending + chunk copied every megabyte of input
    # once more (~40 ms of CPU for 100 MB).  A longer one may, and is looked for across them.
    single = len(delim) == 1
    while True:
        if before_read is not None:
            before_read()
        chunk = read(_READ_SIZE)
        if not chunk:
            break
        if single:
            parts = chunk.split(delim)
            if pending:
                parts[0] = pending + parts[0]
        else:
            parts = (pending + chunk).split(delim) if pending else chunk.split(delim)
        pending = parts.pop()
        if parts:
            yield parts
    if pending:
        yield [pending]


def _split_in_place(readinto: Callable[[memoryview], int | None], delim: bytes,
                    before_read: Callable[[], None] | None) -> Iterator[Sequence[bytes]]:
    """``_split``'s reads into a buffer of their own each (the record the last read cut short
    first), and the records of each as ``delimited_values``."""
    from kwire.protocol.records.bulk import delimited_values  # (loaded with the producer already)

    pending = b""
    while True:
        if before_read is not None:
            before_read()
        carried = len(pending)
        buf = bytearray(carried + _READ_SIZE)
        buf[:carried] = pending
        with memoryview(buf) as view:
            got = readinto(view[carried:])
        if not got:
            break
        size = carried + got
        # The delimiters are looked for from the record carried over: one that straddles two
        # reads is found.
        values, stop = delimited_values(buf, size, delim)
        pending = bytes(buf[stop:size])
        if values:
            yield values
    if pending:
        yield [pending]


class _BadLine(ValueError):
    """An input record the flags cannot make a record of; the records before it are sent."""


class _BadInput(_BadLine):
    """The input cannot be read at all."""


def _shown(data: bytes) -> str:
    """Input bytes in a message: as text where they are UTF-8, escaped where not."""
    return repr(data.decode("utf-8", "backslashreplace"))


def _file_records(path: str, delim: bytes, in_place: bool) -> Iterator[Sequence[bytes]]:
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise _BadInput(f"cannot read --file {path}: {exc.strerror or exc}") from None
    with stream:
        yield from _split(stream, delim, in_place=in_place)


def _batches(args: argparse.Namespace, producer: Any = None
             ) -> Iterator[tuple[Sequence[bytes | None], list[bytes | None] | None]]:
    """The input as runs of records: (values, keys), keys None unless -K splits them.  A record
    -K cannot split ends the input with _BadLine, after the run of the records before it.
    Standard input waits for its next read in ``producer.wait_readable`` when the producer has
    one (the blocking producer: records already read keep going out meanwhile)."""
    unit = "line" if args.delimiter == b"\n" else "record"  # how an error names the bad input
    null = args.null
    # Records that go as they are read (no -K to split, no -Z to look at) stay in the read's buffer.
    in_place = not args.key_separator and not null
    if args.values:
        # Arguments as the shell passed them: os.fsencode gives back undecodable bytes too.
        source: Iterator[Sequence[bytes]] = iter([[os.fsencode(v) for v in args.values]])
        what = "value"
    elif args.file:
        source, what = _file_records(args.file, args.delimiter, in_place), f"{args.file}: {unit}"
    else:
        stdin = sys.stdin.buffer
        wait = getattr(producer, "wait_readable", None)
        before_read = None if wait is None else functools.partial(wait, stdin.fileno())
        source, what = _split(stdin, args.delimiter, before_read, in_place), unit
    seen = 0
    for parts in source:
        if args.key_separator:
            keys: list[bytes | None] = []
            values: list[bytes | None] = []
            separator = args.key_separator
            for data in parts:
                k, sep, v = data.partition(separator)
                if not sep:
                    if values:
                        yield values, keys
                    raise _BadLine(f"{what} {seen + len(values) + 1} has no key separator {_shown(separator)}: "
                                   f"{_shown(data[:60])}")
                keys.append(k or None if null else k)
                values.append(v or None if null else v)
            yield values, keys
        else:
            yield ([v or None for v in parts] if null else parts), None
        seen += len(parts)


class _Progress:
    """A status line on stderr every half second while records flow, when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.next = time.monotonic() + 0.5
        self.start = time.monotonic()

    def tick(self, sent: int, delivered: Callable[[], int]) -> None:
        if self.enabled and time.monotonic() >= self.next:
            self.next += 0.5
            count = delivered()  # counted only when shown: a long input makes many calls
            rate = count / max(time.monotonic() - self.start, 1e-9)
            print(f"\r{sent:,} sent, {count:,} delivered ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.enabled and time.monotonic() - self.start >= 0.5:
            print(file=sys.stderr)


def _producer(settings: dict[str, Any]) -> Any:
    """The producer for these settings: the blocking one (no asyncio to import; the same config,
    partitioner, batches and sender decisions) where it does what the asyncio ``Producer`` does,
    that one otherwise (transactions, TLS or SASL, a broker that only takes message sets)."""
    from kwire.client.config import ProducerConfig
    from kwire.client.producer_blocking import BlockingProducer, NotBlockingCapable, blocking_capable

    config = ProducerConfig.from_settings(settings)
    if blocking_capable(config) is None:
        try:
            return BlockingProducer(config)
        except NotBlockingCapable:
            pass  # found out on connecting, before anything was sent
    from kwire.client.producer import Producer

    return Producer(config)


def run(args: argparse.Namespace) -> int:
    settings: dict[str, Any] = client_settings(args)
    # Connecting and a topic's first metadata wait max.block.ms (60 s by default): --timeout bounds them.
    settings.setdefault("max.block.ms", int(args.timeout * 1000))
    if args.compression:
        settings["compression.type"] = args.compression
    if args.acks:
        settings["acks"] = ACKS[args.acks]
    if "batch.size" not in settings and "batch.num.messages" not in settings:
        # kcat's batching (librdkafka's defaults) rather than the Java client's 16 KiB: a file
        # goes out in few large requests, each of which costs the same whatever its size.
        settings.update(RDKAFKA_BATCHING)
    headers = [_header(h) for h in args.headers] or None

    key = os.fsencode(args.key) if args.key is not None else None
    if args.null and key == b"":
        key = None
    progress = _Progress()
    sent = 0
    left = 0
    deliveries: list = []
    bad_line: _BadLine | None = None
    try:
        producer = _producer(settings)
    finally:
        start_up.over()  # its imports are done (and a failure to connect ends the command anyway)
    try:
        try:
            for values, keys in _batches(args, producer):
                deliveries.append(producer.produce_many(args.topic, values, keys, key=key, partition=args.partition,
                                                        headers=headers))
                sent += len(values)
                progress.tick(sent, lambda: sum(d.delivered for d in deliveries))
        except _BadLine as exc:
            bad_line = exc
        left = producer.flush(args.timeout)
    finally:
        # Not close() with no timeout: it would wait for delivery (up to delivery.timeout.ms)
        # again.  What flush left undelivered fails now.
        producer.close(0 if left else args.timeout)
    progress.done()
    delivered_count = sum(d.delivered for d in deliveries)
    errors = [d.error for d in deliveries if d.error is not None]
    if bad_line is not None:
        failed = f" ({sent - delivered_count} of them failed)" if delivered_count < sent else ""
        print(f"kwire: error: {bad_line}; the {sent} records before it were sent{failed}", file=sys.stderr)
        return 1
    summary = _summarise(deliveries)
    offsets = [o for d in deliveries for o in d.offsets() if o is not None] if args.verbose else []
    if args.json:
        doc: dict[str, Any] = {"topic": args.topic, "records": sent, "delivered": delivered_count,
                               "failed": sent - delivered_count, "partitions": summary}
        if args.verbose:
            doc["offsets"] = [{"partition": p, "offset": o} for p, o in offsets]
        if errors:
            doc["error"] = str(errors[0])
        print_json(doc)
    else:
        if args.verbose:
            for p, o in offsets:
                print(f"{args.topic} partition {p} offset {o}")
        print_table(["partition", "records", "first offset", "last offset"],
                    [(s["partition"], s["records"], s["first_offset"], s["last_offset"]) for s in summary],
                    align_right=(0, 1, 2, 3))
        print(f"{delivered_count} of {sent} records written to {args.topic}")
    if delivered_count < sent:
        first = f"{left} records not delivered within {args.timeout:g} s" if left else str(errors[0])
        print(f"kwire: error: {sent - delivered_count} records failed: {first}", file=sys.stderr)
        return 1
    return 0


def _summarise(deliveries: list) -> list[dict[str, int]]:
    """Per partition: how many records, the first and the last offset (-1 with acks=0)."""
    parts: dict[int, dict[str, int]] = {}
    for delivery in deliveries:
        for p in delivery.partitions():
            s = parts.get(p.partition)
            if s is None:
                parts[p.partition] = {"partition": p.partition, "records": p.records,
                                      "first_offset": p.first_offset, "last_offset": p.last_offset}
            else:
                s["records"] += p.records
                s["first_offset"] = min(s["first_offset"], p.first_offset)
                s["last_offset"] = max(s["last_offset"], p.last_offset)
    return [parts[p] for p in sorted(parts)]
