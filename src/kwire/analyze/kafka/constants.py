"""Numbers and names the Kafka layer's modules share: api keys, the newest versions, directions."""

from __future__ import annotations

from kwire.protocol import API_KEYS, api_versions

# Api keys of the requests this layer reads fields from.
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, SASL_HANDSHAKE, API_VERSIONS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 15, 17, 18, 21, 23
TXN_OFFSET_COMMIT, DELETE_GROUPS = 28, 42
CONTROLLED_SHUTDOWN = 7
UNSUPPORTED_VERSION = 35

# Directions as warnings name them: TO_SERVER, TO_CLIENT.
_DIRECTION_NAMES = ("client->server", "server->client")

#: api key -> the newest version the codec knows
_NEWEST: dict[int, int] = {key: api_versions(key)[1] for key in API_KEYS}
