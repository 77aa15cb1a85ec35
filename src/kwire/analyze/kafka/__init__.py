"""The Kafka layer of ``kwire analyze``: one connection's stream events in, ``Exchange``s out.

``KafkaFlow(conn, ctx)`` splits each direction into size-prefixed frames with the codec's
``FrameSplitter``, decodes requests and responses with ``kwire.protocol`` and pairs them by
correlation id (``flow`` says what a capture throws at it, and what it does).  ``exchange_json``
turns an exchange (with its kept messages) into the ``--json`` object.

* ``flow``: ``KafkaFlow``: framing, decoding, pairing requests with responses, SASL tokens;
* ``resync``: the bounded scan for the next frame start in a direction that lost its place;
* ``sniff``: ``looks_like_kafka_request``, recognising a request header;
* ``readers``, with ``partitions`` and ``groups``: the fields of exchanges, per api;
* ``errors``: every error code of a response, by a walker compiled per (api, version);
* ``records``: records, uncompressed bytes and codecs of record batches;
* ``json_output``: ``exchange_json``;
* ``constants``: the api keys and names the modules share.
"""

from .constants import (  # noqa: F401 - the public names of the old single module, still importable from here
    API_VERSIONS,
    CONTROLLED_SHUTDOWN,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DESCRIBE_GROUPS,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SASL_HANDSHAKE,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
    UNSUPPORTED_VERSION,
)
from .flow import SASL_TOKEN, UNKNOWN_API, KafkaFlow  # noqa: F401
from .json_output import exchange_json
from .sniff import looks_like_kafka_request

__all__ = ["KafkaFlow", "exchange_json", "looks_like_kafka_request"]
