"""The broker's transaction coordinator (KIP-98): transactional producers and their markers.

* ``coordinator``: ``TransactionCoordinator``, the state machine of each transactional id
  (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, timeouts, fencing), transactions
  v1 and v2;
* ``state``: what is kept per transactional id, Kafka's states and transitions;
* ``store``: the durable copy of that state, one small file in the data dir;
* ``markers``: commit/abort markers written to the transaction's partitions;
* ``version``: transaction.version (KIP-890): what a level means, what a request speaks.

The partitions' side (open transactions, the last stable offset, the ``.txnindex`` of aborted
transactions) lives in ``kwire.broker.storage``; staged offsets (TxnOffsetCommit) in the group
coordinator.  The request handlers are in ``kwire.broker.handlers.transactions``.
"""

from .coordinator import EndTxnResult, InitResult, TransactionCoordinator
from .state import TransactionMetadata, TxnState
from .store import TransactionStore, TransactionStoreError

__all__ = ["EndTxnResult", "InitResult", "TransactionCoordinator", "TransactionMetadata", "TransactionStore",
           "TransactionStoreError", "TxnState"]
