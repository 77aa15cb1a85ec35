"""kwire's client logging in to kwire's broker: SCRAM-SHA-512 over TLS for the producer, a consumer
group and the admin client; the other mechanisms and both SASL framings; and every way a login
can go wrong (wrong password, unknown user, untrusted or expired certificate, a certificate for
another host, plain TCP to a TLS port...) refused at once with an error that says what failed,
and nothing served.  Certificates come from the tests' own CA (``kwire.security.testing``).

librdkafka's mock cluster has no SASL (no SaslHandshake in its ApiVersions) nor TLS listeners:
against it, a SASL client is refused by name."""

from __future__ import annotations

import asyncio
import datetime
import os
from pathlib import Path

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.auth.credentials import CredentialStore
from kwire.client import Admin, Consumer, Producer, TopicPartition
from kwire.client.admin import AsyncAdmin
from kwire.client.cluster import Cluster
from kwire.client.config import AdminConfig
from kwire.client.connection import BrokerConnection
from kwire.client.errors import AuthenticationError, SecurityProtocolMismatchError, TlsError, is_retriable
from kwire.client.producer import AsyncProducer
from kwire.client.sasl import authenticate
from kwire.client.security import ConnectionSecurity, SaslLogin
from kwire.protocol import messages
from kwire.security import AuthenticationError as SecurityAuthenticationError
from kwire.security.testing import make_ca, make_cert

PASSWORD = "alice-Secret-1"
LISTENERS = ("SASL_SSL://127.0.0.1:0", "SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0")
# The broker answers failed logins late, later with each failure from the same host (up to 5 s by
# default): these tests fail many logins on purpose, so they keep that delay short.
QUICK_FAILURES = {"failed_authentication_delay_ms": 10, "failed_authentication_max_delay_ms": 40}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca, other_ca = make_ca(d), make_ca(os.path.join(d, "other"), cn="someone else's CA")
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "ca": ca,
        "broker": make_cert(ca, d, "broker"),
        "expired": make_cert(ca, d, "broker", not_before=now - datetime.timedelta(days=30),
                             not_after=now - datetime.timedelta(days=1)),
        "elsewhere": make_cert(ca, d, "elsewhere", sans=("kafka.elsewhere.example",)),
        "stranger": make_cert(other_ca, d, "broker"),  # right name, signed by a CA the client does not trust
        "client": make_cert(ca, d, "alice-client", client=True),
    }


def _data_dir(tmp_path_factory, name: str) -> Path:
    data = tmp_path_factory.mktemp(name) / "data"
    data.mkdir()
    CredentialStore(data).set_password("alice", PASSWORD)  # PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
    return data


@pytest.fixture(scope="module")
def broker(pki, tmp_path_factory):
    """One broker with a listener of each protocol, and the user alice."""
    with EmbeddedBroker(_data_dir(tmp_path_factory, "secure"), listeners=LISTENERS, default_partitions=2,
                        ssl_certificate_location=pki["broker"].cert, ssl_key_location=pki["broker"].key,
                        **QUICK_FAILURES) as b:
        yield b


def _tls_broker(pki, tmp_path_factory, cert: str, **settings):
    paths = pki[cert]
    return EmbeddedBroker(_data_dir(tmp_path_factory, cert), listeners=("SASL_SSL://127.0.0.1:0",),
                          ssl_certificate_location=paths.cert, ssl_key_location=paths.key, **QUICK_FAILURES,
                          **settings)


def at(broker, listener: str) -> str:
    return broker.broker.bootstrap_for(listener)


def scram_tls(pki, bootstrap: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": PASSWORD, "ssl.ca.location": pki["ca"].cert,
            "request.timeout.ms": 15000, **extra}


def refused(settings: dict, error=AuthenticationError) -> BaseException:
    """What an admin call with ``settings`` fails with (checked: not retriable, no password in it)."""
    with pytest.raises(error) as info, Admin(settings) as admin:
        admin.describe_cluster()
    assert not is_retriable(info.value)
    assert PASSWORD not in str(info.value) and "wrong-password" not in str(info.value)
    return info.value


