"""ListConfigResources (KIP-1000, extended by KIP-1142 in Kafka 4.1): the resources with configs.

Follows Kafka's KafkaApis.handleListConfigResources: DESCRIBE_CONFIGS on the cluster is required;
v0 lists client-metrics subscriptions only; v1 lists the resource types asked for, all five that
v1 knows when none are (topics, brokers, broker loggers, client metrics, groups), and a type
outside those fails the request with UNSUPPORTED_VERSION.  What kwire has of each: every topic,
this broker, the groups that have configs set (Kafka lists those, not every group); no
client-metrics subscriptions and no dynamic log levels (broker loggers), so none of those.
"""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.configs import ConfigResourceType
from kwire.protocol.errors import ClusterAuthorizationFailedError, ErrorCode, UnsupportedVersionError

from ..auth.acls import AclOperation, ResourceType
from .registry import handler

V1_TYPES = (ConfigResourceType.TOPIC, ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER,
            ConfigResourceType.CLIENT_METRICS, ConfigResourceType.GROUP)


@handler(messages.ListConfigResourcesRequest.API_KEY, 0)
def handle_list_config_resources(ctx, request):
    R = messages.ListConfigResourcesResponse
    if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code, config_resources=[])
    if ctx.api_version == 0:
        return R(throttle_time_ms=0, error_code=ErrorCode.NONE, config_resources=[])  # no client-metrics subscriptions
    wanted = list(request.resource_types) or [int(t) for t in V1_TYPES]
    if any(t not in V1_TYPES for t in wanted):
        return R(throttle_time_ms=0, error_code=UnsupportedVersionError.code, config_resources=[])
    broker = ctx.broker
    found: list[tuple[int, str]] = []
    if ConfigResourceType.BROKER in wanted:
        found.append((ConfigResourceType.BROKER, str(broker.config.node_id)))
    if ConfigResourceType.TOPIC in wanted:
        found += [(ConfigResourceType.TOPIC, n) for n in broker.topics.names(internal=True)]
    if ConfigResourceType.GROUP in wanted:
        found += [(ConfigResourceType.GROUP, g) for g in broker.group_configs.groups()]
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE,
             config_resources=[R.ConfigResource(resource_name=n, resource_type=int(t)) for t, n in found])
