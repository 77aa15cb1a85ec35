"""The ``kwire`` command: one argparse tree, one module per command group."""

from __future__ import annotations

import argparse
import sys

from kwire import __version__

from . import (
    acls_cmd,
    analyze_cmd,
    broker_cmd,
    configs_cmd,
    consume_cmd,
    groups_cmd,
    lag_cmd,
    metadata_cmd,
    produce_cmd,
    protocol_cmd,
    sink_cmd,
    topics_cmd,
    users_cmd,
)

# Each command module exposes register(subparsers); its parsers set ``func`` to a handler that
# takes the parsed arguments and returns an exit code.
COMMAND_MODULES = [protocol_cmd, broker_cmd, produce_cmd, consume_cmd, metadata_cmd, topics_cmd, configs_cmd, groups_cmd,
                   lag_cmd, analyze_cmd, sink_cmd, users_cmd, acls_cmd]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kwire",
        description="Kafka's wire protocol in Python: codec, client, broker, analyzer.",
    )
    parser.add_argument("--version", action="version", version=f"kwire {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse stops filling a trailing ``nargs="*"`` positional at the first option, so in
    # ``kwire produce t -p 2 a b`` the values a b come back unparsed; commands that name such a
    # positional in ``trailing_positionals`` get them.  Anything else left over is an error.
    trailing = getattr(args, "trailing_positionals", None)
    if extra and trailing and not any(e.startswith("-") and e != "-" for e in extra):
        getattr(args, trailing).extend(extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into head(1) and closed early: not an error worth a traceback.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
