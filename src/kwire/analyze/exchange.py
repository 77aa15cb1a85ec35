"""What the analyzer produces: decoded request/response exchanges, and the warnings met on the way.

Every protocol layer (``kafka``, ``mongo``) turns one TCP connection's stream events into
``Exchange`` objects through the same small interface (``Flow``), so the driver, the summary,
the findings and the writers never look at protocol bytes.

An exchange is one request with its response, or a request never answered, or a response whose
request the capture does not hold.  Frame numbers are those of the packets that completed the
request and the response (where a decoder like tshark shows the reassembled message); times are
capture timestamps in nanoseconds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

__all__ = [
    "ANSWERED",
    "NO_RESPONSE_EXPECTED",
    "ORPHAN_RESPONSE",
    "UNANSWERED",
    "UNDECODABLE",
    "AnalyzeWarning",
    "Exchange",
    "Flow",
    "FlowContext",
    "PartitionInfo",
    "WarningLog",
]

# Exchange.status values
ANSWERED = "answered"  #: request and response both decoded (the response may carry an error)
UNANSWERED = "unanswered"  #: the request got no response before the connection or the capture ended
NO_RESPONSE_EXPECTED = "no_response"  #: the protocol sends none (Kafka Produce with acks=0, MongoDB moreToCome)
ORPHAN_RESPONSE = "orphan_response"  #: a response whose request the capture does not hold
UNDECODABLE = "undecodable"  #: framed, but the body did not decode (see ``Exchange.warning``)


class PartitionInfo(NamedTuple):
    """One topic-partition an exchange names, with what the exchange says about it.

    ``offset`` by API: Produce the base offset the broker assigned; Fetch the fetch offset asked
    for; OffsetCommit the committed offset; OffsetFetch the offset answered; ListOffsets the
    offset answered; DeleteRecords the new low watermark; -1 where none.
    """

    topic: str
    partition: int
    error_code: int = 0
    offset: int = -1
    records: int = 0  #: records carried (Produce request, Fetch response), after decompression
    bytes: int = 0  #: record-batch bytes on the wire
    high_watermark: int = -1  #: Fetch response


@dataclass(slots=True, eq=False)
class Exchange:
    """One request and its response on one connection (either side may be missing, see ``status``)."""

    protocol: str  #: 'kafka' or 'mongodb'
    capture: str  #: the capture file's name
    conn: int  #: the connection's id in its capture (1-based, order of first packet)
    client: str  #: 'addr:port' of the client side
    server: str  #: 'addr:port' of the server side
    api: str  #: Kafka API name ('Produce') / MongoDB command name ('find') or opcode name ('OP_QUERY')
    api_key: int  #: Kafka api key / MongoDB opcode
    api_version: int  #: Kafka api version; -1 for MongoDB
    correlation_id: int  #: Kafka correlation id / MongoDB requestID of the request
    status: str = ANSWERED
    client_id: str | None = None  #: Kafka client id / MongoDB application name when the handshake shows it
    request_frame: int | None = None
    request_ts_ns: int | None = None
    response_frame: int | None = None
    response_ts_ns: int | None = None
    request_bytes: int = 0  #: whole message on the wire, size prefix included
    response_bytes: int = 0
    error_code: int = 0  #: the first error of the response, top level first (0: none)
    error: str | None = None  #: its name (Kafka error name, MongoDB codeName or errmsg)
    errors: Counter = field(default_factory=Counter)  #: every error name in the response, with counts
    throttle_ms: int = 0
    group: str | None = None  #: Kafka consumer group (group APIs, OffsetCommit/Fetch, TxnOffsetCommit)
    member_id: str | None = None
    generation: int | None = None  #: generation named by the request, or given by a JoinGroup/SyncGroup response
    partitions: list[PartitionInfo] = field(default_factory=list)
    database: str | None = None  #: MongoDB
    collection: str | None = None  #: MongoDB
    details: dict[str, Any] = field(default_factory=dict)  #: protocol-specific extras, JSON-able
    request: Any = None  #: the decoded request (Kafka message object / MongoDB document), if kept
    response: Any = None
    warning: str | None = None  #: why the exchange is partial or undecodable

    @property
    def latency_ns(self) -> int | None:
        if self.request_ts_ns is None or self.response_ts_ns is None:
            return None
        return self.response_ts_ns - self.request_ts_ns

    @property
    def latency_ms(self) -> float | None:
        ns = self.latency_ns
        return None if ns is None else ns / 1e6

    @property
    def ts_ns(self) -> int:
        """When the exchange started: the request's time, else the response's."""
        return self.request_ts_ns if self.request_ts_ns is not None else (self.response_ts_ns or 0)

    @property
    def frame(self) -> int:
        """The frame that shows the exchange: the request's, else the response's."""
        return self.request_frame if self.request_frame is not None else (self.response_frame or 0)


class AnalyzeWarning(NamedTuple):
    """Something in the capture that could not be read as it should (decoding went on)."""

    capture: str
    frame: int  #: 0 when not tied to a packet
    conn: int  #: 0 when not tied to a connection
    kind: str  #: short key: 'gap', 'resync', 'forged_length', 'undecodable', 'capture', ...
    message: str


class WarningLog:
    """Warnings, kept up to ``limit`` (every warning is still counted by kind): garbage input
    must not grow memory without bound."""

    def __init__(self, limit: int = 1000):
        self.limit = limit
        self.kept: list[AnalyzeWarning] = []
        self.counts: Counter = Counter()

    def __call__(self, capture: str, frame: int, conn: int, kind: str, message: str) -> None:
        self.counts[kind] += 1
        if len(self.kept) < self.limit:
            self.kept.append(AnalyzeWarning(capture, frame, conn, kind, message))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def dropped(self) -> int:
        return self.total - len(self.kept)


@dataclass(slots=True)
class FlowContext:
    """What a protocol layer needs besides the connection: options and where warnings go."""

    capture: str = ""
    warn: Callable[[str, int, int, str, str], None] = field(default_factory=WarningLog)
    max_frame_size: int = 100 * 1024 * 1024  #: larger size prefixes are forged: warn and resynchronise
    keep_messages: bool = False  #: keep decoded messages in ``Exchange.request`` / ``.response`` (for --json)
    record_values: bool = False  #: with keep_messages, also keep record keys and values (Kafka)
    topic_names: dict = field(default_factory=dict)  #: Kafka topic id -> name, from Metadata on any connection


class Flow(Protocol):
    """One connection's protocol decoder: stream events in, exchanges out (sans-IO)."""

    def feed(self, direction: int, event) -> list[Exchange]:
        """Take a ``Chunk``, ``Gap`` or ``End`` of one direction; return the exchanges it completed."""

    def close(self) -> list[Exchange]:
        """The connection or the capture ended: requests still waiting become ``UNANSWERED``."""