def records_in(pki, broker, topic: str) -> int:
    with Admin(scram_tls(pki, at(broker, "SASL_SSL"))) as admin:
        if topic not in admin.list_topics():
            return 0
        ends = admin.list_offsets([TopicPartition(topic, p) for p in range(2)])
    return sum(o.offset for o in ends.values())


# -- logging in and working --------------------------------------------------------------------------------------
def test_producer_consumer_group_and_admin_with_scram_sha_512_over_tls(pki, broker):
    settings = scram_tls(pki, at(broker, "SASL_SSL"))
    topic, group = "secure-orders", "secure-group"
    with Admin(settings) as admin:
        admin.create_topics([topic])
        assert admin.describe_cluster().brokers[0].port == broker.broker.listeners["SASL_SSL"].port
    with Producer({**settings, "acks": "all"}) as producer:
        futures = [producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(50)]
        assert producer.flush(30) == 0
    assert all(f.result().offset >= 0 for f in futures)
    with Consumer({**settings, "group.id": group, "auto.offset.reset": "earliest",
                   "enable.auto.commit": False}) as consumer:
        consumer.subscribe([topic])
        got = []
        for _ in range(200):
            got += consumer.poll(0.2)
            if len(got) >= 50:
                break
        consumer.commit()
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(50))
    with Admin(settings) as admin:
        committed = admin.list_consumer_group_offsets(group)
        assert sum(o.offset for o in committed.values()) == 50
        assert group in [g.group_id for g in admin.list_groups()]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_every_mechanism_on_both_sasl_listeners(pki, broker, mechanism, listener):
    settings = {**scram_tls(pki, at(broker, listener)), "sasl.mechanism": mechanism, "security.protocol": listener}
    if listener == "SASL_PLAINTEXT":
        del settings["ssl.ca.location"]
    with Admin(settings) as admin:
        assert admin.describe_cluster().brokers[0].port == broker.broker.listeners[listener].port


def test_tls_without_sasl(pki, broker):
    with Admin({"bootstrap.servers": at(broker, "SSL"), "security.protocol": "SSL",
                "ssl.ca.location": pki["ca"].cert}) as admin:
        assert admin.describe_cluster().cluster_id


def test_javas_jaas_config_logs_in(pki, broker):
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{PASSWORD}";'
    settings = {**scram_tls(pki, at(broker, "SASL_SSL")), "sasl.username": None, "sasl.password": None,
                "sasl.jaas.config": jaas}
    with Admin(settings) as admin:
        assert admin.describe_cluster().cluster_id


async def _raw_login(bootstrap: str, login: SaslLogin) -> BrokerConnection:
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection.open(host, int(port))  # ApiVersions only; then v0's bare tokens
    try:
        await authenticate(conn, login, framed=False)
    except BaseException:
        conn.close()
        raise
    return conn


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_saslhandshake_v0_bare_tokens(broker, mechanism):
    async def main():
        conn = await _raw_login(at(broker, "SASL_PLAINTEXT"), SaslLogin(mechanism, "alice", PASSWORD))
        try:
            assert conn.authenticated_as == "alice"
            metadata = await conn.send(messages.MetadataRequest(topics=None))  # served once logged in
            assert [b.port for b in metadata.brokers] == [broker.broker.listeners["SASL_PLAINTEXT"].port]
        finally:
            conn.close()

    asyncio.run(main())


def test_saslhandshake_v0_wrong_password(broker):
    with pytest.raises(AuthenticationError, match="^authentication failed for user alice with SCRAM-SHA-512: the "
                                                  "broker closed the connection .*wrong username or password"):
        asyncio.run(_raw_login(at(broker, "SASL_PLAINTEXT"), SaslLogin("SCRAM-SHA-512", "alice", "wrong-password")))


# -- refused, at once, with the reason --------------------------------------------------------------------------
@pytest.mark.parametrize(("user", "password"), [("alice", "wrong-password"), ("mallory", PASSWORD)])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_wrong_password_or_unknown_user(pki, broker, user, password, mechanism):
    error = refused({**scram_tls(pki, at(broker, "SASL_SSL"), request_timeout_ms=60000), "sasl.username": user,
                     "sasl.password": password, "sasl.mechanism": mechanism})
    message = str(error)
    assert message.startswith(f"authentication failed for user {user} with {mechanism}: ")
    assert ("invalid credentials" in message or "Invalid username or password" in message)
    assert at(broker, "SASL_SSL") in message
    assert isinstance(error, SecurityAuthenticationError)  # kwire.security's, too


