"""The embedded broker users put in their own tests: sync and async context managers, the pytest
fixture from kwire's pytest plugin, temporary data removed at exit, a given data dir kept."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiokafka
import pytest
from confluent_kafka.admin import AdminClient

from kwire.broker import EmbeddedBroker
from kwire.broker.storage import CLEAN_SHUTDOWN_FILE

from . import clients as c


def test_fixture_from_the_plugin(kwire_broker):
    # kwire_broker comes from the pytest11 entry point, as in a user's project.
    assert isinstance(kwire_broker, EmbeddedBroker)
    acked = c.confluent_produce(kwire_broker.bootstrap, "fx", c.records("fx", 5))
    assert sorted(o for _, o in acked) == [0, 1, 2, 3, 4]


def test_sync_temporary_data_is_removed():
    with EmbeddedBroker() as broker:
        data = Path(broker.data_dir)
        assert data.is_dir()
        host, port = broker.bootstrap.split(":")
        assert host == "127.0.0.1" and int(port) == broker.port > 0
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert list(md.brokers) == [1]
    assert not data.exists()


def test_given_data_dir_is_kept_and_reopened(tmp_path):
    data = tmp_path / "d"
    with EmbeddedBroker(data) as broker:
        c.confluent_produce(broker.bootstrap, "kept", c.records("kept", 10))
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
    with EmbeddedBroker(data) as broker:
        consumer = c.confluent_consumer(broker.bootstrap, "g", ["kept"])
        assert len(c.confluent_consume(consumer, 10)) == 10
        consumer.close()


def test_async_context_manager(tmp_path):
    async def main():
        async with EmbeddedBroker(tmp_path / "d", default_partitions=2) as broker:
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
            await producer.start()
            md = await producer.send_and_wait("async-topic", b"hello", partition=1)
            await producer.stop()
            assert (md.partition, md.offset) == (1, 0)
            return broker.state.logs.get("async-topic", 1).log_end_offset

    assert asyncio.run(main()) == 1


def test_port_in_use_is_a_clear_error(tmp_path):
    with EmbeddedBroker(tmp_path / "a") as first:
        with pytest.raises(OSError, match="address already in use|Address already in use"):
            EmbeddedBroker(tmp_path / "b", port=first.port).start()
        # The failed start released its data dir: it opens again at once.
        with EmbeddedBroker(tmp_path / "b") as second:
            assert second.port != first.port
