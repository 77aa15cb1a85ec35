"""Whole Kafka frames: size prefix, request/response header, message body.

The header version follows from (api key, api version): flexible versions use request header v2
and response header v1, others v1 and v0.  Two exceptions, as in Kafka: ApiVersions responses
always use response header v0 (a client must read the error before it knows what the broker
speaks), and ControlledShutdown v0 uses request header v0 (no client id).  The generator writes
each API's header versions into ``ApiInfo``; this module reads them from there.

Frame bodies passed to the decoders exclude the 4-byte size prefix (what ``FrameSplitter`` yields);
the encoders return complete frames including it.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import cast

from .codec import Codec
from .errors import DecodeError, ProtocolError, UnknownApiVersionError
from .generated.api_keys import API_INFO, ApiInfo, ApiKey
from .generated.headers import RequestHeader, ResponseHeader
from .message_base import Request, Response, request_class, response_class
from .primitives import Buffer  # a frame body as the splitter or a socket hands it over
from .schema import REQUEST_NAMES
from .splice import GatherBuffer, SpliceBuffer, SplicedBytes

__all__ = [
    "RequestHeader", "ResponseHeader", "correlation_id_of_response", "decode_request", "decode_request_header",
    "decode_response", "encode_request", "encode_request_parts", "encode_response", "encode_response_parts",
    "request_header_version", "response_header_version",
]

# The names these api keys had here before ApiKey (kept for existing imports).
API_VERSIONS_KEY = ApiKey.API_VERSIONS
CONTROLLED_SHUTDOWN_KEY = ApiKey.CONTROLLED_SHUTDOWN

_SIZE = struct.Struct(">i")
_HEADER_V1_FIXED = struct.Struct(">hhi")


def _api_info(api_key: int) -> ApiInfo:
    try:
        return API_INFO[api_key]
    except KeyError:
        raise UnknownApiVersionError(f"unknown api key {api_key}") from None


def _header_version(spans: tuple[tuple[int, int, int], ...], api_version: int, not_flexible: int) -> int:
    for first, last, header_version in spans:
        if first <= api_version <= last:
            return header_version
    return not_flexible  # a version kwire lacks is read as not flexible


def request_header_version(api_key: int, api_version: int) -> int:
    """The request header version a request of this api key and version carries."""
    return _header_version(_api_info(api_key).request_header_versions, api_version, 1)


def response_header_version(api_key: int, api_version: int) -> int:
    """The response header version a response of this api key and version carries."""
    return _header_version(_api_info(api_key).response_header_versions, api_version, 0)


def encode_request(request: Request[Response], version: int, correlation_id: int, client_id: str | None = "kwire") -> bytes:
    """A complete request frame: size, header, body."""
    out = bytearray(4)
    _encode_request_into(out, request, version, correlation_id, client_id)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_request_parts(request: Request[Response], version: int, correlation_id: int,
                         client_id: str | None = "kwire") -> list[Buffer | SplicedBytes]:
    """A request frame in pieces: the encoded fields around its large records values, which are
    the caller's own objects, not copies (``socket.sendmsg(parts)`` writes the frame, and a
    megabyte of record batches is not copied twice as by ``encode_request``).  The size prefix
    counts them; without records the frame is one piece."""
    out = GatherBuffer()
    out += b"\0\0\0\0"
    _encode_request_into(out, request, version, correlation_id, client_id)
    _SIZE.pack_into(out, 0, out.total_size - 4)
    return out.parts() if out.splices else [bytes(out)]


def _encode_request_into(out: bytearray, request: Request[Response], version: int, correlation_id: int,
                         client_id: str | None) -> None:
    body = type(request).codec(version)
    hv = request_header_version(request.API_KEY, version)
    header = RequestHeader(request_api_key=request.API_KEY, request_api_version=version,
                           correlation_id=correlation_id)
    if hv > 0:  # header v0 (ControlledShutdown v0) has no client id
        header.client_id = client_id
    RequestHeader.codec(hv).encode(header, out)
    body.encode(request, out)


# Every request a broker serves asks for these two; bounded, since the key and version come
# from the peer (or from a capture) and may be anything.
@lru_cache(maxsize=4096)
def _request_header_codec(api_key: int, api_version: int) -> Codec:
    """The header codec for requests of this api key and version (header v1 for those kwire
    does not know)."""
    known = api_key in REQUEST_NAMES and request_class(api_key).has_version(api_version)
    return RequestHeader.codec(request_header_version(api_key, api_version) if known else 1)


@lru_cache(maxsize=4096)
def _response_header_codec(api_key: int, api_version: int) -> Codec:
    return ResponseHeader.codec(response_header_version(api_key, api_version))


def decode_request_header(frame: Buffer) -> tuple[RequestHeader, int]:
    """The header of a request frame body and the offset where the request body starts.

    Works for api keys and versions kwire does not know (so a broker can still answer them with
    UNSUPPORTED_VERSION): those are read as header v1, the layout every Kafka client sends for
    the fields that matter (api key, version, correlation id, client id).
    """
    if len(frame) < 8:
        raise DecodeError(f"a request needs at least 8 bytes of header, got {len(frame)}", what="RequestHeader")
    api_key, api_version, _ = _HEADER_V1_FIXED.unpack_from(frame, 0)
    header, offset = _request_header_codec(api_key, api_version).decode(frame, 0, strict=False)
    return header, offset


def decode_request(frame: Buffer, *, strict: bool = True) -> tuple[RequestHeader, Request[Response]]:
    """Header and typed request from a frame body (no size prefix)."""
    header, offset = decode_request_header(frame)
    if header.request_api_key not in REQUEST_NAMES:
        raise UnknownApiVersionError(
            f"unknown api key {header.request_api_key} (version {header.request_api_version})", what="request")
    cls = request_class(header.request_api_key)
    body = cls.codec(header.request_api_version)
    try:
        request, _ = body.decode(frame, offset, strict=strict)
    except ProtocolError as e:
        if e.offset is not None:
            e.offset -= offset
        raise
    return header, request


def encode_response(response: Response, version: int, correlation_id: int) -> bytes:
    """A complete response frame: size, header, body."""
    body = type(response).codec(version)
    out = bytearray(4)
    hv = response_header_version(response.API_KEY, version)
    ResponseHeader.codec(hv).encode(ResponseHeader(correlation_id=correlation_id), out)
    body.encode(response, out)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response_parts(response: Response, version: int, correlation_id: int) -> list[bytes | SplicedBytes]:
    """A response frame in pieces: encoded bytes around any ``SplicedBytes`` records values.

    The size prefix counts the spliced bytes, so sending the pieces in order is the whole frame.
    Without splices this is ``[encode_response(...)]``.
    """
    out = SpliceBuffer()
    out += b"\0\0\0\0"
    _response_header_codec(response.API_KEY, version).encode(ResponseHeader(correlation_id=correlation_id), out)
    type(response).codec(version).encode(response, out)
    _SIZE.pack_into(out, 0, out.total_size - 4)
    # (a SpliceBuffer keeps only SplicedBytes out: its other pieces are bytes)
    return cast("list[bytes | SplicedBytes]", out.parts()) if out.splices else [bytes(out)]


def decode_response(frame: Buffer, api_key: int, version: int, *, strict: bool = True,
                    record_views: bool = False, forgive_null_arrays: bool = False
                    ) -> tuple[ResponseHeader, Response]:
    """Header and typed response from a frame body, given the request's api key and version.

    ``record_views``: ``records`` fields are memoryviews of ``frame`` rather than copies;
    ``forgive_null_arrays``: a null array the version forbids reads as empty (see
    ``Codec.decode``)."""
    if api_key not in REQUEST_NAMES:
        raise UnknownApiVersionError(f"unknown api key {api_key} (version {version})", what="response")
    cls = response_class(api_key)
    if not cls.has_version(version):
        raise UnknownApiVersionError(f"no version {version}", what=cls.__name__)
    header, offset = ResponseHeader.codec(response_header_version(api_key, version)).decode(frame, 0, strict=False)
    response, _ = cls.codec(version).decode(frame, offset, strict=strict, record_views=record_views,
                                            forgive_null_arrays=forgive_null_arrays)
    return header, response


def correlation_id_of_response(frame: Buffer) -> int:
    """The correlation id of a response frame body (the first field of every response header)."""
    if len(frame) < 4:
        raise DecodeError("a response needs at least 4 bytes", what="ResponseHeader")
    correlation_id: int = _SIZE.unpack_from(frame, 0)[0]
    return correlation_id