def test_a_failed_login_gets_nothing_served(pki, broker):
    topic = "never-written"
    with pytest.raises(AuthenticationError), \
            Producer({**scram_tls(pki, at(broker, "SASL_SSL")), "sasl.password": "wrong-password"}) as producer:
        producer.produce(topic, b"should not land")
        producer.flush(10)
    assert records_in(pki, broker, topic) == 0
    with pytest.raises(AuthenticationError), \
            Consumer({**scram_tls(pki, at(broker, "SASL_SSL")), "sasl.password": "wrong-password",
                      "group.id": "never-joined"}) as consumer:
        consumer.subscribe([topic])
        consumer.poll(10)
    with Admin(scram_tls(pki, at(broker, "SASL_SSL"))) as admin:
        assert "never-joined" not in [g.group_id for g in admin.list_groups()]


def test_a_consumer_without_group_raises_from_poll(pki, broker):
    with Admin(scram_tls(pki, at(broker, "SASL_SSL"))) as admin:
        admin.create_topics(["assigned-only"])
    with pytest.raises(AuthenticationError), \
            Consumer({**scram_tls(pki, at(broker, "SASL_SSL")), "sasl.password": "wrong-password"}) as consumer:
        consumer.assign([TopicPartition("assigned-only", 0)])
        consumer.seek(TopicPartition("assigned-only", 0), 0)  # no offset lookup: the fetch is what fails
        consumer.poll(30)


def test_a_password_changed_under_a_running_producer(pki, tmp_path_factory):
    """The next connection's login fails: the queued records fail with that, not a delivery timeout."""
    with _tls_broker(pki, tmp_path_factory, "broker") as rotating:
        async def main():
            settings = {**scram_tls(pki, rotating.bootstrap), "delivery.timeout.ms": 120000, "linger.ms": 0}
            async with AsyncProducer(settings) as producer:
                assert (await (await producer.send("rotating", b"before"))).offset == 0
                CredentialStore(rotating.data_dir).set_password("alice", "a-new-password")
                for node in list(producer._cluster._nodes.values()):
                    if node.conn is not None:
                        node.conn.close()  # as a broker restart would
                future = await producer.send("rotating", b"after")
                with pytest.raises(AuthenticationError, match="^authentication failed for user alice"):
                    await future

        asyncio.run(main())


def test_mechanism_the_broker_does_not_enable(pki, tmp_path_factory):
    with _tls_broker(pki, tmp_path_factory, "broker", sasl_enabled_mechanisms=("SCRAM-SHA-512",)) as only_scram:
        error = refused({**scram_tls(pki, only_scram.bootstrap), "sasl.mechanism": "PLAIN"})
    assert "the broker does not enable PLAIN (it enables SCRAM-SHA-512)" in str(error)


def test_untrusted_ca(pki, tmp_path_factory):
    with _tls_broker(pki, tmp_path_factory, "stranger") as stranger:
        error = refused(scram_tls(pki, stranger.bootstrap), TlsError)
        assert str(error).startswith(f"TLS handshake with {stranger.bootstrap} failed: the broker's certificate is "
                                     "not trusted: unable to get local issuer certificate (is ssl.ca.location")
        # The system's CAs (no ssl.ca.location) do not know the tests' CA either.
        refused({**scram_tls(pki, stranger.bootstrap), "ssl.ca.location": None}, TlsError)


def test_expired_certificate(pki, tmp_path_factory):
    with _tls_broker(pki, tmp_path_factory, "expired") as expired:
        error = refused(scram_tls(pki, expired.bootstrap), TlsError)
    assert f"TLS handshake with {expired.bootstrap} failed" in str(error) and "certificate has expired" in str(error)


