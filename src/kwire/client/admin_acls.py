"""ACLs on the wire for the admin client: ``kwire.security.acl`` bindings and filters as CreateAcls,
DescribeAcls and DeleteAcls requests, and back.

The calls themselves (``AsyncAdmin.create_acls``, ``describe_acls``, ``delete_acls``) live in
``admin.py`` beside the other admin calls, whose batching and error reporting they share; this
module only converts, so that it needs nothing from the admin client and ``admin.py`` can import it.

Before version 1 the three apis have no pattern types: every binding is LITERAL.  A binding or a
filter that needs more (PREFIXED, MATCH) therefore asks for v1 or later; a filter with ANY goes out
as LITERAL at v0, which selects what ANY would there (as Kafka's Java client does).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from kwire.protocol import ApiKey, messages
from kwire.security.acl import AclBinding, AclFilter, AclOperation, PatternType, PermissionType, ResourceType

__all__ = [
    "CREATE_ACLS",
    "DELETE_ACLS",
    "DESCRIBE_ACLS",
    "binding_text",
    "create_request",
    "delete_request",
    "describe_request",
    "described_bindings",
    "filter_text",
    "matched_bindings",
    "min_binding_version",
    "min_filter_version",
]

# Api keys.
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS

E = TypeVar("E", bound=enum.IntEnum)


def min_binding_version(bindings: Iterable[AclBinding]) -> int:
    """The lowest CreateAcls version that can carry every binding (v0 knows only LITERAL)."""
    return 0 if all(b.pattern == PatternType.LITERAL for b in bindings) else 1


def min_filter_version(filters: Iterable[AclFilter]) -> int:
    """The lowest DescribeAcls / DeleteAcls version that can carry every filter: at v0 a broker
    reads every filter as LITERAL, which is what ANY selects there too; anything else needs v1."""
    return 0 if all(f.pattern in (PatternType.LITERAL, PatternType.ANY) for f in filters) else 1


def _wire_pattern(pattern: PatternType, version: int) -> int:
    # The v0 encoder refuses a pattern field other than its default (LITERAL), and the broker reads
    # it as LITERAL anyway; min_*_version keeps anything but LITERAL / ANY away from v0.
    return int(pattern) if version >= 1 else int(PatternType.LITERAL)


def create_request(bindings: Sequence[AclBinding], version: int) -> messages.CreateAclsRequest:
    R = messages.CreateAclsRequest
    return R(creations=[R.AclCreation(
        resource_type=int(b.resource_type), resource_name=b.name,
        resource_pattern_type=_wire_pattern(b.pattern, version), principal=b.principal, host=b.host,
        operation=int(b.operation), permission_type=int(b.permission)) for b in bindings])


def describe_request(f: AclFilter, version: int) -> messages.DescribeAclsRequest:
    return messages.DescribeAclsRequest(
        resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
        pattern_type_filter=_wire_pattern(f.pattern, version), principal_filter=f.principal, host_filter=f.host,
        operation=int(f.operation), permission_type=int(f.permission))


def delete_request(filters: Sequence[AclFilter], version: int) -> messages.DeleteAclsRequest:
    R = messages.DeleteAclsRequest
    return R(filters=[R.DeleteAclsFilter(
        resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
        pattern_type_filter=_wire_pattern(f.pattern, version), principal_filter=f.principal, host_filter=f.host,
        operation=int(f.operation), permission_type=int(f.permission)) for f in filters])


def _enum(cls: type[E], value: int) -> E:
    """The member for a wire value; UNKNOWN (0 in all four enums) for one a newer Kafka added
    (a DELEGATION_TOKEN-like newcomer should show as UNKNOWN, not fail the whole answer)."""
    try:
        return cls(value)
    except ValueError:
        return cls(0)


def _binding(resource_type: int, name: str, pattern: int, principal: str, host: str, operation: int,
             permission: int) -> AclBinding:
    # A v0 answer has no pattern type: the decoder fills in the schema's default, 3 (LITERAL).
    return AclBinding(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern), principal, host,
                      _enum(AclOperation, operation), _enum(PermissionType, permission))


def described_bindings(response: Any) -> list[AclBinding]:
    """The bindings of a DescribeAcls answer (whose error code the caller has checked), sorted."""
    found = {_binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                      a.permission_type)
             for r in response.resources for a in r.acls}
    return sorted(found)


def matched_bindings(result: Any) -> list[AclBinding]:
    """The bindings one DeleteAcls filter result says it removed, in the broker's order."""
    return [_binding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                     m.permission_type) for m in result.matching_acls]


def binding_text(b: AclBinding) -> str:
    """How error messages name a binding: "ACL (ALLOW User:bob WRITE on TOPIC 'x' from host *)"."""
    return f"ACL ({b.describe()})"


def filter_text(f: AclFilter) -> str:
    """How error messages name a filter: only what it restricts ("ACL filter (TOPIC name='x')")."""
    parts = []
    if f.resource_type != ResourceType.ANY:
        parts.append(f.resource_type.name)
    if f.name is not None:
        parts.append(f"name={f.name!r}")
    if f.pattern != PatternType.ANY:
        parts.append(f"pattern={f.pattern.name}")
    if f.principal is not None:
        parts.append(f"principal={f.principal!r}")
    if f.host is not None:
        parts.append(f"host={f.host!r}")
    if f.operation != AclOperation.ANY:
        parts.append(f"operation={f.operation.name}")
    if f.permission != PermissionType.ANY:
        parts.append(f"permission={f.permission.name}")
    return f"ACL filter ({' '.join(parts) or 'everything'})"
