"""GetTelemetrySubscriptions and PushTelemetry (KIP-714) as a broker without a metrics plugin.

Kafka's ClientMetricsManager answers them even with no ClientTelemetryReceiver configured: a client
gets an instance id (a new one when it sends the zero id) and a subscription with no requested
metrics, the default push interval (5 minutes), the accepted compression types and the
telemetry.max.bytes limit; pushes are checked (instance and subscription known, compression
accepted, size) and their metrics dropped, there being nobody to export them to.  ApiVersions does
not advertise the two APIs (see api_versions.py), as Kafka without a telemetry plugin does.
"""

from __future__ import annotations

import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from kwire.protocol import messages
from kwire.protocol.errors import (
    InvalidRequestError,
    TelemetryTooLargeError,
    UnknownSubscriptionIdError,
    UnsupportedCompressionTypeError,
)
from kwire.protocol.records.compression import Compression

from .registry import handler

DEFAULT_PUSH_INTERVAL_MS = 5 * 60 * 1000  # Kafka's interval when no subscription matches the client
TELEMETRY_MAX_BYTES = 1024 * 1024  # Kafka's telemetry.max.bytes default
# Kafka's order of preference; NONE is always accepted besides.
ACCEPTED_COMPRESSION = (Compression.ZSTD, Compression.LZ4, Compression.GZIP, Compression.SNAPPY)
MAX_CLIENT_INSTANCES = 16384  # Kafka's client instance cache size
_ZERO = uuid.UUID(int=0)


@dataclass(slots=True)
class _Instance:
    subscription_id: int
    terminating: bool = False


_INSTANCES: WeakKeyDictionary = WeakKeyDictionary()


def _instances(broker) -> OrderedDict:
    found = _INSTANCES.get(broker)
    if found is None:
        found = _INSTANCES[broker] = OrderedDict()
    return found


def _subscription_id(instance_id: uuid.UUID) -> int:
    """As Kafka: a hash of the (empty) metric list, the push interval and the instance id."""
    digest = zlib.crc32(f"[],{DEFAULT_PUSH_INTERVAL_MS},{instance_id}".encode())
    return digest - (1 << 32) if digest >= 1 << 31 else digest


@handler(messages.GetTelemetrySubscriptionsRequest.API_KEY, 0)
def handle_get_telemetry_subscriptions(ctx, request):
    R = messages.GetTelemetrySubscriptionsResponse
    instance_id = request.client_instance_id if request.client_instance_id != _ZERO else uuid.uuid4()
    instances = _instances(ctx.broker)
    instance = instances.get(instance_id)
    if instance is None:
        instance = instances[instance_id] = _Instance(_subscription_id(instance_id))
        while len(instances) > MAX_CLIENT_INSTANCES:
            instances.popitem(last=False)
    instances.move_to_end(instance_id)
    return R(throttle_time_ms=0, error_code=0, client_instance_id=instance_id, subscription_id=instance.subscription_id,
             accepted_compression_types=[int(c) for c in ACCEPTED_COMPRESSION], push_interval_ms=DEFAULT_PUSH_INTERVAL_MS,
             telemetry_max_bytes=TELEMETRY_MAX_BYTES, delta_temporality=True, requested_metrics=[])


@handler(messages.PushTelemetryRequest.API_KEY, 0)
def handle_push_telemetry(ctx, request):
    R = messages.PushTelemetryResponse
    code = 0
    instance = _instances(ctx.broker).get(request.client_instance_id)
    if request.client_instance_id == _ZERO:
        code = InvalidRequestError.code
    elif instance is None or instance.subscription_id != request.subscription_id:
        code = UnknownSubscriptionIdError.code
    elif instance.terminating:
        code = InvalidRequestError.code  # Kafka: nothing may follow a terminating push
    elif request.compression_type != Compression.NONE and request.compression_type not in ACCEPTED_COMPRESSION:
        code = UnsupportedCompressionTypeError.code
    elif request.metrics is not None and len(request.metrics) > TELEMETRY_MAX_BYTES:
        code = TelemetryTooLargeError.code
    elif request.terminating:
        instance.terminating = True
    # The metrics themselves are dropped: no receiver plugin to hand them to.
    return R(throttle_time_ms=0, error_code=code)
