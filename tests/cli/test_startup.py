"""What ``kwire`` imports before it runs a command: only that command's module, and never the
broker's server (its handlers, storage and coordinators), which only ``kwire broker`` needs once
it starts one."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, timeout=60, check=True)
    return set(out.stdout.split())


def test_the_command_line_does_not_import_the_broker_server_to_parse_arguments():
    loaded = _modules_after("from kwire.cli.main import build_parser\nbuild_parser()")
    assert "kwire.cli.broker_cmd" in loaded and "kwire.cli.acls_cmd" in loaded
    assert not {"kwire.broker.server", "kwire.broker.embedded", "kwire.broker.handlers"} & loaded


def test_the_broker_package_still_gives_its_names():
    loaded = _modules_after("from kwire.broker import Broker, BrokerConfig, ConfigError, EmbeddedBroker, load_config\n"
                            "assert Broker.__name__ == 'Broker' and EmbeddedBroker.__module__ == 'kwire.broker.embedded'")
    assert {"kwire.broker.server", "kwire.broker.embedded"} <= loaded


def _command_modules(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m.startswith("kwire.cli.") and m.endswith("_cmd")}


def test_a_command_line_imports_only_its_own_command():
    for argv, wanted in ((["produce", "t"], {"kwire.cli.produce_cmd"}),
                         (["consume", "t", "-o", "beginning"], {"kwire.cli.consume_cmd"}),
                         (["--version"], set())):
        loaded = _modules_after(f"from kwire.cli.main import _commands_needed, build_parser\n"
                                f"build_parser(_commands_needed({argv!r}))")
        assert _command_modules(loaded) == wanted, argv
        assert not {m for m in loaded if m.startswith(("kwire.broker", "kwire.analyze", "kwire.spark"))}, argv


def test_help_and_unknown_commands_still_see_every_command():
    from kwire.cli.main import COMMANDS, _commands_needed, build_parser

    assert _commands_needed(["--help"]) is None and _commands_needed(["nosuch"]) is None
    assert _commands_needed(["-h", "produce"]) is None
    help_text = build_parser(_commands_needed(["--help"])).format_help()
    assert all(name in help_text for name in COMMANDS)


def test_produce_imports_only_what_a_plain_produce_uses():
    # What `kwire produce` loads to write records to a PLAINTEXT cluster and print its table into
    # a pipe: not SCRAM's hashing, not the compression codecs, not json or difflib, which only -z,
    # SASL, --json or a mistyped setting need; and the record layer's encoding tables are made on
    # first use, not at import; the fail-fast probe of the bootstrap address resolves it without
    # the idna codec.  (shutil, with bz2 and lzma, comes with argparse's formatter.)
    loaded = _modules_after(
        "import io\n"
        "from kwire.cli.main import _commands_needed, build_parser\n"
        "build_parser(_commands_needed(['produce', 't']))\n"
        "import kwire.client.errors, kwire.client.producer, kwire.protocol.errors\n"
        "from kwire.client.config import ProducerConfig\n"
        "ProducerConfig.from_settings({'bootstrap.servers': 'localhost:9092'})\n"
        "from kwire.cli.output import print_table\n"
        "print_table(['partition', 'records'], [(0, 1)], file=io.StringIO())\n"
        "from kwire.protocol.records import batch\n"
        "assert batch._ZZ == [], 'the builder table was built at import'\n"
        "import socket\n"
        "from kwire.cli.client_options import _all_refused\n"
        "listener = socket.create_server(('127.0.0.1', 0))\n"
        "assert _all_refused('127.0.0.1:%d' % listener.getsockname()[1], 1.0) is None\n")
    assert "kwire.client.producer" in loaded and "kwire.cli.produce_cmd" in loaded
    unused = {"kwire.security.scram", "kwire.security.plain", "cramjam", "zstandard", "json", "difflib", "hashlib",
              "encodings.idna"}
    assert not unused & loaded, sorted(unused & loaded)


def test_the_lazy_names_still_load():
    from kwire.protocol.records import compression
    from kwire.security import ScramClient, client_context, plain_token

    assert ScramClient.__module__ == "kwire.security.scram" and callable(client_context) and callable(plain_token)
    for codec in (compression.Compression.SNAPPY, compression.Compression.LZ4, compression.Compression.ZSTD):
        assert compression.decompress(codec, compression.compress(codec, b"kwire" * 100)) == b"kwire" * 100


def test_the_command_starts_without_the_garbage_collector_and_turns_it_back_on():
    # kwire.cli.start_up: the kwire command (argv[0] "kwire") imports its command with the cyclic
    # collector off, and turns it on (start-up's objects frozen) before the command runs; kwire
    # produce once its producer's imports are done too.  A program that imports kwire.cli.main
    # keeps its collector.
    code = ("import gc, io, contextlib, sys\n"
            "sys.argv = ['/usr/bin/kwire']\n"
            "from kwire.cli.main import main\n"
            "print(gc.isenabled())\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['protocol', 'list'])\n"
            "print(gc.isenabled(), gc.get_freeze_count() > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True", "True"]
    program = subprocess.run([sys.executable, "-c", "import gc\nimport kwire.cli.main\nprint(gc.isenabled())"],
                             capture_output=True, text=True, timeout=60, check=True)
    assert program.stdout.split() == ["True"]


def test_the_command_imports_dataclasses_without_inspect_until_inspect_is_used():
    # kwire.cli.start_up: during the kwire command's start-up, inspect (with ast, dis, tokenize)
    # stands deferred, so the client config's dataclasses load without it.  After start-up,
    # `import inspect` is the real module, and dataclasses' own reference reads it on first use
    # (a dataclass without a docstring gets one from inspect.signature).
    code = ("import sys\n"
            "sys.argv = ['/usr/bin/kwire']\n"
            "import kwire.cli.main\n"
            "from kwire.cli import start_up\n"
            "from kwire.client.config import ProducerConfig\n"
            "import kwire.client.producer_blocking, kwire.client.metadata\n"
            "ProducerConfig.from_settings({'bootstrap.servers': 'localhost:9092'})\n"
            "print(sorted({'inspect', 'ast', 'dis', 'tokenize'} & {n for n, m in sys.modules.items()\n"
            "                                                       if type(m).__name__ == 'module'}))\n"
            "start_up.over()\n"
            "import inspect, dataclasses\n"
            "print(type(inspect).__name__, callable(inspect.signature))\n"
            "@dataclasses.dataclass\n"
            "class Undocumented:\n"
            "    x: int = 1\n"
            "print(Undocumented.__doc__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["[]", "module True", "Undocumented(x: int = 1)"], out.stdout + out.stderr
    program = subprocess.run([sys.executable, "-c", "import kwire.cli.main, sys\n"
                              "print(type(sys.modules.get('inspect')).__name__)"],
                             capture_output=True, text=True, timeout=60, check=True)
    assert program.stdout.split() == ["NoneType"]  # a program importing kwire: no stand-in


def test_consume_imports_its_consumer_before_the_collector_comes_back():
    # kwire consume's handler imports the consumer as part of start-up (the collector off) and
    # then turns the collector on, before it reads: the consumer's classes are in the frozen
    # generation (gc.get_objects() leaves that generation out), and a long consume collects.
    from kwire.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        subprocess.run([sys.executable, "-m", "kwire.cli.main", "produce", "startup-probe", "x", "-b", broker.bootstrap],
                       capture_output=True, timeout=60, check=True)
        code = ("import gc, sys\n"
                "sys.argv = ['/usr/bin/kwire']\n"
                "from kwire.cli.main import main\n"
                f"code = main(['consume', 'startup-probe', '-o', 'beginning', '-e', '-b', {broker.bootstrap!r}])\n"
                "from kwire.client.consumer import AsyncConsumer\n"
                "tracked = {id(o) for o in gc.get_objects()}\n"
                "print(code, gc.isenabled(), id(AsyncConsumer) in tracked)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["x", "0", "True", "False"], out.stdout + out.stderr  # (x: the record)
