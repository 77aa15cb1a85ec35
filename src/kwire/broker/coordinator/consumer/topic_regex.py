"""Subscriptions by regular expression (KIP-848's SubscribedTopicRegex).

Kafka compiles these with RE2/J.  Python's ``re`` agrees with RE2 on the syntax both have; what
RE2 lacks (backreferences, lookaround, possessive and atomic groups, conditionals) is refused
here as Kafka refuses it: INVALID_REGULAR_EXPRESSION naming the pattern.  A pattern matches a
topic name as a whole (RE2/J's ``matches``).  Internal topics are never matched (Kafka
resolves regexes against the non-internal topics only).
"""

from __future__ import annotations

import re
from functools import lru_cache

from kwire.protocol.errors import InvalidRegularExpressionError

__all__ = ["compile_topic_regex"]

# Constructs of Python's re that RE2 does not accept.
_UNSUPPORTED = re.compile(r"""
    \\[1-9]                 # backreference \1
  | \(\?P=                  # named backreference
  | \(\?<?[=!]              # lookahead / lookbehind
  | \(\?>                   # atomic group
  | \(\?\(                  # conditional
  | [*+?}]\+                # possessive quantifier
""", re.VERBOSE)


@lru_cache(maxsize=256)
def compile_topic_regex(pattern: str) -> re.Pattern[str]:
    """The compiled pattern; InvalidRegularExpressionError if it is not a valid RE2 one."""
    bad = _UNSUPPORTED.search(pattern)
    if bad is not None:
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {bad.group(0)!r} at "
            f"position {bad.start()} is not supported by RE2.")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {exc}.") from None
