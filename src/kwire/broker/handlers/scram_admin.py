"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) on the credential store
behind ``kwire users``: a credential altered here is the one the next SASL login checks.

Follows Kafka: describing needs DESCRIBE on the cluster (KafkaApis; ScramPublisher's view of the
credentials), altering needs ALTER on it (ControllerApis, ScramControlManager.alterCredentials),
with Kafka's per-user errors: RESOURCE_NOT_FOUND for a user or credential that does not exist,
DUPLICATE_RESOURCE for a user named twice, UNSUPPORTED_SASL_MECHANISM for an unknown mechanism,
UNACCEPTABLE_CREDENTIAL for an empty name or an iteration count outside 4096-16384.  Each user
may be changed once per request.
"""

from __future__ import annotations

import hashlib
import hmac

from kwire.protocol import messages
from kwire.protocol.admin import ScramMechanism
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    DuplicateResourceError,
    ErrorCode,
    KafkaError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from kwire.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, ScramCredential

from ..auth.acls import AclOperation, ResourceType
from ..auth.credentials import check_username
from .registry import handler

__all__ = ["credential_from_salted_password"]


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The stored form (RFC 5802: StoredKey = H(HMAC(salted, "Client Key")), ServerKey =
    HMAC(salted, "Server Key")) of what an AlterUserScramCredentials upsertion carries."""
    hash_name = MECHANISMS[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", hash_name).digest()
    return ScramCredential(mechanism, bytes(salt), hashlib.new(hash_name, client_key).digest(),
                           hmac.new(salted_password, b"Server Key", hash_name).digest(), iterations)


def _mechanism(code: int) -> str:
    try:
        mechanism = ScramMechanism(code)
    except ValueError:
        mechanism = ScramMechanism.UNKNOWN
    if mechanism == ScramMechanism.UNKNOWN:
        raise UnsupportedSaslMechanismError("Unknown SCRAM mechanism")
    return mechanism.sasl_name


@handler(messages.DescribeUserScramCredentialsRequest.API_KEY, 0)
def handle_describe_user_scram_credentials(ctx, request):
    R = messages.DescribeUserScramCredentialsResponse
    Result = R.DescribeUserScramCredentialsResult
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code,
                 error_message="Cluster authorization failed.", results=[])
    store = ctx.broker.security.credentials

    def infos(name: str):
        return [Result.CredentialInfo(mechanism=ScramMechanism[m.replace("-", "_")], iterations=i)
                for m, i in sorted(store.iterations(name).items())]

    users = store.users()
    results = []
    if not request.users:  # null or empty: every user with a credential
        results = [Result(user=n, error_code=ErrorCode.NONE, error_message=None, credential_infos=infos(n)) for n in users]
    else:
        names = [u.name for u in request.users]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(Result(user=name, error_code=DuplicateResourceError.code,
                                      error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                                    f"single request: {name}", credential_infos=[]))
            elif name not in users:
                results.append(Result(user=name, error_code=ResourceNotFoundError.code,
                                      error_message=f"Attempt to describe a user credential that does not exist: "
                                                    f"{name}", credential_infos=[]))
            else:
                results.append(Result(user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=infos(name)))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results)


@handler(messages.AlterUserScramCredentialsRequest.API_KEY, 0)
def handle_alter_user_scram_credentials(ctx, request):
    """As Kafka's ScramControlManager.alterCredentials: one change per user and request (a second
    one, of any mechanism, fails the user with DUPLICATE_RESOURCE), deletions checked before
    upsertions, the successful deletions, then upsertions, then the failures in the answer."""
    R = messages.AlterUserScramCredentialsResponse
    Result = R.AlterUserScramCredentialsResult
    store = ctx.broker.security.credentials
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER):
        users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
        return R(throttle_time_ms=0, results=[
            Result(user=u, error_code=ClusterAuthorizationFailedError.code,
                   error_message="Cluster authorization failed.") for u in users])
    deletions: dict[str, str] = {}  # user -> mechanism
    upserts: dict[str, ScramCredential] = {}
    errors: dict[str, KafkaError] = {}
    twice = "A user credential cannot be altered twice in the same request"
    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = DuplicateResourceError(twice)
            continue
        try:
            mechanism = _check_user_and_mechanism(d.name, d.mechanism)
            if mechanism not in store.iterations(d.name):
                raise ResourceNotFoundError("Attempt to delete a user credential that does not exist")
            deletions[d.name] = mechanism
        except KafkaError as exc:
            errors[d.name] = exc
    for u in request.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            errors[u.name] = DuplicateResourceError(twice)
            continue
        try:
            mechanism = _check_user_and_mechanism(u.name, u.mechanism)
            if u.iterations < MIN_ITERATIONS:
                raise UnacceptableCredentialError("Too few iterations")
            if u.iterations > MAX_ITERATIONS:
                raise UnacceptableCredentialError("Too many iterations")
            upserts[u.name] = credential_from_salted_password(mechanism, u.salt, u.salted_password, u.iterations)
        except KafkaError as exc:
            errors[u.name] = exc
    for user, mechanism in deletions.items():
        store.change_user(user, delete=[mechanism])
    for user, credential in upserts.items():
        store.change_user(user, upsert=[credential])
    results = [Result(user=n, error_code=ErrorCode.NONE, error_message=None) for n in [*deletions, *upserts]]
    results += [Result(user=n, error_code=e.code, error_message=e.message) for n, e in errors.items()]
    return R(throttle_time_ms=0, results=results)


def _check_user_and_mechanism(user: str, code: int) -> str:
    if not user:
        raise UnacceptableCredentialError("Username must not be empty")
    try:
        check_username(user)  # what kwire's credential store can keep (Kafka has no such limit)
    except ValueError as exc:
        raise UnacceptableCredentialError(str(exc)) from None
    return _mechanism(code)
