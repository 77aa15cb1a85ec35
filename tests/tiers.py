"""The test tiers, for what a marker cannot say.

``make test`` (CI's gate) runs every test in full.  ``make test-fast`` (the day-to-day tier) leaves
out the tests marked ``slow`` (see tests/conftest.py) and loads hypothesis' ``fast`` profile, under
which property tests draw a quarter of their inputs: every property is still checked, on fewer
random examples.  A property test states its full count through ``examples(n)``.
"""

from __future__ import annotations

from hypothesis import settings

FAST_PROFILE = "fast"

# hypothesis' own default count, which a test's full count is relative to.
_DEFAULT_EXAMPLES = 100

settings.register_profile(FAST_PROFILE, max_examples=_DEFAULT_EXAMPLES // 4)


def examples(full: int) -> int:
    """``full`` examples under hypothesis' default profile (``make test``), scaled by the loaded
    profile's ``max_examples`` otherwise (a quarter under ``fast``), and never fewer than one."""
    return max(1, full * settings().max_examples // _DEFAULT_EXAMPLES)
