"""The ``kwire`` command: one argparse tree, one module per command group."""

from __future__ import annotations

import os
import sys

# Only when this process is the kwire command (``python -m kwire.cli.main``, or the ``kwire``
# script importing this module to call main): a program importing it keeps its own garbage
# collector (kwire.cli.start_up: the command's imports run without it, from here; signal's
# enums are the first thing it would collect after) and its own SIGINT handler.
_THE_COMMAND = __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "kwire"

from kwire.cli import start_up  # noqa: E402 - (imports only gc)

if _THE_COMMAND:
    start_up.pause()

import signal  # noqa: E402


def _interrupted_while_starting(_signum: int, _frame: object) -> None:
    # Ctrl-C before main() runs (the imports of a command can take a noticeable part of a
    # second): the same one line and 130 as later, not a traceback from inside an import.
    os.write(2, b"kwire: interrupted\n")
    os._exit(130)


if _THE_COMMAND:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import argparse  # noqa: E402 - after the handler, which should cover every import
import importlib  # noqa: E402
from collections.abc import Iterable  # noqa: E402
from typing import Any  # noqa: E402

from kwire import __version__  # noqa: E402

# command -> the module that registers it: register(subparsers) adds that one command, whose
# parser sets ``func`` to a handler taking the parsed arguments and returning an exit code.
# A command line imports only its own command's module (the others cost up to half a second
# of imports between them: the broker's storage, the analyzer, the ACL files).
COMMANDS: dict[str, str] = {
    "protocol": "protocol_cmd", "broker": "broker_cmd", "produce": "produce_cmd", "consume": "consume_cmd",
    "metadata": "metadata_cmd", "topics": "topics_cmd", "configs": "configs_cmd", "groups": "groups_cmd",
    "lag": "lag_cmd", "analyze": "analyze_cmd", "sink": "sink_cmd", "users": "users_cmd", "acls": "acls_cmd",
}


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help formatter, measuring the terminal only when it writes text (help, usage,
    an error).  argparse makes a formatter for every add_argument (to check the metavar), and
    the stock one measures the terminal through shutil at once: shutil (with bz2 and lzma) was a
    few ms of every command line's start-up, which only --help and errors need (issue 24)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        self._measure = width is None
        self._asked_help_position = max_help_position
        super().__init__(prog, indent_increment, max_help_position, 80 if width is None else width)

    def format_help(self) -> str:
        if self._measure:  # what HelpFormatter.__init__ does with width=None
            import shutil

            self._measure = False
            self._width = shutil.get_terminal_size().columns - 2
            self._max_help_position = min(self._asked_help_position,
                                          max(self._width - 20, self._indent_increment * 2))
        return super().format_help()


class KwireArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose help formatter measures the terminal only when it writes (see
    _HelpFormatter); the subcommands' parsers are of this class too (argparse makes them of
    their parent's class)."""

    def __init__(self, *args: Any, formatter_class: type[argparse.HelpFormatter] = _HelpFormatter,
                 **kwargs: Any) -> None:
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def build_parser(only: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The ``kwire`` parser with every command, or with just the commands in ``only``."""
    parser = KwireArgumentParser(
        prog="kwire",
        description="Kafka's wire protocol in Python: codec, client, broker, analyzer.",
    )
    parser.add_argument("--version", action=_VersionAction)
    # prog given: argparse would format the usage to find it (measuring the terminal).
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog=parser.prog)
    sub.required = True
    wanted = COMMANDS if only is None else [name for name in COMMANDS if name in set(only)]
    for name in wanted:
        importlib.import_module(f"{__package__}.{COMMANDS[name]}").register(sub)
    return parser


def version_text() -> str:
    """What ``kwire --version`` prints: the version, and a line when the compiled record walk
    (kwire.protocol.records._layout) is not built, a slowdown otherwise silent."""
    walk = sys.modules.get("kwire.protocol.records.walk")
    if walk is None and _accelerator_file_exists():
        # The usual case, answered without importing the codec (it takes longer than the rest of
        # --version): an extension file that is there but fails to load is left to the walk's own
        # warning when records are first read.
        return f"kwire {__version__}"
    from kwire.protocol.records import walk

    if walk.accelerated():
        return f"kwire {__version__}"
    return f"kwire {__version__}\n{walk.accelerator_status()}"


def _accelerator_file_exists() -> bool:
    """Whether the compiled record walk (kwire.protocol.records._layout) was built, by its file."""
    import importlib.machinery

    import kwire

    # os.path, not pathlib: pathlib (with urllib.parse and ipaddress) is not otherwise imported
    # by a client command line.
    records = os.path.join(os.path.dirname(kwire.__file__), "protocol", "records")
    return any(os.path.isfile(os.path.join(records, f"_layout{suffix}"))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


class _VersionAction(argparse.Action):
    """argparse's "version" action, with the text made only when asked for."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0,
                         help="show kwire's version (and whether its compiled record walk is built) and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(version_text())  # stdout, as argparse's own version action
        parser.exit()


def _commands_needed(argv: list[str]) -> list[str] | None:
    """Which commands' parsers this command line needs: its own command's, none for a bare
    ``--version``, and all (None) for ``--help`` or anything argparse must reject with the list."""
    for arg in argv:
        if arg == "--version":
            return []
        if not arg.startswith("-"):
            return [arg] if arg in COMMANDS else None
        if arg in ("-h", "--help"):
            return None
    return None


def main(argv: list[str] | None = None) -> int:
    """Run one ``kwire`` command line; its exit code (Ctrl-C: one line on stderr and 130)."""
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here: KeyboardInterrupt
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        # Wherever it came (importing a command, connecting, mid-output): one line, the shell's
        # code for SIGINT, and no traceback.  Commands that stop cleanly on Ctrl-C (consume,
        # broker) handle it themselves and report as usual.
        print("kwire: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into head(1) and closed early: not an error worth a traceback.
        sys.stderr.close()
        return 0


def _run(argv: list[str]) -> int:
    parser = build_parser(_commands_needed(argv))
    args, extra = parser.parse_known_args(argv)
    # argparse stops filling a trailing ``nargs="*"`` positional at the first option, so in
    # ``kwire produce t -p 2 a b`` the values a b come back unparsed; commands that name such a
    # positional in ``trailing_positionals`` get them.  Anything else left over is an error.
    trailing = getattr(args, "trailing_positionals", None)
    if extra and trailing and not any(e.startswith("-") and e != "-" for e in extra):
        getattr(args, trailing).extend(extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "start_up_in_handler", False):
        start_up.over()  # (a command whose handler imports its client says when itself)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
