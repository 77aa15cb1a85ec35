"""The admin calls of real clients that use the apis a one-node Kafka 4.3 answers, against one
kwire broker for the module: kafka-python's KafkaAdminClient (log dirs, cluster, topic partitions,
elections, reassignments, quorum, features, producers, config resources, SCRAM credentials),
confluent-kafka's AdminClient (elections, SCRAM credentials, a new credential's SASL login) and
aiokafka's protocol classes for the reassignment apis through its client.  Each answer is the one
Kafka's single node gives; bad input gets Kafka's error codes and the broker keeps serving."""

from __future__ import annotations

import asyncio
import os

import confluent_kafka
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import AlterPartitionReassignmentsRequest, ListPartitionReassignmentsRequest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import TopicPartition as KpTP
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.admin import ScramMechanism as KpScram
from kafka.admin import UserScramCredentialDeletion as KpDeletion
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion

from kwire.broker import EmbeddedBroker
from kwire.protocol.errors import (
    ElectionNotNeededError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    ResourceNotFoundError,
    UnknownTopicOrPartitionError,
)

TOPIC = "admin-apis"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("admin-apis") / "data"
    with EmbeddedBroker(data, listeners=["PLAINTEXT://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"]) as b:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic(TOPIC, 3, 1)])
        admin.close()
        p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
        for i in range(10):
            p.produce(TOPIC, value=b"v%d" % i, partition=0)
        assert p.flush(30) == 0
        yield b


