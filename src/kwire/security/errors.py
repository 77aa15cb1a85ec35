"""The one exception of the security package."""

from __future__ import annotations


class AuthenticationError(Exception):
    """A login failed: bad credentials, a malformed message or a protocol violation.

    The message says what failed (e.g. "invalid SCRAM proof", "malformed PLAIN token") and never
    carries a password or any secret derived from it, so it is safe to log and to send to the peer.
    """
