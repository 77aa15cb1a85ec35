"""What a request handler is given besides the decoded request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from .auth.principal import ANONYMOUS

if TYPE_CHECKING:
    from .auth.sasl import Session
    from .listeners import Listener
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
    # Who is asking (None: a request not from a network connection, e.g. a test calling dispatch,
    # which is trusted) and through which listener.
    session: Session | None = None
    listener: Listener | None = None

    @property
    def version(self) -> int:
        return self.api_version

    @property
    def advertised(self) -> tuple[str, int]:
        """The (host, port) this client is told to connect to: its own listener's."""
        if self.listener is not None:
            return self.listener.advertised
        return self.broker.config.advertised

    @property
    def principal(self) -> str:
        return self.session.principal if self.session is not None else ANONYMOUS

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """Whether this request's principal may do operation on the resource (always, without an authorizer)."""
        if self.session is None:
            return True
        authorizer = self.broker.security.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize(self.session.principal, self.session.host, operation, resource_type, name)

    def allowed_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        if self.session is None:
            return True
        authorizer = self.broker.security.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize_any(self.session.principal, self.session.host, operation, resource_type)
