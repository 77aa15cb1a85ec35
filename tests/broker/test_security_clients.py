"""Real Kafka clients log in to kwire's broker over TLS and SASL, and are refused when they should be.

confluent-kafka, kafka-python and kcat use SCRAM-SHA-512 over TLS (SASL_SSL) to produce and consume
with a group; PLAIN and SCRAM-SHA-256 run over SASL_PLAINTEXT; kafka-python in Kafka 0.11 mode uses
the v0 (raw token) framing. Wrong passwords, unknown users, a CA that did not sign the broker, an
expired broker certificate and plain TCP to a TLS port are refused with the client saying why, and
nothing is served (no topic gets created). Certificates come from the tests' own CA.
"""

from __future__ import annotations

import gc
import json
import logging
import ssl
import time

import confluent_kafka
import kafka
import pytest

from kwire.security import client_context
from tests.security.helpers import PASSWORD, RawConnection, make_pki, secure_broker

from . import clients as c

N = 50
LISTENERS = ("SASL_SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0", "SSL://127.0.0.1:0",
             "PLAINTEXT://127.0.0.1:0")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def broker(tmp_path, pki):
    with secure_broker(tmp_path / "data", pki, LISTENERS, default_partitions=2,
                       failed_authentication_delay_ms=50, failed_authentication_max_delay_ms=200) as b:
        b.add_user("alice", PASSWORD)
        yield b


def _confluent_conf(broker, pki, mechanism="SCRAM-SHA-512", listener="SASL_SSL", password=PASSWORD, user="alice"):
    conf = {"bootstrap.servers": broker.bootstrap_for(listener), "security.protocol": listener}
    if "SASL" in listener:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    if "SSL" in listener:
        conf["ssl.ca.location"] = pki.ca.cert
    return conf


def _kafka_python_conf(broker, pki, mechanism="SCRAM-SHA-512", listener="SASL_SSL", password=PASSWORD, **extra):
    conf = {"security_protocol": listener, **extra}
    if "SASL" in listener:
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": password})
    if "SSL" in listener:
        conf["ssl_cafile"] = pki.ca.cert
    return conf


def _kcat_args(broker, pki, listener="SASL_SSL", password=PASSWORD, ca=None) -> list[str]:
    return ["-b", broker.bootstrap_for(listener), "-X", f"security.protocol={listener}",
            "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", f"sasl.password={password}",
            "-X", f"ssl.ca.location={ca or pki.ca.cert}"]


# -- logins that work ------------------------------------------------------------------------------------
def test_confluent_kafka_scram_sha_512_over_tls(broker, pki):
    conf = _confluent_conf(broker, pki)
    sent = c.records("ck-tls", N)
    assert len(c.confluent_produce(conf["bootstrap.servers"], "ck-tls", sent, **conf)) == N
    consumer = c.confluent_consumer(conf["bootstrap.servers"], "g-ck-tls", ["ck-tls"], **conf)
    got = c.confluent_consume(consumer, N)
    consumer.commit(asynchronous=False)
    consumer.close()
    c.check_same(sent, got)


def test_kafka_python_scram_sha_512_over_tls(broker, pki):
    conf = _kafka_python_conf(broker, pki)
    sent = c.records("kp-tls", N)
    assert len(set(c.kafka_python_produce(broker.bootstrap_for("SASL_SSL"), "kp-tls", sent, **conf))) == N
    consumer = c.kafka_python_consumer(broker.bootstrap_for("SASL_SSL"), "g-kp-tls", ["kp-tls"], **conf)
    got = c.kafka_python_consume(consumer, N)
    consumer.commit()
    consumer.close()
    c.check_same(sent, got)


def test_kcat_scram_sha_512_over_tls(broker, pki):
    lines = b"".join(b"key-%d\tvalue-%d\n" % (i, i) for i in range(N))
    out = c.kcat(*_kcat_args(broker, pki), "-P", "-t", "kc-tls", "-K", "\t", input=lines)
    assert out.returncode == 0, out.stderr.decode()
    out = c.kcat(*_kcat_args(broker, pki), "-G", "g-kc-tls", "-e", "-J", "-X", "auto.offset.reset=earliest", "kc-tls")
    assert out.returncode == 0, out.stderr.decode()
    msgs = [json.loads(line) for line in out.stdout.decode().splitlines() if line.startswith("{")]
    assert sorted((m["key"], m["payload"]) for m in msgs) == sorted((f"key-{i}", f"value-{i}") for i in range(N))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_sasl_plaintext_with_confluent_and_kafka_python(broker, pki, mechanism):
    conf = _confluent_conf(broker, pki, mechanism, "SASL_PLAINTEXT")
    topic = f"plain-{mechanism.lower()}"
    sent = c.records(topic, N)
    c.confluent_produce(conf["bootstrap.servers"], topic, sent, **conf)
    kp = _kafka_python_conf(broker, pki, mechanism, "SASL_PLAINTEXT")
    consumer = c.kafka_python_consumer(broker.bootstrap_for("SASL_PLAINTEXT"), f"g-{topic}", [topic], **kp)
    got = c.kafka_python_consume(consumer, N)
    consumer.close()
    c.check_same(sent, got)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_v0_raw_token_framing(broker, pki, caplog, mechanism):
    # Told the broker is Kafka 0.11 (before SaslAuthenticate), kafka-python sends SaslHandshake v0 and then
    # bare tokens.
    caplog.set_level(logging.INFO, "kwire.broker.auth")
    kp = _kafka_python_conf(broker, pki, mechanism, "SASL_SSL", api_version=(0, 11))
    sent = c.records("v0", 10)
    c.kafka_python_produce(broker.bootstrap_for("SASL_SSL"), "v0", sent, **kp)
    consumer = c.kafka_python_consumer(broker.bootstrap_for("SASL_SSL"), "g-v0", ["v0"], **kp)
    got = c.kafka_python_consume(consumer, 10)
    consumer.close()
    c.check_same(sent, got)
    assert "User:alice logged in from 127.0.0.1" in caplog.text
    assert f"with {mechanism} (v0 raw tokens)" in caplog.text


