"""What both producers do without I/O (kwire.client.producer_core): the wait for a topic's
metadata (``TopicWait``, the one loop both the asyncio and the blocking producer drive), on a
clock the test advances."""

from __future__ import annotations

import pytest

from kwire.client.backoff import Backoff
from kwire.client.errors import BrokerConnectionError, ClientTimeoutError
from kwire.client.metadata import ClusterMetadata, TopicInfo
from kwire.client.producer_core import TopicRoute, TopicWait
from kwire.protocol.errors import ErrorCode, KafkaError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def metadata_with(topic: str, error: ErrorCode) -> ClusterMetadata:
    return ClusterMetadata(topics={topic: TopicInfo(topic, {}, error_code=int(error))})


def test_a_route_ends_the_wait():
    wait = TopicWait("t", 1000, Backoff(100, 1000, jitter=0), now=Clock())
    route = TopicRoute("t", 1, [0])
    assert wait.answered(ClusterMetadata(), route) is route


def test_retriable_errors_are_asked_again_after_the_backoff_until_max_block_ms():
    clock = Clock()
    wait = TopicWait("t", 1000, Backoff(100, 1000, jitter=0), now=clock)
    # The topic's own retriable error (the broker still creating it), then a lost connection.
    assert wait.answered(metadata_with("t", ErrorCode.LEADER_NOT_AVAILABLE), None) is None
    assert wait.pause() == pytest.approx(0.1)
    clock.now += 0.1
    wait.failed(BrokerConnectionError("connection to b:9092 lost"))
    assert wait.pause() == pytest.approx(0.2)  # exponential, as retry.backoff.ms and its max
    clock.now += 0.85
    assert wait.left() == pytest.approx(0.05)
    assert wait.pause() == pytest.approx(0.05)  # never past the deadline
    clock.now = wait.deadline
    assert wait.left() <= 0
    error = wait.timed_out()
    assert isinstance(error, ClientTimeoutError)
    assert "topic 't' not present in metadata after max.block.ms (1000 ms)" in str(error)
    assert "connection to b:9092 lost" in str(error)


def test_other_errors_are_raised_at_once():
    wait = TopicWait("t", 1000, Backoff(100, 1000), now=Clock())
    with pytest.raises(KafkaError) as raised:
        wait.answered(metadata_with("t", ErrorCode.TOPIC_AUTHORIZATION_FAILED), None)
    assert raised.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(ValueError, match="bad"):
        wait.failed(ValueError("bad"))
