"""Client quotas judged by real clients: a confluent-kafka producer over its producer_byte_rate is
told to back off (librdkafka's throttle callback sees throttle_time_ms), gets every record stored,
and the broker keeps serving others meanwhile; kafka-python's own codec sets and reads quotas
(kafka-python 3.0 has the messages but no admin method for them; confluent-kafka 2.16's
AdminClient has no client quota calls at all); the quotas survive a restart.  No timing is asserted
(the benchmark measures the rate: benchmarks/bench_quotas.py)."""

from __future__ import annotations

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from kwire.broker import EmbeddedBroker
from kwire.broker.quotas import Alteration
from kwire.client.admin import Admin, QuotaAlteration, QuotaEntity, QuotaFilter
from kwire.protocol.errors import InvalidRequestError
from tests.security.helpers import PASSWORD


def test_confluent_producer_over_its_quota_is_throttled_and_served(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as broker:
        ck_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        ck_admin.create_topics([NewTopic("q", 1, 1)])["q"].result(30)
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            # 10 kB/s: the first 100 kB (10 windows' worth) pass, the rest over it is throttled.
            admin.alter_client_quotas([QuotaAlteration(QuotaEntity.of(client_id="slow"),
                                                       {"producer_byte_rate": 10_000})])
        throttles: list[float] = []
        delivered: list[int] = []
        producer = confluent_kafka.Producer({
            "bootstrap.servers": broker.bootstrap, "client.id": "slow", "linger.ms": 0, "batch.size": 4096,
            "throttle_cb": lambda event: throttles.append(event.throttle_time)})
        for _ in range(120):
            producer.produce("q", b"x" * 1000, on_delivery=lambda err, msg: delivered.append(0 if err else 1))
            producer.poll(0)
        assert producer.flush(60) == 0
        producer.poll(0)  # throttle events reach the callback through poll
        assert sum(delivered) == 120 and len(delivered) == 120
        assert any(t > 0 for t in throttles), throttles

        # Another client (no quota) is served while "slow" is muted, and so is "slow" afterwards.
        other = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "client.id": "fast"})
        other.produce("q", b"y")
        assert other.flush(30) == 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                                             "auto.offset.reset": "earliest", "client.id": "reader"})
        consumer.assign([confluent_kafka.TopicPartition("q", 0)])
        seen = 0
        for _ in range(100):
            seen += len(consumer.consume(500, 1))
            if seen >= 121:
                break
        consumer.close()
        assert seen == 121


def _throttled_producer(bootstrap: str, user: str, n: int = 120, **security) -> list[float]:
    """Send n 1 kB records as ``user`` over SASL/SCRAM (client id "shared"); the throttle times seen."""
    throttles: list[float] = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "client.id": "shared", "linger.ms": 0, "batch.size": 4096,
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
        "sasl.password": PASSWORD, "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    for _ in range(n):
        producer.produce("q", b"x" * 1000)
        producer.poll(0)
    assert producer.flush(60) == 0
    producer.poll(0)
    return throttles


def test_a_user_quota_applies_to_the_logged_in_principal_only(tmp_path):
    """The quota follows the SASL login (Kafka's user entity is the principal's name), not the client id."""
    with EmbeddedBroker(tmp_path / "data", listeners=["SASL_PLAINTEXT://127.0.0.1:0"], default_partitions=1) as broker:
        broker.add_user("alice", PASSWORD)
        broker.add_user("bob", PASSWORD)
        broker.call(lambda: broker.state.client_quotas.alter([Alteration([("user", "alice")],
                                                                         [("producer_byte_rate", 10_000.0)])]))
        bootstrap = broker.bootstrap_for("SASL_PLAINTEXT")
        assert any(t > 0 for t in _throttled_producer(bootstrap, "alice"))
        assert not any(t > 0 for t in _throttled_producer(bootstrap, "bob"))


def test_kafka_python_codec_alters_and_describes(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            R = AlterClientQuotasRequest
            alter = R(validate_only=False, entries=[
                R.EntryData(entity=[R.EntryData.EntityData(entity_type="user", entity_name="alice")],
                            ops=[R.EntryData.OpData(key="consumer_byte_rate", value=2048.0, remove=False)]),
                R.EntryData(entity=[R.EntryData.EntityData(entity_type="user", entity_name="bob")],
                            ops=[R.EntryData.OpData(key="nonsense", value=1.0, remove=False)])])
            answer = admin._manager.run(admin._manager.send, alter)
            assert [(e.error_code, e.error_message) for e in answer.entries] == [
                (0, None), (InvalidRequestError.code, "Invalid configuration key nonsense")]
            D = DescribeClientQuotasRequest
            described = admin._manager.run(admin._manager.send, D(strict=False, components=[
                D.ComponentData(entity_type="user", match_type=0, match="alice")]))
            assert described.error_code == 0
            assert [([(d.entity_type, d.entity_name) for d in e.entity], [(v.key, v.value) for v in e.values])
                    for e in described.entries] == [([("user", "alice")], [("consumer_byte_rate", 2048.0)])]
        finally:
            admin.close()


def test_quotas_survive_a_restart_as_kwire_admin_sees_them(tmp_path):
    data = tmp_path / "data"
    entity = QuotaEntity.of(user=None, client_id="app")
    with EmbeddedBroker(data) as broker, Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.alter_client_quotas([QuotaAlteration(entity, {"request_percentage": 25.0, "producer_byte_rate": 1e6})])
    with EmbeddedBroker(data) as broker, Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert admin.describe_client_quotas([QuotaFilter.default("user")]) == {
            entity: {"request_percentage": 25.0, "producer_byte_rate": 1e6}}
        assert broker.call(lambda: broker.state.quota_manager.active)
