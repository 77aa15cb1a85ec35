"""DescribeClientQuotas and AlterClientQuotas (KIP-546) over the broker's ClientQuotaStore.

As Kafka: describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS (else
CLUSTER_AUTHORIZATION_FAILED); a filter Kafka refuses is answered with its error code and message
at the top level; each altered entity gets its own result, INVALID_REQUEST naming what was wrong
(an unknown entity type or key, an entity type combination Kafka has no quotas for, a value that
is not a positive number or not whole where the key is a LONG).  The quotas are enforced by
``kwire.broker.quotas`` (see ``dispatch``).
"""

from __future__ import annotations

import logging

from kwire.protocol import messages
from kwire.protocol.errors import ClusterAuthorizationFailedError, ErrorCode, UnknownServerError
from kwire.protocol.schema import api_key_for

from ..auth.acls import AclOperation, ResourceType
from ..quotas import Alteration, QuotaRequestError, format_entity
from .registry import handler

DESCRIBE_CLIENT_QUOTAS = api_key_for("DescribeClientQuotas")
ALTER_CLIENT_QUOTAS = api_key_for("AlterClientQuotas")

logger = logging.getLogger("kwire.broker.handlers")


@handler(DESCRIBE_CLIENT_QUOTAS, 0)
def handle_describe_client_quotas(ctx, request):
    R = messages.DescribeClientQuotasResponse
    if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code,
                 error_message=f"{ctx.principal} may not DESCRIBE_CONFIGS of the cluster", entries=None)
    components = [(c.entity_type or "", c.match_type, c.match) for c in request.components]
    try:
        found = ctx.broker.client_quotas.describe(components, request.strict)
    except QuotaRequestError as exc:
        return R(throttle_time_ms=0, error_code=exc.code, error_message=exc.message, entries=None)
    entries = [R.EntryData(entity=[R.EntryData.EntityData(entity_type=k, entity_name=v) for k, v in entity],
                           values=[R.EntryData.ValueData(key=k, value=v) for k, v in sorted(values.items())])
               for entity, values in found]
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)


@handler(ALTER_CLIENT_QUOTAS, 0)
def handle_alter_client_quotas(ctx, request):
    R = messages.AlterClientQuotasResponse

    def entry(e, code: int = 0, message: str | None = None):
        return R.EntryData(error_code=code, error_message=message,
                           entity=[R.EntryData.EntityData(entity_type=d.entity_type, entity_name=d.entity_name)
                                   for d in e.entity])

    if not ctx.allowed(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, entries=[entry(e, ClusterAuthorizationFailedError.code,
                                                    f"{ctx.principal} may not ALTER_CONFIGS of the cluster")
                                              for e in request.entries])
    alterations = [Alteration([(d.entity_type or "", d.entity_name) for d in e.entity],
                              [(op.key or "", None if op.remove else op.value) for op in e.ops])
                   for e in request.entries]
    try:
        results = ctx.broker.client_quotas.alter(alterations, validate_only=request.validate_only)
    except (OSError, ValueError) as exc:
        logger.error("AlterClientQuotas could not store the quotas: %s", exc)
        return R(throttle_time_ms=0, entries=[entry(e, UnknownServerError.code, f"quotas not stored: {exc}")
                                              for e in request.entries])
    out = []
    for e, alteration, error in zip(request.entries, alterations, results, strict=True):
        if error is not None:
            out.append(entry(e, error.code, error.message))
            continue
        out.append(entry(e))
        if not request.validate_only:
            logger.info("%s set client quotas of %s: %s", ctx.principal, format_entity(tuple(sorted(alteration.entity))),
                        ", ".join(f"{k}={'(removed)' if v is None else v}" for k, v in alteration.ops) or "nothing")
    return R(throttle_time_ms=0, entries=out)

