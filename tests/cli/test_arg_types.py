"""The argument types every kwire command shares: what they take, and the message for what not."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from kwire.cli.arg_types import key_value, positive_float, positive_int, tcp_port


@pytest.mark.parametrize(("parse", "text", "value"), [
    (positive_int, "1", 1), (positive_int, " 42 ", 42),
    (positive_float, "0.5", 0.5), (positive_float, "30", 30.0),
    (tcp_port, "9092", 9092), (tcp_port, "65535", 65535),
    (key_value, "client.id=me", ("client.id", "me")), (key_value, "a = b=c", ("a", " b=c")),
    (key_value, "empty=", ("empty", "")),
])
def test_accepted(parse, text, value):
    assert parse(text) == value


@pytest.mark.parametrize(("parse", "text", "message"), [
    (positive_int, "x", "'x' is not a whole number"), (positive_int, "0", "must be at least 1, not 0"),
    (positive_int, "1.5", "'1.5' is not a whole number"),
    (positive_float, "soon", "'soon' is not a number"), (positive_float, "0", "must be above 0, not 0"),
    (positive_float, "-2", "must be above 0, not -2"), (positive_float, "nan", "must be above 0, not nan"),
    (tcp_port, "65536", "65536 is not a TCP port (1-65535)"), (tcp_port, "0", "must be at least 1, not 0"),
    (key_value, "novalue", "'novalue' is not key=value"), (key_value, "=v", "'=v' is not key=value"),
])
def test_refused_with_a_message_naming_the_value(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        parse(text)
    assert str(exc.value) == message


@pytest.mark.parametrize(("argv", "message"), [
    (["analyze", "x.pcap", "--kafka-port", "70000"], "argument --kafka-port: 70000 is not a TCP port (1-65535)"),
    (["analyze", "x.pcap", "--slow-ms", "0"], "argument --slow-ms: must be above 0, not 0"),
    (["topics", "list", "--timeout", "never"], "argument --timeout: 'never' is not a number"),
])
def test_commands_report_the_flag_and_the_reason(argv, message):
    done = subprocess.run([sys.executable, "-m", "kwire.cli.main", *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
