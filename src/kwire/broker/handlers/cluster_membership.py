"""UnregisterBroker (KIP-631), AddRaftVoter and RemoveRaftVoter (KIP-853): changes to who is in
the cluster, answered as a one-node Kafka 4.3 (combined broker and controller) answers them
through its broker listener.

A Kafka broker forwards all three to the controller (KafkaApis: forwardToController), whose
ControllerApis checks ALTER on the CLUSTER first (CLUSTER_AUTHORIZATION_FAILED).  Then:

- UnregisterBroker: QuorumController.unregisterBroker -> ReplicationControlManager.unregisterBroker.
  An id with no registration gets BROKER_ID_NOT_REGISTERED, with no message (ControllerApis sets only
  the code).  The only registered broker is this node: Kafka writes an UnregisterBrokerRecord and
  answers NONE, although the live node then drops out of the cluster until it restarts (its
  heartbeats fail; BrokerRegistrationTracker does not re-register a missing registration).  kwire
  answers NONE too but its node stays registered: its registration is its own configuration, and a
  one-node cluster left without a broker would serve nobody (the log line says so).
- AddRaftVoter / RemoveRaftVoter: KafkaRaftClient.handleAddVoterRequest / handleRemoveVoterRequest
  on the quorum's leader, in their order: a cluster id that is not null and not this cluster's
  (INCONSISTENT_CLUSTER_ID); a negative voter id or the zero directory id (INVALID_REQUEST); for an
  add, no endpoint for the quorum's default listener (INVALID_REQUEST); then AddVoterHandler /
  RemoveVoterHandler refuse any change while ``kraft.version`` is 0 (UNSUPPORTED_VERSION).

kraft.version 0 is what this node reports (features.py: supported 0-0, so never finalized; and
DescribeQuorum's voter has the zero directory id): the quorum of a Kafka node started with a static
``controller.quorum.voters``, which KIP-853 never reconfigures.  A node formatted ``--standalone``
would have kraft.version 1 and a directory id, and could add voters; kwire's quorum is this node
alone, so it keeps the static answer, which reaches no voter-set check (DUPLICATE_VOTER,
VOTER_NOT_FOUND stay unreachable, as on such a Kafka node).
"""

from __future__ import annotations

import logging
import uuid

from kwire.protocol import messages
from kwire.protocol.errors import (
    BrokerIdNotRegisteredError,
    ClusterAuthorizationFailedError,
    ErrorCode,
    InconsistentClusterIdError,
    InvalidRequestError,
    KafkaError,
    UnsupportedVersionError,
)
from kwire.protocol.message_base import ZERO_UUID

from ..auth.acls import AclOperation, ResourceType
from .features import SUPPORTED
from .quorum import voter_endpoints
from .registry import handler

__all__ = ["KRAFT_VERSION"]

logger = logging.getLogger("kwire.broker.handlers")

# The finalized kraft.version: the highest this node supports (features.py), i.e. 0, a static quorum.
KRAFT_VERSION = SUPPORTED["kraft.version"][1]
_CLUSTER_AUTH = "Cluster authorization failed."  # Errors.CLUSTER_AUTHORIZATION_FAILED's message


@handler(messages.UnregisterBrokerRequest.API_KEY, 0, 0)
def handle_unregister_broker(ctx, request):
    R = messages.UnregisterBrokerResponse
    broker_id = request.broker_id
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER):
        # Kafka's message names the request (AuthHelper.authorizeClusterOperation).
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code,
                 error_message=f"Request UnregisterBroker(brokerId={broker_id}) is not authorized.")
    node = ctx.broker.config.node_id
    if broker_id != node:
        logger.info("%s asked to unregister broker %d: not registered (this cluster's only broker is %d)",
                    ctx.principal, broker_id, node)
        return R(throttle_time_ms=0, error_code=BrokerIdNotRegisteredError.code, error_message=None)
    logger.warning("%s unregistered broker %d, this node: answered as Kafka does, but the node stays "
                   "registered (a one-node cluster without its broker would serve nobody)", ctx.principal, node)
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None)


def _cluster_id_refusal(ctx, cluster_id: str | None) -> KafkaError | None:
    # KafkaRaftClient.hasValidClusterId: a null id is accepted (an admin that does not know it).
    if cluster_id is not None and cluster_id != ctx.broker.cluster_id:
        return InconsistentClusterIdError(f'The given id "{cluster_id}" doesn\'t match the cluster id '
                                          f'"{ctx.broker.cluster_id}"')
    return None


def _voter_refusal(voter_id: int, directory_id: uuid.UUID, verb: str) -> KafkaError | None:
    # RaftUtil's voter key: a negative id is none, the zero directory id is no directory.
    if voter_id < 0 or directory_id == ZERO_UUID:
        return InvalidRequestError(f"{verb} voter request didn't include a valid voter")
    return None


def _endpoint_refusal(ctx, listeners) -> KafkaError | None:
    # The new voter must be reachable on the quorum's default listener (names compare normalised
    # to upper case); Kafka's message shows the endpoints as Java's Endpoints.toString does.
    default = voter_endpoints(ctx)[0][0].upper()
    if any(li.name.upper() == default for li in listeners):
        return None
    inner = ", ".join(f"ListenerName({li.name.upper()})={li.host}/<unresolved>:{li.port}" for li in listeners)
    return InvalidRequestError(f"Add voter request didn't include the endpoint (Endpoints(endpoints={{{inner}}})) "
                               f"for the default listener ListenerName({default})")


def _static_quorum_refusal(verb: str) -> KafkaError:
    # AddVoterHandler / RemoveVoterHandler: no reconfiguration below kraft.version 1.
    return UnsupportedVersionError(f"Cluster doesn't support {verb} voter because the kraft.version feature "
                                   f"is {KRAFT_VERSION}")


@handler(messages.AddRaftVoterRequest.API_KEY, 0, 1)
def handle_add_raft_voter(ctx, request):
    """v1's ack_when_committed only changes when a successful add is answered (KIP-1186); every
    refusal comes before that, so both versions answer alike."""
    R = messages.AddRaftVoterResponse
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code, error_message=_CLUSTER_AUTH)
    error = (_cluster_id_refusal(ctx, request.cluster_id)
             or _voter_refusal(request.voter_id, request.voter_directory_id, "Add")
             or _endpoint_refusal(ctx, request.listeners)
             or _static_quorum_refusal("adding"))
    logger.info("%s asked to add voter %d to the metadata quorum: %s", ctx.principal, request.voter_id, error)
    return R(throttle_time_ms=0, error_code=error.code, error_message=error.message)


@handler(messages.RemoveRaftVoterRequest.API_KEY, 0, 0)
def handle_remove_raft_voter(ctx, request):
    R = messages.RemoveRaftVoterResponse
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code, error_message=_CLUSTER_AUTH)
    error = (_cluster_id_refusal(ctx, request.cluster_id)
             or _voter_refusal(request.voter_id, request.voter_directory_id, "Remove")
             or _static_quorum_refusal("removing"))
    logger.info("%s asked to remove voter %d from the metadata quorum: %s", ctx.principal, request.voter_id, error)
    return R(throttle_time_ms=0, error_code=error.code, error_message=error.message)
