"""kwire: Kafka's wire protocol in Python.

The client's main classes are available here (``kwire.Producer``, ``kwire.AsyncConsumer``...),
imported on first use so that ``import kwire`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_CLIENT_NAMES = ("Producer", "Consumer", "Admin", "AsyncProducer", "AsyncConsumer", "AsyncAdmin",
                 "TopicPartition", "RebalanceListener", "NewTopic")

__all__ = ["__version__", *_CLIENT_NAMES]


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'kwire' has no attribute {name!r}")
