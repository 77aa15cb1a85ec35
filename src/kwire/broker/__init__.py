"""kwire's single-node Kafka-compatible broker.

* ``EmbeddedBroker``: a broker in your process for tests (sync and async context manager);
  the pytest fixture ``kwire_broker`` gives one per test.
* ``Broker`` / ``BrokerConfig``: what ``kwire broker`` runs.

Layout: ``network`` (connections, frames) -> ``dispatch`` (header, versions, errors) ->
``handlers`` (plain functions of decoded requests and ``BrokerState``) -> ``storage`` (logs),
``coordinator`` (consumer groups) and ``transactions`` (the transaction coordinator).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..lazy_exports import LazyExports

__all__ = ["Broker", "BrokerConfig", "ConfigError", "EmbeddedBroker", "load_config"]

if TYPE_CHECKING:
    from .config import BrokerConfig, ConfigError, load_config
    from .embedded import EmbeddedBroker
    from .server import Broker

# Imported on first use (PEP 562): the server pulls in every handler, the storage and both
# coordinators (about 0.15 s), which a command that only reads an ACL file or a config, or a
# test that imports ``kwire.broker.storage``, does not need.
_exports = LazyExports(__name__, {"Broker": "server", "BrokerConfig": "config", "ConfigError": "config",
                                  "EmbeddedBroker": "embedded", "load_config": "config"}, globals())


def __getattr__(name: str) -> Any:
    return _exports.load(name)


def __dir__() -> list[str]:
    return _exports.names()
