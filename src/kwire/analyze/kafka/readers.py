"""Fields of exchanges, per api.  Request readers fill the request's side and return what the
response reader needs later; response readers complete the exchange.

The readers of the apis that name partitions are in ``partitions``, those of the group apis in
``groups``; here are the others, and the tables the flow looks readers up in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kwire.protocol import response_class

from ..exchange import Exchange
from .constants import (
    API_VERSIONS,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DESCRIBE_GROUPS,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SASL_HANDSHAKE,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
)
from .groups import (
    _commit_response,
    _delete_groups_request,
    _describe_groups_request,
    _find_coordinator_request,
    _find_coordinator_response,
    _join_group_request,
    _join_group_response,
    _leave_group_request,
    _member_request,
    _offset_commit_request,
    _offset_fetch_request,
    _offset_fetch_response,
    _sync_group_response,
    _txn_offset_commit_request,
)
from .partitions import (
    _delete_records_request,
    _delete_records_response,
    _fetch_request,
    _fetch_response,
    _leader_epoch_request,
    _leader_epoch_response,
    _list_offsets_request,
    _list_offsets_response,
    _metadata_response,
    _produce_request,
    _produce_response,
)

if TYPE_CHECKING:
    from .flow import KafkaFlow


def _sasl_handshake_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    ex.details["mechanism"] = req.mechanism
    return req.mechanism


def _api_versions_request(flow: KafkaFlow, ex: Exchange, req, version: int, frame: int):
    if version >= 3 and req.client_software_name:
        ex.details["client_software"] = f"{req.client_software_name} {req.client_software_version}"


_REQUEST_READERS = {
    PRODUCE: _produce_request, FETCH: _fetch_request, LIST_OFFSETS: _list_offsets_request,
    OFFSET_COMMIT: _offset_commit_request, OFFSET_FETCH: _offset_fetch_request,
    FIND_COORDINATOR: _find_coordinator_request, JOIN_GROUP: _join_group_request, HEARTBEAT: _member_request,
    LEAVE_GROUP: _leave_group_request, SYNC_GROUP: _member_request, DESCRIBE_GROUPS: _describe_groups_request,
    SASL_HANDSHAKE: _sasl_handshake_request, API_VERSIONS: _api_versions_request,
    DELETE_RECORDS: _delete_records_request, OFFSET_FOR_LEADER_EPOCH: _leader_epoch_request,
    TXN_OFFSET_COMMIT: _txn_offset_commit_request, DELETE_GROUPS: _delete_groups_request,
}

_RESPONSE_READERS = {
    PRODUCE: _produce_response, FETCH: _fetch_response, LIST_OFFSETS: _list_offsets_response,
    METADATA: _metadata_response, OFFSET_COMMIT: _commit_response, OFFSET_FETCH: _offset_fetch_response,
    FIND_COORDINATOR: _find_coordinator_response, JOIN_GROUP: _join_group_response,
    SYNC_GROUP: _sync_group_response, DELETE_RECORDS: _delete_records_response,
    OFFSET_FOR_LEADER_EPOCH: _leader_epoch_response, TXN_OFFSET_COMMIT: _commit_response,
}

_THROTTLED: dict[int, bool] = {}  # api key -> does its response carry throttle_time_ms


def _has_throttle(api_key: int) -> bool:
    known = _THROTTLED.get(api_key)
    if known is None:
        fields = response_class(api_key).SPEC.struct.fields
        known = _THROTTLED[api_key] = any(f.attr == "throttle_time_ms" for f in fields)
    return known
