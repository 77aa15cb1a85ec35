"""ListConfigResources (KIP-1000, extended by KIP-1142 in Kafka 4.1): the resources with configs.

Follows Kafka's KafkaApis.handleListConfigResources: DESCRIBE_CONFIGS on the cluster is required;
v0 lists client-metrics subscriptions only (kwire has none: an empty list); v1 lists the resource
types asked for (all it supports when none are): topics, this broker, groups and client metrics.
A type it does not support (broker loggers: kwire has no dynamic log levels) fails the request
with UNSUPPORTED_VERSION, as Kafka answers a type it lacks.
"""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.configs import ConfigResourceType
from kwire.protocol.errors import ClusterAuthorizationFailedError, UnsupportedVersionError

from ..auth.acls import AclOperation, ResourceType
from .registry import handler

SUPPORTED_TYPES = (ConfigResourceType.TOPIC, ConfigResourceType.BROKER, ConfigResourceType.GROUP,
                   ConfigResourceType.CLIENT_METRICS)


@handler(messages.ListConfigResourcesRequest.API_KEY, 0)
def handle_list_config_resources(ctx, request):
    R = messages.ListConfigResourcesResponse
    if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code, config_resources=[])
    if ctx.api_version == 0:
        return R(throttle_time_ms=0, error_code=0, config_resources=[])  # no client-metrics subscriptions
    wanted = list(request.resource_types) or [int(t) for t in SUPPORTED_TYPES]
    if any(t not in SUPPORTED_TYPES for t in wanted):
        return R(throttle_time_ms=0, error_code=UnsupportedVersionError.code, config_resources=[])
    broker = ctx.broker
    found: list[tuple[int, str]] = []
    if ConfigResourceType.GROUP in wanted:
        found += [(ConfigResourceType.GROUP, g.group_id) for g in broker.coordinator.list_groups()]
    if ConfigResourceType.BROKER in wanted:
        found.append((ConfigResourceType.BROKER, str(broker.config.node_id)))
    if ConfigResourceType.TOPIC in wanted:
        found += [(ConfigResourceType.TOPIC, n) for n in broker.topics.names(internal=True)]
    return R(throttle_time_ms=0, error_code=0,
             config_resources=[R.ConfigResource(resource_name=n, resource_type=int(t)) for t, n in found])
