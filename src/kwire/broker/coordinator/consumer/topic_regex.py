"""Subscriptions by regular expression (KIP-848's SubscribedTopicRegex).

Kafka compiles these with RE2/J (``Pattern.compile`` in GroupMetadataManager) and refuses a pattern
it cannot compile with INVALID_REGULAR_EXPRESSION, "SubscribedTopicRegex `p` is not a valid regular
expression: <why>.".  kwire compiles them with RE2 itself (PyPI's ``google-re2``), whose syntax is
RE2/J's: ``\\Q...\\E`` quoting, ``\\p{Greek}`` classes, no backreferences or lookaround, and
linear-time matching, so a subscriber's pattern cannot stall the coordinator.  A pattern matches a
topic name as a whole (RE2/J's ``matches``).  Internal topics are never matched (Kafka resolves
regexes against the non-internal topics only).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

from kwire.protocol.errors import InvalidRegularExpressionError

__all__ = ["TopicPattern", "compile_topic_regex"]


class TopicPattern(Protocol):
    """What the coordinator needs of a compiled pattern."""

    def fullmatch(self, text: str) -> object | None: ...


def _options():
    import re2  # imported on the first regex subscription: most brokers never see one

    options = re2.Options()
    options.log_errors = False  # RE2 would print each refused pattern on stderr; the error says it
    return re2, options


@lru_cache(maxsize=256)
def compile_topic_regex(pattern: str) -> TopicPattern:
    """The compiled pattern; InvalidRegularExpressionError naming the pattern and RE2's reason if
    RE2 does not accept it."""
    re2, options = _options()
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {reason}.") from None
