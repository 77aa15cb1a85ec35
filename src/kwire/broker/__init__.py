"""kwire's single-node Kafka-compatible broker.

* ``EmbeddedBroker``: a broker in your process for tests (sync and async context manager);
  the pytest fixture ``kwire_broker`` gives one per test.
* ``Broker`` / ``BrokerConfig``: what ``kwire broker`` runs.

Layout: ``network`` (connections, frames) -> ``dispatch`` (header, versions, errors) ->
``handlers`` (plain functions of decoded requests and ``BrokerState``) -> ``storage`` (logs),
``coordinator`` (consumer groups) and ``transactions`` (the transaction coordinator).
"""

from .config import BrokerConfig, ConfigError, load_config
from .embedded import EmbeddedBroker
from .server import Broker

__all__ = ["Broker", "BrokerConfig", "ConfigError", "EmbeddedBroker", "load_config"]
