"""ApiVersions: what this broker speaks, exactly the handlers' registered version ranges."""

from __future__ import annotations

from kwire.protocol import messages
from kwire.protocol.errors import UnsupportedVersionError

from .registry import handler, supported_versions

API_VERSIONS = 18
Response = messages.ApiVersionsResponse


def api_versions_response(error_code: int = 0) -> Response:
    """The response body; also sent (at v0) when a client asks for a version we lack (KIP-511)."""
    keys = [Response.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in supported_versions().items()]
    return Response(error_code=error_code, api_keys=keys, throttle_time_ms=0)


def unsupported_version_response() -> Response:
    """KIP-511: a client asking for a newer ApiVersions than ours gets our list at v0, with
    UNSUPPORTED_VERSION, and retries with the highest version in it."""
    return api_versions_response(UnsupportedVersionError.code)


@handler(API_VERSIONS, 0, 4)
def handle_api_versions(ctx, request) -> Response:
    return api_versions_response()
