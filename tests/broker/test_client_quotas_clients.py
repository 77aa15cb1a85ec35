"""Client quotas judged by real clients: a confluent-kafka producer over its producer_byte_rate is
told to back off (librdkafka's throttle callback sees throttle_time_ms), gets every record stored,
and the broker keeps serving others meanwhile; kafka-python's own codec sets and reads quotas
(kafka-python 3.0 has the messages but no admin method for them; confluent-kafka 2.16's
AdminClient has no client quota calls at all); the quotas survive a restart.  No timing is asserted
(the benchmark measures the rate: benchmarks/bench_quotas.py)."""

from __future__ import annotations

import select

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from kwire.broker import EmbeddedBroker
from kwire.broker.quotas import Alteration
from kwire.client.admin import Admin, QuotaAlteration, QuotaEntity, QuotaFilter
from kwire.protocol import encode_request, messages
from kwire.protocol.errors import InvalidRequestError
from kwire.protocol.records import RecordBatchBuilder
from tests.security.helpers import PASSWORD, RawConnection


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


def test_a_throttled_connection_is_muted_and_the_others_are_served(tmp_path):
    """KIP-219 on the wire: the throttled Produce is answered at once with its throttle time, then that
    connection serves nothing more (its next request waits, unread) while other connections are served."""
    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as broker:
        broker.call(lambda: broker.state.client_quotas.alter([Alteration([("client-id", "raw-test")],
                                                                         [("producer_byte_rate", 100.0)])]))
        builder = RecordBatchBuilder()
        builder.append(None, b"x" * 5000)
        P = messages.ProduceRequest
        produce = P(acks=1, timeout_ms=5000, transactional_id=None, topic_data=[P.TopicProduceData(
            name="muted", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=builder.build())])])
        metadata = messages.MetadataRequest(topics=None, allow_auto_topic_creation=False)
        with RawConnection(broker.bootstrap) as muted, RawConnection(broker.bootstrap) as other:
            C = messages.CreateTopicsRequest
            other.call(C(topics=[C.CreatableTopic(name="muted", num_partitions=1, replication_factor=1,
                                                  assignments=[], configs=[])], timeout_ms=5000, validate_only=False), 5)
            first = muted.call(produce, 9)
            # ~5.1 kB (the whole request counts) over a ~10 s floor at 100 B/s: (510 - 100) / 100 x 10 s = ~41 s.
            assert 40_000 <= first.throttle_time_ms <= 43_000
            assert first.responses[0].partition_responses[0].error_code == 0
            muted.correlation += 1
            muted.sock.sendall(encode_request(metadata, 9, muted.correlation, client_id="raw-test"))
            assert other.call(metadata, 9).brokers  # another connection: served at once
            readable, _, _ = select.select([muted.sock], [], [], 1.0)
            assert readable == []  # muted: its Metadata is not answered (for 40 s)


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


def test_connections_over_the_ip_connection_rate_are_held_then_closed(tmp_path):
    """KIP-612 as Kafka's acceptor: past connection_creation_rate a new connection gets no answer and is
    closed after the throttle time; the connections accepted before keep being served."""
    with EmbeddedBroker(tmp_path / "data") as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:  # connects before the quota is set
            admin.alter_client_quotas([QuotaAlteration(QuotaEntity.of(ip="127.0.0.1"),
                                                       {"connection_creation_rate": 1})])
            versions = messages.ApiVersionsRequest(client_software_name="t", client_software_version="1")
            accepted = [RawConnection(broker.bootstrap) for _ in range(10)]  # 1/s over the 10-window floor
            try:
                assert all(c.call(versions, 3).error_code == 0 for c in accepted)
                with RawConnection(broker.bootstrap) as refused:
                    refused.sock.sendall(encode_request(versions, 3, 1, client_id="raw-test"))
                    assert refused.closed_by_peer(timeout=10)
                assert accepted[0].call(versions, 3).error_code == 0
                assert admin.describe_client_quotas()  # the admin's connection is still served
            finally:
                for c in accepted:
                    c.close()


def test_kafka_python_producer_over_its_quota_gets_every_record_stored(tmp_path):
    """A second client library under the same quota: kafka-python's producer is throttled (the broker
    mutes its connection whether or not it waits by itself) and every record is stored."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    with EmbeddedBroker(tmp_path / "data", default_partitions=1) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.alter_client_quotas([QuotaAlteration(QuotaEntity.of(client_id="kp"), {"producer_byte_rate": 10_000})])
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="kp", linger_ms=0, batch_size=4096)
        try:
            futures = [producer.send("kpq", b"x" * 1000) for _ in range(120)]
            producer.flush(60)
            assert [f.get(timeout=60).offset for f in futures] == list(range(120))
            # kafka-python records the throttle_time_ms of the answers it gets.
            throttle_max = max(v for group in producer.metrics().values() for k, v in group.items()
                               if k == "throttle-time-max" and isinstance(v, (int, float)))
            assert throttle_max > 0
        finally:
            producer.close()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="reader")
        try:
            tp = TopicPartition("kpq", 0)
            assert consumer.end_offsets([tp])[tp] == 120
        finally:
            consumer.close()
