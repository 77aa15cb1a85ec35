"""pytest fixtures for users' own test suites (registered through the ``pytest11`` entry point).

``kwire_broker``: a fresh EmbeddedBroker per test, data in the test's tmp_path::

    def test_roundtrip(kwire_broker):
        producer = Producer({"bootstrap.servers": kwire_broker.bootstrap})

``kwire_broker_session``: one broker for the whole session (faster; tests share topics).
"""

from __future__ import annotations

import pytest

from .embedded import EmbeddedBroker


@pytest.fixture
def kwire_broker(tmp_path):
    with EmbeddedBroker(tmp_path / "kwire-data") as broker:
        yield broker


@pytest.fixture(scope="session")
def kwire_broker_session(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("kwire-broker") / "data") as broker:
        yield broker
