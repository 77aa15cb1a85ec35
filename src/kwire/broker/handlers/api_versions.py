"""ApiVersions: what this broker speaks, exactly the handlers' registered version ranges, and its
feature versions (KIP-584, v3+).

As Kafka's ApiVersionsResponse.collectApis without a client telemetry plugin, the telemetry APIs
(KIP-714) are served but not advertised, so that clients do not start collecting metrics nobody
receives.
"""

from __future__ import annotations

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import UnsupportedVersionError

from .features import SUPPORTED, features_of
from .registry import handler, supported_versions

Response = messages.ApiVersionsResponse
# Served without being advertised (see the module's docstring).
UNADVERTISED = frozenset({messages.GetTelemetrySubscriptionsRequest.API_KEY, messages.PushTelemetryRequest.API_KEY})


def api_versions_response(error_code: int = 0) -> Response:
    """The response body; also sent (at v0) when a client asks for a version we lack (KIP-511)."""
    keys = [Response.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in supported_versions().items() if k not in UNADVERTISED]
    return Response(error_code=error_code, api_keys=keys, throttle_time_ms=0)


def unsupported_version_response() -> Response:
    """KIP-511: a client asking for a newer ApiVersions than ours gets our list at v0, with
    UNSUPPORTED_VERSION, and retries with the highest version in it."""
    return api_versions_response(UnsupportedVersionError.code)


# The name the dispatcher imports (ApiVersions is answered even for versions it lacks).
API_VERSIONS = ApiKey.API_VERSIONS


@handler(API_VERSIONS, 0, 4)
def handle_api_versions(ctx, request) -> Response:
    resp = api_versions_response()
    if ctx.api_version >= 3:
        finalized = features_of(ctx.broker).current()
        # KIP-1022: v4 may say a feature's min level is 0; to v3 a range 0..0 is left out and 0..n is 1..n.
        ranges = SUPPORTED.items() if ctx.api_version >= 4 else \
            [(n, (max(lo, 1), hi)) for n, (lo, hi) in SUPPORTED.items() if hi > 0]
        resp.supported_features = [Response.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                                   for n, (lo, hi) in ranges]
        resp.finalized_features_epoch = finalized.epoch
        # Kafka reports a finalized feature's min level as its max (KIP-778 dropped the min).
        resp.finalized_features = [Response.FinalizedFeatureKey(name=n, max_version_level=lvl, min_version_level=lvl)
                                   for n, lvl in sorted(finalized.levels.items())]
        resp.zk_migration_ready = False
    return resp
