"""KIP-932 share groups: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge and the share-group offsets APIs."""

from __future__ import annotations