def test_ssl_listener_and_mutual_tls(tmp_path, pki, caplog):
    caplog.set_level(logging.WARNING, "kwire.broker")
    with secure_broker(tmp_path / "data", pki, ["SSL://127.0.0.1:0"], ssl_ca_location=pki.ca.cert,
                       ssl_client_auth="required", authorizer=True, super_users=["User:CN=alice"]) as b:
        conf = {"bootstrap.servers": b.bootstrap, "security.protocol": "SSL", "ssl.ca.location": pki.ca.cert,
                "ssl.certificate.location": pki.client.cert, "ssl.key.location": pki.client.key}
        # authorizer on and no ACLs: only the super user User:CN=alice (the certificate's subject) gets in
        c.confluent_produce(b.bootstrap, "mtls", c.records("mtls", 5), **conf)
        assert b.state.topics.names() == ["mtls"]
        expected = "SSL connection closed by peer"  # no certificate, no entry
        errors = _confluent_errors({k: v for k, v in conf.items() if not k.startswith("ssl.certificate")
                                    and not k.startswith("ssl.key")}, expected)
        assert any(expected in e for e in errors), errors


# -- refusals ------------------------------------------------------------------------------------------------
class _Collect(logging.Handler):
    def __init__(self, into: list[str]):
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def _confluent_errors(conf: dict, expect: str, timeout: float = 15) -> list[str]:
    """What librdkafka reports while failing to get in (error callback and log lines), until it says
    ``expect`` (bounded in time)."""
    errors: list[str] = []
    log = logging.getLogger(f"test.librdkafka.{id(errors)}")
    log.addHandler(_Collect(errors))
    log.propagate = False
    log.setLevel(logging.DEBUG)  # librdkafka's FAIL lines are info
    p = confluent_kafka.Producer({**conf, "error_cb": lambda e: errors.append(str(e)), "logger": log,
                                  "reconnect.backoff.ms": 100, "socket.timeout.ms": 5000})
    p.produce("refused", b"x")
    deadline = time.monotonic() + timeout
    while not any(expect in e for e in errors) and time.monotonic() < deadline:
        p.poll(0.2)
    p.purge()
    p.flush(0)
    return errors


def _open_kafka_python_selectors() -> dict:
    """kafka-python's network loops (one per client) that are not closed, by id."""
    from kafka.net.selector import NetworkSelector

    return {id(o): o for o in gc.get_objects() if isinstance(o, NetworkSelector) and not o._closed}


@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
def test_wrong_credentials_are_refused_by_every_client(broker, pki, caplog, who):
    user, password = ("alice", "wrong") if who == "wrong-password" else ("mallory", PASSWORD)
    conf = _confluent_conf(broker, pki, user=user, password=password)
    expected = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    errors = _confluent_errors(conf, expected)
    assert any(expected in e for e in errors), errors
    out = c.kcat(*_kcat_args(broker, pki, password=password), "-X", f"sasl.username={user}", "-L", "-m", "3")
    assert out.returncode != 0 and b"Authentication failed" in out.stderr, out.stderr
    caplog.set_level(logging.ERROR, "kafka")
    before = _open_kafka_python_selectors()
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap_for("SASL_SSL"), bootstrap_timeout_ms=3000,
                               **{**_kafka_python_conf(broker, pki, password=password), "sasl_plain_username": user})
    # kafka-python starts its network thread before the login and leaves it running when the
    # constructor raises, with nothing to close it by: closed here, or it retries for the rest of
    # the test session.
    for key, selector in _open_kafka_python_selectors().items():
        if key not in before:
            selector.close()
    assert "SaslAuthenticationFailedError" in caplog.text and "Authentication failed" in caplog.text
    assert broker.state.topics.names() == []  # nothing served: no Metadata, so no auto-created topic


@pytest.mark.parametrize("case", ["wrong-ca", "expired-certificate", "plaintext-to-tls-port"])
def test_tls_refusals(tmp_path, pki, case):
    cert = pki.expired if case == "expired-certificate" else pki.server
    with secure_broker(tmp_path / "data", pki, ["SASL_SSL://127.0.0.1:0", "SSL://127.0.0.1:0"], cert=cert) as b:
        b.add_user("alice", PASSWORD)
        conf = _confluent_conf(b, pki)
        if case == "plaintext-to-tls-port":
            conf = {"bootstrap.servers": b.bootstrap_for("SSL"), "security.protocol": "PLAINTEXT"}
            expected = "connection closed by peer: receive 0 after POLLIN (after 0ms in state APIVERSION_QUERY)"
        else:
            if case == "wrong-ca":
                conf["ssl.ca.location"] = pki.other_ca.cert
            expected = "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed"
        errors = _confluent_errors(conf, expected)
        assert any(expected in e for e in errors), errors
        if case != "plaintext-to-tls-port":
            out = c.kcat(*_kcat_args(b, pki, ca=conf["ssl.ca.location"]), "-L", "-m", "3")
            assert out.returncode != 0 and b"certificate verify failed" in out.stderr, out.stderr
            # Python's ssl (kafka-python's, kwire's) names the reason
            reason = "unable to get local issuer certificate" if case == "wrong-ca" else "certificate has expired"
            with pytest.raises(ssl.SSLCertVerificationError, match=reason):
                RawConnection(b.bootstrap_for("SSL"), tls=client_context(ca_location=conf["ssl.ca.location"]))
        assert b.state.topics.names() == []