def test_certificate_for_another_host(pki, tmp_path_factory):
    with _tls_broker(pki, tmp_path_factory, "elsewhere") as elsewhere:
        error = refused(scram_tls(pki, elsewhere.bootstrap), TlsError)
        assert "address mismatch, certificate is not valid for '127.0.0.1'" in str(error)
        assert "ssl.endpoint.identification.algorithm=none" in str(error)
        # Hostname verification off: the chain is still checked, and enough.
        with Admin({**scram_tls(pki, elsewhere.bootstrap), "ssl.endpoint.identification.algorithm": "none"}) as a:
            assert a.describe_cluster().cluster_id


def test_mutual_tls(pki, tmp_path_factory):
    with _tls_broker(pki, tmp_path_factory, "broker", ssl_client_auth="required",
                     ssl_ca_location=pki["ca"].cert) as mtls:
        client = pki["client"]
        with Admin({**scram_tls(pki, mtls.bootstrap), "ssl.certificate.location": client.cert,
                    "ssl.key.location": client.key}) as admin:
            assert admin.describe_cluster().cluster_id
        error = refused(scram_tls(pki, mtls.bootstrap), TlsError)  # no client certificate
        # asyncio's TLS server hangs up without sending its alert: the client can only guess.
        assert str(error).startswith(f"{mtls.bootstrap} closed the connection after the TLS handshake without "
                                     "answering: does it require a client certificate (ssl.certificate.location)")


def test_plain_tcp_to_a_tls_port(pki, broker):
    for listener in ("SSL", "SASL_SSL"):
        error = refused({"bootstrap.servers": at(broker, listener), "request.timeout.ms": 60000},
                        SecurityProtocolMismatchError)
        assert str(error).startswith(f"{at(broker, listener)} closed the connection without answering: is it a "
                                     "TLS listener? security.protocol is PLAINTEXT")


def test_tls_to_a_plaintext_port(pki, broker):
    error = refused({"bootstrap.servers": at(broker, "PLAINTEXT"), "security.protocol": "SSL",
                     "ssl.ca.location": pki["ca"].cert, "request.timeout.ms": 60000}, SecurityProtocolMismatchError)
    assert f"{at(broker, 'PLAINTEXT')} closed the connection during the TLS handshake" in str(error)


def test_sasl_to_a_listener_without_sasl(pki, broker):
    error = refused({**scram_tls(pki, at(broker, "SSL"))}, SecurityProtocolMismatchError)
    assert f"{at(broker, 'SSL')} refused SaslHandshake (ILLEGAL_SASL_STATE): it is not a SASL listener" in str(error)


def test_no_sasl_to_a_sasl_listener(broker):
    error = refused({"bootstrap.servers": at(broker, "SASL_PLAINTEXT"), "request.timeout.ms": 60000},
                    SecurityProtocolMismatchError)
    assert "closed the connection at the first request after ApiVersions: is it a SASL listener?" in str(error)


def test_librdkafkas_mock_cluster_has_no_sasl():
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    try:
        bootstrap = ",".join(f"{b.host}:{b.port}" for b in owner.list_topics(timeout=10).brokers.values())
        error = refused({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORD},
                        SecurityProtocolMismatchError)
        assert "does not speak SASL (no SaslHandshake in its ApiVersions)" in str(error)
    finally:
        owner.flush(1)


# -- a SASL session that ends (KIP-368) ---------------------------------------------------------------------------
def test_a_retired_connection_is_replaced_by_a_fresh_login(pki, broker):
    async def main():
        cluster = Cluster(AdminConfig.from_settings(scram_tls(pki, at(broker, "SASL_SSL"))))
        try:
            first = await cluster.any_connection()
            assert first.authenticated_as == "alice" and isinstance(cluster.security, ConnectionSecurity)
            first.retire()  # what the session lifetime's timer does
            await first.wait_closed()
            await cluster.refresh_metadata()
            second = await cluster.any_connection()
            assert second is not first and second.authenticated_as == "alice" and second.usable
        finally:
            await cluster.close()

    asyncio.run(main())


def test_async_admin_login_failure_is_the_same(pki, broker):
    async def main():
        async with AsyncAdmin({**scram_tls(pki, at(broker, "SASL_SSL")), "sasl.password": "wrong-password"}) as a:
            await a.describe_cluster()

    with pytest.raises(AuthenticationError, match="^authentication failed for user alice with SCRAM-SHA-512"):
        asyncio.run(main())
