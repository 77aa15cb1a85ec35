"""kwire's Kafka client: an asyncio core (producer, consumer, admin) with a synchronous facade.

::

    from kwire import Producer, Consumer, Admin                # synchronous
    from kwire import AsyncProducer, AsyncConsumer, AsyncAdmin  # asyncio

Settings use Kafka's names (``bootstrap.servers``, ``acks``, ``group.id``...), as a dict, as
keywords with underscores (``linger_ms=5``), or both.  Names are imported lazily so that
``import kwire`` stays cheap for the codec's users.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module (relative to kwire.client) that defines it
_EXPORTS = {
    "AsyncProducer": "producer", "Producer": "producer", "BulkDelivery": "producer_bulk",
    "AsyncConsumer": "consumer", "Consumer": "consumer", "RebalanceListener": "consumer",
    "AsyncAdmin": "admin", "Admin": "admin", "NewTopic": "admin",
    "ProducerConfig": "config", "ConsumerConfig": "config", "AdminConfig": "config",
    "TopicPartition": "types", "OffsetAndMetadata": "types", "RecordMetadata": "types",
    "ConsumerRecord": "types", "FetchedBatch": "types", "OffsetAndTimestamp": "log_offsets",
    "ClientError": "errors", "BrokerConnectionError": "errors", "NoBrokersAvailableError": "errors",
    "ClientTimeoutError": "errors", "UnsupportedApiError": "errors", "IllegalStateError": "errors",
    "AuthenticationError": "errors", "TlsError": "errors", "SecurityProtocolMismatchError": "errors",
    "DeliveryTimeoutError": "producer_errors", "InvalidPartitionError": "producer_errors",
    "ProducerFencedError": "producer_errors", "RecordTooLargeError": "producer_errors",
    "ConsumerGroupMetadata": "transactions", "TransactionError": "transactions",
    "TransactionAbortRequiredError": "transactions", "TransactionAbortedError": "transactions",
    "CommitFailedError": "consumer_errors", "FatalGroupError": "consumer_errors",
    "NoOffsetForPartitionError": "consumer_errors", "StaleCommitError": "consumer_errors",
    "ShareConsumer": "share_consumer", "AsyncShareConsumer": "share_consumer",
    "ShareConsumerConfig": "share_consumer", "ShareRecord": "share_consumer", "AcknowledgeType": "share_consumer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kwire.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
