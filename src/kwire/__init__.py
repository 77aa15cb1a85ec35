"""kwire: Kafka's wire protocol in Python.

The client's classes are here (``kwire.Producer``, ``kwire.AsyncConsumer``, ``kwire.Admin``...)
with its errors and record types, and ``kwire.EmbeddedBroker``, a Kafka-compatible broker in
your process.  They are imported on first use, so ``import kwire`` stays cheap for those who
only need the codec (``kwire.protocol``).
"""

from __future__ import annotations

import importlib

# typing is not imported here: the kwire command turns the garbage collector off for its start-up
# (kwire.cli.start_up) once kwire.cli.main runs, and typing (imported by what it imports next)
# is cheaper after that.  Type checkers read the block below as typing.TYPE_CHECKING.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # The names of __all__ as type checkers and editors see them (at run time each loads on first
    # use); the rest of kwire.client's exports are typed in kwire.client.
    from .broker import EmbeddedBroker as EmbeddedBroker
    from .client import Admin as Admin
    from .client import AsyncAdmin as AsyncAdmin
    from .client import AsyncConsumer as AsyncConsumer
    from .client import AsyncProducer as AsyncProducer
    from .client import Consumer as Consumer
    from .client import NewTopic as NewTopic
    from .client import Producer as Producer
    from .client import RebalanceListener as RebalanceListener
    from .client import TopicPartition as TopicPartition

__version__ = "0.1.0"

# Names that live elsewhere, by module: everything kwire.client exports, and the embedded broker.
_CLIENT = "kwire.client"
_ELSEWHERE = {"EmbeddedBroker": "kwire.broker"}


def _client_names() -> list[str]:
    return list(importlib.import_module(_CLIENT).__all__)


def __getattr__(name: str) -> Any:
    home = _ELSEWHERE.get(name)
    if home is None and not name.startswith("_") and name in _client_names():
        home = _CLIENT
    if home is None:
        raise AttributeError(f"module 'kwire' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({"__version__", *_client_names(), *_ELSEWHERE})


# What `from kwire import *` gives: the classes most programs start from.
__all__ = ["__version__", "EmbeddedBroker", "Producer", "Consumer", "Admin", "AsyncProducer", "AsyncConsumer",
           "AsyncAdmin", "TopicPartition", "RebalanceListener", "NewTopic"]
