"""What ``kwire`` imports before it knows the command: not the broker's server (its handlers,
storage and coordinators), which only ``kwire broker`` needs once it starts one."""

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