@pytest.fixture(scope="module")
def kp(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield admin
    admin.close()


@pytest.fixture(scope="module")
def ck(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


# -- kafka-python ------------------------------------------------------------------------------
def test_kafka_python_describe_log_dirs(broker, kp):
    [answer] = kp.describe_log_dirs()
    node, [d] = answer["broker"], answer["log_dirs"]
    assert node == 1 and d["error_code"] == 0 and d["log_dir"] == os.path.abspath(broker.data_dir)
    sizes = {p["partition_index"]: p["partition_size"] for t in d["topics"] if t["name"] == TOPIC
             for p in t["partitions"]}
    on_disk = sum(f.stat().st_size for f in (broker.data_dir / f"{TOPIC}-0").glob("*.log"))
    assert sizes[0] == on_disk > 0  # the segment files' bytes
    assert sizes[1] == sizes[2] == 0
    assert d["total_bytes"] >= d["usable_bytes"] > 0


def test_kafka_python_alter_replica_log_dirs(broker, kp):
    here = os.path.abspath(broker.data_dir)
    got = kp.alter_replica_log_dirs({(TOPIC, 0, 1): here})
    assert [e.errno for e in got.values()] == [0]
    got = kp.alter_replica_log_dirs({(TOPIC, 1, 1): "/no/such/dir"})
    assert [e.__name__ for e in got.values()] == ["LogDirNotFoundError"]


def test_kafka_python_describe_cluster_with_authorized_operations(kp):
    cluster = kp.describe_cluster()
    assert cluster["controller_id"] == 1 and [b["broker_id"] for b in cluster["brokers"]] == [1]
    assert {"DESCRIBE", "ALTER", "CREATE"} <= set(cluster["authorized_operations"])


def test_kafka_python_describe_topic_partitions_pages(kp):
    first = kp.describe_topic_partitions([TOPIC], response_partition_limit=2)
    assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
    assert first["next_cursor"] == {"topic_name": TOPIC, "partition_index": 2}
    rest = kp.describe_topic_partitions([TOPIC], response_partition_limit=2,
                                        cursor={"topic_name": TOPIC, "partition_index": 2})
    assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2] and rest["next_cursor"] is None
    assert {(p["leader_id"], tuple(p["isr_nodes"])) for p in first["topics"][0]["partitions"]} == {(1, (1,))}


def test_kafka_python_elect_leaders(kp):
    resp = kp.elect_leaders(0, {TOPIC: [0, 1], "no-such-topic": [0]}, raise_errors=False)
    got = {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results for p in r.partition_result}
    assert got == {(TOPIC, 0): ElectionNotNeededError.code, (TOPIC, 1): ElectionNotNeededError.code,
                   ("no-such-topic", 0): UnknownTopicOrPartitionError.code}


def test_kafka_python_partition_reassignments(kp):
    assert kp.alter_partition_reassignments({KpTP(TOPIC, 0): [1]}) == {KpTP(TOPIC, 0): None}
    # kafka-python gives each partition's error class
    assert kp.alter_partition_reassignments({KpTP(TOPIC, 1): [2]})[KpTP(TOPIC, 1)].errno == \
        InvalidReplicaAssignmentError.code
    assert kp.alter_partition_reassignments({KpTP(TOPIC, 2): None})[KpTP(TOPIC, 2)].errno == \
        NoReassignmentInProgressError.code
    assert kp.alter_partition_reassignments({KpTP("no-such-topic", 0): [1]})[KpTP("no-such-topic", 0)].errno == \
        UnknownTopicOrPartitionError.code
    assert kp.list_partition_reassignments() == {}


def test_kafka_python_describe_metadata_quorum(kp):
    quorum = kp.describe_metadata_quorum()
    [t] = quorum["topics"]
    [p] = t["partitions"]
    assert t["topic_name"] == "__cluster_metadata" and p["leader_id"] == 1 and p["error"] is None
    assert [v["replica_id"] for v in p["current_voters"]] == [1] and p["observers"] == []
    assert p["current_voters"][0]["log_end_offset"] == p["high_watermark"] > 0
    assert [n["node_id"] for n in quorum["nodes"]] == [1]


def test_kafka_python_features(kp):
    features = kp.describe_features()
    assert features["metadata.version"]["finalized"] == (30, 30)
    assert features["transaction.version"]["finalized"] == (2, 2)  # KIP-890 part 2, Kafka 4.3's default
    assert features["group.version"]["finalized"] == (1, 1)  # KIP-848 consumer groups
    assert kp.update_features({"transaction.version": 2}, validate_only=True) == {"transaction.version": "OK"}
    with pytest.raises(Exception) as err:  # noqa: B017
        kp.update_features({"group.version": 2})
    assert "INVALID_UPDATE_VERSION" in repr(err.value) or "InvalidUpdateVersion" in repr(err.value)
    assert kp.describe_features()["metadata.version"]["finalized"] == (30, 30)


def test_kafka_python_describe_producers(kp):
    got = kp.describe_producers([KpTP(TOPIC, 0), KpTP(TOPIC, 1)])
    [producer] = got[KpTP(TOPIC, 0)].active_producers
    assert producer.producer_id >= 0 and producer.last_sequence == 9 and producer.current_transaction_start_offset == -1
    assert got[KpTP(TOPIC, 1)].active_producers == []


def test_kafka_python_list_config_resources(kp):
    got = kp.list_config_resources()
    assert TOPIC in got["topic"] and got["broker"] == ["1"]
    assert kp.list_config_resources(["BROKER"]) == {"broker": ["1"]}


def test_kafka_python_scram_credentials(broker, kp):
    assert kp.alter_user_scram_credentials([KpUpsertion("kp-user", KpScram.SCRAM_SHA_512, "kp-pw")]) == \
        {"kp-user": None}
    got = kp.describe_user_scram_credentials(["kp-user", "nobody"])
    assert got["kp-user"]["error"] is None
    assert [(int(c["mechanism"]), c["iterations"]) for c in got["kp-user"]["credential_infos"]] == [(2, 4096)]
    assert got["nobody"]["error"]
    res = kp.alter_user_scram_credentials([KpDeletion("nobody", KpScram.SCRAM_SHA_256)])
    assert res["nobody"]  # RESOURCE_NOT_FOUND's message
    assert broker.call(lambda: broker.state.security.credentials.users()).get("kp-user") == ["SCRAM-SHA-512"]
    assert kp.alter_user_scram_credentials([KpDeletion("kp-user", KpScram.SCRAM_SHA_512)]) == {"kp-user": None}
    assert "kp-user" not in kp.describe_user_scram_credentials()


# -- confluent-kafka ---------------------------------------------------------------------------
def test_confluent_elect_leaders(ck):
    got = ck.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0), TopicPartition("nope", 0)]).result(30)
    codes = {(tp.topic, tp.partition): err.code() for tp, err in got.items()}
    assert codes == {(TOPIC, 0): ElectionNotNeededError.code, ("nope", 0): UnknownTopicOrPartitionError.code}
    # All partitions: Kafka leaves out those that need no election
    assert ck.elect_leaders(ElectionType.UNCLEAN, None).result(30) == {}


