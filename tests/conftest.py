"""Shared pytest hooks, and the test tiers.

``make test`` runs everything (CI's gate).  ``make test-fast`` leaves out the tests marked
``slow``: every test that starts Spark (a JVM per module, minutes in all) and the few others
marked by hand because they take many seconds each (kill -9 soaks, rebalances on the mock).
"""

import sys
from pathlib import Path

import pytest

_SPARK_DIR = Path(__file__).parent / "spark"


def pytest_collection_modifyitems(config, items):
    """Mark as slow what starts Spark: tests/spark/ (some start it in a subprocess), and any
    test that uses a ``spark`` session fixture."""
    slow = pytest.mark.slow
    for item in items:
        path = Path(str(item.fspath))
        if _SPARK_DIR in path.parents or "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(slow)


def pytest_terminal_summary(terminalreporter):
    """Show how much of the protocol the kafka-python oracle covered, when it ran."""
    oracle = sys.modules.get("tests.protocol.test_codec_oracle")
    if oracle is not None:
        terminalreporter.write_line(oracle.SUMMARY)
