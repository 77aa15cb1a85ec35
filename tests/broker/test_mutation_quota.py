"""controller_mutation_rate (KIP-599): the partitions a client creates and deletes, bounded as
Kafka's ControllerMutationQuotaManager bounds them: a token bucket of rate x 11 windows, strict
requests (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) refused per topic with
THROTTLING_QUOTA_EXCEEDED once it is overdrawn, older ones done and throttled; the connection
muted for the throttle time.  On an injected clock, through dispatch, and with a real client."""

from __future__ import annotations

import uuid

import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.dispatch import dispatch
from kwire.broker.quotas import Alteration, ClientQuotaManager
from kwire.broker.quotas.mutation import MutationBudget, SpentCredit
from kwire.client.admin import Admin
from kwire.client.admin_quotas import QuotaAlteration, QuotaEntity
from kwire.protocol import encode_request, messages
from kwire.protocol.errors import ThrottlingQuotaExceededError

from .conftest import serve

CT, DT, CP = messages.CreateTopicsRequest, messages.DeleteTopicsRequest, messages.CreatePartitionsRequest
QUOTA = 1.0  # partition mutations per second: a burst of 11


class Clock:
    def __init__(self):
        self.ms = 1_000_000.0

    def __call__(self):
        return self.ms


def with_quota(state, clock, rate=QUOTA):
    state.client_quotas.alter([Alteration([("client-id", "test")], [("controller_mutation_rate", rate)])])
    state.quota_manager = ClientQuotaManager(state.client_quotas, now_ms=clock)


def create(state, topics, version=7, validate_only=False):
    return serve(state, CT(topics=[CT.CreatableTopic(name=n, num_partitions=p, replication_factor=1, assignments=[],
                                                     configs=[]) for n, p in topics],
                           timeout_ms=1000, validate_only=validate_only), version)


def test_the_bucket_is_kafkas_token_bucket():
    clock = Clock()
    credit = SpentCredit(clock())
    strict = MutationBudget(credit, 2.0, 22.0, strict=True, now_ms=clock)
    strict.record(20)
    strict.record(5)  # 25 spent: over the burst of 22, but the bucket was not overdrawn before it
    assert strict.throttle_ms == 0
    with pytest.raises(ThrottlingQuotaExceededError):
        strict.record(1)
    assert strict.throttle_ms == 1500  # 3 over at 2 per second
    clock.ms += 1500
    strict.record(1)  # given back: 22 spent, not over
    clock.ms += 60_000
    assert credit.settle(2.0, clock()) == 0  # never below nothing
    permissive = MutationBudget(credit, 2.0, 22.0, strict=False, now_ms=clock)
    permissive.record(30)
    permissive.record(4)
    assert permissive.throttle_ms == 6000  # done anyway; 12 over at 2 per second


def test_strict_create_topics_refuses_the_topics_past_the_quota(state):
    clock = Clock()
    with_quota(state, clock)
    resp = create(state, [("a", 12), ("b", 1), ("c", 1)])
    errors = [(t.name, t.error_code) for t in resp.topics]
    # a: 12 of a burst of 11 (the bucket was full); b and c: the bucket is overdrawn by 1.
    assert errors == [("a", 0), ("b", ThrottlingQuotaExceededError.code), ("c", ThrottlingQuotaExceededError.code)]
    assert resp.throttle_time_ms == 1000
    assert "a" in state.topics and "b" not in state.topics and "c" not in state.topics
    clock.ms += 1000
    assert [t.error_code for t in create(state, [("b", 1)]).topics] == [0]
    # Refusals by validation come first and cost nothing.
    assert create(state, [("a", 1)]).topics[0].error_code != ThrottlingQuotaExceededError.code
    assert [t.error_code for t in create(state, [("d", 3)], validate_only=True).topics] == [0]


def test_an_old_create_topics_is_done_and_throttled(state):
    clock = Clock()
    with_quota(state, clock)
    resp = create(state, [("a", 12), ("b", 4)], version=5)
    assert [t.error_code for t in resp.topics] == [0, 0]
    assert resp.throttle_time_ms == 5000
    frame = encode_request(CT(topics=[CT.CreatableTopic(name="c", num_partitions=1, replication_factor=1, assignments=[],
                                                        configs=[])], timeout_ms=1000, validate_only=False),
                           5, 9, client_id="test")[4:]
    reply = dispatch(state, frame, client_host="127.0.0.1:1", connection_id=1)
    assert reply.throttle_ms > 5000 and not reply.hold  # v5 >= 3: the client waits; the broker mutes


def test_delete_topics_and_create_partitions_count_partitions(state):
    clock = Clock()
    with_quota(state, clock, rate=10.0)  # a burst of 110
    assert [t.error_code for t in create(state, [("a", 100), ("b", 5)]).topics] == [0, 0]
    grow = serve(state, CP(topics=[CP.CreatePartitionsTopic(name="b", count=20, assignments=None)], timeout_ms=1000,
                           validate_only=False), 3)
    assert grow.results[0].error_code == 0  # 105 spent + 15: overdrawn now
    deleted = serve(state, DT(topics=[DT.DeleteTopicState(name="a", topic_id=uuid.UUID(int=0))], timeout_ms=1000), 6)
    assert deleted.responses[0].error_code == ThrottlingQuotaExceededError.code and deleted.throttle_time_ms == 1000
    assert "a" in state.topics
    old = serve(state, DT(topic_names=["a"], timeout_ms=1000), 4)  # v4 predates the error: done, throttled
    assert old.responses[0].error_code == 0 and old.throttle_time_ms > 0 and "a" not in state.topics


def test_a_client_without_the_quota_is_not_counted(state):
    clock = Clock()
    state.client_quotas.alter([Alteration([("client-id", "other")], [("controller_mutation_rate", 0.001)])])
    state.quota_manager = ClientQuotaManager(state.client_quotas, now_ms=clock)
    resp = create(state, [("a", 50), ("b", 50)])
    assert [t.error_code for t in resp.topics] == [0, 0] and resp.throttle_time_ms == 0


def test_kafka_python_admin_is_told_the_quota_is_exceeded(tmp_path):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import ThrottlingQuotaExceededError as KafkaPythonThrottled

    with EmbeddedBroker(tmp_path / "data") as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.alter_client_quotas([QuotaAlteration(QuotaEntity.of(client_id="slow-admin"),
                                                       {"controller_mutation_rate": 0.5})])
        client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="slow-admin")
        try:
            client.create_topics([NewTopic("first", 6, 1)])  # a burst of 5.5: overdrawn by 0.5
            with pytest.raises(KafkaPythonThrottled):
                client.create_topics([NewTopic("second", 1, 1)])
        finally:
            client.close()
        assert "first" in broker.state.topics and "second" not in broker.state.topics
