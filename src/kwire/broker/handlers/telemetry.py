"""GetTelemetrySubscriptions and PushTelemetry (KIP-714) as a broker without a metrics plugin.

Follows Kafka's ClientMetricsManager, which answers them even with no ClientTelemetryReceiver
configured: a client gets an instance id (a new one when it sends the zero id) and, there being no
client-metrics subscriptions here, no requested metrics, the default push interval (5 minutes),
the accepted compression types and the telemetry.max.bytes limit.  Requests sooner than the push
interval are THROTTLING_QUOTA_EXCEEDED (a push right after a GetTelemetrySubscriptions is
accepted), nothing may follow a terminating push (INVALID_REQUEST), a push for another
subscription id is UNKNOWN_SUBSCRIPTION_ID, an unknown compression UNSUPPORTED_COMPRESSION_TYPE and
too many bytes TELEMETRY_TOO_LARGE; accepted metrics are dropped, with nobody to export them to.
ApiVersions does not advertise the two APIs (see api_versions.py), as Kafka without a telemetry
plugin does.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from crc32c import crc32c

from kwire.protocol import messages
from kwire.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    TelemetryTooLargeError,
    ThrottlingQuotaExceededError,
    UnknownSubscriptionIdError,
    UnsupportedCompressionTypeError,
)
from kwire.protocol.records.compression import Compression

from .registry import handler

DEFAULT_PUSH_INTERVAL_MS = 5 * 60 * 1000  # Kafka's interval when no subscription matches the client
TELEMETRY_MAX_BYTES = 1024 * 1024  # Kafka's telemetry.max.bytes default
ACCEPTED_COMPRESSION = (Compression.ZSTD, Compression.LZ4, Compression.GZIP, Compression.SNAPPY)  # Kafka's order
CACHE_EXPIRY_MS = 60 * 1000  # Kafka keeps an instance max(this, 3 push intervals) after its last request
MAX_CLIENT_INSTANCES = 16384  # Kafka's client instance cache size
_ZERO = uuid.UUID(int=0)
_METADATA_TOPIC_ID = uuid.UUID(int=1)  # with the zero id, the ids Kafka reserves


@dataclass(slots=True)
class _Instance:
    subscription_id: int
    last_get_ms: int = 0
    last_push_ms: int = 0
    last_seen_ms: int = 0
    terminating: bool = False

    def may_get(self, now: int) -> bool:
        if now - max(self.last_get_ms, self.last_push_ms) < DEFAULT_PUSH_INTERVAL_MS:
            return False
        self.last_get_ms = now
        return True

    def may_push(self, now: int) -> bool:
        # A push right after a GetTelemetrySubscriptions is accepted whatever the time: clients
        # jitter their first push between half and one and a half intervals.
        ok = self.last_get_ms > self.last_push_ms or \
            now - max(self.last_get_ms, self.last_push_ms) >= DEFAULT_PUSH_INTERVAL_MS
        if ok:
            self.last_push_ms = now
        return ok


_INSTANCES: WeakKeyDictionary = WeakKeyDictionary()


def _java_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _subscription_id(instance_id: uuid.UUID) -> int:
    """As Kafka: CRC32C of the metric list and push interval, XOR the instance id's Java hash."""
    crc = crc32c(f"[]{DEFAULT_PUSH_INTERVAL_MS}".encode())
    both = (instance_id.int >> 64) ^ (instance_id.int & 0xFFFFFFFFFFFFFFFF)
    return _java_int(_java_int(crc) ^ _java_int((both >> 32) ^ both))


def _instance(broker, instance_id: uuid.UUID, now: int) -> _Instance:
    instances = _INSTANCES.get(broker)
    if instances is None:
        instances = _INSTANCES[broker] = OrderedDict()
    keep_ms = max(CACHE_EXPIRY_MS, 3 * DEFAULT_PUSH_INTERVAL_MS)
    while instances:  # forget instances not heard of for a while, the oldest first
        oldest = next(iter(instances.values()))
        if now - oldest.last_seen_ms < keep_ms and len(instances) < MAX_CLIENT_INSTANCES:
            break
        instances.popitem(last=False)
    found = instances.pop(instance_id, None) or _Instance(_subscription_id(instance_id))
    found.last_seen_ms = now
    instances[instance_id] = found
    return found


@handler(messages.GetTelemetrySubscriptionsRequest.API_KEY, 0)
def handle_get_telemetry_subscriptions(ctx, request):
    R = messages.GetTelemetrySubscriptionsResponse
    now = int(time.time() * 1000)
    instance_id = request.client_instance_id if request.client_instance_id != _ZERO else uuid.uuid4()
    instance = _instance(ctx.broker, instance_id, now)
    if not instance.may_get(now):
        return R(throttle_time_ms=0, error_code=ThrottlingQuotaExceededError.code, client_instance_id=_ZERO,
                 subscription_id=0, accepted_compression_types=[], push_interval_ms=0, telemetry_max_bytes=0,
                 delta_temporality=False, requested_metrics=[])
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, client_instance_id=instance_id, subscription_id=instance.subscription_id,
             accepted_compression_types=[int(c) for c in ACCEPTED_COMPRESSION], push_interval_ms=DEFAULT_PUSH_INTERVAL_MS,
             telemetry_max_bytes=TELEMETRY_MAX_BYTES, delta_temporality=True, requested_metrics=[])


@handler(messages.PushTelemetryRequest.API_KEY, 0)
def handle_push_telemetry(ctx, request):
    R = messages.PushTelemetryResponse
    if request.client_instance_id in (_ZERO, _METADATA_TOPIC_ID):
        return R(throttle_time_ms=0, error_code=InvalidRequestError.code)
    now = int(time.time() * 1000)
    instance = _instance(ctx.broker, request.client_instance_id, now)
    code = 0
    try:
        if instance.terminating:
            raise InvalidRequestError("nothing may follow a terminating push")
        if not instance.may_push(now) and not request.terminating:
            raise ThrottlingQuotaExceededError("push before the next push interval")
        if request.subscription_id != instance.subscription_id:
            raise UnknownSubscriptionIdError("unknown client subscription id")
        if request.compression_type != Compression.NONE and request.compression_type not in ACCEPTED_COMPRESSION:
            raise UnsupportedCompressionTypeError(f"unknown compression type {request.compression_type}")
        if request.metrics is not None and len(request.metrics) > TELEMETRY_MAX_BYTES:
            raise TelemetryTooLargeError(f"more than {TELEMETRY_MAX_BYTES} bytes of metrics")
    except KafkaError as exc:
        code = exc.code
    finally:
        instance.terminating = bool(request.terminating)
    # Accepted metrics are dropped: no receiver plugin to hand them to.
    return R(throttle_time_ms=0, error_code=code)
