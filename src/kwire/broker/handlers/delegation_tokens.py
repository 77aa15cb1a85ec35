"""CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken and DescribeDelegationToken
(KIP-48), answered as a Kafka broker without ``delegation.token.secret.key`` answers them: kwire
issues no delegation tokens, and says so with Kafka's errors rather than UNSUPPORTED_VERSION.

Kafka's order (KafkaApis.allowTokenRequests, then config.tokenAuthEnabled): a request on a
connection that could not be trusted with a token (PLAINTEXT, or SSL without a client
certificate) gets DELEGATION_TOKEN_REQUEST_NOT_ALLOWED; any other DELEGATION_TOKEN_AUTH_DISABLED.
"""

from __future__ import annotations

from typing import Any

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import ErrorCode

from ..auth.principal import ANONYMOUS
from .registry import handler

__all__ = ["token_request_error"]


def token_request_error(ctx) -> int:
    """The error a delegation-token request gets on this connection (tokens being disabled)."""
    protocol = ctx.listener.protocol if ctx.listener is not None else "PLAINTEXT"
    if protocol == "PLAINTEXT" or (protocol == "SSL" and ctx.principal == ANONYMOUS):
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


@handler(ApiKey.CREATE_DELEGATION_TOKEN, 0, 3)
def handle_create_delegation_token(ctx, request: Any) -> Any:
    principal_type, _, principal_name = ctx.principal.partition(":")
    response = messages.CreateDelegationTokenResponse(
        error_code=token_request_error(ctx), principal_type=principal_type, principal_name=principal_name,
        issue_timestamp_ms=-1, expiry_timestamp_ms=-1, max_timestamp_ms=-1, token_id="", hmac=b"", throttle_time_ms=0)
    if ctx.api_version >= 3:  # v3 names who asked for the token (KIP-373), here the same principal
        response.token_requester_principal_type, response.token_requester_principal_name = principal_type, principal_name
    return response


@handler(ApiKey.RENEW_DELEGATION_TOKEN, 0, 2)
def handle_renew_delegation_token(ctx, request: Any) -> Any:
    return messages.RenewDelegationTokenResponse(error_code=token_request_error(ctx), expiry_timestamp_ms=-1,
                                                 throttle_time_ms=0)


@handler(ApiKey.EXPIRE_DELEGATION_TOKEN, 0, 2)
def handle_expire_delegation_token(ctx, request: Any) -> Any:
    return messages.ExpireDelegationTokenResponse(error_code=token_request_error(ctx), expiry_timestamp_ms=-1,
                                                  throttle_time_ms=0)


@handler(ApiKey.DESCRIBE_DELEGATION_TOKEN, 0, 3)
def handle_describe_delegation_token(ctx, request: Any) -> Any:
    return messages.DescribeDelegationTokenResponse(error_code=token_request_error(ctx), tokens=[],
                                                    throttle_time_ms=0)
