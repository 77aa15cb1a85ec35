"""A failed TLS handshake is logged by the broker with the peer and OpenSSL's reason (asyncio
alone logs it only in debug mode), costs only that connection, and good TLS clients (kwire's
and librdkafka) are served before and after."""

from __future__ import annotations

import logging
import socket
import ssl
import time

import confluent_kafka.admin
import pytest

from kwire.protocol import messages
from kwire.security.tls import client_context
from tests.security.helpers import RawConnection, make_pki, secure_broker, tls_context

LOGGER = "kwire.broker.network"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _lines(caplog, deadline_s: float = 5.0, want: int = 1) -> list[str]:
    """The broker's handshake log lines, waiting (bounded) for ``want`` of them: the broker logs
    from its own thread, after the client already saw its side of the failure."""
    end = time.monotonic() + deadline_s
    while True:
        found = [r.getMessage() for r in caplog.records if r.name == LOGGER and "TLS handshake" in r.getMessage()]
        if len(found) >= want or time.monotonic() > end:
            return found
        time.sleep(0.02)


def _metadata_ok(broker, pki) -> bool:
    with RawConnection(broker.bootstrap_for("SSL"), tls=tls_context(pki)) as conn:
        return conn.call(messages.MetadataRequest(topics=None), 12).brokers[0].port > 0


def test_failed_handshakes_are_logged_and_the_listener_keeps_serving(tmp_path, pki, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with secure_broker(tmp_path / "data", pki, ["SSL://127.0.0.1:0"]) as b:
        host, port = b.bootstrap_for("SSL").rsplit(":", 1)
        assert _metadata_ok(b, pki)
        assert _lines(caplog, 0.2) == []  # a good handshake logs nothing

        # A client that trusts another CA refuses the broker's certificate: the broker hears the alert.
        with pytest.raises(ssl.SSLCertVerificationError):
            RawConnection(b.bootstrap_for("SSL"), tls=client_context(ca_location=pki.other_ca.cert))
        line = _lines(caplog)[-1]
        assert "TLS handshake with 127.0.0.1:" in line and "on listener SSL failed" in line
        assert "UNKNOWN_CA" in line.upper()

        # Plain Kafka bytes to the TLS port.
        caplog.clear()
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x03\x00\x00\x00\x01\x00\x04kcat")
            sock.settimeout(10)
            try:
                sock.recv(100)  # the broker closes (an alert first, maybe)
            except OSError:
                pass
        line = _lines(caplog)[-1]
        assert "failed" in line and ("WRONG_VERSION" in line.upper() or "RECORD" in line.upper()), line

        # A peer that connects and leaves without a word: a line, at INFO.
        caplog.clear()
        socket.create_connection((host, int(port)), timeout=10).close()
        line = _lines(caplog)[-1]
        assert "the connection ended" in line
        assert [r.levelno for r in caplog.records if "TLS handshake" in r.getMessage()] == [logging.INFO]

        # Still serving: kwire's raw client and librdkafka.
        assert _metadata_ok(b, pki)
        admin = confluent_kafka.admin.AdminClient({
            "bootstrap.servers": b.bootstrap_for("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": pki.ca.cert, "log_level": 0})
        assert admin.list_topics(timeout=10).brokers


def test_mutual_tls_without_a_client_certificate_is_logged(tmp_path, pki, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with secure_broker(tmp_path / "data", pki, ["SSL://127.0.0.1:0"], ssl_client_auth="required",
                       ssl_ca_location=pki.ca.cert) as b:
        with pytest.raises((ssl.SSLError, OSError)):
            with RawConnection(b.bootstrap_for("SSL"), tls=tls_context(pki)) as conn:
                # TLS 1.3: the client learns of the refusal at its first read.
                conn.call(messages.MetadataRequest(topics=None), 12)
        line = _lines(caplog)[-1]
        assert "on listener SSL failed" in line and "CERTIFICATE" in line.upper(), line
        with RawConnection(b.bootstrap_for("SSL"), tls=tls_context(pki, certificate_location=pki.client.cert,
                                                                     key_location=pki.client.key)) as conn:
            assert conn.call(messages.MetadataRequest(topics=None), 12).brokers
