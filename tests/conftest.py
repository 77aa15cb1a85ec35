"""Shared pytest hooks."""

import sys


def pytest_terminal_summary(terminalreporter):
    """Show how much of the protocol the kafka-python oracle covered, when it ran."""
    oracle = sys.modules.get("tests.protocol.test_codec_oracle")
    if oracle is not None:
        terminalreporter.write_line(oracle.SUMMARY)
