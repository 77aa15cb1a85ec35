"""kwire's Kafka client: an asyncio core (producer, consumer, admin) with a synchronous facade.

::

    from kwire import Producer, Consumer, Admin                # synchronous
    from kwire import AsyncProducer, AsyncConsumer, AsyncAdmin  # asyncio

Settings use Kafka's names (``bootstrap.servers``, ``acks``, ``group.id``...), as a dict, as
keywords with underscores (``linger_ms=5``), or both.  Names are imported lazily so that
``import kwire`` stays cheap for the codec's users.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..lazy_exports import LazyExports

if TYPE_CHECKING:
    # The public names as type checkers and editors see them (at run time each is imported on
    # first use, by __getattr__); tests/client/test_exports_typed.py keeps this equal to _EXPORTS.
    from .admin import Admin as Admin
    from .admin import AsyncAdmin as AsyncAdmin
    from .admin import NewTopic as NewTopic
    from .config import AdminConfig as AdminConfig
    from .config import ConsumerConfig as ConsumerConfig
    from .config import ProducerConfig as ProducerConfig
    from .consumer import AsyncConsumer as AsyncConsumer
    from .consumer import Consumer as Consumer
    from .consumer import RebalanceListener as RebalanceListener
    from .consumer_errors import CommitFailedError as CommitFailedError
    from .consumer_errors import FatalGroupError as FatalGroupError
    from .consumer_errors import NoOffsetForPartitionError as NoOffsetForPartitionError
    from .consumer_errors import StaleCommitError as StaleCommitError
    from .errors import AuthenticationError as AuthenticationError
    from .errors import BrokerConnectionError as BrokerConnectionError
    from .errors import ClientError as ClientError
    from .errors import ClientTimeoutError as ClientTimeoutError
    from .errors import IllegalStateError as IllegalStateError
    from .errors import NoBrokersAvailableError as NoBrokersAvailableError
    from .errors import SecurityProtocolMismatchError as SecurityProtocolMismatchError
    from .errors import TlsError as TlsError
    from .errors import UnsupportedApiError as UnsupportedApiError
    from .log_offsets import OffsetAndTimestamp as OffsetAndTimestamp
    from .producer import AsyncProducer as AsyncProducer
    from .producer import Producer as Producer
    from .producer_bulk import BulkDelivery as BulkDelivery
    from .producer_errors import DeliveryTimeoutError as DeliveryTimeoutError
    from .producer_errors import InvalidPartitionError as InvalidPartitionError
    from .producer_errors import ProducerFencedError as ProducerFencedError
    from .producer_errors import RecordTooLargeError as RecordTooLargeError
    from .share_consumer import AcknowledgeType as AcknowledgeType
    from .share_consumer import AsyncShareConsumer as AsyncShareConsumer
    from .share_consumer import ShareConsumer as ShareConsumer
    from .share_consumer import ShareConsumerConfig as ShareConsumerConfig
    from .share_consumer import ShareRecord as ShareRecord
    from .transactions import ConsumerGroupMetadata as ConsumerGroupMetadata
    from .transactions import TransactionAbortedError as TransactionAbortedError
    from .transactions import TransactionAbortRequiredError as TransactionAbortRequiredError
    from .transactions import TransactionError as TransactionError
    from .types import ConsumerRecord as ConsumerRecord
    from .types import FetchedBatch as FetchedBatch
    from .types import OffsetAndMetadata as OffsetAndMetadata
    from .types import RecordMetadata as RecordMetadata
    from .types import TopicPartition as TopicPartition

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


_exports = LazyExports(__name__, _EXPORTS, globals())


def __getattr__(name: str) -> Any:
    return _exports.load(name)


def __dir__() -> list[str]:
    return _exports.names()
