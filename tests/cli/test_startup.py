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
