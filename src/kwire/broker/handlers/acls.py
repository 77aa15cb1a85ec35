"""CreateAcls, DescribeAcls and DeleteAcls over the broker's AclStore.

Without an authorizer (``authorizer = false``) they answer SECURITY_DISABLED, as Kafka does without
authorizer.class.name. Changing ACLs needs ALTER on the cluster, reading them DESCRIBE. Before v1
there are no pattern types: everything is LITERAL.
"""

from __future__ import annotations

import logging

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import ClusterAuthorizationFailedError, ErrorCode, InvalidRequestError, SecurityDisabledError

from ..auth.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    check_binding,
)
from .registry import handler

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS
_DISABLED = "No Authorizer is configured on the broker (set authorizer = true)"

logger = logging.getLogger("kwire.broker.handlers")


def _binding(c, v: int) -> AclBinding:
    """A creation's binding; ValueError for values outside the enums."""
    return AclBinding(ResourceType(c.resource_type), c.resource_name or "",
                      PatternType(c.resource_pattern_type) if v >= 1 else PatternType.LITERAL,
                      c.principal or "", c.host or "", AclOperation(c.operation), PermissionType(c.permission_type))


def _filter(f, v: int) -> AclFilter:
    return AclFilter(ResourceType(f.resource_type_filter), f.resource_name_filter,
                     PatternType(f.pattern_type_filter) if v >= 1 else PatternType.LITERAL,
                     f.principal_filter, f.host_filter, AclOperation(f.operation), PermissionType(f.permission_type))


@handler(CREATE_ACLS, 0)
def handle_create_acls(ctx, request):
    R = messages.CreateAclsResponse
    security = ctx.broker.security

    def result(code: int = 0, message: str | None = None):
        return R.AclCreationResult(error_code=code, error_message=message)

    if security.authorizer is None:
        return R(throttle_time_ms=0, results=[result(SecurityDisabledError.code, _DISABLED)
                                              for _ in request.creations])
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, results=[result(ClusterAuthorizationFailedError.code,
                                                     f"{ctx.principal} may not ALTER the cluster's ACLs")
                                              for _ in request.creations])
    results, valid = [], []
    for c in request.creations:
        try:
            binding = _binding(c, ctx.api_version)
            check_binding(binding)
        except ValueError as exc:
            results.append(result(InvalidRequestError.code, str(exc)))
            continue
        valid.append(binding)
        results.append(result())
    if valid:
        try:
            security.acls.add(valid)
        except (OSError, ValueError) as exc:
            logger.error("CreateAcls could not store ACLs: %s", exc)
            results = [r if r.error_code else result(InvalidRequestError.code, f"ACLs not stored: {exc}")
                       for r in results]
        else:
            for b in valid:
                logger.info("%s added ACL: %s", ctx.principal, b.describe())
    return R(throttle_time_ms=0, results=results)


@handler(DESCRIBE_ACLS, 0)
def handle_describe_acls(ctx, request):
    R = messages.DescribeAclsResponse
    security = ctx.broker.security
    if security.authorizer is None:
        return R(throttle_time_ms=0, error_code=SecurityDisabledError.code, error_message=_DISABLED, resources=[])
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code,
                 error_message=f"{ctx.principal} may not DESCRIBE the cluster's ACLs", resources=[])
    try:
        f = _filter(request, ctx.api_version)
    except ValueError as exc:
        return R(throttle_time_ms=0, error_code=InvalidRequestError.code, error_message=str(exc), resources=[])
    problem = f.problem()
    if problem:
        return R(throttle_time_ms=0, error_code=InvalidRequestError.code, error_message=problem, resources=[])
    grouped: dict[tuple, list[AclBinding]] = {}
    for b in security.acls.describe(f):
        grouped.setdefault((b.resource_type, b.name, b.pattern), []).append(b)
    resources = [R.DescribeAclsResource(
        resource_type=rt, resource_name=name, pattern_type=pattern,
        acls=[R.DescribeAclsResource.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                                                    permission_type=b.permission) for b in bindings])
        for (rt, name, pattern), bindings in grouped.items()]
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=resources)


@handler(DELETE_ACLS, 0)
def handle_delete_acls(ctx, request):
    R = messages.DeleteAclsResponse
    F = R.DeleteAclsFilterResult
    security = ctx.broker.security
    if security.authorizer is None:
        return R(throttle_time_ms=0, filter_results=[F(error_code=SecurityDisabledError.code, error_message=_DISABLED,
                                                       matching_acls=[]) for _ in request.filters])
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, filter_results=[
            F(error_code=ClusterAuthorizationFailedError.code,
              error_message=f"{ctx.principal} may not ALTER the cluster's ACLs", matching_acls=[])
            for _ in request.filters])
    filters: list[AclFilter | str] = []
    for raw in request.filters:
        try:
            f = _filter(raw, ctx.api_version)
        except ValueError as exc:
            filters.append(str(exc))
            continue
        filters.append(f.problem() or f)
    usable = [f for f in filters if isinstance(f, AclFilter)]
    try:
        removed = iter(security.acls.remove(usable) if usable else [])
    except (OSError, ValueError) as exc:
        logger.error("DeleteAcls could not update ACLs: %s", exc)
        return R(throttle_time_ms=0, filter_results=[F(error_code=InvalidRequestError.code,
                                                       error_message=f"ACLs not updated: {exc}", matching_acls=[])
                                                     for _ in request.filters])
    results = []
    for f in filters:
        if isinstance(f, str):
            results.append(F(error_code=InvalidRequestError.code, error_message=f, matching_acls=[]))
            continue
        gone = next(removed)
        for b in gone:
            logger.info("%s removed ACL: %s", ctx.principal, b.describe())
        results.append(F(error_code=ErrorCode.NONE, error_message=None, matching_acls=[F.DeleteAclsMatchingAcl(
            error_code=ErrorCode.NONE, error_message=None, resource_type=b.resource_type, resource_name=b.name,
            pattern_type=b.pattern, principal=b.principal, host=b.host, operation=b.operation,
            permission_type=b.permission) for b in gone]))
    return R(throttle_time_ms=0, filter_results=results)
