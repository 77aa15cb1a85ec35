"""The admin client's one retry policy for the coordinator errors.

Kafka's Admin retries COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS
until the call's timeout. The FindCoordinator lookup is part of the call there, not a wait of
its own. Here kwire's broker answers FindCoordinator with COORDINATOR_NOT_AVAILABLE a given
number of times. The test wraps its handler; the network is real. The refusals after a restart
(COORDINATOR_LOAD_IN_PROGRESS) are tested through the CLI in
tests/cli/test_groups_after_restart.py."""

from __future__ import annotations

import asyncio

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.handlers.registry import HANDLERS, HandlerEntry
from kwire.client.admin import AsyncAdmin
from kwire.client.errors import ClientTimeoutError
from kwire.client.types import TopicPartition
from kwire.protocol import ApiKey
from kwire.protocol.errors import CoordinatorNotAvailableError

GROUP = "retried"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=2) as b:
        producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "log_level": 0})
        for i in range(6):
            producer.produce("events", b"%d" % i, partition=i % 2)
        assert producer.flush(15) == 0
        c = confluent_kafka.Consumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP,
                                      "enable.auto.commit": False, "log_level": 0})
        c.commit(offsets=[confluent_kafka.TopicPartition("events", 0, 2),
                          confluent_kafka.TopicPartition("events", 1, 3)], asynchronous=False)
        c.close()
        yield b


class Unavailable:
    """FindCoordinator answering COORDINATOR_NOT_AVAILABLE for its next ``times`` requests (None:
    every one), as Kafka's while ``__consumer_offsets`` has no leader yet; then as before."""

    def __init__(self, monkeypatch, times: int | None) -> None:
        self.times = times
        self.refused = 0
        self._entry = HANDLERS[ApiKey.FIND_COORDINATOR]
        monkeypatch.setitem(HANDLERS, ApiKey.FIND_COORDINATOR,
                            HandlerEntry(self._entry.api_key, self._entry.min_version, self._entry.max_version,
                                         self._answer))

    def _answer(self, ctx, request):
        response = self._entry.fn(ctx, request)
        if self.times is not None and self.refused >= self.times:
            return response
        self.refused += 1
        code = CoordinatorNotAvailableError.code
        if ctx.api_version >= 4:
            for c in response.coordinators:
                c.error_code, c.node_id, c.host, c.port = code, -1, "", -1
        else:
            response.error_code, response.node_id, response.host, response.port = code, -1, "", -1
        return response


def admin_run(bootstrap: str, operation, *, request_timeout_ms: int = 10_000):
    """``operation(admin)`` with a fresh AsyncAdmin (no coordinator cached); a hang guard of 30 s."""
    async def main():
        async with AsyncAdmin({"bootstrap.servers": bootstrap, "request.timeout.ms": request_timeout_ms,
                               "retry.backoff.ms": 20, "retry.backoff.max.ms": 100}) as admin:
            return await operation(admin)

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_describe_and_offsets_retry_an_unavailable_coordinator(broker, monkeypatch):
    refusing = Unavailable(monkeypatch, 3)
    described = admin_run(broker.bootstrap, lambda a: a.describe_groups([GROUP]))[GROUP]
    assert (described.group_id, described.state) == (GROUP, "Empty")
    assert refusing.refused == 3
    refusing.times += 2
    committed = admin_run(broker.bootstrap, lambda a: a.list_consumer_group_offsets(GROUP))
    assert {tp: m.offset for tp, m in committed.items()} == {TopicPartition("events", 0): 2,
                                                              TopicPartition("events", 1): 3}
    assert refusing.refused == 5


@pytest.mark.parametrize("call", ["describe_groups", "list_consumer_group_offsets", "consumer_group_lag"])
def test_a_coordinator_never_available_fails_the_call_at_its_timeout(broker, monkeypatch, call):
    """The call's timeout bounds the lookups too: a request.timeout.ms of a minute does not make
    the FindCoordinator retries outlast a call of 1 s."""
    refusing = Unavailable(monkeypatch, None)
    operations = {"describe_groups": lambda a: a.describe_groups([GROUP], timeout=1),
                  "list_consumer_group_offsets": lambda a: a.list_consumer_group_offsets(GROUP, timeout=1),
                  "consumer_group_lag": lambda a: a.consumer_group_lag(GROUP, timeout=1)}
    with pytest.raises(ClientTimeoutError) as raised:
        admin_run(broker.bootstrap, operations[call], request_timeout_ms=60_000)
    assert "within 1 s" in str(raised.value) and "COORDINATOR_NOT_AVAILABLE" in str(raised.value)
    assert refusing.refused >= 2  # (asked again before giving up)
