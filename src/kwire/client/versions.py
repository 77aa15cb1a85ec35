"""The ApiVersions exchange and the choice of a request's version, without I/O: what
``BrokerConnection`` (asyncio) and the blocking producer's connections both do on open.

A client asks ApiVersions in the newest version it speaks (KIP-511); a broker that does not know
it answers in v0 with its own range, and the client asks again in the newest both speak.  Then
every request goes at the highest version the broker, the codec and the caller all speak.
"""

from __future__ import annotations

from kwire import __version__
from kwire.protocol import ApiKey, messages
from kwire.protocol.connection import ResponseReceived, api_versions_retry
from kwire.protocol.errors import DecodeError, UnsupportedVersionError
from kwire.protocol.schema import api_name, api_versions

from .errors import BrokerConnectionError, UnsupportedApiError

__all__ = ["API_VERSIONS_ATTEMPTS", "VersionRange", "api_versions_request", "common_version", "decode_api_versions",
           "first_api_versions", "read_api_versions"]

VersionRange = tuple[int, int]
# The newest version, then the broker's (KIP-511), then v0: three answers at most.
API_VERSIONS_ATTEMPTS = 3


def first_api_versions() -> int:
    """The ApiVersions version a client asks first: its newest."""
    return api_versions(ApiKey.API_VERSIONS)[1]


def api_versions_request() -> messages.ApiVersionsRequest:
    """kwire's ApiVersions request (KIP-511 names the client software)."""
    return messages.ApiVersionsRequest(client_software_name="kwire", client_software_version=__version__)


def decode_api_versions(event: ResponseReceived) -> messages.ApiVersionsResponse:
    """An ApiVersions answer; a broker that lacks our version answers in v0 (KIP-511), which the
    machine reads.  One that answers in neither layout (librdkafka's mock writes its refusal so)
    reads as a refusal that names no versions, so that the next attempt is v0."""
    try:
        response = event.decode()
    except DecodeError:
        if event.api_version == 0:
            raise
        return messages.ApiVersionsResponse(error_code=UnsupportedVersionError.code, api_keys=[])
    assert isinstance(response, messages.ApiVersionsResponse)  # the machine decodes by the request's key
    return response


def read_api_versions(response: messages.ApiVersionsResponse, version: int, where: str
                      ) -> int | tuple[dict[int, VersionRange], dict[str, int]]:
    """The broker's ranges per api key and its finalized features (KIP-584), or the version to
    ask again in (an int).  ``BrokerConnectionError`` for a refusal that is not about the version."""
    retry = api_versions_retry(response, version)
    if retry is not None:
        # KIP-511: the broker answered in v0 with the versions it has; ask again in its newest
        # (or in v0 when its answer could not be read).
        return retry
    if response.error_code:
        raise BrokerConnectionError(f"{where} refused ApiVersions with error code {response.error_code}")
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    features = {f.name: f.max_version_level for f in getattr(response, "finalized_features", None) or ()}
    return ranges, features


def common_version(broker_versions: dict[int, VersionRange], api_key: int, low: int, high: int | None,
                   where: str) -> int:
    """The highest version of ``api_key`` that the broker, the codec and the caller all speak."""
    ours = api_versions(api_key)
    lo = max(ours[0], low)
    hi = ours[1] if high is None else min(ours[1], high)
    theirs = broker_versions.get(api_key)
    if theirs is None:
        raise UnsupportedApiError(f"broker {where} does not support {api_name(api_key)}")
    best = min(hi, theirs[1])
    if best < max(lo, theirs[0]):
        raise UnsupportedApiError(
            f"no common version of {api_name(api_key)}: the broker speaks {theirs[0]}-{theirs[1]}, "
            f"kwire {lo}-{hi}")
    return best
