"""The test tiers' own checks (tests/conftest.py, tests/tiers.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import SLOW_BY_HAND

ROOT = Path(__file__).parent.parent


def test_every_test_marked_slow_by_hand_exists():
    """A renamed or moved test would silently come back into the day-to-day tier."""
    missing = []
    for nodeid in SLOW_BY_HAND:
        path, _, name = nodeid.partition("::")
        function = name.partition("[")[0]
        source = ROOT / path
        if not source.is_file() or not re.search(rf"^(async )?def {function}\(", source.read_text(), re.M):
            missing.append(nodeid)
    assert missing == []
