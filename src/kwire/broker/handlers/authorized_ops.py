"""The ``*AuthorizedOperations`` bit fields (KIP-430): which operations the principal may do on a
resource, as Kafka's AuthHelper.authorizedOperations computes them from the ACLs."""

from __future__ import annotations

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType

__all__ = ["authorized_operations"]

_O = AclOperation
# The operations Kafka's AclEntry.supportedOperations lists per resource type.
SUPPORTED = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
                           _O.ALTER, _O.DESCRIBE),
}


def authorized_operations(ctx, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """The bit field (1 << operation code per allowed operation) for this request's principal."""
    bits = 0
    for op in SUPPORTED[resource_type]:
        if ctx.allowed(op, resource_type, name):
            bits |= 1 << int(op)
    return bits
