"""Request handlers, one module per area; importing this package registers them all.

See ``registry`` for the handler contract.  ``HANDLERS`` maps api key -> HandlerEntry.
"""

from . import (  # noqa: F401 - imported for their @handler registrations
    acls,
    api_versions,
    client_quotas,
    cluster,
    cluster_membership,
    config_resources,
    configs,
    consumer_groups,
    delegation_tokens,
    features,
    fetch,
    groups,
    log_dirs,
    metadata,
    offsets,
    produce,
    producer,
    producers,
    quorum,
    reassignments,
    sasl,
    scram_admin,
    share_groups,
    streams_groups,
    telemetry,
    topic_admin,
    topic_partitions,
    transactions,
    txn_markers,
)
from .registry import HANDLERS, HandlerEntry, supported_versions

__all__ = ["HANDLERS", "HandlerEntry", "supported_versions"]
