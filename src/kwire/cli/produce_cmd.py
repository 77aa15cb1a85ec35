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

It prints where the records went: for each partition the count and the first and last offsets
(``--verbose``: every record's partition and offset), or the same as JSON with ``--json``.
Records that could not be delivered are counted, the first error is shown, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

from .arg_types import delimiter
from .client_options import add_client_options, client_command, client_settings
from .output import print_json, print_table

ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


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
    p.set_defaults(func=client_command(run), trailing_positionals="values")


def _header(text: str) -> tuple[str, bytes]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--header {text!r} is not key=value")
    return key, value.encode()


_READ_SIZE = 1 << 16


def _split(stream: BinaryIO, delim: bytes) -> Iterator[bytes]:
    """The records of a byte stream ending each at ``delim`` (the last may lack it), read in
    chunks so that input of any size streams through."""
    read = getattr(stream, "read1", stream.read)  # read1: what is there now, so a pipe streams
    pending = b""
    while True:
        chunk = read(_READ_SIZE)
        if not chunk:
            break
        pending += chunk
        parts = pending.split(delim)
        pending = parts.pop()
        yield from parts
    if pending:
        yield pending


class _BadLine(ValueError):
    """An input record the flags cannot make a record of; the records before it are sent."""


class _BadInput(_BadLine):
    """The input cannot be read at all."""


def _shown(data: bytes) -> str:
    """Input bytes in a message: as text where they are UTF-8, escaped where not."""
    return repr(data.decode("utf-8", "backslashreplace"))


def _file_records(path: str, delim: bytes) -> Iterator[bytes]:
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise _BadInput(f"cannot read --file {path}: {exc.strerror or exc}") from None
    with stream:
        yield from _split(stream, delim)


def _records(args: argparse.Namespace) -> Iterator[tuple[bytes | None, bytes | None]]:
    unit = "line" if args.delimiter == b"\n" else "record"  # how an error names the bad input
    if args.values:
        # Arguments as the shell passed them: os.fsencode gives back undecodable bytes too.
        source: Iterator[bytes] = (os.fsencode(v) for v in args.values)
        what = "value"
    elif args.file:
        source, what = _file_records(args.file, args.delimiter), f"{args.file}: {unit}"
    else:
        source, what = _split(sys.stdin.buffer, args.delimiter), unit
    key = os.fsencode(args.key) if args.key is not None else None

    def nullable(data: bytes | None) -> bytes | None:
        return None if args.null and data == b"" else data

    for number, data in enumerate(source, 1):
        if args.key_separator:
            k, sep, v = data.partition(args.key_separator)
            if not sep:
                raise _BadLine(f"{what} {number} has no key separator {_shown(args.key_separator)}: "
                               f"{_shown(data[:60])}")
            yield nullable(k), nullable(v)
        else:
            yield nullable(key), nullable(data)


class _Progress:
    """A status line on stderr every half second while records flow, when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.next = time.monotonic() + 0.5
        self.start = time.monotonic()

    def tick(self, sent: int, delivered: int) -> None:
        if self.enabled and time.monotonic() >= self.next:
            self.next += 0.5
            rate = delivered / max(time.monotonic() - self.start, 1e-9)
            print(f"\r{sent:,} sent, {delivered:,} delivered ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.enabled and time.monotonic() - self.start >= 0.5:
            print(file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from kwire.client.producer import Producer

    settings: dict[str, Any] = client_settings(args)
    # Connecting and a topic's first metadata wait max.block.ms (60 s by default): --timeout bounds them.
    settings.setdefault("max.block.ms", int(args.timeout * 1000))
    if args.compression:
        settings["compression.type"] = args.compression
    if args.acks:
        settings["acks"] = ACKS[args.acks]
    headers = [_header(h) for h in args.headers] or None

    results: dict[int, tuple[int, int]] = {}
    errors: list[BaseException] = []

    def report(index: int):
        def on_delivery(error, metadata) -> None:
            if error is not None:
                errors.append(error)
            else:
                results[index] = (metadata.partition, metadata.offset)
        return on_delivery

    progress = _Progress()
    sent = left = 0
    bad_line: _BadLine | None = None
    producer = Producer(settings)
    try:
        try:
            for key, value in _records(args):
                producer.produce(args.topic, value, key=key, partition=args.partition, headers=headers,
                                 on_delivery=report(sent))
                sent += 1
                if sent % 1000 == 0:
                    producer.poll(0)
                    progress.tick(sent, len(results))
        except _BadLine as exc:
            bad_line = exc
        left = producer.flush(args.timeout)
    finally:
        # Not close() with no timeout: it would wait for delivery (up to delivery.timeout.ms)
        # again.  What flush left undelivered fails now; its callbacks run here.
        producer.close(0 if left else args.timeout)
    progress.done()
    if bad_line is not None:
        failed = f" ({sent - len(results)} of them failed)" if len(results) < sent else ""
        print(f"kwire: error: {bad_line}; the {sent} records before it were sent{failed}", file=sys.stderr)
        return 1
    delivered = [results[i] for i in sorted(results)]
    summary = _summarise(delivered)
    if args.json:
        doc: dict[str, Any] = {"topic": args.topic, "records": sent, "delivered": len(delivered),
                               "failed": sent - len(delivered), "partitions": summary}
        if args.verbose:
            doc["offsets"] = [{"partition": p, "offset": o} for p, o in delivered]
        if errors:
            doc["error"] = str(errors[0])
        print_json(doc)
    else:
        if args.verbose:
            for p, o in delivered:
                print(f"{args.topic} partition {p} offset {o}")
        print_table(["partition", "records", "first offset", "last offset"],
                    [(s["partition"], s["records"], s["first_offset"], s["last_offset"]) for s in summary],
                    align_right=(0, 1, 2, 3))
        print(f"{len(delivered)} of {sent} records written to {args.topic}")
    if len(delivered) < sent:
        first = f"{left} records not delivered within {args.timeout:g} s" if left else str(errors[0])
        print(f"kwire: error: {sent - len(delivered)} records failed: {first}", file=sys.stderr)
        return 1
    return 0


def _summarise(delivered: list[tuple[int, int]]) -> list[dict[str, int]]:
    """Per partition: how many records, the first and the last offset (-1 with acks=0)."""
    parts: dict[int, dict[str, int]] = {}
    for partition, offset in delivered:
        s = parts.setdefault(partition, {"partition": partition, "records": 0, "first_offset": offset,
                                         "last_offset": offset})
        s["records"] += 1
        s["first_offset"] = min(s["first_offset"], offset)
        s["last_offset"] = max(s["last_offset"], offset)
    return [parts[p] for p in sorted(parts)]