def test_confluent_scram_credentials_and_login(broker, ck):
    mech = ScramMechanism.SCRAM_SHA_256
    done = ck.alter_user_scram_credentials([UserScramCredentialUpsertion("ck-user", ScramCredentialInfo(mech, 8192),
                                                                         b"ck-pw")])
    assert {u: f.result(30) for u, f in done.items()} == {"ck-user": None}
    desc = ck.describe_user_scram_credentials(["ck-user"])["ck-user"].result(30)
    assert [(i.mechanism, i.iterations) for i in desc.scram_credential_infos] == [(mech, 8192)]
    # Online: the next SASL login checks the new credential.
    conf = {"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "ck-user", "sasl.password": "ck-pw"}
    p = confluent_kafka.Producer(conf)
    p.produce(TOPIC, b"logged-in", partition=2)
    assert p.flush(30) == 0
    with pytest.raises(confluent_kafka.KafkaException) as err:
        ck.describe_user_scram_credentials(["ghost"])["ghost"].result(30)
    assert err.value.args[0].code() == ResourceNotFoundError.code
    bad = ck.alter_user_scram_credentials([UserScramCredentialDeletion("ghost", mech)])
    with pytest.raises(confluent_kafka.KafkaException) as err:
        bad["ghost"].result(30)
    assert err.value.args[0].code() == ResourceNotFoundError.code
    assert {u: f.result(30) for u, f in ck.alter_user_scram_credentials(
        [UserScramCredentialDeletion("ck-user", mech)]).items()} == {"ck-user": None}


# -- aiokafka ----------------------------------------------------------------------------------
def test_aiokafka_partition_reassignment_requests(broker):
    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            alter = AlterPartitionReassignmentsRequest(10000, [(TOPIC, [(0, [1], {}), (7, [1], {})], {})], {})
            resp = await admin._client.send(1, alter)
            listed = await admin._client.send(1, ListPartitionReassignmentsRequest(10000, [(TOPIC, [0], {})], {}))
            return resp, listed
        finally:
            await admin.close()

    resp, listed = asyncio.run(run())
    assert resp.error_code == 0
    assert [(p[0], p[1]) for t in resp.responses for p in t[1]] == [(0, 0), (7, UnknownTopicOrPartitionError.code)]
    assert listed.error_code == 0 and listed.topics == []


# -- kwire's own admin client ------------------------------------------------------------------
def test_kwire_admin_log_dirs_producers_scram_features(broker):
    from kwire.client.admin import Admin, ScramDeletion, ScramUpsertion
    from kwire.client.types import TopicPartition as KwTP
    from kwire.protocol.errors import ResourceNotFoundError as NotFound

    with Admin(bootstrap_servers=[broker.bootstrap]) as admin:
        [d] = admin.describe_log_dirs({TOPIC: [0, 1]})[1]
        assert d.path == os.path.abspath(broker.data_dir) and d.error == 0 and d.total_bytes >= d.usable_bytes > 0
        assert set(d.replicas) == {KwTP(TOPIC, 0), KwTP(TOPIC, 1)} and d.replicas[KwTP(TOPIC, 0)].size > 0
        got = admin.describe_producers([(TOPIC, 0)])
        [p] = got[KwTP(TOPIC, 0)]
        assert p.last_sequence == 9 and p.current_txn_start_offset == -1
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_producers([(TOPIC, 99)])
        admin.alter_user_scram_credentials([ScramUpsertion("kw-user", "kw-pw", "SCRAM-SHA-256", 4096)])
        assert [(c.mechanism, c.iterations) for c in admin.describe_user_scram_credentials(["kw-user"])["kw-user"]] \
            == [("SCRAM-SHA-256", 4096)]
        assert broker.call(lambda: broker.state.security.credentials.check_password("kw-user", "kw-pw"))
        admin.alter_user_scram_credentials([ScramDeletion("kw-user", "SCRAM-SHA-256")])
        with pytest.raises(NotFound):
            admin.describe_user_scram_credentials(["kw-user"])
        with pytest.raises(NotFound):
            admin.alter_user_scram_credentials([ScramDeletion("kw-user", "SCRAM-SHA-256")])
        features = admin.describe_features()
        assert features.finalized["metadata.version"] == 30 and features.supported["transaction.version"] == (0, 2)
