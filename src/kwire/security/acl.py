"""Kafka's ACL model: bindings (a resource pattern and an access entry) and the filters that select them.

Shared by the broker (which stores and enforces bindings) and clients (CreateAcls, DescribeAcls and
DeleteAcls carry them). The numeric values are the wire's. Filters follow Kafka's rules: ANY matches
every value, a MATCH pattern filter matches the bindings that would apply to a resource name.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["CLUSTER_NAME", "SUPPORTED_RESOURCES", "WILDCARD", "AclBinding", "AclFilter", "AclOperation",
           "PatternType", "PermissionType", "ResourceType", "check_binding", "valid_principal"]


def valid_principal(principal: str) -> bool:
    """A principal is "Type:name" (User:alice, User:*)."""
    kind, sep, name = principal.partition(":")
    return bool(sep and kind and name)


CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name, as in Kafka
WILDCARD = "*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The resources this broker has (delegation tokens and users it does not).
SUPPORTED_RESOURCES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``principal`` connecting from ``host`` is allowed or denied (``permission``)
    ``operation`` on the resources of ``resource_type`` that ``name`` matches as ``pattern``
    says (LITERAL: that name; PREFIXED: names starting with it).  ``AclFilter`` selects them."""

    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def describe(self) -> str:
        pattern = "" if self.pattern == PatternType.LITERAL else f" ({self.pattern.name.lower()})"
        return (f"{self.permission.name} {self.principal} {self.operation.name} on {self.resource_type.name} "
                f"{self.name!r}{pattern} from host {self.host}")

    def covers(self, name: str) -> bool:
        """Whether this binding's resource pattern applies to a resource of this name (same type)."""
        if self.pattern == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return name.startswith(self.name)


def check_binding(b: AclBinding) -> None:
    """ValueError (the message is what the client is told) unless b is a binding one may store."""
    if b.resource_type not in SUPPORTED_RESOURCES:
        raise ValueError(f"resource type {b.resource_type.name} is not supported "
                         f"(use {', '.join(r.name for r in SUPPORTED_RESOURCES)})")
    if b.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(f"pattern type {b.pattern.name} is not allowed in an ACL (LITERAL or PREFIXED)")
    if not b.name:
        raise ValueError("resource name must not be empty")
    if b.resource_type == ResourceType.CLUSTER and (b.name != CLUSTER_NAME or b.pattern != PatternType.LITERAL):
        raise ValueError(f"the cluster resource is named {CLUSTER_NAME!r} (literal)")
    if b.pattern == PatternType.PREFIXED and b.name == WILDCARD:
        raise ValueError("a prefixed pattern of '*' is meaningless: use a literal '*'")
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise ValueError(f"operation {b.operation.name} is not allowed in an ACL")
    if b.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        raise ValueError(f"permission type {b.permission.name} is not allowed in an ACL (ALLOW or DENY)")
    if not valid_principal(b.principal):
        raise ValueError(f"principal {b.principal!r} must look like User:name (or User:*)")
    if not b.host:
        raise ValueError("host must not be empty (use '*' for any host)")


@dataclass(frozen=True)
class AclFilter:
    """Kafka's AclBindingFilter: None and ANY match anything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: PermissionType = PermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.pattern not in (PatternType.ANY, PatternType.MATCH, b.pattern):
            return False
        if self.name is not None:
            if self.pattern in (PatternType.ANY, b.pattern):
                if self.name != b.name:
                    return False
            elif not b.covers(self.name):  # MATCH: the bindings that apply to a resource of this name
                return False
        return (self.principal in (None, b.principal) and self.host in (None, b.host)
                and self.operation in (AclOperation.ANY, b.operation)
                and self.permission in (PermissionType.ANY, b.permission))

    def problem(self) -> str | None:
        """Why this filter can match nothing valid (Kafka refuses such filters), or None."""
        for field, value in (("resource type", self.resource_type), ("pattern type", self.pattern),
                             ("operation", self.operation), ("permission type", self.permission)):
            if value.name == "UNKNOWN":
                return f"filter {field} is UNKNOWN"
        return None
