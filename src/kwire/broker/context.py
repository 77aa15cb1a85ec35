"""What a request handler is given besides the decoded request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import BrokerState

__all__ = ["RequestContext"]


@dataclass(slots=True)
class RequestContext:
    """One request's surroundings: the broker, the header fields and the connection it came on."""

    broker: BrokerState
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # The peer's address as "host:port"; Kafka reports the host part as a group member's client host.
    client_host: str
    connection_id: int

    @property
    def version(self) -> int:
        return self.api_version
