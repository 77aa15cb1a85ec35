"""KIP-932 share groups: membership (groups) and its records in ``__consumer_offsets`` (records),
share sessions (sessions), the in-flight records of each share partition (partition), their state
in ``__share_group_state`` (persister), and the broker-wide glue the request handlers use (manager)."""

from .manager import ShareManager

__all__ = ["ShareManager"]
