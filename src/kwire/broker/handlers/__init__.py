"""Request handlers, one module per area; importing this package registers them all.

See ``registry`` for the handler contract.  ``HANDLERS`` maps api key -> HandlerEntry.
"""

from . import (  # noqa: F401 - imported for their @handler registrations
    acls,
    api_versions,
    cluster,
    configs,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    producer,
    sasl,
    topic_admin,
    transactions,
)
from .registry import HANDLERS, HandlerEntry, supported_versions

__all__ = ["HANDLERS", "HandlerEntry", "supported_versions"]
