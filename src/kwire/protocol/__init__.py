"""Kafka's wire protocol, sans-IO: messages, headers, frames, records and error codes.

Nothing here opens a socket: the client, the broker and the analyzer feed bytes in and take bytes
or typed messages out.

    from kwire.protocol import messages, encode_request, decode_response, FrameSplitter
    frame = encode_request(messages.ApiVersionsRequest(), version=3, correlation_id=1)
    ...
    for body in splitter.feed(received):
        header, response = decode_response(body, api_key=ApiKey.API_VERSIONS, version=3)
"""

from . import messages
from .errors import (
    CorruptRecordError,
    DecodeError,
    EncodeError,
    ErrorCode,
    FrameTooLargeError,
    KafkaError,
    ProtocolError,
    UnknownApiVersionError,
    error_name,
    raise_for_code,
)
from .frames import (
    RequestHeader,
    ResponseHeader,
    correlation_id_of_response,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
    request_header_version,
    response_header_version,
)
from .framing import DEFAULT_MAX_FRAME_SIZE, FrameSplitter
from .generated.api_keys import API_INFO, ApiInfo, ApiKey
from .messages import Message, Request, Response, message_class, request_class, response_class
from .schema import API_KEYS, api_key_for, api_name, api_versions
from .splice import SplicedBytes

__all__ = [
    "API_INFO",
    "API_KEYS",
    "ApiInfo",
    "ApiKey",
    "DEFAULT_MAX_FRAME_SIZE",
    "CorruptRecordError",
    "DecodeError",
    "EncodeError",
    "ErrorCode",
    "FrameSplitter",
    "FrameTooLargeError",
    "KafkaError",
    "Message",
    "ProtocolError",
    "Request",
    "RequestHeader",
    "Response",
    "ResponseHeader",
    "SplicedBytes",
    "UnknownApiVersionError",
    "api_key_for",
    "api_name",
    "api_versions",
    "correlation_id_of_response",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "error_name",
    "message_class",
    "messages",
    "raise_for_code",
    "request_class",
    "request_header_version",
    "response_class",
    "response_header_version",
]
