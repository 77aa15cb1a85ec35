"""kwire's pytest plugin as a user's project meets it: the marker and the factory configure real
brokers, and loading the plugin imports nothing of the broker until a fixture is asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kwire.broker import EmbeddedBroker


def _partitions_of_new_topic(broker: EmbeddedBroker, topic: str) -> int:
    # A topic created without a partition count gets the broker's num.partitions.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic)])[topic].result(timeout=30)
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


@pytest.mark.kwire_broker(partitions=3)
def test_marker_sets_the_fixtures_broker(kwire_broker):
    assert kwire_broker.config.default_partitions == 3
    assert _partitions_of_new_topic(kwire_broker, "marked") == 3


def test_factory_starts_brokers_with_their_own_settings(kwire_broker_factory):
    one = kwire_broker_factory(partitions=1)
    four = kwire_broker_factory(default_partitions=4, auto_create_topics=False)
    assert one.bootstrap != four.bootstrap and one.data_dir != four.data_dir
    assert _partitions_of_new_topic(one, "t") == 1
    assert _partitions_of_new_topic(four, "t") == 4
    assert four.config.auto_create_topics is False


def test_factory_refuses_both_spellings(kwire_broker_factory):
    with pytest.raises(TypeError, match="partitions or default_partitions"):
        kwire_broker_factory(partitions=2, default_partitions=3)


def test_loading_the_plugin_imports_no_broker_module():
    # What every pytest session of a project with kwire installed pays: the plugin module alone.
    code = ("import sys, kwire.broker.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith('kwire.') and m not in "
            "('kwire.broker', 'kwire.broker.pytest_plugin', 'kwire.lazy_exports')))")  # the last: 50 lines, no imports
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
