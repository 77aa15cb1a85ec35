"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: KIP-848 consumer groups."""

from __future__ import annotations
