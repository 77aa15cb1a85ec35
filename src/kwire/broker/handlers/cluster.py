"""DescribeCluster: this one broker, which is also the controller."""

from __future__ import annotations

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import ErrorCode, UnsupportedEndpointTypeError

from ..auth.acls import ResourceType
from .authorized_ops import authorized_operations
from .common import NO_AUTHORIZED_OPERATIONS
from .registry import handler

BROKERS_ENDPOINT = 1


@handler(ApiKey.DESCRIBE_CLUSTER, 0)
def handle_describe_cluster(ctx, request):
    R = messages.DescribeClusterResponse
    broker = ctx.broker
    host, port = ctx.advertised
    node = broker.config.node_id
    resp = R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, endpoint_type=BROKERS_ENDPOINT,
             cluster_id=broker.cluster_id, controller_id=node,
             brokers=[R.DescribeClusterBroker(broker_id=node, host=host, port=port, rack=None, is_fenced=False)],
             cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS)
    if request.include_cluster_authorized_operations:
        # Kafka's KafkaApis.handleDescribeCluster: the operations the ACLs allow on the cluster.
        resp.cluster_authorized_operations = authorized_operations(ctx, ResourceType.CLUSTER)
    if ctx.api_version >= 1 and request.endpoint_type != BROKERS_ENDPOINT:
        # Controllers are not a separate endpoint here (Kafka answers brokers-only listeners the same way).
        resp.error_code = UnsupportedEndpointTypeError.code
        resp.error_message = f"endpoint type {request.endpoint_type} is not served by this broker"
        resp.brokers = []
    return resp
