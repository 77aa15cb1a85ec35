"""Delegation-token requests answered as a Kafka broker without delegation.token.secret.key:
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a connection that could not be trusted with a token
(PLAINTEXT, SSL without a client certificate), DELEGATION_TOKEN_AUTH_DISABLED on any other;
every version each api has, and ApiVersions lists them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kwire.broker.context import RequestContext
from kwire.broker.handlers import HANDLERS
from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import ErrorCode

from .conftest import serve

M = messages
REQUESTS = {
    ApiKey.CREATE_DELEGATION_TOKEN: lambda: M.CreateDelegationTokenRequest(
        max_lifetime_ms=-1,
        renewers=[M.CreateDelegationTokenRequest.CreatableRenewers(principal_type="User", principal_name="bob")]),
    ApiKey.RENEW_DELEGATION_TOKEN: lambda: M.RenewDelegationTokenRequest(hmac=b"x", renew_period_ms=1000),
    ApiKey.EXPIRE_DELEGATION_TOKEN: lambda: M.ExpireDelegationTokenRequest(hmac=b"x", expiry_time_period_ms=-1),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: lambda: M.DescribeDelegationTokenRequest(owners=None),
}


@pytest.mark.parametrize("api_key", list(REQUESTS), ids=lambda k: ApiKey(k).name)
def test_every_version_on_plaintext_is_not_allowed(state, api_key):
    request = REQUESTS[api_key]()
    for version in range(request.MIN_VERSION, request.MAX_VERSION + 1):
        response = serve(state, request, version)
        assert response.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, (api_key, version)
    versions = serve(state, M.ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    listed = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert listed[api_key] == (request.MIN_VERSION, request.MAX_VERSION)


@pytest.mark.parametrize(("protocol", "principal", "error"), [
    ("SASL_PLAINTEXT", "User:alice", ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED),
    ("SASL_SSL", "User:alice", ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED),
    ("SSL", "User:CN=app", ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED),  # two-way TLS: a known client
    ("SSL", "User:ANONYMOUS", ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED),  # one-way TLS
])
def test_a_connection_that_could_hold_a_token_hears_tokens_are_disabled(state, protocol, principal, error):
    for api_key, make in REQUESTS.items():
        ctx = RequestContext(broker=state, api_key=api_key, api_version=2, correlation_id=1, client_id="c",
                             client_host="127.0.0.1:1", connection_id=1,
                             session=SimpleNamespace(principal=principal, host="127.0.0.1"),
                             listener=SimpleNamespace(protocol=protocol))
        assert HANDLERS[api_key].fn(ctx, make()).error_code == error
