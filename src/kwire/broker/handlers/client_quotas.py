"""DescribeClientQuotas and AlterClientQuotas (KIP-546): the client quota store and its throttling."""

from __future__ import annotations
