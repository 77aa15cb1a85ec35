"""pytest fixtures for your own test suites: a real kwire broker per test, no JVM, no Docker.

Installed with kwire through the ``pytest11`` entry point, so every test suite of a project that
has kwire installed can use them without a conftest.  The module imports nothing of the broker
until a fixture is requested: a suite that never asks for one pays nothing for it.

``kwire_broker``
    A fresh :class:`~kwire.broker.EmbeddedBroker` per test, its data in the test's ``tmp_path``::

        def test_roundtrip(kwire_broker):
            producer = confluent_kafka.Producer({"bootstrap.servers": kwire_broker.bootstrap})

    Settings come from the ``kwire_broker`` marker, as keywords of ``EmbeddedBroker`` (any
    ``BrokerConfig`` field; ``partitions`` is short for ``default_partitions``)::

        @pytest.mark.kwire_broker(partitions=4, auto_create_topics=False)
        def test_four_partitions(kwire_broker): ...

``kwire_broker_factory``
    Starts as many brokers as a test asks for, each with its own settings and data dir, all
    stopped when the test ends::

        def test_two(kwire_broker_factory):
            small = kwire_broker_factory(partitions=1)
            big = kwire_broker_factory(partitions=8, fsync="always")

``kwire_broker_session``
    One broker for the whole session: faster, but tests share its topics and groups.

The embedded broker's defaults are chosen for tests (for example no initial rebalance delay for
consumer groups, where Kafka waits 3 s); pass Kafka's values as settings where a test depends
on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .embedded import EmbeddedBroker

__all__ = ["kwire_broker", "kwire_broker_factory", "kwire_broker_session"]

_MARKER = "kwire_broker"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{_MARKER}(**settings): settings of the kwire_broker fixture's broker "
                   "(EmbeddedBroker keywords; partitions= is short for default_partitions=)")


def _settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The keywords for EmbeddedBroker: ``partitions`` is the friendlier name of default_partitions."""
    settings = dict(settings)
    if "partitions" in settings:
        if "default_partitions" in settings:
            raise TypeError("give partitions or default_partitions, not both")
        settings["default_partitions"] = settings.pop("partitions")
    return settings


def _start(data_dir: Path, settings: dict[str, Any]) -> EmbeddedBroker:
    # Imported here, not at the top: the plugin is loaded by every pytest session of every
    # project with kwire installed, and the broker's modules take a noticeable part of a second.
    from .embedded import EmbeddedBroker

    return EmbeddedBroker(data_dir, **_settings(settings)).start()


@pytest.fixture
def kwire_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A running broker for this test; settings from the ``kwire_broker`` marker, if any."""
    marker = request.node.get_closest_marker(_MARKER)
    if marker is not None and marker.args:
        raise TypeError(f"@pytest.mark.{_MARKER} takes keyword settings only, got {marker.args!r}")
    broker = _start(tmp_path / "kwire-data", marker.kwargs if marker is not None else {})
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kwire_broker_factory(tmp_path: Path) -> Iterator[Callable[..., EmbeddedBroker]]:
    """``kwire_broker_factory(**settings)`` starts a broker with those settings; every broker it
    started is stopped when the test ends."""
    started: list[EmbeddedBroker] = []

    def make(**settings: Any) -> EmbeddedBroker:
        broker = _start(tmp_path / f"kwire-data-{len(started)}", settings)
        started.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in reversed(started):
            broker.stop()


@pytest.fixture(scope="session")
def kwire_broker_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One broker shared by the whole session."""
    broker = _start(tmp_path_factory.mktemp("kwire-broker") / "data", {})
    try:
        yield broker
    finally:
        broker.stop()
