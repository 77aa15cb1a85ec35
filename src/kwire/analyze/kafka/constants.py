"""Numbers and names the Kafka layer's modules share: api keys, the newest versions, directions."""

from __future__ import annotations

from kwire.protocol import API_KEYS, ApiKey, api_versions
from kwire.protocol.errors import ErrorCode

# Api keys of the requests this layer reads fields from (names the layer's modules import).
PRODUCE = ApiKey.PRODUCE
FETCH = ApiKey.FETCH
LIST_OFFSETS = ApiKey.LIST_OFFSETS
METADATA = ApiKey.METADATA
OFFSET_COMMIT = ApiKey.OFFSET_COMMIT
OFFSET_FETCH = ApiKey.OFFSET_FETCH
FIND_COORDINATOR = ApiKey.FIND_COORDINATOR
JOIN_GROUP = ApiKey.JOIN_GROUP
HEARTBEAT = ApiKey.HEARTBEAT
LEAVE_GROUP = ApiKey.LEAVE_GROUP
SYNC_GROUP = ApiKey.SYNC_GROUP
DESCRIBE_GROUPS = ApiKey.DESCRIBE_GROUPS
SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
API_VERSIONS = ApiKey.API_VERSIONS
DELETE_RECORDS = ApiKey.DELETE_RECORDS
OFFSET_FOR_LEADER_EPOCH = ApiKey.OFFSET_FOR_LEADER_EPOCH
TXN_OFFSET_COMMIT = ApiKey.TXN_OFFSET_COMMIT
DELETE_GROUPS = ApiKey.DELETE_GROUPS
CONTROLLED_SHUTDOWN = ApiKey.CONTROLLED_SHUTDOWN
UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION

# Directions as warnings name them: TO_SERVER, TO_CLIENT.
_DIRECTION_NAMES = ("client->server", "server->client")

#: api key -> the newest version the codec knows
_NEWEST: dict[int, int] = {key: api_versions(key)[1] for key in API_KEYS}
